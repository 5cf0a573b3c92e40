import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ServiceError } from '../../core/errors.js'
import type { Database } from '../../db/database.js'
import { principalOf } from '../plugins/auth.js'
import { ROUTINE_POLL } from '../plugins/request-log.js'
import { AUTHED_ERRORS, responses, uuidParam } from '../schemas.js'
import { TRUST_CODES } from '../../core/trust-level.js'
import { isUuid } from '../../core/uuid.js'
import { policyContext, type BuiltBundle } from '../../bundles/builder.js'
import type { BundleCache } from '../../bundles/cache.js'
import { requireOrgMember } from '../services/policies.js'

export interface BundleContext {
  readonly db: Database
  readonly registryDidHost: string
  /** The org bundles; in the appliance the gateway's snapshot shares them. The composition runs their LISTEN. */
  readonly cache: BundleCache
}

type Schema = Record<string, unknown>

const TARBALL_TYPES = new Set(['application/gzip', 'application/x-gzip', 'application/vnd.openpolicyagent.bundle'])

const agentSummary = {
  id: { type: 'string', format: 'uuid' },
  name: { type: 'string' },
  trust_level: { type: 'string', enum: [...TRUST_CODES] },
  group_ids: { type: 'array', items: { type: 'string' } },
}

// A loose document schema for the pending proposals: the policy routes define the full one.
const documentSchema: Schema = { type: 'object', additionalProperties: true }

const contextSchema: Schema = {
  type: 'object',
  required: ['org_id', 'agents', 'groups', 'active_policies', 'pending_proposals'],
  properties: {
    org_id: { type: 'string', format: 'uuid' },
    agents: {
      type: 'array',
      items: { type: 'object', required: ['id', 'name', 'did', 'trust_level', 'group_ids'], properties: { ...agentSummary, did: { type: 'string' } } },
    },
    groups: {
      type: 'array',
      items: { type: 'object', required: ['id', 'name', 'precedence'], properties: { id: { type: 'string' }, name: { type: 'string' }, precedence: { type: 'integer' } } },
    },
    active_policies: {
      type: 'array',
      items: {
        type: 'object',
        required: ['id', 'scope_type', 'scope_id', 'version', 'yaml_content'],
        properties: {
          id: { type: 'string' },
          scope_type: { type: 'string', enum: ['org', 'group', 'agent'] },
          scope_id: { type: 'string' },
          version: { type: 'integer' },
          yaml_content: { type: 'string' },
        },
      },
    },
    pending_proposals: { type: 'array', items: documentSchema },
  },
}

// Documentation only: the body is sent pre-serialized (canonical bytes), so this never filters it.
const bundleSchema: Schema = {
  type: 'object',
  description: 'JSON form; with Accept: application/gzip an OPA bundle tarball (.manifest, data.json, service/policy.rego) instead',
  required: ['modules', 'data', 'revision'],
  properties: {
    modules: { type: 'object', additionalProperties: { type: 'string' } },
    data: {
      type: 'object',
      properties: {
        config: { type: 'object', additionalProperties: true },
        resolved_policies: { type: 'object', additionalProperties: true },
        policy_lineage: { type: 'object', additionalProperties: true },
        agents: { type: 'object', additionalProperties: true },
      },
    },
    revision: { type: 'string', description: 'sha256 hex of the canonical JSON of {modules, data}; also the ETag' },
  },
}

const workspaceParams = {
  type: 'object',
  required: ['workspace'],
  additionalProperties: false,
  properties: { workspace: uuidParam },
}


// docs/api.md §5 rule 3: these endpoints take the key in `X-Service-Registry-Key` only. The global hook has
// already authenticated whichever header came; this refuses a request that came with a bearer only
// (or a session token) before anything else is looked at.
export async function registryKeyOnly(request: FastifyRequest): Promise<void> {
  const header = request.headers['x-service-registry-key']
  if (typeof header !== 'string' || header.trim() === '' || principalOf(request).kind !== 'api_key') {
    throw new ServiceError('unauthorized', 'This endpoint takes an API key in the X-Service-Registry-Key header.')
  }
}

// The workspace of a bundle request must be the key's own org: another org's workspace is 404 before
// the bundle is even looked at; a malformed id is left to params validation (400 invalid_id).
async function ownWorkspace(request: FastifyRequest): Promise<void> {
  const workspace = (request.params as { workspace?: unknown }).workspace
  if (typeof workspace === 'string' && isUuid(workspace)) requireOrgMember(principalOf(request), workspace)
}

function wantsTarball(accept: string | undefined): boolean {
  if (accept === undefined) return false
  return accept.split(',').some((part) => {
    const [type, ...params] = part.split(';').map((s) => s.trim().toLowerCase())
    const refused = params.some((p) => /^q=0(\.0*)?$/.test(p))
    return type !== undefined && TARBALL_TYPES.has(type) && !refused
  })
}

// If-None-Match may list several tags, weak or strong; any match means the client is current.
function notModified(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false
  return ifNoneMatch.split(',').some((tag) => {
    const trimmed = tag.trim()
    return trimmed === '*' || trimmed === etag || trimmed === `W/${etag}`
  })
}

function sendBundle(request: FastifyRequest, reply: FastifyReply, bundle: BuiltBundle): FastifyReply {
  const etag = `"${bundle.revision}"`
  void reply.header('etag', etag).header('cache-control', 'no-cache').header('vary', 'Accept')
  if (notModified(request.headers['if-none-match'], etag)) return reply.code(304).send()
  if (wantsTarball(request.headers.accept)) return reply.type('application/gzip').send(bundle.tarball())
  return reply.type('application/json; charset=utf-8').send(bundle.json())
}

/** SDK policy context and policy bundles (docs/api.md §2.11, §4.7; docs/wire-contract.md §8). Bodies are bare. */
export function bundleRoutes(app: FastifyInstance, ctx: BundleContext): void {
  const tags = ['bundles']
  app.get('/v1/sdk/policy-context', {
    onRequest: registryKeyOnly,
    schema: {
      tags, summary: "Agents, groups, active policies and pending proposals of the key's org (X-Service-Registry-Key only)",
      response: responses({ 200: contextSchema }, [401, 429, 500]),
    },
  }, async (request) => policyContext(ctx, principalOf(request).orgId))

  app.get<{ Params: { workspace: string } }>('/v1/bundles/:workspace', {
    // A gateway's bundle pull, on SERVICE_BUNDLE_POLL_INTERVAL.
    config: { ...ROUTINE_POLL },
    onRequest: registryKeyOnly,
    preValidation: ownWorkspace,
    schema: {
      tags,
      summary: "Policy bundle of the key's own workspace: JSON, or an OPA bundle tarball with Accept: application/gzip (X-Service-Registry-Key only)",
      params: workspaceParams,
      produces: ['application/json', 'application/gzip'],
      response: {
        ...responses({ 200: bundleSchema }, [...AUTHED_ERRORS, 404, 409]),
        304: { type: 'null', description: 'If-None-Match matched the current revision' },
      },
    },
  }, async (request, reply) => {
    const org = requireOrgMember(principalOf(request), request.params.workspace)
    return sendBundle(request, reply, await ctx.cache.get(org))
  })
}
