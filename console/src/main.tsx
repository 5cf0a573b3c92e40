/**
 * The operator console (docs/console.md): a Preact app served by the admin plane at /console/. It reads
 * its session with GET /v1/console/session on load; without one (data null) it shows the sign-in page.
 */
import { render, type JSX } from 'preact'
import { useEffect, useMemo, useState } from 'preact/hooks'
import { ApiError, api, apiData, setCsrfToken, setUnauthorizedHandler, type SessionData } from './api.js'
import { ErrorBox, Link, SessionContext, type SessionContextValue } from './components/ui.js'
import { match, navigate, usePath } from './router.js'
import { SignIn } from './pages/SignIn.js'
import { AgentsPage } from './pages/Agents.js'
import { AgentPage } from './pages/Agent.js'
import { PoliciesPage } from './pages/Policies.js'
import { LivePage } from './pages/Live.js'
import { KeysPage } from './pages/Keys.js'
import { GatewaysPage } from './pages/Gateways.js'
import { AuditPage } from './pages/Audit.js'
import './styles.css'

type State =
  | { kind: 'loading' }
  | { kind: 'signed-out'; error: unknown }
  | { kind: 'signed-in'; session: SessionData }

const NAV: readonly { href: string; label: string; id: string }[] = [
  { href: '/agents', label: 'Agents', id: 'nav-agents' },
  { href: '/policies', label: 'Policies', id: 'nav-policies' },
  { href: '/live', label: 'Live decisions', id: 'nav-live' },
  { href: '/gateways', label: 'Gateways', id: 'nav-gateways' },
  { href: '/keys', label: 'Keys & operations', id: 'nav-keys' },
  { href: '/audit', label: 'Audit trail', id: 'nav-audit' },
]

function App(): JSX.Element {
  const [state, setState] = useState<State>({ kind: 'loading' })

  const load = async (): Promise<void> => {
    try {
      // data null is the ordinary "no session" (answered 200, so a page load logs no failed request).
      const session = await apiData<SessionData | null>('GET', '/v1/console/session', { allow401: true })
      setCsrfToken(session?.csrf_token ?? null)
      setState(session === null ? { kind: 'signed-out', error: null } : { kind: 'signed-in', session })
    } catch (error) {
      setCsrfToken(null)
      // Any error (two different session cookies are a 401) is worth showing on the sign-in page.
      setState({ kind: 'signed-out', error })
    }
  }

  useEffect(() => {
    setUnauthorizedHandler(() => {
      setCsrfToken(null)
      setState({ kind: 'signed-out', error: new Error('The session has ended; sign in again.') })
    })
    void load()
    return () => setUnauthorizedHandler(null)
  }, [])

  if (state.kind === 'loading') return <div class="splash">Loading…</div>
  if (state.kind === 'signed-out') {
    return <SignIn initialError={state.error} onSignedIn={(session) => { setCsrfToken(session.csrf_token); setState({ kind: 'signed-in', session }) }} />
  }
  return <Shell session={state.session} onSignedOut={() => { setCsrfToken(null); setState({ kind: 'signed-out', error: null }) }} />
}

function Shell(props: { session: SessionData; onSignedOut: () => void }): JSX.Element {
  const path = usePath()
  const [signOutError, setSignOutError] = useState<unknown>(null)
  const { principal } = props.session
  const value = useMemo<SessionContextValue>(() => ({
    principal,
    canWrite: principal.role === 'admin' || principal.operator,
    signOut: async () => {
      try {
        await api('DELETE', '/v1/console/session')
        props.onSignedOut()
      } catch (error) {
        // The session is gone either way when the server says 401.
        if (error instanceof ApiError && error.status === 401) props.onSignedOut()
        else setSignOutError(error)
      }
    },
  }), [principal])

  useEffect(() => {
    if (path === '/' || path === '/sign-in') navigate('/agents', true)
  }, [path])

  let page: JSX.Element
  let params: Record<string, string> | null
  if ((params = match('/agents/:id', path)) !== null) page = <AgentPage id={params.id as string} />
  else if (match('/agents', path) !== null) page = <AgentsPage />
  else if (match('/policies', path) !== null) page = <PoliciesPage />
  else if (match('/live', path) !== null) page = <LivePage />
  else if (match('/keys', path) !== null) page = <KeysPage />
  else if (match('/gateways', path) !== null) page = <GatewaysPage />
  else if (match('/audit', path) !== null) page = <AuditPage />
  else page = <div class="card"><h1>Not found</h1><p>No console page at this address. <Link href="/agents">Agents</Link></p></div>

  return (
    <SessionContext.Provider value={value}>
      <div class="layout">
        <nav class="sidebar" aria-label="Main">
          <div class="brand">Agent trust<span>console</span></div>
          <ul>
            {NAV.map((item) => (
              <li key={item.href}>
                <Link href={item.href} class={path.startsWith(item.href) ? 'active' : ''}>{item.label}</Link>
              </li>
            ))}
          </ul>
          <div class="who" data-testid="who">
            <div class="who-org">{principal.org_name ?? principal.org_id}</div>
            <div class="who-role">
              <span data-testid="role">{principal.role}</span>{principal.operator ? ' · operator' : ''} · {principal.kind}
            </div>
            <button type="button" class="link-button" id="sign-out" onClick={() => void value.signOut()}>Sign out</button>
            <ErrorBox error={signOutError} />
          </div>
        </nav>
        <main class="content">{page}</main>
      </div>
    </SessionContext.Provider>
  )
}

const root = document.getElementById('app')
if (root !== null) render(<App />, root)
