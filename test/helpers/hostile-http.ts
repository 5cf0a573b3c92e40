/**
 * Low-level HTTP for hostile-input tests: requests whose path, headers and body are sent exactly as
 * written (fetch would normalise `..`, `%2e%2e` and header case, and refuses some values), and raw
 * sockets for stalled or aborted bodies and for header forms node:http will not produce.
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http'
import { connect, type Socket } from 'node:net'

export interface RawReply {
  status: number
  text: string
  body: any
  headers: IncomingHttpHeaders
}

function parse(text: string): unknown {
  try {
    return text === '' ? undefined : JSON.parse(text)
  } catch {
    return text
  }
}

/**
 * One request with the path sent verbatim. `headers` may be an array of [name, value] pairs to send
 * a header twice or in unusual case. No connection reuse, so one test's socket cannot affect another.
 */
export function rawRequest(
  base: string, method: string, path: string,
  options: { headers?: Record<string, string> | [string, string][]; body?: string | Buffer; timeoutMs?: number } = {},
): Promise<RawReply> {
  const url = new URL(base)
  const pairs: [string, string][] = Array.isArray(options.headers) ? options.headers : Object.entries(options.headers ?? {})
  const flat: string[] = []
  // node:http adds no Host of its own when the headers are given as a list
  if (!pairs.some(([n]) => n.toLowerCase() === 'host')) flat.push('host', url.host)
  for (const [name, value] of pairs) flat.push(name, value)
  // an explicit length, also 0: without one node:http would send a bodiless POST or PUT chunked
  if (!pairs.some(([n]) => ['content-length', 'transfer-encoding'].includes(n.toLowerCase())) && (options.body !== undefined || !['GET', 'HEAD', 'DELETE', 'OPTIONS'].includes(method))) {
    flat.push('content-length', String(options.body === undefined ? 0 : Buffer.byteLength(options.body)))
  }
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: url.hostname, port: url.port, method, path, agent: false, headers: flat, setHost: false,
    }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        resolve({ status: res.statusCode ?? 0, text, body: parse(text), headers: res.headers })
      })
      res.on('error', reject)
    })
    req.setTimeout(options.timeoutMs ?? 20_000, () => req.destroy(new Error(`${method} ${path.slice(0, 80)}: no answer in time`)))
    req.on('error', reject)
    if (options.body !== undefined) req.write(options.body)
    req.end()
  })
}

export interface RawExchange {
  readonly socket: Socket
  /** The status of the first response line, or null when the server closed without answering. */
  readonly status: Promise<number | null>
  /** Everything received so far. */
  received(): string
}

/** Opens a socket and writes `head` (and `bodyPart`) verbatim; the caller decides whether to stall, end or destroy. */
export async function rawExchange(base: string, head: string, bodyPart: string | Buffer = ''): Promise<RawExchange> {
  const url = new URL(base)
  const socket = connect(Number(url.port), url.hostname)
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve())
    socket.once('error', reject)
  })
  let data = ''
  socket.on('data', (c: Buffer) => { data += c.toString('latin1') })
  socket.on('error', () => {})
  const status = new Promise<number | null>((resolve) => {
    const check = (): void => {
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(data)
      if (match !== null) resolve(Number(match[1]))
    }
    socket.on('data', check)
    socket.on('close', () => {
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(data)
      resolve(match === null ? null : Number(match[1]))
    })
  })
  socket.write(head)
  if (bodyPart.length > 0) socket.write(bodyPart)
  return { socket, status, received: () => data }
}

/** Polls `check` until it is true or the deadline passes; returns the last value. */
export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs: number, intervalMs = 50): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await check()) return true
    if (Date.now() > deadline) return false
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}

/** A GET with a bearer token whose body is parsed as JSON when it is JSON; null when no answer came in time. */
export async function bearerGet(url: string, token: string, timeoutMs: number): Promise<{ status: number; headers: Headers; body: any } | null> {
  try {
    const res = await fetch(url, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(timeoutMs) })
    const text = await res.text()
    let body: unknown = text
    try {
      body = JSON.parse(text)
    } catch {
      // kept as text
    }
    return { status: res.status, headers: res.headers, body }
  } catch {
    return null
  }
}
