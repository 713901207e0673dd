//! Large writes in bounded transactions that stay all or nothing.
//!
//! sled frees the pages a transaction replaces only once the whole commit
//! ends (it holds one epoch guard throughout), so one transaction of a
//! report's 10,000 findings held most of a gigabyte. A write of more than
//! [`WRITES_PER_TRANSACTION`] keys is therefore written twice:
//!
//! 1. staged: every key it sets or removes, with the tree it belongs to,
//!    goes to the `staged-writes` tree, a few large values (one per
//!    transaction's worth), then a marker after them, then a flush. The marker is the commit point: without it
//!    the staged keys are discarded, with it they are applied;
//! 2. applied in bounded transactions while the organization's readers
//!    wait (its gate is closed), so no reader sees half of it; other
//!    organizations' readers wait for one bounded transaction at most;
//! 3. flushed, then unstaged: the marker first, then the keys.
//!
//! A write found staged and marked (the process stopped during step 2, or
//! a transaction failed) is applied again when the store opens and before
//! the organization's next write: every staged key holds the value it ends
//! with, so applying it twice is applying it once.

use std::collections::HashMap;

use sled::Transactional;
use uuid::Uuid;

use esr_store::StoreError;

/// The most keys one transaction sets or removes.
pub(super) const WRITES_PER_TRANSACTION: usize = 4096;

/// The tree staged writes wait in: `organization ‖ n (u64)` → the n-th
/// segment of writes; `organization ‖ u64::MAX` → the marker (how many
/// writes there are).
pub(super) const STAGED_WRITES: &str = "staged-writes";

const MARKER: u64 = u64::MAX;

/// One key a write sets (`Some`) or removes (`None`), in the tree at
/// position `tree` of the write's tree list.
pub(super) struct KeyWrite {
    pub tree: usize,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Writes `writes` to `trees`: in one transaction when they fit one,
/// else staged (see the module's text). Durable on return.
pub(super) fn commit(
    db: &sled::Db,
    staged: &sled::Tree,
    gate: &std::sync::RwLock<()>,
    organization: Uuid,
    trees: &[&sled::Tree],
    writes: &[KeyWrite],
) -> Result<(), StoreError> {
    if writes.len() <= WRITES_PER_TRANSACTION {
        apply(trees, writes)?;
        db.flush().map_err(crate::store_error)?;
        return Ok(());
    }
    stage(db, staged, organization, trees, writes)?;
    {
        let _readers_wait = gate.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for chunk in writes.chunks(WRITES_PER_TRANSACTION) {
            apply(trees, chunk)?;
        }
    }
    db.flush().map_err(crate::store_error)?;
    unstage(db, staged, organization)
}

/// Applies what is staged and marked for `organization` (or, with
/// `None`, for every organization), and discards what is staged unmarked.
/// Returns how many writes were applied.
pub(super) fn finish(db: &sled::Db, staged: &sled::Tree, organization: Option<Uuid>) -> Result<usize, StoreError> {
    let organizations: Vec<Uuid> = match organization {
        Some(organization) => vec![organization],
        None => {
            let mut found = Vec::new();
            let mut next: Vec<u8> = Vec::new();
            while let Some((key, _)) = staged.range(next.as_slice()..).next().transpose().map_err(crate::store_error)? {
                let organization = organization_of(&key)?;
                found.push(organization);
                match organization.as_u128().checked_add(1) {
                    Some(after) => next = after.to_be_bytes().to_vec(),
                    None => break,
                }
            }
            found
        }
    };
    let mut applied = 0;
    for organization in organizations {
        if staged.get(staged_key(organization, MARKER)).map_err(crate::store_error)?.is_some() {
            applied += apply_staged(db, staged, organization)?;
            db.flush().map_err(crate::store_error)?;
            unstage(db, staged, organization)?;
        } else if staged.scan_prefix(organization.as_bytes()).next().is_some() {
            unstage(db, staged, organization)?;
        }
    }
    Ok(applied)
}

/// Sets and removes `writes` in one transaction.
fn apply(trees: &[&sled::Tree], writes: &[KeyWrite]) -> Result<(), StoreError> {
    let outcome = trees.transaction(|views| {
        for write in writes {
            let view = &views[write.tree];
            match &write.value {
                Some(value) => view.insert(write.key.as_slice(), value.as_slice())?,
                None => view.remove(write.key.as_slice())?,
            };
        }
        Ok::<(), sled::transaction::ConflictableTransactionError<StoreError>>(())
    });
    super::transaction_outcome(outcome)
}

/// Step 1: the writes, then the marker, durably.
fn stage(
    db: &sled::Db,
    staged: &sled::Tree,
    organization: Uuid,
    trees: &[&sled::Tree],
    writes: &[KeyWrite],
) -> Result<(), StoreError> {
    // What an earlier write left unmarked.
    unstage(db, staged, organization)?;
    let names: Vec<sled::IVec> = trees.iter().map(|tree| tree.name()).collect();
    // A segment per transaction's worth, each one value: a few large
    // values cost sled far less than as many keys as the write has.
    for (n, chunk) in (0..).zip(writes.chunks(WRITES_PER_TRANSACTION)) {
        let mut segment = Vec::new();
        for write in chunk {
            let encoded = encode(&names[write.tree], write);
            segment.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
            segment.extend_from_slice(&encoded);
        }
        staged.insert(staged_key(organization, n), segment).map_err(crate::store_error)?;
    }
    staged
        .insert(staged_key(organization, MARKER), &(writes.len() as u64).to_be_bytes()[..])
        .map_err(crate::store_error)?;
    db.flush().map_err(crate::store_error)?;
    Ok(())
}

/// Removes what is staged for `organization`: the marker first, so a
/// stop half-way leaves staged writes that are discarded, never half a
/// marked set.
fn unstage(db: &sled::Db, staged: &sled::Tree, organization: Uuid) -> Result<(), StoreError> {
    let marker = staged_key(organization, MARKER);
    if staged.get(marker).map_err(crate::store_error)?.is_some() {
        staged.remove(marker).map_err(crate::store_error)?;
        db.flush().map_err(crate::store_error)?;
    }
    loop {
        let mut batch = sled::Batch::default();
        let mut removed = 0;
        for key in staged.scan_prefix(organization.as_bytes()).keys().take(WRITES_PER_TRANSACTION) {
            batch.remove(key.map_err(crate::store_error)?);
            removed += 1;
        }
        if removed == 0 {
            return Ok(());
        }
        staged.apply_batch(batch).map_err(crate::store_error)?;
    }
}

/// Step 2 again, from the staged writes.
fn apply_staged(db: &sled::Db, staged: &sled::Tree, organization: Uuid) -> Result<usize, StoreError> {
    let mut opened: HashMap<Vec<u8>, sled::Tree> = HashMap::new();
    let mut applied = 0;
    for segment in staged.range(staged_key(organization, 0)..staged_key(organization, MARKER)).values() {
        let segment = segment.map_err(crate::store_error)?;
        let mut names: Vec<&[u8]> = Vec::new();
        let mut writes = Vec::new();
        for (tree, key, value) in segment_writes(&segment)? {
            let position = match names.iter().position(|name| *name == tree) {
                Some(position) => position,
                None => {
                    if !opened.contains_key(tree) {
                        opened.insert(tree.to_vec(), db.open_tree(tree).map_err(crate::store_error)?);
                    }
                    names.push(tree);
                    names.len() - 1
                }
            };
            writes.push(KeyWrite { tree: position, key: key.to_vec(), value: value.map(<[u8]>::to_vec) });
        }
        let trees: Vec<&sled::Tree> = names.iter().filter_map(|name| opened.get(*name)).collect();
        apply(&trees, &writes)?;
        applied += writes.len();
    }
    Ok(applied)
}

/// The writes a segment holds, each `length (u32) ‖ write`.
fn segment_writes(mut segment: &[u8]) -> Result<Vec<DecodedWrite<'_>>, StoreError> {
    let mut writes = Vec::new();
    while !segment.is_empty() {
        let corrupt = || StoreError::Corrupt("a staged segment is cut short".into());
        let (length, rest) = segment.split_first_chunk::<4>().ok_or_else(corrupt)?;
        let length = usize::try_from(u32::from_be_bytes(*length)).map_err(|_| corrupt())?;
        let (write, rest) = rest.split_at_checked(length).ok_or_else(corrupt)?;
        writes.push(decode(write)?);
        segment = rest;
    }
    Ok(writes)
}

fn staged_key(organization: Uuid, n: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..16].copy_from_slice(organization.as_bytes());
    key[16..].copy_from_slice(&n.to_be_bytes());
    key
}

fn organization_of(key: &[u8]) -> Result<Uuid, StoreError> {
    key.get(..16)
        .and_then(|bytes| Uuid::from_slice(bytes).ok())
        .ok_or_else(|| StoreError::Corrupt("a staged write's key is not an organization's".into()))
}

/// `tree name length (u16) ‖ name ‖ key length (u32) ‖ key ‖ 1 ‖ value`,
/// or `… ‖ 0` for a removal.
fn encode(tree: &[u8], write: &KeyWrite) -> Vec<u8> {
    let value_len = write.value.as_ref().map_or(0, Vec::len);
    let mut bytes = Vec::with_capacity(2 + tree.len() + 4 + write.key.len() + 1 + value_len);
    bytes.extend_from_slice(&(tree.len() as u16).to_be_bytes());
    bytes.extend_from_slice(tree);
    bytes.extend_from_slice(&(write.key.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&write.key);
    match &write.value {
        Some(value) => {
            bytes.push(1);
            bytes.extend_from_slice(value);
        }
        None => bytes.push(0),
    }
    bytes
}

type DecodedWrite<'a> = (&'a [u8], &'a [u8], Option<&'a [u8]>);

fn decode(bytes: &[u8]) -> Result<DecodedWrite<'_>, StoreError> {
    let corrupt = || StoreError::Corrupt("a staged write is cut short".into());
    let (length, rest) = bytes.split_first_chunk::<2>().ok_or_else(corrupt)?;
    let (tree, rest) = rest.split_at_checked(u16::from_be_bytes(*length).into()).ok_or_else(corrupt)?;
    let (length, rest) = rest.split_first_chunk::<4>().ok_or_else(corrupt)?;
    let key_len = usize::try_from(u32::from_be_bytes(*length)).map_err(|_| corrupt())?;
    let (key, rest) = rest.split_at_checked(key_len).ok_or_else(corrupt)?;
    match rest.split_first() {
        Some((1, value)) => Ok((tree, key, Some(value))),
        Some((0, [])) => Ok((tree, key, None)),
        _ => Err(corrupt()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn writes(n: usize) -> Vec<KeyWrite> {
        (0..n)
            .map(|i| KeyWrite {
                tree: i % 2,
                key: (i as u64).to_be_bytes().to_vec(),
                value: (i % 7 != 0).then(|| vec![b'x'; i % 50]),
            })
            .collect()
    }

    fn open(dir: &std::path::Path) -> (sled::Db, sled::Tree, sled::Tree, sled::Tree) {
        // sled's flusher thread lets go of a dropped database's lock a
        // moment later.
        let db = (0..100)
            .find_map(|_| {
                let opened = sled::Config::new().path(dir).open();
                if opened.is_err() {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                opened.ok()
            })
            .expect("the database opens");
        let staged = db.open_tree(STAGED_WRITES).unwrap();
        let (a, b) = (db.open_tree("a").unwrap(), db.open_tree("b").unwrap());
        (db, staged, a, b)
    }

    fn expected(tree: &sled::Tree, writes: &[KeyWrite], position: usize) {
        for write in writes.iter().filter(|write| write.tree == position) {
            assert_eq!(tree.get(&write.key).unwrap().map(|v| v.to_vec()), write.value);
        }
    }

    #[test]
    fn a_large_write_is_applied_whole_and_leaves_nothing_staged() {
        let dir = tempfile::tempdir().unwrap();
        let (db, staged, a, b) = open(dir.path());
        let organization = Uuid::now_v7();
        // Keys the write removes are there before.
        for i in (0..10_000u64).step_by(7) {
            [&a, &b][(i % 2) as usize].insert(i.to_be_bytes(), &b"old"[..]).unwrap();
        }
        let writes = writes(10_000);
        commit(&db, &staged, &Default::default(), organization, &[&a, &b], &writes).unwrap();
        expected(&a, &writes, 0);
        expected(&b, &writes, 1);
        assert!(staged.is_empty());
    }

    #[test]
    fn a_staged_write_is_applied_at_the_next_open_only_when_marked() {
        let dir = tempfile::tempdir().unwrap();
        let (marked, unmarked) = (Uuid::now_v7(), Uuid::now_v7());
        let writes = writes(9_000);
        {
            let (db, staged, a, b) = open(dir.path());
            // Both staged, as a stop during step 2 leaves them; one of
            // them loses its marker, as a stop during step 1 would.
            stage(&db, &staged, marked, &[&a, &b], &writes).unwrap();
            let others: Vec<KeyWrite> = (0..5_000u64)
                .map(|i| KeyWrite { tree: 0, key: [b"u".as_slice(), &i.to_be_bytes()].concat(), value: Some(vec![1]) })
                .collect();
            stage(&db, &staged, unmarked, &[&a], &others).unwrap();
            staged.remove(staged_key(unmarked, MARKER)).unwrap();
            // Half applied.
            apply(&[&a, &b], &writes[..4_096]).unwrap();
            db.flush().unwrap();
        }
        let (db, staged, a, b) = open(dir.path());
        assert_eq!(finish(&db, &staged, None).unwrap(), 9_000);
        expected(&a, &writes, 0);
        expected(&b, &writes, 1);
        assert!(staged.is_empty());
        assert!(a.scan_prefix(b"u").next().is_none(), "an unmarked write is discarded");
    }

    #[test]
    fn a_staged_write_that_is_cut_short_is_corrupt_not_a_panic() {
        let write = KeyWrite { tree: 0, key: b"key".to_vec(), value: Some(b"value".to_vec()) };
        let bytes = encode(b"tree", &write);
        assert_eq!(decode(&bytes).unwrap(), (&b"tree"[..], &b"key"[..], Some(&b"value"[..])));
        for cut in 0..bytes.len() - 5 {
            assert!(decode(&bytes[..cut]).is_err(), "{cut}");
        }
        let segment = [&(bytes.len() as u32).to_be_bytes()[..], &bytes].concat();
        assert_eq!(segment_writes(&segment).unwrap().len(), 1);
        for cut in 1..segment.len() {
            assert!(segment_writes(&segment[..cut]).is_err(), "{cut}");
        }
    }
}
