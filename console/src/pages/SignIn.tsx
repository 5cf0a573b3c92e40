/**
 * Sign-in: an API key is exchanged once for a server-side session (POST /v1/console/session). The key
 * lives only in this form's state while it is sent: never in localStorage, sessionStorage or the URL,
 * and the field is cleared whatever the answer.
 */
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { apiData, type SessionData } from '../api.js'
import { ErrorBox } from '../components/ui.js'

export function SignIn(props: { initialError: unknown; onSignedIn: (session: SessionData) => void }): JSX.Element {
  const [key, setKey] = useState('')
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(props.initialError)

  const submit = async (event: Event): Promise<void> => {
    event.preventDefault()
    const apiKey = key.trim()
    setKey('')
    if (apiKey === '') {
      setError(new Error('Enter an API key.'))
      return
    }
    setBusy(true)
    setError(null)
    try {
      const session = await apiData<SessionData>('POST', '/v1/console/session', { body: { api_key: apiKey }, allow401: true })
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
        <p class="muted">Sign in with an API key. It is exchanged once for a session cookie and is not kept by the browser.</p>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          name="api_key"
          type="password"
          autocomplete="off"
          spellcheck={false}
          placeholder="sk_…"
          value={key}
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
        />
        <button type="submit" class="primary" disabled={busy}>{busy ? 'Signing in…' : 'Sign in'}</button>
        <ErrorBox error={error} />
      </form>
    </div>
  )
}
