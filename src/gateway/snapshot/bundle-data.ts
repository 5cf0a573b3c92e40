// The evaluator trusts the types it is handed (a `denied_dids` that is not an array denies nobody), so a
// registry's bundle of another shape is refused and the last good one stays (docs/peer-input-validation.md).
import { isRecord } from '../../core/json-objects.js'
import { TRUST_CODES } from '../../core/trust-level.js'

const MINIMUM_TRUST_CODES: ReadonlySet<unknown> = new Set([null, '', ...TRUST_CODES])

/** Longest DID, pattern, tool or class name accepted in a bundle. */
export const MAX_BUNDLE_STRING_LENGTH = 2048

function isName(value: unknown): boolean {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_BUNDLE_STRING_LENGTH
}

function didListProblem(value: unknown, nullable: boolean): boolean {
  if (value === undefined || (nullable && value === null)) return false
  return !Array.isArray(value) || !value.every(isName)
}

/** The checks of a policy-wide rule and of each operation, tool and class entry. */
function ruleProblem(rule: Record<string, unknown>, where: string): string | null {
  if (rule.min_trust_level !== undefined && !MINIMUM_TRUST_CODES.has(rule.min_trust_level)) return `${where}.min_trust_level is not a trust code`
  if (didListProblem(rule.allowed_dids, true)) return `${where}.allowed_dids is not a list of DIDs`
  if (didListProblem(rule.denied_dids, true)) return `${where}.denied_dids is not a list of DIDs`
  return null
}

function entriesProblem(value: unknown, key: 'pattern' | 'tool' | 'class', where: string): string | null {
  if (value === undefined || value === null) return null
  if (!Array.isArray(value)) return `${where} is not a list`
  for (let i = 0; i < value.length; i++) {
    const entry: unknown = value[i]
    if (!isRecord(entry) || !isName(entry[key])) return `${where}[${i}].${key} is missing`
    // A tool rule's own rate limit (policies/README.md, "MCP tool patterns"), read as rate_limits' rpm is.
    if (entry.rpm !== undefined && !isRpm(entry.rpm)) return `${where}[${i}].rpm is not a number > 0`
    const problem = ruleProblem(entry, `${where}[${i}]`)
    if (problem !== null) return problem
  }
  return null
}

function isRpm(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value > 0
}

/** Null when `policy` has the resolved-policy shape, else what is wrong with it (no values quoted). */
export function resolvedPolicyProblem(policy: unknown, where: string): string | null {
  if (!isRecord(policy)) return `${where} is not an object`
  const problem = ruleProblem(policy, where)
  if (problem !== null) return problem
  const limits = policy.rate_limits
  if (limits !== undefined && limits !== null) {
    if (!Array.isArray(limits)) return `${where}.rate_limits is not a list`
    for (let i = 0; i < limits.length; i++) {
      const limit: unknown = limits[i]
      if (!isRecord(limit) || !isName(limit.did) || !isRpm(limit.rpm)) {
        return `${where}.rate_limits[${i}] is not {did, rpm > 0}`
      }
    }
  }
  return entriesProblem(policy.operations, 'pattern', `${where}.operations`)
    ?? entriesProblem(policy.mcp_tools, 'tool', `${where}.mcp_tools`)
    ?? entriesProblem(policy.capability_classes, 'class', `${where}.capability_classes`)
}

/** Null when the evaluator can read `data` as it is, else the first problem found. */
export function bundleDataProblem(data: Record<string, unknown>): string | null {
  if (data.config !== undefined && data.config !== null) {
    const problem = resolvedPolicyProblem(data.config, 'config')
    if (problem !== null) return problem
  }
  const resolved = data.resolved_policies
  if (resolved === undefined || resolved === null) return null
  if (!isRecord(resolved)) return 'resolved_policies is not an object'
  const byDid = resolved.by_agent_did
  if (byDid === undefined || byDid === null) return null
  if (!isRecord(byDid)) return 'resolved_policies.by_agent_did is not an object'
  for (const did of Object.keys(byDid)) {
    // The DID is the registry's to name; only its length is bounded, and it is never quoted back.
    if (did.length > MAX_BUNDLE_STRING_LENGTH) return 'resolved_policies.by_agent_did has an overlong DID'
    const problem = resolvedPolicyProblem(byDid[did], 'a resolved policy')
    if (problem !== null) return problem
  }
  return null
}
