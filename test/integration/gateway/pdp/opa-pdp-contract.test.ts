/**
 * The HTTP PDP in its OPA mode keeps the decision point contract against OPA's data API, served by the
 * real OPA engine evaluating the Rego module users deploy (policies/service/policy.rego) on the bundle
 * data published for each request's workspace.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { projectPath } from '../../../../src/core/paths.js'
import { createHttpPdp } from '../../../../src/gateway/pdp/http-pdp.js'
import { runDecisionPointContract } from '../../../helpers/contracts/decision-point.js'
import { startOpaServer } from '../../../helpers/opa-server.js'

// Compiling the module on OPA in WebAssembly takes seconds per batch of decisions on a busy machine.
t.setTimeout(300_000)

await runDecisionPointContract(t, 'opa', async (t) => {
  const opa = await startOpaServer(t, [{ name: 'policies/service/policy.rego', text: readFileSync(projectPath('policies', 'service', 'policy.rego'), 'utf8') }])
  return {
    pdp: createHttpPdp({ endpoint: opa.url, protocol: 'opa', timeoutMs: 120_000, pepId: 'pep-contract' }),
    publish: (workspace, data) => opa.load(workspace, data),
  }
})
