-- Operator console sessions (docs/console.md, "Sign-in and sessions"): a credential exchanged once for a
-- server-side session named by an HttpOnly cookie. Only the SHA-256 of the cookie's secret is stored, so
-- a read of this table signs nobody in.

CREATE TABLE console_sessions (
  -- hex SHA-256 of the cookie secret
  id             text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{64}$'),
  org_id         uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  -- the role and operator flag when the session was made; requests act with the live ones
  role           text NOT NULL CHECK (role IN ('admin', 'member')),
  operator       boolean NOT NULL,
  kind           text NOT NULL CHECK (kind IN ('api_key', 'session')),
  -- a session made from an API key ends when the key is deleted
  api_key_id     uuid REFERENCES api_keys (id) ON DELETE CASCADE,
  -- the identity provider's user (`sub`) of a session made from a session token
  user_id        text,
  csrf_token     text NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  last_seen_at   timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  -- absolute end (SERVICE_CONSOLE_SESSION_MAX after sign-in)
  expires_at     timestamptz NOT NULL,
  -- the `exp` of the identity-provider token it was made from
  idp_expires_at timestamptz,
  CHECK ((kind = 'api_key') = (api_key_id IS NOT NULL)),
  CHECK (kind = 'api_key' OR user_id IS NOT NULL)
);
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
CREATE INDEX console_sessions_api_key_idx ON console_sessions (api_key_id) WHERE api_key_id IS NOT NULL;

-- The console lists an agent's badges newest first (GET /v1/agents/{id}/badges).
CREATE INDEX badges_agent_issued_idx ON badges (agent_id, issued_at DESC, jti DESC);
