//! The change feed and records' histories in sled.
//!
//! Per collection, beside its records:
//! - `changes/{collection}`: `organization ‖ sequence (u64 BE)` → the
//!   event, `record id (16) ‖ operation (1) ‖ changed_at (i64 BE)`; one
//!   organization's events are one range in sequence order.
//! - `change-ids/{collection}`: `organization ‖ record id` → the sequence
//!   of the record's event (u64 BE): a newer change finds the older event
//!   through it and removes it, so a record has one event.
//! - `history/{collection}`: `organization ‖ record id ‖ n (u64 BE)` → an
//!   entry, in the order written.
//!
//! And `change-logs`: `organization` → `latest ‖ pruned_through` (u64 BE
//! each), the [`ChangeLog`], written in the transaction of the events it
//! counts. Sequences are given under the store's writer lock (one process
//! owns the directory), so they follow commit order.

use std::collections::HashMap;

use uuid::Uuid;

use super::{Trees, record_key};
use esr_store::{ChangeEvent, ChangeLog, ChangeOperation, Collection, MAX_SCAN, StoreError};

/// The tree of every organization's [`ChangeLog`].
pub(super) const CHANGE_LOGS: &str = "change-logs";

/// `record id ‖ operation ‖ changed_at`.
const EVENT_BYTES: usize = 16 + 1 + 8;

/// Keys to write (`Some`) or remove (`None`) in one tree, each key once.
pub(super) type KeyChanges<K, V> = Vec<(K, Option<V>)>;

/// An event's key: `organization ‖ sequence`.
pub(super) fn event_key(organization: Uuid, sequence: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..16].copy_from_slice(organization.as_bytes());
    key[16..].copy_from_slice(&sequence.to_be_bytes());
    key
}

/// The key of a record's event pointer (`change-ids`): its record key.
pub(super) fn pointer_key(organization: Uuid, id: Uuid) -> [u8; 32] {
    record_key(organization, id)
}

/// The prefix of a record's history entries: its record key.
pub(super) fn history_prefix(organization: Uuid, id: Uuid) -> [u8; 32] {
    record_key(organization, id)
}

/// A history entry's key: `organization ‖ record id ‖ n`.
pub(super) fn history_key(organization: Uuid, id: Uuid, n: u64) -> [u8; 40] {
    let mut key = [0u8; 40];
    key[..32].copy_from_slice(&history_prefix(organization, id));
    key[32..].copy_from_slice(&n.to_be_bytes());
    key
}

/// The `n` a history key ends with.
pub(super) fn history_number(key: &[u8]) -> Result<u64, StoreError> {
    key.get(32..40)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| StoreError::Corrupt("a history key is not organization + record id + number".into()))
}

/// A u64 stored big-endian (a sequence, in a key's tail or a pointer).
pub(super) fn read_sequence(bytes: &[u8]) -> Result<u64, StoreError> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| StoreError::Corrupt("a change sequence is not 8 bytes".into()))
}

/// An event as stored, without its sequence (the key's) and collection
/// (the tree's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StoredEvent {
    pub id: Uuid,
    pub operation: ChangeOperation,
    pub changed_at: i64,
}

impl StoredEvent {
    pub fn encode(&self) -> [u8; EVENT_BYTES] {
        let mut bytes = [0u8; EVENT_BYTES];
        bytes[..16].copy_from_slice(self.id.as_bytes());
        bytes[16] = match self.operation {
            ChangeOperation::Created => 1,
            ChangeOperation::Updated => 2,
            ChangeOperation::Deleted => 3,
        };
        bytes[17..].copy_from_slice(&self.changed_at.to_be_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<StoredEvent, StoreError> {
        let corrupt = || StoreError::Corrupt("a change event is not record id + operation + time".into());
        if bytes.len() != EVENT_BYTES {
            return Err(corrupt());
        }
        let id = Uuid::from_slice(&bytes[..16]).map_err(|_| corrupt())?;
        let operation = match bytes[16] {
            1 => ChangeOperation::Created,
            2 => ChangeOperation::Updated,
            3 => ChangeOperation::Deleted,
            _ => return Err(corrupt()),
        };
        let changed_at = i64::from_be_bytes(<[u8; 8]>::try_from(&bytes[17..]).map_err(|_| corrupt())?);
        Ok(StoredEvent { id, operation, changed_at })
    }
}

/// An event key's organization and sequence.
pub(super) fn split_event_key(key: &[u8]) -> Result<(Uuid, u64), StoreError> {
    match (key.get(..16).and_then(|bytes| Uuid::from_slice(bytes).ok()), key.get(16..)) {
        (Some(organization), Some(sequence)) if key.len() == 24 => Ok((organization, read_sequence(sequence)?)),
        _ => Err(StoreError::Corrupt("a change event key is not organization + sequence".into())),
    }
}

pub(super) fn encode_log(log: ChangeLog) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&log.latest.to_be_bytes());
    bytes[8..].copy_from_slice(&log.pruned_through.to_be_bytes());
    bytes
}

pub(super) fn decode_log(bytes: &[u8]) -> Result<ChangeLog, StoreError> {
    if bytes.len() != 16 {
        return Err(StoreError::Corrupt("a change log is not 16 bytes".into()));
    }
    Ok(ChangeLog { latest: read_sequence(&bytes[..8])?, pruned_through: read_sequence(&bytes[8..])? })
}

/// What a collection write does to the feed and histories, planned before
/// its transaction.
/// Their keys are distinct: a record gets one new event and pointer, an
/// old event's sequence is below every new one, and a deleted record's
/// history is not written to. Fixed-size keys and values: a batch of
/// 10,000 records plans 20,000 of them, held until its transaction commits.
#[derive(Default)]
pub(super) struct FeedWrites {
    pub events: KeyChanges<[u8; 24], [u8; EVENT_BYTES]>,
    pub pointers: KeyChanges<[u8; 32], [u8; 8]>,
    pub history: KeyChanges<Vec<u8>, Vec<u8>>,
}

impl FeedWrites {
    /// Gives the record `id` the event `sequence`, removing its event
    /// before (`stored_event`).
    pub fn record_event(&mut self, organization: Uuid, sequence: u64, event: StoredEvent, stored_event: Option<u64>) {
        if let Some(old) = stored_event {
            self.events.push((event_key(organization, old), None));
        }
        self.events.push((event_key(organization, sequence), Some(event.encode())));
        self.pointers.push((pointer_key(organization, event.id), Some(sequence.to_be_bytes())));
    }
}

impl Trees {
    /// The organization's change log, read from its own key.
    pub(super) fn read_change_log(&self, organization: Uuid) -> Result<ChangeLog, StoreError> {
        match self.change_logs.get(organization.as_bytes()).map_err(crate::store_error)? {
            Some(bytes) => decode_log(&bytes),
            None => Ok(ChangeLog::default()),
        }
    }

    /// The sequence of the record's event, if it has one.
    pub(super) fn stored_event(
        change_ids: &sled::Tree,
        organization: Uuid,
        id: Uuid,
    ) -> Result<Option<u64>, StoreError> {
        change_ids
            .get(pointer_key(organization, id))
            .map_err(crate::store_error)?
            .map(|bytes| read_sequence(&bytes))
            .transpose()
    }

    /// The keys of the record's history entries, in order.
    pub(super) fn history_keys(history: &sled::Tree, organization: Uuid, id: Uuid) -> Result<Vec<Vec<u8>>, StoreError> {
        history
            .scan_prefix(history_prefix(organization, id))
            .keys()
            .map(|key| Ok(key.map_err(crate::store_error)?.to_vec()))
            .collect()
    }

    /// The `n` the record's next history entry gets.
    pub(super) fn next_history_number(history: &sled::Tree, organization: Uuid, id: Uuid) -> Result<u64, StoreError> {
        match history.scan_prefix(history_prefix(organization, id)).keys().next_back() {
            Some(key) => Ok(history_number(&key.map_err(crate::store_error)?)?.saturating_add(1)),
            None => Ok(0),
        }
    }

    /// Up to `limit` (at most [`MAX_SCAN`]) of the organization's events
    /// after `after`, in sequence order, of `collections` (every one when
    /// empty; unknown ones hold nothing): each collection's range read from
    /// `after` on, merged by sequence.
    pub(super) fn changes(
        &self,
        organization: Uuid,
        after: u64,
        collections: &[Collection],
        limit: usize,
    ) -> Result<Vec<ChangeEvent>, StoreError> {
        let limit = limit.min(MAX_SCAN);
        let wanted: Vec<Collection> =
            if collections.is_empty() { Collection::ALL.to_vec() } else { collections.to_vec() };
        let mut events = Vec::new();
        for (collection, trees) in self.collections.iter().filter(|(name, _)| wanted.contains(name)) {
            let range = trees.changes.range((
                std::ops::Bound::Excluded(event_key(organization, after)),
                std::ops::Bound::Included(event_key(organization, u64::MAX)),
            ));
            for entry in range.take(limit) {
                let (key, bytes) = entry.map_err(crate::store_error)?;
                let (_, sequence) = split_event_key(&key)?;
                let event = StoredEvent::decode(&bytes)?;
                events.push(ChangeEvent {
                    sequence,
                    collection: *collection,
                    id: event.id,
                    operation: event.operation,
                    changed_at: event.changed_at,
                });
            }
        }
        events.sort_unstable_by_key(|event| event.sequence);
        events.truncate(limit);
        Ok(events)
    }

    /// The record's history entries, in the order written.
    pub(super) fn history(
        &self,
        organization: Uuid,
        collection: Collection,
        id: Uuid,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let Some(trees) = self.collections.get(&collection) else { return Ok(Vec::new()) };
        trees
            .history
            .scan_prefix(history_prefix(organization, id))
            .values()
            .map(|entry| Ok(entry.map_err(crate::store_error)?.to_vec()))
            .collect()
    }

    /// Removes the organization's deletion events older than `before`
    /// (and their pointers), raising `pruned_through` to the highest
    /// sequence removed, in one transaction; how many were removed. The
    /// caller holds the writer lock.
    pub(super) fn prune_changes(&self, organization: Uuid, before: i64) -> Result<u64, StoreError> {
        let mut removed = 0u64;
        let mut highest = 0u64;
        // Per collection: its trees, the event keys and pointer keys to remove.
        type Removals<'a> = (&'a sled::Tree, &'a sled::Tree, Vec<sled::IVec>, Vec<[u8; 32]>);
        let mut planned: Vec<Removals<'_>> = Vec::new();
        for trees in self.collections.values() {
            let (mut events, mut pointers) = (Vec::new(), Vec::new());
            for entry in trees.changes.scan_prefix(organization.as_bytes()) {
                let (key, bytes) = entry.map_err(crate::store_error)?;
                let event = StoredEvent::decode(&bytes)?;
                if event.operation != ChangeOperation::Deleted || event.changed_at >= before {
                    continue;
                }
                let (_, sequence) = split_event_key(&key)?;
                events.push(key);
                pointers.push(pointer_key(organization, event.id));
                removed += 1;
                highest = highest.max(sequence);
            }
            planned.push((&trees.changes, &trees.change_ids, events, pointers));
        }
        if removed == 0 {
            return Ok(0);
        }
        let mut log = self.read_change_log(organization)?;
        log.pruned_through = log.pruned_through.max(highest);
        let mut trees: Vec<&sled::Tree> =
            planned.iter().flat_map(|(events, pointers, ..)| [*events, *pointers]).collect();
        trees.push(&self.change_logs);
        let outcome = sled::Transactional::transaction(&trees[..], |views| {
            for (position, (_, _, events, pointers)) in planned.iter().enumerate() {
                for key in events {
                    views[2 * position].remove(key)?;
                }
                for key in pointers {
                    views[2 * position + 1].remove(&key[..])?;
                }
            }
            views[2 * planned.len()].insert(&organization.as_bytes()[..], &encode_log(log)[..])?;
            Ok(())
        });
        super::transaction_outcome(outcome)?;
        self.flush()?;
        Ok(removed)
    }

    /// Starts the organization's feed at `latest` when it stands below it,
    /// nothing retained up to there. The caller holds the writer lock.
    pub(super) fn continue_changes_from(&self, organization: Uuid, latest: u64) -> Result<(), StoreError> {
        let log = self.read_change_log(organization)?;
        let continued = ChangeLog { latest: log.latest.max(latest), pruned_through: log.pruned_through.max(latest) };
        if continued != log {
            self.change_logs.insert(organization.as_bytes(), &encode_log(continued)[..]).map_err(crate::store_error)?;
            self.flush()?;
        }
        Ok(())
    }

    /// Checks the feed against itself: each event is its record's latest
    /// (the one its pointer names), each pointer names an event of its
    /// record, and no event is past its organization's `latest`.
    pub(super) fn verify_changes(&self) -> Result<Vec<String>, StoreError> {
        let mut logs: HashMap<Uuid, ChangeLog> = HashMap::new();
        for entry in self.change_logs.iter() {
            let (key, bytes) = entry.map_err(crate::store_error)?;
            let organization = Uuid::from_slice(&key)
                .map_err(|_| StoreError::Corrupt("a change log's key is not an organization id".into()))?;
            logs.insert(organization, decode_log(&bytes)?);
        }
        let mut problems = Vec::new();
        for (collection, trees) in &self.collections {
            let mut pointers: HashMap<[u8; 32], u64> = HashMap::new();
            for entry in trees.change_ids.iter() {
                let (key, bytes) = entry.map_err(crate::store_error)?;
                let key = <[u8; 32]>::try_from(key.as_ref()).map_err(|_| {
                    StoreError::Corrupt("a change pointer's key is not organization + record id".into())
                })?;
                pointers.insert(key, read_sequence(&bytes)?);
            }
            let (mut not_latest, mut past_latest, mut pointed) = (0usize, 0usize, 0usize);
            for entry in trees.changes.iter() {
                let (key, bytes) = entry.map_err(crate::store_error)?;
                let (organization, sequence) = split_event_key(&key)?;
                let event = StoredEvent::decode(&bytes)?;
                if pointers.get(&pointer_key(organization, event.id)) == Some(&sequence) {
                    pointed += 1;
                } else {
                    not_latest += 1;
                }
                if sequence > logs.get(&organization).map_or(0, |log| log.latest) {
                    past_latest += 1;
                }
            }
            // Every event a pointer names was counted once above.
            let dangling = pointers.len() - pointed.min(pointers.len());
            if not_latest + dangling > 0 {
                problems.push(format!(
                    "{collection}: {not_latest} change events that are not their record's latest, {dangling} change pointers at no event"
                ));
            }
            if past_latest > 0 {
                problems.push(format!(
                    "{collection}: {past_latest} change events past their organization's latest sequence"
                ));
            }
        }
        Ok(problems)
    }
}
