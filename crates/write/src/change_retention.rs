//! The change feed's retention: deletion events older than
//! `--change-retention-days` are pruned, organization by organization (a
//! record's other events are its latest change and stay while it exists).
//! A client whose cursor is older is told to start again (`410`).

use std::time::Duration;

use esr_store::{Store, StoreError};

/// How often pruning runs for a retention period: a hundredth of it,
/// between a second and an hour (30 days: hourly; 0 days: every second).
pub fn prune_every(retention: Duration) -> Duration {
    (retention / 100).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Prunes every organization's deletion events older than `retention`;
/// returns how many were removed.
pub fn prune(store: &dyn Store, retention: Duration) -> Result<u64, StoreError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let before = i64::try_from(now.saturating_sub(retention).as_nanos()).unwrap_or(i64::MAX);
    let mut removed = 0;
    for organization in store.organizations()? {
        removed += store.prune_changes(organization.organization_id, before)?;
    }
    Ok(removed)
}
