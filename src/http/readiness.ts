/**
 * The `/readyz` report, served alike by the admin plane and by the operations listener of a
 * gateway-only process.
 */

/** Why a check failed or a part is degraded: a stable code and a sentence for the operator. */
export interface ReadinessNote {
  code: string
  message: string
}

export interface ReadinessReport {
  ready: boolean
  checks: Record<string, boolean>
  /** Per failed check, why; empty when ready. */
  reasons?: Record<string, ReadinessNote>
  /**
   * Parts that are down while the instance still serves correctly (Redis: counters fall back to local
   * ones). They never make the instance not-ready: taking it out of rotation would not bring them back.
   */
  degraded?: Record<string, ReadinessNote>
}

/** The `/readyz` body, shared with the gateway-only process's operations listener. */
export function readinessBody(report: ReadinessReport): Record<string, unknown> {
  return {
    status: report.ready ? 'ready' : 'not_ready',
    checks: report.checks,
    reasons: report.reasons ?? {},
    degraded: report.degraded ?? {},
  }
}
