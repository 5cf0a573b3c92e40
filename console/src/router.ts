/**
 * A path-based router under /console/: the admin plane answers index.html for every /console/* path, so
 * a page can be reloaded or linked to. Links use `navigate`, which pushes history and re-renders.
 */
import { useEffect, useState } from 'preact/hooks'

export const BASE = '/console'

type Listener = () => void
const listeners = new Set<Listener>()

export function currentPath(): string {
  const path = window.location.pathname
  const inner = path.startsWith(BASE) ? path.slice(BASE.length) : path
  return inner === '' ? '/' : inner
}

export function navigate(path: string, replace = false): void {
  const target = `${BASE}${path}`
  if (replace) window.history.replaceState(null, '', target)
  else window.history.pushState(null, '', target)
  for (const listener of listeners) listener()
}

window.addEventListener('popstate', () => {
  for (const listener of listeners) listener()
})

/** The path inside the console (`/agents/…`), re-rendering on navigation. */
export function usePath(): string {
  const [path, setPath] = useState(currentPath())
  useEffect(() => {
    const listener = (): void => setPath(currentPath())
    listeners.add(listener)
    return () => { listeners.delete(listener) }
  }, [])
  return path
}

/** Matches `/agents/:id` against a path; answers the parameters or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/').filter(Boolean)
  const s = path.split('/').filter(Boolean)
  if (p.length !== s.length) return null
  const params: Record<string, string> = {}
  for (let i = 0; i < p.length; i++) {
    const part = p[i] as string
    const seg = s[i] as string
    if (part.startsWith(':')) {
      try {
        params[part.slice(1)] = decodeURIComponent(seg)
      } catch {
        return null
      }
    } else if (part !== seg) return null
  }
  return params
}
