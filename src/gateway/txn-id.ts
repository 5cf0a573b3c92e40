import { uuidv7 } from '../core/uuid.js'

// Printable ASCII without spaces, quotes or separators that could break logs or header parsing.
const TXN = /^[A-Za-z0-9._:-]{1,128}$/

/** The client's `X-Service-Txn` when acceptable (docs/wire-contract.md §9), else a fresh UUIDv7. */
export function transactionId(header: string | undefined, nowMs: number): string {
  return header !== undefined && TXN.test(header) ? header : uuidv7(nowMs)
}
