//! Storage: the sled layout and the only code that touches it.
//!
//! One tree per collection, keyed by organization id (16 bytes) then record
//! id (16 bytes), so one organization's records are one contiguous range in
//! id order, which is creation order because ids are UUIDv7. Organizations
//! and API keys (by hash) have their own trees. Every write is flushed
//! before it is acknowledged: sled's background flusher loses acknowledged
//! writes on a crash.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use esr_plugin_sdk::indexes::{self, CREATED_AT, UPDATED_AT};
use esr_plugin_sdk::time::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sled::Transactional;
use uuid::Uuid;

use crate::index_blocks::{self, value_prefix};

/// The collections the public API serves, named as in its paths.
pub const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];

/// The most records one `scan` returns.
pub const MAX_SCAN: usize = 1000;

const ORGANIZATIONS: &str = "organizations";
const API_KEYS: &str = "api-keys";
const META: &str = "meta";
/// The marker naming the index table the stored indexes match, or `stale`.
const INDEXES_MARKER: &str = "indexes";

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
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    #[error("unknown index: {0}")]
    UnknownIndex(String),
    /// A store call a component made with an argument it cannot mean.
    #[error("malformed store call: {0}")]
    MalformedCall(String),
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    #[error(
        "the database's schema is version {found}, newer than this esr knows ({known}): run the esr release that wrote it, or a newer one"
    )]
    SchemaTooNew { found: i32, known: i32 },
}

impl From<postgres::Error> for StoreError {
    fn from(error: postgres::Error) -> StoreError {
        // The server's own message (a `db error` says only that there is one).
        match error.as_db_error() {
            Some(db) => StoreError::Postgres(format!("{}: {}", db.severity(), db.message())),
            None => StoreError::Postgres(match std::error::Error::source(&error) {
                Some(source) => format!("{error}: {source}"),
                None => error.to_string(),
            }),
        }
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
}

/// The database: a sled instance with the product's trees. A handle:
/// cloning it (once per request) copies one pointer.
#[derive(Clone)]
pub struct Database(Arc<DatabaseTrees>);

impl std::ops::Deref for Database {
    type Target = DatabaseTrees;

    fn deref(&self) -> &DatabaseTrees {
        &self.0
    }
}

/// What a [`Database`] handle points to.
pub struct DatabaseTrees {
    db: sled::Db,
    organizations: sled::Tree,
    api_keys: sled::Tree,
    meta: sled::Tree,
    collections: BTreeMap<&'static str, CollectionTrees>,
    /// Held by whoever validates and writes a batch, so that what was
    /// validated is what gets replaced.
    writer: Mutex<()>,
    /// Held while a write reads the index blocks it then replaces.
    index_writer: Mutex<()>,
}

/// A collection's records, its index entries and the index counts.
struct CollectionTrees {
    records: sled::Tree,
    /// Blocks of index entries (`crate::index_blocks`): `organization ‖
    /// index name ‖ 0 ‖ value length (u32) ‖ value ‖ first entry` → entries,
    /// each `position (u64, order-preserving) ‖ record id`.
    index: sled::Tree,
    /// `organization ‖ index name ‖ 0 ‖ value length ‖ value` → u64 count.
    counts: sled::Tree,
}

/// One stored record with its id.
pub type StoredRecord = (Uuid, sled::IVec);

impl Database {
    /// Opens (or creates, owner-only) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Database, StoreError> {
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|error| StoreError::Sled(sled::Error::Io(error)))?;
        }
        let db = sled_config(dir).open().map_err(|error| match error {
            // sled reports the lock as an `Other` error wrapping `WouldBlock`.
            sled::Error::Io(ref io)
                if io.kind() == std::io::ErrorKind::WouldBlock || io.to_string().contains("could not acquire lock") =>
            {
                StoreError::Locked(dir.display().to_string())
            }
            other => StoreError::Sled(other),
        })?;
        let mut collections = BTreeMap::new();
        for name in COLLECTIONS {
            collections.insert(
                name,
                CollectionTrees {
                    records: db.open_tree(format!("records/{name}"))?,
                    index: db.open_tree(format!("index/{name}"))?,
                    counts: db.open_tree(format!("counts/{name}"))?,
                },
            );
        }
        let database = Database(Arc::new(DatabaseTrees {
            organizations: db.open_tree(ORGANIZATIONS)?,
            api_keys: db.open_tree(API_KEYS)?,
            meta: db.open_tree(META)?,
            collections,
            writer: Mutex::default(),
            index_writer: Mutex::default(),
            db,
        }));
        database.rebuild_indexes_if_stale()?;
        Ok(database)
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

    /// Writes records without their index entries, for an offline bulk
    /// load: much faster than [`Database::insert_records`]. The indexes are
    /// marked stale first, so a load that stops half-way is re-indexed on
    /// the next open; [`Database::finish_bulk_load`] rebuilds them.
    pub fn bulk_insert_records(
        &self,
        organization: Uuid,
        collection: &str,
        records: &[Value],
    ) -> Result<(), StoreError> {
        if self.marker(INDEXES_MARKER)?.as_deref() != Some("stale") {
            self.set_marker(INDEXES_MARKER, "stale")?;
        }
        let tree = self
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
        tree.apply_batch(batch)?;
        Ok(())
    }

    /// Ends a bulk load: rebuilds every index and makes it all durable.
    pub fn finish_bulk_load(&self) -> Result<(), StoreError> {
        self.rebuild_indexes()
    }

    /// Rebuilds every index and count from the records.
    fn rebuild_indexes(&self) -> Result<(), StoreError> {
        const BLOCKS_PER_BATCH: usize = 10_000;
        for (collection, trees) in &self.collections {
            trees.index.clear()?;
            trees.counts.clear()?;
            let mut counts: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            // Each value's entries, gathered whole, then written in blocks.
            let mut entries: HashMap<Vec<u8>, Vec<index_blocks::Entry>> = HashMap::new();
            for entry in trees.records.iter() {
                let (key, bytes) = entry?;
                let organization = key.get(..16).and_then(|b| Uuid::from_slice(b).ok());
                let (Some(organization), Ok(id)) = (organization, record_id(&key)) else {
                    return Err(StoreError::Corrupt("a record key is not organization id + record id".into()));
                };
                let record: Value = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                for (entry_key, count_key) in index_entries(organization, collection, id, &record)? {
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
                    trees.index.apply_batch(std::mem::take(&mut batch))?;
                    batched = 0;
                }
            }
            trees.index.apply_batch(batch)?;
            let mut batch = sled::Batch::default();
            for (key, count) in counts {
                batch.insert(key, &count.to_be_bytes());
            }
            trees.counts.apply_batch(batch)?;
        }
        self.flush()?;
        self.set_marker(INDEXES_MARKER, &index_table_fingerprint())
    }

    /// Checks that every index entry and count agrees with the records;
    /// returns what does not (empty when all is well). Reads everything.
    pub fn verify_indexes(&self) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        for (collection, trees) in &self.collections {
            let mut entries = std::collections::BTreeSet::new();
            let mut counts: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for entry in trees.records.iter() {
                let (key, bytes) = entry?;
                let organization = key.get(..16).and_then(|b| Uuid::from_slice(b).ok()).unwrap_or_default();
                let id = record_id(&key)?;
                let record: Value = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                for (entry_key, count_key) in index_entries(organization, collection, id, &record)? {
                    entries.extend(entry_key);
                    *counts.entry(count_key).or_default() += 1;
                }
            }
            let (stored_entries, layout_problems) = index_blocks::stored_entries(&trees.index)?;
            problems.extend(layout_problems.into_iter().map(|problem| format!("{collection}: {problem}")));
            let missing = entries.iter().filter(|key| !stored_entries.contains(*key)).count();
            let extra = stored_entries.iter().filter(|key| !entries.contains(*key)).count();
            if missing + extra > 0 {
                problems.push(format!("{collection}: {missing} index entries missing, {extra} pointing at nothing"));
            }
            let mut stored_counts = BTreeMap::new();
            for entry in trees.counts.iter() {
                let (key, bytes) = entry?;
                stored_counts.insert(key.to_vec(), read_count(&bytes));
            }
            if stored_counts != counts {
                problems.push(format!("{collection}: index counts disagree with the records"));
            }
        }
        Ok(problems)
    }

    /// Whether any organization exists yet.
    pub fn is_empty(&self) -> bool {
        self.organizations.is_empty()
    }

    /// A small marker in the settings tree (e.g. how far demo seeding got).
    pub fn marker(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self.meta.get(format!("marker/{name}"))?.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    pub fn set_marker(&self, name: &str, value: &str) -> Result<(), StoreError> {
        self.meta.insert(format!("marker/{name}"), value.as_bytes())?;
        self.flush()
    }

    /// Removes every organization, key and record (the cursor key stays):
    /// used to restart a demo load that was interrupted.
    pub fn clear_data(&self) -> Result<(), StoreError> {
        self.organizations.clear()?;
        self.api_keys.clear()?;
        for trees in self.collections.values() {
            trees.records.clear()?;
            trees.index.clear()?;
            trees.counts.clear()?;
        }
        self.flush()
    }

    /// Health probe: a cheap read that touches the storage engine.
    pub fn probe(&self) -> Result<(), StoreError> {
        self.organizations.first()?;
        Ok(())
    }

    /// The store's size on disk, in bytes.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        Ok(self.db.size_on_disk()?)
    }

    /// Makes every write so far durable.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    /// A 32-byte secret of this installation (e.g. the cursor-sealing
    /// key), created on first use so that it survives restarts.
    pub fn secret(&self, name: &str) -> Result<[u8; 32], StoreError> {
        let key = format!("secret/{name}");
        if self.meta.get(&key)?.is_none() {
            let mut fresh = [0u8; 32];
            rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut fresh);
            // Only the first writer wins, so concurrent first uses agree.
            let _ = self.meta.compare_and_swap(&key, None as Option<&[u8]>, Some(&fresh[..]))?;
            self.flush()?;
        }
        let stored = self.meta.get(&key)?.ok_or_else(|| StoreError::Corrupt(format!("{key} vanished")))?;
        <[u8; 32]>::try_from(stored.as_ref()).map_err(|_| StoreError::Corrupt(format!("{key} is not 32 bytes")))
    }

    pub fn insert_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(organization).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.organizations.insert(organization.organization_id.as_bytes(), bytes)?;
        self.flush()
    }

    pub fn organization(&self, id: Uuid) -> Result<Option<Organization>, StoreError> {
        match self.organizations.get(id.as_bytes())? {
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    /// Stores an API key's record under the hash of the key.
    pub fn insert_api_key(&self, key_hash: &[u8; 32], record: &ApiKeyRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.api_keys.insert(key_hash, bytes)?;
        self.flush()
    }

    /// Every organization, in id (creation) order.
    pub fn organizations(&self) -> Result<Vec<Organization>, StoreError> {
        self.organizations
            .iter()
            .values()
            .map(|bytes| serde_json::from_slice(&bytes?).map_err(|e| StoreError::Corrupt(e.to_string())))
            .collect()
    }

    /// The stored records of every key (of one organization when given), oldest first.
    pub fn api_keys(&self, organization: Option<Uuid>) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let mut keys = Vec::new();
        for bytes in self.api_keys.iter().values() {
            let record: ApiKeyRecord =
                serde_json::from_slice(&bytes?).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if organization.is_none_or(|organization| record.organization_id == organization) {
                keys.push(record);
            }
        }
        keys.sort_by_key(|key| key.id);
        Ok(keys)
    }

    /// Marks the key with this id revoked (durably); `None` when there is
    /// no such key. Revoking a revoked key keeps its first revocation time.
    pub fn revoke_api_key(&self, id: Uuid, revoked_at: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        for entry in self.api_keys.iter() {
            let (hash, bytes) = entry?;
            let mut record: ApiKeyRecord =
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if record.id != id {
                continue;
            }
            if record.revoked_at.is_none() {
                record.revoked_at = Some(revoked_at.to_owned());
                let bytes = serde_json::to_vec(&record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                self.api_keys.insert(hash, bytes)?;
                self.flush()?;
            }
            return Ok(Some(record));
        }
        Ok(None)
    }

    pub fn api_key(&self, key_hash: &[u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        match self.api_keys.get(key_hash)? {
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    fn tree(&self, collection: &str) -> Option<&sled::Tree> {
        self.collections.get(collection).map(|trees| &trees.records)
    }

    /// The write lock: one batch is validated and written at a time.
    pub fn exclusive_writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes records of one organization and collection; see [`Database::write_records`].
    pub fn insert_records(&self, organization: Uuid, collection: &str, records: &[Value]) -> Result<(), StoreError> {
        self.write_records(organization, &[(collection, records)])
    }

    /// Writes records (JSON objects with a UUID `id`, `created_at` and
    /// `updated_at`) of one organization, in one or more collections, with
    /// their index entries and counts, in one transaction: all or nothing,
    /// durable on return. A record with an existing id replaces it and its
    /// index entries.
    pub fn write_records(&self, organization: Uuid, batches: &[(&str, &[Value])]) -> Result<(), StoreError> {
        // The blocks read below stay as read until the transaction commits.
        let _index_writer = self.index_writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut trees: Vec<&sled::Tree> = Vec::new();
        let mut prepared = Vec::new();
        for (collection, records) in batches.iter().filter(|(_, records)| !records.is_empty()) {
            let collection_trees = self
                .collections
                .get(collection)
                .ok_or_else(|| StoreError::InvalidRecord(format!("unknown collection {collection}")))?;
            trees.extend([&collection_trees.records, &collection_trees.index, &collection_trees.counts]);
            let mut rows = Vec::with_capacity(records.len());
            // Each index entry the batch touches: whether it was there
            // before and whether it is after (a record rewritten with the
            // same value keeps its entry, and its block is not rewritten);
            // and how each count moves.
            let mut entries: BTreeMap<Vec<u8>, (bool, bool)> = BTreeMap::new();
            let mut deltas: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
            // Each record's bytes and index entries, and those of the record
            // it replaces in the store, worked out on every core.
            let ready = crate::parallel::map_in_order(records, |record| {
                prepare_record(&collection_trees.records, organization, collection, record)
            })
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
            // An id on several lines replaces, from its second line on, what
            // its line before wrote: those entries are kept until then.
            let mut lines_left: HashMap<Uuid, usize> = HashMap::new();
            for record in &ready {
                *lines_left.entry(record.id).or_default() += 1;
            }
            let mut written_earlier: HashMap<Uuid, Vec<IndexEntry>> = HashMap::new();
            for record in ready {
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
                rows.push((record_key(organization, record.id), record.bytes));
            }
            let changed: BTreeMap<Vec<u8>, bool> = entries
                .into_iter()
                .filter(|(_, (before, after))| before != after)
                .map(|(key, (_, after))| (key, after))
                .collect();
            let blocks = index_blocks::plan(&collection_trees.index, &changed)?;
            deltas.retain(|_, delta| *delta != 0);
            prepared.push((rows, blocks, deltas));
        }
        if prepared.is_empty() {
            return Ok(());
        }
        let outcome = trees[..].transaction(|views| {
            for (position, (rows, blocks, deltas)) in prepared.iter().enumerate() {
                let (records, index, counts) =
                    (&views[3 * position], &views[3 * position + 1], &views[3 * position + 2]);
                for (key, bytes) in rows {
                    records.insert(&key[..], bytes.as_slice())?;
                }
                for (key, value) in blocks {
                    match value {
                        Some(value) => index.insert(key.as_slice(), value.as_slice())?,
                        None => index.remove(key.as_slice())?,
                    };
                }
                for (key, delta) in deltas {
                    let current = counts.get(key)?.map_or(0, |bytes| read_count(&bytes));
                    let updated = current.saturating_add_signed(*delta);
                    if updated == 0 {
                        counts.remove(key.as_slice())?;
                    } else {
                        counts.insert(key.as_slice(), &updated.to_be_bytes())?;
                    }
                }
            }
            Ok(())
        });
        match outcome {
            Ok(()) => self.flush(),
            Err(sled::transaction::TransactionError::Abort(error)) => Err(error),
            Err(sled::transaction::TransactionError::Storage(error)) => Err(StoreError::Sled(error)),
        }
    }

    /// Up to `limit` (at most [`MAX_SCAN`]) records holding `value` in the
    /// index, in `created_at`, id order, after `after` when given.
    #[allow(clippy::too_many_arguments)]
    pub fn index_scan(
        &self,
        organization: Uuid,
        collection: &str,
        index: &str,
        value: &str,
        after: Option<(i64, Uuid)>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let trees = self.index_trees(collection, index)?;
        let prefix = value_prefix(organization, index, value);
        let after = after.map(|(position, id)| entry_of(position, id));
        let mut records = Vec::with_capacity(limit.min(MAX_SCAN).min(128));
        for entry in
            index_blocks::Entries::new(&trees.index, &prefix, after.as_ref(), reverse)?.take(limit.min(MAX_SCAN))
        {
            let id = Uuid::from_bytes(entry_id(&entry?)?);
            let record = trees.records.get(record_key(organization, id))?.ok_or_else(|| {
                StoreError::Corrupt(format!("index {index} of {collection} points at a missing record"))
            })?;
            records.push((id, record));
        }
        Ok(records)
    }

    /// The positions of [`Database::index_scan`]'s records (position, id),
    /// read from the index alone.
    #[allow(clippy::too_many_arguments)]
    pub fn index_positions(
        &self,
        organization: Uuid,
        collection: &str,
        index: &str,
        value: &str,
        after: Option<(i64, Uuid)>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(i64, Uuid)>, StoreError> {
        let trees = self.index_trees(collection, index)?;
        let prefix = value_prefix(organization, index, value);
        let after = after.map(|(position, id)| entry_of(position, id));
        let mut positions = Vec::with_capacity(limit.min(MAX_SCAN));
        for entry in
            index_blocks::Entries::new(&trees.index, &prefix, after.as_ref(), reverse)?.take(limit.min(MAX_SCAN))
        {
            let entry = entry?;
            positions.push((entry_position(&entry), Uuid::from_bytes(entry_id(&entry)?)));
        }
        Ok(positions)
    }

    /// How many records hold `value` in the index.
    pub fn index_count(
        &self,
        organization: Uuid,
        collection: &str,
        index: &str,
        value: &str,
    ) -> Result<u64, StoreError> {
        let trees = self.index_trees(collection, index)?;
        Ok(trees.counts.get(value_prefix(organization, index, value))?.map_or(0, |bytes| read_count(&bytes)))
    }

    /// How many of the organization's records hold one of each
    /// condition's values in its index and, when given, were updated
    /// strictly after `updated_after` (Unix nanoseconds). Reads index keys
    /// only: the smallest condition gives the candidates, each other one
    /// (and the `updated_at` range) keeps those it also holds.
    pub fn count_matching(
        &self,
        organization: Uuid,
        collection: &str,
        conditions: &[(String, Vec<String>)],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        if conditions.is_empty() && !self.collections.contains_key(collection) {
            return Ok(0);
        }
        // Each value once: a repeated value must not count its records twice.
        let conditions: Vec<(&str, Vec<String>)> = conditions
            .iter()
            .map(|(index, values)| {
                (index.as_str(), values.iter().collect::<BTreeSet<_>>().into_iter().cloned().collect())
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
                        total += trees.counts.get(key)?.map_or(0, |bytes| read_count(&bytes));
                    }
                }
                return Ok(total);
            }
        }
        // How many candidates have their `updated_at` entry strictly after
        // `after` (`later`), or at or before it.
        let count_updated_side = |trees: &CollectionTrees,
                                  candidates: &HashSet<[u8; 16]>,
                                  after: i64,
                                  later: bool|
         -> Result<u64, StoreError> {
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
        let mut candidates: HashSet<[u8; 16]> = HashSet::new();
        for value in values.iter() {
            for entry in
                index_blocks::Entries::new(&smallest.index, &value_prefix(organization, index, value), None, false)?
            {
                candidates.insert(entry_id(&entry?)?);
            }
        }
        for (_, trees, index, values) in others {
            let mut kept = HashSet::with_capacity(candidates.len());
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

    /// How many of the organization's records hold the sort value of the
    /// sort index `index` at a position strictly between `after` and
    /// `before` (an absent end is open), meet every condition and, when
    /// given, were updated strictly after `updated_after`. Reads index keys
    /// only. A range alone walks the smaller side of it: its entries and
    /// the entries outside it are counted in turns until one side ends.
    #[allow(clippy::too_many_arguments)]
    pub fn count_in_range(
        &self,
        organization: Uuid,
        collection: &str,
        index: &str,
        after: Option<(i64, Uuid)>,
        before: Option<(i64, Uuid)>,
        conditions: &[(String, Vec<String>)],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        let trees = self.index_trees(collection, index)?;
        if indexes::find(collection, index).is_none_or(|found| found.key != indexes::IndexKey::SortValue) {
            return Err(StoreError::MalformedCall(format!("{index} of {collection} is not a sort index")));
        }
        let prefix = value_prefix(organization, index, indexes::SORTED);
        let after = after.map(|(position, id)| entry_of(position, id));
        let before = before.map(|(position, id)| entry_of(position, id));
        let mut inside = index_blocks::Entries::new(&trees.index, &prefix, after.as_ref(), false)?
            .take_while(move |entry| entry.as_ref().map_or(true, |entry| before.is_none_or(|before| *entry < before)));
        if conditions.is_empty() && updated_after.is_none() {
            let held = self.index_count(organization, collection, index, indexes::SORTED)?;
            let below = index_blocks::Entries::new(&trees.index, &prefix, None, false)?.take_while(move |entry| {
                entry.as_ref().map_or(true, |entry| after.is_some_and(|after| *entry <= after))
            });
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
        let candidates = match self.intersect_conditions(organization, collection, conditions)? {
            Some(candidates) => candidates,
            None => return Ok(0),
        };
        let mut kept = HashSet::new();
        for entry in inside {
            let entry = entry?;
            let id = entry_id(&entry)?;
            if candidates.as_ref().is_none_or(|candidates| candidates.contains(&id)) {
                kept.insert(id);
            }
        }
        match updated_after {
            None => Ok(kept.len() as u64),
            Some(after) => self.count_candidates_updated_after(organization, collection, &kept, after),
        }
    }

    /// The ids of the records meeting every condition, smallest condition
    /// first; `Some(None)` when there is no condition (every record), `None`
    /// when nothing can match.
    #[allow(clippy::type_complexity)]
    fn intersect_conditions(
        &self,
        organization: Uuid,
        collection: &str,
        conditions: &[(String, Vec<String>)],
    ) -> Result<Option<Option<HashSet<[u8; 16]>>>, StoreError> {
        let mut sized = Vec::with_capacity(conditions.len());
        for (index, values) in conditions {
            let trees = self.index_trees(collection, index)?;
            let values: BTreeSet<&String> = values.iter().collect();
            let mut held = 0;
            for value in &values {
                held += self.index_count(organization, collection, index, value)?;
            }
            sized.push((held, trees, index.as_str(), values));
        }
        sized.sort_by_key(|(held, ..)| *held);
        let mut candidates: Option<HashSet<[u8; 16]>> = None;
        for (_, trees, index, values) in sized {
            let mut kept = HashSet::new();
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

    /// How many of `candidates` were updated strictly after `after`: the
    /// smaller side of `after` in the `updated_at` index is read (the
    /// sides' sizes come from the hourly counts).
    fn count_candidates_updated_after(
        &self,
        organization: Uuid,
        collection: &str,
        candidates: &HashSet<[u8; 16]>,
        after: i64,
    ) -> Result<u64, StoreError> {
        let trees = self.index_trees(collection, UPDATED_AT)?;
        let updated_later = self.count_updated_after(organization, collection, after)?;
        let everything = self.count(organization, collection)?;
        let later = updated_later <= everything - updated_later.min(everything);
        let split = entry_of(after, Uuid::max());
        let prefix = value_prefix(organization, UPDATED_AT, "");
        let mut count = 0;
        for entry in index_blocks::Entries::new(&trees.index, &prefix, later.then_some(&split), false)? {
            let entry = entry?;
            if !later && entry > split {
                break;
            }
            if candidates.contains(&entry_id(&entry)?) {
                count += 1;
            }
        }
        Ok(if later { count } else { candidates.len() as u64 - count })
    }

    /// How many records were updated strictly after `after`: the updates of
    /// the rest of its hour from the `updated_at` index, then the hourly
    /// counts of every later hour.
    fn count_updated_after(&self, organization: Uuid, collection: &str, after: i64) -> Result<u64, StoreError> {
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
            count += read_count(&entry?.1);
        }
        Ok(count)
    }

    fn index_trees(&self, collection: &str, index: &str) -> Result<&CollectionTrees, StoreError> {
        let trees = self
            .collections
            .get(collection)
            .ok_or_else(|| StoreError::UnknownIndex(format!("no collection {collection}")))?;
        esr_plugin_sdk::indexes::find(collection, index)
            .ok_or_else(|| StoreError::UnknownIndex(format!("{collection} has no index {index}")))?;
        Ok(trees)
    }

    /// The record with this id in the organization's collection.
    pub fn get(&self, organization: Uuid, collection: &str, id: Uuid) -> Result<Option<sled::IVec>, StoreError> {
        match self.tree(collection) {
            Some(tree) => Ok(tree.get(record_key(organization, id))?),
            None => Ok(None),
        }
    }

    /// Up to `limit` (at most [`MAX_SCAN`]) records in id order, after
    /// `after` when given; `reverse` walks from the newest.
    pub fn scan(
        &self,
        organization: Uuid,
        collection: &str,
        after: Option<Uuid>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let Some(tree) = self.tree(collection) else { return Ok(Vec::new()) };
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
            let (key, value) = entry?;
            records.push((record_id(&key)?, value));
        }
        Ok(records)
    }

    /// How many records the organization holds in the collection.
    pub fn count(&self, organization: Uuid, collection: &str) -> Result<u64, StoreError> {
        if !self.collections.contains_key(collection) {
            return Ok(0);
        }
        self.index_count(organization, collection, CREATED_AT, "")
    }
}

/// A record ready to write: its encoding and index entries, and the index
/// entries of the stored record it replaces.
struct PreparedRecord {
    id: Uuid,
    bytes: Vec<u8>,
    entries: Vec<IndexEntry>,
    stored_entries: Option<Vec<IndexEntry>>,
}

fn prepare_record(
    records: &sled::Tree,
    organization: Uuid,
    collection: &str,
    record: &Value,
) -> Result<PreparedRecord, StoreError> {
    let id = record_uuid(collection, record)?;
    let bytes = serde_json::to_vec(record).map_err(|e| StoreError::InvalidRecord(e.to_string()))?;
    let entries = index_entries(organization, collection, id, record)?;
    let stored_entries = match records.get(record_key(organization, id))? {
        Some(old) => {
            let stored = serde_json::from_slice::<Value>(&old).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            Some(index_entries(organization, collection, id, &stored)?)
        }
        None => None,
    };
    Ok(PreparedRecord { id, bytes, entries, stored_entries })
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
        Err(error) => return Err(StoreError::Sled(sled::Error::Io(error))),
    };
    if mode & 0o077 != 0 {
        return Err(StoreError::NotPrivate(dir.display().to_string(), mode));
    }
    Ok(())
}

/// How the store opens sled in `dir` (the benchmark opens it the same way
/// to measure what sled alone can write).
pub fn sled_config(dir: &Path) -> sled::Config {
    sled::Config::new().path(dir).cache_capacity(256 * 1024 * 1024)
}

/// The record's `id`, which must be a UUID.
fn record_uuid(collection: &str, record: &Value) -> Result<Uuid, StoreError> {
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
fn single_valued(collection: &str, index: &str) -> bool {
    indexes::find(collection, index).is_some_and(|found| !matches!(found.key, indexes::IndexKey::EachOf(_)))
}

/// The record id that ends an index entry.
fn entry_id(entry: &index_blocks::Entry) -> Result<[u8; 16], StoreError> {
    <[u8; 16]>::try_from(&entry[8..]).map_err(|_| StoreError::Corrupt("an index entry has no record id".into()))
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
    collection: &str,
    id: Uuid,
    record: &Value,
) -> Result<Vec<IndexEntry>, StoreError> {
    for field in ["created_at", "updated_at"] {
        record
            .get(field)
            .and_then(Value::as_str)
            .and_then(Timestamp::parse)
            .ok_or_else(|| StoreError::InvalidRecord(format!("{collection} record {id} has no RFC 3339 {field}")))?;
    }
    let mut entries = Vec::new();
    for index in esr_plugin_sdk::indexes::indexes(collection) {
        for value in index.values(record) {
            let count_key = value_prefix(organization, index.name, &value);
            let mut entry_key = count_key.clone();
            entry_key.extend_from_slice(&entry_of(index.position(record), id));
            entries.push((Some(entry_key), count_key));
        }
    }
    for (first, second) in indexes::counted_pairs(collection) {
        let values = |name: &str| indexes::find(collection, name).map(|index| index.values(record)).unwrap_or_default();
        for a in values(first) {
            for b in values(second) {
                let key = value_prefix(organization, &indexes::pair_name(first, second), &indexes::pair_value(&a, &b));
                entries.push((None, key));
            }
        }
    }
    if let Some(updated) = record.get("updated_at").and_then(Value::as_str).and_then(Timestamp::parse) {
        entries.push((None, value_prefix(organization, indexes::UPDATED_HOUR, &indexes::hour_value(updated.0))));
    }
    Ok(entries)
}

/// Identifies the index table the stored indexes were built from.
fn index_table_fingerprint() -> String {
    let mut text = String::from("v5 runs");
    for collection in COLLECTIONS {
        for index in esr_plugin_sdk::indexes::indexes(collection) {
            text.push_str(&format!(";{collection}/{}={:?}/{:?}", index.name, index.key, index.order));
        }
        text.push_str(&format!(";{collection} pairs {:?}", indexes::counted_pairs(collection)));
    }
    text.push_str(&format!(";{}", indexes::UPDATED_HOUR));
    crate::plugins::hex(&<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()))
}

/// A record's key in its collection's tree.
pub fn record_key(organization: Uuid, id: Uuid) -> [u8; 32] {
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
    use serde_json::json;

    use super::*;

    #[test]
    fn counts_of_pairs_and_update_hours_follow_writes() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
        let db = Database::open(dir.path())?;
        let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
        let statuses = ["open", "resolved", "suppressed"];
        let severities = ["critical", "high", "low"];
        let finding = |n: usize, status: &str, updated_minute: usize| {
            json!({
                "id": Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0000 + n as u128).to_string(),
                "status": status,
                "severity": severities[n % 3],
                "kev": n.is_multiple_of(4),
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": format!("2026-01-01T{:02}:{:02}:30Z", updated_minute / 60, updated_minute % 60),
            })
        };
        let mut records: Vec<Value> = (0..60).map(|n| finding(n, statuses[n % 3], n * 7)).collect();
        db.insert_records(acme, "vulnerability-findings", &records)?;
        db.insert_records(globex, "vulnerability-findings", &records[..10])?;
        // Re-imports move records between pairs and hours.
        for n in (0..60).step_by(5) {
            records[n] = finding(n, "resolved", 400 + n);
        }
        db.insert_records(acme, "vulnerability-findings", &records)?;

        let brute = |statuses: &[&str], severities: &[&str], after: Option<&str>| {
            records
                .iter()
                .filter(|r| statuses.is_empty() || statuses.contains(&r["status"].as_str().unwrap_or_default()))
                .filter(|r| severities.is_empty() || severities.contains(&r["severity"].as_str().unwrap_or_default()))
                .filter(|r| after.is_none_or(|after| r["updated_at"].as_str().is_some_and(|u| u > after)))
                .count() as u64
        };
        let condition =
            |index: &str, values: &[&str]| (index.to_owned(), values.iter().map(|v| (*v).to_owned()).collect());
        for (wanted_statuses, wanted_severities) in [
            (&["open"][..], &["critical"][..]),
            (&["open", "suppressed", "open"], &["critical", "low"]),
            (&["resolved"], &["high"]),
        ] {
            let conditions = [condition("severity", wanted_severities), condition("status", wanted_statuses)];
            assert_eq!(
                db.count_matching(acme, "vulnerability-findings", &conditions, None)?,
                brute(wanted_statuses, wanted_severities, None),
                "{wanted_statuses:?} {wanted_severities:?}"
            );
        }
        for after in ["2026-01-01T00:00:00Z", "2026-01-01T02:10:30Z", "2026-01-01T02:10:31Z", "2026-01-01T06:59:59Z"] {
            let nanos = Timestamp::parse(after).map_or(0, |t| t.0);
            assert_eq!(
                db.count_matching(acme, "vulnerability-findings", &[], Some(nanos))?,
                brute(&[], &[], Some(after)),
                "after {after}"
            );
            let open = [condition("status", &["open"])];
            assert_eq!(
                db.count_matching(acme, "vulnerability-findings", &open, Some(nanos))?,
                brute(&["open"], &[], Some(after)),
                "open after {after}"
            );
        }
        assert_eq!(db.count_matching(globex, "vulnerability-findings", &[], Some(0))?, 10);
        let repeated = [condition("status", &["open", "open"])];
        assert_eq!(db.count_matching(acme, "vulnerability-findings", &repeated, None)?, brute(&["open"], &[], None));
        assert!(db.verify_indexes()?.is_empty(), "{:?}", db.verify_indexes()?);
        Ok(())
    }

    #[test]
    fn organizations_see_only_their_own_range() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
        let db = Database::open(dir.path())?;
        let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        let records: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(n, id)| {
                let status = if n % 2 == 0 { "active" } else { "paused" };
                {
                    let at = format!("2026-01-0{}T00:00:00Z", 5 - n);
                    json!({"id": id.to_string(), "status": status, "created_at": at, "updated_at": at})
                }
            })
            .collect();
        db.insert_records(acme, "scopes", &records[..3])?;
        db.insert_records(globex, "scopes", &records[3..])?;

        assert_eq!(db.count(acme, "scopes")?, 3);
        let acme_ids: Vec<Uuid> = db.scan(acme, "scopes", None, 100, false)?.into_iter().map(|(id, _)| id).collect();
        assert_eq!(acme_ids, ids[..3]);
        let after_first: Vec<Uuid> =
            db.scan(acme, "scopes", Some(ids[0]), 100, false)?.into_iter().map(|(id, _)| id).collect();
        assert_eq!(after_first, ids[1..3]);
        let newest_first: Vec<Uuid> =
            db.scan(acme, "scopes", Some(ids[2]), 100, true)?.into_iter().map(|(id, _)| id).collect();
        assert_eq!(newest_first, [ids[1], ids[0]]);
        assert!(db.get(acme, "scopes", ids[4])?.is_none(), "another organization's record");
        assert!(db.get(globex, "scopes", ids[4])?.is_some());

        // Indexes: per organization, in created_at order, with counts.
        let active: Vec<Uuid> = db
            .index_scan(acme, "scopes", "status", "active", None, 100, false)?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(active, [ids[2], ids[0]], "created_at order, not id order");
        assert_eq!(db.index_count(acme, "scopes", "status", "active")?, 2);
        assert_eq!(db.index_count(globex, "scopes", "status", "active")?, 1);
        assert_eq!(db.count(globex, "scopes")?, 2);
        assert!(matches!(db.index_count(acme, "scopes", "colour", "red"), Err(StoreError::UnknownIndex(_))));

        // Replacing a record moves its index entries and counts.
        let paused = json!({"id": ids[0].to_string(), "status": "paused",
                            "created_at": "2026-01-05T00:00:00Z", "updated_at": "2026-02-01T00:00:00Z"});
        db.insert_records(acme, "scopes", &[paused])?;
        assert_eq!(db.index_count(acme, "scopes", "status", "active")?, 1);
        assert_eq!(db.index_count(acme, "scopes", "status", "paused")?, 2);
        assert_eq!(db.count(acme, "scopes")?, 3);
        let after_first: Vec<Uuid> = db
            .index_scan(acme, "scopes", "created_at", "", Some((i64::MIN, Uuid::nil())), 100, false)?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(after_first, [ids[2], ids[1], ids[0]]);

        // A record without created_at is refused and nothing is written.
        let bad = [
            json!({"id": Uuid::now_v7().to_string(), "status": "active",
                   "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}),
            json!({"id": Uuid::now_v7().to_string(), "status": "active"}),
        ];
        assert!(db.insert_records(acme, "scopes", &bad).is_err());
        assert_eq!(db.count(acme, "scopes")?, 3);
        assert_eq!(db.verify_indexes()?, Vec::<String>::new());

        // Lost index entries are found.
        let trees = &db.collections["scopes"];
        let (some_block, entries) = trees.index.first()?.ok_or_else(|| StoreError::Corrupt("no entries".into()))?;
        trees.index.remove(some_block)?;
        let lost = index_blocks::decode_block(&entries)?.len();
        assert_eq!(db.verify_indexes()?, [format!("scopes: {lost} index entries missing, 0 pointing at nothing")]);
        Ok(())
    }

    #[test]
    fn a_second_process_gets_a_clear_error() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
        let _first = Database::open(dir.path())?;
        // sled's lock is per process file handle; a second open in the same
        // process hits the same lock as a second process would.
        match Database::open(dir.path()) {
            Err(StoreError::Locked(path)) => assert!(path.contains(&dir.path().display().to_string())),
            Err(other) => panic!("expected a lock error, got {other}"),
            Ok(_) => panic!("a second open must fail"),
        }
        Ok(())
    }
}
