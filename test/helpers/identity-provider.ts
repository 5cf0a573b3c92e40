/**
 * A stand-in for the identity provider (Clerk): an RS256 key pair whose public half is served as a
 * JWKS on 127.0.0.1 (port 0), session tokens signed with it, and Svix-signed webhook deliveries.
 */
import { randomBytes, randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, type CryptoKey, type JWTPayload } from 'jose'
import { Webhook } from 'svix'

export const TEST_ISSUER = 'https://clerk.test.example'
const KID = 'test-key-1'

export interface SignOptions {
  /** `iss`; null leaves it out. Default TEST_ISSUER. */
  issuer?: string | null
  /** `exp` in Unix seconds. Default now + 10 minutes. */
  exp?: number
  /** Sign with a key the JWKS does not publish (same kid). */
  foreignKey?: boolean
}

export interface WebhookDelivery {
  readonly headers: Record<string, string>
  readonly body: string
  readonly id: string
}

export interface IdentityProvider {
  readonly jwksUrl: string
  /** SPKI PEM of the signing key, as Clerk shows it for CLERK_JWT_KEY. */
  readonly publicKeyPem: string
  readonly webhookSecret: string
  /** How many times the JWKS was fetched. */
  jwksFetches(): number
  signSession(claims: JWTPayload, options?: SignOptions): Promise<string>
  /** An HS256 token keyed with the given bytes (must be refused). */
  signHs256(claims: JWTPayload, secret: Uint8Array): Promise<string>
  /** An unsigned `alg: none` token (must be refused). */
  unsignedToken(claims: JWTPayload): string
  signWebhook(payload: unknown, options?: { id?: string; timestamp?: Date; secret?: string }): WebhookDelivery
}

interface Teardown {
  teardown(fn: () => unknown): void
}

function b64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url')
}

export async function startIdentityProvider(t: Teardown): Promise<IdentityProvider> {
  const { publicKey, privateKey } = await generateKeyPair('RS256', { extractable: true })
  const other = await generateKeyPair('RS256')
  const jwk = { ...(await exportJWK(publicKey)), kid: KID, alg: 'RS256', use: 'sig' }
  let fetches = 0
  const server = createServer((request, response) => {
    if (request.url === '/.well-known/jwks.json') {
      fetches += 1
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [jwk] }))
      return
    }
    response.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const { port } = server.address() as AddressInfo
  const webhookSecret = `whsec_${randomBytes(24).toString('base64')}`

  const signSession = async (claims: JWTPayload, options: SignOptions = {}): Promise<string> => {
    const now = Math.floor(Date.now() / 1000)
    const jwt = new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: KID, typ: 'JWT' }).setIssuedAt(now - 5)
      .setExpirationTime(options.exp ?? now + 600)
    const issuer = options.issuer === undefined ? TEST_ISSUER : options.issuer
    if (issuer !== null) jwt.setIssuer(issuer)
    const key: CryptoKey = options.foreignKey === true ? other.privateKey : privateKey
    return jwt.sign(key)
  }

  return {
    jwksUrl: `http://127.0.0.1:${port}/.well-known/jwks.json`,
    publicKeyPem: await exportSPKI(publicKey),
    webhookSecret,
    jwksFetches: () => fetches,
    signSession,
    signHs256: (claims, secret) => new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: KID })
      .setIssuer(TEST_ISSUER).setIssuedAt().setExpirationTime('10m').sign(secret),
    unsignedToken: (claims) => {
      const now = Math.floor(Date.now() / 1000)
      return `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url({ iss: TEST_ISSUER, iat: now, exp: now + 600, ...claims })}.`
    },
    signWebhook: (payload, options = {}) => {
      const id = options.id ?? `msg_${randomUUID().replace(/-/g, '')}`
      const timestamp = options.timestamp ?? new Date()
      const body = JSON.stringify(payload)
      const signature = new Webhook(options.secret ?? webhookSecret).sign(id, timestamp, body)
      return {
        id,
        body,
        headers: {
          'svix-id': id,
          'svix-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
          'svix-signature': signature,
        },
      }
    },
  }
}

/** Clerk-shaped event payloads (only the fields the service reads, plus a few it ignores). */
export const clerkEvents = {
  user: (type: 'user.created' | 'user.updated', id: string, email: string, first: string, last: string) => ({
    type,
    object: 'event',
    data: {
      id,
      object: 'user',
      first_name: first,
      last_name: last,
      primary_email_address_id: `idn_${id}_primary`,
      email_addresses: [
        { id: `idn_${id}_other`, email_address: `other-${email}` },
        { id: `idn_${id}_primary`, email_address: email },
      ],
    },
  }),
  userDeleted: (id: string) => ({ type: 'user.deleted', object: 'event', data: { id, object: 'user', deleted: true } }),
  organization: (type: 'organization.created' | 'organization.updated', id: string, name: string) => ({
    type,
    object: 'event',
    data: { id, object: 'organization', name, slug: name.toLowerCase().replace(/\s+/g, '-') },
  }),
  organizationDeleted: (id: string) => ({ type: 'organization.deleted', object: 'event', data: { id, object: 'organization', deleted: true } }),
  membership: (
    type: 'organizationMembership.created' | 'organizationMembership.updated' | 'organizationMembership.deleted',
    orgId: string, userId: string, role = 'org:member', orgName = 'Synced org',
  ) => ({
    type,
    object: 'event',
    data: {
      id: `orgmem_${orgId}_${userId}`,
      object: 'organization_membership',
      role,
      organization: { id: orgId, name: orgName, object: 'organization' },
      public_user_data: { user_id: userId, first_name: 'Pat', last_name: 'Doe', identifier: `${userId}@example.com` },
    },
  }),
}
