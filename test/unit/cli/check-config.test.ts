/**
 * `agent-trust check-config` as an operator runs it (the compiled CLI in a child process): unknown
 * SERVICE_* variables are warnings with a "did you mean", a boolean other than true/false is an error.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { CLI } from '../../helpers/compiled.js'


function checkConfig(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'check-config'], { timeout: 60_000, env: { PATH: process.env.PATH, ...env } }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : null, stdout, stderr })
    })
  })
}

t.test('an unknown variable is a warning with the likely name; the exit code stays 0', async (t) => {
  const result = await checkConfig({ DATABASE_URL: 'memory://', SERVICE_UPSTREAM: 'http://127.0.0.1:9000' })
  t.equal(result.code, 0)
  t.match(result.stderr, /warning: "SERVICE_UPSTREAM" is not a variable this service reads; it is ignored \(did you mean SERVICE_UPSTREAM_URL\?\)/)
  t.match(result.stdout, /configuration is valid/)
})

t.test('SERVICE_EMBEDDED_PDP=yes is refused with the message that names the accepted values', async (t) => {
  const result = await checkConfig({
    DATABASE_URL: 'memory://', SERVICE_EMBEDDED_PDP: 'yes', SERVICE_WORKSPACE: 'a3f1c2d4-0000-4000-8000-000000000001', SERVICE_WORKSPAC: 'x',
  })
  t.equal(result.code, 2, 'a configuration error exits 2')
  t.match(result.stderr, /SERVICE_EMBEDDED_PDP: must be true or false/)
  t.match(result.stderr, /did you mean SERVICE_WORKSPACE\?/, 'the warnings are printed beside the errors')
  t.equal(result.stdout, '')
})
