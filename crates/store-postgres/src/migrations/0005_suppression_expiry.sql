-- Suppressed findings by the expiry of their suppression (the index
-- table's `suppression_expiry`): the service reopens expired suppressions
-- by reading only those. Two index columns and a partial index, as in
-- migration 4; the host fills them, and the index's counts, from the
-- records' bodies in the migration's transaction (a position is the
-- expiry in nanoseconds as the host reads it, which SQL does not).
ALTER TABLE records
    ADD COLUMN suppression_expiry_position bigint,
    ADD COLUMN suppression_expiry_value bytea;

CREATE INDEX records_vulnerability_findings_suppression_expiry ON records (org_id, suppression_expiry_value, suppression_expiry_position, id) WHERE collection = 'vulnerability-findings' AND suppression_expiry_value IS NOT NULL;
