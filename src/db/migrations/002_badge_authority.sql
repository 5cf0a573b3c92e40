-- Badge authority: issued badges (revocation and audit), PoP challenges (RFC-003), DNS domain
-- validation (trust level 2). docs/api.md §2.3-2.9, §3.2-3.3; docs/wire-contract.md §4-§6.

CREATE TABLE badges (
  jti              text PRIMARY KEY,
  -- the agent may be deleted later; the record of what was issued stays for audit and revocation
  agent_id         uuid REFERENCES agents (id) ON DELETE SET NULL,
  org_id           uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  subject          text NOT NULL,
  trust_level      smallint NOT NULL CHECK (trust_level BETWEEN 1 AND 4),
  ial              text NOT NULL CHECK (ial IN ('0', '1')),
  kid              text NOT NULL,
  pop_challenge_id text,
  issued_at        timestamptz NOT NULL,
  expires_at       timestamptz NOT NULL,
  revoked_at       timestamptz,
  revoke_reason    text
);
CREATE INDEX badges_agent_idx ON badges (agent_id);
CREATE INDEX badges_kid_expiry_idx ON badges (kid, expires_at);
CREATE INDEX badges_revoked_idx ON badges (revoked_at, jti) WHERE revoked_at IS NOT NULL;

CREATE TABLE pop_challenges (
  id              text PRIMARY KEY,
  did             text NOT NULL,
  agent_id        uuid NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
  org_id          uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  nonce           text NOT NULL,
  aud             text NOT NULL,
  htu             text NOT NULL,
  badge_aud       jsonb NOT NULL DEFAULT '[]',
  badge_ttl       integer NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  expires_at      timestamptz NOT NULL,
  used_at         timestamptz,
  failed_attempts integer NOT NULL DEFAULT 0
);
CREATE INDEX pop_challenges_did_created_idx ON pop_challenges (did, created_at);
CREATE INDEX pop_challenges_expires_idx ON pop_challenges (expires_at);

CREATE TABLE domain_verifications (
  agent_id    uuid NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
  domain      text NOT NULL,
  token       text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  verified_at timestamptz,
  PRIMARY KEY (agent_id, domain)
);
