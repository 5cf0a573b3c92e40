/** Small shared pieces: links, error boxes, loaders, buttons that run an async action. */
import type { ComponentChildren, JSX } from 'preact'
import { createContext } from 'preact'
import { useCallback, useContext, useEffect, useState } from 'preact/hooks'
import { ApiError, type Principal } from '../api.js'
import { BASE, navigate } from '../router.js'

export interface SessionContextValue {
  principal: Principal
  /** Writes are offered to admins (and operators); members get a read-only console (the API refuses anyway). */
  canWrite: boolean
  signOut(): Promise<void>
}

export const SessionContext = createContext<SessionContextValue | null>(null)

export function useSession(): SessionContextValue {
  const value = useContext(SessionContext)
  if (value === null) throw new Error('no session')
  return value
}

export function Link(props: { href: string; children: ComponentChildren; class?: string }): JSX.Element {
  const onClick = (event: MouseEvent): void => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return
    event.preventDefault()
    navigate(props.href)
  }
  return <a href={`${BASE}${props.href}`} class={props.class} onClick={onClick}>{props.children}</a>
}

export function ErrorBox(props: { error: unknown }): JSX.Element | null {
  if (props.error === null || props.error === undefined) return null
  const text = props.error instanceof Error ? props.error.message : String(props.error)
  const details = props.error instanceof ApiError && props.error.body !== null && typeof props.error.body === 'object'
    ? (props.error.body as { errors?: unknown }).errors
    : undefined
  return (
    <div class="error" role="alert">
      <strong>Error</strong> {text}
      {Array.isArray(details) && details.length > 0 && (
        <ul>
          {details.map((d, i) => <li key={i}>{typeof d === 'object' && d !== null ? `${(d as { path?: string }).path ?? ''} ${(d as { message?: string }).message ?? JSON.stringify(d)}` : String(d)}</li>)}
        </ul>
      )}
    </div>
  )
}

export function Notice(props: { children: ComponentChildren }): JSX.Element {
  return <div class="notice" role="status">{props.children}</div>
}

/** Loads data when `deps` change; answers {data, error, loading, reload}. */
export function useLoad<T>(load: () => Promise<T>, deps: readonly unknown[]): { data: T | null; error: unknown; loading: boolean; reload: () => void } {
  const [state, setState] = useState<{ data: T | null; error: unknown; loading: boolean }>({ data: null, error: null, loading: true })
  const [tick, setTick] = useState(0)
  useEffect(() => {
    let live = true
    setState((s) => ({ ...s, loading: true }))
    load().then(
      (data) => { if (live) setState({ data, error: null, loading: false }) },
      (error: unknown) => { if (live) setState({ data: null, error, loading: false }) },
    )
    return () => { live = false }
  }, [...deps, tick])
  const reload = useCallback(() => setTick((n) => n + 1), [])
  return { ...state, reload }
}

/** A button that runs an async action, disabled while it runs; errors go to `onError`. */
export function ActionButton(props: {
  onClick: () => Promise<unknown>
  children: ComponentChildren
  class?: string
  confirm?: string
  onError?: (error: unknown) => void
  name?: string
}): JSX.Element {
  const [busy, setBusy] = useState(false)
  const run = async (): Promise<void> => {
    if (props.confirm !== undefined && !window.confirm(props.confirm)) return
    setBusy(true)
    try {
      await props.onClick()
    } catch (error) {
      props.onError?.(error)
    } finally {
      setBusy(false)
    }
  }
  return <button type="button" class={props.class} disabled={busy} name={props.name} onClick={() => void run()}>{props.children}</button>
}

export function Json(props: { value: unknown }): JSX.Element {
  return <pre class="json">{JSON.stringify(props.value, null, 2)}</pre>
}

export function Section(props: { title: string; children: ComponentChildren; actions?: ComponentChildren; id?: string }): JSX.Element {
  return (
    <section class="card" id={props.id}>
      <header class="card-head"><h2>{props.title}</h2>{props.actions !== undefined && <div class="actions">{props.actions}</div>}</header>
      {props.children}
    </section>
  )
}

export function Badge(props: { kind: string; children: ComponentChildren }): JSX.Element {
  return <span class={`tag tag-${props.kind}`}>{props.children}</span>
}

export function decisionKind(decision: string | null | undefined): string {
  if (decision === 'DENY') return 'bad'
  if (decision === 'PERMIT' || decision === 'ALLOW') return 'good'
  return 'neutral'
}

/** Cursor paging over a list endpoint: the cursor of the page shown, its Previous/Next buttons, and a way back to page 1. */
export function useCursors(): { cursor: string | null; pager: (next: string | null | undefined, nextId?: string) => JSX.Element; reset: () => void } {
  // The cursors of the pages before this one, for "Previous".
  const [cursors, setCursors] = useState<(string | null)[]>([null])
  const pager = (next: string | null | undefined, nextId?: string): JSX.Element => (
    <div class="pager">
      <button type="button" disabled={cursors.length <= 1} onClick={() => setCursors(cursors.slice(0, -1))}>Previous</button>
      <span class="muted">Page {cursors.length}</span>
      <button type="button" id={nextId} disabled={next == null} onClick={() => { if (next) setCursors([...cursors, next]) }}>Next</button>
    </div>
  )
  return { cursor: cursors[cursors.length - 1] ?? null, pager, reset: () => setCursors([null]) }
}

/** A secret the API shows once (a new key): selected on focus, gone with Done. */
export function ShownOnce(props: { id: string; secret: string; onDone: () => void; children: ComponentChildren }): JSX.Element {
  return (
    <Notice>
      {props.children} Copy the secret now: it is shown once and cannot be read again.
      <input readOnly class="mono secret" id={props.id} value={props.secret} onFocus={(e) => (e.target as HTMLInputElement).select()} />
      <button type="button" class="link-button" onClick={props.onDone}>Done</button>
    </Notice>
  )
}
