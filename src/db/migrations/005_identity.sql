-- User sync from the identity provider's webhook (docs/wire-contract.md §2).
-- Every accepted Svix delivery id is kept, in the same transaction as the change it made, so that a
-- replayed delivery is refused and changes nothing. Rows are pruned after 30 days: Svix stops retrying a
-- message long before that, and a replay with a fresh timestamp needs the original signature to verify.
CREATE TABLE webhook_deliveries (
  svix_id     text PRIMARY KEY CHECK (char_length(svix_id) BETWEEN 1 AND 200),
  event_type  text NOT NULL CHECK (char_length(event_type) BETWEEN 1 AND 200),
  received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_received_idx ON webhook_deliveries (received_at);
