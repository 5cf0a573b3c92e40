/**
 * Test data for the integration tests: Agent Cards (docs/api.md §2.13) and Ed25519 identities in every form the
 * registry accepts (JWK, multibase, did:key).
 */
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { didKeyVerificationMethodId, encodeDidKey, publicKeyToMultibase } from '../../src/core/did-key.js'

/** A card with every field of docs/api.md §2.13, required and optional. */
export function fullAgentCard(): Record<string, unknown> {
  return {
    name: 'Weather Agent',
    description: 'Answers questions about the weather.',
    url: 'https://weather.example.com/a2a',
    version: '1.2.0',
    provider: { organization: 'Example Corp', url: 'https://example.com', contactEmail: 'ops@example.com' },
    documentationUrl: 'https://weather.example.com/docs',
    capabilities: { streaming: true, pushNotifications: false, stateTransitionHistory: true },
    authentication: { schemes: ['bearer', 'oauth2'], credentials: 'header' },
    supportsAuthenticatedExtendedCard: true,
    extendedCard: { url: 'https://weather.example.com/card/extended', authentication: { schemes: ['bearer'] } },
    defaultInputModes: ['text', 'data'],
    defaultOutputModes: ['text'],
    skills: [
      {
        id: 'current-weather',
        name: 'Current weather',
        description: 'Reports the current weather for a place.',
        tags: ['weather', 'now'],
        examples: ['What is the weather in Paris?'],
        inputModes: ['text'],
        outputModes: ['text', 'data'],
      },
      {
        id: 'forecast',
        name: 'Forecast',
        description: 'Forecasts the next days.',
      },
    ],
  }
}

/** The smallest valid card. */
export function minimalAgentCard(): Record<string, unknown> {
  return {
    name: 'Echo',
    description: 'Repeats what it is told.',
    url: 'https://echo.example.com',
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications: false },
    skills: [{ id: 'echo', name: 'Echo', description: 'Echoes input.' }],
    defaultInputModes: ['text'],
    defaultOutputModes: ['text'],
  }
}

export interface Ed25519Identity {
  readonly privateKey: KeyObject
  readonly publicKey: KeyObject
  /** The 32 raw public key bytes (the last 32 bytes of the SPKI DER). */
  readonly raw: Uint8Array
  readonly jwk: { kty: 'OKP'; crv: 'Ed25519'; x: string }
  readonly multibase: string
  readonly didKey: string
  /** `did:key:z…#z…`, the id of the did:key document's single verification method. */
  readonly didKeyKid: string
}

export function ed25519Identity(): Ed25519Identity {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519')
  const der = publicKey.export({ format: 'der', type: 'spki' })
  const raw = new Uint8Array(der.subarray(der.length - 32))
  const multibase = publicKeyToMultibase(raw)
  const didKey = encodeDidKey(raw)
  return {
    privateKey,
    publicKey,
    raw,
    jwk: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(raw).toString('base64url') },
    multibase,
    didKey,
    didKeyKid: `${didKey}#${multibase}`,
  }
}

/** This registry's did:web for an agent id, with the test issuer `http://registry.test:8080`. */
export function registryDidWeb(agentId: string): string {
  return `did:web:registry.test%3A8080:agents:${agentId}`
}

/** A fresh Ed25519 key with its raw public key, did:key and that DID's verification method id. */
export function didKeyPair(): { privateKey: KeyObject; raw: Uint8Array; did: string; kid: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519')
  const der = publicKey.export({ format: 'der', type: 'spki' })
  const raw = new Uint8Array(der.subarray(der.length - 32))
  const did = encodeDidKey(raw)
  return { privateKey, raw, did, kid: didKeyVerificationMethodId(did) }
}

/** base64url of a value's JSON: a JWS header or payload segment. */
export const b64json = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
