-- OAuth client-credentials front door (docs/api.md §4.10): badges issued at POST /oauth/token record the
-- client assertion's jti, and each organization keeps the audiences its agents may ask tokens for.

-- NULL for badges issued by the other routes; the assertion's jti for a badge issued at the token endpoint.
ALTER TABLE badges ADD COLUMN client_assertion_jti text;
-- One badge per assertion of a subject, whichever instance takes the request: a replay fails the insert.
CREATE UNIQUE INDEX badges_client_assertion_idx ON badges (subject, client_assertion_jti)
  WHERE client_assertion_jti IS NOT NULL;
-- The per-DID issuance window of the token endpoint counts this subject's recent token badges only.
CREATE INDEX badges_client_credentials_window_idx ON badges (subject, issued_at)
  WHERE client_assertion_jti IS NOT NULL;

-- Exact strings a token's audience (resource or audience scope) may take; empty = no audience allowed.
ALTER TABLE organizations ADD COLUMN token_audiences text[] NOT NULL DEFAULT '{}';
