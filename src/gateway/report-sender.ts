/**
 * How a gateway-only process delivers its decision reports: `POST <registry>/v1/gateway/reports` with the
 * registry key the snapshot source uses. A network failure, 429 or 5xx is retried by the shipper; any other
 * refusal is final for that report (its events are dropped and counted). The key never reaches a message.
 */
import { Pool } from 'undici'
import { readBoundedBody } from '../net/bounded-body.js'
import { ReportRejected, type GatewayReport } from '../telemetry/decision-shipper.js'

export interface ReportSender {
  send(report: GatewayReport): Promise<void>
  close(): Promise<void>
}

/** The error code of an error body, read bounded; null when there is none. */
async function errorCode(body: Parameters<typeof readBoundedBody>[0]): Promise<string | null> {
  try {
    const parsed = JSON.parse((await readBoundedBody(body, 4096)).toString('utf8')) as { error?: unknown }
    return typeof parsed.error === 'string' && /^[A-Za-z_]{1,64}$/.test(parsed.error) ? parsed.error : null
  } catch {
    return null
  }
}

export function createReportSender(options: { registryUrl: string; registryKey: string; timeoutMs?: number }): ReportSender {
  const url = new URL(options.registryUrl)
  const path = `${url.pathname.replace(/\/+$/, '')}/v1/gateway/reports`
  const timeoutMs = options.timeoutMs ?? 5_000
  // One report is in flight at a time: one connection is enough.
  const pool = new Pool(url.origin, { connections: 1, connect: { timeout: timeoutMs }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
  const redact = (message: string): string => message.split(options.registryKey).join('[redacted]')
  return {
    async send(report) {
      let response
      try {
        response = await pool.request({
          method: 'POST',
          path,
          headers: { 'content-type': 'application/json', 'user-agent': 'service-gateway', 'x-service-registry-key': options.registryKey },
          body: JSON.stringify(report),
          signal: AbortSignal.timeout(timeoutMs),
        })
      } catch (error) {
        throw new Error(redact(`POST /v1/gateway/reports failed: ${error instanceof Error ? error.message : String(error)}`))
      }
      if (response.statusCode === 202) {
        await response.body.dump()
        return
      }
      const code = await errorCode(response.body)
      const message = `POST /v1/gateway/reports answered ${response.statusCode}${code === null ? '' : ` (${code})`}`
      if (response.statusCode === 429 || response.statusCode >= 500) throw new Error(message)
      throw new ReportRejected(message)
    },
    async close() {
      await pool.close().catch(() => {})
    },
  }
}
