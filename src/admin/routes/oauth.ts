/**
 * The OAuth front door of the authority (docs/api.md §4.10): RFC 8414 metadata, the authorization
 * endpoint that only refuses, and the token endpoint (client_credentials with private_key_jwt). The two
 * OAuth endpoints live in an encapsulated scope: only there is a form body accepted, and only there do
 * errors take the OAuth shape.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { exchangeClientCredentials, tokenEndpointUrl, type ClientCredentialsContext, type TokenForm } from '../../authority/client-credentials.js'
import { TRUST_CODES } from '../../core/trust-level.js'
import { OAuthError } from '../../core/oauth-error.js'
import { VERBATIM } from '../../core/safe-text.js'
import { registerOAuthErrorHandling, setNoStore } from '../plugins/errors.js'
import { forRequest } from '../plugins/audit.js'

/** A token request is a handful of short parameters and one assertion of at most 8 KiB. */
export const TOKEN_BODY_LIMIT_BYTES = 16 * 1024
const FORM_MEDIA_TYPE = 'application/x-www-form-urlencoded'

const oauthErrorSchema = {
  type: 'object',
  required: ['error', 'error_description'],
  properties: {
    error: { type: 'string', description: 'RFC 6749 §5.2 / RFC 8707 error code' },
    error_description: { type: 'string' },
  },
}

const tokenSchema = {
  type: 'object',
  required: ['access_token', 'token_type', 'expires_in', 'scope'],
  properties: {
    access_token: { type: 'string', description: 'an IAL-1 badge (JWT)' },
    token_type: { type: 'string', enum: ['Bearer'] },
    expires_in: { type: 'integer' },
    scope: { type: 'string', description: 'the granted scope: the badge\'s trust level (trust:<code>) and audience names' },
  },
}

const oauthErrors = (statuses: readonly number[]): Record<number, typeof oauthErrorSchema> =>
  Object.fromEntries(statuses.map((status) => [status, oauthErrorSchema]))

// Every parameter but `resource` is typed string: one given twice arrives as an array and is refused.
const tokenFormSchema = {
  type: 'object',
  properties: {
    grant_type: { type: 'string', description: 'client_credentials' },
    client_assertion_type: { type: 'string', description: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer' },
    client_assertion: { type: 'string', description: 'compact JWS signed with an authentication key of the agent\'s DID', [VERBATIM]: true },
    client_id: { type: 'string', description: 'optional; the assertion\'s iss when given' },
    scope: { type: 'string', description: 'trust:<REG|DV|OV|EV> and audience names, space-separated' },
    resource: { type: ['string', 'array'], items: { type: 'string' }, description: 'RFC 8707 resource indicator; may repeat' },
  },
  additionalProperties: { type: 'string' },
}

const FORM_TEXT = /^[\x21-\x7e]*$/

function decodeComponent(text: string): string {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '))
  } catch {
    throw new OAuthError('invalid_request', 'The form holds a malformed percent-encoding or bytes that are not UTF-8.')
  }
}

/**
 * A strict `application/x-www-form-urlencoded` reader: ASCII only, every percent-escape well formed
 * and UTF-8. A parameter given once is a string, repeated ones become an array in order.
 */
export function parseTokenForm(text: string): Record<string, string | string[]> {
  if (!FORM_TEXT.test(text)) throw new OAuthError('invalid_request', 'The form must be printable ASCII, everything else percent-encoded.')
  const form = Object.create(null) as Record<string, string | string[]>
  for (const pair of text.split('&')) {
    if (pair === '') continue
    const eq = pair.indexOf('=')
    const name = decodeComponent(eq === -1 ? pair : pair.slice(0, eq))
    const value = decodeComponent(eq === -1 ? '' : pair.slice(eq + 1))
    const prior = form[name]
    form[name] = prior === undefined ? value : Array.isArray(prior) ? [...prior, value] : [prior, value]
  }
  return form
}

const CHARSET = /;\s*charset\s*=\s*"?([^";\s]*)"?/i

function checkCharset(request: FastifyRequest): void {
  const charset = CHARSET.exec(request.headers['content-type'] ?? '')?.[1]
  if (charset !== undefined && charset.toLowerCase() !== 'utf-8') {
    throw new OAuthError('invalid_request', 'The form must be UTF-8.', { status: 415 })
  }
}

/** The OAuth endpoints; registered as a plugin so that their parser and error handler stay theirs. */
function oauthEndpoints(ctx: ClientCredentialsContext) {
  return async (scope: FastifyInstance): Promise<void> => {
    // Only forms here: the app's JSON parser is not inherited, so a JSON body is 415.
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser(FORM_MEDIA_TYPE, { parseAs: 'string', bodyLimit: TOKEN_BODY_LIMIT_BYTES }, (request, body, done) => {
      try {
        checkCharset(request)
        done(null, parseTokenForm(body as string))
      } catch (error) {
        done(error as Error, undefined)
      }
    })
    registerOAuthErrorHandling(scope)

    scope.get('/oauth/authorize', {
      config: { auth: 'public' },
      schema: {
        tags: ['oauth'],
        summary: 'Public: the authorization endpoint, which refuses every request (no client has a redirect URI)',
        description: 'Listed in the metadata because OAuth clients require the member; use the token endpoint.',
        response: oauthErrors([400, 429, 500]),
      },
    }, async () => {
      throw new OAuthError('unsupported_response_type',
        'This authority issues tokens only at its token endpoint (client_credentials with private_key_jwt); there is no authorization-code flow.')
    })

    scope.post<{ Body: TokenForm | undefined }>('/oauth/token', {
      // The signed client assertion is the credential (docs/api.md §4.10).
      config: { auth: 'public' },
      bodyLimit: TOKEN_BODY_LIMIT_BYTES,
      schema: {
        tags: ['oauth'],
        summary: 'Public: a badge as an OAuth access token for a client assertion (client_credentials, private_key_jwt)',
        consumes: [FORM_MEDIA_TYPE],
        body: tokenFormSchema,
        response: { 200: tokenSchema, ...oauthErrors([400, 413, 415, 429, 500, 503]) },
      },
    }, async (request, reply) => {
      setNoStore(reply)
      return exchangeClientCredentials(forRequest(ctx, request), {
        form: request.body ?? {},
        authorizationHeader: request.headers.authorization !== undefined,
      })
    })
  }
}

/** RFC 8414 metadata, and the OAuth endpoints it names. */
export async function oauthRoutes(app: FastifyInstance, ctx: ClientCredentialsContext): Promise<void> {
  const issuer = ctx.issuer
  const metadata = Object.freeze({
    issuer,
    authorization_endpoint: `${issuer}/oauth/authorize`,
    token_endpoint: tokenEndpointUrl(issuer),
    jwks_uri: `${issuer}/.well-known/jwks.json`,
    response_types_supported: [],
    grant_types_supported: ['client_credentials'],
    token_endpoint_auth_methods_supported: ['private_key_jwt'],
    token_endpoint_auth_signing_alg_values_supported: ['EdDSA'],
    scopes_supported: TRUST_CODES.slice(1).map((code) => `trust:${code}`),
  })
  const stringArray = { type: 'array', items: { type: 'string' } }
  app.get('/.well-known/oauth-authorization-server', {
    config: { auth: 'public' },
    schema: {
      tags: ['oauth'],
      summary: 'Public: OAuth 2.0 authorization server metadata (RFC 8414)',
      response: {
        200: {
          type: 'object',
          required: ['issuer', 'authorization_endpoint', 'token_endpoint', 'jwks_uri', 'response_types_supported'],
          properties: {
            issuer: { type: 'string' },
            authorization_endpoint: { type: 'string' },
            token_endpoint: { type: 'string' },
            jwks_uri: { type: 'string' },
            response_types_supported: stringArray,
            grant_types_supported: stringArray,
            token_endpoint_auth_methods_supported: stringArray,
            token_endpoint_auth_signing_alg_values_supported: stringArray,
            scopes_supported: stringArray,
          },
        },
      },
    },
  }, async (_request, reply) => {
    // Read by browser-based clients too; it holds nothing that is not public.
    void reply.header('access-control-allow-origin', '*').header('cache-control', 'public, max-age=300')
    return metadata
  })
  await app.register(oauthEndpoints(ctx))
}
