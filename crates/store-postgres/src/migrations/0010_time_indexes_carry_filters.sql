-- A count of two ranges (a dashboard's "critical and new this week":
-- `minCvss` with `firstSeenAfter`), or of a time range and a few-valued
-- condition, walked one range's index and read each row it found from the
-- heap to test the rest: 48,665 rows for 7,385 kept at a million findings.
-- Each sort index by a time (the ranges dashboards ask for) now carries
-- the collection's other sort indexes' positions and values, and the
-- values of the indexes counted in pairs (the groups a summary asks for),
-- so such a count reads the index alone (docs/performance.md). Written to
-- run again on a schema that has it.

DROP INDEX IF EXISTS records_endpoints_by_last_seen_at;
CREATE INDEX records_endpoints_by_last_seen_at ON records (org_id, by_last_seen_at_value, by_last_seen_at_position, id)
    INCLUDE (by_hostname_position, by_hostname_value, os_family_value, has_agent_value)
    WHERE collection = 'endpoints' AND by_last_seen_at_value IS NOT NULL;

DROP INDEX IF EXISTS records_vulnerability_findings_by_first_seen_at;
CREATE INDEX records_vulnerability_findings_by_first_seen_at ON records (org_id, by_first_seen_at_value, by_first_seen_at_position, id)
    INCLUDE (by_last_seen_at_position, by_severity_position, by_cvss_position, by_last_seen_at_value, by_severity_value, by_cvss_value, severity_value, status_value, finding_type_value, kev_value)
    WHERE collection = 'vulnerability-findings' AND by_first_seen_at_value IS NOT NULL;

DROP INDEX IF EXISTS records_vulnerability_findings_by_last_seen_at;
CREATE INDEX records_vulnerability_findings_by_last_seen_at ON records (org_id, by_last_seen_at_value, by_last_seen_at_position, id)
    INCLUDE (by_first_seen_at_position, by_severity_position, by_cvss_position, by_first_seen_at_value, by_severity_value, by_cvss_value, severity_value, status_value, finding_type_value, kev_value)
    WHERE collection = 'vulnerability-findings' AND by_last_seen_at_value IS NOT NULL;

DROP INDEX IF EXISTS records_remediation_targets_by_due_at;
CREATE INDEX records_remediation_targets_by_due_at ON records (org_id, by_due_at_value, by_due_at_position, id)
    INCLUDE (status_value, target_type_value, package_manager_value)
    WHERE collection = 'remediation-targets' AND by_due_at_value IS NOT NULL;
