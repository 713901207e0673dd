//! The audit trail as rows of `audit_entries` (migration 8): each entry's
//! JSON as the bytes written (`body`), under `(org_id, position)`, with its
//! time (`at`, for expiry) and its principal's id (`principal_id`, for the
//! listing's filter) beside it. Positions come from the table's sequence;
//! an entry of no organization is kept under the nil UUID.
//!
//! A batch is one `COPY` whatever its size; a page one statement; an
//! expiry one statement per batch of old entries.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use esr_store::{AUDIT_EXAMINED, AuditEntry, AuditPage, MAX_SCAN, StoreError};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use uuid::Uuid;

use super::{PgStore, store_error};

/// How many entries one expiry statement removes.
const EXPIRY_BATCH: i64 = 10_000;

/// Unix nanoseconds as the time PostgreSQL stores (in microseconds).
fn system_time(nanos: i64) -> SystemTime {
    let offset = Duration::from_nanos(nanos.unsigned_abs());
    if nanos >= 0 {
        UNIX_EPOCH.checked_add(offset).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_sub(offset).unwrap_or(UNIX_EPOCH)
    }
}

/// A principal's id as the `principal_id` column holds it: a `text`
/// column holds no NUL, so one becomes U+FFFD (here and in a filter
/// alike; the entry's body keeps it as it was).
fn column_text(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// A position as read back (the sequence starts at 1).
fn position_of(stored: i64) -> u64 {
    stored.max(0) as u64
}

fn entry_of(position: i64, body: &[u8]) -> Result<(u64, AuditEntry), StoreError> {
    let entry = serde_json::from_slice(body).map_err(|error| {
        StoreError::Corrupt(format!("audit entry {position} is not the JSON it was stored as: {error}"))
    })?;
    Ok((position_of(position), entry))
}

/// The whole batch as one `COPY`, rows in the order given, so that
/// positions follow it. A `COPY` streams its rows a few kilobytes at a
/// time: a batch sent as one statement of arrays (thousands of entries,
/// megabytes) grew the write buffers of every pooled connection that ever
/// sent one to that size, and the host kept them all.
const APPEND: &str = "COPY audit_entries (org_id, at, principal_id, body) FROM STDIN BINARY";

/// A page without a filter: the entries past `after`, up to the limit.
const PAGE: &str = "SELECT position, body FROM audit_entries WHERE org_id = $1 AND position > $2 \
     ORDER BY position LIMIT $3";

/// A page with a principal filter: the window of entries examined (read
/// from the primary key's index, which includes `principal_id`), the
/// bodies of those that match, and one more row, with no body, holding how
/// many were examined and the last position examined.
const FILTERED_PAGE: &str = "WITH examined AS ( \
         SELECT position, principal_id FROM audit_entries WHERE org_id = $1 AND position > $2 \
         ORDER BY position LIMIT $3 \
     ), matched AS ( \
         SELECT position FROM examined WHERE principal_id = $4 ORDER BY position LIMIT $5 \
     ) \
     SELECT entry.position, entry.body, 0::bigint FROM matched \
         JOIN audit_entries entry ON entry.org_id = $1 AND entry.position = matched.position \
     UNION ALL SELECT max(position), NULL, count(*) FROM examined";

/// One batch of expired entries: any of them (the index on `at` finds
/// them), by their key.
const EXPIRE: &str = "DELETE FROM audit_entries WHERE (org_id, position) IN ( \
         SELECT org_id, position FROM audit_entries WHERE at < $1 LIMIT $2 \
     )";

impl PgStore {
    pub(super) fn append_audit_entries(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        // Every entry is checked before any is written.
        let times = entries.iter().map(|entry| entry.checked_at().map(system_time)).collect::<Result<Vec<_>, _>>()?;
        let mut connection = self.connection()?;
        let sink = connection.client.copy_in(APPEND).map_err(store_error)?;
        let mut writer = BinaryCopyInWriter::new(sink, &[Type::UUID, Type::TIMESTAMPTZ, Type::TEXT, Type::BYTEA]);
        for (entry, at) in entries.iter().zip(&times) {
            let body = serde_json::to_vec(entry).map_err(|error| StoreError::InvalidRecord(error.to_string()))?;
            let principal = entry.principal.id.as_deref().map(column_text);
            writer.write(&[&entry.trail(), at, &principal, &body]).map_err(store_error)?;
        }
        writer.finish().map_err(store_error)?;
        Ok(())
    }

    pub(super) fn read_audit_page(
        &self,
        organization: Uuid,
        after: Option<u64>,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let limit = limit.clamp(1, MAX_SCAN);
        let Ok(after) = i64::try_from(after.unwrap_or(0)) else {
            // Past every position the sequence gives.
            return Ok(AuditPage::default());
        };
        let mut connection = self.connection()?;
        let Some(principal) = principal else {
            let rows = connection.query(PAGE, &[&organization, &after, &(limit as i64)])?;
            let entries = rows.iter().map(|row| entry_of(row.get(0), row.get(1))).collect::<Result<Vec<_>, _>>()?;
            let next = if entries.len() == limit { entries.last().map(|(position, _)| *position) } else { None };
            return Ok(AuditPage { entries, next });
        };
        let rows = connection.query(
            FILTERED_PAGE,
            &[&organization, &after, &(AUDIT_EXAMINED as i64), &column_text(principal), &(limit as i64)],
        )?;
        let mut page = AuditPage::default();
        let (mut examined, mut last_examined) = (0, None);
        for row in &rows {
            match row.get::<_, Option<&[u8]>>(1) {
                Some(body) => page.entries.push(entry_of(row.get(0), body)?),
                None => {
                    examined = row.get::<_, i64>(2);
                    last_examined = row.get::<_, Option<i64>>(0).map(position_of);
                }
            }
        }
        page.entries.sort_unstable_by_key(|(position, _)| *position);
        page.next = if page.entries.len() == limit {
            page.entries.last().map(|(position, _)| *position)
        } else if examined == AUDIT_EXAMINED as i64 {
            last_examined
        } else {
            None
        };
        Ok(page)
    }

    pub(super) fn expire_audit_entries(&self, before: i64) -> Result<u64, StoreError> {
        let before = system_time(before);
        let mut removed = 0;
        loop {
            // A connection per batch: a long expiry never holds one for long.
            let batch = self.connection()?.execute(EXPIRE, &[&before, &EXPIRY_BATCH])?;
            removed += batch;
            if batch < EXPIRY_BATCH as u64 {
                return Ok(removed);
            }
        }
    }
}
