// A UUID is recognised in either case (RFC 9562 §4) and lower-cased before it is stored, compared or
// written into a DID, so it has one spelling inside the service.
import { randomFillSync } from 'node:crypto'

export const UUID_PATTERN = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'
const UUID = new RegExp(UUID_PATTERN)

export function isUuid(value: string): boolean {
  return UUID.test(value)
}

// UUIDv7 (RFC 9562 §5.7), one per gateway request: the random parts of POOL_IDS ids are drawn and formatted
// at once (docs/performance.md, "Hot-path choices").
const POOL_IDS = 512
/** Characters of an id after the timestamp: `7xxx-Vxxx-xxxxxxxxxxxx`. */
const TAIL_LENGTH = 22
const random = Buffer.alloc(10 * POOL_IDS)
const text = Buffer.alloc(TAIL_LENGTH * POOL_IDS)
let tails = ''
let next = POOL_IDS
const HEX = Buffer.from('0123456789abcdef', 'latin1')

let prefixMs = -1
let prefix = ''

function refill(): void {
  randomFillSync(random)
  let out = 0
  for (let id = 0; id < POOL_IDS; id++) {
    const r = id * 10
    // 12 random bits after the version nibble 7, then the variant (10) and 14 random bits, then 48 bits.
    text[out++] = 0x37
    text[out++] = HEX[random[r]! & 0x0f]!
    text[out++] = HEX[random[r + 1]! >> 4]!
    text[out++] = HEX[random[r + 1]! & 0x0f]!
    text[out++] = 0x2d
    text[out++] = HEX[0x8 | ((random[r + 2]! >> 4) & 0x3)]!
    text[out++] = HEX[random[r + 2]! & 0x0f]!
    text[out++] = HEX[random[r + 3]! >> 4]!
    text[out++] = HEX[random[r + 3]! & 0x0f]!
    text[out++] = 0x2d
    for (let i = 4; i < 10; i++) {
      text[out++] = HEX[random[r + i]! >> 4]!
      text[out++] = HEX[random[r + i]! & 0x0f]!
    }
  }
  tails = text.toString('latin1')
  next = 0
}

/** The timestamp part is formatted once per millisecond. */
export function uuidv7(nowMs: number = Date.now()): string {
  if (next === POOL_IDS) refill()
  if (nowMs !== prefixMs) {
    prefixMs = nowMs
    const ts = nowMs.toString(16).padStart(12, '0').slice(-12)
    prefix = ts.slice(0, 8) + '-' + ts.slice(8, 12) + '-'
  }
  const from = TAIL_LENGTH * next++
  return prefix + tails.slice(from, from + TAIL_LENGTH)
}
