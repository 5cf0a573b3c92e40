-- IAL-1 proof of possession (RFC-003, docs/wire-contract.md §6): a challenge is consumed by exactly one
-- successful proof. The guarded UPDATE in the redemption already ensures it; this index makes a second
-- badge for one challenge impossible even if that code path were ever changed.
CREATE UNIQUE INDEX badges_pop_challenge_idx ON badges (pop_challenge_id) WHERE pop_challenge_id IS NOT NULL;
