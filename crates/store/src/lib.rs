//! Storage: the one seam between the host and its storage backends.
//!
//! Everything the host asks of storage goes through [`Store`] and the
//! per-request [`StoreReader`] it opens: records by id and in order, index
//! scans and counts, count-matching, organizations, API keys, secrets and
//! markers, one atomic durable write per batch, a health probe, sizes. Each
//! backend is a crate of its own that depends on this one (`esr-store-sled`,
//! the embedded default; `esr-store-postgres`); no backend type appears in
//! this crate's API, and it depends on nothing above it (HTTP, the component
//! runtime, the write path, auth).
//!
//! Every method may block (a disk read, a network round trip): call them on
//! a blocking thread (`tokio::task::spawn_blocking`), never on the async
//! runtime's worker threads.

pub mod parallel;

use std::path::Path;

use esr_contract::indexes::IndexKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The collections the public API serves.
pub use esr_contract::Collection;

/// The most records (or positions) one scan returns, whatever limit it asks.
pub const MAX_SCAN: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the data directory {0} is in use by another esr process; stop it first, or talk to it through its admin listener"
    )]
    Locked(String),
    #[error(
        "the data directory {0} can be read by other users (mode {1:o}), and it holds the cursor-sealing key and every organization's enrollment token; make it private with `chmod -R go-rwx {0}`"
    )]
    NotPrivate(String, u32),
    /// The backend failed (disk, engine, a statement it refused); its own
    /// error as text.
    #[error("storage: {0}")]
    Backend(String),
    /// The database cannot serve now but may soon: the connection was lost
    /// or refused, the server is shutting down or starting up, a statement
    /// was cancelled (a replica's replay conflict), no pooled connection
    /// came in time. Nothing was committed unless the loss came during a
    /// commit; the caller may retry the whole operation.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The call's time ran out in the store (a statement's timeout, a walk
    /// that checked the deadline): the request answers `503`, as a
    /// component that overran its deadline does.
    #[error("the request's time ran out in the store")]
    DeadlineReached,
    #[error("storage: {0}")]
    Io(#[from] std::io::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    #[error("unknown index: {0}")]
    UnknownIndex(String),
    /// A summary (or another count) would read more than its work budget:
    /// the caller's request is too broad, and says how to narrow it.
    #[error("{0}")]
    TooBroad(String),
    /// A store call a component made with an argument it cannot mean.
    #[error("malformed store call: {0}")]
    MalformedCall(String),
    #[error("{0} holds no esr data (no sled store in it): give the data directory of a deployment")]
    NotADeployment(String),
    /// A database URL no backend of this build serves.
    #[error("{0}")]
    Unsupported(String),
}

impl StoreError {
    /// Whether the operation may succeed when tried again shortly
    /// ([`StoreError::Unavailable`]), rather than failing for a bug or bad data.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// An organization (tenant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Organization {
    pub organization_id: Uuid,
    pub name: String,
    /// Enrollment-only secret handed to device agents; never an API key.
    pub enrollment_token: String,
    pub created_at: String,
}

/// An API key's stored form: everything but the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub name: String,
    pub scopes: Vec<String>,
    /// The key's first characters, to recognise it in listings.
    pub prefix: String,
    pub created_at: String,
    /// After this instant (RFC 3339) the key no longer authenticates.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Set when the key was revoked; it no longer authenticates.
    #[serde(default)]
    pub revoked_at: Option<String>,
    /// When the key last authenticated a request (RFC 3339), as each host
    /// notes it at most once a minute ([`Store::touch_api_key`]); `None`
    /// until its first use (and in records stored before it was kept).
    #[serde(default)]
    pub last_used_at: Option<String>,
}

/// A document the host keeps beside the records (a webhook subscription,
/// its batch in flight, its delivery log): JSON under a kind and an id,
/// with a version every write moves, so that writers on several hosts
/// never overwrite each other unknowingly ([`Store::swap_document`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub id: String,
    pub version: u64,
    pub body: Vec<u8>,
}

/// Who made an audited call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPrincipal {
    /// `api_key`, `client`, `token` or `admin`.
    pub kind: String,
    /// The key's, client's or token subject's id; `None` when a refused
    /// authentication named none.
    #[serde(default)]
    pub id: Option<String>,
    /// Who issued the token, for a token.
    #[serde(default)]
    pub issuer: Option<String>,
}

/// One entry of the audit trail: an authenticated request, a refused
/// authentication or an admin action, as the admin API shows it. Stored as
/// given and read back equal; the store gives each a position
/// ([`Store::append_audit`]) that is not part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When it happened: RFC 3339 (the store refuses anything else, since
    /// expiry goes by it).
    pub at: String,
    pub request_id: String,
    pub principal: AuditPrincipal,
    /// `None` for a refused authentication that named no organization:
    /// such entries are kept (under the nil UUID) but belong to no
    /// organization's trail.
    #[serde(default)]
    pub organization_id: Option<Uuid>,
    pub method: String,
    /// The route's template (`/v1/endpoints/{id}`), not the path.
    pub route: String,
    #[serde(default)]
    pub query: Option<String>,
    pub status: u16,
    /// How many records the answer held or the write changed, when it says.
    #[serde(default)]
    pub records: Option<u64>,
}

impl AuditEntry {
    /// [`AuditEntry::at`] in Unix nanoseconds, when it is RFC 3339.
    pub fn at_nanos(&self) -> Option<i64> {
        WriteTime::parse(&self.at).map(|at| at.0)
    }

    /// The organization whose trail holds the entry: the nil UUID for one
    /// of no organization (a backend's key is never empty, and a
    /// distributed table's distribution column never NULL).
    pub fn trail(&self) -> Uuid {
        self.organization_id.unwrap_or(Uuid::nil())
    }

    /// [`AuditEntry::at_nanos`], or [`StoreError::InvalidRecord`]: what a
    /// backend checks of each entry before it writes any of a batch.
    pub fn checked_at(&self) -> Result<i64, StoreError> {
        self.at_nanos().ok_or_else(|| {
            StoreError::InvalidRecord(format!(
                "audit entry {:?} has the time {:?}, which is not RFC 3339",
                self.request_id, self.at
            ))
        })
    }
}

/// The most audit entries one [`Store::audit_page`] examines for a
/// principal filter: a filter that matches rarely answers a short page (or
/// an empty one) and the position to go on from, rather than reading the
/// whole trail in one call.
pub const AUDIT_EXAMINED: usize = 10 * MAX_SCAN;

/// A page of an organization's audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditPage {
    /// The entries, each with its position, in position (recording) order.
    pub entries: Vec<(u64, AuditEntry)>,
    /// Where the next page starts (its `after`) when there may be more:
    /// the last entry's position when the page is full, or the last
    /// position examined when [`AUDIT_EXAMINED`] entries were examined
    /// before the filter filled the page. `None`: nothing past this page
    /// yet (entries recorded later get higher positions).
    pub next: Option<u64>,
}

/// One stored record: its id and its bytes exactly as written (the JSON a
/// component gets).
pub type StoredRecord = (Uuid, Vec<u8>);

/// One record of an index walk: where it stands in the index (its id
/// with it) and its bytes exactly as written.
pub type IndexedRecord = (IndexPosition, Vec<u8>);

/// What [`StoreReader::index_scan_each`] hands each record to, borrowed.
pub type EachIndexed<'a> = dyn FnMut(IndexPosition, &[u8]) -> Result<(), StoreError> + 'a;

// Positions, conditions, ranges and group counts: the contract's types,
// the same from the WIT glue down to each backend.
pub use esr_contract::indexes::{
    GroupCount, IndexCondition, IndexPosition, IndexRange, IndexWalk, Matching, RecordWalk,
};

/// What a batch does to one collection.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionWrite {
    pub collection: Collection,
    /// Records to create or replace: JSON objects with a UUID `id` and
    /// RFC 3339 `created_at` and `updated_at`.
    pub records: Vec<Value>,
    /// Ids of records to delete with their index entries, counts and
    /// history (an id not stored is passed over). An id may not be both
    /// written and deleted by one batch.
    pub deleted: Vec<Uuid>,
    /// Entries to append to records' histories, each `(record id, entry
    /// bytes)`, in order: kept until the record is deleted, whatever the
    /// change feed's retention.
    pub history: Vec<(Uuid, Vec<u8>)>,
}

impl CollectionWrite {
    /// A write of this collection that changes nothing (yet).
    pub fn new(collection: Collection) -> CollectionWrite {
        CollectionWrite { collection, records: Vec::new(), deleted: Vec::new(), history: Vec::new() }
    }

    /// Records to create or replace, and nothing else.
    pub fn records(collection: Collection, records: Vec<Value>) -> CollectionWrite {
        CollectionWrite { records, ..CollectionWrite::new(collection) }
    }

    /// Whether the write changes nothing.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.deleted.is_empty() && self.history.is_empty()
    }
}

/// What happened to a record, as the change feed tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeOperation {
    Created,
    Updated,
    Deleted,
}

impl ChangeOperation {
    /// The name the API gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeOperation::Created => "created",
            ChangeOperation::Updated => "updated",
            ChangeOperation::Deleted => "deleted",
        }
    }

    /// The operation of this API name.
    pub fn parse(name: &str) -> Option<ChangeOperation> {
        match name {
            "created" => Some(ChangeOperation::Created),
            "updated" => Some(ChangeOperation::Updated),
            "deleted" => Some(ChangeOperation::Deleted),
            _ => None,
        }
    }
}

/// A record's latest change: the change feed keeps one per record (a
/// newer change of the record replaces it), so the record a feed shows is
/// the record as it is now, and the feed's size follows the records'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeEvent {
    /// Its place in the organization's commit order (see [`ChangeLog`]).
    pub sequence: u64,
    pub collection: Collection,
    pub id: Uuid,
    /// `Created` when the batch found no stored record with the id,
    /// `Updated` when it replaced one, `Deleted` when it deleted one.
    pub operation: ChangeOperation,
    /// The batch's [`WriteTime`] (Unix nanoseconds).
    pub changed_at: i64,
}

/// Where an organization's change feed stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChangeLog {
    /// The sequence of the latest change committed (0: none yet).
    /// Sequences are given under the organization's write lock, one per
    /// change, in commit order: a change that commits after a reader saw
    /// `latest` gets a higher one, on every host sharing the store.
    pub latest: u64,
    /// Deletion events up to this sequence may have been removed
    /// ([`Store::prune_changes`]): a reader that has not read past it may
    /// have missed one.
    pub pruned_through: u64,
}

/// What a write batch's `build` step decides, given a view of the store
/// with the organization's write lock held and the batch's write time: the
/// records to write (none: nothing is written).
pub type BuildBatch<'a> = dyn FnMut(&mut dyn StoreReader, WriteTime) -> Result<Vec<CollectionWrite>, StoreError> + 'a;

/// A batch's write time, the `updated_at` of what it changes: Unix
/// nanoseconds in whole microseconds, given by the backend under the
/// organization's write lock, strictly later than the organization's
/// previous write time and than every `updated_at` it holds. So write times
/// increase in commit order, on every host sharing the store, and an
/// `updatedAfter` poller misses nothing.
pub use esr_contract::time::Timestamp as WriteTime;

/// A read session on one organization's records, held for one request (a
/// component call, an import's validation). Every read of a session runs
/// on one connection, and on a backend with snapshots in one snapshot, so
/// a page and its `total` agree. Unknown collections hold nothing (reads
/// answer empty, counts zero) except where an index is named: an index the
/// table in `esr_contract::indexes` does not declare for the collection
/// is [`StoreError::UnknownIndex`].
///
/// Records are handed out as their stored bytes, copied at most once out
/// of the backend.
pub trait StoreReader: Send {
    /// Where in the database's history this session reads: a position no
    /// earlier than its snapshot (PostgreSQL: a WAL position), once it has
    /// read; `None` for a backend with a single copy of the data.
    fn position(&self) -> Option<u64> {
        None
    }

    /// Whether a read failed on a replica (a replay conflict, a lost
    /// connection): the caller may run its reads again on the primary.
    fn failed_on_replica(&self) -> bool {
        false
    }

    /// The record with this id, or `None`.
    fn get(&mut self, collection: Collection, id: Uuid) -> Result<Option<Vec<u8>>, StoreError>;

    /// The records with these ids that exist, each once, in no particular
    /// order: what a write's checks need of many records, read at once (a
    /// backend behind a network answers in one round trip, not one per id).
    fn get_many(&mut self, collection: Collection, ids: &[Uuid]) -> Result<Vec<StoredRecord>, StoreError> {
        let mut found = Vec::new();
        for id in ids.iter().collect::<std::collections::BTreeSet<_>>() {
            if let Some(bytes) = self.get(collection, *id)? {
                found.push((*id, bytes));
            }
        }
        Ok(found)
    }

    /// The records of `walk` (at most [`MAX_SCAN`]), in id order.
    fn scan(&mut self, collection: Collection, walk: &RecordWalk) -> Result<Vec<StoredRecord>, StoreError>;

    /// How many records the organization holds in the collection.
    fn count(&mut self, collection: Collection) -> Result<u64, StoreError>;

    /// The records of `walk` (at most [`MAX_SCAN`]), in (position, id)
    /// order, each with its position. Each record once.
    fn index_scan(&mut self, collection: Collection, walk: &IndexWalk<'_>) -> Result<Vec<IndexedRecord>, StoreError> {
        let mut records = Vec::with_capacity(walk.limit.min(MAX_SCAN).min(128));
        self.index_scan_each(collection, walk, &mut |position, record| {
            records.push((position, record.to_vec()));
            Ok(())
        })?;
        Ok(records)
    }

    /// [`StoreReader::index_scan`]'s records handed to `each` as they are
    /// read, borrowed: a caller that copies them on (a component's batch)
    /// makes one copy of each, not two. An error from `each` ends the walk.
    fn index_scan_each(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
        each: &mut EachIndexed<'_>,
    ) -> Result<(), StoreError>;

    /// The (position, id) of what [`StoreReader::index_scan`] would return
    /// for the same walk, read from the index alone.
    fn index_positions(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
    ) -> Result<Vec<IndexPosition>, StoreError>;

    /// The ids of every record holding any of `values` in the index, each
    /// once, read from the index alone. A backend with round trips answers
    /// in one; the default walks each value's entries.
    fn ids_holding_any(
        &mut self,
        collection: Collection,
        index: &str,
        values: &[String],
    ) -> Result<std::collections::BTreeSet<Uuid>, StoreError> {
        let mut ids = std::collections::BTreeSet::new();
        for value in values {
            let mut after = None;
            loop {
                let page = self.index_positions(collection, &IndexWalk::new(index, value, MAX_SCAN).after(after))?;
                let full = page.len() == MAX_SCAN;
                after = page.last().copied();
                ids.extend(page.into_iter().map(|position| position.id));
                if !full {
                    break;
                }
            }
        }
        Ok(ids)
    }

    /// How many records hold `value` in the index (exact: a record counts
    /// once per value it holds).
    fn index_count(&mut self, collection: Collection, index: &str, value: &str) -> Result<u64, StoreError>;

    /// How many records `matching` matches: within each of its ranges (a
    /// sort index's records holding its sort value at a position strictly
    /// between the ends; an absent end is open), holding one of each
    /// condition's values, and updated strictly after `updated_after`.
    /// Each record counts once; a value repeated in a condition counts
    /// once; the default matches every record. A range of an index that is
    /// not a sort index is [`StoreError::MalformedCall`]. Read from index
    /// counts and entries alone.
    fn count_matching(&mut self, collection: Collection, matching: &Matching) -> Result<u64, StoreError>;

    /// Every value the index holds with how many records hold it (values
    /// held by none are absent), in the values' byte order: the index's count rows,
    /// no entry or record read.
    fn index_values(&mut self, collection: Collection, index: &str) -> Result<Vec<(String, u64)>, StoreError>;

    /// How many records `matching` matches per combination
    /// of the values they hold in the `group_by` indexes (one or two
    /// indexes where a record holds at most one value), in the order of
    /// their values (byte order, the first index's first) on every backend.
    /// Combinations held by no such record are left out. Counted from index counts and
    /// entries, never reading a record: where count rows answer every
    /// combination (one index with no other condition, a counted pair),
    /// from them; else, when the conditions leave at most
    /// [`MAX_GROUP_CANDIDATES`] candidates, by
    /// [`StoreReader::count_groups_of_candidates`]; else one
    /// [`StoreReader::count_matching`] per value combination, the values of the first index counted first
    /// so that empty ones are skipped.
    fn count_groups(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
    ) -> Result<Vec<GroupCount>, StoreError> {
        self.count_groups_within(collection, group_by, matching, SUMMARY_WORK_BUDGET)
    }

    /// [`StoreReader::count_groups`], refusing with
    /// [`StoreError::TooBroad`] a count by combination whose walks would
    /// read more than `budget` index entries (as a list refuses past its
    /// record budget), before it reads them.
    fn count_groups_within(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        budget: u64,
    ) -> Result<Vec<GroupCount>, StoreError> {
        let Matching { ranges, conditions, updated_after } = matching;
        if group_by.is_empty() || group_by.len() > 2 {
            return Err(StoreError::MalformedCall(format!(
                "count-groups by {} indexes; give one or two",
                group_by.len()
            )));
        }
        for index in group_by {
            let found = esr_contract::indexes::find(collection, index)
                .ok_or_else(|| StoreError::UnknownIndex(format!("{collection}/{index}")))?;
            if !matches!(found.key, IndexKey::Field(_) | IndexKey::Present(_)) {
                return Err(StoreError::MalformedCall(format!(
                    "count-groups by {index}, where a record may hold several values or none"
                )));
            }
        }
        // Count rows are a lookup per combination whatever the data's size.
        // Otherwise each combination is an intersection that walks the group
        // values' entries whole, so the candidates, collected once, are
        // cheaper: unless they are many, when they would cost as much memory
        // as the walks (the backend declines past the limit).
        let counted = combinations_are_counted(collection, group_by, matching);
        if !counted
            && let Some(groups) =
                self.count_groups_of_candidates(collection, group_by, matching, MAX_GROUP_CANDIDATES)?
        {
            return Ok(in_value_order(groups));
        }
        let count = |reader: &mut Self, extra: Vec<IndexCondition>| -> Result<u64, StoreError> {
            reader.count_matching(collection, &matching.and(extra))
        };
        let unfiltered = ranges.is_empty() && conditions.is_empty() && updated_after.is_none();
        let first_values = self.index_values(collection, &group_by[0])?;
        let second_values = match group_by.get(1) {
            Some(second) => self.index_values(collection, second)?,
            None => Vec::new(),
        };
        // Count rows answer each combination with a lookup, and a counted
        // pair's indexes hold few values (the contract's tests check it):
        // nothing to bound.
        if !counted {
            refuse_past_budget(self, collection, &first_values, &second_values, matching, budget)?;
        }
        let firsts: Vec<(String, u64)> = if unfiltered {
            first_values
        } else {
            let mut counted = Vec::with_capacity(first_values.len());
            for (value, _) in first_values {
                let held = count(self, vec![IndexCondition::new(group_by[0].clone(), vec![value.clone()])])?;
                counted.push((value, held));
            }
            counted
        };
        let mut groups = Vec::new();
        let Some(second_index) = group_by.get(1) else {
            groups.extend(
                firsts
                    .into_iter()
                    .filter(|(_, held)| *held > 0)
                    .map(|(value, held)| GroupCount { values: vec![value], count: held }),
            );
            return Ok(in_value_order(groups));
        };
        for (first, _) in firsts.into_iter().filter(|(_, held)| *held > 0) {
            for (second, _) in &second_values {
                let extra = vec![
                    IndexCondition::new(group_by[0].clone(), vec![first.clone()]),
                    IndexCondition::new(second_index.clone(), vec![second.clone()]),
                ];
                let held_both = count(self, extra)?;
                if held_both > 0 {
                    groups.push(GroupCount { values: vec![first.clone(), second.clone()], count: held_both });
                }
            }
        }
        Ok(in_value_order(groups))
    }

    /// Where the organization's change feed stands. A backend without
    /// snapshots reads it before what it guards: a list's records are then
    /// no older than the `latest` it reports.
    fn change_log(&mut self) -> Result<ChangeLog, StoreError>;

    /// Up to `limit` (at most [`MAX_SCAN`]) of the organization's change
    /// events with a sequence above `after`, in sequence order, of the
    /// given collections (every one when empty).
    fn changes(&mut self, after: u64, collections: &[Collection], limit: usize)
    -> Result<Vec<ChangeEvent>, StoreError>;

    /// The history entries of a record, in the order written (empty for a
    /// record without any, or none at all).
    fn history(&mut self, collection: Collection, id: Uuid) -> Result<Vec<Vec<u8>>, StoreError>;

    /// [`StoreReader::count_groups`] (arguments already checked) from the
    /// candidates: the records meeting the conditions, the ranges and
    /// `updated_after`, collected once from the conditions' entries (or,
    /// with no condition on an index ordered by creation, from the
    /// ranges'), each one's group values then found in the group indexes'
    /// entries at its own place (a record's entries share their position,
    /// its `created_at`, in every index ordered by creation). `None`, to
    /// count by combination instead, when the candidates' source holds
    /// more than `max_candidates` records, or nothing gives them.
    fn count_groups_of_candidates(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        max_candidates: u64,
    ) -> Result<Option<Vec<GroupCount>>, StoreError>;
}

/// The stored record `id` of a collection, parsed.
pub fn read_record(
    reader: &mut dyn StoreReader,
    collection: Collection,
    id: Uuid,
) -> Result<Option<Value>, StoreError> {
    match reader.get(collection, id)? {
        Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::Corrupt(e.to_string())),
        None => Ok(None),
    }
}

/// Every record holding `value` in a collection's index, read in pages of
/// records (one store call per page, not one per record).
pub fn records_by_index(
    reader: &mut dyn StoreReader,
    collection: Collection,
    index: &str,
    value: &str,
) -> Result<Vec<Value>, StoreError> {
    let mut found = Vec::new();
    for_each_by_index(reader, collection, index, value, |record| found.push(record))?;
    Ok(found)
}

/// Hands each record holding `value` in a collection's index to `visit`,
/// a page at a time: what the caller keeps of them is all that stays in
/// memory.
pub fn for_each_by_index(
    reader: &mut dyn StoreReader,
    collection: Collection,
    index: &str,
    value: &str,
    mut visit: impl FnMut(Value),
) -> Result<(), StoreError> {
    esr_contract::indexes::find(collection, index)
        .ok_or_else(|| StoreError::UnknownIndex(format!("{collection}/{index}")))?;
    let mut after = None;
    loop {
        let page = reader.index_scan(collection, &IndexWalk::new(index, value, MAX_SCAN).after(after))?;
        let full = page.len() == MAX_SCAN;
        for (position, bytes) in page {
            let record: Value = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            // The next page starts after the last record's place in the index.
            after = Some(position);
            visit(record);
        }
        if !full {
            return Ok(());
        }
    }
}

/// The collection's sort index `index`, which a range needs: an unknown
/// index is [`StoreError::UnknownIndex`], another kind of index
/// [`StoreError::MalformedCall`].
pub fn sort_index(collection: Collection, index: &str) -> Result<esr_contract::indexes::Index, StoreError> {
    let found = esr_contract::indexes::find(collection, index)
        .ok_or_else(|| StoreError::UnknownIndex(format!("{collection}/{index}")))?;
    if found.key != IndexKey::SortValue {
        return Err(StoreError::MalformedCall(format!("{index} of {collection} is not a sort index")));
    }
    Ok(found)
}

/// Groups in the order of their values, whatever order a backend found
/// them in.
fn in_value_order(mut groups: Vec<GroupCount>) -> Vec<GroupCount> {
    groups.sort_by(|a, b| a.values.cmp(&b.values));
    groups
}

/// The most index entries a summary's counts by combination may read
/// ([`StoreReader::count_groups_within`]): about what a walk reads in a
/// second on a small machine, so that a summary too broad to answer within
/// the call's deadline is refused at once, naming what to narrow, instead
/// of running into it.
pub const SUMMARY_WORK_BUDGET: u64 = 5_000_000;

/// The most candidates [`StoreReader::count_groups`] collects to find
/// their group values (about 40 bytes each); a wider filter is counted by
/// combination.
pub const MAX_GROUP_CANDIDATES: u64 = 100_000;

/// The most candidates a summary of ranges alone collects (no condition to
/// take them from) when no range holds at most [`MAX_GROUP_CANDIDATES`]:
/// ranges cannot be counted by combination within
/// [`SUMMARY_WORK_BUDGET`] once they are this wide, so their records'
/// ids (about 40 bytes each, 40 MB at most) are the cheaper way.
pub const MAX_RANGE_CANDIDATES: u64 = 1_000_000;

/// The conditions that restrict: each value once, and no condition every
/// record meets (the empty value of an index every record is in).
pub fn restricting_conditions(collection: Collection, conditions: &[IndexCondition]) -> Vec<IndexCondition> {
    conditions
        .iter()
        .map(|condition| {
            let values: std::collections::BTreeSet<&String> = condition.values.iter().collect();
            IndexCondition::new(condition.index.clone(), values.into_iter().cloned().collect())
        })
        .filter(|condition| {
            let everything = esr_contract::indexes::find(collection, &condition.index)
                .is_some_and(|found| found.key == IndexKey::Everything);
            !(everything && condition.values.iter().any(String::is_empty))
        })
        .collect()
}

/// Whether a condition's index is ordered by `created_at`: its entries of
/// a record are at the same place as the record's entries in every other
/// such index.
pub fn ordered_by_creation(collection: Collection, index: &str) -> bool {
    esr_contract::indexes::find(collection, index)
        .is_some_and(|found| found.order == esr_contract::indexes::IndexOrder::CreatedAt)
}

/// What a record adds to its collection's indexes, as both backends keep
/// them.
pub struct RecordIndexes {
    /// `(index, value, position)`; each also counts one under `(index, value)`.
    pub entries: Vec<(&'static str, String, i64)>,
    /// The counts it adds one to beyond its entries' `(name, value)`: each
    /// counted pair's and its update hour's.
    pub counted: Vec<(String, String)>,
}

/// The index entries and counts of a record, which must carry RFC 3339
/// `created_at` and `updated_at`. Each index's values are read once, and
/// the two timestamps that order most indexes are parsed once.
pub fn record_indexes(collection: Collection, id: Uuid, record: &Value) -> Result<RecordIndexes, StoreError> {
    use esr_contract::indexes::{self, IndexOrder};
    let timestamp = |field: &str| {
        record
            .get(field)
            .and_then(Value::as_str)
            .and_then(esr_contract::time::Timestamp::parse)
            .map(|at| at.0)
            .ok_or_else(|| StoreError::InvalidRecord(format!("{collection} record {id} has no RFC 3339 {field}")))
    };
    let (created, updated) = (timestamp("created_at")?, timestamp("updated_at")?);
    let table = indexes::indexes(collection);
    let values: Vec<Vec<String>> = table.iter().map(|index| index.values(record)).collect();
    let mut counted = Vec::new();
    for (first, second) in indexes::counted_pairs(collection) {
        let of = |name: &str| table.iter().position(|index| index.name == name).map(|at| &values[at]);
        for a in of(first).into_iter().flatten() {
            for b in of(second).into_iter().flatten() {
                counted.push((indexes::pair_name(first, second), indexes::pair_value(a, b)));
            }
        }
    }
    counted.push((indexes::UPDATED_HOUR.to_owned(), indexes::hour_value(updated)));
    let mut entries = Vec::with_capacity(table.len());
    for (index, values) in table.iter().zip(values) {
        let position = match index.order {
            IndexOrder::CreatedAt => created,
            IndexOrder::UpdatedAt => updated,
            IndexOrder::By(_) if values.is_empty() => continue,
            IndexOrder::By(_) => index.position(record),
        };
        entries.extend(values.into_iter().map(|value| (index.name, value, position)));
    }
    Ok(RecordIndexes { entries, counted })
}

/// Refuses with [`StoreError::TooBroad`], before any walk, a count by
/// combination whose walks would read more than `budget` index entries.
/// Each count walks the entries of every condition it is given (the group
/// values' among them) and the range: an upper bound of the entries read,
/// from index counts and one walk of the range.
fn refuse_past_budget<R: StoreReader + ?Sized>(
    reader: &mut R,
    collection: Collection,
    first_values: &[(String, u64)],
    second_values: &[(String, u64)],
    matching: &Matching,
    budget: u64,
) -> Result<(), StoreError> {
    let Matching { ranges, conditions, updated_after } = matching;
    let unfiltered = ranges.is_empty() && conditions.is_empty() && updated_after.is_none();
    let mut shared = 0u64;
    for condition in restricting_conditions(collection, conditions) {
        for value in &condition.values {
            shared = shared.saturating_add(reader.index_count(collection, &condition.index, value)?);
        }
    }
    for range in ranges {
        shared = shared.saturating_add(reader.count_matching(collection, &Matching::range(range.clone()))?);
    }
    if let Some(after) = *updated_after {
        let updated = Matching { updated_after: Some(after), ..Matching::default() };
        shared = shared.saturating_add(reader.count_matching(collection, &updated)?);
    }
    let mut work = 0u64;
    for (_, first_held) in first_values {
        if !unfiltered {
            work = work.saturating_add(first_held.saturating_add(shared));
        }
        for (_, second_held) in second_values {
            work = work.saturating_add(first_held.saturating_add(*second_held).saturating_add(shared));
        }
    }
    if work > budget {
        return Err(StoreError::TooBroad(format!(
            "too broad to summarize: about {work} index entries would be read, more than {budget}; \
             add a filter on an indexed field (e.g. an endpoint, status or severity) or group by fewer fields"
        )));
    }
    Ok(())
}

/// Whether every count [`StoreReader::count_groups`] makes by combination
/// is a count row (what `count_matching` answers from counts: one
/// condition where a record holds one value, or a counted pair).
fn combinations_are_counted(collection: Collection, group_by: &[String], matching: &Matching) -> bool {
    if !matching.ranges.is_empty() || matching.updated_after.is_some() {
        return false;
    }
    let mut all = restricting_conditions(collection, &matching.conditions);
    if all.is_empty() && group_by.len() == 1 {
        return true;
    }
    all.extend(group_by.iter().map(|index| IndexCondition::new(index.clone(), vec![String::new()])));
    let pairs = esr_contract::indexes::counted_pairs(collection);
    match all.as_slice() {
        [_] => true,
        [a, b] => {
            let (a, b) = (a.index.as_str(), b.index.as_str());
            pairs.contains(&(a, b)) || pairs.contains(&(b, a))
        }
        _ => false,
    }
}

/// A record read with the key of its request
/// ([`Store::api_key_reading_ahead`]), for that request's read of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAhead {
    pub organization: Uuid,
    pub collection: Collection,
    pub id: Uuid,
    /// The stored bytes; `None`: no such record.
    pub body: Option<Vec<u8>>,
    /// The write position the read saw, as [`StoreReader::position`] reports.
    pub position: Option<u64>,
}

/// A key's record (`None`: no such key), and the read session begun with
/// its lookup when the backend began one
/// ([`Store::api_key_opening_reader`]).
pub type KeyWithReader = (Option<ApiKeyRecord>, Option<Box<dyn StoreReader>>);

/// Where a read session may read from (see [`Store::reader_from`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFrom {
    /// A position the session must have reached (0: any).
    pub position: u64,
    /// Read from the primary even when replicas are configured.
    pub primary_only: bool,
    /// When the call's time is up: statements and walks stop there
    /// ([`StoreError::DeadlineReached`]).
    pub deadline: Option<std::time::Instant>,
}

/// [`StoreError::DeadlineReached`] once `deadline` has passed.
pub fn within(deadline: Option<std::time::Instant>) -> Result<(), StoreError> {
    match deadline {
        Some(deadline) if std::time::Instant::now() >= deadline => Err(StoreError::DeadlineReached),
        _ => Ok(()),
    }
}

/// The deadline of the store call running on this thread, for a backend's
/// walks deep below the call (an embedded backend's index walks check it
/// as they go, without every helper taking it as an argument).
pub mod call_deadline {
    use std::cell::Cell;
    use std::time::Instant;

    thread_local! {
        static CURRENT: Cell<Option<Instant>> = const { Cell::new(None) };
    }

    /// This thread's deadline while it lives; the one before, after.
    pub struct Scope(Option<Instant>);

    impl Scope {
        pub fn enter(deadline: Option<Instant>) -> Scope {
            Scope(CURRENT.replace(deadline))
        }
    }

    impl Drop for Scope {
        fn drop(&mut self) {
            CURRENT.set(self.0);
        }
    }

    /// [`super::within`] this thread's deadline.
    pub fn check() -> Result<(), super::StoreError> {
        super::within(CURRENT.get())
    }
}

/// How a read replica stands, as its monitor last saw it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplicaHealth {
    /// Where it is (host and database, no credentials).
    pub name: String,
    /// `up` (serves reads), `lagging` (behind by more than the allowed
    /// lag: skipped) or `down` (unreachable or not a standby: skipped).
    pub state: &'static str,
    /// How far its replay is behind the primary, in milliseconds, when known.
    pub lag_ms: Option<u64>,
}

/// A storage backend. A handle shared by every request (`Arc<dyn Store>`);
/// each method may block and is called from blocking threads only (start-up
/// and shutdown included). The last handle may be dropped on any thread: a
/// backend whose client must not be dropped on an async runtime's thread
/// moves it to a thread of its own in its `Drop`.
///
/// A new backend implements this trait and [`StoreReader`] in a module of
/// its own beside `sled/`, gets a branch in [`open`], and runs the
/// contract's tests by adding one line to `host/tests/it/store_contract.rs`.
pub trait Store: Send + Sync {
    /// A read session on the organization's records (see [`StoreReader`]).
    fn reader(&self, organization: Uuid) -> Result<Box<dyn StoreReader>, StoreError>;

    /// A read session that sees at least `from.position` (a
    /// [`StoreReader::position`] of an earlier session), read from the
    /// primary alone when `from.primary_only`.
    fn reader_from(&self, organization: Uuid, from: ReadFrom) -> Result<Box<dyn StoreReader>, StoreError> {
        let _ = from;
        self.reader(organization)
    }

    /// The read replicas and how each stands (none for most backends).
    fn replicas(&self) -> Vec<ReplicaHealth> {
        Vec::new()
    }

    /// Writes one batch of the organization's records atomically and
    /// durably. The backend takes the organization's write lock (one that
    /// serializes every writer of that organization, on every host sharing
    /// the store), then calls `build` with a view of the store as it is
    /// under that lock and the batch's [`WriteTime`]: what `build` reads
    /// (references, the records it replaces) is what the write replaces. `build` may be called more
    /// than once (a backend retrying a conflict), so it must not keep
    /// effects of an earlier call. Its records are written with their
    /// index entries and counts in one transaction: all or nothing, on
    /// disk when this returns. A record with an existing id replaces it and
    /// its index entries; an id repeated in a batch ends as its last
    /// record. An error of `build` writes nothing and is returned.
    ///
    /// The same transaction records each change in the change feed: every
    /// id the batch writes (once, where it first appears) and
    /// every stored id it deletes gets the next sequence of the
    /// organization, in the order of the writes and, within one, records
    /// before deletions; its event replaces the id's earlier one. History
    /// entries are appended; a deleted record's history goes with it.
    /// An id both written and deleted is [`StoreError::InvalidRecord`].
    fn write_batch(&self, organization: Uuid, build: &mut BuildBatch<'_>) -> Result<(), StoreError>;

    /// [`Store::write_batch`] for a large batch, whose `build` a backend
    /// may call first before the organization's lock is taken, with a view
    /// of what is committed then and a provisional [`WriteTime`]. What that
    /// call built is written only if, once the lock is held, the time is
    /// still later than every write committed, `build` read nothing but
    /// records by id, and none of those was written since; otherwise
    /// `build` is called again under the lock, as by `write_batch`. So the
    /// next batch is built while the one before it is written.
    fn write_batch_ahead(&self, organization: Uuid, build: &mut BuildBatch<'_>) -> Result<(), StoreError> {
        self.write_batch(organization, build)
    }

    /// Removes the organization's deletion events whose `changed_at` is
    /// before `before` (Unix nanoseconds), raising its
    /// [`ChangeLog::pruned_through`] to the highest sequence removed, in
    /// one transaction under the organization's write lock; returns how
    /// many were removed. Events of records that still exist are kept:
    /// they are the record's latest change.
    fn prune_changes(&self, organization: Uuid, before: i64) -> Result<u64, StoreError>;

    /// Where the organization's change feed stands (see [`ChangeLog`]).
    fn change_log(&self, organization: Uuid) -> Result<ChangeLog, StoreError> {
        self.reader(organization)?.change_log()
    }

    /// Starts the organization's change feed at `latest` when it stands
    /// below it, with nothing retained up to there (`pruned_through` =
    /// `latest`): a copy of a deployment keeps its sequences increasing,
    /// and a cursor of the old one answers "start again", not a gap.
    fn continue_changes_from(&self, organization: Uuid, latest: u64) -> Result<(), StoreError>;

    /// Writes records for an offline bulk load (`esr seed`, the demo), as
    /// fast as the backend can: indexes may lag until
    /// [`Store::finish_bulk_load`], and a load that stops half-way must be
    /// re-indexed at the next open. Never used while the server serves.
    fn bulk_insert_records(
        &self,
        organization: Uuid,
        collection: Collection,
        records: &[Value],
    ) -> Result<(), StoreError>;

    /// Ends a bulk load: every index and count agrees with the records, durably.
    fn finish_bulk_load(&self) -> Result<(), StoreError>;

    /// Recomputes every index entry and count from the records and returns
    /// each disagreement found, in words (empty when all is well).
    fn verify_indexes(&self) -> Result<Vec<String>, StoreError>;

    /// Stores (or replaces) an organization, durably.
    fn insert_organization(&self, organization: &Organization) -> Result<(), StoreError>;

    fn organization(&self, id: Uuid) -> Result<Option<Organization>, StoreError>;

    /// Every organization, in id (creation) order.
    fn organizations(&self) -> Result<Vec<Organization>, StoreError>;

    /// Whether no organization exists yet.
    fn is_empty(&self) -> Result<bool, StoreError>;

    /// Stores an API key's record under the SHA-256 of the key, durably.
    fn insert_api_key(&self, key_hash: &[u8; 32], record: &ApiKeyRecord) -> Result<(), StoreError>;

    /// The key record stored under this hash, as it is now (a revocation
    /// is seen by the next lookup).
    fn api_key(&self, key_hash: &[u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// [`Store::api_key`], and with it the record `id` of `collection` in
    /// `organization` when the key belongs to it and the backend reads
    /// both in one round trip (a request for one record, whose key was
    /// last found in `organization`). A backend whose reads are local, or
    /// go to replicas, reads the key alone.
    fn api_key_reading_ahead(
        &self,
        key_hash: &[u8; 32],
        organization: Uuid,
        collection: Collection,
        id: Uuid,
    ) -> Result<(Option<ApiKeyRecord>, Option<ReadAhead>), StoreError> {
        let _ = (organization, collection, id);
        Ok((self.api_key(key_hash)?, None))
    }

    /// [`Store::api_key`], and with it a read session on `organization`
    /// (as [`Store::reader_from`] gives) whose snapshot began in the same
    /// round trip, when the backend reads both at once (a list request,
    /// whose key was last found in `organization`). A backend whose reads
    /// are local, or go to replicas, reads the key alone. The caller uses
    /// the session only if the key is still valid for `organization`.
    fn api_key_opening_reader(
        &self,
        key_hash: &[u8; 32],
        organization: Uuid,
        from: ReadFrom,
    ) -> Result<KeyWithReader, StoreError> {
        let _ = (organization, from);
        Ok((self.api_key(key_hash)?, None))
    }

    /// Every key record (of one organization when given), oldest first.
    fn api_keys(&self, organization: Option<Uuid>) -> Result<Vec<ApiKeyRecord>, StoreError>;

    /// Every key record with the SHA-256 it is stored under, oldest first
    /// (copying a deployment: the keys themselves are never stored).
    fn api_keys_with_hashes(&self) -> Result<Vec<([u8; 32], ApiKeyRecord)>, StoreError>;

    /// Marks the key with this id revoked at `revoked_at`, durably; `None`
    /// when there is no such key. A revoked key keeps its first revocation
    /// time.
    fn revoke_api_key(&self, id: Uuid, revoked_at: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Notes that the key with this id authenticated a request at `at`
    /// (RFC 3339): its `last_used_at` becomes the later of the two. A key
    /// that does not exist is no error. Hosts call it off the request path,
    /// at most once a minute per key each, so it must never change any
    /// other member of the record, whatever other writes run beside it.
    fn touch_api_key(&self, id: Uuid, at: &str) -> Result<(), StoreError>;

    /// Sets when the key with this id stops authenticating (RFC 3339),
    /// durably (a rotation's overlap); `None` when there is no such key.
    /// Every other member of the record is kept as it is.
    fn set_api_key_expiry(&self, id: Uuid, expires_at: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// A 32-byte secret of this installation (e.g. the cursor-sealing key),
    /// created at random on first use and the same ever after, for every
    /// caller and every host sharing the store.
    fn secret(&self, name: &str) -> Result<[u8; 32], StoreError>;

    /// Stores `value` under `name` unless a secret is there already, and
    /// returns the one stored: the first writer wins, for every caller and
    /// every host sharing the store (e.g. the admin token's digest).
    fn secret_if_absent(&self, name: &str, value: [u8; 32]) -> Result<[u8; 32], StoreError>;

    /// Every secret of this installation by name, as stored (copying a
    /// deployment to another store: `esr migrate`).
    fn secrets(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// Stores a secret under `name` as given, replacing any there, durably
    /// (copying a deployment). [`Store::secret`] reads only 32-byte ones.
    fn set_secret(&self, name: &str, value: &[u8]) -> Result<(), StoreError>;

    /// A small named marker (e.g. how far demo seeding got), or `None`.
    fn marker(&self, name: &str) -> Result<Option<String>, StoreError>;

    /// Sets a marker, durably.
    fn set_marker(&self, name: &str, value: &str) -> Result<(), StoreError>;

    /// Every marker set through [`Store::set_marker`], by name (the
    /// backend's own bookkeeping aside).
    fn markers(&self) -> Result<Vec<(String, String)>, StoreError>;

    /// The host's document of `kind` named `id`, if there is one.
    fn document(&self, kind: &str, id: &str) -> Result<Option<Document>, StoreError>;

    /// Every document of `kind`, in id order.
    fn documents(&self, kind: &str) -> Result<Vec<Document>, StoreError>;

    /// Writes `body` as the document of `kind` named `id` when its version
    /// is still the one the writer `seen` (`None`: none yet), durably, and
    /// returns the new version; `None` when another writer got there first
    /// (every host sharing the store sees the same versions).
    fn swap_document(&self, kind: &str, id: &str, seen: Option<u64>, body: &[u8]) -> Result<Option<u64>, StoreError>;

    /// Removes the document of `kind` named `id`, durably; whether there was one.
    fn delete_document(&self, kind: &str, id: &str) -> Result<bool, StoreError>;

    /// Appends a batch of audit entries in one durable write: each gets
    /// the next position (a store-wide number, increasing in the order
    /// given, never reused), and the batch is on disk when this returns.
    /// An entry whose `at` is not RFC 3339 is [`StoreError::InvalidRecord`]
    /// and nothing is written. Any text is kept as given.
    fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError>;

    /// The organization's audit entries past position `after` (`None`:
    /// from the first), in position order, at most `limit` (1 to
    /// [`MAX_SCAN`]; outside is brought within); with `principal`, only
    /// those whose `principal.id` is exactly it. At most
    /// [`AUDIT_EXAMINED`] entries are examined per call: the page's
    /// [`AuditPage::next`] says where to go on. Entries of no organization
    /// are read with the nil UUID.
    ///
    /// Positions follow the order entries were appended on one host; where
    /// several hosts append at once, an entry may commit a moment after
    /// one with a higher position, so a reader at the very end of the
    /// trail may pass it: read up to entries a few seconds old to be sure.
    fn audit_page(
        &self,
        organization: Uuid,
        after: Option<u64>,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError>;

    /// Removes every audit entry whose `at` is before `before` (Unix
    /// nanoseconds), in bounded batches (each its own write, so a long
    /// expiry holds nothing for long); returns how many were removed.
    fn expire_audit(&self, before: i64) -> Result<u64, StoreError>;

    /// Removes every organization, key, record, index entry, count,
    /// document and audit entry; secrets stay. Used to restart an
    /// interrupted demo load.
    fn clear_data(&self) -> Result<(), StoreError>;

    /// Health probe: a cheap read that reaches the storage engine (or the
    /// database server) and fails when it cannot.
    fn probe(&self) -> Result<(), StoreError>;

    /// How many blocking calls may use the store at once without waiting
    /// inside it (a connection pool's size); `None` when callers are not
    /// bounded. A call holds at most one connection at a time, so the
    /// server takes one of this many permits, in async code, before it
    /// starts a blocking call: an exhausted pool then makes requests wait
    /// as tasks, not as parked blocking threads.
    fn concurrent_calls(&self) -> Option<usize> {
        None
    }

    /// How many more calls the store serves at once, beside
    /// [`Store::concurrent_calls`], for admitting requests (an API key's
    /// lookup) and health's probe: connections kept for them, so that
    /// neither a flood of those nor tenants' work holding every other
    /// connection starves the other. `None` when callers are not bounded.
    fn admission_calls(&self) -> Option<usize> {
        None
    }

    /// How many calls the store serves at once, beside the others, for
    /// host jobs that must never take the requests' connections (webhook
    /// deliveries). `None` when callers are not bounded.
    fn background_calls(&self) -> Option<usize> {
        None
    }

    /// Whether the short reads of every request (an API key, an
    /// organization, the probe) are lookups in this process's memory or
    /// the operating system's cache, quick enough to make on an async
    /// runtime's thread (the hop to a blocking thread would cost more than
    /// the read); `false` when they may wait on a network or a pool.
    fn short_reads_are_local(&self) -> bool {
        false
    }

    /// The store's size in bytes (on disk, or the database's).
    fn size_on_disk(&self) -> Result<u64, StoreError>;

    /// Makes every write so far durable (at shutdown).
    fn flush(&self) -> Result<(), StoreError>;

    /// Gives memory the backend freed during a large write back to the
    /// system (after each import batch).
    fn release_freed_memory(&self) {}

    /// Records that the host named `host` serves from this store now, and
    /// returns how many hosts (this one included) did so within the last
    /// `within`. A store one process owns (sled) has one host.
    fn host_heartbeat(&self, _host: &str, _within: std::time::Duration) -> Result<u32, StoreError> {
        Ok(1)
    }

    /// Records that the host named `host` stopped serving (at shutdown).
    fn host_leaving(&self, _host: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

impl dyn Store + '_ {
    /// Writes records of one collection as one batch (see
    /// [`Store::write_batch`]), reading nothing first.
    pub fn insert_records(
        &self,
        organization: Uuid,
        collection: Collection,
        records: &[Value],
    ) -> Result<(), StoreError> {
        self.write_batch(organization, &mut |_, _| Ok(vec![CollectionWrite::records(collection, records.to_vec())]))
    }

    /// Reads with a session of its own: for one-off reads outside a request.
    pub fn get(&self, organization: Uuid, collection: Collection, id: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
        self.reader(organization)?.get(collection, id)
    }
}

/// The latest `updated_at` (Unix nanoseconds) among the records of a
/// batch: a backend keeps its write clock past it, so a record written
/// with a time of its own (a bulk load, a copy) never outruns a later write.
pub fn latest_update(writes: &[CollectionWrite]) -> Option<i64> {
    writes
        .iter()
        .flat_map(|write| &write.records)
        .filter_map(|record| record.get("updated_at")?.as_str().and_then(WriteTime::parse))
        .map(|at| at.0)
        .max()
}

/// Refuses an existing data directory that grants other users any access
/// (the server's check before it opens one). A new directory is created
/// owner-only, and the files inside get the process's file-creation mask
/// (`esr` sets 0o077).
pub fn check_data_dir_private(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(dir) {
        Ok(metadata) => metadata.permissions().mode() & 0o777,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(StoreError::Io(error)),
    };
    if mode & 0o077 != 0 {
        return Err(StoreError::NotPrivate(dir.display().to_string(), mode));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_record_stored_before_last_used_at_was_kept_still_reads() -> Result<(), serde_json::Error> {
        let stored = r#"{"id":"019a0000-0000-7000-8000-000000000001","organization_id":"019a0000-0000-7000-8000-000000000002",
            "name":"siem","scopes":["findings:read"],"prefix":"esr_abcdef","created_at":"2026-01-01T00:00:00Z",
            "expires_at":null,"revoked_at":null}"#;
        let record: ApiKeyRecord = serde_json::from_str(stored)?;
        assert_eq!(record.last_used_at, None);
        assert_eq!(record.name, "siem");
        Ok(())
    }
}
