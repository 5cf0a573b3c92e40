-- The tamper-evident audit trail (docs/audit.md). A write inserts a pending record in its own
-- transaction; the chainer moves pending records into audit_records, numbering and hashing them under
-- the lock of the chain's head row, so concurrent admin instances extend one chain and never fork it.

CREATE TABLE audit_pending (
  id           bigserial PRIMARY KEY,
  recorded_at  timestamptz NOT NULL DEFAULT date_trunc('milliseconds', clock_timestamp()),
  actor_type   text NOT NULL CHECK (actor_type IN ('key', 'user', 'operator', 'gateway', 'idp', 'cli')),
  actor_id     text,
  org_id       uuid,
  action       text NOT NULL,
  target       text,
  outcome      text NOT NULL,
  request_id   text,
  -- hex SHA-256 of the canonical JSON of the change (never the change itself: it may hold a secret)
  digest       text CHECK (digest IS NULL OR digest ~ '^[0-9a-f]{64}$')
);

-- One row per chain: the head the next record links to. Its lock serializes the chainers.
CREATE TABLE audit_head (
  chain_id            uuid PRIMARY KEY,
  seq                 bigint NOT NULL DEFAULT 0,
  head_hash           text NOT NULL DEFAULT repeat('0', 64),
  checkpoint_seq      bigint NOT NULL DEFAULT 0,
  checkpoint_at       timestamptz NOT NULL DEFAULT now()
);
INSERT INTO audit_head (chain_id) VALUES (gen_random_uuid());

CREATE TABLE audit_records (
  chain_id     uuid NOT NULL REFERENCES audit_head (chain_id),
  seq          bigint NOT NULL CHECK (seq >= 1),
  recorded_at  timestamptz NOT NULL,
  actor_type   text NOT NULL,
  actor_id     text,
  org_id       uuid,
  action       text NOT NULL,
  target       text,
  outcome      text NOT NULL,
  request_id   text,
  digest       text,
  prev_hash    text NOT NULL CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
  hash         text NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
  PRIMARY KEY (chain_id, seq)
);
CREATE INDEX audit_records_org_idx ON audit_records (org_id, seq DESC);
CREATE INDEX audit_records_time_idx ON audit_records (recorded_at);

CREATE TABLE audit_checkpoints (
  chain_id     uuid NOT NULL REFERENCES audit_head (chain_id),
  seq          bigint NOT NULL,
  head_hash    text NOT NULL,
  -- compact JWS (EdDSA) over {chain, seq, head, iat}, signed with the authority's signing key
  jws          text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  PRIMARY KEY (chain_id, seq)
);

-- Append-only: a record or checkpoint once written is never changed or removed by the service. A
-- superuser can still disable the trigger; the hashes and signed checkpoints are what show it.
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the audit trail is append-only (% on %)', TG_OP, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_records_append_only BEFORE UPDATE OR DELETE ON audit_records FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_records_no_truncate BEFORE TRUNCATE ON audit_records FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE ON audit_checkpoints FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
