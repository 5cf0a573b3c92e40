// Only a SERVICE_TRUSTED_PROXIES peer's X-Forwarded-* and Forwarded headers are kept and extended.
import ipaddr from 'ipaddr.js'

/** Past this, addresses are still checked, just not remembered. */
const MAX_REMEMBERED = 10_000

export function trustedPeerCheck(entries: readonly string[]): (address: string | undefined) => boolean {
  if (entries.length === 0) return () => false
  const ranges: [ipaddr.IPv4 | ipaddr.IPv6, number][] = []
  for (const entry of entries) {
    try {
      ranges.push(entry.includes('/') ? ipaddr.parseCIDR(entry) : [ipaddr.parse(entry), ipaddr.parse(entry).kind() === 'ipv4' ? 32 : 128])
    } catch {
      // config validation already reported it; an unparsable entry trusts nobody
    }
  }
  const seen = new Map<string, boolean>()
  return (address) => {
    if (address === undefined) return false
    let trusted = seen.get(address)
    if (trusted === undefined) {
      let parsed: ipaddr.IPv4 | ipaddr.IPv6
      try {
        parsed = ipaddr.process(address)
      } catch {
        return false
      }
      trusted = ranges.some(([range, bits]) => parsed.kind() === range.kind() && parsed.match(range, bits))
      if (seen.size < MAX_REMEMBERED) seen.set(address, trusted)
    }
    return trusted
  }
}
