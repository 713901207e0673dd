//! A batch built before the organization's lock is taken
//! ([`Store::write_batch_ahead`](esr_store::Store::write_batch_ahead)).
//!
//! An import's batches are written one at a time under the organization's
//! lock, and building one (its checks against the store, its records) took
//! a sixth of the time the lock was held while PostgreSQL waited
//! (docs/performance.md). So the batch behind is built while the one ahead
//! is written: on what is committed then, at a provisional write time, in
//! the same transaction before its lock. Once the lock is held, what was
//! built is kept only if it still holds:
//!
//! - the provisional time is still later than the organization's last
//!   write, so write times keep increasing in commit order;
//! - the build read records by id only (a walk or a count could miss a
//!   record written since), and
//! - none of those ids has a change event after the sequence committed
//!   when the build began. Every write the server makes records one (a
//!   bulk load, which does not, never runs beside it), and the one kept per
//!   record moves to the record's latest change; events removed since
//!   (`pruned_through` moved) leave nothing to compare, so nothing is kept;
//!   nor is it when more than [`MAX_CHANGES_SINCE`] events came since.
//!
//! The rows its `COPY` sends are encoded before the lock too, so that
//! PostgreSQL, once the lock is held, never waits for the host's encoding.
//!
//! Otherwise the batch is built again under the lock. An organization
//! whose builds keep being overtaken (batches that touch the records of the
//! batch before) tries again only after some batches built under the lock,
//! so the wasted work stays small.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use postgres::Statement;
use uuid::Uuid;

use esr_store::{BuildBatch, Collection, CollectionWrite, StoreError, WriteTime};

use crate::{DATABASE_NOW, EncodedWrites, ReadById, Session, encode_writes, prepared, store_error};

/// A batch built before the lock, and what it was built on.
pub(super) struct BuiltAhead {
    now: WriteTime,
    /// The organization's change sequence committed when the build began.
    sequence: i64,
    pruned_through: i64,
    writes: Vec<CollectionWrite>,
    read_by_id: ReadById,
    encoded: EncodedWrites,
}

/// The most change events since the build began that confirming it reads:
/// a few batches' worth.
const MAX_CHANGES_SINCE: usize = 65_536;

/// What a write goes on with under the lock: its time, the organization's
/// latest change sequence, the writes, what their build read by id and
/// their rows encoded.
pub(super) type Confirmed = (WriteTime, u64, Vec<CollectionWrite>, ReadById, EncodedWrites);

/// What building ahead of the lock gave.
pub(super) enum Ahead {
    /// An organization never written: nothing to build on.
    NothingToBuildOn,
    /// The build failed or read more than records by id: it is built under
    /// the lock, where its failure is the answer.
    Unusable,
    Built(BuiltAhead),
}

/// Builds the batch on what is committed now, before the lock.
pub(super) fn build_ahead(
    transaction: &mut postgres::Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    organization: Uuid,
    build: &mut BuildBatch<'_>,
) -> Result<Ahead, StoreError> {
    // The time `next_write_time` would give now.
    let clock = prepared(
        statements,
        transaction,
        &format!(
            "SELECT sequence, pruned_through, greatest({DATABASE_NOW}, last_write + 1000) \
             FROM write_clocks WHERE org_id = $1"
        ),
    )?;
    let Some(row) = transaction.query_opt(&clock, &[&organization]).map_err(store_error)? else {
        return Ok(Ahead::NothingToBuildOn);
    };
    let (sequence, pruned_through, now): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let now = WriteTime(now);
    // A failed statement ends the transaction's use; the savepoint keeps it.
    transaction.batch_execute("SAVEPOINT ahead").map_err(store_error)?;
    let mut reader = Session::new(transaction, statements, organization, Some(ReadById::new()));
    let built = build(&mut reader, now);
    let only_by_id = reader.read_only_by_id();
    let read_by_id = reader.read_by_id.take().unwrap_or_default();
    match built {
        // A row that cannot be encoded fails the batch under the lock.
        Ok(writes) if only_by_id => Ok(match encode_writes(&writes) {
            Ok(encoded) => Ahead::Built(BuiltAhead { now, sequence, pruned_through, writes, read_by_id, encoded }),
            Err(_) => Ahead::Unusable,
        }),
        Ok(_) => Ok(Ahead::Unusable),
        Err(_) => {
            transaction.batch_execute("ROLLBACK TO SAVEPOINT ahead").map_err(store_error)?;
            Ok(Ahead::Unusable)
        }
    }
}

impl BuiltAhead {
    /// Under the lock: what was built, if it still holds (see the module).
    pub(super) fn confirm(
        self,
        transaction: &mut postgres::Transaction<'_>,
        statements: &mut HashMap<String, Statement>,
        organization: Uuid,
    ) -> Result<Option<Confirmed>, StoreError> {
        let claim = prepared(
            statements,
            transaction,
            "UPDATE write_clocks SET last_write = $2 WHERE org_id = $1 AND last_write < $2 \
             RETURNING sequence, pruned_through",
        )?;
        let Some(row) = transaction.query_opt(&claim, &[&organization, &self.now.0]).map_err(store_error)? else {
            return Ok(None);
        };
        let (latest, pruned_through): (i64, i64) = (row.get(0), row.get(1));
        if pruned_through != self.pruned_through {
            return Ok(None);
        }
        if latest != self.sequence {
            // Other writers' batches since the build began, read whole only
            // while few: past that many, building again costs less.
            let changed = prepared(
                statements,
                transaction,
                &format!(
                    "SELECT collection, id FROM changes WHERE org_id = $1 AND sequence > $2 ORDER BY sequence \
                     LIMIT {}",
                    MAX_CHANGES_SINCE + 1
                ),
            )?;
            let rows = transaction.query(&changed, &[&organization, &self.sequence]).map_err(store_error)?;
            if rows.len() > MAX_CHANGES_SINCE {
                return Ok(None);
            }
            for row in rows {
                let (collection, id): (String, Uuid) = (row.get(0), row.get(1));
                let read = Collection::named(&collection).and_then(|collection| self.read_by_id.get(&collection));
                if read.is_some_and(|read| read.contains_key(&id)) {
                    return Ok(None);
                }
            }
        }
        Ok(Some((self.now, latest.max(0) as u64, self.writes, self.read_by_id, self.encoded)))
    }
}

/// Whether building ahead is worth trying for an organization: after a
/// build was overtaken, the next ones wait under the lock, a few more after
/// each overtaken build in a row (at most [`MAX_WAIT`]).
#[derive(Default)]
pub(super) struct AheadOutcomes {
    organizations: Mutex<HashMap<Uuid, Outcomes>>,
}

#[derive(Clone, Copy, Default)]
struct Outcomes {
    overtaken_in_a_row: u32,
    waiting: u32,
}

const MAX_WAIT: u32 = 16;

impl AheadOutcomes {
    pub(super) fn worth_trying(&self, organization: Uuid) -> bool {
        let mut organizations = self.organizations.lock().unwrap_or_else(PoisonError::into_inner);
        match organizations.get_mut(&organization) {
            Some(outcomes) if outcomes.waiting > 0 => {
                outcomes.waiting -= 1;
                false
            }
            _ => true,
        }
    }

    pub(super) fn record(&self, organization: Uuid, kept: bool) {
        let mut organizations = self.organizations.lock().unwrap_or_else(PoisonError::into_inner);
        if kept {
            organizations.remove(&organization);
            return;
        }
        let outcomes = organizations.entry(organization).or_default();
        outcomes.overtaken_in_a_row = outcomes.overtaken_in_a_row.saturating_add(1);
        outcomes.waiting = outcomes.overtaken_in_a_row.min(MAX_WAIT);
    }
}

#[cfg(test)]
mod tests {
    use super::AheadOutcomes;
    use uuid::Uuid;

    #[test]
    fn builds_overtaken_in_a_row_wait_longer_and_one_kept_ends_the_wait() {
        let (outcomes, organization, other) = (AheadOutcomes::default(), Uuid::now_v7(), Uuid::now_v7());
        let tries = |count: usize| (0..count).map(|_| outcomes.worth_trying(organization)).collect::<Vec<_>>();
        assert_eq!(tries(2), [true, true]);
        outcomes.record(organization, false);
        assert_eq!(tries(2), [false, true]);
        outcomes.record(organization, false);
        assert_eq!(tries(3), [false, false, true]);
        // Another organization is not held back.
        assert!(outcomes.worth_trying(other));
        outcomes.record(organization, true);
        assert_eq!(tries(2), [true, true]);
        for _ in 0..100 {
            outcomes.record(organization, false);
        }
        assert_eq!(tries(17).iter().filter(|tried| **tried).count(), 1, "waits at most 16 batches");
    }
}
