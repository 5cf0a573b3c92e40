export interface ReadinessNote {
  code: string
  message: string
}

export interface ReadinessReport {
  ready: boolean
  checks: Record<string, boolean>
  reasons?: Record<string, ReadinessNote>
  /** Down parts the instance serves correctly without: taking it out of rotation would not bring them back. */
  degraded?: Record<string, ReadinessNote>
}

export function readinessBody(report: ReadinessReport): Record<string, unknown> {
  return {
    status: report.ready ? 'ready' : 'not_ready',
    checks: report.checks,
    reasons: report.reasons ?? {},
    degraded: report.degraded ?? {},
  }
}
