/**
 * JSON paths for validation issues (`$.skills[0].id`, `$["odd key"]`), shared by the Agent Card
 * validator and the policy grammar so both report locations the same way and in the same order.
 */
import { isRecord } from './json-objects.js'

/** One step of a path: an object key or an array index. */
export type Segment = string | number

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/

/** `$`-rooted path: identifiers as `.key`, indices as `[n]`, anything else as a quoted `["key"]`. */
export function formatPath(segments: readonly Segment[]): string {
  let out = '$'
  for (const segment of segments) {
    if (typeof segment === 'number') out += `[${segment}]`
    else if (IDENTIFIER.test(segment)) out += `.${segment}`
    else out += `[${JSON.stringify(segment)}]`
  }
  return out
}

/** Total order on paths: segment by segment, indices numerically (`[2]` before `[10]`), parents first. */
export function compareSegments(a: readonly Segment[], b: readonly Segment[]): number {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const x = a[i] as Segment
    const y = b[i] as Segment
    if (x === y) continue
    if (typeof x === 'number' && typeof y === 'number') return x - y
    // an index and a key at the same depth only meet under differently shaped data; numbers first keeps
    // the order total
    if (typeof x === 'number') return -1
    if (typeof y === 'number') return 1
    return x < y ? -1 : 1
  }
  return a.length - b.length
}

/**
 * Splits a JSON Pointer (RFC 6901, as ajv reports `instancePath`) into segments, using the data itself
 * to tell array indices from object keys that happen to be digits. Only own properties are followed, so
 * nothing inherited is ever consulted.
 */
export function pointerToSegments(pointer: string, data: unknown): Segment[] {
  if (pointer === '') return []
  const segments: Segment[] = []
  let node: unknown = data
  for (const raw of pointer.slice(1).split('/')) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~')
    if (Array.isArray(node) && /^(0|[1-9]\d*)$/.test(key)) {
      const index = Number(key)
      segments.push(index)
      node = node[index]
    } else {
      segments.push(key)
      node = isRecord(node) && Object.prototype.hasOwnProperty.call(node, key) ? node[key] : undefined
    }
  }
  return segments
}
