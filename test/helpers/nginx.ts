/**
 * A real nginx (Debian's nginx-light, which has auth_request) run as a child process with a generated
 * configuration in a temporary directory: every path it writes is inside that directory, so it runs
 * without root, and it is stopped at teardown.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { portAccepts } from './processes.js'

export const NGINX = '/usr/sbin/nginx'

export interface RunningNginx {
  readonly url: string
  readonly dir: string
  readonly child: ChildProcess
  stop(): Promise<void>
}

/** `http` is the body of the http block; `port` the one the test gave nginx to listen on. */
export async function startNginx(t: { teardown(fn: () => unknown): void }, port: number, http: string): Promise<RunningNginx> {
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-nginx-'))
  const conf = path.join(dir, 'nginx.conf')
  writeFileSync(conf, [
    'daemon off;',
    'master_process off;',
    'worker_processes 1;',
    `pid ${path.join(dir, 'nginx.pid')};`,
    `error_log ${path.join(dir, 'error.log')} info;`,
    'events { worker_connections 256; }',
    'http {',
    `  access_log ${path.join(dir, 'access.log')};`,
    `  client_body_temp_path ${path.join(dir, 'body')};`,
    `  proxy_temp_path ${path.join(dir, 'proxy')};`,
    `  fastcgi_temp_path ${path.join(dir, 'fastcgi')};`,
    `  uwsgi_temp_path ${path.join(dir, 'uwsgi')};`,
    `  scgi_temp_path ${path.join(dir, 'scgi')};`,
    http,
    '}',
    '',
  ].join('\n'))
  const tested = spawnSync(NGINX, ['-t', '-p', dir, '-c', conf], { encoding: 'utf8' })
  if (tested.status !== 0) throw new Error(`nginx -t failed:\n${tested.stderr}`)
  const child = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stderr?.on('data', (chunk) => { out += String(chunk) })
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const deadline = Date.now() + 10_000
  while (!(await portAccepts(port))) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`nginx did not start:\n${out}`)
    await new Promise((r) => setTimeout(r, 50))
  }
  return {
    url: `http://127.0.0.1:${port}`,
    dir,
    child,
    async stop() {
      if (child.exitCode === null) child.kill('SIGQUIT')
      await exited
    },
  }
}
