/**
 * The A2A configuration of bench/gateway.ts (docs/performance.md, "Method"): what the upstream agent answers
 * on `POST /a2a` (A2A 0.3 JSON-RPC), the `message/send` the load sends, the org policy the gateway decides
 * it on, and the checks that a proxy answers as it should before it is measured.
 */
import { DECISION_ERROR_CODES } from '../src/gateway/json-rpc-refusal.js'
import { expectStatus } from './appliance.js'

/** The agent's JSON-RPC endpoint; a POST of any other REST-free path would do as well (docs/a2a.md). */
export const A2A_PATH = '/a2a'

/** The task the upstream answers every `message/send` with: completed, one text artifact. */
const TASK_RESULT = JSON.stringify({
  kind: 'task',
  id: 'task-0001',
  contextId: 'ctx-0001',
  status: { state: 'completed', timestamp: '2026-01-01T00:00:00.000Z' },
  artifacts: [{ artifactId: 'answer', parts: [{ kind: 'text', text: 'Order a-17 ships on Tuesday.' }] }],
})

export interface A2aAnswer {
  readonly status: number
  readonly body: string
}

const jsonRpcError = (id: string, code: number, message: string): A2aAnswer =>
  ({ status: 200, body: `{"jsonrpc":"2.0","id":${id},"error":{"code":${code},"message":"${message}"}}` })

/**
 * The upstream agent's answer to one `POST /a2a` body: the completed task for `message/send`, A2A's
 * errors for anything else (`tasks/cancel` answers TaskNotCancelable, so a gateway that let it through is
 * told apart from one that refused it). Never throws.
 */
export function answerA2a(body: Buffer): A2aAnswer {
  let message: unknown
  try {
    message = JSON.parse(body.toString('utf8'))
  } catch {
    return jsonRpcError('null', -32700, 'parse error')
  }
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return jsonRpcError('null', -32600, 'not a single JSON-RPC request')
  const { jsonrpc, id, method } = message as Record<string, unknown>
  if (jsonrpc !== '2.0' || typeof method !== 'string' || (typeof id !== 'string' && !Number.isSafeInteger(id))) return jsonRpcError('null', -32600, 'invalid request')
  const idText = JSON.stringify(id)
  if (method === 'message/send') return { status: 200, body: `{"jsonrpc":"2.0","id":${idText},"result":${TASK_RESULT}}` }
  if (method === 'tasks/cancel') return jsonRpcError(idText, -32002, 'task cannot be canceled')
  return jsonRpcError(idText, -32601, 'method not found')
}

/** The benchmarked `message/send`: one user text part, a skill named in the metadata (docs/a2a.md, "Skills"). */
export function messageSendBody(id: number | string): string {
  return JSON.stringify({
    jsonrpc: '2.0',
    id,
    method: 'message/send',
    params: {
      message: { kind: 'message', role: 'user', messageId: 'msg-0001', parts: [{ kind: 'text', text: 'When does order a-17 ship?' }], metadata: { skill: 'order-status' } },
      configuration: { blocking: true, acceptedOutputModes: ['text/plain'] },
    },
  })
}

function tasksCancelBody(id: number | string): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'tasks/cancel', params: { id: 'task-0001' } })
}

/** The headers of every A2A request, as a 0.3 client sends them, with the badge. */
export function a2aHeaders(token: string): Record<string, string> {
  return { 'x-service-badge': token, 'content-type': 'application/json', accept: 'application/json' }
}

/**
 * The A2A organization's policy for its agent `did`: the HTTP operation and `a2a.message.send` allowed to
 * it (with the skill's rule), `a2a.tasks.cancel` to nobody, so the check can see a denial.
 */
export function a2aPolicy(did: string): string {
  return [
    'version: "1"',
    'denied_dids: ["did:web:blocked.example.com"]',
    `allowed_dids: ["${did}", "did:web:partner.example.com"]`,
    'operations:',
    `  - pattern: "POST ${A2A_PATH}"`,
    `    allowed_dids: ["${did}", "did:web:partner.example.com"]`,
    '  - pattern: "a2a.message.*"',
    `    allowed_dids: ["${did}"]`,
    '  - pattern: "a2a.tasks.cancel"',
    '    allowed_dids: []',
    '  - pattern: "a2a.push_config.*"',
    '    min_trust_level: EV',
    '',
  ].join('\n')
}

const post = (config: string, url: string, headers: Record<string, string>, body: string): Promise<string> =>
  expectStatus(config, url, { method: 'POST', headers, body }, 200)

/** Through the proxy at `base`, a `message/send` answers exactly what the upstream answers for its id. */
export async function checkA2a(config: string, base: string, headers: Record<string, string>): Promise<void> {
  const body = messageSendBody('check-send')
  const answer = await post(config, `${base}${A2A_PATH}`, headers, body)
  if (answer !== answerA2a(Buffer.from(body)).body) throw new Error(`${config}: message/send answered ${answer.slice(0, 300)}, not the upstream's task`)
}

/** The gateway at `base` enforces the policy: `tasks/cancel` is refused with POLICY_DENIED, and no badge is 401. */
export async function checkA2aEnforced(config: string, base: string, headers: Record<string, string>): Promise<void> {
  const url = `${base}${A2A_PATH}`
  const denied = JSON.parse(await post(config, url, headers, tasksCancelBody('check-cancel'))) as { id?: unknown; error?: { code?: unknown } }
  if (denied.id !== 'check-cancel' || denied.error?.code !== DECISION_ERROR_CODES.POLICY_DENIED) {
    throw new Error(`${config}: tasks/cancel was not refused with POLICY_DENIED: ${JSON.stringify(denied).slice(0, 300)}`)
  }
  const anonymous = { ...headers }
  delete anonymous['x-service-badge']
  await expectStatus(`${config} without a badge`, url, { method: 'POST', headers: anonymous, body: messageSendBody('check-anonymous') }, 401)
}
