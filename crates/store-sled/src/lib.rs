//! The sled backend: the store's layout in sled, the only code that
//! touches sled.
//!
//! One tree per collection, keyed by organization id (16 bytes) then record
//! id (16 bytes), so one organization's records are one contiguous range in
//! id order, which is creation order because ids are UUIDv7. Organizations
//! and API keys (by hash) have their own trees; the change feed and
//! records' histories theirs (`changes.rs`), the audit trail its own
//! (`audit.rs`). Every write is flushed before
//! it is acknowledged: sled's background flusher loses acknowledged writes
//! on a crash.

mod audit;
mod changes;
mod documents;
mod index_blocks;
mod staged;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use esr_contract::indexes::{self, CREATED_AT, UPDATED_AT};
use esr_contract::time::Timestamp;
use serde_json::Value;
use uuid::Uuid;

use self::index_blocks::value_prefix;
use esr_store::{
    ApiKeyRecord, AuditEntry, AuditPage, BuildBatch, ChangeEvent, ChangeLog, ChangeOperation, Collection,
    CollectionWrite, Document, GroupCount, IndexCondition, IndexPosition, IndexRange, IndexWalk, MAX_RANGE_CANDIDATES,
    MAX_SCAN, Matching, Organization, ReadFrom, RecordWalk, Store, StoreError, StoreReader, StoredRecord, WriteTime,
    ordered_by_creation, restricting_conditions, sort_index,
};

/// Record ids, as index entries hold them.
type IdSet = foldhash::HashSet<[u8; 16]>;

const ORGANIZATIONS: &str = "organizations";
const API_KEYS: &str = "api-keys";
const META: &str = "meta";
/// The marker naming the index table the stored indexes match, or `stale`.
const INDEXES_MARKER: &str = "indexes";

/// sled's error as the store reports it.
fn store_error(error: sled::Error) -> StoreError {
    match error {
        sled::Error::Io(io) => StoreError::Io(io),
        other => StoreError::Backend(other.to_string()),
    }
}

/// The store in a sled directory. A handle: cloning it copies one pointer.
#[derive(Clone)]
pub struct SledStore(Arc<Trees>);

impl std::ops::Deref for SledStore {
    type Target = Trees;

    fn deref(&self) -> &Trees {
        &self.0
    }
}

/// What a [`SledStore`] handle points to.
pub struct Trees {
    db: sled::Db,
    organizations: sled::Tree,
    api_keys: sled::Tree,
    meta: sled::Tree,
    /// `organization` → its [`ChangeLog`] (`changes.rs`).
    change_logs: sled::Tree,
    /// The host's documents (`documents.rs`).
    documents: sled::Tree,
    /// The audit trail and its time index (`audit.rs`).
    audit: sled::Tree,
    audit_by_time: sled::Tree,
    /// Held by whoever appends to the audit trail (`audit.rs`).
    audit_appender: Mutex<()>,
    /// The hash each API key is stored under, by key id, as last found:
    /// noting a key's use ([`Store::touch_api_key`], once a minute per key)
    /// then reads one record, not every key's. Checked on each use.
    key_hashes: Mutex<HashMap<Uuid, [u8; 32]>>,
    collections: BTreeMap<Collection, CollectionTrees>,
    /// Each organization's write lock, held by whoever validates and
    /// writes a batch of its records, so that what was validated is what
    /// gets replaced, and while the write reads the index blocks it then
    /// replaces (every key of an organization's data starts with its id).
    /// One process owns a sled directory, so in-process locks serialize
    /// the writers of an organization; those of different organizations
    /// meet only in sled's commit of one bounded batch. Each lock guards
    /// its organization's last write time (see [`esr_store::WriteTime`]).
    writers: Mutex<HashMap<Uuid, Arc<Mutex<i64>>>>,
    /// Each organization's gate: its readers pass it for each store call,
    /// and a write too large for one transaction closes it while it
    /// applies (`staged.rs`), so no reader sees half of that write.
    gates: Mutex<HashMap<Uuid, Arc<RwLock<()>>>>,
    /// Large writes waiting to be applied (`staged.rs`).
    staged_writes: sled::Tree,
}

/// A collection's records, its index entries and the index counts.
struct CollectionTrees {
    records: sled::Tree,
    /// Blocks of index entries (`index_blocks`): `organization ‖
    /// index name ‖ 0 ‖ value length (u32) ‖ value ‖ first entry` → entries,
    /// each `position (u64, order-preserving) ‖ record id`.
    index: sled::Tree,
    /// `organization ‖ index name ‖ 0 ‖ value length ‖ value` → u64 count.
    counts: sled::Tree,
    /// The change feed: `organization ‖ sequence` → event (`changes.rs`).
    changes: sled::Tree,
    /// `organization ‖ record id` → the sequence of the record's event.
    change_ids: sled::Tree,
    /// `organization ‖ record id ‖ n` → history entry.
    history: sled::Tree,
}

/// A read session: sled reads need no connection, so it is the trees and
/// the organization. Reads are not snapshot-consistent (sled's iteration is
/// not); see `ARCHITECTURE.md`.
struct SledReader {
    trees: Arc<Trees>,
    organization: Uuid,
    /// The organization's gate (see [`Trees::gates`]).
    gate: Arc<RwLock<()>>,
    /// When the request's time is up: walks stop there.
    deadline: Option<std::time::Instant>,
    /// The records the last count of several ranges found, kept for the
    /// session's next store call: a summary's total and its groups match
    /// the same filters, and the ranges' intersection is most of the work.
    matched: Option<(Collection, Matching, IdSet)>,
    /// How many records the last groups' candidates were, kept the same
    /// way for a count of the same filters after the groups.
    counted: Option<(Collection, Matching, u64)>,
}

/// What a reader kept from its last call, taken: if it was of the same
/// records (`collection` and `matching`).
fn kept_for<T>(slot: &mut Option<(Collection, Matching, T)>, collection: Collection, matching: &Matching) -> Option<T> {
    slot.take()
        .filter(|(kept, kept_matching, _)| *kept == collection && kept_matching == matching)
        .map(|(.., kept)| kept)
}

/// What a reader holds through one store call.
type StoreCall<'a> = (std::sync::RwLockReadGuard<'a, ()>, esr_store::call_deadline::Scope);

impl SledReader {
    /// Enters a store call: refused once the deadline has passed, and the
    /// walks below it check the deadline as they go. The call waits while
    /// a large write of the organization applies.
    fn call(&self) -> Result<StoreCall<'_>, StoreError> {
        esr_store::within(self.deadline)?;
        let deadline = esr_store::call_deadline::Scope::enter(self.deadline);
        Ok((self.gate.read().unwrap_or_else(std::sync::PoisonError::into_inner), deadline))
    }
}

impl SledStore {
    /// Opens (or creates, owner-only) the store in `dir`.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        let db = sled_config(dir).open().map_err(|error| match error {
            // sled reports the lock as an `Other` error wrapping `WouldBlock`.
            sled::Error::Io(ref io)
                if io.kind() == std::io::ErrorKind::WouldBlock || io.to_string().contains("could not acquire lock") =>
            {
                StoreError::Locked(dir.display().to_string())
            }
            other => store_error(other),
        })?;
        let mut collections = BTreeMap::new();
        for name in Collection::ALL {
            collections.insert(
                name,
                CollectionTrees {
                    records: db.open_tree(format!("records/{name}")).map_err(store_error)?,
                    index: db.open_tree(format!("index/{name}")).map_err(store_error)?,
                    counts: db.open_tree(format!("counts/{name}")).map_err(store_error)?,
                    changes: db.open_tree(format!("changes/{name}")).map_err(store_error)?,
                    change_ids: db.open_tree(format!("change-ids/{name}")).map_err(store_error)?,
                    history: db.open_tree(format!("history/{name}")).map_err(store_error)?,
                },
            );
        }
        let database = SledStore(Arc::new(Trees {
            organizations: db.open_tree(ORGANIZATIONS).map_err(store_error)?,
            api_keys: db.open_tree(API_KEYS).map_err(store_error)?,
            meta: db.open_tree(META).map_err(store_error)?,
            change_logs: db.open_tree(changes::CHANGE_LOGS).map_err(store_error)?,
            documents: db.open_tree(documents::DOCUMENTS).map_err(store_error)?,
            audit: db.open_tree(audit::AUDIT).map_err(store_error)?,
            audit_by_time: db.open_tree(audit::AUDIT_BY_TIME).map_err(store_error)?,
            audit_appender: Mutex::default(),
            key_hashes: Mutex::default(),
            collections,
            writers: Mutex::default(),
            gates: Mutex::default(),
            staged_writes: db.open_tree(staged::STAGED_WRITES).map_err(store_error)?,
            db,
        }));
        // A large write the process stopped in is finished (or, if it was
        // not decided yet, discarded) before anything reads.
        staged::finish(&database.db, &database.staged_writes, None)?;
        database.rebuild_indexes_if_stale()?;
        Ok(database)
    }

    /// The organization's write lock (see [`Trees::writers`]).
    fn writer(&self, organization: Uuid) -> Arc<Mutex<i64>> {
        let mut writers = self.writers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        writers.entry(organization).or_default().clone()
    }

    /// Opens the store of an existing deployment: refuses a directory
    /// without sled's files in it instead of creating a store there.
    pub fn open_existing(dir: &Path) -> Result<SledStore, StoreError> {
        if !dir.join("conf").is_file() || !dir.join("db").is_file() {
            return Err(StoreError::NotADeployment(dir.display().to_string()));
        }
        SledStore::open(dir)
    }
}

impl Trees {
    /// The organization's gate (see [`Trees::gates`]).
    fn gate(&self, organization: Uuid) -> Arc<RwLock<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        gates.entry(organization).or_default().clone()
    }

    /// Rebuilds every index when the stored ones were built from another
    /// index table (or none): a data directory from an older release, or
    /// one whose table changed.
    fn rebuild_indexes_if_stale(&self) -> Result<(), StoreError> {
        if self.marker(INDEXES_MARKER)?.as_deref() == Some(index_table_fingerprint().as_str()) {
            return Ok(());
        }
        self.rebuild_indexes()
    }

    /// Rebuilds every index and count from the records (the change feed
    /// and histories are not indexes: they stay as they are).
    fn rebuild_indexes(&self) -> Result<(), StoreError> {
        const BLOCKS_PER_BATCH: usize = 10_000;
        for (collection, trees) in &self.collections {
            trees.index.clear().map_err(store_error)?;
            trees.counts.clear().map_err(store_error)?;
            let mut counts: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            // Each value's entries, gathered whole, then written in blocks.
            let mut entries: HashMap<Vec<u8>, Vec<index_blocks::Entry>> = HashMap::new();
            for entry in trees.records.iter() {
                let (key, bytes) = entry.map_err(store_error)?;
                let organization = key.get(..16).and_then(|b| Uuid::from_slice(b).ok());
                let (Some(organization), Ok(id)) = (organization, record_id(&key)) else {
                    return Err(StoreError::Corrupt("a record key is not organization id + record id".into()));
                };
                let record: Value = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                for (entry_key, count_key) in index_entries(organization, *collection, id, &record)? {
                    if let Some(entry_key) = entry_key {
                        let (prefix, entry) = index_blocks::split_entry_key(&entry_key)?;
                        entries.entry(prefix.to_vec()).or_default().push(entry);
                    }
                    *counts.entry(count_key).or_default() += 1;
                }
            }
            let mut batch = sled::Batch::default();
            let mut batched = 0;
            for (prefix, mut held) in entries {
                held.sort_unstable();
                held.dedup();
                for (key, value) in index_blocks::single_run(&prefix, &held) {
                    batch.insert(key, value);
                    batched += 1;
                }
                if batched >= BLOCKS_PER_BATCH {
                    trees.index.apply_batch(std::mem::take(&mut batch)).map_err(store_error)?;
                    batched = 0;
                }
            }
            trees.index.apply_batch(batch).map_err(store_error)?;
            let mut batch = sled::Batch::default();
            for (key, count) in counts {
                batch.insert(key, &count.to_be_bytes());
            }
            trees.counts.apply_batch(batch).map_err(store_error)?;
        }
        self.flush()?;
        self.set_marker(INDEXES_MARKER, &index_table_fingerprint())
    }

    /// Checks that every index entry and count agrees with the records;
    /// returns what does not (empty when all is well). Reads everything.
    fn verify_indexes(&self) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        for (collection, trees) in &self.collections {
            let mut entries: Vec<index_blocks::EntryDigest> = Vec::new();
            let mut counts: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for entry in trees.records.iter() {
                let (key, bytes) = entry.map_err(store_error)?;
                let organization = key.get(..16).and_then(|b| Uuid::from_slice(b).ok()).unwrap_or_default();
                let id = record_id(&key)?;
                let record: Value = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                for (entry_key, count_key) in index_entries(organization, *collection, id, &record)? {
                    entries.extend(entry_key.map(|key| index_blocks::entry_digest(&[&key])));
                    *counts.entry(count_key).or_default() += 1;
                }
            }
            entries.sort_unstable();
            entries.dedup();
            let (stored_entries, layout_problems) = index_blocks::stored_entries(&trees.index)?;
            problems.extend(layout_problems.into_iter().map(|problem| format!("{collection}: {problem}")));
            let (missing, extra) = index_blocks::differences(&entries, &stored_entries);
            if missing + extra > 0 {
                problems.push(format!("{collection}: {missing} index entries missing, {extra} pointing at nothing"));
            }
            let mut stored_counts = BTreeMap::new();
            for entry in trees.counts.iter() {
                let (key, bytes) = entry.map_err(store_error)?;
                stored_counts.insert(key.to_vec(), read_count(&bytes));
            }
            if stored_counts != counts {
                problems.push(format!("{collection}: index counts disagree with the records"));
            }
        }
        problems.extend(self.verify_changes()?);
        Ok(problems)
    }

    /// Whether no organization exists yet.
    fn is_empty(&self) -> bool {
        self.organizations.is_empty()
    }

    /// A small marker in the settings tree (e.g. how far demo seeding got).
    fn marker(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .meta
            .get(format!("marker/{name}"))
            .map_err(store_error)?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    fn set_marker(&self, name: &str, value: &str) -> Result<(), StoreError> {
        self.meta.insert(format!("marker/{name}"), value.as_bytes()).map_err(store_error)?;
        self.flush()
    }

    /// Removes every organization, key, record, change event, history
    /// entry, document and audit entry (the cursor key stays):
    /// used to restart a demo load that was interrupted.
    fn clear_data(&self) -> Result<(), StoreError> {
        self.organizations.clear().map_err(store_error)?;
        self.api_keys.clear().map_err(store_error)?;
        for trees in self.collections.values() {
            trees.records.clear().map_err(store_error)?;
            trees.index.clear().map_err(store_error)?;
            trees.counts.clear().map_err(store_error)?;
            trees.changes.clear().map_err(store_error)?;
            trees.change_ids.clear().map_err(store_error)?;
            trees.history.clear().map_err(store_error)?;
        }
        self.change_logs.clear().map_err(store_error)?;
        self.documents.clear().map_err(store_error)?;
        self.audit.clear().map_err(store_error)?;
        self.audit_by_time.clear().map_err(store_error)?;
        self.flush()
    }

    /// Health probe: a cheap read that touches the storage engine.
    fn probe(&self) -> Result<(), StoreError> {
        self.organizations.first().map_err(store_error)?;
        Ok(())
    }

    /// The store's size on disk, in bytes.
    fn size_on_disk(&self) -> Result<u64, StoreError> {
        self.db.size_on_disk().map_err(store_error)
    }

    /// Makes every write so far durable.
    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(store_error)?;
        Ok(())
    }

    /// A 32-byte secret of this installation (e.g. the cursor-sealing
    /// key), created on first use so that it survives restarts.
    fn secret(&self, name: &str) -> Result<[u8; 32], StoreError> {
        let mut fresh = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut fresh);
        self.secret_if_absent(name, fresh)
    }

    /// Stores `value` unless the secret is there (the first writer wins).
    fn secret_if_absent(&self, name: &str, value: [u8; 32]) -> Result<[u8; 32], StoreError> {
        let key = format!("secret/{name}");
        if self.meta.get(&key).map_err(store_error)?.is_none() {
            // Only the first writer wins, so concurrent first uses agree.
            let _ = self.meta.compare_and_swap(&key, None as Option<&[u8]>, Some(&value[..])).map_err(store_error)?;
            self.flush()?;
        }
        let stored =
            self.meta.get(&key).map_err(store_error)?.ok_or_else(|| StoreError::Corrupt(format!("{key} vanished")))?;
        <[u8; 32]>::try_from(stored.as_ref()).map_err(|_| StoreError::Corrupt(format!("{key} is not 32 bytes")))
    }

    /// Every stored secret by name.
    fn secrets(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.meta
            .scan_prefix("secret/")
            .map(|entry| {
                let (key, value) = entry.map_err(store_error)?;
                let name = String::from_utf8_lossy(&key["secret/".len()..]).into_owned();
                Ok((name, value.to_vec()))
            })
            .collect()
    }

    fn set_secret(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        self.meta.insert(format!("secret/{name}"), value).map_err(store_error)?;
        self.flush()
    }

    /// Every marker by name but the index-table marker, which describes
    /// this directory's index layout, not the deployment.
    fn markers(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut markers = Vec::new();
        for entry in self.meta.scan_prefix("marker/") {
            let (key, value) = entry.map_err(store_error)?;
            let name = String::from_utf8_lossy(&key["marker/".len()..]).into_owned();
            if name != INDEXES_MARKER {
                markers.push((name, String::from_utf8_lossy(&value).into_owned()));
            }
        }
        Ok(markers)
    }

    fn api_keys_with_hashes(&self) -> Result<Vec<([u8; 32], ApiKeyRecord)>, StoreError> {
        let mut keys = Vec::new();
        for entry in self.api_keys.iter() {
            let (hash, bytes) = entry.map_err(store_error)?;
            let hash = <[u8; 32]>::try_from(hash.as_ref())
                .map_err(|_| StoreError::Corrupt("an API key is stored under a hash that is not 32 bytes".into()))?;
            let record: ApiKeyRecord =
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            keys.push((hash, record));
        }
        keys.sort_by_key(|(_, key)| key.id);
        Ok(keys)
    }

    fn insert_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(organization).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.organizations.insert(organization.organization_id.as_bytes(), bytes).map_err(store_error)?;
        self.flush()
    }

    fn organization(&self, id: Uuid) -> Result<Option<Organization>, StoreError> {
        match self.organizations.get(id.as_bytes()).map_err(store_error)? {
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    /// Stores an API key's record under the hash of the key.
    fn insert_api_key(&self, key_hash: &[u8; 32], record: &ApiKeyRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.api_keys.insert(key_hash, bytes).map_err(store_error)?;
        self.flush()
    }

    /// Every organization, in id (creation) order.
    fn organizations(&self) -> Result<Vec<Organization>, StoreError> {
        self.organizations
            .iter()
            .values()
            .map(|bytes| {
                serde_json::from_slice(&bytes.map_err(store_error)?).map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .collect()
    }

    /// The stored records of every key (of one organization when given), oldest first.
    fn api_keys(&self, organization: Option<Uuid>) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let mut keys = Vec::new();
        for bytes in self.api_keys.iter().values() {
            let record: ApiKeyRecord =
                serde_json::from_slice(&bytes.map_err(store_error)?).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if organization.is_none_or(|organization| record.organization_id == organization) {
                keys.push(record);
            }
        }
        keys.sort_by_key(|key| key.id);
        Ok(keys)
    }

    /// Marks the key with this id revoked (durably); `None` when there is
    /// no such key. Revoking a revoked key keeps its first revocation time.
    fn revoke_api_key(&self, id: Uuid, revoked_at: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.change_api_key(id, |record| {
            if record.revoked_at.is_some() {
                return false;
            }
            record.revoked_at = Some(revoked_at.to_owned());
            true
        })
    }

    /// Notes the key's use at `at`, unless a later one is noted already.
    fn touch_api_key(&self, id: Uuid, at: &str) -> Result<(), StoreError> {
        let later = |noted: &str| match (Timestamp::parse(noted), Timestamp::parse(at)) {
            (Some(noted), Some(at)) => at.0 > noted.0,
            _ => true,
        };
        self.change_api_key(id, |record| {
            if !record.last_used_at.as_deref().is_none_or(later) {
                return false;
            }
            record.last_used_at = Some(at.to_owned());
            true
        })?;
        Ok(())
    }

    /// Sets when the key stops authenticating (durably).
    fn set_api_key_expiry(&self, id: Uuid, expires_at: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.change_api_key(id, |record| {
            if record.expires_at.as_deref() == Some(expires_at) {
                return false;
            }
            record.expires_at = Some(expires_at.to_owned());
            true
        })
    }

    /// Changes the record of the key with this id (`change` says whether
    /// it changed anything) and returns it as stored; `None` when there is
    /// no such key. The record is replaced only if it is still the one
    /// `change` saw (else it is read again and changed again), so that a
    /// revocation and a use noted at the same time both stay; durable when
    /// it changed.
    fn change_api_key(
        &self,
        id: Uuid,
        change: impl Fn(&mut ApiKeyRecord) -> bool,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        let decode = |bytes: &[u8]| -> Result<ApiKeyRecord, StoreError> {
            serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
        };
        let cached = self.key_hashes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&id).copied();
        let still_its = match cached {
            Some(hash) => self.api_keys.get(hash).map_err(store_error)?.map(|bytes| decode(&bytes)).transpose()?,
            None => None,
        };
        let hash = match cached.filter(|_| still_its.is_some_and(|record| record.id == id)) {
            Some(hash) => hash,
            None => {
                // Every key's hash, found again (a key created since, or
                // the keys cleared).
                let mut hashes = HashMap::new();
                for entry in self.api_keys.iter() {
                    let (hash, bytes) = entry.map_err(store_error)?;
                    let hash = <[u8; 32]>::try_from(hash.as_ref()).map_err(|_| {
                        StoreError::Corrupt("an API key is stored under a hash that is not 32 bytes".into())
                    })?;
                    hashes.insert(decode(&bytes)?.id, hash);
                }
                let found = hashes.get(&id).copied();
                *self.key_hashes.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = hashes;
                match found {
                    Some(hash) => hash,
                    None => return Ok(None),
                }
            }
        };
        loop {
            let Some(bytes) = self.api_keys.get(hash).map_err(store_error)? else { return Ok(None) };
            let mut record = decode(&bytes)?;
            if !change(&mut record) {
                return Ok(Some(record));
            }
            let changed = serde_json::to_vec(&record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if self.api_keys.compare_and_swap(hash, Some(&bytes), Some(changed)).map_err(store_error)?.is_ok() {
                self.flush()?;
                return Ok(Some(record));
            }
        }
    }

    fn api_key(&self, key_hash: &[u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        match self.api_keys.get(key_hash).map_err(store_error)? {
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    fn tree(&self, collection: Collection) -> Option<&sled::Tree> {
        self.collections.get(&collection).map(|trees| &trees.records)
    }

    /// Writes records (JSON objects with a UUID `id`, `created_at` and
    /// `updated_at`) of one organization, in one or more collections, with
    /// their index entries and counts, deletes records with theirs, appends
    /// history entries and records each change in the change feed (at
    /// `changed_at`), in one transaction: all or nothing, durable on
    /// return. A record with an existing id replaces it and its index
    /// entries. The caller holds the writer lock: the change log read here
    /// is the one the transaction replaces.
    /// Takes the records by value: each collection's parsed records are
    /// dropped once encoded, so they are not held through the transaction,
    /// which keeps its own copy of every write.
    fn write_records(
        &self,
        organization: Uuid,
        batches: Vec<CollectionWrite>,
        changed_at: i64,
    ) -> Result<(), StoreError> {
        // The blocks read below stay as read until the transaction commits:
        // the caller holds the organization's write lock.
        let log = self.read_change_log(organization)?;
        let mut next_sequence = log.latest;
        let mut trees: Vec<&sled::Tree> = Vec::new();
        let mut writes: Vec<staged::KeyWrite> = Vec::new();
        for CollectionWrite { collection, records, deleted, history } in
            batches.into_iter().filter(|batch| !batch.is_empty())
        {
            let collection_trees = self
                .collections
                .get(&collection)
                .ok_or_else(|| StoreError::InvalidRecord(format!("unknown collection {collection}")))?;
            trees.extend([
                &collection_trees.records,
                &collection_trees.index,
                &collection_trees.counts,
                &collection_trees.changes,
                &collection_trees.change_ids,
                &collection_trees.history,
            ]);
            let mut rows: Vec<([u8; 32], Option<Vec<u8>>)> = Vec::with_capacity(records.len() + deleted.len());
            let mut feed = changes::FeedWrites::default();
            // Each index entry the batch touches: whether it was there
            // before and whether it is after (a record rewritten with the
            // same value keeps its entry, and its block is not rewritten);
            // and how each count moves.
            let mut entries: BTreeMap<Vec<u8>, (bool, bool)> = BTreeMap::new();
            let mut deltas: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
            // Each record's bytes and index entries, and those of the record
            // it replaces in the store, worked out on every core.
            let ready = esr_store::parallel::map_in_order(&records, |record| {
                prepare_record(collection_trees, organization, collection, record)
            })
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
            drop(records);
            let written: HashSet<Uuid> = ready.iter().map(|record| record.id).collect();
            if let Some(id) = deleted.iter().find(|id| written.contains(id)) {
                return Err(StoreError::InvalidRecord(format!(
                    "{collection} record {id} is both written and deleted by one batch"
                )));
            }
            // An id on several lines replaces, from its second line on, what
            // its line before wrote: those entries are kept until then.
            let mut lines_left: HashMap<Uuid, usize> = HashMap::new();
            for record in &ready {
                *lines_left.entry(record.id).or_default() += 1;
            }
            let mut written_earlier: HashMap<Uuid, Vec<IndexEntry>> = HashMap::new();
            // The ids given an event so far: an id's first line gets it.
            let mut evented: HashSet<Uuid> = HashSet::with_capacity(written.len());
            for record in ready {
                if evented.insert(record.id) {
                    next_sequence += 1;
                    let operation = if record.stored_entries.is_some() {
                        ChangeOperation::Updated
                    } else {
                        ChangeOperation::Created
                    };
                    let event = changes::StoredEvent { id: record.id, operation, changed_at };
                    feed.record_event(organization, next_sequence, event, record.stored_event);
                }
                let previous = written_earlier.remove(&record.id).or(record.stored_entries);
                for (entry_key, count_key) in previous.into_iter().flatten() {
                    if let Some(entry_key) = entry_key {
                        // The first change of an entry tells whether it was there.
                        entries.entry(entry_key).or_insert((true, true)).1 = false;
                    }
                    *deltas.entry(count_key).or_default() -= 1;
                }
                if let Some(left) = lines_left.get_mut(&record.id) {
                    *left -= 1;
                    if *left > 0 {
                        written_earlier.insert(record.id, record.entries.clone());
                    }
                }
                for (entry_key, count_key) in record.entries {
                    if let Some(entry_key) = entry_key {
                        entries.entry(entry_key).or_insert((false, false)).1 = true;
                    }
                    *deltas.entry(count_key).or_default() += 1;
                }
                rows.push((record_key(organization, record.id), Some(record.bytes)));
            }
            // Deletions after the records, each stored id once, in the order given.
            let deleted: Vec<Uuid> = deleted.into_iter().filter(|id| evented.insert(*id)).collect();
            let stored = esr_store::parallel::map_in_order(&deleted, |id| {
                prepare_deletion(collection_trees, organization, collection, *id)
            })
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
            let mut deleted_now = HashSet::new();
            for deletion in stored.into_iter().flatten() {
                next_sequence += 1;
                let event = changes::StoredEvent { id: deletion.id, operation: ChangeOperation::Deleted, changed_at };
                feed.record_event(organization, next_sequence, event, deletion.stored_event);
                for (entry_key, count_key) in deletion.entries {
                    if let Some(entry_key) = entry_key {
                        entries.entry(entry_key).or_insert((true, true)).1 = false;
                    }
                    *deltas.entry(count_key).or_default() -= 1;
                }
                feed.history.extend(deletion.history_keys.into_iter().map(|key| (key, None)));
                rows.push((record_key(organization, deletion.id), None));
                deleted_now.insert(deletion.id);
            }
            // History entries after what each record holds; a record this
            // write deletes takes its history with it, new entries too.
            let mut next_entry: HashMap<Uuid, u64> = HashMap::new();
            for (id, entry) in history.into_iter().filter(|(id, _)| !deleted_now.contains(id)) {
                let n = match next_entry.get(&id) {
                    Some(n) => *n,
                    None => Trees::next_history_number(&collection_trees.history, organization, id)?,
                };
                next_entry.insert(id, n + 1);
                feed.history.push((changes::history_key(organization, id, n).to_vec(), Some(entry)));
            }
            let changed: BTreeMap<Vec<u8>, bool> = entries
                .into_iter()
                .filter(|(_, (before, after))| before != after)
                .map(|(key, (_, after))| (key, after))
                .collect();
            let blocks = index_blocks::plan(&collection_trees.index, &changed)?;
            // Counts as the values they end with (the write lock keeps them
            // as read), so that a staged write applied twice is applied once.
            let mut counts = Vec::with_capacity(deltas.len());
            for (key, delta) in deltas.into_iter().filter(|(_, delta)| *delta != 0) {
                let current =
                    collection_trees.counts.get(&key).map_err(store_error)?.map_or(0, |bytes| read_count(&bytes));
                let updated = current.saturating_add_signed(delta);
                counts.push((key, (updated != 0).then(|| updated.to_be_bytes().to_vec())));
            }
            // The trees' order is that of `trees` above.
            let base = trees.len() - 6;
            let mut add = |tree: usize, key: Vec<u8>, value: Option<Vec<u8>>| {
                writes.push(staged::KeyWrite { tree: base + tree, key, value });
            };
            rows.into_iter().for_each(|(key, bytes)| add(0, key.to_vec(), bytes));
            blocks.into_iter().for_each(|(key, block)| add(1, key, block));
            counts.into_iter().for_each(|(key, count)| add(2, key, count));
            feed.events.into_iter().for_each(|(key, event)| add(3, key.to_vec(), event.map(|e| e.to_vec())));
            feed.pointers.into_iter().for_each(|(key, sequence)| add(4, key.to_vec(), sequence.map(|s| s.to_vec())));
            feed.history.into_iter().for_each(|(key, entry)| add(5, key, entry));
        }
        if writes.is_empty() {
            return Ok(());
        }
        // The log last: whoever watches it sees the write once it is whole.
        if next_sequence > log.latest {
            let logged = ChangeLog { latest: next_sequence, ..log };
            writes.push(staged::KeyWrite {
                tree: trees.len(),
                key: organization.as_bytes().to_vec(),
                value: Some(changes::encode_log(logged).to_vec()),
            });
        }
        trees.push(&self.change_logs);
        let gate = self.gate(organization);
        staged::commit(&self.db, &self.staged_writes, &gate, organization, &trees, &writes)
    }

    /// The index entries of `walk` (its limit is the caller's): the one
    /// walk behind both `index-scan` and `index-positions`.
    fn index_walk(
        &self,
        organization: Uuid,
        collection: Collection,
        walk: &IndexWalk<'_>,
    ) -> Result<(&CollectionTrees, index_blocks::Entries), StoreError> {
        let trees = self.index_trees(collection, walk.index)?;
        let prefix = value_prefix(organization, walk.index, walk.value);
        let after = walk.after.map(|at| entry_of(at.position, at.id));
        Ok((trees, index_blocks::Entries::new(&trees.index, &prefix, after.as_ref(), walk.reverse)?))
    }

    /// How many records hold `value` in the index.
    fn index_count(
        &self,
        organization: Uuid,
        collection: Collection,
        index: &str,
        value: &str,
    ) -> Result<u64, StoreError> {
        let trees = self.index_trees(collection, index)?;
        Ok(trees
            .counts
            .get(value_prefix(organization, index, value))
            .map_err(store_error)?
            .map_or(0, |bytes| read_count(&bytes)))
    }

    /// Every value the organization's records hold in the index, with its
    /// count: the count keys under `organization ‖ index name ‖ 0`.
    fn index_values(
        &self,
        organization: Uuid,
        collection: Collection,
        index: &str,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let trees = self.index_trees(collection, index)?;
        let mut prefix = Vec::with_capacity(16 + index.len() + 1);
        prefix.extend_from_slice(organization.as_bytes());
        prefix.extend_from_slice(index.as_bytes());
        prefix.push(0);
        let mut values = Vec::new();
        for row in trees.counts.scan_prefix(&prefix) {
            let (key, count) = row.map_err(store_error)?;
            let value = key
                .get(prefix.len() + 4..)
                .and_then(|value| std::str::from_utf8(value).ok())
                .ok_or_else(|| StoreError::Corrupt(format!("a count key of {collection}/{index} is malformed")))?;
            let count = read_count(&count);
            if count > 0 {
                values.push((value.to_owned(), count));
            }
        }
        // Keys hold each value after its length: back to the values' order.
        values.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(values)
    }

    /// How many of the organization's records hold one of each
    /// condition's values in its index and, when given, were updated
    /// strictly after `updated_after` (Unix nanoseconds). Reads index keys
    /// only: the smallest condition gives the candidates, each other one
    /// (and the `updated_at` range) keeps those it also holds.
    fn count_matching(
        &self,
        organization: Uuid,
        collection: Collection,
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        if conditions.is_empty() && !self.collections.contains_key(&collection) {
            return Ok(0);
        }
        // Each value once: a repeated value must not count its records twice.
        let conditions: Vec<(&str, Vec<String>)> = conditions
            .iter()
            .map(|condition| {
                (
                    condition.index.as_str(),
                    condition.values.iter().collect::<BTreeSet<_>>().into_iter().cloned().collect(),
                )
            })
            .collect();
        let mut sized = Vec::with_capacity(conditions.len());
        for (index, values) in &conditions {
            let trees = self.index_trees(collection, index)?;
            let everything =
                indexes::find(collection, index).is_some_and(|found| found.key == indexes::IndexKey::Everything);
            if everything && values.iter().any(String::is_empty) {
                continue;
            }
            let mut held = 0;
            for value in values {
                held += self.index_count(organization, collection, index, value)?;
            }
            sized.push((held, trees, *index, values));
        }
        sized.sort_by_key(|(held, ..)| *held);
        // One condition on an index where a record holds at most one value
        // (or on one value): its counts are exact.
        if let [(held, _, index, values)] = sized.as_slice()
            && updated_after.is_none()
            && (values.len() == 1 || single_valued(collection, index))
        {
            return Ok(*held);
        }
        // Two conditions on a pair the host counts: the sum of the counts of
        // their value combinations.
        if let [(_, _, a, a_values), (_, _, b, b_values)] = sized.as_slice()
            && updated_after.is_none()
        {
            let pairs = indexes::counted_pairs(collection);
            let ordered = if pairs.contains(&(a, b)) {
                Some(((*a, *a_values), (*b, *b_values)))
            } else if pairs.contains(&(b, a)) {
                Some(((*b, *b_values), (*a, *a_values)))
            } else {
                None
            };
            if let Some(((first, first_values), (second, second_values))) = ordered {
                let name = indexes::pair_name(first, second);
                let trees = self.index_trees(collection, first)?;
                let mut total = 0;
                for x in first_values.iter() {
                    for y in second_values.iter() {
                        let key = value_prefix(organization, &name, &indexes::pair_value(x, y));
                        total += trees.counts.get(key).map_err(store_error)?.map_or(0, |bytes| read_count(&bytes));
                    }
                }
                return Ok(total);
            }
        }
        // How many candidates have their `updated_at` entry strictly after
        // `after` (`later`), or at or before it.
        let count_updated_side =
            |trees: &CollectionTrees, candidates: &IdSet, after: i64, later: bool| -> Result<u64, StoreError> {
                let split = entry_of(after, Uuid::max());
                let prefix = value_prefix(organization, UPDATED_AT, "");
                let start = if later { Some(&split) } else { None };
                let mut count = 0;
                for entry in index_blocks::Entries::new(&trees.index, &prefix, start, false)? {
                    let entry = entry?;
                    if !later && entry > split {
                        break;
                    }
                    if candidates.contains(&entry_id(&entry)?) {
                        count += 1;
                    }
                }
                Ok(count)
            };
        let Some(((_, smallest, index, values), others)) = sized.split_first() else {
            return match updated_after {
                None => self.count(organization, collection),
                Some(after) => self.count_updated_after(organization, collection, after),
            };
        };
        let mut candidates: IdSet = IdSet::default();
        for value in values.iter() {
            for entry in
                index_blocks::Entries::new(&smallest.index, &value_prefix(organization, index, value), None, false)?
            {
                candidates.insert(entry_id(&entry?)?);
            }
        }
        for (_, trees, index, values) in others {
            let mut kept = IdSet::with_capacity_and_hasher(candidates.len(), Default::default());
            for value in values.iter() {
                for entry in
                    index_blocks::Entries::new(&trees.index, &value_prefix(organization, index, value), None, false)?
                {
                    let id = entry_id(&entry?)?;
                    if candidates.contains(&id) {
                        kept.insert(id);
                    }
                }
            }
            candidates = kept;
            if candidates.is_empty() {
                return Ok(0);
            }
        }
        let Some(after) = updated_after else { return Ok(candidates.len() as u64) };
        // Read the smaller side of `after` in the `updated_at` index (its
        // sides' sizes come from the hourly counts).
        let updated_later = self.count_updated_after(organization, collection, after)?;
        let everything = self.count(organization, collection)?;
        let later_side = updated_later <= everything - updated_later.min(everything);
        let in_range = count_updated_side(smallest, &candidates, after, later_side)?;
        Ok(if later_side { in_range } else { candidates.len() as u64 - in_range })
    }

    /// How many of the organization's records lie in every one of
    /// `ranges` (at least one), meet every condition and, when given, were
    /// updated strictly after `updated_after`, with their ids when they
    /// were gathered. One range alone is counted from whichever side of it
    /// is smaller; otherwise the conditions' candidates, or without
    /// conditions the smallest range's records, are kept by each other
    /// range's entries in turn.
    fn count_in_ranges(
        &self,
        organization: Uuid,
        collection: Collection,
        ranges: &[IndexRange],
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<(u64, Option<IdSet>), StoreError> {
        for range in ranges {
            self.index_trees(collection, &range.index)?;
            sort_index(collection, &range.index)?;
        }
        if let [range] = ranges
            && conditions.is_empty()
            && updated_after.is_none()
        {
            return Ok((self.count_in_one_range(organization, collection, range)?, None));
        }
        let (kept, rest) = match self.intersect_conditions(organization, collection, conditions)? {
            Some(Some(candidates)) => (candidates, ranges.to_vec()),
            Some(None) => {
                let mut rest = ranges.to_vec();
                let (smallest, ids) = self
                    .smallest_range(organization, collection, &rest, usize::MAX)?
                    .ok_or_else(|| StoreError::Backend("a range without end".to_owned()))?;
                rest.remove(smallest);
                (ids, rest)
            }
            None => return Ok((0, Some(IdSet::default()))),
        };
        let mut kept = self.keep_in_ranges(organization, collection, &rest, kept)?;
        if let Some(after) = updated_after {
            kept = self.candidates_updated_after(organization, collection, &kept, after)?;
        }
        Ok((kept.len() as u64, Some(kept)))
    }

    /// Which of `ranges` holds the fewest entries, with the ids of its
    /// records: their entries are walked side by side until the first
    /// range ends. `None` without ranges, or once every range has passed
    /// `cap` entries.
    fn smallest_range(
        &self,
        organization: Uuid,
        collection: Collection,
        ranges: &[IndexRange],
        cap: usize,
    ) -> Result<Option<(usize, IdSet)>, StoreError> {
        if ranges.is_empty() {
            return Ok(None);
        }
        let mut walks = Vec::with_capacity(ranges.len());
        for range in ranges {
            walks.push((self.range_entries(organization, collection, range)?, Vec::new()));
        }
        loop {
            for (at, (walk, ids)) in walks.iter_mut().enumerate() {
                match walk.next() {
                    None => return Ok(Some((at, ids.drain(..).collect()))),
                    Some(_) if ids.len() == cap => return Ok(None),
                    Some(entry) => ids.push(entry_id(&entry?)?),
                }
            }
        }
    }

    /// Those of `ids` in every one of `ranges`.
    fn keep_in_ranges(
        &self,
        organization: Uuid,
        collection: Collection,
        ranges: &[IndexRange],
        mut ids: IdSet,
    ) -> Result<IdSet, StoreError> {
        for range in ranges {
            ids = self.named_in_range(organization, collection, range, &ids)?;
        }
        Ok(ids)
    }

    /// How many records lie in `range`: its entries or those outside it,
    /// walked side by side until the smaller side ends.
    fn count_in_one_range(
        &self,
        organization: Uuid,
        collection: Collection,
        range: &IndexRange,
    ) -> Result<u64, StoreError> {
        let index = range.index.as_str();
        let trees = self.index_trees(collection, index)?;
        let prefix = value_prefix(organization, index, indexes::SORTED);
        let after = range.after.map(|at| entry_of(at.position, at.id));
        let before = range.before.map(|at| entry_of(at.position, at.id));
        let mut inside = self.range_entries(organization, collection, range)?;
        let held = self.index_count(organization, collection, index, indexes::SORTED)?;
        let below = index_blocks::Entries::new(&trees.index, &prefix, None, false)?
            .take_while(move |entry| entry.as_ref().map_or(true, |entry| after.is_some_and(|after| *entry <= after)));
        let above = index_blocks::Entries::new(&trees.index, &prefix, None, true)?.take_while(move |entry| {
            entry.as_ref().map_or(true, |entry| before.is_some_and(|before| *entry >= before))
        });
        let mut outside = below.chain(above);
        let (mut counted_inside, mut counted_outside) = (0u64, 0u64);
        loop {
            match inside.next() {
                None => return Ok(counted_inside),
                Some(entry) => {
                    entry?;
                    counted_inside += 1;
                }
            }
            match outside.next() {
                None => return Ok(held.saturating_sub(counted_outside)),
                Some(entry) => {
                    entry?;
                    counted_outside += 1;
                }
            }
        }
    }

    /// The ids of the records meeting every condition, smallest condition
    /// first; `Some(None)` when there is no condition (every record), `None`
    /// when nothing can match.
    #[allow(clippy::type_complexity)]
    fn intersect_conditions(
        &self,
        organization: Uuid,
        collection: Collection,
        conditions: &[IndexCondition],
    ) -> Result<Option<Option<IdSet>>, StoreError> {
        let mut sized = Vec::with_capacity(conditions.len());
        for IndexCondition { index, values } in conditions {
            let trees = self.index_trees(collection, index)?;
            let values: BTreeSet<&String> = values.iter().collect();
            let mut held = 0;
            for value in &values {
                held += self.index_count(organization, collection, index, value)?;
            }
            sized.push((held, trees, index.as_str(), values));
        }
        sized.sort_by_key(|(held, ..)| *held);
        let mut candidates: Option<IdSet> = None;
        for (_, trees, index, values) in sized {
            let mut kept = IdSet::default();
            for value in values {
                for entry in
                    index_blocks::Entries::new(&trees.index, &value_prefix(organization, index, value), None, false)?
                {
                    let id = entry_id(&entry?)?;
                    if candidates.as_ref().is_none_or(|candidates| candidates.contains(&id)) {
                        kept.insert(id);
                    }
                }
            }
            if kept.is_empty() {
                return Ok(None);
            }
            candidates = Some(kept);
        }
        Ok(Some(candidates))
    }

    /// Those of `candidates` updated strictly after `after`: the smaller
    /// side of `after` in the `updated_at` index is read (the sides' sizes
    /// come from the hourly counts).
    fn candidates_updated_after(
        &self,
        organization: Uuid,
        collection: Collection,
        candidates: &IdSet,
        after: i64,
    ) -> Result<IdSet, StoreError> {
        let trees = self.index_trees(collection, UPDATED_AT)?;
        let updated_later = self.count_updated_after(organization, collection, after)?;
        let everything = self.count(organization, collection)?;
        let later = updated_later <= everything - updated_later.min(everything);
        let split = entry_of(after, Uuid::max());
        let prefix = value_prefix(organization, UPDATED_AT, "");
        let mut side = IdSet::default();
        for entry in index_blocks::Entries::new(&trees.index, &prefix, later.then_some(&split), false)? {
            let entry = entry?;
            if !later && entry > split {
                break;
            }
            let id = entry_id(&entry)?;
            if candidates.contains(&id) {
                side.insert(id);
            }
        }
        Ok(if later { side } else { candidates.difference(&side).copied().collect() })
    }

    /// [`StoreReader::count_groups_of_candidates`]: the smallest condition
    /// on an index ordered by creation gives the candidates' entries; the
    /// other such conditions, then each group value, keep those they hold,
    /// sought block by block at the candidates' places
    /// ([`index_blocks::held`]); any other condition, the ranges and
    /// `updated_after` keep those their entries name. Without such a
    /// condition, the ranges give the candidates
    /// ([`Trees::count_groups_in_ranges`]), or `matched`, the records
    /// matching `matching` when a count of the same call gathered them.
    /// With the groups, how many records match (the candidates kept).
    fn count_groups_of_candidates(
        &self,
        organization: Uuid,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        max_candidates: u64,
        matched: Option<IdSet>,
    ) -> Result<Option<(Vec<GroupCount>, u64)>, StoreError> {
        let Matching { ranges, conditions, updated_after } = matching;
        let updated_after = *updated_after;
        let mut sized = Vec::new();
        for IndexCondition { index, values } in restricting_conditions(collection, conditions) {
            let trees = self.index_trees(collection, &index)?;
            let mut held = 0;
            for value in &values {
                held += self.index_count(organization, collection, &index, value)?;
            }
            sized.push((held, trees, index, values));
        }
        for range in ranges {
            self.index_trees(collection, &range.index)?;
            sort_index(collection, &range.index)?;
        }
        sized.sort_by_key(|(held, ..)| *held);
        let Some(source) = sized.iter().position(|(_, _, index, _)| ordered_by_creation(collection, index)) else {
            return match matched {
                Some(ids) => {
                    let total = ids.len() as u64;
                    self.group_ids(organization, collection, group_by, ids).map(|groups| Some((groups, total)))
                }
                None => self.count_groups_in_ranges(organization, collection, group_by, matching, max_candidates),
            };
        };
        if sized[source].0 > max_candidates {
            return Ok(None);
        }
        let (_, trees, index, values) = sized.remove(source);
        let mut candidates: Vec<index_blocks::Entry> = Vec::new();
        for value in &values {
            for entry in
                index_blocks::Entries::new(&trees.index, &value_prefix(organization, &index, value), None, false)?
            {
                candidates.push(entry?);
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        for (_, trees, index, values) in &sized {
            if ordered_by_creation(collection, index) {
                let mut kept = vec![false; candidates.len()];
                for value in values {
                    let held =
                        index_blocks::held(&trees.index, &value_prefix(organization, index, value), &candidates)?;
                    kept.iter_mut().zip(held).for_each(|(kept, held)| *kept |= held);
                }
                let mut kept = kept.into_iter();
                candidates.retain(|_| kept.next().unwrap_or(false));
            } else {
                let named = self.named_by_condition(organization, collection, index, values, &ids_of(&candidates)?)?;
                candidates = keep_named(candidates, &named)?;
            }
        }
        for range in ranges {
            let named = self.named_in_range(organization, collection, range, &ids_of(&candidates)?)?;
            candidates = keep_named(candidates, &named)?;
        }
        if let Some(after) = updated_after {
            let named = self.candidates_updated_after(organization, collection, &ids_of(&candidates)?, after)?;
            candidates = keep_named(candidates, &named)?;
        }
        let total = candidates.len() as u64;
        self.grouped_by_seeking(organization, collection, group_by, &candidates).map(|groups| Some((groups, total)))
    }

    /// The groups of `candidates` (entries of an index ordered by
    /// creation, in order): each one's value in each group index is sought
    /// block by block at its place ([`index_blocks::held`]), the commonest
    /// values first so that most candidates are placed early and not
    /// sought again.
    fn grouped_by_seeking(
        &self,
        organization: Uuid,
        collection: Collection,
        group_by: &[String],
        candidates: &[index_blocks::Entry],
    ) -> Result<Vec<GroupCount>, StoreError> {
        let mut placed: Vec<Vec<Option<usize>>> = Vec::with_capacity(group_by.len());
        let mut names: Vec<Vec<String>> = Vec::with_capacity(group_by.len());
        for group in group_by {
            let trees = self.index_trees(collection, group)?;
            let values = self.index_values(organization, collection, group)?;
            let mut value_of = vec![None; candidates.len()];
            let mut unplaced: Vec<usize> = (0..candidates.len()).collect();
            let mut commonest: Vec<usize> = (0..values.len()).collect();
            commonest.sort_by_key(|n| std::cmp::Reverse(values[*n].1));
            for n in commonest {
                if unplaced.is_empty() {
                    break;
                }
                let probes: Vec<index_blocks::Entry> = unplaced.iter().map(|at| candidates[*at]).collect();
                let held = index_blocks::held(&trees.index, &value_prefix(organization, group, &values[n].0), &probes)?;
                let mut still = Vec::with_capacity(unplaced.len());
                for (at, held) in unplaced.into_iter().zip(held) {
                    if held {
                        value_of[at] = Some(n);
                    } else {
                        still.push(at);
                    }
                }
                unplaced = still;
            }
            placed.push(value_of);
            names.push(values.into_iter().map(|(value, _)| value).collect());
        }
        Ok(grouped(candidates.len(), &placed, &names))
    }

    /// The entries `ids` have in every index ordered by creation (their
    /// `created_at`, then the id), in order, read from their records: for
    /// few records, cheaper than walking a group index's every entry.
    fn entries_by_creation(
        &self,
        organization: Uuid,
        collection: Collection,
        ids: &IdSet,
    ) -> Result<Vec<index_blocks::Entry>, StoreError> {
        let created_key = memchr::memmem::Finder::new(CREATED_AT_KEY);
        // In key order, neighbours share the tree's nodes.
        let mut ids: Vec<&[u8; 16]> = ids.iter().collect();
        ids.sort_unstable();
        let mut entries = Vec::with_capacity(ids.len());
        for id in ids {
            let id = Uuid::from_bytes(*id);
            // A record deleted since its entries were read holds no group.
            let Some(bytes) = self.get(organization, collection, id)? else { continue };
            let created = created_at_found(&created_key, &bytes)
                .or_else(|| created_at_parsed(&bytes))
                .ok_or_else(|| StoreError::Corrupt(format!("{collection} record {id} has no RFC 3339 created_at")))?;
            entries.push(entry_of(created, id));
        }
        entries.sort_unstable();
        Ok(entries)
    }

    /// [`Trees::count_groups_of_candidates`] where no condition is on an
    /// index ordered by creation: the first range holding at most
    /// `max_candidates` records gives the candidates' ids, else the first
    /// range if it holds at most [`MAX_RANGE_CANDIDATES`] (`None` when it
    /// does not, or there is no range); the other ranges, the conditions
    /// and `updated_after` keep those their entries name. Few candidates
    /// are then sought at their places from their records' `created_at`;
    /// many, by walking each group index's values, commonest first, until
    /// every candidate is placed.
    fn count_groups_in_ranges(
        &self,
        organization: Uuid,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        max_candidates: u64,
    ) -> Result<Option<(Vec<GroupCount>, u64)>, StoreError> {
        let Matching { ranges, conditions, updated_after } = matching;
        let cap = |max: u64| usize::try_from(max).unwrap_or(usize::MAX);
        // The smallest range gives the candidates, as a count of the same
        // ranges takes them (`count_in_ranges`).
        let mut source = self.smallest_range(organization, collection, ranges, cap(max_candidates))?;
        if source.is_none() && max_candidates < MAX_RANGE_CANDIDATES {
            source = self.smallest_range(organization, collection, ranges, cap(MAX_RANGE_CANDIDATES))?;
        }
        let Some((source, mut ids)) = source else { return Ok(None) };
        for (at, range) in ranges.iter().enumerate() {
            if at != source {
                ids = self.named_in_range(organization, collection, range, &ids)?;
            }
        }
        for IndexCondition { index, values } in restricting_conditions(collection, conditions) {
            ids = self.named_by_condition(organization, collection, &index, &values, &ids)?;
        }
        if let Some(after) = *updated_after {
            ids = self.candidates_updated_after(organization, collection, &ids, after)?;
        }
        let total = ids.len() as u64;
        self.group_ids(organization, collection, group_by, ids).map(|groups| Some((groups, total)))
    }

    /// The groups of the records `ids`.
    fn group_ids(
        &self,
        organization: Uuid,
        collection: Collection,
        group_by: &[String],
        ids: IdSet,
    ) -> Result<Vec<GroupCount>, StoreError> {
        // Reading a candidate's `created_at` costs about what walking 64
        // entries does: few candidates are sought at their places instead
        // of walking the group indexes whole.
        if (ids.len() as u64).saturating_mul(64) < self.count(organization, collection)? {
            let candidates = self.entries_by_creation(organization, collection, &ids)?;
            return self.grouped_by_seeking(organization, collection, group_by, &candidates);
        }
        let candidates: Vec<[u8; 16]> = ids.into_iter().collect();
        let mut placed: Vec<Vec<Option<usize>>> = Vec::with_capacity(group_by.len());
        let mut names: Vec<Vec<String>> = Vec::with_capacity(group_by.len());
        for group in group_by {
            let trees = self.index_trees(collection, group)?;
            let values = self.index_values(organization, collection, group)?;
            let mut unplaced: foldhash::HashMap<[u8; 16], usize> =
                candidates.iter().enumerate().map(|(at, id)| (*id, at)).collect();
            let mut value_of = vec![None; candidates.len()];
            let mut commonest: Vec<usize> = (0..values.len()).collect();
            commonest.sort_by_key(|n| std::cmp::Reverse(values[*n].1));
            for n in commonest {
                if unplaced.is_empty() {
                    break;
                }
                let prefix = value_prefix(organization, group, &values[n].0);
                for entry in index_blocks::Entries::new(&trees.index, &prefix, None, false)? {
                    if let Some(at) = unplaced.remove(&entry_id(&entry?)?) {
                        value_of[at] = Some(n);
                        if unplaced.is_empty() {
                            break;
                        }
                    }
                }
            }
            placed.push(value_of);
            names.push(values.into_iter().map(|(value, _)| value).collect());
        }
        Ok(grouped(candidates.len(), &placed, &names))
    }

    /// Those of `ids` in `range`.
    fn named_in_range(
        &self,
        organization: Uuid,
        collection: Collection,
        range: &IndexRange,
        ids: &IdSet,
    ) -> Result<IdSet, StoreError> {
        let mut named = IdSet::default();
        if ids.is_empty() {
            return Ok(named);
        }
        for entry in self.range_entries(organization, collection, range)? {
            let id = entry_id(&entry?)?;
            if ids.contains(&id) {
                named.insert(id);
                if named.len() == ids.len() {
                    break;
                }
            }
        }
        Ok(named)
    }

    /// Those of `ids` holding one of `values` in `index`.
    fn named_by_condition(
        &self,
        organization: Uuid,
        collection: Collection,
        index: &str,
        values: &[String],
        ids: &IdSet,
    ) -> Result<IdSet, StoreError> {
        let trees = self.index_trees(collection, index)?;
        let mut named = IdSet::default();
        for value in values {
            for entry in
                index_blocks::Entries::new(&trees.index, &value_prefix(organization, index, value), None, false)?
            {
                let id = entry_id(&entry?)?;
                if ids.contains(&id) {
                    named.insert(id);
                }
            }
        }
        Ok(named)
    }

    /// The entries of `range` in its sort index, in order.
    fn range_entries(
        &self,
        organization: Uuid,
        collection: Collection,
        range: &IndexRange,
    ) -> Result<impl Iterator<Item = Result<index_blocks::Entry, StoreError>>, StoreError> {
        let trees = self.index_trees(collection, &range.index)?;
        sort_index(collection, &range.index)?;
        let prefix = value_prefix(organization, &range.index, indexes::SORTED);
        let after = range.after.map(|at| entry_of(at.position, at.id));
        let before = range.before.map(|at| index_blocks::ordered(&entry_of(at.position, at.id)));
        let entries = index_blocks::Entries::new(&trees.index, &prefix, after.as_ref(), false)?;
        Ok(entries.take_while(move |entry| {
            entry.as_ref().map_or(true, |entry| before.is_none_or(|before| index_blocks::ordered(entry) < before))
        }))
    }

    /// How many records were updated strictly after `after`: the updates of
    /// the rest of its hour from the `updated_at` index, then the hourly
    /// counts of every later hour.
    fn count_updated_after(&self, organization: Uuid, collection: Collection, after: i64) -> Result<u64, StoreError> {
        let trees = self.index_trees(collection, UPDATED_AT)?;
        let next_hour = indexes::next_hour_start(after);
        let mut count = 0;
        let prefix = value_prefix(organization, UPDATED_AT, "");
        let (start, end) = (entry_of(after, Uuid::max()), entry_of(next_hour, Uuid::nil()));
        for entry in index_blocks::Entries::new(&trees.index, &prefix, Some(&start), false)? {
            if entry? >= end {
                break;
            }
            count += 1;
        }
        let later = value_prefix(organization, indexes::UPDATED_HOUR, &indexes::hour_value(next_hour));
        let last = value_prefix(organization, indexes::UPDATED_HOUR, &"f".repeat(16));
        for entry in trees.counts.range(later..=last) {
            count += read_count(&entry.map_err(store_error)?.1);
        }
        Ok(count)
    }

    fn index_trees(&self, collection: Collection, index: &str) -> Result<&CollectionTrees, StoreError> {
        let trees = self
            .collections
            .get(&collection)
            .ok_or_else(|| StoreError::UnknownIndex(format!("no collection {collection}")))?;
        esr_contract::indexes::find(collection, index)
            .ok_or_else(|| StoreError::UnknownIndex(format!("{collection} has no index {index}")))?;
        Ok(trees)
    }

    /// The record with this id in the organization's collection.
    fn get(&self, organization: Uuid, collection: Collection, id: Uuid) -> Result<Option<sled::IVec>, StoreError> {
        match self.tree(collection) {
            Some(tree) => Ok(tree.get(record_key(organization, id)).map_err(store_error)?),
            None => Ok(None),
        }
    }

    /// Up to `limit` (at most [`MAX_SCAN`]) records in id order, after
    /// `after` when given; `reverse` walks from the newest.
    fn scan(
        &self,
        organization: Uuid,
        collection: Collection,
        walk: &RecordWalk,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let Some(tree) = self.tree(collection) else { return Ok(Vec::new()) };
        let RecordWalk { after, limit, reverse } = *walk;
        let limit = limit.min(MAX_SCAN);
        let first = record_key(organization, Uuid::nil());
        let last = record_key(organization, Uuid::max());
        let range = match (after, reverse) {
            (None, _) => tree.range(first..=last),
            (Some(after), false) => tree
                .range((std::ops::Bound::Excluded(record_key(organization, after)), std::ops::Bound::Included(last))),
            (Some(after), true) => tree.range(first..record_key(organization, after)),
        };
        let entries: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> =
            if reverse { Box::new(range.rev()) } else { Box::new(range) };
        let mut records = Vec::with_capacity(limit.min(64));
        for entry in entries.take(limit) {
            let (key, value) = entry.map_err(store_error)?;
            records.push((record_id(&key)?, value.to_vec()));
        }
        Ok(records)
    }

    /// How many records the organization holds in the collection.
    fn count(&self, organization: Uuid, collection: Collection) -> Result<u64, StoreError> {
        if !self.collections.contains_key(&collection) {
            return Ok(0);
        }
        self.index_count(organization, collection, CREATED_AT, "")
    }
}

impl StoreReader for SledReader {
    fn get(&mut self, collection: Collection, id: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
        let _call = self.call()?;
        Ok(self.trees.get(self.organization, collection, id)?.map(|bytes| bytes.to_vec()))
    }

    fn scan(&mut self, collection: Collection, walk: &RecordWalk) -> Result<Vec<StoredRecord>, StoreError> {
        let _call = self.call()?;
        self.trees.scan(self.organization, collection, walk)
    }

    fn count(&mut self, collection: Collection) -> Result<u64, StoreError> {
        let _call = self.call()?;
        self.trees.count(self.organization, collection)
    }

    fn index_scan_each(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
        each: &mut esr_store::EachIndexed<'_>,
    ) -> Result<(), StoreError> {
        let _call = self.call()?;
        let (trees, entries) = self.trees.index_walk(self.organization, collection, walk)?;
        for entry in entries.take(walk.limit.min(MAX_SCAN)) {
            let entry = entry?;
            let id = Uuid::from_bytes(entry_id(&entry)?);
            let record =
                trees.records.get(record_key(self.organization, id)).map_err(store_error)?.ok_or_else(|| {
                    StoreError::Corrupt(format!("index {} of {collection} points at a missing record", walk.index))
                })?;
            each(IndexPosition::new(entry_position(&entry), id), &record)?;
        }
        Ok(())
    }

    fn index_positions(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
    ) -> Result<Vec<IndexPosition>, StoreError> {
        let _call = self.call()?;
        let (_, entries) = self.trees.index_walk(self.organization, collection, walk)?;
        let limit = walk.limit.min(MAX_SCAN);
        let mut positions = Vec::with_capacity(limit.min(128));
        for entry in entries.take(limit) {
            let entry = entry?;
            positions.push(IndexPosition::new(entry_position(&entry), Uuid::from_bytes(entry_id(&entry)?)));
        }
        Ok(positions)
    }

    fn index_count(&mut self, collection: Collection, index: &str, value: &str) -> Result<u64, StoreError> {
        let _call = self.call()?;
        self.trees.index_count(self.organization, collection, index, value)
    }

    fn index_values(&mut self, collection: Collection, index: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let _call = self.call()?;
        self.trees.index_values(self.organization, collection, index)
    }

    fn count_matching(&mut self, collection: Collection, matching: &Matching) -> Result<u64, StoreError> {
        if let Some(total) = kept_for(&mut self.counted, collection, matching) {
            return Ok(total);
        }
        let call = self.call()?;
        let Matching { ranges, conditions, updated_after } = matching;
        if ranges.is_empty() {
            return self.trees.count_matching(self.organization, collection, conditions, *updated_after);
        }
        let (count, ids) =
            self.trees.count_in_ranges(self.organization, collection, ranges, conditions, *updated_after)?;
        drop(call);
        self.matched = ids.map(|ids| (collection, matching.clone(), ids));
        Ok(count)
    }

    fn change_log(&mut self) -> Result<ChangeLog, StoreError> {
        let _call = self.call()?;
        self.trees.read_change_log(self.organization)
    }

    fn changes(
        &mut self,
        after: u64,
        collections: &[Collection],
        limit: usize,
    ) -> Result<Vec<ChangeEvent>, StoreError> {
        let _call = self.call()?;
        self.trees.changes(self.organization, after, collections, limit)
    }

    fn history(&mut self, collection: Collection, id: Uuid) -> Result<Vec<Vec<u8>>, StoreError> {
        let _call = self.call()?;
        self.trees.history(self.organization, collection, id)
    }

    fn count_groups_of_candidates(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        max_candidates: u64,
    ) -> Result<Option<Vec<GroupCount>>, StoreError> {
        let matched = kept_for(&mut self.matched, collection, matching);
        let call = self.call()?;
        let counted = self.trees.count_groups_of_candidates(
            self.organization,
            collection,
            group_by,
            matching,
            max_candidates,
            matched,
        )?;
        drop(call);
        Ok(counted.map(|(groups, total)| {
            self.counted = Some((collection, matching.clone(), total));
            groups
        }))
    }
}

impl Store for SledStore {
    fn reader(&self, organization: Uuid) -> Result<Box<dyn StoreReader>, StoreError> {
        self.reader_from(organization, ReadFrom::default())
    }

    /// One process holds the data: every read is of the latest state; the
    /// deadline bounds the session's walks.
    fn reader_from(&self, organization: Uuid, from: ReadFrom) -> Result<Box<dyn StoreReader>, StoreError> {
        let gate = self.gate(organization);
        Ok(Box::new(SledReader {
            trees: self.0.clone(),
            organization,
            gate,
            deadline: from.deadline,
            matched: None,
            counted: None,
        }))
    }

    fn write_batch(&self, organization: Uuid, build: &mut BuildBatch<'_>) -> Result<(), StoreError> {
        let writer = self.writer(organization);
        let mut last_write = writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| i64::try_from(since.as_micros()).unwrap_or(i64::MAX / 1000) * 1000);
        let now = wall.max(last_write.saturating_add(1000));
        // A large write of the organization that failed half-way is
        // finished before another is planned on top of it.
        staged::finish(&self.db, &self.staged_writes, Some(organization))?;
        let mut reader = SledReader {
            trees: self.0.clone(),
            organization,
            gate: self.gate(organization),
            deadline: None,
            matched: None,
            counted: None,
        };
        let writes = build(&mut reader, WriteTime(now))?;
        let latest = esr_store::latest_update(&writes).unwrap_or(now);
        self.write_records(organization, writes, now)?;
        *last_write = now.max(latest);
        Ok(())
    }

    fn prune_changes(&self, organization: Uuid, before: i64) -> Result<u64, StoreError> {
        let writer = self.writer(organization);
        let _writer = writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.0.prune_changes(organization, before)
    }

    fn change_log(&self, organization: Uuid) -> Result<ChangeLog, StoreError> {
        self.read_change_log(organization)
    }

    fn continue_changes_from(&self, organization: Uuid, latest: u64) -> Result<(), StoreError> {
        let writer = self.writer(organization);
        let _writer = writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.0.continue_changes_from(organization, latest)
    }

    /// Writes records without their index entries, for an offline bulk
    /// load: much faster than [`Trees::write_records`]. The indexes are
    /// marked stale first, so a load that stops half-way is re-indexed on
    /// the next open; [`Trees::finish_bulk_load`] rebuilds them. A bulk
    /// load is not a change: it gives the records no change events.
    fn bulk_insert_records(
        &self,
        organization: Uuid,
        collection: Collection,
        records: &[Value],
    ) -> Result<(), StoreError> {
        let trees = &self.0;
        if trees.marker(INDEXES_MARKER)?.as_deref() != Some("stale") {
            trees.set_marker(INDEXES_MARKER, "stale")?;
        }
        let tree = trees
            .tree(collection)
            .ok_or_else(|| StoreError::InvalidRecord(format!("unknown collection {collection}")))?;
        let mut batch = sled::Batch::default();
        for record in records {
            let id = record_uuid(collection, record)?;
            // Checks created_at now rather than failing the rebuild later.
            index_entries(organization, collection, id, record)?;
            let bytes = serde_json::to_vec(record).map_err(|e| StoreError::InvalidRecord(e.to_string()))?;
            batch.insert(&record_key(organization, id)[..], bytes);
        }
        tree.apply_batch(batch).map_err(store_error)?;
        Ok(())
    }

    fn finish_bulk_load(&self) -> Result<(), StoreError> {
        self.rebuild_indexes()
    }

    fn verify_indexes(&self) -> Result<Vec<String>, StoreError> {
        self.0.verify_indexes()
    }

    fn insert_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        self.0.insert_organization(organization)
    }

    fn organization(&self, id: Uuid) -> Result<Option<Organization>, StoreError> {
        self.0.organization(id)
    }

    fn organizations(&self) -> Result<Vec<Organization>, StoreError> {
        self.0.organizations()
    }

    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.0.is_empty())
    }

    fn insert_api_key(&self, key_hash: &[u8; 32], record: &ApiKeyRecord) -> Result<(), StoreError> {
        self.0.insert_api_key(key_hash, record)
    }

    fn api_key(&self, key_hash: &[u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.0.api_key(key_hash)
    }

    fn api_keys(&self, organization: Option<Uuid>) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.0.api_keys(organization)
    }

    fn revoke_api_key(&self, id: Uuid, revoked_at: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.0.revoke_api_key(id, revoked_at)
    }

    fn touch_api_key(&self, id: Uuid, at: &str) -> Result<(), StoreError> {
        self.0.touch_api_key(id, at)
    }

    fn set_api_key_expiry(&self, id: Uuid, expires_at: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.0.set_api_key_expiry(id, expires_at)
    }

    fn secret(&self, name: &str) -> Result<[u8; 32], StoreError> {
        self.0.secret(name)
    }

    fn secret_if_absent(&self, name: &str, value: [u8; 32]) -> Result<[u8; 32], StoreError> {
        self.0.secret_if_absent(name, value)
    }

    fn secrets(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.0.secrets()
    }

    fn set_secret(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        self.0.set_secret(name, value)
    }

    fn marker(&self, name: &str) -> Result<Option<String>, StoreError> {
        self.0.marker(name)
    }

    fn set_marker(&self, name: &str, value: &str) -> Result<(), StoreError> {
        self.0.set_marker(name, value)
    }

    fn markers(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.0.markers()
    }

    fn api_keys_with_hashes(&self) -> Result<Vec<([u8; 32], ApiKeyRecord)>, StoreError> {
        self.0.api_keys_with_hashes()
    }

    fn clear_data(&self) -> Result<(), StoreError> {
        self.0.clear_data()
    }

    fn probe(&self) -> Result<(), StoreError> {
        self.0.probe()
    }

    /// Keys and organizations are small trees that stay in sled's cache.
    fn short_reads_are_local(&self) -> bool {
        true
    }

    fn size_on_disk(&self) -> Result<u64, StoreError> {
        self.0.size_on_disk()
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.0.flush()
    }

    fn document(&self, kind: &str, id: &str) -> Result<Option<Document>, StoreError> {
        self.0.document(kind, id)
    }

    fn documents(&self, kind: &str) -> Result<Vec<Document>, StoreError> {
        self.0.documents(kind)
    }

    fn swap_document(&self, kind: &str, id: &str, seen: Option<u64>, body: &[u8]) -> Result<Option<u64>, StoreError> {
        self.0.swap_document(kind, id, seen, body)
    }

    fn delete_document(&self, kind: &str, id: &str) -> Result<bool, StoreError> {
        self.0.delete_document(kind, id)
    }

    fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        self.0.append_audit(entries)
    }

    fn audit_page(
        &self,
        organization: Uuid,
        after: Option<u64>,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        self.0.audit_page(organization, after, principal, limit)
    }

    fn expire_audit(&self, before: i64) -> Result<u64, StoreError> {
        self.0.expire_audit(before)
    }

    /// sled frees the pages a write replaced through crossbeam-epoch's
    /// global collector, which otherwise frees a few dozen per 128 later
    /// store operations (an idle server would keep them); glibc keeps freed
    /// memory in its arenas unless asked to return it.
    fn release_freed_memory(&self) {
        // Each pass frees up to 8 × 64 of them once two epochs have passed.
        const FREED_COLLECTIONS: usize = 1024;
        for _ in 0..FREED_COLLECTIONS {
            crossbeam_epoch::pin().flush();
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free memory of the allocator's arenas.
        #[allow(unsafe_code)]
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// A record ready to write: its encoding and index entries, the index
/// entries of the stored record it replaces, and the sequence of the
/// record's change event, if it has one (a deleted record keeps its).
struct PreparedRecord {
    id: Uuid,
    bytes: Vec<u8>,
    entries: Vec<IndexEntry>,
    stored_entries: Option<Vec<IndexEntry>>,
    stored_event: Option<u64>,
}

fn prepare_record(
    trees: &CollectionTrees,
    organization: Uuid,
    collection: Collection,
    record: &Value,
) -> Result<PreparedRecord, StoreError> {
    let records = &trees.records;
    let id = record_uuid(collection, record)?;
    let mut bytes = serde_json::to_vec(record).map_err(|e| StoreError::InvalidRecord(e.to_string()))?;
    // Held until the batch commits: without the slack the encoder grew.
    bytes.shrink_to_fit();
    let entries = index_entries(organization, collection, id, record)?;
    let stored_entries = match records.get(record_key(organization, id)).map_err(store_error)? {
        Some(old) => {
            let stored = serde_json::from_slice::<Value>(&old).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            Some(index_entries(organization, collection, id, &stored)?)
        }
        None => None,
    };
    let stored_event = Trees::stored_event(&trees.change_ids, organization, id)?;
    Ok(PreparedRecord { id, bytes, entries, stored_entries, stored_event })
}

/// A stored record to delete: its index entries, its event's sequence and
/// its history's keys.
struct PreparedDeletion {
    id: Uuid,
    entries: Vec<IndexEntry>,
    stored_event: Option<u64>,
    history_keys: Vec<Vec<u8>>,
}

/// What deleting the record `id` removes; `None` when it is not stored.
fn prepare_deletion(
    trees: &CollectionTrees,
    organization: Uuid,
    collection: Collection,
    id: Uuid,
) -> Result<Option<PreparedDeletion>, StoreError> {
    let Some(stored) = trees.records.get(record_key(organization, id)).map_err(store_error)? else { return Ok(None) };
    let stored = serde_json::from_slice::<Value>(&stored).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(Some(PreparedDeletion {
        id,
        entries: index_entries(organization, collection, id, &stored)?,
        stored_event: Trees::stored_event(&trees.change_ids, organization, id)?,
        history_keys: Trees::history_keys(&trees.history, organization, id)?,
    }))
}

/// A transaction's outcome as the store's result.
fn transaction_outcome(outcome: sled::transaction::TransactionResult<(), StoreError>) -> Result<(), StoreError> {
    match outcome {
        Ok(()) => Ok(()),
        Err(sled::transaction::TransactionError::Abort(error)) => Err(error),
        Err(sled::transaction::TransactionError::Storage(error)) => Err(store_error(error)),
    }
}

/// The page cache sled is opened with.
pub const CACHE_CAPACITY: u64 = 256 * 1024 * 1024;

/// How the store opens sled in `dir`.
fn sled_config(dir: &Path) -> sled::Config {
    sled::Config::new().path(dir).cache_capacity(CACHE_CAPACITY)
}

/// The record's `id`, which must be a UUID.
fn record_uuid(collection: Collection, record: &Value) -> Result<Uuid, StoreError> {
    record
        .get("id")
        .and_then(Value::as_str)
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or_else(|| StoreError::InvalidRecord(format!("a {collection} record has no UUID id")))
}

fn read_count(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_be_bytes)
}

/// Whether a record holds at most one value of the index.
fn single_valued(collection: Collection, index: &str) -> bool {
    indexes::find(collection, index).is_some_and(|found| !matches!(found.key, indexes::IndexKey::EachOf(_)))
}

/// The record id that ends an index entry.
/// The record ids of these entries.
/// Groups of `candidates` candidates from each one's value in each group
/// index (`placed[group][candidate]`, a place in `names[group]`), in the
/// values' order; a candidate holding no value in a group index is in none.
fn grouped(candidates: usize, placed: &[Vec<Option<usize>>], names: &[Vec<String>]) -> Vec<GroupCount> {
    let mut counted: BTreeMap<Vec<usize>, u64> = BTreeMap::new();
    for at in 0..candidates {
        if let Some(key) = placed.iter().map(|value_of| value_of[at]).collect::<Option<Vec<usize>>>() {
            *counted.entry(key).or_default() += 1;
        }
    }
    counted
        .into_iter()
        .map(|(key, count)| GroupCount {
            values: key.iter().zip(names).map(|(n, names)| names[*n].clone()).collect(),
            count,
        })
        .collect()
}

fn ids_of(entries: &[index_blocks::Entry]) -> Result<IdSet, StoreError> {
    entries.iter().map(entry_id).collect()
}

/// The entries whose record `named` holds, in their order.
fn keep_named(entries: Vec<index_blocks::Entry>, named: &IdSet) -> Result<Vec<index_blocks::Entry>, StoreError> {
    let mut kept = Vec::with_capacity(named.len());
    for entry in entries {
        if named.contains(&entry_id(&entry)?) {
            kept.push(entry);
        }
    }
    Ok(kept)
}

fn entry_id(entry: &index_blocks::Entry) -> Result<[u8; 16], StoreError> {
    <[u8; 16]>::try_from(&entry[8..]).map_err(|_| StoreError::Corrupt("an index entry has no record id".into()))
}

/// How a record's `created_at` member starts in its stored JSON.
const CREATED_AT_KEY: &[u8] = b"\"created_at\":\"";

/// A record's `created_at` when its stored (compact) JSON names the
/// member once: inside a JSON string every quote is escaped, so the bytes
/// of [`CREATED_AT_KEY`] right after `{` or `,` can only start a member
/// named `created_at`, and the schema has that member at the top level
/// only. Anything else (`None`) is parsed.
fn created_at_found(key: &memchr::memmem::Finder<'_>, record: &[u8]) -> Option<i64> {
    let mut found = key.find_iter(record);
    let at = found.next()?;
    if found.next().is_some() || !matches!(record.get(at.checked_sub(1)?), Some(b'{' | b',')) {
        return None;
    }
    let value = record.get(at + CREATED_AT_KEY.len()..)?;
    let end = memchr::memchr(b'"', value)?;
    Timestamp::parse(std::str::from_utf8(&value[..end]).ok()?).map(|time| time.0)
}

/// A record's `created_at`, parsed from its JSON.
fn created_at_parsed(record: &[u8]) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Created<'a> {
        #[serde(borrow)]
        created_at: &'a str,
    }
    let record = serde_json::from_slice::<Created<'_>>(record).ok()?;
    Timestamp::parse(record.created_at).map(|time| time.0)
}

/// The index entry of a record at `position`.
fn entry_of(position: i64, id: Uuid) -> index_blocks::Entry {
    let mut entry = [0u8; index_blocks::ENTRY_BYTES];
    entry[..8].copy_from_slice(&ordered_nanos(position));
    entry[8..].copy_from_slice(id.as_bytes());
    entry
}

/// The position an index entry begins with.
fn entry_position(entry: &index_blocks::Entry) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&entry[..8]);
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// `created_at` as bytes that sort like the timestamp.
fn ordered_nanos(nanos: i64) -> [u8; 8] {
    ((nanos as u64) ^ (1 << 63)).to_be_bytes()
}

/// One index entry of a record: its key in the index tree (none for the
/// counts-only tallies: pairs and update hours), and the key of the count
/// it adds to.
type IndexEntry = (Option<Vec<u8>>, Vec<u8>);

/// A record's index entries, one per index value, then its counts-only
/// tallies.
fn index_entries(
    organization: Uuid,
    collection: Collection,
    id: Uuid,
    record: &Value,
) -> Result<Vec<IndexEntry>, StoreError> {
    let found = esr_store::record_indexes(collection, id, record)?;
    let mut entries = Vec::with_capacity(found.entries.len() + found.counted.len());
    for (index, value, position) in found.entries {
        let count_key = value_prefix(organization, index, &value);
        let mut entry_key = count_key.clone();
        entry_key.extend_from_slice(&entry_of(position, id));
        entries.push((Some(entry_key), count_key));
    }
    entries.extend(found.counted.into_iter().map(|(name, value)| (None, value_prefix(organization, &name, &value))));
    Ok(entries)
}

/// Identifies the index table the stored indexes were built from.
fn index_table_fingerprint() -> String {
    let mut text = String::from("v5 runs");
    for collection in Collection::ALL {
        for index in esr_contract::indexes::indexes(collection) {
            text.push_str(&format!(";{collection}/{}={:?}/{:?}", index.name, index.key, index.order));
        }
        text.push_str(&format!(";{collection} pairs {:?}", indexes::counted_pairs(collection)));
    }
    text.push_str(&format!(";{}", indexes::UPDATED_HOUR));
    format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()))
}

/// A record's key in its collection's tree.
fn record_key(organization: Uuid, id: Uuid) -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(organization.as_bytes());
    key[16..].copy_from_slice(id.as_bytes());
    key
}

fn record_id(key: &[u8]) -> Result<Uuid, StoreError> {
    key.get(16..32)
        .and_then(|bytes| Uuid::from_slice(bytes).ok())
        .ok_or_else(|| StoreError::Corrupt("a record key is not organization id + record id".into()))
}

#[cfg(test)]
mod tests {
    //! What only sled has; the store's contract is `host/tests/it/store_contract.rs`.

    use serde_json::json;

    use super::*;

    #[test]
    fn created_at_is_found_only_where_it_is_a_member() {
        let key = memchr::memmem::Finder::new(CREATED_AT_KEY);
        let at = |text: &str| Timestamp::parse(text).map(|time| time.0);
        let record = json!({"id": "x", "created_at": "2026-01-02T03:04:05Z", "title": "t"}).to_string();
        assert_eq!(created_at_found(&key, record.as_bytes()), at("2026-01-02T03:04:05Z"));
        // A string holding the member's text has its quotes escaped.
        let quoted = json!({"title": "\"created_at\":\"2020-01-01T00:00:00Z\"", "created_at": "2026-01-02T03:04:05Z"});
        let quoted = quoted.to_string();
        assert_eq!(created_at_found(&key, quoted.as_bytes()), at("2026-01-02T03:04:05Z"));
        // Twice (a nested member), or not after `{` or `,`: parsed instead.
        let nested = json!({"a": {"created_at": "2020-01-01T00:00:00Z"}, "created_at": "2026-01-02T03:04:05Z"});
        let nested = nested.to_string();
        assert_eq!(created_at_found(&key, nested.as_bytes()), None);
        assert_eq!(created_at_parsed(nested.as_bytes()), at("2026-01-02T03:04:05Z"));
        assert_eq!(created_at_found(&key, b"{ \"created_at\":\"2026-01-02T03:04:05Z\"}"), None);
        assert_eq!(created_at_found(&key, b"{\"created_at\":\"not a time\"}"), None);
    }

    #[test]
    fn ordered_entries_compare_as_their_bytes() {
        let ids = [Uuid::nil(), Uuid::from_u128(1 << 64), Uuid::from_u128(u128::MAX - 1), Uuid::max()];
        let positions = [i64::MIN, -1, 0, 1, i64::MAX];
        let entries: Vec<index_blocks::Entry> =
            positions.iter().flat_map(|position| ids.iter().map(move |id| entry_of(*position, *id))).collect();
        for a in &entries {
            for b in &entries {
                assert_eq!(index_blocks::ordered(a).cmp(&index_blocks::ordered(b)), a.cmp(b));
            }
        }
    }

    #[test]
    fn lost_index_entries_are_found() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let db = SledStore::open(dir.path())?;
        let store: &dyn Store = &db;
        let records: Vec<Value> = (0..5)
            .map(|n| {
                let at = format!("2026-01-0{}T00:00:00Z", 5 - n);
                json!({"id": Uuid::now_v7().to_string(), "status": "active", "created_at": at, "updated_at": at})
            })
            .collect();
        store.insert_records(Uuid::now_v7(), Collection::Scopes, &records)?;
        assert_eq!(store.verify_indexes()?, Vec::<String>::new());

        let trees = &db.collections[&Collection::Scopes];
        let (some_block, entries) =
            trees.index.first().map_err(store_error)?.ok_or_else(|| StoreError::Corrupt("no entries".into()))?;
        trees.index.remove(some_block).map_err(store_error)?;
        let lost = index_blocks::decode_block(&entries)?.len();
        assert_eq!(store.verify_indexes()?, [format!("scopes: {lost} index entries missing, 0 pointing at nothing")]);
        Ok(())
    }

    #[test]
    fn disagreeing_change_events_are_found() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let db = SledStore::open(dir.path())?;
        let store: &dyn Store = &db;
        let organization = Uuid::now_v7();
        let at = "2026-01-05T00:00:00Z";
        let records: Vec<Value> = (0..3)
            .map(|_| json!({"id": Uuid::now_v7().to_string(), "status": "active", "created_at": at, "updated_at": at}))
            .collect();
        store.insert_records(organization, Collection::Scopes, &records)?;
        assert_eq!(store.verify_indexes()?, Vec::<String>::new());

        let trees = &db.collections[&Collection::Scopes];
        let (first_event, _) =
            trees.changes.first().map_err(store_error)?.ok_or_else(|| StoreError::Corrupt("no events".into()))?;
        trees.changes.remove(first_event).map_err(store_error)?;
        let stray = changes::StoredEvent { id: Uuid::now_v7(), operation: ChangeOperation::Deleted, changed_at: 0 };
        trees.changes.insert(changes::event_key(organization, 99), &stray.encode()[..]).map_err(store_error)?;
        assert_eq!(
            store.verify_indexes()?,
            [
                "scopes: 1 change events that are not their record's latest, 1 change pointers at no event",
                "scopes: 1 change events past their organization's latest sequence",
            ]
        );
        Ok(())
    }

    #[test]
    fn a_second_process_gets_a_clear_error() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let _first = SledStore::open(dir.path())?;
        // sled's lock is per process file handle; a second open in the same
        // process hits the same lock as a second process would.
        match SledStore::open(dir.path()) {
            Err(StoreError::Locked(path)) => assert!(path.contains(&dir.path().display().to_string())),
            Err(other) => panic!("expected a lock error, got {other}"),
            Ok(_) => panic!("a second open must fail"),
        }
        Ok(())
    }
}
