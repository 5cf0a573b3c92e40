import type { FastifyInstance } from 'fastify'
import { Webhook, WebhookVerificationError } from 'svix'
import { ServiceError } from '../../core/errors.js'
import type { Database } from '../../db/database.js'
import { bodyAjv, validationMessage } from '../body-validation.js'
import { responses } from '../schemas.js'
import type { ApiKeyAuthenticator } from '../services/credentials.js'
import { applyIdentityEvent } from '../services/identity-sync.js'

export interface IdentityContext {
  readonly db: Database
  /** CLERK_WEBHOOK_SECRET (Svix `whsec_…`); without it the webhook answers 503. */
  readonly webhookSecret: string | null
  /** This instance's key cache, emptied of changed keys at once (other instances hear the NOTIFY). */
  readonly apiKeys?: ApiKeyAuthenticator
}

const SVIX_HEADERS = ['svix-id', 'svix-timestamp', 'svix-signature'] as const
const MAX_DELIVERY_ID = 200

/** Documentation of the Clerk event envelope (see identity-sync.ts for the fields read). */
const eventSchema = {
  type: 'object',
  description: 'A Clerk event delivered by Svix: user.*, organization.*, organizationMembership.*',
  required: ['type', 'data'],
  additionalProperties: true,
  properties: {
    type: { type: 'string', examples: ['user.created', 'organizationMembership.deleted'] },
    object: { type: 'string' },
    data: { type: 'object', additionalProperties: true },
  },
}

const svixHeaders = {
  type: 'object',
  properties: {
    'svix-id': { type: 'string', description: 'delivery id; a delivery is applied once, replays get 400' },
    'svix-timestamp': { type: 'string', description: 'Unix seconds; refused beyond 5 minutes of skew' },
    'svix-signature': { type: 'string', description: 'space-separated `v1,<base64 HMAC-SHA256>` signatures' },
  },
}

const receivedSchema = {
  type: 'object',
  required: ['received'],
  properties: { received: { type: 'boolean' }, ignored: { type: 'boolean' } },
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | null {
  const value = headers[name]
  return typeof value === 'string' && value !== '' ? value : null
}

/** Svix's own messages are terse; say which check failed so the sender can fix it. */
function verificationMessage(error: WebhookVerificationError): string {
  if (/timestamp too (old|new)/i.test(error.message)) return 'The svix-timestamp is more than 5 minutes from the server clock.'
  if (/headers/i.test(error.message)) return 'The svix-id, svix-timestamp or svix-signature header is malformed.'
  return 'The webhook signature does not match the body.'
}

/**
 * `POST /v1/webhooks/identity`, the identity provider's user-sync webhook (docs/wire-contract.md §2). The Svix
 * signature authenticates it, so it takes no credentials; it is signed over the exact body bytes, so the
 * route lives in its own encapsulated context whose JSON parser keeps the raw text (the app's parser
 * elsewhere is untouched).
 */
export function identityRoutes(app: FastifyInstance, ctx: IdentityContext): void {
  // Built once: the secret does not change while the process runs.
  const webhook = ctx.webhookSecret === null ? null : new Webhook(ctx.webhookSecret)
  const validateEvent = bodyAjv().compile(eventSchema)

  void app.register(async (scope) => {
    scope.removeContentTypeParser('application/json')
    scope.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => done(null, body))

    scope.post('/v1/webhooks/identity', {
      config: { auth: 'public' },
      schema: {
        tags: ['identity'],
        summary: 'Receive user, organization and membership events from the identity provider (Svix-signed)',
        headers: svixHeaders,
        body: eventSchema,
        response: responses({ 200: receivedSchema }, [400, 413, 415, 429, 500, 503]),
      },
      // The body is still raw text here, and nothing of it may be acted on before the signature over
      // those exact bytes has been checked: the event is checked against eventSchema after that.
      validatorCompiler: () => () => true,
    }, async (request) => {
      if (webhook === null) throw new ServiceError('service_unavailable', 'The identity webhook is not configured (CLERK_WEBHOOK_SECRET).')
      const headers = request.headers
      const missing = SVIX_HEADERS.filter((name) => header(headers, name) === null)
      if (missing.length > 0) throw new ServiceError('invalid_request', `Missing webhook header(s): ${missing.join(', ')}.`)
      const deliveryId = header(headers, 'svix-id') as string
      if (deliveryId.length > MAX_DELIVERY_ID) throw new ServiceError('invalid_request', 'The svix-id header is too long.')
      const raw = typeof request.body === 'string' ? request.body : ''
      let event: unknown
      try {
        // Only the svix-* headers are passed: the library would otherwise also accept webhook-* names.
        event = webhook.verify(raw, {
          'svix-id': deliveryId,
          'svix-timestamp': header(headers, 'svix-timestamp') as string,
          'svix-signature': header(headers, 'svix-signature') as string,
        })
      } catch (error) {
        if (error instanceof WebhookVerificationError) throw new ServiceError('invalid_request', verificationMessage(error), undefined, { cause: error })
        // A correctly signed body that is not JSON.
        throw new ServiceError('invalid_json', 'The signed webhook body is not valid JSON.', undefined, { cause: error })
      }
      if (!validateEvent(event)) throw new ServiceError('invalid_request', validationMessage(validateEvent.errors))
      const result = await applyIdentityEvent(request.db, deliveryId, event)
      for (const key of result.keys) {
        ctx.apiKeys?.evict(key.keyId)
        // The audit line of every key the identity provider's change revoked or re-capped.
        request.log.warn({ keyId: key.keyId, orgId: key.orgId, reason: key.reason, event: (event as { type: string }).type }, 'api key access changed')
      }
      return result.ignored ? { received: true, ignored: true } : { received: true }
    })
  })
}
