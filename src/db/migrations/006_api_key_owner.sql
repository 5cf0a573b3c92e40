-- API keys act for the user who created them (issue 18): a key created by a dashboard user, or by a
-- key of that user, works only while that user is a member of the key's organization, and never with
-- a role above the user's current one. Operator keys are bound to no user.

-- The old foreign key set the creator to NULL when the user was deleted, which erased exactly the link
-- the check needs; the id is kept instead (a deleted creator is then "not a member").
ALTER TABLE api_keys DROP CONSTRAINT api_keys_created_by_user_id_fkey;

-- How the key was made: 'user' (a session token), 'key' (another API key; created_by_key_id names it),
-- 'operator' (an operator key or the operator CLI), 'bootstrap', or 'legacy' (before this migration).
ALTER TABLE api_keys ADD COLUMN created_by_type text NOT NULL DEFAULT 'legacy'
  CHECK (created_by_type IN ('user', 'key', 'operator', 'bootstrap', 'legacy'));
-- Not a foreign key: the creating key may be deleted later, and the record of what it made stays.
ALTER TABLE api_keys ADD COLUMN created_by_key_id uuid;
ALTER TABLE api_keys ADD COLUMN revoked_at timestamptz;
ALTER TABLE api_keys ADD COLUMN revoke_reason text
  CHECK (revoke_reason IS NULL OR revoke_reason IN ('creator_unknown', 'creator_deleted', 'membership_removed', 'organization_unlinked'));

UPDATE api_keys SET created_by_type = 'operator' WHERE is_operator;
-- A non-operator key whose creator is already gone can no longer be tied to anyone: closed, with the reason.
UPDATE api_keys SET revoked_at = date_trunc('milliseconds', now()), revoke_reason = 'creator_unknown'
  WHERE created_by_user_id IS NULL AND NOT is_operator;

-- The identity webhook finds the keys of a user (in one organization or all).
CREATE INDEX api_keys_creator_idx ON api_keys (created_by_user_id, org_id);
