/**
 * Transaction ids (protocol.md §9): a client-sent `X-Service-Txn` is kept when it is a sane token,
 * otherwise a UUIDv7 (RFC 9562 §5.7) is made. Node 20 has no `randomUUIDv7`, hence this small writer;
 * random bytes are drawn in batches because `randomFillSync` per request is the slow part.
 */
import { randomFillSync } from 'node:crypto'

const POOL_IDS = 512
const pool = Buffer.alloc(10 * POOL_IDS)
let offset = pool.length
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'))

/** A new UUIDv7: 48-bit Unix ms timestamp, version 7, variant 10, 74 random bits. */
export function uuidv7(nowMs: number = Date.now()): string {
  if (offset >= pool.length) {
    randomFillSync(pool)
    offset = 0
  }
  const r = offset
  offset += 10
  const ts = nowMs.toString(16).padStart(12, '0').slice(-12)
  const b6 = 0x70 | (pool[r]! & 0x0f)
  const b8 = 0x80 | (pool[r + 2]! & 0x3f)
  return (
    `${ts.slice(0, 8)}-${ts.slice(8, 12)}-` +
    `${HEX[b6]}${HEX[pool[r + 1]!]}-${HEX[b8]}${HEX[pool[r + 3]!]}-` +
    `${HEX[pool[r + 4]!]}${HEX[pool[r + 5]!]}${HEX[pool[r + 6]!]}${HEX[pool[r + 7]!]}${HEX[pool[r + 8]!]}${HEX[pool[r + 9]!]}`
  )
}

// Printable ASCII without spaces, quotes or separators that could break logs or header parsing.
const TXN = /^[A-Za-z0-9._:-]{1,128}$/

/** The client's transaction id when acceptable, else a fresh UUIDv7. */
export function transactionId(header: string | undefined, nowMs: number): string {
  return header !== undefined && TXN.test(header) ? header : uuidv7(nowMs)
}
