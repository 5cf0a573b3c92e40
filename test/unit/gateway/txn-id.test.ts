/**
 * Transaction ids (docs/wire-contract.md §9): uuidv7's layout (RFC 9562 §5.7) and transactionId's choice between
 * the client's X-Service-Txn and a fresh id.
 */
import fc from 'fast-check'
import t from 'tap'
import { uuidv7 } from '../../../src/core/uuid.js'
import { transactionId } from '../../../src/gateway/txn-id.js'

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
const tsOf = (id: string): number => parseInt(id.slice(0, 8) + id.slice(9, 13), 16)

t.test('uuidv7 layout and timestamp', async (t) => {
  const now = 1_800_000_000_123
  const id = uuidv7(now)
  t.match(id, UUID_V7)
  t.equal(tsOf(id), now, 'the first 48 bits are the ms timestamp')
  t.equal(uuidv7(0).slice(0, 13), '00000000-0000', 'zero-padded')
  const before = Date.now()
  const current = uuidv7()
  t.ok(tsOf(current) >= before && tsOf(current) <= Date.now(), 'defaults to Date.now()')
})

t.test('uuidv7 stays unique across pool refills', async (t) => {
  // The random pool holds 512 ids; 3000 ids cross several refills.
  const seen = new Set<string>()
  for (let i = 0; i < 3000; i++) seen.add(uuidv7(1_800_000_000_000))
  t.equal(seen.size, 3000)
  for (const id of seen) if (!UUID_V7.test(id)) t.fail(`bad id ${id}`)
  // The random part is not constant: version/variant nibbles aside, several values of each random byte.
  const thirdGroup = new Set([...seen].map((id) => id.slice(15, 18)))
  t.ok(thirdGroup.size > 100, 'random bits vary')
})

t.test('property: format, timestamp prefix, and ordering follows time', async (t) => {
  const ts = fc.integer({ min: 0, max: 2 ** 48 - 1 })
  fc.assert(fc.property(ts, ts, (a, b) => {
    const ia = uuidv7(a)
    const ib = uuidv7(b)
    if (!UUID_V7.test(ia) || !UUID_V7.test(ib) || tsOf(ia) !== a || tsOf(ib) !== b) return false
    // Lexical order of the ids agrees with time order whenever the times differ.
    if (a < b) return ia < ib
    if (a > b) return ia > ib
    return ia.slice(0, 13) === ib.slice(0, 13)
  }), { numRuns: 1000 })
  t.pass()
})

t.test('transactionId keeps a sane client id, otherwise makes a UUIDv7', async (t) => {
  const now = 1_800_000_000_000
  for (const kept of ['abc', 'txn-1', 'A.b_c:d-9', '0193e3c1-aaaa-7bbb-8ccc-dddddddddddd', 'x'.repeat(128)]) {
    t.equal(transactionId(kept, now), kept, `kept: ${kept.slice(0, 20)}`)
  }
  for (const replaced of [undefined, '', 'x'.repeat(129), 'has space', 'quote"', 'semi;colon', 'comma,', 'tab\t', 'new\nline', 'ünï', 'a/b', '<script>']) {
    const id = transactionId(replaced, now)
    t.match(id, UUID_V7, `replaced: ${JSON.stringify(replaced)?.slice(0, 20)}`)
    t.equal(tsOf(id), now)
  }
})
