//! Typed JSON documents on the store's document seam: read, created once,
//! changed by compare-and-swap (every host sharing the store sees the same
//! versions, so two hosts changing one document never lose a change).

use esr_store::{Store, StoreError};
use serde::Serialize;
use serde::de::DeserializeOwned;

fn corrupt(kind: &str, id: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{kind} {id}: {error}"))
}

/// The document of `kind` named `id`, with its version.
pub(crate) fn load<T: DeserializeOwned>(db: &dyn Store, kind: &str, id: &str) -> Result<Option<(T, u64)>, StoreError> {
    let Some(document) = db.document(kind, id)? else { return Ok(None) };
    let value = serde_json::from_slice(&document.body).map_err(|error| corrupt(kind, id, error))?;
    Ok(Some((value, document.version)))
}

/// Every document of `kind`, in id order.
pub(crate) fn load_all<T: DeserializeOwned>(db: &dyn Store, kind: &str) -> Result<Vec<T>, StoreError> {
    db.documents(kind)?
        .into_iter()
        .map(|document| serde_json::from_slice(&document.body).map_err(|error| corrupt(kind, &document.id, error)))
        .collect()
}

/// Stores a new document; `false` when one of that name exists.
pub(crate) fn create<T: Serialize>(db: &dyn Store, kind: &str, id: &str, value: &T) -> Result<bool, StoreError> {
    let body = serde_json::to_vec(value).map_err(|error| corrupt(kind, id, error))?;
    Ok(db.swap_document(kind, id, None, &body)?.is_some())
}

/// Applies `change` to the stored document until it is written over the
/// version it read; `change` answers whether there is anything to write.
/// The document as it now is, or `None` when there is none.
pub(crate) fn modify<T: Serialize + DeserializeOwned>(
    db: &dyn Store,
    kind: &str,
    id: &str,
    mut change: impl FnMut(&mut T) -> bool,
) -> Result<Option<T>, StoreError> {
    loop {
        let Some((mut value, version)) = load::<T>(db, kind, id)? else { return Ok(None) };
        if !change(&mut value) {
            return Ok(Some(value));
        }
        let body = serde_json::to_vec(&value).map_err(|error| corrupt(kind, id, error))?;
        if db.swap_document(kind, id, Some(version), &body)?.is_some() {
            return Ok(Some(value));
        }
    }
}
