//! The audit trail: two trees. `audit` holds each entry (its JSON) under
//! `organization ‖ position` (16 + 8 bytes, big-endian), so an
//! organization's trail is one contiguous range in recording order;
//! `audit-by-time` holds `at ‖ position` (8 + 8 bytes, the time
//! order-preserving) → organization, so expiry reads the oldest entries
//! first and nothing else.
//!
//! Positions come from sled's id generator (increasing, never reused,
//! across restarts too), plus one so that none is 0. A batch is written
//! time index first, entries second, and removed in the other order: a
//! crash in between leaves at worst a time-index key pointing at nothing,
//! which the next expiry removes; never an entry expiry cannot find.

use esr_store::{AUDIT_EXAMINED, AuditEntry, AuditPage, MAX_SCAN, StoreError};
use uuid::Uuid;

use super::{Trees, store_error};

pub(super) const AUDIT: &str = "audit";
pub(super) const AUDIT_BY_TIME: &str = "audit-by-time";

/// How many entries one expiry batch removes.
const EXPIRY_BATCH: usize = 10_000;

/// An entry's key: its organization, then its position.
fn entry_key(organization: Uuid, position: u64) -> [u8; 24] {
    let mut key = [0; 24];
    key[..16].copy_from_slice(organization.as_bytes());
    key[16..].copy_from_slice(&position.to_be_bytes());
    key
}

/// Unix nanoseconds as bytes that sort as the times do (the sign bit flipped).
fn time_bytes(at: i64) -> [u8; 8] {
    ((at as u64) ^ (1 << 63)).to_be_bytes()
}

/// A time-index key: the entry's time, then its position.
fn time_key(at: i64, position: u64) -> [u8; 16] {
    let mut key = [0; 16];
    key[..8].copy_from_slice(&time_bytes(at));
    key[8..].copy_from_slice(&position.to_be_bytes());
    key
}

/// The position that ends a key (of either tree).
fn position_of(key: &[u8]) -> Result<u64, StoreError> {
    key.last_chunk::<8>()
        .map(|bytes| u64::from_be_bytes(*bytes))
        .ok_or_else(|| StoreError::Corrupt("an audit key is shorter than its position".into()))
}

/// Whether `body` may hold the principal id whose JSON text is `quoted`:
/// serde_json writes a string the same way each time, so an entry whose
/// bytes do not contain it cannot match, and is not parsed.
fn may_hold(body: &[u8], quoted: &[u8]) -> bool {
    body.windows(quoted.len()).any(|window| window == quoted)
}

fn corrupt(error: serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("an audit entry is not the JSON it was stored as: {error}"))
}

impl Trees {
    pub(super) fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let times = entries.iter().map(AuditEntry::checked_at).collect::<Result<Vec<_>, _>>()?;
        // One appender at a time, so that positions are applied in the
        // order they are given and a reader never sees a later one first.
        let _appending = self.audit_appender.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Entry by entry, not as one `sled::Batch`: a batch holds sled's
        // store-wide write lock while it applies, and every read of every
        // request waits behind a thousand audit entries. Entries need no
        // atomicity between them; each is in its time index before its
        // trail, so a crash leaves at most a time key without an entry.
        for (entry, at) in entries.iter().zip(times) {
            let position = self.db.generate_id().map_err(store_error)?.saturating_add(1);
            let body = serde_json::to_vec(entry).map_err(|error| StoreError::InvalidRecord(error.to_string()))?;
            self.audit_by_time
                .insert(&time_key(at, position)[..], &entry.trail().as_bytes()[..])
                .map_err(store_error)?;
            self.audit.insert(&entry_key(entry.trail(), position)[..], body).map_err(store_error)?;
        }
        self.flush()
    }

    pub(super) fn audit_page(
        &self,
        organization: Uuid,
        after: Option<u64>,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let limit = limit.clamp(1, MAX_SCAN);
        let Some(first) = after.unwrap_or(0).checked_add(1) else {
            return Ok(AuditPage::default());
        };
        let quoted = principal
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|error| StoreError::MalformedCall(error.to_string()))?;
        let mut page = AuditPage::default();
        let mut examined = 0;
        for item in self.audit.range(entry_key(organization, first)..=entry_key(organization, u64::MAX)) {
            let (key, body) = item.map_err(store_error)?;
            let position = position_of(&key)?;
            examined += 1;
            if quoted.as_deref().is_none_or(|quoted| may_hold(&body, quoted)) {
                let entry: AuditEntry = serde_json::from_slice(&body).map_err(corrupt)?;
                // The id's text may have been elsewhere in the entry (a route, a query).
                if principal.is_none() || entry.principal.id.as_deref() == principal {
                    page.entries.push((position, entry));
                    if page.entries.len() == limit {
                        page.next = Some(position);
                        return Ok(page);
                    }
                }
            }
            if examined == AUDIT_EXAMINED {
                page.next = Some(position);
                return Ok(page);
            }
        }
        Ok(page)
    }

    pub(super) fn expire_audit(&self, before: i64) -> Result<u64, StoreError> {
        let end = time_key(before, 0);
        let mut removed = 0;
        loop {
            let mut by_time = sled::Batch::default();
            let mut trail = sled::Batch::default();
            let mut batched = 0;
            for item in self.audit_by_time.range(..end).take(EXPIRY_BATCH) {
                let (key, organization) = item.map_err(store_error)?;
                let organization = Uuid::from_slice(&organization)
                    .map_err(|_| StoreError::Corrupt("an audit time-index entry names no organization".into()))?;
                let entry = entry_key(organization, position_of(&key)?);
                // A key left by a crash between an append's two writes points at nothing.
                if self.audit.contains_key(entry).map_err(store_error)? {
                    removed += 1;
                }
                trail.remove(&entry[..]);
                by_time.remove(key);
                batched += 1;
            }
            if batched == 0 {
                break;
            }
            self.audit.apply_batch(trail).map_err(store_error)?;
            self.audit_by_time.apply_batch(by_time).map_err(store_error)?;
            self.flush()?;
            if batched < EXPIRY_BATCH {
                break;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_keys_sort_as_times_do() {
        let times = [i64::MIN, -1_000, -1, 0, 1, 1_700_000_000_000_000_000, i64::MAX];
        let keys: Vec<_> = times.iter().map(|at| time_key(*at, 7)).collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(time_key(5, u64::MAX) < time_key(6, 0));
    }
}
