/**
 * The example MCP server (examples/mcp-server.mjs, the real SDK) as an upstream, behind a recording proxy in
 * this process: the tests see every request that reached the upstream, with its body, the moment it arrives.
 */
import type { Test } from 'tap'
import { spawn } from 'node:child_process'
import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { projectPath } from '../../src/core/paths.js'

export interface Reached {
  readonly method: string
  readonly path: string
  readonly headers: Readonly<Record<string, string | string[] | undefined>>
  readonly body: string
}

export interface McpUpstream {
  /** `http://127.0.0.1:<port>`: the recording proxy's origin. */
  readonly url: string
  readonly reached: Reached[]
  /** The JSON-RPC methods of the POST bodies that reached the upstream (responses as `(response)`). */
  rpcMethods(): string[]
}

export interface McpUpstreamMode {
  readonly stateless: boolean
  readonly json: boolean
}

export async function startMcpUpstream(t: Test, mode: McpUpstreamMode): Promise<McpUpstream> {
  const child = spawn(process.execPath, [projectPath('examples', 'mcp-server.mjs')], {
    env: { ...process.env, PORT: '0', MCP_STATELESS: mode.stateless ? '1' : '', MCP_JSON: mode.json ? '1' : '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  t.teardown(() => {
    child.kill()
  })
  child.stderr.resume()
  const origin = await new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8')
      const match = /on (http:\/\/127\.0\.0\.1:\d+)\/mcp/.exec(out)
      if (match !== null) resolve(match[1]!)
    })
    child.once('exit', (code) => reject(new Error(`example MCP server exited (${String(code)}): ${out}`)))
  })
  const target = new URL(origin)
  const reached: Reached[] = []
  const proxy = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      reached.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: body.toString('utf8') })
      const out = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(res)
      })
      out.on('error', () => res.destroy())
      res.on('close', () => out.destroy())
      out.end(body)
    })
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    proxy.closeAllConnections()
    proxy.close(() => resolve())
  }))
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    reached,
    rpcMethods() {
      const methods: string[] = []
      for (const entry of reached) {
        if (entry.method !== 'POST' || entry.body === '') continue
        const parsed = JSON.parse(entry.body) as unknown
        for (const message of Array.isArray(parsed) ? parsed : [parsed]) {
          const method = (message as { method?: unknown }).method
          methods.push(typeof method === 'string' ? method : '(response)')
        }
      }
      return methods
    },
  }
}
