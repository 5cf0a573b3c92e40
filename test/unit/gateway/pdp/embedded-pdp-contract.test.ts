/**
 * The embedded PDP keeps the decision point contract: it decides on the bundle of the snapshot it is
 * handed, so there is nothing to publish elsewhere.
 */
import t from 'tap'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import { runDecisionPointContract } from '../../../helpers/contracts/decision-point.js'

await runDecisionPointContract(t, 'embedded', async () => ({ pdp: createEmbeddedPdp(), publish: () => {} }))
