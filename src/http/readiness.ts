export interface ReadinessNote {
  code: string
  message: string
}

/** A gateway primary's workers (SERVICE_GATEWAY_WORKERS above 1): how many of how many are ready, and each one. */
export interface WorkersSummary {
  total: number
  ready: number
  list: readonly { worker: number; pid: number | null; ready: boolean }[]
}

export interface ReadinessReport {
  ready: boolean
  checks: Record<string, boolean>
  reasons?: Record<string, ReadinessNote>
  /** Down parts the instance serves correctly without: taking it out of rotation would not bring them back. */
  degraded?: Record<string, ReadinessNote>
  workers?: WorkersSummary
}

export function readinessBody(report: ReadinessReport): Record<string, unknown> {
  return {
    status: report.ready ? 'ready' : 'not_ready',
    checks: report.checks,
    reasons: report.reasons ?? {},
    degraded: report.degraded ?? {},
    ...(report.workers === undefined ? {} : { workers: report.workers }),
  }
}
