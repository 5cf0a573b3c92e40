/**
 * Hostile variants of a valid compact JWS, for the hostile-input suites (issue 7): every way a token can
 * try to talk a verifier into trusting it without the issuer's key (`none`, HMAC keyed with the public key,
 * other algorithms, embedded or remote keys, `crit`/`b64`), every way one value can be spelled twice
 * (duplicate JSON members, non-canonical base64url, a malleable Ed25519 S), and plain garbage (empty or
 * extra segments, whitespace, oversize, depth bombs, non-object JSON).
 *
 * The attacker never holds the issuer's key: re-signed variants use keys made here. JSON is written by
 * hand where JSON.stringify cannot express the attack (duplicate members, invalid UTF-8, depth bombs).
 *
 * `expect` says how a strict EdDSA decoder (src/core/badge.ts decodeEdDsaJws) must see the variant:
 * `malformed` (not a well-formed compact JWS of JSON objects, or a forbidden header parameter), `alg`
 * (well-formed, but not EdDSA or not a 64-byte signature) or `signature` (well-formed EdDSA whose
 * signature cannot verify with the issuer's key). `size` marks the oversize variants.
 */
import { createHmac, generateKeyPairSync, sign, type KeyObject } from 'node:crypto'

export type AttackExpectation = 'malformed' | 'alg' | 'signature' | 'size'

export interface HostileJws {
  readonly label: string
  readonly token: string
  readonly expect: AttackExpectation
}

export interface AttackOptions {
  /** The verifier's public key: its bytes (raw, PEM, JWK) are the HMAC secrets of the alg-confusion variants. */
  readonly publicKey: KeyObject
  /** Another valid token of the same issuer, for the signature-transplant variant. */
  readonly otherValid?: string
}

/** Ed25519's group order L = 2^252 + 27742317777372353535851937790883648493. */
const ED25519_L = (1n << 252n) + 27742317777372353535851937790883648493n

const b64 = (bytes: Buffer | string): string => Buffer.from(bytes).toString('base64url')
const json = (value: unknown): string => b64(JSON.stringify(value))

// Attacker keys, made once per process (an RSA key takes a moment).
let attackerKeys: { ed: KeyObject; rsa: KeyObject; ec: KeyObject; edPublicJwk: object; rsaPublicJwk: object } | null = null
function attacker(): NonNullable<typeof attackerKeys> {
  if (attackerKeys === null) {
    const ed = generateKeyPairSync('ed25519')
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    attackerKeys = {
      ed: ed.privateKey,
      rsa: rsa.privateKey,
      ec: ec.privateKey,
      edPublicJwk: ed.publicKey.export({ format: 'jwk' }),
      rsaPublicJwk: rsa.publicKey.export({ format: 'jwk' }),
    }
  }
  return attackerKeys
}

/** Signs `input` with an attacker key for `alg` (EdDSA, RS256, ES256, HS256 with `secret`). */
function signAs(alg: string, input: string, secret?: Buffer | string): string {
  const keys = attacker()
  const data = Buffer.from(input, 'ascii')
  switch (alg) {
    case 'RS256': return b64(sign('sha256', data, keys.rsa))
    case 'ES256': return b64(sign('sha256', data, { key: keys.ec, dsaEncoding: 'ieee-p1363' }))
    case 'HS256': return b64(createHmac('sha256', secret ?? 'secret').update(data).digest())
    default: return b64(sign(null, data, keys.ed))
  }
}

/** Whether the token's signature segment has a `-` or `_` (so the `+/` alphabet variant differs from it). */
export function hasUrlSafeChars(token: string): boolean {
  return /[-_]/.test(token.slice(token.lastIndexOf('.') + 1))
}

/** Splits a compact JWS and decodes its header and payload (the valid token the variants start from). */
export function parseCompact(token: string): { h: string; p: string; s: string; header: Record<string, unknown>; payload: Record<string, unknown> } {
  const [h, p, s] = token.split('.') as [string, string, string]
  return {
    h, p, s,
    header: JSON.parse(Buffer.from(h, 'base64url').toString('utf8')) as Record<string, unknown>,
    payload: JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as Record<string, unknown>,
  }
}

// Flips the unused low bits of a segment's last character: same bytes, a second spelling.
function flipTrailingBits(segment: string): string | null {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
  const unused = segment.length % 4 === 2 ? 4 : segment.length % 4 === 3 ? 2 : 0
  if (unused === 0) return null
  const last = alphabet.indexOf(segment[segment.length - 1] as string)
  return segment.slice(0, -1) + (alphabet[last ^ 1] as string)
}

/** Ed25519 signature R || S with S replaced by S + L (still < 2^256): valid under a lax verifier. */
export function malleateS(signature: Buffer): Buffer | null {
  if (signature.length !== 64) return null
  const sBytes = Buffer.from(signature.subarray(32)).reverse()
  const s = BigInt(`0x${sBytes.toString('hex')}`) + ED25519_L
  if (s >= 1n << 256n) return null
  const out = Buffer.from(s.toString(16).padStart(64, '0'), 'hex').reverse()
  return Buffer.concat([signature.subarray(0, 32), out])
}

/**
 * The hostile variants of `valid` (a compact JWS as its issuer made it). Labels are stable, so a failing
 * case names itself; the order is stable too. Variants that need an EdDSA original (S malleability) are
 * left out for other algorithms.
 */
export function hostileJwsVariants(valid: string, options: AttackOptions): HostileJws[] {
  const { h, p, s, header, payload } = parseCompact(valid)
  const alg = typeof header.alg === 'string' ? header.alg : 'EdDSA'
  const signature = Buffer.from(s, 'base64url')
  const out: HostileJws[] = []
  const add = (label: string, token: string, expect: AttackExpectation): void => { out.push({ label, token, expect }) }
  // A forged header, signed by the attacker with the original algorithm (the verifier's key cannot verify it).
  const forged = (hdr: Record<string, unknown>, pay: string = p): string => {
    const input = `${json(hdr)}.${pay}`
    return `${input}.${signAs(alg, input)}`
  }
  const withHeaderText = (text: string, sig: string = s): string => `${b64(text)}.${p}.${sig}`
  const headerTail = JSON.stringify(header).slice(1) // `"alg":…}` without the opening brace

  // --- algorithm games ---
  add('alg none, empty signature', `${json({ ...header, alg: 'none' })}.${p}.`, 'malformed')
  add('alg none, original signature kept', `${json({ ...header, alg: 'none' })}.${p}.${s}`, 'alg')
  add('alg NONE (case games)', `${json({ ...header, alg: 'NONE' })}.${p}.${s}`, 'alg')
  add('alg missing', `${json(Object.fromEntries(Object.entries(header).filter(([k]) => k !== 'alg')))}.${p}.${s}`, 'alg')
  add('alg as an array ["EdDSA"]', `${json({ ...header, alg: [alg] })}.${p}.${s}`, 'alg')
  add('alg lower case "eddsa"', forged({ ...header, alg: 'eddsa' }), 'alg')
  add('alg "Ed25519" (fully-specified name)', forged({ ...header, alg: 'Ed25519' }), 'alg')
  const { publicKey } = options
  const rawPublic = publicKey.asymmetricKeyType === 'ed25519'
    ? publicKey.export({ format: 'der', type: 'spki' }).subarray(-32)
    : publicKey.export({ format: 'der', type: 'spki' })
  const pem = publicKey.export({ format: 'pem', type: 'spki' }).toString()
  const jwkText = JSON.stringify(publicKey.export({ format: 'jwk' }))
  for (const [name, secret] of [['raw public key bytes', rawPublic], ['public key PEM', pem], ['public key JWK text', jwkText]] as const) {
    const input = `${json({ ...header, alg: 'HS256' })}.${p}`
    add(`alg confusion: HS256 keyed with the ${name}`, `${input}.${signAs('HS256', input, secret)}`, 'alg')
  }
  for (const other of ['RS256', 'ES256', 'EdDSA'].filter((a) => a !== alg)) {
    const input = `${json({ ...header, alg: other })}.${p}`
    add(`alg ${other}, signed by an attacker ${other} key`, `${input}.${signAs(other, input)}`, other === 'EdDSA' ? 'signature' : 'alg')
  }
  add('same header, re-signed by an attacker key', forged(header), 'signature')
  add('enc member (JWE header in a JWS)', forged({ ...header, enc: 'A256GCM' }), 'signature')
  add('zip DEF member', forged({ ...header, zip: 'DEF' }), 'signature')

  // --- embedded and remote keys, processing changes ---
  const k = attacker()
  const ownJwk = alg === 'RS256' ? k.rsaPublicJwk : k.edPublicJwk
  add('embedded jwk of the attacker key', forged({ ...header, jwk: ownJwk }), 'malformed')
  add('jku pointing at an attacker JWKS', forged({ ...header, jku: 'https://attacker.example/jwks.json' }), 'malformed')
  add('jku pointing at loopback (SSRF)', forged({ ...header, jku: 'http://127.0.0.1:1/jwks.json' }), 'malformed')
  add('x5u pointing at an attacker certificate', forged({ ...header, x5u: 'https://attacker.example/cert.pem' }), 'malformed')
  add('x5c with an attacker certificate chain', forged({ ...header, x5c: ['MIIBszCCAVmgAwIBAgIUattacker'] }), 'malformed')
  add('x5t thumbprint', forged({ ...header, x5t: 'dGh1bWJwcmludA' }), 'malformed')
  add('crit naming an unknown extension', forged({ ...header, crit: ['exp'], exp: 1 }), 'malformed')
  add('crit empty array', forged({ ...header, crit: [] }), 'malformed')
  add('b64 false with crit (unencoded payload)', `${json({ ...header, b64: false, crit: ['b64'] })}.${p}.${s}`, 'malformed')
  add('b64 false without crit', forged({ ...header, b64: false }), 'malformed')

  // --- kid games (signed by the attacker: a verifier that looks the kid up must find nothing usable) ---
  for (const [name, kid] of [
    ['path traversal', '../../../../etc/passwd'],
    ['path traversal to /dev/null', '../../../../../dev/null'],
    ['SQL-ish', "' OR '1'='1' --"],
    ['SQL-ish union', 'x" UNION SELECT secret FROM api_keys --'],
    ['a URL', 'https://attacker.example/keys#1'],
    ['NUL byte', 'key\u0000admin'],
    ['empty', ''],
    ['4 KiB long', 'k'.repeat(4096)],
  ] as const) add(`kid ${name}`, forged({ ...header, kid }), 'signature')
  add('kid as a number', forged({ ...header, kid: 1 }), 'malformed')
  add('kid as an object', forged({ ...header, kid: { $ne: null } }), 'malformed')

  // --- duplicate members (the signature covers the bytes; a parser may pick either value) ---
  add('duplicate alg in header: none then the original', withHeaderText(`{"alg":"none",${headerTail}`), 'signature')
  add('duplicate alg in header: original then none', withHeaderText(`{${headerTail.slice(0, -1)},"alg":"none"}`), 'alg')
  add('duplicate kid in header', withHeaderText(`{${headerTail.slice(0, -1)},"kid":"../../attacker"}`), 'signature')
  const payloadTail = JSON.stringify(payload).slice(1, -1)
  const dupPayload = (extra: string): string => b64(`{${payloadTail},${extra}}`)
  add('duplicate sub in payload (last wins)', `${h}.${dupPayload('"sub":"did:web:attacker.example"')}.${s}`, 'signature')
  add('duplicate exp in payload (far future)', `${h}.${dupPayload('"exp":99999999999')}.${s}`, 'signature')
  add('duplicate __proto__ members in payload', `${h}.${dupPayload('"__proto__":{"admin":true},"__proto__":{"admin":true}')}.${s}`, 'signature')

  // --- tampering and transplanting with the original signature ---
  add('payload tampered, original signature', `${h}.${json({ ...payload, admin: true })}.${s}`, 'signature')
  add('payload replaced by an empty object', `${h}.${json({})}.${s}`, 'signature')
  add('header re-serialised with whitespace', `${b64(JSON.stringify(header, null, 1))}.${p}.${s}`, 'signature')
  if (options.otherValid !== undefined) {
    add('signature transplanted from another valid token', `${h}.${p}.${parseCompact(options.otherValid).s}`, 'signature')
  }
  add('signature bit flipped', `${h}.${p}.${b64(Buffer.from(signature.map((b, i) => (i === 5 ? b ^ 1 : b))))}`, 'signature')
  add('signature all zeros', `${h}.${p}.${b64(Buffer.alloc(signature.length))}`, signature.length === 64 ? 'signature' : 'alg')

  // --- non-canonical encodings of the same bytes ---
  add('padded header segment', `${h}${'='.repeat((4 - (h.length % 4)) % 4 || 1)}.${p}.${s}`, 'malformed')
  add('padded signature segment', `${h}.${p}.${s}${'='.repeat((4 - (s.length % 4)) % 4 || 1)}`, 'malformed')
  add('standard base64 alphabet (+/) in the signature', `${h}.${p}.${s.replace(/-/g, '+').replace(/_/g, '/')}`, 'malformed')
  add('standard base64 with padding everywhere', [h, p, s].map((x) => Buffer.from(x, 'base64url').toString('base64')).join('.'), 'malformed')
  const flippedSig = flipTrailingBits(s)
  if (flippedSig !== null) add('signature with non-zero trailing bits (same bytes)', `${h}.${p}.${flippedSig}`, 'malformed')
  const flippedHeader = flipTrailingBits(h)
  if (flippedHeader !== null) add('header with non-zero trailing bits (same bytes)', `${flippedHeader}.${p}.${s}`, 'malformed')
  const malleable = malleateS(signature)
  if (malleable !== null) add('Ed25519 S + L (non-canonical scalar, same R)', `${h}.${p}.${b64(malleable)}`, 'signature')

  // --- signature length ---
  add('signature 63 bytes', `${h}.${p}.${b64(signature.subarray(0, 63))}`, 'alg')
  add('signature 65 bytes', `${h}.${p}.${b64(Buffer.concat([signature, Buffer.from([0])]))}`, 'alg')
  add('signature 128 bytes (doubled)', `${h}.${p}.${b64(Buffer.concat([signature, signature]))}`, 'alg')
  add('signature 1 byte', `${h}.${p}.AA`, 'alg')

  // --- segments ---
  add('empty token', '', 'malformed')
  add('only dots', '..', 'malformed')
  add('empty header segment', `.${p}.${s}`, 'malformed')
  add('empty payload segment', `${h}..${s}`, 'malformed')
  add('empty signature segment', `${h}.${p}.`, 'malformed')
  add('two segments', `${h}.${p}`, 'malformed')
  add('four segments', `${h}.${p}.${s}.${s}`, 'malformed')
  add('five segments (JWE shape)', `${h}.${p}.${s}.${p}.${s}`, 'malformed')
  add('trailing dot', `${valid}.`, 'malformed')
  add('JSON serialisation instead of compact', JSON.stringify({ protected: h, payload: p, signature: s }), 'malformed')

  // --- whitespace and unicode ---
  add('leading space', ` ${valid}`, 'malformed')
  add('trailing newline', `${valid}\n`, 'malformed')
  add('tab inside the payload segment', `${h}.${p.slice(0, 4)}\t${p.slice(4)}.${s}`, 'malformed')
  add('space after the first dot', `${h}. ${p}.${s}`, 'malformed')
  add('no-break space (U+00A0) inside', `${h}.${p}\u00a0.${s}`, 'malformed')
  add('zero-width space (U+200B) inside', `${h}\u200b.${p}.${s}`, 'malformed')
  add('fullwidth full stop (U+FF0E) as separator', `${h}\uff0e${p}\uff0e${s}`, 'malformed')
  add('fullwidth letters in the header', `${h.replace(/[A-Za-z]/, (c) => String.fromCharCode(c.charCodeAt(0) + 0xfee0))}.${p}.${s}`, 'malformed')
  add('NUL byte appended', `${valid}\u0000`, 'malformed')

  // --- JSON that is not an object, or not JSON ---
  for (const [name, text] of [['an array', '[]'], ['a string', '"EdDSA"'], ['null', 'null'], ['a number', '1'], ['true', 'true']] as const) {
    add(`header is ${name}`, `${b64(text)}.${p}.${s}`, 'malformed')
    add(`payload is ${name}`, `${h}.${b64(text)}.${s}`, 'malformed')
  }
  add('header is not JSON', `${b64('alg=EdDSA')}.${p}.${s}`, 'malformed')
  add('header with invalid UTF-8', `${b64(Buffer.concat([Buffer.from('{"alg":"EdDSA","x":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]))}.${p}.${s}`, 'malformed')
  add('payload with invalid UTF-8 (overlong encoding)', `${h}.${b64(Buffer.concat([Buffer.from('{"sub":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}')]))}.${s}`, 'malformed')
  add('header with a trailing comma', withHeaderText(`{${headerTail.slice(0, -1)},}`), 'malformed')

  // --- depth bombs and oversize ---
  const depth = 4000
  add(`header depth bomb (${depth} nested arrays)`, `${b64(`{"alg":"EdDSA","x":${'['.repeat(depth)}${']'.repeat(depth)}}`)}.${p}.${s}`, 'signature')
  add(`payload depth bomb (${depth} nested arrays in an object)`, `${h}.${b64(`{"a":${'['.repeat(depth)}${']'.repeat(depth)}}`)}.${s}`, 'signature')
  add('17 KiB token (padding claim)', `${h}.${json({ ...payload, pad: 'x'.repeat(17 * 1024) })}.${s}`, 'size')
  add('1 MiB header segment', `${b64(`{"alg":"EdDSA","pad":"${'x'.repeat(768 * 1024)}"}`)}.${p}.${s}`, 'size')
  return out
}
