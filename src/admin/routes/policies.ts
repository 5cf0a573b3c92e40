import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ServiceError } from '../../core/errors.js'
import type { Database } from '../../db/database.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, responses, uuidParam } from '../schemas.js'
import { TRUST_CODES } from '../../core/trust-level.js'
import { isUuid } from '../../core/uuid.js'
import { requireAdmin } from '../../core/principal.js'
import * as service from '../services/policies.js'
import type { ScopeRef, SimulateInput } from '../services/policies.js'
import { forRequest } from '../plugins/audit.js'

export interface PolicyContext {
  readonly db: Database
  /** `host` or `host%3Aport` of this registry's did:web identifiers (agent DIDs in resolution). */
  readonly registryDidHost: string
}

type Schema = Record<string, unknown>

const nullableString = { type: ['string', 'null'] }
const trustCode = { type: 'string', enum: ['', ...TRUST_CODES] }
const didList = { type: 'array', items: { type: 'string' } }

const documentProperties = {
  id: { type: 'string', format: 'uuid' },
  org_id: { type: 'string', format: 'uuid' },
  scope_type: { type: 'string', enum: ['org', 'group', 'agent'] },
  scope_id: { type: 'string', format: 'uuid', description: 'org id for the org scope' },
  state: { type: 'string', enum: ['proposal', 'active', 'superseded', 'rejected', 'archived'] },
  version: { type: 'integer' },
  yaml_content: { type: 'string' },
  schema_version: { type: 'string' },
  content_hash: { type: 'string', description: 'sha256:<hex> of the exact YAML text' },
  created_by_user_id: nullableString,
  created_by_type: { type: 'string', enum: ['human', 'api_key'] },
  approved_by_user_id: nullableString,
  rejection_reason: nullableString,
  created_at: { type: 'string', format: 'date-time' },
  updated_at: { type: 'string', format: 'date-time' },
}

const documentSchema: Schema = {
  type: 'object',
  required: Object.keys(documentProperties),
  properties: documentProperties,
}

const lineageEntrySchema: Schema = {
  type: 'object',
  required: Object.keys(documentProperties),
  properties: { ...documentProperties, precedence: { type: 'integer', description: 'group scopes only' } },
}

const ruleProperties = { min_trust_level: trustCode, allowed_dids: didList, denied_dids: didList }
const ruleList = (key: string): Schema => ({
  type: 'array',
  items: { type: 'object', required: [key], properties: { [key]: { type: 'string' }, ...ruleProperties } },
})

const resolvedSchema: Schema = {
  type: 'object',
  description: 'the merged policy of the agent (docs/wire-contract.md §7): null allow-list = no restriction, [] = nobody',
  required: ['min_trust_level', 'allowed_dids', 'denied_dids', 'rate_limits', 'operations', 'mcp_tools', 'capability_classes'],
  properties: {
    min_trust_level: { type: ['string', 'null'] },
    allowed_dids: { type: ['array', 'null'], items: { type: 'string' } },
    denied_dids: didList,
    rate_limits: { type: 'array', items: { type: 'object', required: ['did', 'rpm'], properties: { did: { type: 'string' }, rpm: { type: 'integer' } } } },
    operations: ruleList('pattern'),
    mcp_tools: {
      type: 'array',
      items: { type: 'object', required: ['tool'], properties: { tool: { type: 'string' }, ...ruleProperties, rpm: { type: 'integer' } } },
    },
    capability_classes: ruleList('class'),
  },
}

const decisionSchema: Schema = {
  type: 'object',
  required: ['decision', 'decision_id', 'obligations', 'reason', 'ttl'],
  properties: {
    decision: { type: 'string', enum: ['ALLOW', 'DENY'] },
    decision_id: { type: 'string' },
    obligations: {
      type: 'array',
      items: { type: 'object', required: ['type', 'params'], properties: { type: { type: 'string' }, params: { type: 'object', additionalProperties: true } } },
    },
    reason: { type: 'string' },
    ttl: { type: 'integer' },
    required_trust_level: { type: 'string', enum: [...TRUST_CODES], description: 'DENY for the trust level: the level the failing rule wants' },
  },
}

const groupProperties = {
  id: { type: 'string', format: 'uuid' },
  org_id: { type: 'string', format: 'uuid' },
  name: { type: 'string' },
  precedence: { type: 'integer', description: 'lower number = higher priority' },
  agent_ids: { type: 'array', items: { type: 'string' } },
  created_at: { type: 'string', format: 'date-time' },
  updated_at: { type: 'string', format: 'date-time' },
}
const groupSchema: Schema = { type: 'object', required: Object.keys(groupProperties), properties: groupProperties }

// int4 range of the precedence column, kept well inside it
const groupFields = {
  name: { type: 'string', minLength: 1, maxLength: 200, pattern: '\\S' },
  precedence: { type: 'integer', minimum: -1_000_000, maximum: 1_000_000 },
}
const groupCreateBody = { type: 'object', required: ['name', 'precedence'], additionalProperties: false, properties: groupFields }
const groupUpdateBody = { type: 'object', additionalProperties: false, minProperties: 1, properties: groupFields }

const proposalBody = {
  type: 'object',
  required: ['yaml_content'],
  additionalProperties: false,
  properties: { yaml_content: { type: 'string', minLength: 1, description: 'policy YAML, schema version "1" (docs/wire-contract.md §7)' } },
}
const rejectBody = {
  type: 'object',
  required: ['reason'],
  additionalProperties: false,
  properties: { reason: { type: 'string', minLength: 1, maxLength: 2000, pattern: '\\S' } },
}

const simulateBody = {
  type: 'object',
  // One of the three: an operation as given, or an MCP message or A2A call as the gateway would ask it.
  anyOf: [{ required: ['action'] }, { required: ['mcp'] }, { required: ['a2a'] }],
  additionalProperties: false,
  properties: {
    mcp: {
      type: 'object',
      required: ['method'],
      additionalProperties: false,
      description: 'An MCP message, asked as the gateway asks it on an MCP route (instead of action)',
      properties: {
        method: { type: 'string', minLength: 1, maxLength: 256 },
        name: { type: 'string', minLength: 1, maxLength: 8192 },
        uri: { type: 'string', minLength: 1, maxLength: 8192 },
        path: { type: 'string', minLength: 1, maxLength: 2048, pattern: '^/' },
      },
    },
    a2a: {
      type: 'object',
      required: ['method'],
      additionalProperties: false,
      description: 'An A2A JSON-RPC call of either version, asked as the gateway asks it on an A2A route (instead of action)',
      properties: {
        method: { type: 'string', minLength: 1, maxLength: 256 },
        task_id: { type: 'string', minLength: 1, maxLength: 256 },
        context_id: { type: 'string', minLength: 1, maxLength: 256 },
        skill: { type: 'string', minLength: 1, maxLength: 128 },
        path: { type: 'string', minLength: 1, maxLength: 2048, pattern: '^/' },
      },
    },
    subject: {
      type: 'object',
      additionalProperties: false,
      properties: { did: { type: 'string', minLength: 1, maxLength: 2048 }, trust_level: trustCode },
    },
    action: {
      type: 'object',
      required: ['operation'],
      additionalProperties: false,
      properties: {
        operation: { type: 'string', minLength: 1, maxLength: 2048 },
        capability_class: { type: ['string', 'null'], maxLength: 512 },
        mcp_tool: { type: 'string', maxLength: 512 },
        // As the gateway sends it on an MCP message: the HTTP request that carried it.
        http_operation: { type: 'string', minLength: 1, maxLength: 2048 },
      },
    },
    resource: {
      type: 'object',
      additionalProperties: false,
      properties: {
        identifier: { type: 'string', maxLength: 4096 },
        // As the gateway sends it for a route whose upstream ignores path case.
        case_insensitive: { type: 'boolean' },
      },
    },
    // free-form objects as in the PDP request (docs/api.md §2.12); the fields the evaluator reads are typed
    context: {
      type: 'object',
      additionalProperties: true,
      properties: {
        txn_id: { type: 'string' },
        enforcement_mode: { type: 'string' },
        leaf_capability: { type: 'string' },
        delegation_depth: { type: 'integer', minimum: 0 },
      },
    },
    environment: {
      type: 'object',
      additionalProperties: true,
      properties: { workspace: { type: 'string' }, pep_id: { type: 'string' }, time: { type: 'string' } },
    },
    proposal_id: { ...uuidParam, description: 'evaluate as if this pending proposal were approved' },
  },
}

function paramsOf(...names: string[]): Schema {
  return {
    type: 'object',
    required: names,
    additionalProperties: false,
    properties: Object.fromEntries(names.map((name) => [name, uuidParam])),
  }
}


/**
 * Runs before body validation so that a caller of another org learns nothing, not even whether its
 * body would have been valid (404 `org_not_found`), and a member is told 403 before any 400. A
 * malformed orgId is left to params validation (400 `invalid_id`). Services check again.
 */
function guard(write: boolean) {
  return async (request: FastifyRequest): Promise<void> => {
    const principal = principalOf(request)
    const orgId = (request.params as { orgId?: unknown }).orgId
    if (typeof orgId !== 'string' || !isUuid(orgId)) return
    if (orgId.toLowerCase() !== principal.orgId.toLowerCase()) throw new ServiceError('org_not_found')
    if (write) requireAdmin(principal)
  }
}

const READ = guard(false)
const WRITE = guard(true)

interface ScopeRoute {
  kind: ScopeRef['type']
  path: string
  params: Schema
  ref(params: Record<string, string>): ScopeRef
}

/** The policy service's HTTP surface (docs/api.md §4.6, docs/wire-contract.md §7, §13). Bodies are bare, not enveloped. */
export function policyRoutes(app: FastifyInstance, ctx: PolicyContext): void {
  const tags = ['policies']
  const base = '/v1/orgs/:orgId'

  const scopes: ScopeRoute[] = [
    { kind: 'org', path: `${base}/policy/org`, params: paramsOf('orgId'), ref: () => ({ type: 'org' }) },
    { kind: 'group', path: `${base}/policy/groups/:groupId`, params: paramsOf('orgId', 'groupId'), ref: (p) => ({ type: 'group', id: p.groupId as string }) },
    { kind: 'agent', path: `${base}/policy/agents/:agentId`, params: paramsOf('orgId', 'agentId'), ref: (p) => ({ type: 'agent', id: p.agentId as string }) },
  ]

  for (const scope of scopes) {
    app.get<{ Params: Record<string, string> }>(scope.path, {
      preValidation: READ,
      schema: { tags, summary: `Active ${scope.kind} policy document`, params: scope.params, response: responses({ 200: documentSchema }, [...AUTHED_ERRORS, 404]) },
    }, async (request) => service.getActivePolicy(forRequest(ctx, request), principalOf(request), request.params.orgId as string, scope.ref(request.params)))

    app.get<{ Params: Record<string, string> }>(`${scope.path}/history`, {
      preValidation: READ,
      schema: {
        tags, summary: `Active, superseded and rejected ${scope.kind} policy documents, newest first`, params: scope.params,
        response: responses({ 200: { type: 'array', items: documentSchema } }, [...AUTHED_ERRORS, 404]),
      },
    }, async (request) => service.getPolicyHistory(forRequest(ctx, request), principalOf(request), request.params.orgId as string, scope.ref(request.params)))

    for (const method of ['POST', 'PUT'] as const) {
      app.route<{ Params: Record<string, string>; Body: { yaml_content: string } }>({
        method,
        url: scope.path,
        preValidation: WRITE,
        schema: {
          tags, summary: `Propose a new ${scope.kind} policy version`, params: scope.params, body: proposalBody,
          response: responses({ 201: documentSchema }, [...AUTHED_ERRORS, 404, 413]),
        },
        handler: async (request, reply) => {
          const doc = await service.proposePolicy(forRequest(ctx, request), principalOf(request), request.params.orgId as string, scope.ref(request.params), request.body.yaml_content)
          return reply.code(201).send(doc)
        },
      })
    }
  }

  app.get<{ Params: { orgId: string } }>(`${base}/policy/proposals`, {
    preValidation: READ,
    schema: { tags, summary: 'Pending policy proposals of every scope, newest first', params: paramsOf('orgId'), response: responses({ 200: { type: 'array', items: documentSchema } }, [...AUTHED_ERRORS, 404]) },
  }, async (request) => service.listProposals(forRequest(ctx, request), principalOf(request), request.params.orgId))

  app.post<{ Params: { orgId: string; proposalId: string } }>(`${base}/policy/proposals/:proposalId/approve`, {
    preValidation: WRITE,
    schema: {
      tags, summary: 'Approve a proposal: it becomes active, the previous active document superseded', params: paramsOf('orgId', 'proposalId'),
      response: responses({ 200: documentSchema }, [...AUTHED_ERRORS, 404]),
    },
  }, async (request) => service.approveProposal(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.proposalId))

  app.post<{ Params: { orgId: string; proposalId: string }; Body: { reason: string } }>(`${base}/policy/proposals/:proposalId/reject`, {
    preValidation: WRITE,
    schema: {
      tags, summary: 'Reject a proposal with a reason', params: paramsOf('orgId', 'proposalId'), body: rejectBody,
      response: responses({ 200: documentSchema }, [...AUTHED_ERRORS, 404]),
    },
  }, async (request) => service.rejectProposal(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.proposalId, request.body.reason))

  const agentParams = paramsOf('orgId', 'agentId')
  app.get<{ Params: { orgId: string; agentId: string } }>(`${base}/policy/agents/:agentId/resolved`, {
    preValidation: READ,
    schema: { tags, summary: 'The merged policy of an agent', params: agentParams, response: responses({ 200: resolvedSchema }, [...AUTHED_ERRORS, 404, 409]) },
  }, async (request) => (await service.resolveAgentPolicy(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.agentId)).resolved)

  app.get<{ Params: { orgId: string; agentId: string } }>(`${base}/policy/agents/:agentId/lineage`, {
    preValidation: READ,
    schema: {
      tags, summary: 'Active documents merged for an agent, in applied order (org, groups low to high priority, agent)', params: agentParams,
      response: responses({ 200: { type: 'array', items: lineageEntrySchema } }, [...AUTHED_ERRORS, 404, 409]),
    },
  }, async (request) => (await service.resolveAgentPolicy(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.agentId)).lineage)

  app.post<{ Params: { orgId: string; agentId: string }; Body: SimulateInput }>(`${base}/policy/agents/:agentId/simulate`, {
    preValidation: READ,
    schema: {
      tags, summary: 'Evaluate a request for an agent with the built-in evaluator; writes nothing', params: agentParams, body: simulateBody,
      response: responses({ 200: decisionSchema }, [...AUTHED_ERRORS, 404, 409, 413]),
    },
  }, async (request) => service.simulate(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.agentId, request.body))

  // groups (policy family: bare bodies, docs/wire-contract.md §13)
  const groupTags = ['groups']
  const groupParams = paramsOf('orgId', 'groupId')
  app.get<{ Params: { orgId: string } }>(`${base}/groups`, {
    preValidation: READ,
    schema: { tags: groupTags, summary: 'Groups of the org, highest priority first', params: paramsOf('orgId'), response: responses({ 200: { type: 'array', items: groupSchema } }, [...AUTHED_ERRORS, 404]) },
  }, async (request) => service.listGroups(forRequest(ctx, request), principalOf(request), request.params.orgId))

  app.post<{ Params: { orgId: string }; Body: { name: string; precedence: number } }>(`${base}/groups`, {
    preValidation: WRITE,
    schema: { tags: groupTags, summary: 'Create a group', params: paramsOf('orgId'), body: groupCreateBody, response: responses({ 201: groupSchema }, [...AUTHED_ERRORS, 404, 409, 413]) },
  }, async (request, reply) => reply.code(201).send(await service.createGroup(forRequest(ctx, request), principalOf(request), request.params.orgId, request.body)))

  app.get<{ Params: { orgId: string; groupId: string } }>(`${base}/groups/:groupId`, {
    preValidation: READ,
    schema: { tags: groupTags, summary: 'Read a group', params: groupParams, response: responses({ 200: groupSchema }, [...AUTHED_ERRORS, 404]) },
  }, async (request) => service.getGroup(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.groupId))

  app.put<{ Params: { orgId: string; groupId: string }; Body: { name?: string; precedence?: number } }>(`${base}/groups/:groupId`, {
    preValidation: WRITE,
    schema: { tags: groupTags, summary: 'Rename a group or change its precedence', params: groupParams, body: groupUpdateBody, response: responses({ 200: groupSchema }, [...AUTHED_ERRORS, 404, 409, 413]) },
  }, async (request) => service.updateGroup(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.groupId, request.body))

  app.delete<{ Params: { orgId: string; groupId: string } }>(`${base}/groups/:groupId`, {
    preValidation: WRITE,
    schema: { tags: groupTags, summary: 'Delete a group (its live policy documents are archived)', params: groupParams, response: responses({ 204: { type: 'null' } }, [...AUTHED_ERRORS, 404]) },
  }, async (request, reply) => {
    await service.deleteGroup(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.groupId)
    return reply.code(204).send()
  })

  const memberParams = paramsOf('orgId', 'groupId', 'agentId')
  for (const [method, member] of [['PUT', true], ['DELETE', false]] as const) {
    app.route<{ Params: { orgId: string; groupId: string; agentId: string } }>({
      method,
      url: `${base}/groups/:groupId/agents/:agentId`,
      preValidation: WRITE,
      schema: {
        tags: groupTags, summary: member ? 'Add an agent of the org to a group (idempotent)' : 'Remove an agent from a group (idempotent)',
        params: memberParams, response: responses({ 204: { type: 'null' } }, [...AUTHED_ERRORS, 404]),
      },
      handler: async (request, reply) => {
        await service.setGroupMembership(forRequest(ctx, request), principalOf(request), request.params.orgId, request.params.groupId, request.params.agentId, member)
        return reply.code(204).send()
      },
    })
  }
}
