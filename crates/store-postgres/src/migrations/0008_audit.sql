-- The audit trail: every authenticated request, refused authentication
-- and admin action, appended in batches by each host's recorder and read
-- per organization in position order. `position` comes from the table's
-- sequence, in the order a batch gives its entries. An entry of no
-- organization (a refused authentication) is kept under the nil UUID, so
-- `org_id` is never NULL (Citus distributes by it, beside the other
-- tenant tables). `body` is the entry's JSON as written; `principal_id`
-- its principal's id, for the listing's filter (included in the key's
-- index, so a filter may examine entries from the index alone); `at`
-- its time, for expiry. Written to run again on a schema that has it (as
-- 0007 is), for a database whose recorded version was set back.
CREATE TABLE IF NOT EXISTS audit_entries (
    org_id uuid NOT NULL,
    position bigserial NOT NULL,
    at timestamptz NOT NULL,
    principal_id text,
    body bytea NOT NULL,
    PRIMARY KEY (org_id, position) INCLUDE (principal_id)
);
-- Expiry finds the oldest entries of every organization without reading the rest.
CREATE INDEX IF NOT EXISTS audit_entries_by_time ON audit_entries (at);
