/**
 * The audit trail's configuration: on by default, its checkpoint cadence and ALLOW sampling read and
 * bounded, and `SERVICE_AUDIT=false` refused in production (it would leave changes unrecorded).
 */
import t from 'tap'
import { loadConfig } from '../../../src/config/index.js'

const PROD = { ENVIRONMENT: 'production', DATABASE_URL: 'postgres://h/db', CA_ISSUER_URL: 'https://registry.example.com' }

t.test('defaults, values and refusals', async (t) => {
  t.same(loadConfig({}).audit, { enabled: true, checkpointRecords: 1000, checkpointIntervalMs: 300_000, allowSample: 0 })
  t.same(loadConfig({ SERVICE_AUDIT: 'false', SERVICE_AUDIT_CHECKPOINT_RECORDS: '10', SERVICE_AUDIT_CHECKPOINT_INTERVAL: '30s', SERVICE_AUDIT_ALLOW_SAMPLE: '100' }).audit,
    { enabled: false, checkpointRecords: 10, checkpointIntervalMs: 30_000, allowSample: 100 })
  t.equal(loadConfig(PROD).audit.enabled, true, 'production runs with it')
  t.throws(() => loadConfig({ ...PROD, SERVICE_AUDIT: 'false' }), /SERVICE_AUDIT: false is refused when ENVIRONMENT=production/)
  t.throws(() => loadConfig({ SERVICE_AUDIT_CHECKPOINT_INTERVAL: '100ms' }), /SERVICE_AUDIT_CHECKPOINT_INTERVAL/)
  t.throws(() => loadConfig({ SERVICE_AUDIT_CHECKPOINT_RECORDS: '0' }), /SERVICE_AUDIT_CHECKPOINT_RECORDS/)
  t.throws(() => loadConfig({ SERVICE_AUDIT_ALLOW_SAMPLE: '-1' }), /SERVICE_AUDIT_ALLOW_SAMPLE/)
})
