/**
 * A programmable policy decision point on 127.0.0.1 (port 0) for gateway tests: it records every request
 * and answers as told, in the service shape (docs/api.md §2.12) on any path, or in OPA's data API shape
 * (`{"result": {...}, "decision_id": ...}`) on `/v1/data/service/policy` (docs/wire-contract.md §8, §13). Besides
 * decisions it can answer raw statuses and bodies, answer late, never answer, or reset the connection.
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

/** One request as the PDP saw it. */
export interface PdpServerRequest {
  /** Path and query as sent. */
  path: string
  method: string
  headers: Record<string, string | string[] | undefined>
  /** The parsed JSON body, or the raw text when it is not JSON. */
  body: any
  /** Client port of the connection, to tell reused keep-alive sockets from new ones. */
  remotePort: number
}

export interface PdpServer {
  /** The service-protocol endpoint, e.g. `http://127.0.0.1:PORT/decide`. */
  readonly url: string
  /** `http://127.0.0.1:PORT`, the base URL for the OPA protocol. */
  readonly baseUrl: string
  /** Every request received, in arrival order (requests that were never answered included). */
  readonly requests: PdpServerRequest[]
  /** Sets how the next requests are answered (until changed). The initial behaviour is `{decision: 'ALLOW'}`. */
  respond(behaviour: PdpBehaviour): void
  /** Stops the server and destroys every open socket, hanging ones included; idempotent. */
  close(): Promise<void>
}

export type PdpBehaviour =
  /**
   * A decision. `decision_id` defaults to a fresh UUID per request; `null` leaves it out (for OPA: the
   * data API without decision logging). Other members are sent only when given.
   */
  | { decision: 'ALLOW' | 'DENY'; decision_id?: string | null; obligations?: unknown[]; ttl?: number; reason?: string; required_trust_level?: unknown }
  /** A raw answer, sent as is on either path; `content-type` defaults to `application/json`. */
  | { status: number; body?: string; headers?: Record<string, string> }
  /** Answers with `then` after `delayMs`. */
  | { delayMs: number; then: PdpBehaviour }
  /** Never answers (the socket stays open until the client gives up or the server closes). */
  | { hang: true }
  /** Destroys the connection without answering. */
  | { reset: true }
  /**
   * Decides per request. `body` is the PDP request: for OPA the `input` member, so one function serves
   * both protocols (the raw body is in `requests`).
   */
  | { fn: (body: any) => PdpBehaviour }

interface Teardown {
  teardown(fn: () => unknown): void
}

const OPA_PATH = '/v1/data/service/policy'

export async function startPdpServer(t: Teardown): Promise<PdpServer> {
  let behaviour: PdpBehaviour = { decision: 'ALLOW' }
  const requests: PdpServerRequest[] = []
  const sockets = new Set<Socket>()
  const timers = new Set<NodeJS.Timeout>()
  let closing: Promise<void> | null = null

  const answer = (current: PdpBehaviour, opa: boolean, input: unknown, req: IncomingMessage, res: ServerResponse): void => {
    if (res.destroyed || res.writableEnded) return
    if ('fn' in current) return answer(current.fn(input), opa, input, req, res)
    if ('hang' in current) return
    if ('reset' in current) {
      req.socket.destroy()
      return
    }
    if ('delayMs' in current) {
      const timer = setTimeout(() => {
        timers.delete(timer)
        answer(current.then, opa, input, req, res)
      }, current.delayMs)
      timers.add(timer)
      return
    }
    if ('status' in current) {
      res.writeHead(current.status, { 'content-type': 'application/json', ...current.headers })
      res.end(current.body ?? '')
      return
    }
    const decisionId = current.decision_id === undefined ? randomUUID() : current.decision_id
    const result: Record<string, unknown> = { decision: current.decision }
    if (current.reason !== undefined) result.reason = current.reason
    if (current.obligations !== undefined) result.obligations = current.obligations
    if (current.ttl !== undefined) result.ttl = current.ttl
    if (current.required_trust_level !== undefined) result.required_trust_level = current.required_trust_level
    let document: Record<string, unknown>
    if (opa) {
      document = { result }
      if (decisionId !== null) document.decision_id = decisionId
    } else {
      document = decisionId === null ? result : { ...result, decision_id: decisionId }
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(document))
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      let body: any = text
      try {
        body = JSON.parse(text)
      } catch {
        // kept as text: a test may send something that is not JSON
      }
      const path = req.url ?? ''
      requests.push({ path, method: req.method ?? '', headers: req.headers, body, remotePort: req.socket.remotePort ?? 0 })
      const opa = path.split('?')[0]!.endsWith(OPA_PATH)
      answer(behaviour, opa, opa && body !== null && typeof body === 'object' ? body.input : body, req, res)
    })
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const baseUrl = `http://127.0.0.1:${port}`

  const close = (): Promise<void> => {
    closing ??= new Promise<void>((resolve) => {
      for (const timer of timers) clearTimeout(timer)
      timers.clear()
      server.close(() => resolve())
      for (const socket of sockets) socket.destroy()
    })
    return closing
  }
  t.teardown(close)

  return {
    url: `${baseUrl}/decide`,
    baseUrl,
    requests,
    respond(next: PdpBehaviour): void {
      behaviour = next
    },
    close,
  }
}
