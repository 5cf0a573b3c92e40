/**
 * The operator commands that stand on the console's endpoints (docs/console.md): `whoami` (GET /v1/me),
 * `orgs list` (GET /v1/orgs), policy commands without --org (the org from GET /v1/me) and `agents list --q`
 * (GET /v1/agents?q=). Written against that contract; they pass once the admin plane serves it.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'
import { CLI } from '../../helpers/compiled.js'

t.setTimeout(200_000)

interface Run { code: number; stdout: string; stderr: string }

const admin = await startTestAdmin(t)
const org = await createOrg(admin, 'cli-me-org')

function cli(args: string[], key: string = org.key): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], {
      timeout: 60_000, env: { PATH: process.env.PATH ?? '', SERVICE_REGISTRY_URL: admin.url, SERVICE_REGISTRY_KEY: key },
    }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr })
    })
  })
}

t.test('whoami: the principal of the key', async (t) => {
  const run = await cli(['whoami'])
  t.equal(run.code, 0, run.stderr)
  t.match(run.stdout, /^org\s+cli-me-org$/m)
  t.match(run.stdout, new RegExp(`^org id\\s+${org.orgId}$`, 'm'))
  t.match(run.stdout, /^role\s+admin$/m)
  t.match(run.stdout, /^operator\s+no$/m)
  const asJson = await cli(['whoami', '--json'], admin.operatorKey)
  t.equal(asJson.code, 0, asJson.stderr)
  t.match(JSON.parse(asJson.stdout), { kind: String, org_id: String, operator: true })
})

t.test('orgs list: its own org for an admin key, all for an operator', async (t) => {
  const own = await cli(['orgs', 'list', '--json'])
  t.equal(own.code, 0, own.stderr)
  t.same(JSON.parse(own.stdout).data.map((o: { id: string }) => o.id), [org.orgId])
  const all = await cli(['orgs', 'list'], admin.operatorKey)
  t.equal(all.code, 0, all.stderr)
  t.match(all.stdout, /^ID\s+NAME\s+CREATED$/m)
  t.match(all.stdout, new RegExp(`^${org.orgId}\\s+cli-me-org\\s`, 'm'))
  t.match(all.stdout, /\sdefault\s/m, 'the bootstrap organization too')
})

t.test('policy commands find the org through GET /v1/me', async (t) => {
  const proposals = await cli(['policy', 'proposals', '--json'])
  t.equal(proposals.code, 0, proposals.stderr)
  t.same(JSON.parse(proposals.stdout), [])
})

t.test('agents list --q filters on the registry', async (t) => {
  for (const name of ['alpha-weather', 'beta-billing']) t.equal((await cli(['agents', 'create', '--name', name])).code, 0)
  const run = await cli(['agents', 'list', '--q', 'WEATHER', '--json'])
  t.equal(run.code, 0, run.stderr)
  t.same(JSON.parse(run.stdout).data.map((a: { name: string }) => a.name), ['alpha-weather'])
})
