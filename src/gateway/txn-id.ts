/**
 * Transaction ids (docs/wire-contract.md §9): a client-sent `X-Service-Txn` is kept when it is a sane token,
 * otherwise a UUIDv7 (RFC 9562 §5.7) is made. Node 20 has no `randomUUIDv7`, hence this small writer.
 *
 * Made for the gateway's request path: the random part of 512 ids is drawn and formatted at once into
 * one string (`randomFillSync` per id, and a string of a dozen pieces per id, were most of the cost), so
 * an id is the per-millisecond timestamp prefix joined to a slice of that string.
 */
import { randomFillSync } from 'node:crypto'

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

/** Formats the random part of the next POOL_IDS ids (version and variant bits set) into `tails`. */
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

/**
 * A new UUIDv7: 48-bit Unix ms timestamp, version 7, variant 10, 74 random bits. The timestamp part is
 * formatted once per millisecond (a busy gateway makes many ids per ms).
 */
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

// Printable ASCII without spaces, quotes or separators that could break logs or header parsing.
const TXN = /^[A-Za-z0-9._:-]{1,128}$/

/** The client's transaction id when acceptable, else a fresh UUIDv7. */
export function transactionId(header: string | undefined, nowMs: number): string {
  return header !== undefined && TXN.test(header) ? header : uuidv7(nowMs)
}
