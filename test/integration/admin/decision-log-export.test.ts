/**
 * The decision-log exporter against a real HTTP sink on loopback that reads uploads as OPA's decision-log
 * service API defines them (POST, `Content-Encoding: gzip`, a JSON array of events): the event shape, the
 * Authorization header, batching, retries while the sink fails, a batch the sink rejects for good, the
 * bounded queue, and the last flush on close.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gunzipSync } from 'node:zlib'
import { DecisionLogExporter, type ExportableEvent } from '../../../src/admin/services/decision-log-export.js'
import { projectPath } from '../../../src/core/paths.js'
import { createLogger } from '../../../src/telemetry/logger.js'

interface Upload {
  readonly headers: IncomingMessage['headers']
  readonly events: any[]
}

const uploads: Upload[] = []
/** The statuses the sink answers next, in order; then 204. */
const answers: number[] = []
const sink = createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => chunks.push(chunk))
  req.on('end', () => {
    const status = answers.shift() ?? 204
    if (status < 300) uploads.push({ headers: req.headers, events: JSON.parse(gunzipSync(Buffer.concat(chunks)).toString('utf8')) })
    res.writeHead(status).end()
  })
})
await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>((resolve) => sink.close(() => resolve())))
const url = `http://127.0.0.1:${(sink.address() as AddressInfo).port}/logs`

let n = 0
function event(over: Partial<ExportableEvent> = {}): ExportableEvent {
  n++
  return {
    time: new Date(Date.UTC(2026, 11, 2, 6, 0, n)).toISOString(), gateway_id: 'gw-edge-1', request_id: `gw-${n}`, txn_id: `txn-${n}`,
    org_id: 'org-1', agent_did: 'did:web:agents.example.com:a', method: 'GET', path: '/forecasts/today', operation: 'GET /forecasts/today',
    decision: 'ALLOW', reason: null, decision_id: `dec-${n}`, mode: 'EM-GUARD', obligations: [], status: 200, protocol: 'http', error_code: null,
    ...over,
  }
}

const quiet = createLogger('silent')
const until = async (check: () => boolean, ms = 5_000): Promise<boolean> => {
  const deadline = Date.now() + ms
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  return check()
}

t.test('events are uploaded in OPA\'s decision-log format, gzip, with the configured Authorization', async (t) => {
  uploads.length = 0
  const exporter = new DecisionLogExporter({ url, authorization: 'Bearer collector-token', version: '9.9.9', logger: quiet, flushMs: 20 })
  const allowed = event()
  const denied = event({ decision: 'DENY', reason: 'denied_did', status: 403, pdp_request: { subject: { did: 'did:web:agents.example.com:a' }, action: { operation: 'GET /admin' } } })
  const refused = event({ decision: null, decision_id: null, status: 503, error_code: 'PDP_UNAVAILABLE' })
  exporter.enqueue([allowed, denied, refused])
  t.ok(await until(() => uploads.length === 1), 'one upload')
  const upload = uploads[0]!
  t.equal(upload.headers['content-encoding'], 'gzip')
  t.match(upload.headers['content-type'], /^application\/json/)
  t.equal(upload.headers.authorization, 'Bearer collector-token')
  t.equal(upload.events.length, 3)
  t.match(upload.events[0], {
    labels: { id: 'gw-edge-1', version: '9.9.9', app: 'agent-trust-gateway' }, decision_id: allowed.decision_id, path: 'service/policy',
    input: { subject: { did: 'did:web:agents.example.com:a' }, action: { operation: 'GET /forecasts/today' } },
    result: { decision: 'ALLOW', status: 200 }, requested_by: 'gw-edge-1', timestamp: allowed.time,
  })
  t.same(upload.events[1].input, denied.pdp_request, 'a denial carries the PDP request as its input')
  t.equal(upload.events[2].decision_id, `gw-edge-1:${refused.request_id}`, 'a refusal without a decision gets an id of its request')
  await exporter.close()
  t.equal(exporter.sent, 3)
})

t.test('a failing sink is retried with back-off; a batch it rejects for good is dropped and counted', async (t) => {
  uploads.length = 0
  const counted: Record<string, number> = { sent: 0, dropped: 0 }
  const exporter = new DecisionLogExporter({
    url, authorization: null, version: '1', logger: quiet, flushMs: 10, backoffMs: 20, count: (outcome, events) => { counted[outcome]! += events },
  })
  answers.push(503, 500, 429)
  exporter.enqueue([event(), event()])
  t.ok(await until(() => uploads.length === 1), 'delivered after three failures')
  t.equal(uploads[0]!.events.length, 2)
  t.notOk('authorization' in uploads[0]!.headers, 'no Authorization unless configured')
  answers.push(400)
  exporter.enqueue([event()])
  t.ok(await until(() => counted.dropped === 1), 'a 400 drops its batch')
  exporter.enqueue([event()])
  t.ok(await until(() => uploads.length === 2), 'later events still go out')
  await exporter.close()
  t.same(counted, { sent: 3, dropped: 1 })
})

t.test('the queue is bounded and close() sends what is left', async (t) => {
  uploads.length = 0
  const exporter = new DecisionLogExporter({ url, authorization: null, version: '1', logger: quiet, queueMax: 5, batchMax: 3, flushMs: 60_000 })
  exporter.enqueue([event(), event(), event(), event(), event(), event(), event()])
  t.equal(exporter.dropped, 2, 'two over the bound')
  await exporter.close()
  t.same(uploads.map((u) => u.events.length).reduce((a, b) => a + b, 0), 5, 'everything queued was sent at close')
  exporter.enqueue([event()])
  t.equal(exporter.sent, 5, 'a closed exporter takes nothing more')
})

t.test('an unreachable sink: events wait, then the last flush drops them and nothing throws', async (t) => {
  const exporter = new DecisionLogExporter({ url: 'http://127.0.0.1:1/logs', authorization: null, version: '1', logger: quiet, flushMs: 10, backoffMs: 10, timeoutMs: 500 })
  exporter.enqueue([event(), event()])
  await new Promise((r) => setTimeout(r, 100))
  t.equal(exporter.sent, 0)
  await exporter.close()
  t.equal(exporter.dropped, 2)
})

t.test('the example collector (examples/decision-log-sink.mjs) writes one JSON line per exported decision', async (t) => {
  const child = spawn(process.execPath, [projectPath('examples', 'decision-log-sink.mjs')], { env: { ...process.env, PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { child.kill() })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString('utf8') })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString('utf8') })
  t.ok(await until(() => /logs\n/.test(stderr)), 'the sink listens')
  const sinkUrl = /(http:\/\/localhost:\d+\/logs)/.exec(stderr)![1]!
  const exporter = new DecisionLogExporter({ url: sinkUrl, authorization: null, version: '1', logger: quiet, flushMs: 10 })
  const sent = [event({ decision: 'DENY', reason: 'denied_did' }), event()]
  exporter.enqueue(sent)
  t.ok(await until(() => stdout.split('\n').filter(Boolean).length === 2), 'two lines')
  await exporter.close()
  const lines = stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line))
  t.same(lines.map((e) => e.decision_id), sent.map((e) => e.decision_id))
  t.equal(lines[0].result.reason, 'denied_did')
})
