-- Tenancy, credentials and the agent registry (docs/wire-contract.md §2, docs/api.md §2.2, §2.8).
-- Creation times are kept to the millisecond so (created_at, id) pagination cursors round-trip exactly
-- through JavaScript dates.

CREATE TABLE organizations (
  id          uuid PRIMARY KEY,
  name        text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
  -- id of the same organization at the identity provider (filled by the user-sync webhook)
  external_id text UNIQUE,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now())
);

CREATE TABLE users (
  -- the identity provider's user id (`sub` of session tokens), or a UUID for users made here
  id           text PRIMARY KEY CHECK (char_length(id) BETWEEN 1 AND 200),
  email        text,
  display_name text,
  is_operator  boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memberships (
  org_id     uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  role       text NOT NULL CHECK (role IN ('admin', 'member')),
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  PRIMARY KEY (org_id, user_id)
);
CREATE INDEX memberships_user_idx ON memberships (user_id);

CREATE TABLE api_keys (
  id                 uuid PRIMARY KEY,
  org_id             uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name               text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
  -- SHA-256 of the secret; the secret itself is never stored (docs/wire-contract.md §2)
  key_hash           bytea NOT NULL UNIQUE,
  -- the first characters of the secret, so a user can tell keys apart in a listing
  key_prefix         text NOT NULL,
  role               text NOT NULL CHECK (role IN ('admin', 'member')),
  is_operator        boolean NOT NULL DEFAULT false,
  created_by_user_id text REFERENCES users (id) ON DELETE SET NULL,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  last_used_at       timestamptz
);
CREATE INDEX api_keys_org_idx ON api_keys (org_id, created_at, id);

CREATE TABLE agents (
  id             uuid PRIMARY KEY,
  org_id         uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name           text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
  domain         text,
  description    text,
  -- explicit DID; NULL means the agent is known by did:web:<registry host>:agents:<id>
  did            text,
  status         text NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled')),
  -- highest trust level verified for the agent (docs/wire-contract.md §4)
  trust_level    smallint NOT NULL DEFAULT 1 CHECK (trust_level BETWEEN 1 AND 4),
  public_key_jwk jsonb,
  agent_card     jsonb,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at     timestamptz NOT NULL DEFAULT now()
);
-- a DID belongs to one agent only, across all organizations
CREATE UNIQUE INDEX agents_did_key ON agents (did) WHERE did IS NOT NULL;
CREATE INDEX agents_org_idx ON agents (org_id, created_at, id);
