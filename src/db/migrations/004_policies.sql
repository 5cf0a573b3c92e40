-- Policy documents, groups and group membership (docs/api.md §2.10, §3.4, docs/wire-contract.md §7).
-- A document never changes its YAML: a change is a new proposal, so history stays auditable.

CREATE TABLE policy_documents (
  id                  uuid PRIMARY KEY,
  org_id              uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  scope_type          text NOT NULL CHECK (scope_type IN ('org', 'group', 'agent')),
  -- the org, group or agent id; not a foreign key because it points at one of three tables
  scope_id            uuid NOT NULL,
  state               text NOT NULL CHECK (state IN ('proposal', 'active', 'superseded', 'rejected', 'archived')),
  version             integer NOT NULL CHECK (version >= 1),
  yaml_content        text NOT NULL,
  schema_version      text NOT NULL,
  content_hash        text NOT NULL,
  created_by_user_id  text,
  created_by_type     text NOT NULL CHECK (created_by_type IN ('human', 'api_key')),
  approved_by_user_id text,
  rejection_reason    text,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now())
);
-- At most one active document per scope: the last line of defence behind the approval's scope lock.
CREATE UNIQUE INDEX policy_documents_one_active_idx
  ON policy_documents (org_id, scope_type, scope_id) WHERE state = 'active';
CREATE INDEX policy_documents_scope_idx ON policy_documents (org_id, scope_type, scope_id, created_at);
CREATE INDEX policy_documents_proposals_idx ON policy_documents (org_id, created_at) WHERE state = 'proposal';

CREATE TABLE policy_groups (
  id         uuid PRIMARY KEY,
  org_id     uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name       text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
  -- lower number = higher priority (docs/wire-contract.md §7)
  precedence integer NOT NULL,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  UNIQUE (org_id, name)
);

CREATE TABLE policy_group_members (
  group_id   uuid NOT NULL REFERENCES policy_groups (id) ON DELETE CASCADE,
  agent_id   uuid NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  PRIMARY KEY (group_id, agent_id)
);
-- resolution looks groups up by agent
CREATE INDEX policy_group_members_agent_idx ON policy_group_members (agent_id);
