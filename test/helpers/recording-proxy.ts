/**
 * What the gateway's integration tests put in front of a real upstream: a proxy in this process that records
 * every request with its body the moment it arrives, and a logger sink that parses each JSON line.
 */
import type { Test } from 'tap'
import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'

export interface Reached {
  readonly method: string
  readonly path: string
  readonly headers: Readonly<Record<string, string | string[] | undefined>>
  readonly body: string
}

/** Proxies to `target()` (read per request, so the upstream may start later); returns the proxy's origin. */
export async function startRecordingProxy(t: Test, target: () => { host: string; port: number | string }, reached: Reached[]): Promise<string> {
  const proxy = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      reached.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: body.toString('utf8') })
      const { host, port } = target()
      const out = request({ host, port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
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
  return `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`
}

/** A logger destination that parses each line it receives into `lines`. */
export function jsonLineSink(lines: Record<string, unknown>[]): Writable {
  return new Writable({
    write(chunk, _encoding, callback) {
      for (const line of String(chunk).split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>)
      callback()
    },
  })
}
