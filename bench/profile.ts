/**
 * CPU profiles of the benchmarks' gateway processes (`node --cpu-prof`): top self-time functions and busy
 * time by category, read by bench/gateway.ts and bench/pinned.ts.
 */
import { readFileSync } from 'node:fs'
import path from 'node:path'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

// Where a sample's time goes, by the innermost frame (leaf upwards) that names one of these places.
const CATEGORIES: [string, RegExp][] = [
  ['log line (pino, redact, sonic-boom)', /node_modules\/(pino|@pinojs|sonic-boom|fast-redact|pino-std-serializers)\/|src\/telemetry\/logger/],
  ['metrics (prom-client)', /node_modules\/prom-client\/|src\/telemetry\/metrics/],
  ['policy evaluation (src/core/policy)', /src\/core\/policy\//],
  ['decision cache + PDP glue', /src\/gateway\/(pdp\/|decision-cache)|node_modules\/lru-cache\//],
  ['badge stage', /src\/gateway\/stages\/badge|src\/core\/badge/],
  ['txn id', /src\/gateway\/txn-id/],
  ['undici (upstream client)', /node_modules\/undici\//],
  ['ingress (src/gateway/ingress)', /src\/gateway\/ingress\//],
  ['forwarder (src/gateway/upstream)', /src\/gateway\/upstream\//],
  ['gateway pipeline (server.ts, stages, telemetry, respond.ts)', /src\/gateway\/(server|context|request-scope|request-telemetry|respond|stages\/)/],
  ['node:http server', /node:_http_|node:internal\/http/],
  ['admin plane / start-up (fastify, ajv, pg)', /node_modules\/(fastify|ajv|fast-json-stringify|avvio|pg|pg-protocol|@fastify)\/|src\/(admin|db|authority)\//],
]

/**
 * Top self-time functions of a .cpuprofile, counted from the first sample inside the gateway's request
 * handler (start-up and the admin calls that build the world come before it) and as a share of busy
 * time (idle excluded); then the same time by category, each sample charged to its innermost category.
 */
export function summarizeProfile(file: string, top = 25): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const stack = (id: number): ProfileNode[] => {
    const frames: ProfileNode[] = []
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) frames.push(byId.get(at) as ProfileNode)
    return frames
  }
  const where = (n: ProfileNode): string => n.callFrame.url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, 'node_modules/').replace(/^.*\/(src|bench)\//, '$1/')
  const first = profile.samples.findIndex((id) => stack(id).some((n) => /src\/gateway\/server\.js$/.test(n.callFrame.url)))
  const self = new Map<string, number>()
  const category = new Map<string, number>()
  let busy = 0
  let idle = 0
  for (let i = Math.max(0, first); i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i] as number)
    const delta = (profile.timeDeltas[i + 1] ?? 0) / 1000
    if (node === undefined) continue
    if (node.callFrame.functionName === '(idle)') {
      idle += delta
      continue
    }
    busy += delta
    const w = where(node)
    const key = `${node.callFrame.functionName || '(anonymous)'}  ${w}${w === '' ? '' : `:${node.callFrame.lineNumber + 1}`}`
    self.set(key, (self.get(key) ?? 0) + delta)
    let name = 'other (node internals, GC, native)'
    for (const frame of stack(node.id)) {
      const hit = CATEGORIES.find(([, re]) => re.test(frame.callFrame.url))
      if (hit !== undefined) {
        name = hit[0]
        break
      }
    }
    category.set(name, (category.get(name) ?? 0) + delta)
  }
  const fmt = (entries: [string, number][]): string =>
    entries.map(([k, ms]) => `    ${ms.toFixed(0).padStart(7)} ms  ${((ms / busy) * 100).toFixed(1).padStart(5)} %  ${k}`).join('\n')
  const sorted = [...self.entries()].sort((a, b) => b[1] - a[1])
  const ours = sorted.filter(([k]) => /\bsrc\/(gateway|telemetry)\//.test(k))
  return [
    `  profile ${path.basename(file)}: ${busy.toFixed(0)} ms busy, ${idle.toFixed(0)} ms idle (from the first gateway request on; % of busy)`,
    '  top self time (all):',
    fmt(sorted.slice(0, top)),
    '  top self time in src/gateway and src/telemetry:',
    fmt(ours.slice(0, 15)),
    '  busy time by category (innermost):',
    fmt([...category.entries()].sort((a, b) => b[1] - a[1])),
  ].join('\n')
}
