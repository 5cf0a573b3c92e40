/**
 * A TCP proxy between a process under test and a real server (PostgreSQL in the fault tests), so that
 * a test can take the server "down" for one process without touching the server itself: other test
 * files share the same PostgreSQL in CI and must not notice anything.
 *
 * `cut()` behaves like a stopped server as seen from the client: every open connection is closed and
 * new connections are refused (the listener is closed, so connect() gets ECONNREFUSED). `restore()`
 * listens again on the same port, so the client's connection string stays valid.
 */
import { connect, createServer, type Server, type Socket } from 'node:net'

export interface TcpProxy {
  readonly host: string
  /** The port the proxy listens on (unchanged across cut/restore). */
  readonly port: number
  /** Connections accepted so far (a reconnecting client shows up here). */
  readonly accepted: number
  /** Whether the proxy is currently cut. */
  readonly isCut: boolean
  /** Closes every connection and refuses new ones until restore(). */
  cut(): Promise<void>
  /** Accepts connections again, on the same port. */
  restore(): Promise<void>
  close(): Promise<void>
}

interface Teardown {
  teardown(fn: () => unknown): void
}

export async function startTcpProxy(t: Teardown, target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<Socket>()
  let accepted = 0
  let cut = false
  let server: Server

  const onConnection = (client: Socket): void => {
    if (cut) {
      // A connection accepted in the instant before the listener closed: behave as refused.
      client.destroy()
      return
    }
    accepted++
    const upstream = connect(target.port, target.host)
    sockets.add(client)
    sockets.add(upstream)
    const drop = (): void => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    // Either side failing or closing ends the pair, as a real server's connection would.
    client.on('error', drop)
    upstream.on('error', drop)
    client.on('close', drop)
    upstream.on('close', drop)
    client.pipe(upstream)
    upstream.pipe(client)
  }

  const listen = (port: number): Promise<Server> => new Promise((resolve, reject) => {
    const next = createServer(onConnection)
    next.once('error', reject)
    next.listen(port, '127.0.0.1', () => {
      next.off('error', reject)
      resolve(next)
    })
  })

  const closeListener = (): Promise<void> => new Promise((resolve) => {
    if (!server.listening) return resolve()
    server.close(() => resolve())
  })

  const destroyAll = (): void => {
    for (const socket of sockets) socket.destroy()
    sockets.clear()
  }

  server = await listen(0)
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0

  const proxy: TcpProxy = {
    host: '127.0.0.1',
    port,
    get accepted() { return accepted },
    get isCut() { return cut },
    async cut() {
      cut = true
      const closed = closeListener()
      destroyAll()
      await closed
    },
    async restore() {
      if (!cut) return
      server = await listen(port)
      cut = false
    },
    async close() {
      cut = true
      const closed = closeListener()
      destroyAll()
      await closed
    },
  }
  t.teardown(() => proxy.close())
  return proxy
}
