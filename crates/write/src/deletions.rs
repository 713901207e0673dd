//! Deleting records: one record and what depends on it.
//!
//! - An endpoint goes with its findings and remediation targets; scopes
//!   that name it in `endpoint_filter.endpoint_ids` are rewritten without it.
//! - A finding leaves its endpoint's `open_findings` (the count the write
//!   path keeps) and the `finding_ids` of the targets that list it.
//! - A remediation target leaves the `remediation_target_id` of the
//!   findings that name it.
//! - A scope leaves the `scope_ids` of the targets that list it.
//!
//! Every record whose reference is cleared is rewritten (`updated_at` is
//! the batch's write time), so the change feed shows it `updated`; every
//! deleted record is a `deleted` event there. What is deleted and cleared
//! is read inside the write, under the organization's write lock.
//!
//! A deletion is one atomic batch unless the endpoint has more than
//! [`DELETION_BATCH`] findings and targets: then its findings, then its
//! targets, go in batches of that many, the endpoint with the last. Each
//! batch clears every reference to what it deletes, so the store is whole
//! between batches (the endpoint stays, with fewer findings and its open
//! counts moved); a deletion that stops part way is finished by asking
//! again. Other writers of the organization wait for one batch at most.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use uuid::Uuid;

use esr_store::{
    Collection, CollectionWrite, IndexPosition, IndexWalk, MAX_SCAN, RecordWalk, Store, StoreError, StoreReader,
};

const ENDPOINTS: Collection = Collection::Endpoints;
const FINDINGS: Collection = Collection::VulnerabilityFindings;
const TARGETS: Collection = Collection::RemediationTargets;
const SCOPES: Collection = Collection::Scopes;

/// The most findings and targets one batch of an endpoint's deletion
/// deletes: what bounds its memory and how long it holds the
/// organization's write lock.
pub const DELETION_BATCH: usize = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("no {collection} record {id} in this organization")]
    NotFound { collection: Collection, id: Uuid },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a deletion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletionSummary {
    /// Records deleted, the one asked for included.
    pub deleted: usize,
    /// Records rewritten without a reference to a deleted one (endpoints
    /// whose open counts moved included), counted once per batch.
    pub updated: usize,
    /// The write batches it took.
    pub batches: usize,
}

/// What one batch of a deletion found.
enum Step {
    /// The record is not there (any more).
    Absent,
    /// Some of the record's dependents went (the first of them named);
    /// the record is still there.
    Partial(DeletionSummary, Option<Uuid>),
    /// The record went.
    Done(DeletionSummary),
}

/// Deletes the record `id` of `collection` in the organization, with what
/// depends on it: one batch, or several for an endpoint with more than
/// [`DELETION_BATCH`] dependents.
pub fn delete(
    db: &dyn Store,
    organization: Uuid,
    collection: Collection,
    id: Uuid,
) -> Result<DeletionSummary, DeleteError> {
    let mut total = DeletionSummary::default();
    let mut previous_first = None;
    loop {
        let mut step = None;
        db.write_batch(organization, &mut |reader, now| {
            // Planned afresh on each call (a backend may retry the write).
            step = None;
            let Some(record) = esr_store::read_record(reader, collection, id)? else {
                step = Some(Step::Absent);
                return Ok(Vec::new());
            };
            let mut plan = Plan::default();
            let whole = if collection == ENDPOINTS { plan.some_dependents(reader, id)? } else { true };
            if whole {
                plan.delete(collection, id, Some(record));
            }
            let first = plan.deleted.values().flat_map(BTreeMap::keys).next().copied();
            let (summary, writes) = plan.into_writes(reader, &now.format())?;
            step = Some(if whole { Step::Done(summary) } else { Step::Partial(summary, first) });
            Ok(writes)
        })?;
        let batch = match step {
            Some(Step::Absent) if total.batches == 0 => {
                return Err(DeleteError::NotFound { collection, id });
            }
            // Deleted by another writer between two batches.
            Some(Step::Absent) => return Ok(total),
            // The same dependents again: an index names records that are gone.
            Some(Step::Partial(_, first)) if first == previous_first => {
                return Err(StoreError::Corrupt(format!(
                    "the index of {collection} {id}'s dependents names records that are not stored"
                ))
                .into());
            }
            Some(Step::Partial(batch, first)) => {
                previous_first = first;
                batch
            }
            Some(Step::Done(batch)) => {
                total.add(&batch);
                return Ok(total);
            }
            None => return Err(StoreError::Backend("the write ended without planning the deletion".into()).into()),
        };
        total.add(&batch);
    }
}

impl DeletionSummary {
    fn add(&mut self, batch: &DeletionSummary) {
        self.deleted += batch.deleted;
        self.updated += batch.updated;
        self.batches += 1;
    }
}

/// What one batch deletes, by collection (with the record where it was
/// read), and the records it rewrites.
#[derive(Default)]
struct Plan {
    deleted: BTreeMap<Collection, BTreeMap<Uuid, Option<Value>>>,
    rewritten: BTreeMap<Collection, BTreeMap<Uuid, Value>>,
}

impl Plan {
    fn delete(&mut self, collection: Collection, id: Uuid, record: Option<Value>) {
        self.deleted.entry(collection).or_default().insert(id, record);
    }

    fn is_deleted(&self, collection: Collection, id: Uuid) -> bool {
        self.deleted.get(&collection).is_some_and(|ids| ids.contains_key(&id))
    }

    /// Adds up to [`DELETION_BATCH`] of the endpoint's findings, then of
    /// its targets: whether that is all of them (the endpoint can go too).
    fn some_dependents(&mut self, reader: &mut dyn StoreReader, endpoint: Uuid) -> Result<bool, StoreError> {
        let text_id = endpoint.to_string();
        let mut room = DELETION_BATCH;
        for dependent in [FINDINGS, TARGETS] {
            // One more than there is room for says whether any stay behind.
            let ids = ids_by_index(reader, dependent, "endpoint_id", &text_id, room + 1)?;
            let all = ids.len() <= room;
            let ids = &ids[..ids.len().min(room)];
            room -= ids.len();
            // Deleted findings move open counts: their records are needed.
            let mut records = BTreeMap::new();
            if dependent == FINDINGS {
                for (id, bytes) in reader.get_many(FINDINGS, ids)? {
                    let record: Value =
                        serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                    records.insert(id, record);
                }
            }
            ids.iter().for_each(|id| self.delete(dependent, *id, records.remove(id)));
            if !all {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The record to rewrite: as this batch already rewrote it, or as stored.
    fn rewrite(&mut self, collection: Collection, record: Value, now: &str) -> Option<&mut Value> {
        let id = record.get("id").and_then(Value::as_str).and_then(|id| Uuid::try_parse(id).ok())?;
        if self.is_deleted(collection, id) {
            return None;
        }
        let kept = self.rewritten.entry(collection).or_default().entry(id).or_insert(record);
        kept["updated_at"] = json!(now);
        Some(kept)
    }

    /// The ids the batch deletes from a collection, as text, sorted (a
    /// UUID's text sorts as its bytes do).
    fn deleted_ids(&self, collection: Collection) -> Vec<String> {
        self.deleted.get(&collection).map(|ids| ids.keys().map(Uuid::to_string).collect()).unwrap_or_default()
    }

    /// The records of `collection` that hold a deleted id of `deleted` in
    /// `index`, and that the batch keeps, each cleared by `clear` with the
    /// deleted ids: one lookup for all of them.
    fn clear_in(
        &mut self,
        reader: &mut dyn StoreReader,
        (collection, index): (Collection, &str),
        deleted: Collection,
        now: &str,
        clear: impl Fn(&mut Value, &[String]),
    ) -> Result<(), StoreError> {
        let gone = self.deleted_ids(deleted);
        if gone.is_empty() {
            return Ok(());
        }
        let holding: Vec<Uuid> = reader
            .ids_holding_any(collection, index, &gone)?
            .into_iter()
            .filter(|id| !self.is_deleted(collection, *id))
            .collect();
        for chunk in holding.chunks(MAX_SCAN) {
            for (_, bytes) in reader.get_many(collection, chunk)? {
                let record: Value = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                if let Some(record) = self.rewrite(collection, record, now) {
                    clear(record, &gone);
                }
            }
        }
        Ok(())
    }

    /// Clears every reference to what the batch deletes from the records
    /// it keeps, and moves the open counts of the endpoints it keeps.
    fn clear_references(&mut self, reader: &mut dyn StoreReader, now: &str) -> Result<(), StoreError> {
        self.clear_in(reader, (TARGETS, "finding_id"), FINDINGS, now, |target, gone| {
            without_ids(target, "finding_ids", gone);
        })?;
        self.clear_in(reader, (FINDINGS, "remediation_target_id"), TARGETS, now, |finding, _| {
            finding["remediation_target_id"] = Value::Null;
        })?;
        self.clear_in(reader, (TARGETS, "scope_id"), SCOPES, now, |target, gone| {
            without_ids(target, "scope_ids", gone)
        })?;
        for endpoint in self.deleted_ids(ENDPOINTS) {
            for scope in scopes_naming_endpoint(reader, &endpoint)? {
                if let Some(named) = self
                    .rewrite(SCOPES, scope, now)
                    .and_then(|scope| scope.pointer_mut("/endpoint_filter/endpoint_ids"))
                    .and_then(Value::as_array_mut)
                {
                    named.retain(|named| named.as_str() != Some(endpoint.as_str()));
                }
            }
        }
        let findings = self.deleted.get(&FINDINGS).cloned().unwrap_or_default();
        let moved = findings.values().flatten().map(|finding| (Some(finding), None));
        for endpoint in crate::ingest::endpoints_with_moved_counts(reader, moved, now)? {
            self.rewrite(ENDPOINTS, endpoint, now);
        }
        Ok(())
    }

    fn into_writes(
        mut self,
        reader: &mut dyn StoreReader,
        now: &str,
    ) -> Result<(DeletionSummary, Vec<CollectionWrite>), StoreError> {
        self.clear_references(reader, now)?;
        let mut summary = DeletionSummary::default();
        let mut writes: Vec<CollectionWrite> = Vec::new();
        for collection in Collection::ALL {
            let deleted: Vec<Uuid> =
                self.deleted.remove(&collection).map(|ids| ids.into_keys().collect()).unwrap_or_default();
            let records: Vec<Value> =
                self.rewritten.remove(&collection).map(|records| records.into_values().collect()).unwrap_or_default();
            summary.deleted += deleted.len();
            summary.updated += records.len();
            let write = CollectionWrite { deleted, ..CollectionWrite::records(collection, records) };
            if !write.is_empty() {
                writes.push(write);
            }
        }
        Ok((summary, writes))
    }
}

/// `field` (an array of ids) without any of `gone` (sorted).
fn without_ids(record: &mut Value, field: &str, gone: &[String]) {
    if let Some(ids) = record.get_mut(field).and_then(Value::as_array_mut) {
        ids.retain(|named| {
            named.as_str().is_none_or(|named| gone.binary_search_by(|id| id.as_str().cmp(named)).is_err())
        });
    }
}

/// The ids of the first `limit` records holding `value` in the index,
/// read from the index alone, a page of at most [`MAX_SCAN`] at a time.
fn ids_by_index(
    reader: &mut dyn StoreReader,
    collection: Collection,
    index: &str,
    value: &str,
    limit: usize,
) -> Result<Vec<Uuid>, StoreError> {
    let mut ids = Vec::new();
    let mut after: Option<IndexPosition> = None;
    while ids.len() < limit {
        let want = (limit - ids.len()).min(MAX_SCAN);
        let page = reader.index_positions(collection, &IndexWalk::new(index, value, want).after(after))?;
        let full = page.len() == want;
        after = page.last().copied();
        ids.extend(page.into_iter().map(|position| position.id));
        if !full {
            break;
        }
    }
    Ok(ids)
}

/// The scopes whose endpoint filter names the endpoint (no index holds
/// them: scopes are read in pages, in id order).
fn scopes_naming_endpoint(reader: &mut dyn StoreReader, endpoint: &str) -> Result<Vec<Value>, StoreError> {
    let mut naming = Vec::new();
    let mut after = None;
    loop {
        let page = reader.scan(SCOPES, &RecordWalk::new(MAX_SCAN).after(after))?;
        let full = page.len() == MAX_SCAN;
        for (id, bytes) in page {
            after = Some(id);
            let scope: Value =
                serde_json::from_slice(&bytes).map_err(|error| StoreError::Corrupt(error.to_string()))?;
            let names = scope
                .pointer("/endpoint_filter/endpoint_ids")
                .and_then(Value::as_array)
                .is_some_and(|ids| ids.iter().any(|named| named.as_str() == Some(endpoint)));
            if names {
                naming.push(scope);
            }
        }
        if !full {
            return Ok(naming);
        }
    }
}
