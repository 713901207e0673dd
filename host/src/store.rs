//! Storage: the sled layout and the only code that touches it.
//!
//! One tree per collection, keyed by organization id (16 bytes) then record
//! id (16 bytes), so one organization's records are one contiguous range in
//! id order, which is creation order because ids are UUIDv7. Organizations
//! and API keys (by hash) have their own trees. Every write is flushed
//! before it is acknowledged: sled's background flusher loses acknowledged
//! writes on a crash.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The collections the public API serves, named as in its paths.
pub const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];

/// The most records one `scan` returns.
pub const MAX_SCAN: usize = 1000;

const ORGANIZATIONS: &str = "organizations";
const API_KEYS: &str = "api-keys";
const META: &str = "meta";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the data directory {0} is in use by another esr process; stop it first, or talk to it through its admin listener"
    )]
    Locked(String),
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
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
}

/// The database: a sled instance with the product's trees.
#[derive(Clone)]
pub struct Database {
    db: sled::Db,
    organizations: sled::Tree,
    api_keys: sled::Tree,
    meta: sled::Tree,
    collections: BTreeMap<&'static str, sled::Tree>,
}

/// One stored record with its id.
pub type StoredRecord = (Uuid, sled::IVec);

impl Database {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Database, StoreError> {
        std::fs::create_dir_all(dir).map_err(|error| StoreError::Sled(sled::Error::Io(error)))?;
        let db =
            sled::Config::new().path(dir).cache_capacity(256 * 1024 * 1024).open().map_err(|error| match error {
                // sled reports the lock as an `Other` error wrapping `WouldBlock`.
                sled::Error::Io(ref io)
                    if io.kind() == std::io::ErrorKind::WouldBlock
                        || io.to_string().contains("could not acquire lock") =>
                {
                    StoreError::Locked(dir.display().to_string())
                }
                other => StoreError::Sled(other),
            })?;
        let mut collections = BTreeMap::new();
        for name in COLLECTIONS {
            collections.insert(name, db.open_tree(format!("records/{name}"))?);
        }
        Ok(Database {
            organizations: db.open_tree(ORGANIZATIONS)?,
            api_keys: db.open_tree(API_KEYS)?,
            meta: db.open_tree(META)?,
            collections,
            db,
        })
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
        for tree in self.collections.values() {
            tree.clear()?;
        }
        self.flush()
    }

    /// Health probe: a cheap read that touches the storage engine.
    pub fn probe(&self) -> Result<(), StoreError> {
        self.organizations.first()?;
        Ok(())
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

    pub fn api_key(&self, key_hash: &[u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        match self.api_keys.get(key_hash)? {
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    fn tree(&self, collection: &str) -> Option<&sled::Tree> {
        self.collections.get(collection)
    }

    /// Writes records (JSON objects with a UUID `id`) of one organization
    /// and collection in one atomic batch, durable on return.
    pub fn insert_records(&self, organization: Uuid, collection: &str, records: &[Value]) -> Result<(), StoreError> {
        let tree = self
            .tree(collection)
            .ok_or_else(|| StoreError::InvalidRecord(format!("unknown collection {collection}")))?;
        let mut batch = sled::Batch::default();
        for record in records {
            let id = record
                .get("id")
                .and_then(Value::as_str)
                .and_then(|id| Uuid::parse_str(id).ok())
                .ok_or_else(|| StoreError::InvalidRecord(format!("a {collection} record has no UUID id")))?;
            let bytes = serde_json::to_vec(record).map_err(|e| StoreError::InvalidRecord(e.to_string()))?;
            batch.insert(&record_key(organization, id)[..], bytes);
        }
        tree.apply_batch(batch)?;
        self.flush()
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
        let Some(tree) = self.tree(collection) else { return Ok(0) };
        let mut count = 0;
        for key in tree.scan_prefix(organization.as_bytes()).keys() {
            key?;
            count += 1;
        }
        Ok(count)
    }
}

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
    use serde_json::json;

    use super::*;

    #[test]
    fn organizations_see_only_their_own_range() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
        let db = Database::open(dir.path())?;
        let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        let records: Vec<Value> = ids.iter().map(|id| json!({"id": id.to_string()})).collect();
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
