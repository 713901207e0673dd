//! Suppressions that expire: a finding `suppressed` whose
//! `suppression.expires_at` has passed goes back to `open` (the contract's
//! suppressed → open), its suppression cleared, through the write path's
//! checks, so its endpoint's `open_findings` rises in the same batch and
//! its history names the cause `suppression_expired`. The server runs
//! [`expire_suppressions`] for every organization at start and every
//! [`EXPIRY_EVERY`].

use std::time::Duration;

use esr_plugin_sdk::time::Timestamp;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::ingest::{HistoryCause, KnownRecords};
use crate::reports::{client_fields, records_by_index};
use crate::store::{Store, StoreError, StoreReader};

/// How often the server looks for expired suppressions.
pub const EXPIRY_EVERY: Duration = Duration::from_secs(60);

const FINDINGS: &str = "vulnerability-findings";

/// Reopens the organization's findings whose suppression expired before
/// now, in one batch; how many. An organization with none takes no write
/// lock.
pub fn expire_suppressions(db: &dyn Store, organization: Uuid) -> Result<usize, StoreError> {
    {
        let mut reader = db.reader(organization)?;
        if reader.index_count(FINDINGS, "status", "suppressed")? == 0 {
            return Ok(0);
        }
        let now = Timestamp(crate::auth::unix_now_nanos());
        if expired(reader.as_mut(), now)?.is_empty() {
            return Ok(0);
        }
    }
    // Read again under the write lock: what is reopened is what is stored.
    let cause = HistoryCause::suppression_expired();
    let mut reopened = 0;
    db.write_batch(organization, &mut |view, now| {
        let findings = expired(view, now)?;
        reopened = findings.len();
        if findings.is_empty() {
            return Ok(Vec::new());
        }
        let mut known = KnownRecords::new();
        let known_findings = known.entry(FINDINGS).or_default();
        let mut lines = Vec::with_capacity(findings.len());
        for finding in findings {
            let mut line = client_fields(&finding);
            line.insert("status".into(), json!("open"));
            line.insert("suppression".into(), Value::Null);
            if let Some(id) = finding.get("id").and_then(Value::as_str).and_then(|id| Uuid::try_parse(id).ok()) {
                known_findings.insert(id, Some(finding));
            }
            lines.push(Value::Object(line));
        }
        match crate::ingest::write_records_checked(view, now, &[(FINDINGS, lines)], &known, &cause) {
            Ok((_, writes)) => Ok(writes),
            Err(Err(error)) => Err(error),
            Err(Ok(errors)) => {
                // Stored findings that no longer pass the checks: a bug, not input.
                let first = errors.first().map(|e| format!("{}: {}", e.field, e.reason)).unwrap_or_default();
                Err(StoreError::Corrupt(format!("{} expired suppression(s) cannot be reopened: {first}", errors.len())))
            }
        }
    })?;
    Ok(reopened)
}

/// The suppressed findings whose suppression expired before `now`.
fn expired(view: &mut dyn StoreReader, now: Timestamp) -> Result<Vec<Value>, StoreError> {
    let mut suppressed = records_by_index(view, FINDINGS, "status", "suppressed")?;
    suppressed.retain(|finding| {
        finding
            .pointer("/suppression/expires_at")
            .and_then(Value::as_str)
            .and_then(Timestamp::parse)
            .is_some_and(|expires| expires.0 < now.0)
    });
    Ok(suppressed)
}

/// [`expire_suppressions`] for every organization; failures are logged
/// and the next organization is tried.
pub fn expire_everywhere(db: &dyn Store) {
    let organizations = match db.organizations() {
        Ok(organizations) => organizations,
        Err(error) => {
            tracing::warn!(%error, "suppression expiry: the organizations could not be read");
            return;
        }
    };
    for organization in organizations {
        let organization_id = organization.organization_id;
        match expire_suppressions(db, organization_id) {
            Ok(0) => {}
            Ok(reopened) => tracing::info!(%organization_id, reopened, "expired suppressions reopened"),
            Err(error) => tracing::warn!(%organization_id, %error, "suppression expiry failed"),
        }
    }
}
