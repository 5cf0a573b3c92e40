/**
 * Sign-in: an API key, or an identity-provider session token, is exchanged once for a server-side session
 * (POST /v1/console/session). The credential lives only in this form's state while it is sent: never in
 * localStorage, sessionStorage or the URL, and the field is cleared whatever the answer.
 */
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { apiData, type SessionData } from '../api.js'
import { ErrorBox } from '../components/ui.js'

type Credential = 'api_key' | 'session_token'

export function SignIn(props: { initialError: unknown; onSignedIn: (session: SessionData) => void }): JSX.Element {
  const [kind, setKind] = useState<Credential>('api_key')
  const [key, setKey] = useState('')
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(props.initialError)

  const submit = async (event: Event): Promise<void> => {
    event.preventDefault()
    const secret = key.trim()
    setKey('')
    if (secret === '') {
      setError(new Error(kind === 'api_key' ? 'Enter an API key.' : 'Paste a session token.'))
      return
    }
    setBusy(true)
    setError(null)
    try {
      const session = kind === 'api_key'
        ? await apiData<SessionData>('POST', '/v1/console/session', { body: { api_key: secret }, allow401: true })
        : await apiData<SessionData>('POST', '/v1/console/session', { body: {}, bearer: secret, allow401: true })
      props.onSignedIn(session)
    } catch (caught) {
      setError(caught)
    } finally {
      setBusy(false)
    }
  }

  return (
    <div class="signin">
      <form class="card signin-card" method="post" onSubmit={(e) => void submit(e)} autocomplete="off">
        <h1>Agent trust console</h1>
        <p class="muted">
          {kind === 'api_key'
            ? 'Sign in with an API key. It is exchanged once for a session cookie and is not kept by the browser.'
            : "Sign in with your identity provider's session token (a dashboard user's). It is exchanged once for a session cookie that ends with the token."}
        </p>
        <label for="credential-kind">Credential</label>
        <select id="credential-kind" value={kind} onChange={(e) => { setKind((e.target as HTMLSelectElement).value as Credential); setKey('') }}>
          <option value="api_key">API key</option>
          <option value="session_token">Identity-provider session token</option>
        </select>
        <label for="api-key">{kind === 'api_key' ? 'API key' : 'Session token'}</label>
        <input
          id="api-key"
          name="api_key"
          type="password"
          autocomplete="off"
          spellcheck={false}
          placeholder={kind === 'api_key' ? 'sk_…' : 'eyJ…'}
          value={key}
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
        />
        <button type="submit" class="primary" disabled={busy}>{busy ? 'Signing in…' : 'Sign in'}</button>
        <ErrorBox error={error} />
      </form>
    </div>
  )
}
