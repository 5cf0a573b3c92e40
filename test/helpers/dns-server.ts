/**
 * A small authoritative DNS server over UDP (RFC 1035) on 127.0.0.1, port 0, for domain-validation
 * tests. It answers TXT questions from an in-memory map, NXDOMAIN for names it does not know, NODATA
 * (NOERROR, no answers) for other types of a known name, and SERVFAIL or silence for names it is told
 * to fail. The question is echoed byte for byte (resolvers compare it with what they sent, some with
 * randomized letter case), and answer owner names are a compression pointer to that question.
 */
import { createSocket, type RemoteInfo } from 'node:dgram'

export interface DnsServer {
  readonly address: string
  readonly port: number
  /** `address:port`, the form SERVICE_DNS_SERVERS takes. */
  readonly server: string
  /** Publishes TXT records at `name` (one per value); `[]` makes the name exist without TXT records. */
  setTxt(name: string, values: readonly string[]): void
  /** Answers SERVFAIL for every question about `name`. */
  setServfail(name: string): void
  /** Never answers questions about `name`, so that resolvers time out. */
  setSilent(name: string): void
  /** Forgets `name`: it becomes NXDOMAIN again. */
  remove(name: string): void
  /** How many questions about `name` arrived (any type), to prove that a lookup happened or did not. */
  queryCount(name: string): number
}

interface Tap {
  teardown(fn: () => unknown): void
}

type Entry = { kind: 'txt'; values: readonly string[] } | { kind: 'servfail' } | { kind: 'silent' }

const TYPE_TXT = 16
const TYPE_OPT = 41
const TYPE_ANY = 255
const CLASS_IN = 1
const RCODE = { noError: 0, formErr: 1, servFail: 2, nxDomain: 3, notImp: 4, refused: 5 } as const
/** RFC 1035 §4.2.1: without EDNS a UDP answer holds at most 512 bytes. */
const CLASSIC_UDP_LIMIT = 512
/** The payload size this server advertises in its own OPT record (the DNS flag day 2020 value). */
const SERVER_UDP_SIZE = 1232
const ANSWER_TTL = 60

interface Question {
  id: number
  opcode: number
  recursionDesired: boolean
  name: string
  type: number
  klass: number
  /** The raw question section, echoed unchanged. */
  raw: Buffer
  /** The requester's EDNS UDP payload size, or null without an OPT record. */
  ednsSize: number | null
}

type Parsed = { ok: true; question: Question } | { ok: false; id: number; opcode: number; recursionDesired: boolean; rcode: number } | null

function normalize(name: string): string {
  return name.toLowerCase().replace(/\.$/, '')
}

/** Reads an uncompressed name (queries never need pointers); null when malformed. */
function readName(message: Buffer, start: number): { name: string; end: number } | null {
  const labels: string[] = []
  let offset = start
  let length = 0
  for (;;) {
    if (offset >= message.length) return null
    const size = message[offset] as number
    if (size === 0) return { name: labels.join('.'), end: offset + 1 }
    if (size > 63) return null
    length += size + 1
    if (length > 255 || offset + 1 + size > message.length) return null
    labels.push(message.toString('latin1', offset + 1, offset + 1 + size))
    offset += 1 + size
  }
}

function parseQuery(message: Buffer): Parsed {
  if (message.length < 12) return null
  const id = message.readUInt16BE(0)
  const flags = message.readUInt16BE(2)
  if ((flags & 0x8000) !== 0) return null // a response, not a question: never answer it
  const opcode = (flags >> 11) & 0x0f
  const recursionDesired = (flags & 0x0100) !== 0
  const fail = (rcode: number): Parsed => ({ ok: false, id, opcode, recursionDesired, rcode })
  if (opcode !== 0) return fail(RCODE.notImp)
  if (message.readUInt16BE(4) !== 1) return fail(RCODE.formErr)
  const name = readName(message, 12)
  if (name === null || name.end + 4 > message.length) return fail(RCODE.formErr)
  const type = message.readUInt16BE(name.end)
  const klass = message.readUInt16BE(name.end + 2)
  const questionEnd = name.end + 4
  let ednsSize: number | null = null
  // A query carries no answer or authority records; an OPT record (RFC 6891) may sit in the
  // additional section, and its CLASS field is the requester's UDP payload size.
  const additional = message.readUInt16BE(10)
  if (message.readUInt16BE(6) === 0 && message.readUInt16BE(8) === 0 && additional > 0) {
    let offset = questionEnd
    for (let i = 0; i < additional; i++) {
      const owner = readName(message, offset)
      if (owner === null || owner.end + 10 > message.length) return fail(RCODE.formErr)
      const rrType = message.readUInt16BE(owner.end)
      const rrClass = message.readUInt16BE(owner.end + 2)
      const rdLength = message.readUInt16BE(owner.end + 8)
      if (rrType === TYPE_OPT) ednsSize = Math.max(CLASSIC_UDP_LIMIT, rrClass)
      offset = owner.end + 10 + rdLength
    }
  }
  return {
    ok: true,
    question: {
      id, opcode, recursionDesired, name: normalize(name.name), type, klass,
      raw: message.subarray(12, questionEnd), ednsSize,
    },
  }
}

/** RFC 1035 §3.3.14: TXT RDATA is one or more <character-string>s of at most 255 bytes each. */
export function txtRdata(value: string): Buffer {
  const bytes = Buffer.from(value, 'utf8')
  const parts: Buffer[] = []
  for (let offset = 0; offset < bytes.length || parts.length === 0; offset += 255) {
    const chunk = bytes.subarray(offset, offset + 255)
    parts.push(Buffer.from([chunk.length]), chunk)
  }
  return Buffer.concat(parts)
}

function header(id: number, opcode: number, recursionDesired: boolean, truncated: boolean, rcode: number, counts: [number, number, number, number]): Buffer {
  const out = Buffer.alloc(12)
  out.writeUInt16BE(id, 0)
  // QR (response) and AA (authoritative); RD copied from the question; RA clear: no recursion here.
  let flags = 0x8000 | (opcode << 11) | 0x0400 | rcode
  if (recursionDesired) flags |= 0x0100
  if (truncated) flags |= 0x0200
  out.writeUInt16BE(flags, 2)
  counts.forEach((count, i) => out.writeUInt16BE(count, 4 + 2 * i))
  return out
}

function answerRecord(value: string): Buffer {
  const rdata = txtRdata(value)
  const fixed = Buffer.alloc(12)
  fixed.writeUInt16BE(0xc00c, 0) // pointer to the question name at offset 12
  fixed.writeUInt16BE(TYPE_TXT, 2)
  fixed.writeUInt16BE(CLASS_IN, 4)
  fixed.writeUInt32BE(ANSWER_TTL, 6)
  fixed.writeUInt16BE(rdata.length, 10)
  return Buffer.concat([fixed, rdata])
}

function optRecord(): Buffer {
  const out = Buffer.alloc(11)
  // root owner name (0), TYPE OPT, CLASS = our payload size, TTL 0 (no extended rcode, version 0), no options
  out.writeUInt16BE(TYPE_OPT, 1)
  out.writeUInt16BE(SERVER_UDP_SIZE, 3)
  return out
}

function respond(question: Question, entry: Entry | undefined): Buffer | null {
  const { id, opcode, recursionDesired, raw, ednsSize } = question
  const opt = ednsSize === null ? [] : [optRecord()]
  const build = (rcode: number, answers: Buffer[], truncated = false): Buffer =>
    Buffer.concat([header(id, opcode, recursionDesired, truncated, rcode, [1, answers.length, 0, opt.length]), raw, ...answers, ...opt])
  if (entry?.kind === 'silent') return null
  if (entry?.kind === 'servfail') return build(RCODE.servFail, [])
  if (question.klass !== CLASS_IN) return build(RCODE.refused, [])
  if (entry === undefined) return build(RCODE.nxDomain, [])
  const answers = question.type === TYPE_TXT || question.type === TYPE_ANY ? entry.values.map(answerRecord) : []
  const full = build(RCODE.noError, answers)
  const limit = ednsSize === null ? CLASSIC_UDP_LIMIT : Math.min(ednsSize, SERVER_UDP_SIZE)
  // Too big for UDP: set TC with no answers (RFC 2181 §9); this server offers no TCP, so keep test data small.
  return full.length <= limit ? full : build(RCODE.noError, [], true)
}

/** Starts the server on 127.0.0.1 (port 0) and closes it in teardown. */
export async function startDnsServer(t: Tap): Promise<DnsServer> {
  const socket = createSocket('udp4')
  const zone = new Map<string, Entry>()
  const counts = new Map<string, number>()

  socket.on('message', (message: Buffer, peer: RemoteInfo) => {
    const parsed = parseQuery(message)
    if (parsed === null) return
    let answer: Buffer | null
    if (parsed.ok) {
      const { question } = parsed
      counts.set(question.name, (counts.get(question.name) ?? 0) + 1)
      answer = respond(question, zone.get(question.name))
    } else {
      answer = header(parsed.id, parsed.opcode, parsed.recursionDesired, false, parsed.rcode, [0, 0, 0, 0])
    }
    if (answer !== null) socket.send(answer, peer.port, peer.address)
  })

  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject)
    socket.bind(0, '127.0.0.1', () => {
      socket.off('error', reject)
      resolve()
    })
  })
  // A send failure (the resolver went away) must not crash the test process.
  socket.on('error', () => {})
  t.teardown(() => new Promise<void>((resolve) => socket.close(() => resolve())))

  const { address, port } = socket.address()
  return {
    address,
    port,
    server: `${address}:${port}`,
    setTxt: (name, values) => void zone.set(normalize(name), { kind: 'txt', values: [...values] }),
    setServfail: (name) => void zone.set(normalize(name), { kind: 'servfail' }),
    setSilent: (name) => void zone.set(normalize(name), { kind: 'silent' }),
    remove: (name) => void zone.delete(normalize(name)),
    queryCount: (name) => counts.get(normalize(name)) ?? 0,
  }
}
