//! The host's documents (webhook subscriptions and what their delivery
//! keeps): one tree, keyed by kind and id, each value its version (8 bytes,
//! big-endian) followed by the body. One process owns a sled directory,
//! so a compare-and-swap on the exact bytes read is the version check.

use esr_store::{Document, StoreError};

use super::{Trees, store_error};

pub(super) const DOCUMENTS: &str = "documents";

/// A document's key: its kind, a NUL (no kind holds one), its id.
fn key(kind: &str, id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(kind.len() + id.len() + 1);
    key.extend_from_slice(kind.as_bytes());
    key.push(0);
    key.extend_from_slice(id.as_bytes());
    key
}

/// A stored value as its version and body.
fn decode(id: String, value: &[u8]) -> Result<Document, StoreError> {
    let (version, body) = value
        .split_first_chunk::<8>()
        .ok_or_else(|| StoreError::Corrupt(format!("document {id:?} is shorter than its version")))?;
    Ok(Document { id, version: u64::from_be_bytes(*version), body: body.to_vec() })
}

impl Trees {
    pub(super) fn document(&self, kind: &str, id: &str) -> Result<Option<Document>, StoreError> {
        self.documents.get(key(kind, id)).map_err(store_error)?.map(|value| decode(id.to_owned(), &value)).transpose()
    }

    pub(super) fn documents(&self, kind: &str) -> Result<Vec<Document>, StoreError> {
        let prefix = key(kind, "");
        let mut found = Vec::new();
        for entry in self.documents.scan_prefix(&prefix) {
            let (stored_key, value) = entry.map_err(store_error)?;
            let id = String::from_utf8_lossy(&stored_key[prefix.len()..]).into_owned();
            found.push(decode(id, &value)?);
        }
        Ok(found)
    }

    pub(super) fn swap_document(
        &self,
        kind: &str,
        id: &str,
        seen: Option<u64>,
        body: &[u8],
    ) -> Result<Option<u64>, StoreError> {
        let key = key(kind, id);
        let current = self.documents.get(&key).map_err(store_error)?;
        let found = current.as_deref().map(|value| decode(id.to_owned(), value)).transpose()?;
        if found.as_ref().map(|document| document.version) != seen {
            return Ok(None);
        }
        let version = seen.map_or(1, |version| version + 1);
        let mut value = Vec::with_capacity(8 + body.len());
        value.extend_from_slice(&version.to_be_bytes());
        value.extend_from_slice(body);
        let swapped =
            self.documents.compare_and_swap(&key, current.as_deref(), Some(value)).map_err(store_error)?.is_ok();
        if !swapped {
            return Ok(None);
        }
        self.flush()?;
        Ok(Some(version))
    }

    pub(super) fn delete_document(&self, kind: &str, id: &str) -> Result<bool, StoreError> {
        let removed = self.documents.remove(key(kind, id)).map_err(store_error)?.is_some();
        if removed {
            self.flush()?;
        }
        Ok(removed)
    }
}
