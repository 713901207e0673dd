-- A record's single-valued index entries as columns of its row: each
-- index's value (NULL when the record has no entry in it) and, for a sort
-- index, its position; the positions of the indexes ordered by creation or
-- update are `created_position` and `updated_position`. Each index is a
-- partial PostgreSQL index per collection over (org_id, value, position,
-- id): the keyset walks of `index_entries`' key, with one heap row per
-- record instead of one per entry (a finding had fifteen). Indexes holding
-- several values per record (a list's items) keep their rows in
-- `index_entries`. The column and index names follow the index table of
-- `plugins/sdk/src/indexes.rs`.
ALTER TABLE records
    ADD COLUMN created_position bigint,
    ADD COLUMN updated_position bigint,
    ADD COLUMN by_last_seen_at_position bigint,
    ADD COLUMN by_hostname_position bigint,
    ADD COLUMN by_first_seen_at_position bigint,
    ADD COLUMN by_severity_position bigint,
    ADD COLUMN by_cvss_position bigint,
    ADD COLUMN by_due_at_position bigint,
    ADD COLUMN by_name_position bigint,
    ADD COLUMN created_at_value bytea,
    ADD COLUMN updated_at_value bytea,
    ADD COLUMN os_family_value bytea,
    ADD COLUMN has_agent_value bytea,
    ADD COLUMN by_last_seen_at_value bytea,
    ADD COLUMN by_hostname_value bytea,
    ADD COLUMN endpoint_id_value bytea,
    ADD COLUMN severity_value bytea,
    ADD COLUMN status_value bytea,
    ADD COLUMN finding_type_value bytea,
    ADD COLUMN cve_id_value bytea,
    ADD COLUMN kev_value bytea,
    ADD COLUMN scanner_value bytea,
    ADD COLUMN remediation_target_id_value bytea,
    ADD COLUMN by_first_seen_at_value bytea,
    ADD COLUMN by_severity_value bytea,
    ADD COLUMN by_cvss_value bytea,
    ADD COLUMN target_type_value bytea,
    ADD COLUMN package_manager_value bytea,
    ADD COLUMN by_due_at_value bytea,
    ADD COLUMN by_name_value bytea;

-- What the rows of `index_entries` held, moved into the columns.
UPDATE records SET
    created_at_value = moved.created_at_value,
    created_position = moved.created_position,
    updated_at_value = moved.updated_at_value,
    updated_position = moved.updated_position,
    os_family_value = moved.os_family_value,
    has_agent_value = moved.has_agent_value,
    by_last_seen_at_value = moved.by_last_seen_at_value,
    by_last_seen_at_position = moved.by_last_seen_at_position,
    by_hostname_value = moved.by_hostname_value,
    by_hostname_position = moved.by_hostname_position
FROM (
    SELECT org_id, id,
        (array_agg(value) FILTER (WHERE index_name = 'created_at'))[1] AS created_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'created_at'))[1] AS created_position,
        (array_agg(value) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_position,
        (array_agg(value) FILTER (WHERE index_name = 'os_family'))[1] AS os_family_value,
        (array_agg(value) FILTER (WHERE index_name = 'has_agent'))[1] AS has_agent_value,
        (array_agg(value) FILTER (WHERE index_name = 'by_last_seen_at'))[1] AS by_last_seen_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_last_seen_at'))[1] AS by_last_seen_at_position,
        (array_agg(value) FILTER (WHERE index_name = 'by_hostname'))[1] AS by_hostname_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_hostname'))[1] AS by_hostname_position
    FROM index_entries WHERE collection = 'endpoints' GROUP BY org_id, id
) AS moved
WHERE records.org_id = moved.org_id AND records.collection = 'endpoints' AND records.id = moved.id;

UPDATE records SET
    created_at_value = moved.created_at_value,
    created_position = moved.created_position,
    updated_at_value = moved.updated_at_value,
    updated_position = moved.updated_position,
    endpoint_id_value = moved.endpoint_id_value,
    severity_value = moved.severity_value,
    status_value = moved.status_value,
    finding_type_value = moved.finding_type_value,
    cve_id_value = moved.cve_id_value,
    kev_value = moved.kev_value,
    scanner_value = moved.scanner_value,
    remediation_target_id_value = moved.remediation_target_id_value,
    by_first_seen_at_value = moved.by_first_seen_at_value,
    by_first_seen_at_position = moved.by_first_seen_at_position,
    by_last_seen_at_value = moved.by_last_seen_at_value,
    by_last_seen_at_position = moved.by_last_seen_at_position,
    by_severity_value = moved.by_severity_value,
    by_severity_position = moved.by_severity_position,
    by_cvss_value = moved.by_cvss_value,
    by_cvss_position = moved.by_cvss_position
FROM (
    SELECT org_id, id,
        (array_agg(value) FILTER (WHERE index_name = 'created_at'))[1] AS created_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'created_at'))[1] AS created_position,
        (array_agg(value) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_position,
        (array_agg(value) FILTER (WHERE index_name = 'endpoint_id'))[1] AS endpoint_id_value,
        (array_agg(value) FILTER (WHERE index_name = 'severity'))[1] AS severity_value,
        (array_agg(value) FILTER (WHERE index_name = 'status'))[1] AS status_value,
        (array_agg(value) FILTER (WHERE index_name = 'finding_type'))[1] AS finding_type_value,
        (array_agg(value) FILTER (WHERE index_name = 'cve_id'))[1] AS cve_id_value,
        (array_agg(value) FILTER (WHERE index_name = 'kev'))[1] AS kev_value,
        (array_agg(value) FILTER (WHERE index_name = 'scanner'))[1] AS scanner_value,
        (array_agg(value) FILTER (WHERE index_name = 'remediation_target_id'))[1] AS remediation_target_id_value,
        (array_agg(value) FILTER (WHERE index_name = 'by_first_seen_at'))[1] AS by_first_seen_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_first_seen_at'))[1] AS by_first_seen_at_position,
        (array_agg(value) FILTER (WHERE index_name = 'by_last_seen_at'))[1] AS by_last_seen_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_last_seen_at'))[1] AS by_last_seen_at_position,
        (array_agg(value) FILTER (WHERE index_name = 'by_severity'))[1] AS by_severity_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_severity'))[1] AS by_severity_position,
        (array_agg(value) FILTER (WHERE index_name = 'by_cvss'))[1] AS by_cvss_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_cvss'))[1] AS by_cvss_position
    FROM index_entries WHERE collection = 'vulnerability-findings' GROUP BY org_id, id
) AS moved
WHERE records.org_id = moved.org_id AND records.collection = 'vulnerability-findings' AND records.id = moved.id;

UPDATE records SET
    created_at_value = moved.created_at_value,
    created_position = moved.created_position,
    updated_at_value = moved.updated_at_value,
    updated_position = moved.updated_position,
    endpoint_id_value = moved.endpoint_id_value,
    status_value = moved.status_value,
    target_type_value = moved.target_type_value,
    package_manager_value = moved.package_manager_value,
    by_due_at_value = moved.by_due_at_value,
    by_due_at_position = moved.by_due_at_position
FROM (
    SELECT org_id, id,
        (array_agg(value) FILTER (WHERE index_name = 'created_at'))[1] AS created_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'created_at'))[1] AS created_position,
        (array_agg(value) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_position,
        (array_agg(value) FILTER (WHERE index_name = 'endpoint_id'))[1] AS endpoint_id_value,
        (array_agg(value) FILTER (WHERE index_name = 'status'))[1] AS status_value,
        (array_agg(value) FILTER (WHERE index_name = 'target_type'))[1] AS target_type_value,
        (array_agg(value) FILTER (WHERE index_name = 'package_manager'))[1] AS package_manager_value,
        (array_agg(value) FILTER (WHERE index_name = 'by_due_at'))[1] AS by_due_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_due_at'))[1] AS by_due_at_position
    FROM index_entries WHERE collection = 'remediation-targets' GROUP BY org_id, id
) AS moved
WHERE records.org_id = moved.org_id AND records.collection = 'remediation-targets' AND records.id = moved.id;

UPDATE records SET
    created_at_value = moved.created_at_value,
    created_position = moved.created_position,
    updated_at_value = moved.updated_at_value,
    updated_position = moved.updated_position,
    status_value = moved.status_value,
    by_name_value = moved.by_name_value,
    by_name_position = moved.by_name_position
FROM (
    SELECT org_id, id,
        (array_agg(value) FILTER (WHERE index_name = 'created_at'))[1] AS created_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'created_at'))[1] AS created_position,
        (array_agg(value) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_at_value,
        (array_agg(position) FILTER (WHERE index_name = 'updated_at'))[1] AS updated_position,
        (array_agg(value) FILTER (WHERE index_name = 'status'))[1] AS status_value,
        (array_agg(value) FILTER (WHERE index_name = 'by_name'))[1] AS by_name_value,
        (array_agg(position) FILTER (WHERE index_name = 'by_name'))[1] AS by_name_position
    FROM index_entries WHERE collection = 'scopes' GROUP BY org_id, id
) AS moved
WHERE records.org_id = moved.org_id AND records.collection = 'scopes' AND records.id = moved.id;

DELETE FROM index_entries WHERE NOT ((collection = 'endpoints' AND index_name = 'tag') OR (collection = 'remediation-targets' AND index_name = 'scope_id') OR (collection = 'remediation-targets' AND index_name = 'finding_id'));

CREATE INDEX records_endpoints_created_at ON records (org_id, created_at_value, created_position, id)
    WHERE collection = 'endpoints' AND created_at_value IS NOT NULL;
CREATE INDEX records_endpoints_updated_at ON records (org_id, updated_at_value, updated_position, id)
    WHERE collection = 'endpoints' AND updated_at_value IS NOT NULL;
CREATE INDEX records_endpoints_os_family ON records (org_id, os_family_value, created_position, id)
    WHERE collection = 'endpoints' AND os_family_value IS NOT NULL;
CREATE INDEX records_endpoints_has_agent ON records (org_id, has_agent_value, created_position, id)
    WHERE collection = 'endpoints' AND has_agent_value IS NOT NULL;
CREATE INDEX records_endpoints_by_last_seen_at ON records (org_id, by_last_seen_at_value, by_last_seen_at_position, id)
    WHERE collection = 'endpoints' AND by_last_seen_at_value IS NOT NULL;
CREATE INDEX records_endpoints_by_hostname ON records (org_id, by_hostname_value, by_hostname_position, id)
    WHERE collection = 'endpoints' AND by_hostname_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_created_at ON records (org_id, created_at_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND created_at_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_updated_at ON records (org_id, updated_at_value, updated_position, id)
    WHERE collection = 'vulnerability-findings' AND updated_at_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_endpoint_id ON records (org_id, endpoint_id_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND endpoint_id_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_severity ON records (org_id, severity_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND severity_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_status ON records (org_id, status_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND status_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_finding_type ON records (org_id, finding_type_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND finding_type_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_cve_id ON records (org_id, cve_id_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND cve_id_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_kev ON records (org_id, kev_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND kev_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_scanner ON records (org_id, scanner_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND scanner_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_remediation_target_id ON records (org_id, remediation_target_id_value, created_position, id)
    WHERE collection = 'vulnerability-findings' AND remediation_target_id_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_by_first_seen_at ON records (org_id, by_first_seen_at_value, by_first_seen_at_position, id)
    WHERE collection = 'vulnerability-findings' AND by_first_seen_at_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_by_last_seen_at ON records (org_id, by_last_seen_at_value, by_last_seen_at_position, id)
    WHERE collection = 'vulnerability-findings' AND by_last_seen_at_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_by_severity ON records (org_id, by_severity_value, by_severity_position, id)
    WHERE collection = 'vulnerability-findings' AND by_severity_value IS NOT NULL;
CREATE INDEX records_vulnerability_findings_by_cvss ON records (org_id, by_cvss_value, by_cvss_position, id)
    WHERE collection = 'vulnerability-findings' AND by_cvss_value IS NOT NULL;
CREATE INDEX records_remediation_targets_created_at ON records (org_id, created_at_value, created_position, id)
    WHERE collection = 'remediation-targets' AND created_at_value IS NOT NULL;
CREATE INDEX records_remediation_targets_updated_at ON records (org_id, updated_at_value, updated_position, id)
    WHERE collection = 'remediation-targets' AND updated_at_value IS NOT NULL;
CREATE INDEX records_remediation_targets_endpoint_id ON records (org_id, endpoint_id_value, created_position, id)
    WHERE collection = 'remediation-targets' AND endpoint_id_value IS NOT NULL;
CREATE INDEX records_remediation_targets_status ON records (org_id, status_value, created_position, id)
    WHERE collection = 'remediation-targets' AND status_value IS NOT NULL;
CREATE INDEX records_remediation_targets_target_type ON records (org_id, target_type_value, created_position, id)
    WHERE collection = 'remediation-targets' AND target_type_value IS NOT NULL;
CREATE INDEX records_remediation_targets_package_manager ON records (org_id, package_manager_value, created_position, id)
    WHERE collection = 'remediation-targets' AND package_manager_value IS NOT NULL;
CREATE INDEX records_remediation_targets_by_due_at ON records (org_id, by_due_at_value, by_due_at_position, id)
    WHERE collection = 'remediation-targets' AND by_due_at_value IS NOT NULL;
CREATE INDEX records_scopes_created_at ON records (org_id, created_at_value, created_position, id)
    WHERE collection = 'scopes' AND created_at_value IS NOT NULL;
CREATE INDEX records_scopes_updated_at ON records (org_id, updated_at_value, updated_position, id)
    WHERE collection = 'scopes' AND updated_at_value IS NOT NULL;
CREATE INDEX records_scopes_status ON records (org_id, status_value, created_position, id)
    WHERE collection = 'scopes' AND status_value IS NOT NULL;
CREATE INDEX records_scopes_by_name ON records (org_id, by_name_value, by_name_position, id)
    WHERE collection = 'scopes' AND by_name_value IS NOT NULL;
