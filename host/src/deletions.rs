//! Deleting records: one record and what depends on it, in one atomic
//! batch.
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

use std::collections::BTreeMap;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::store::{COLLECTIONS, CollectionWrite, IndexPosition, MAX_SCAN, Store, StoreError, StoreReader};

const ENDPOINTS: &str = "endpoints";
const FINDINGS: &str = "vulnerability-findings";
const TARGETS: &str = "remediation-targets";
const SCOPES: &str = "scopes";

#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("no collection {name}; one of {known}", known = COLLECTIONS.join(", "))]
    UnknownCollection { name: String },
    #[error("no {collection} record {id} in this organization")]
    NotFound { collection: String, id: Uuid },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a deletion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletionSummary {
    /// Records deleted, the one asked for included.
    pub deleted: usize,
    /// Records rewritten without a reference to a deleted one (endpoints
    /// whose open counts moved included).
    pub updated: usize,
}

/// Deletes the record `id` of `collection` in the organization, with what
/// depends on it, in one batch.
pub fn delete(db: &dyn Store, organization: Uuid, collection: &str, id: Uuid) -> Result<DeletionSummary, DeleteError> {
    let collection = *COLLECTIONS
        .iter()
        .find(|known| **known == collection)
        .ok_or_else(|| DeleteError::UnknownCollection { name: collection.to_owned() })?;
    let mut outcome = None;
    db.write_batch(organization, &mut |view, now| {
        // Planned afresh on each call (a backend may retry the write).
        let Some(record) = crate::reports::stored_record(view, collection, id)? else {
            outcome = Some(Err(DeleteError::NotFound { collection: collection.to_owned(), id }));
            return Ok(Vec::new());
        };
        let mut plan = Plan::default();
        plan.delete(collection, id);
        let now = now.format();
        let text_id = id.to_string();
        match collection {
            ENDPOINTS => {
                for dependent in [FINDINGS, TARGETS] {
                    for dependent_id in ids_by_index(view, dependent, "endpoint_id", &text_id)? {
                        plan.delete(dependent, dependent_id);
                    }
                }
                for mut scope in scopes_naming_endpoint(view, &text_id)? {
                    if let Some(named) =
                        scope.pointer_mut("/endpoint_filter/endpoint_ids").and_then(Value::as_array_mut)
                    {
                        named.retain(|named| named.as_str() != Some(text_id.as_str()));
                    }
                    plan.rewrite(SCOPES, scope, &now);
                }
            }
            FINDINGS => {
                for mut target in crate::reports::records_by_index(view, TARGETS, "finding_id", &text_id)? {
                    without_id(&mut target, "finding_ids", &text_id);
                    plan.rewrite(TARGETS, target, &now);
                }
                for endpoint in crate::ingest::endpoints_with_moved_counts(view, [(Some(&record), None)], &now)? {
                    plan.rewrite(ENDPOINTS, endpoint, &now);
                }
            }
            TARGETS => {
                for mut finding in crate::reports::records_by_index(view, FINDINGS, "remediation_target_id", &text_id)?
                {
                    finding["remediation_target_id"] = Value::Null;
                    plan.rewrite(FINDINGS, finding, &now);
                }
            }
            _ => {
                for mut target in crate::reports::records_by_index(view, TARGETS, "scope_id", &text_id)? {
                    without_id(&mut target, "scope_ids", &text_id);
                    plan.rewrite(TARGETS, target, &now);
                }
            }
        }
        let (summary, writes) = plan.into_writes();
        outcome = Some(Ok(summary));
        Ok(writes)
    })?;
    outcome.unwrap_or_else(|| Err(StoreError::Backend("the write ended without planning the deletion".into()).into()))
}

/// What one deletion deletes and rewrites, by collection.
#[derive(Default)]
struct Plan {
    deleted: BTreeMap<&'static str, Vec<Uuid>>,
    rewritten: BTreeMap<&'static str, BTreeMap<Uuid, Value>>,
}

impl Plan {
    fn delete(&mut self, collection: &'static str, id: Uuid) {
        self.deleted.entry(collection).or_default().push(id);
    }

    /// A record that keeps living with a reference cleared (or a count moved).
    fn rewrite(&mut self, collection: &'static str, mut record: Value, now: &str) {
        let Some(id) = record.get("id").and_then(Value::as_str).and_then(|id| Uuid::try_parse(id).ok()) else {
            return;
        };
        record["updated_at"] = json!(now);
        self.rewritten.entry(collection).or_default().insert(id, record);
    }

    fn into_writes(self) -> (DeletionSummary, Vec<CollectionWrite>) {
        let mut summary = DeletionSummary::default();
        let mut writes: Vec<CollectionWrite> = Vec::new();
        for collection in COLLECTIONS {
            let deleted = self.deleted.get(collection).cloned().unwrap_or_default();
            let records: Vec<Value> =
                self.rewritten.get(collection).map(|records| records.values().cloned().collect()).unwrap_or_default();
            summary.deleted += deleted.len();
            summary.updated += records.len();
            let write = CollectionWrite { deleted, ..CollectionWrite::records(collection, records) };
            if !write.is_empty() {
                writes.push(write);
            }
        }
        (summary, writes)
    }
}

/// `field` (an array of ids) without `id`.
fn without_id(record: &mut Value, field: &str, id: &str) {
    if let Some(ids) = record.get_mut(field).and_then(Value::as_array_mut) {
        ids.retain(|named| named.as_str() != Some(id));
    }
}

/// The ids of every record holding `value` in the index, read from the
/// index alone, a page of [`MAX_SCAN`] at a time.
fn ids_by_index(
    view: &mut dyn StoreReader,
    collection: &str,
    index: &str,
    value: &str,
) -> Result<Vec<Uuid>, StoreError> {
    let mut ids = Vec::new();
    let mut after: Option<IndexPosition> = None;
    loop {
        let page = view.index_positions(collection, index, value, after, MAX_SCAN, false)?;
        let full = page.len() == MAX_SCAN;
        after = page.last().copied();
        ids.extend(page.into_iter().map(|(_, id)| id));
        if !full {
            return Ok(ids);
        }
    }
}

/// The scopes whose endpoint filter names the endpoint (no index holds
/// them: scopes are read in pages, in id order).
fn scopes_naming_endpoint(view: &mut dyn StoreReader, endpoint: &str) -> Result<Vec<Value>, StoreError> {
    let mut naming = Vec::new();
    let mut after = None;
    loop {
        let page = view.scan(SCOPES, after, MAX_SCAN, false)?;
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
