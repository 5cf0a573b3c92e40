/**
 * The HTTP PDP (service protocol) keeps the decision point contract against a PDP server on 127.0.0.1
 * that decides each request with the embedded evaluator on the bundle published for its workspace.
 */
import t from 'tap'
import type { PdpRequest } from '../../../../src/core/policy/types.js'
import { createHttpPdp } from '../../../../src/gateway/pdp/http-pdp.js'
import type { GatewayBundleData } from '../../../../src/gateway/snapshot/snapshot.js'
import { runDecisionPointContract } from '../../../helpers/contracts/decision-point.js'
import { embeddedDecision } from '../../../helpers/decisions.js'
import { startPdpServer, type PdpBehaviour } from '../../../helpers/pdp-server.js'

await runDecisionPointContract(t, 'http', async (t) => {
  const bundles = new Map<string, GatewayBundleData>()
  const server = await startPdpServer(t)
  server.respond({
    fn: (request: PdpRequest): PdpBehaviour => {
      const data = bundles.get(request.environment.workspace ?? '')
      if (data === undefined) return { status: 404, body: '{"error":"unknown_workspace"}' }
      const decided = embeddedDecision(request, data)
      if ('unavailable' in decided) return { status: 503, body: JSON.stringify({ error: decided.unavailable }) }
      return decided as PdpBehaviour
    },
  })
  return {
    pdp: createHttpPdp({ endpoint: server.url, protocol: 'service', timeoutMs: 10_000, pepId: 'pep-contract' }),
    publish: (workspace, data) => bundles.set(workspace, data),
  }
})
