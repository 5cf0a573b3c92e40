/**
 * The one canonical form of a request target, computed before any stage runs: everything decides on it and
 * the upstream receives it, since deciding on one spelling and forwarding another is how a DENY gets walked
 * around (`/public/../admin`, `/%61dmin`). The rules: docs/gateway-request-handling.md, "The request target".
 */

/** Where {@link canonicalTarget} writes its result (the gateway's per-request object). */
export interface CanonicalParts {
  /** The canonical path: starts with `/`, no dot segments, no empty segments except a trailing `/`. */
  path: string
  /** `''` or the query with its leading `?`, as sent. */
  query: string
}

// Classes of the printable ASCII characters in a path.
const REFUSE = 0
const PLAIN = 1
const ENCODE = 2
const SLASH = 3
const DOT = 4
const PERCENT = 5

const PATH_CLASS = new Uint8Array(128)
for (let c = 0x21; c < 0x7f; c++) PATH_CLASS[c] = ENCODE
for (const c of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_~!$&'()*+,=:@") PATH_CLASS[c.charCodeAt(0)] = PLAIN
PATH_CLASS[0x2f] = SLASH
PATH_CLASS[0x2e] = DOT
PATH_CLASS[0x25] = PERCENT
// `;` starts path parameters (Tomcat, Jetty and Spring strip them, others do not); `\` is a separator
// on some servers; `#` starts a fragment, which a client never sends.
PATH_CLASS[0x3b] = REFUSE
PATH_CLASS[0x5c] = REFUSE
PATH_CLASS[0x23] = REFUSE

const UNRESERVED = new Uint8Array(128)
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~') UNRESERVED[c.charCodeAt(0)] = 1

const HEX = '0123456789ABCDEF'
const DOUBLE_ENCODED = /%25[0-9A-Fa-f]{2}/

function hexValue(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30
  const lower = code | 0x20
  if (lower >= 0x61 && lower <= 0x66) return lower - 0x61 + 10
  return -1
}

function escape(code: number): string {
  return '%' + HEX[code >> 4] + HEX[code & 15]
}

/** A short reason for the log why the target cannot be forwarded, or null with `out` filled in. */
export function canonicalTarget(raw: string, out: CanonicalParts): string | null {
  if (raw.charCodeAt(0) !== 0x2f) return 'request target is not in origin form'
  let end = raw.indexOf('?')
  if (end === -1) end = raw.length
  const queryProblem = end === raw.length ? null : checkQuery(raw, end + 1)
  if (queryProblem !== null) return queryProblem
  // Fast path: only plain characters, no empty or dot segment. Nearly every request takes it.
  let plain = true
  for (let i = 1; i < end; i++) {
    const code = raw.charCodeAt(i)
    const kind = code < 128 ? PATH_CLASS[code]! : REFUSE
    if (kind === PLAIN) continue
    if ((kind === SLASH || kind === DOT) && raw.charCodeAt(i - 1) !== 0x2f) continue
    plain = false
    break
  }
  if (plain) {
    out.path = end === raw.length ? raw : raw.slice(0, end)
    out.query = end === raw.length ? '' : raw.slice(end)
    return null
  }
  const problem = normalisePath(raw, end, out)
  if (problem !== null) return problem
  out.query = end === raw.length ? '' : raw.slice(end)
  return null
}

function checkQuery(raw: string, from: number): string | null {
  for (let i = from; i < raw.length; i++) {
    const code = raw.charCodeAt(i)
    if (code === 0x23) return 'fragment in the request target'
    if (code === 0x25 && (hexValue(raw.charCodeAt(i + 1)) < 0 || hexValue(raw.charCodeAt(i + 2)) < 0)) return 'invalid percent-encoding'
    if (code <= 0x20 || code >= 0x7f) return 'invalid character in the request target'
  }
  return null
}

/** The slow path: segment by segment, with decoding, dot removal and slash merging. */
function normalisePath(raw: string, end: number, out: CanonicalParts): string | null {
  const segments: string[] = []
  let segment = ''
  let trailingSlash = false
  for (let i = 1; i <= end; i++) {
    const code = i === end ? 0x2f : raw.charCodeAt(i)
    const kind = code < 128 ? PATH_CLASS[code]! : REFUSE
    if (kind === SLASH) {
      // An encoded "%" before two hex digits decodes to another escape on a second decoding pass.
      if (DOUBLE_ENCODED.test(segment)) return 'double percent-encoding in the path'
      // Empty segments are merged away; `.` and `..` leave the path ending in `/`.
      trailingSlash = segment === '' || segment === '.' || segment === '..'
      if (segment === '..') segments.pop()
      else if (segment !== '' && segment !== '.') segments.push(segment)
      segment = ''
      continue
    }
    if (kind === PLAIN || kind === DOT) {
      segment += raw[i]
    } else if (kind === ENCODE) {
      segment += escape(code)
    } else if (kind === PERCENT) {
      const high = hexValue(raw.charCodeAt(i + 1))
      const low = hexValue(raw.charCodeAt(i + 2))
      if (high < 0 || low < 0 || i + 2 >= end) return 'invalid percent-encoding'
      const value = high * 16 + low
      i += 2
      if (value === 0x2f || value === 0x5c || value === 0x00) return 'encoded "/", "\\" or NUL in the path'
      if (value < 0x20 || value === 0x7f) return 'encoded control character in the path'
      if (value === 0x3b) return 'encoded ";" in the path'
      if (value < 128 && UNRESERVED[value] === 1) {
        segment += String.fromCharCode(value)
      } else {
        segment += escape(value)
      }
    } else if (code === 0x3b) {
      return '";" path parameter in the path'
    } else if (code === 0x5c) {
      return 'backslash in the path'
    } else if (code === 0x23) {
      return 'fragment in the request target'
    } else {
      return 'invalid character in the request target'
    }
  }
  out.path = segments.length === 0 ? '/' : '/' + segments.join('/') + (trailingSlash ? '/' : '')
  return null
}

/** For a route whose upstream ignores case; escapes keep their upper-case hex. */
export function lowerCasePath(path: string): string {
  let upper = false
  for (let i = 0; i < path.length; i++) {
    const code = path.charCodeAt(i)
    if (code >= 0x41 && code <= 0x5a) {
      upper = true
      break
    }
  }
  if (!upper) return path
  let result = ''
  for (let i = 0; i < path.length; i++) {
    if (path.charCodeAt(i) === 0x25) {
      result += path.slice(i, i + 3)
      i += 2
    } else {
      result += path[i]!.toLowerCase()
    }
  }
  return result
}
