//! The change feed and records' histories as rows: `changes` holds each
//! record's latest change (one row per record, its sequence replaced by a
//! newer change), `write_clocks.sequence` the last sequence given and
//! `pruned_through` the highest deletion event removed, `history` each
//! record's entries numbered from 1.
//!
//! Sequences are given under the organization's write lock, so they follow
//! commit order on every host. A batch's events, its sequence and its
//! history entries take one statement each, whatever its size.

use std::collections::{HashMap, HashSet};

use postgres::GenericClient;
use postgres::types::ToSql;
use uuid::Uuid;

use super::{Session, Statement, prepared};
use esr_store::{ChangeEvent, ChangeLog, ChangeOperation, Collection, MAX_SCAN, StoreError};

/// How an operation is stored (`"char"`).
fn code_of(operation: ChangeOperation) -> i8 {
    (match operation {
        ChangeOperation::Created => b'c',
        ChangeOperation::Updated => b'u',
        ChangeOperation::Deleted => b'd',
    }) as i8
}

fn operation_of(code: i8) -> Result<ChangeOperation, StoreError> {
    match code as u8 {
        b'c' => Ok(ChangeOperation::Created),
        b'u' => Ok(ChangeOperation::Updated),
        b'd' => Ok(ChangeOperation::Deleted),
        other => Err(StoreError::Corrupt(format!("a change event has the unknown operation {:?}", other as char))),
    }
}

fn collection_of(name: &str) -> Result<Collection, StoreError> {
    Collection::named(name)
        .ok_or_else(|| StoreError::Corrupt(format!("a change event names the unknown collection {name:?}")))
}

/// A sequence as PostgreSQL stores it (`bigint`).
fn stored_sequence(sequence: u64) -> Result<i64, StoreError> {
    i64::try_from(sequence)
        .map_err(|_| StoreError::Backend(format!("change sequence {sequence} is past what PostgreSQL stores")))
}

/// A sequence as read back: never negative (the columns start at 0).
fn read_sequence(stored: i64) -> u64 {
    stored.max(0) as u64
}

/// What one batch adds to the change feed and to histories, gathered as
/// `write_in` goes through its writes and written at the end.
pub(super) struct BatchChanges<'a> {
    /// The batch's write time: every event's `changed_at`.
    changed_at: i64,
    /// The last sequence given (the organization's, before the batch, at first).
    latest: u64,
    /// The batch's events in sequence order: (collection, id, operation, sequence).
    events: Vec<(Collection, Uuid, ChangeOperation, u64)>,
    /// The records that have their event in this batch already.
    given: HashSet<(Collection, Uuid)>,
    /// The records the batch deletes.
    deleted: HashSet<(Collection, Uuid)>,
    /// The history entries to append, in order: (collection, id, entry).
    history: Vec<(Collection, Uuid, &'a [u8])>,
}

impl<'a> BatchChanges<'a> {
    /// The changes of a batch written at `changed_at`, after the
    /// organization's change `latest`.
    pub(super) fn after(latest: u64, changed_at: i64) -> BatchChanges<'a> {
        BatchChanges {
            changed_at,
            latest,
            events: Vec::new(),
            given: HashSet::new(),
            deleted: HashSet::new(),
            history: Vec::new(),
        }
    }

    /// Gives the record its event with the next sequence, unless the batch
    /// gave it one already (an id's event is where it first appears).
    pub(super) fn change(&mut self, collection: Collection, id: Uuid, operation: ChangeOperation) {
        if operation == ChangeOperation::Deleted {
            self.deleted.insert((collection, id));
        }
        if self.given.insert((collection, id)) {
            self.latest += 1;
            self.events.push((collection, id, operation, self.latest));
        }
    }

    /// Appends entries to records' histories.
    pub(super) fn append_history(&mut self, collection: Collection, entries: &'a [(Uuid, Vec<u8>)]) {
        self.history.extend(entries.iter().map(|(id, entry)| (collection, *id, entry.as_slice())));
    }

    /// Writes the events (each replacing its record's earlier one), the
    /// organization's latest sequence and the history entries: a statement
    /// each. A record the batch deletes keeps none of its history, so the
    /// entries the batch appends to one are dropped.
    pub(super) fn write(
        self,
        transaction: &mut postgres::Transaction<'_>,
        statements: &mut HashMap<String, Statement>,
        organization: Uuid,
    ) -> Result<(), StoreError> {
        if !self.events.is_empty() {
            let sequences =
                self.events.iter().map(|(.., sequence)| stored_sequence(*sequence)).collect::<Result<Vec<_>, _>>()?;
            let collections: Vec<&str> = self.events.iter().map(|(collection, ..)| collection.name()).collect();
            let ids: Vec<Uuid> = self.events.iter().map(|(_, id, ..)| *id).collect();
            let operations: Vec<i8> = self.events.iter().map(|(_, _, operation, _)| code_of(*operation)).collect();
            let upsert = prepared(
                statements,
                transaction,
                "INSERT INTO changes (org_id, sequence, collection, id, operation, changed_at) \
                 SELECT $1, change.sequence, change.collection, change.id, change.operation, $6 \
                 FROM unnest($2::int8[], $3::text[], $4::uuid[], $5::\"char\"[]) \
                 AS change(sequence, collection, id, operation) \
                 ON CONFLICT (org_id, collection, id) DO UPDATE SET sequence = excluded.sequence, \
                 operation = excluded.operation, changed_at = excluded.changed_at",
            )?;
            let params: [&(dyn ToSql + Sync); 6] =
                [&organization, &sequences, &collections, &ids, &operations, &self.changed_at];
            transaction.execute(&upsert, &params).map_err(crate::store_error)?;
            // The row exists: the batch's write time was taken in it.
            let advance = prepared(statements, transaction, "UPDATE write_clocks SET sequence = $2 WHERE org_id = $1")?;
            transaction
                .execute(&advance, &[&organization, &stored_sequence(self.latest)?])
                .map_err(crate::store_error)?;
        }
        let history: Vec<_> = self
            .history
            .into_iter()
            .filter(|(collection, id, _)| !self.deleted.contains(&(*collection, *id)))
            .collect();
        if !history.is_empty() {
            // Each entry's place among the batch's entries of its record:
            // its number continues after the record's highest stored one (a
            // record the batch creates has none to look up).
            let created: HashSet<(Collection, Uuid)> = self
                .events
                .iter()
                .filter(|(.., operation, _)| *operation == ChangeOperation::Created)
                .map(|(collection, id, ..)| (*collection, *id))
                .collect();
            let mut appended: HashMap<(Collection, Uuid), i64> = HashMap::new();
            let places: Vec<i64> = history
                .iter()
                .map(|(collection, id, _)| {
                    let place = appended.entry((*collection, *id)).or_default();
                    *place += 1;
                    *place
                })
                .collect();
            let collections: Vec<&str> = history.iter().map(|(collection, ..)| collection.name()).collect();
            let ids: Vec<Uuid> = history.iter().map(|(_, id, _)| *id).collect();
            let entries: Vec<&[u8]> = history.iter().map(|(.., entry)| *entry).collect();
            let new: Vec<bool> =
                history.iter().map(|(collection, id, _)| created.contains(&(*collection, *id))).collect();
            let append = prepared(
                statements,
                transaction,
                "INSERT INTO history (org_id, collection, id, n, entry) \
                 SELECT $1, added.collection, added.id, CASE WHEN added.new THEN 0 ELSE coalesce((SELECT max(h.n) \
                 FROM history h WHERE h.org_id = $1 AND h.collection = added.collection AND h.id = added.id), 0) END \
                 + added.place, added.entry FROM unnest($2::text[], $3::uuid[], $4::int8[], $5::bytea[], $6::bool[]) \
                 AS added(collection, id, place, entry, new)",
            )?;
            transaction
                .execute(&append, &[&organization, &collections, &ids, &places, &entries, &new])
                .map_err(crate::store_error)?;
        }
        Ok(())
    }
}

/// Removes the history of deleted records.
pub(super) fn delete_history(
    transaction: &mut postgres::Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    organization: Uuid,
    collection: Collection,
    ids: &[Uuid],
) -> Result<(), StoreError> {
    let remove = prepared(
        statements,
        transaction,
        "DELETE FROM history WHERE org_id = $1 AND collection = $2 AND id = ANY($3)",
    )?;
    transaction.execute(&remove, &[&organization, &collection.name(), &ids]).map_err(crate::store_error)?;
    Ok(())
}

/// Removes the organization's deletion events older than `before`, raising
/// `pruned_through` to the highest sequence removed; how many were. The
/// caller holds the organization's write lock.
pub(super) fn prune(
    transaction: &mut postgres::Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    organization: Uuid,
    before: i64,
) -> Result<u64, StoreError> {
    let remove = prepared(
        statements,
        transaction,
        "WITH gone AS (DELETE FROM changes WHERE org_id = $1 AND operation = 'd' AND changed_at < $2 \
         RETURNING sequence) SELECT count(*), coalesce(max(sequence), 0) FROM gone",
    )?;
    let row = transaction.query_one(&remove, &[&organization, &before]).map_err(crate::store_error)?;
    let (removed, highest): (i64, i64) = (row.get(0), row.get(1));
    if removed > 0 {
        let raise = prepared(
            statements,
            transaction,
            "UPDATE write_clocks SET pruned_through = greatest(pruned_through, $2) WHERE org_id = $1",
        )?;
        transaction.execute(&raise, &[&organization, &highest]).map_err(crate::store_error)?;
    }
    Ok(removed.max(0) as u64)
}

/// Starts the organization's feed at `latest` when it stands below it,
/// nothing retained up to there. The caller holds the organization's write
/// lock.
pub(super) fn continue_from(
    transaction: &mut postgres::Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    organization: Uuid,
    latest: u64,
) -> Result<(), StoreError> {
    // A new row's write clock starts at 0: the next batch takes the
    // database's clock (see `next_write_time`).
    let start = prepared(
        statements,
        transaction,
        "INSERT INTO write_clocks (org_id, last_write, sequence, pruned_through) VALUES ($1, 0, $2, $2) \
         ON CONFLICT (org_id) DO UPDATE SET sequence = excluded.sequence, pruned_through = excluded.pruned_through \
         WHERE write_clocks.sequence < excluded.sequence",
    )?;
    transaction.execute(&start, &[&organization, &stored_sequence(latest)?]).map_err(crate::store_error)?;
    Ok(())
}

/// What the change feed and histories hold that the records and write
/// clocks contradict, in words: events of records that do not exist
/// (deletions aside) or that do (deletions), sequences past their
/// organization's latest, histories of records that do not exist.
pub(super) fn verify(transaction: &mut postgres::Transaction<'_>) -> Result<Vec<String>, StoreError> {
    const RECORD_EXISTS: &str =
        "EXISTS (SELECT 1 FROM records r WHERE r.org_id = c.org_id AND r.collection = c.collection AND r.id = c.id)";
    let mut problems = Vec::new();
    let rows = transaction
        .query(
            &format!(
                "SELECT c.collection, count(*) FILTER (WHERE c.operation <> 'd' AND NOT {RECORD_EXISTS}), \
             count(*) FILTER (WHERE c.operation = 'd' AND {RECORD_EXISTS}) FROM changes c \
             GROUP BY c.collection ORDER BY c.collection"
            ),
            &[],
        )
        .map_err(crate::store_error)?;
    for row in rows {
        let (collection, missing, present): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
        if missing > 0 {
            problems.push(format!("{collection}: {missing} change events of records that do not exist"));
        }
        if present > 0 {
            problems.push(format!("{collection}: {present} deletion events of records that exist"));
        }
    }
    let past: i64 = transaction
        .query_one(
            "SELECT count(*) FROM changes c LEFT JOIN write_clocks w ON w.org_id = c.org_id \
             WHERE c.sequence > coalesce(w.sequence, 0)",
            &[],
        )
        .map_err(crate::store_error)?
        .get(0);
    if past > 0 {
        problems.push(format!("{past} change events have a sequence past their organization's latest"));
    }
    let rows = transaction
        .query(
            "SELECT h.collection, count(DISTINCT h.id) FROM history h WHERE NOT EXISTS (SELECT 1 FROM records r \
         WHERE r.org_id = h.org_id AND r.collection = h.collection AND r.id = h.id) \
         GROUP BY h.collection ORDER BY h.collection",
            &[],
        )
        .map_err(crate::store_error)?;
    for row in rows {
        let (collection, orphans): (String, i64) = (row.get(0), row.get(1));
        problems.push(format!("{collection}: the history of {orphans} records that do not exist"));
    }
    Ok(problems)
}

/// Where the organization's feed stands, as a statement of a simple query
/// (sent with the snapshot's `BEGIN`, [`crate::PgReader`]); the id is a
/// UUID, so it is written into the text as is.
pub(super) fn change_log_statement(organization: Uuid) -> String {
    format!("SELECT sequence, pruned_through FROM write_clocks WHERE org_id = '{organization}'")
}

/// The change log from the answer to [`change_log_statement`] (no row:
/// zeros before the organization's first write).
pub(super) fn change_log_of(answer: &[postgres::SimpleQueryMessage]) -> Result<ChangeLog, StoreError> {
    let Some(row) = answer.iter().find_map(|message| match message {
        postgres::SimpleQueryMessage::Row(row) => Some(row),
        _ => None,
    }) else {
        return Ok(ChangeLog::default());
    };
    let sequence = |column: usize| -> Result<u64, StoreError> {
        row.get(column)
            .and_then(|text| text.parse::<i64>().ok())
            .map(read_sequence)
            .ok_or_else(|| StoreError::Corrupt("the change feed's sequence is not a number".to_owned()))
    };
    Ok(ChangeLog { latest: sequence(0)?, pruned_through: sequence(1)? })
}

impl<C: GenericClient + Send> Session<'_, C> {
    /// Where the organization's feed stands (zeros before its first write).
    pub fn change_log(&mut self) -> Result<ChangeLog, StoreError> {
        let organization = self.organization;
        let row =
            self.query_opt("SELECT sequence, pruned_through FROM write_clocks WHERE org_id = $1", &[&organization])?;
        Ok(row.map_or_else(ChangeLog::default, |row| ChangeLog {
            latest: read_sequence(row.get(0)),
            pruned_through: read_sequence(row.get(1)),
        }))
    }

    /// Up to `limit` (at most [`MAX_SCAN`]) events after `after`, in
    /// sequence order, of these collections (every one when empty).
    pub fn changes(
        &mut self,
        after: u64,
        collections: &[Collection],
        limit: usize,
    ) -> Result<Vec<ChangeEvent>, StoreError> {
        let organization = self.organization;
        // Past the highest sequence PostgreSQL stores, there is nothing.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = limit.min(MAX_SCAN) as i64;
        const SELECT: &str = "SELECT sequence, collection, id, operation, changed_at FROM changes \
                              WHERE org_id = $1 AND sequence > $2";
        let rows = if collections.is_empty() {
            self.query(&format!("{SELECT} ORDER BY sequence LIMIT $3"), &[&organization, &after, &limit])?
        } else {
            self.query(
                &format!("{SELECT} AND collection = ANY($3) ORDER BY sequence LIMIT $4"),
                &[&organization, &after, &collections.iter().map(|c| c.name()).collect::<Vec<_>>(), &limit],
            )?
        };
        rows.iter()
            .map(|row| {
                Ok(ChangeEvent {
                    sequence: read_sequence(row.get(0)),
                    collection: collection_of(row.get(1))?,
                    id: row.get(2),
                    operation: operation_of(row.get(3))?,
                    changed_at: row.get(4),
                })
            })
            .collect()
    }

    /// The record's history entries in the order written.
    pub fn history(&mut self, collection: Collection, id: Uuid) -> Result<Vec<Vec<u8>>, StoreError> {
        let organization = self.organization;
        let rows = self.query(
            "SELECT entry FROM history WHERE org_id = $1 AND collection = $2 AND id = $3 ORDER BY n",
            &[&organization, &collection.name(), &id],
        )?;
        Ok(rows.into_iter().map(|row| row.get(0)).collect())
    }
}
