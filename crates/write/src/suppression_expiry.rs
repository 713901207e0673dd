//! Suppressions that expire: a finding `suppressed` whose
//! `suppression.expires_at` has passed goes back to `open` (the contract's
//! suppressed → open), its suppression cleared, through the write path's
//! checks, so its endpoint's `open_findings` rises in the same batch and
//! its history names the cause `suppression_expired`. The server runs
//! [`expire_suppressions`] for every organization at start and every
//! [`EXPIRY_EVERY`]. It finds them in the index of suppressions by expiry
//! ([`SUPPRESSION_EXPIRY`]): a suppression that has not expired is never
//! read, however many an organization holds.

use std::collections::HashMap;
use std::time::Duration;

use esr_contract::Collection;
use esr_contract::indexes::{SORTED, SUPPRESSION_EXPIRY};
use esr_contract::time::Timestamp;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::ingest::client_fields;
use crate::ingest::{HistoryCause, KnownRecords};
use esr_store::{IndexWalk, Store, StoreError, StoreReader};

/// How often the server looks for expired suppressions.
pub const EXPIRY_EVERY: Duration = Duration::from_secs(60);

const FINDINGS: Collection = Collection::VulnerabilityFindings;

/// How many expired suppressions one batch reopens; the rest go in the
/// batches after it, so that neither a batch nor what it reads grows with
/// the organization.
const REOPEN_PER_BATCH: usize = 1_000;

/// Reopens the organization's findings whose suppression expired before
/// now, in batches of [`REOPEN_PER_BATCH`]; how many. An organization with
/// none takes no write lock.
pub fn expire_suppressions(db: &dyn Store, organization: Uuid) -> Result<usize, StoreError> {
    let suppressed = db.reader(organization)?.index_count(FINDINGS, SUPPRESSION_EXPIRY.name, SORTED)?;
    let mut reopened = 0;
    // Each full batch reopens findings for good: at most this many batches.
    for _ in 0..=suppressed as usize / REOPEN_PER_BATCH {
        let batch = reopen_some(db, organization)?;
        reopened += batch;
        if batch < REOPEN_PER_BATCH {
            break;
        }
    }
    Ok(reopened)
}

/// Reopens up to [`REOPEN_PER_BATCH`] expired suppressions in one batch.
fn reopen_some(db: &dyn Store, organization: Uuid) -> Result<usize, StoreError> {
    let now = Timestamp(esr_system::clock::unix_now_nanos());
    if expired(db.reader(organization)?.as_mut(), now, 1)?.is_empty() {
        return Ok(0);
    }
    // Read again under the write lock: what is reopened is what is stored.
    let cause = HistoryCause::suppression_expired();
    let mut reopened = 0;
    db.write_batch(organization, &mut |reader, now| {
        let findings = expired(reader, now, REOPEN_PER_BATCH)?;
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
        match crate::ingest::write_records_checked(reader, now, &[(FINDINGS, lines)], &known, &cause) {
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

/// Up to `limit` suppressed findings whose suppression expired before
/// `now`, soonest first: the entries of the index of suppressions by expiry
/// up to `now`, then those records. A suppression that has not expired is
/// never read.
fn expired(reader: &mut dyn StoreReader, now: Timestamp, limit: usize) -> Result<Vec<Value>, StoreError> {
    let expiring = reader.index_positions(FINDINGS, &IndexWalk::new(SUPPRESSION_EXPIRY.name, SORTED, limit))?;
    let ids: Vec<Uuid> =
        expiring.into_iter().take_while(|expiry| expiry.position < now.0).map(|expiry| expiry.id).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut found = reader
        .get_many(FINDINGS, &ids)?
        .into_iter()
        .map(|(id, bytes)| {
            serde_json::from_slice::<Value>(&bytes)
                .map(|finding| (id, finding))
                .map_err(|error| StoreError::Corrupt(format!("{FINDINGS} record {id}: {error}")))
        })
        .collect::<Result<HashMap<Uuid, Value>, _>>()?;
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
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
