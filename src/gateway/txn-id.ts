/**
 * Transaction ids (docs/wire-contract.md §9): a client-sent `X-Service-Txn` is kept when it is a sane token,
 * otherwise a UUIDv7 is made.
 */
import { uuidv7 } from '../core/uuid.js'

// Printable ASCII without spaces, quotes or separators that could break logs or header parsing.
const TXN = /^[A-Za-z0-9._:-]{1,128}$/

/** The client's transaction id when acceptable, else a fresh UUIDv7. */
export function transactionId(header: string | undefined, nowMs: number): string {
  return header !== undefined && TXN.test(header) ? header : uuidv7(nowMs)
}
