/**
 * OPA's REST data API on 127.0.0.1 (port 0), answered by the real OPA engine of opa.ts, as `opa run
 * --server` answers it: `POST /v1/data/<package path>` with `{"input": …}` gives `{"result": {…}}`, the
 * package's rules that are defined for that input (functions are not documents, so they stay out); a
 * path that names no loaded package gives `{}`, OPA's answer for an undefined document. Decision logging
 * is off, so no `decision_id` is sent.
 *
 * One OPA holds one data document. This server keeps one per workspace and picks it by
 * `input.environment.workspace`, standing in for one OPA per workspace, so that a suite can publish many
 * bundles to one server. Requests that arrive together are evaluated in one engine call: compiling the
 * modules costs far more than evaluating them. The engine is the process's one (startOpa), stopped in teardown.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { isRecord } from '../../src/core/json-objects.js'
import { startOpa, type RegoEvaluation, type RegoModule } from './opa.js'

export interface OpaServer {
  /** The base URL, `http://127.0.0.1:PORT` (the HTTP PDP's endpoint in its OPA mode). */
  readonly url: string
  /** Makes `data` the data document OPA evaluates the workspace's requests against (`{}` until then). */
  load(workspace: string, data: Readonly<Record<string, unknown>>): void
  /** Decisions answered so far. */
  readonly answered: number
}

interface Teardown {
  teardown(fn: () => unknown): void
}

/** How long the first request of a batch waits for others to arrive. */
const BATCH_WINDOW_MS = 20
const DATA_PATH = /^\/v1\/data\/([A-Za-z_][\w/]*)$/

/** The rules a module defines at the top level, without its functions (a name followed by `(`). */
export function documentRules(module: RegoModule): string[] {
  const names = new Set<string>()
  for (const line of module.text.split('\n')) {
    const match = /^(?:default\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(\(?)/.exec(line)
    if (match === null || match[2] === '(' || /^(package|import)$/.test(match[1]!)) continue
    names.add(match[1]!)
  }
  return [...names]
}

function packagePath(module: RegoModule): string {
  const name = /^package\s+([A-Za-z_][\w.]*)\s*$/m.exec(module.text)?.[1]
  if (name === undefined) throw new Error(`${module.name}: no package line`)
  return name.replaceAll('.', '/')
}

interface Pending {
  readonly module: RegoModule
  readonly evaluation: RegoEvaluation
  readonly res: ServerResponse
}

function reply(res: ServerResponse, status: number, document: unknown): void {
  if (res.destroyed) return
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(document))
}

export async function startOpaServer(t: Teardown, modules: readonly RegoModule[]): Promise<OpaServer> {
  const opa = await startOpa()
  const byPath = new Map(modules.map((module) => [packagePath(module), module]))
  const documents = new Map<string, Readonly<Record<string, unknown>>>()
  const sockets = new Set<Socket>()
  let pending: Pending[] = []
  let timer: NodeJS.Timeout | null = null
  let answered = 0

  const flush = (): void => {
    timer = null
    const batch = pending
    pending = []
    for (const module of new Set(batch.map((p) => p.module))) {
      const mine = batch.filter((p) => p.module === module)
      let results: Record<string, unknown>[]
      try {
        results = opa.evaluate(modules, mine.map((p) => p.evaluation))
      } catch (error) {
        for (const p of mine) reply(p.res, 500, { code: 'internal_error', message: String(error) })
        continue
      }
      mine.forEach((p, i) => {
        answered++
        reply(p.res, 200, { result: results[i] })
      })
    }
  }

  const handle = (req: IncomingMessage, res: ServerResponse, text: string): void => {
    const path = DATA_PATH.exec((req.url ?? '').split('?')[0]!)?.[1]
    if (req.method !== 'POST' || path === undefined) return reply(res, 404, { code: 'resource_not_found', message: 'not a data API path' })
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      return reply(res, 400, { code: 'invalid_parameter', message: 'body is not JSON' })
    }
    const module = byPath.get(path)
    if (module === undefined) return reply(res, 200, {})
    const input = isRecord(body) ? body.input : undefined
    const workspace = isRecord(input) && isRecord(input.environment) ? input.environment.workspace : undefined
    const data = typeof workspace === 'string' ? documents.get(workspace) : undefined
    pending.push({ module, res, evaluation: { rules: documentRules(module), input, ...(data === undefined ? {} : { data }) } })
    timer ??= setTimeout(flush, BATCH_WINDOW_MS)
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8')))
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    if (timer !== null) clearTimeout(timer)
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    for (const socket of sockets) socket.destroy()
    await closed
    opa.close()
  })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    load(workspace, data) {
      documents.set(workspace, data)
    },
    get answered() {
      return answered
    },
  }
}
