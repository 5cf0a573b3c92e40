/**
 * The example MCP server (examples/mcp-server.mjs, the real SDK) as an upstream, behind a recording proxy in
 * this process: the tests see every request that reached the upstream, with its body, the moment it arrives.
 */
import type { Test } from 'tap'
import { spawn } from 'node:child_process'
import { projectPath } from '../../src/core/paths.js'
import { startRecordingProxy, type Reached } from './recording-proxy.js'

export type { Reached }

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
  const url = await startRecordingProxy(t, () => ({ host: target.hostname, port: target.port }), reached)
  return {
    url,
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
