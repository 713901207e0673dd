//! Index entries kept in blocks: one sled key per run of up to
//! [`BLOCK_ENTRIES`] entries of one index value, instead of one key per
//! entry.
//!
//! An entry is `position (8 bytes, order-preserving) ‖ record id (16)`. A
//! block's key is the value's prefix (see `store::value_prefix`) followed by
//! its first entry; its value is its entries, sorted, concatenated. Blocks
//! of one value do not overlap, so walking them in key order walks the
//! entries in order.
//!
//! Why: sled keeps per-page bookkeeping in memory for every page and splits
//! a leaf page every 16 keys, so with a key per entry (14 per finding) the
//! index alone held ~900 MiB resident for a million findings, and an import
//! wrote 20 keys per record. Blocks cut both by two orders of magnitude
//! (docs/performance.md).
//!
//! Writes are planned outside sled's transaction, which cannot read ranges:
//! the store's writer lock keeps the blocks read here unchanged until the
//! transaction that replaces them commits.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::store::StoreError;

/// Entries per block at most: a 3 KiB value, small enough to rewrite on
/// every change, large enough that keys are few.
pub const BLOCK_ENTRIES: usize = 128;
/// `position ‖ record id`.
pub const ENTRY_BYTES: usize = 24;

pub type Entry = [u8; ENTRY_BYTES];

/// Splits a full entry key (`prefix ‖ entry`) into its prefix and entry.
pub fn split_entry_key(key: &[u8]) -> Result<(&[u8], Entry), StoreError> {
    let at = key.len().checked_sub(ENTRY_BYTES).ok_or_else(|| corrupt("an index key is too short"))?;
    let entry = Entry::try_from(&key[at..]).map_err(|_| corrupt("an index key is too short"))?;
    Ok((&key[..at], entry))
}

/// The entries a block holds, checked to be whole and in order.
pub fn decode_block(value: &[u8]) -> Result<Vec<Entry>, StoreError> {
    if value.is_empty() || !value.len().is_multiple_of(ENTRY_BYTES) {
        return Err(corrupt("an index block is not a whole number of entries"));
    }
    let entries: Vec<Entry> =
        value.chunks_exact(ENTRY_BYTES).map(|chunk| Entry::try_from(chunk).unwrap_or([0; ENTRY_BYTES])).collect();
    if entries.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err(corrupt("an index block is out of order"));
    }
    Ok(entries)
}

fn block_key(prefix: &[u8], first: &Entry) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + ENTRY_BYTES);
    key.extend_from_slice(prefix);
    key.extend_from_slice(first);
    key
}

/// The last key of any block of `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    block_key(prefix, &[0xff; ENTRY_BYTES])
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

/// The block that holds (or would hold) `entry`: the last block starting
/// at or before it, else the value's first block.
fn containing_block(tree: &sled::Tree, prefix: &[u8], entry: &Entry) -> Result<Option<sled::IVec>, StoreError> {
    if let Some(found) = tree.range(prefix.to_vec()..=block_key(prefix, entry)).next_back() {
        return Ok(Some(found?.0));
    }
    match tree.range(prefix.to_vec()..=prefix_end(prefix)).next() {
        Some(found) => Ok(Some(found?.0)),
        None => Ok(None),
    }
}

/// The entries of one index value in order (or in reverse), strictly
/// after `after` (before it, in reverse), read block by block.
pub struct Entries {
    blocks: Box<dyn DoubleEndedIterator<Item = sled::Result<(sled::IVec, sled::IVec)>> + Send>,
    reverse: bool,
    after: Option<Entry>,
    current: std::vec::IntoIter<Entry>,
}

impl Entries {
    pub fn new(tree: &sled::Tree, prefix: &[u8], after: Option<&Entry>, reverse: bool) -> Result<Entries, StoreError> {
        let end = prefix_end(prefix);
        let blocks = match (after, reverse) {
            (None, _) => tree.range(prefix.to_vec()..=end),
            // Forward from the block that holds `after`.
            (Some(after), false) => match containing_block(tree, prefix, after)? {
                Some(start) => tree.range(start.to_vec()..=end),
                None => tree.range(prefix.to_vec()..=end),
            },
            // Backward from the last block that starts before `after`.
            (Some(after), true) => {
                tree.range((Bound::Included(prefix.to_vec()), Bound::Excluded(block_key(prefix, after))))
            }
        };
        Ok(Entries { blocks: Box::new(blocks), reverse, after: after.copied(), current: Vec::new().into_iter() })
    }

    fn next_entry(&mut self) -> Result<Option<Entry>, StoreError> {
        loop {
            let next = if self.reverse { self.current.next_back() } else { self.current.next() };
            if let Some(entry) = next {
                let past = match &self.after {
                    None => true,
                    Some(after) if self.reverse => &entry < after,
                    Some(after) => &entry > after,
                };
                if past {
                    return Ok(Some(entry));
                }
                continue;
            }
            let block = if self.reverse { self.blocks.next_back() } else { self.blocks.next() };
            match block {
                None => return Ok(None),
                Some(block) => self.current = decode_block(&block?.1)?.into_iter(),
            }
        }
    }
}

impl Iterator for Entries {
    type Item = Result<Entry, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry().transpose()
    }
}

/// What a write does to the index tree: blocks to write, then blocks to
/// remove.
#[derive(Debug, Default)]
pub struct BlockChanges {
    pub write: Vec<(Vec<u8>, Vec<u8>)>,
    pub remove: Vec<Vec<u8>>,
}

/// One index value's prefix and its entries added (`true`) or removed.
type ValueChanges<'k> = (&'k [u8], Vec<(Entry, bool)>);

/// Works out the block writes that add (`true`) or remove (`false`) the
/// given full entry keys, reading the blocks they fall in from `tree`.
pub fn plan(tree: &sled::Tree, changes: &BTreeMap<Vec<u8>, bool>) -> Result<BlockChanges, StoreError> {
    let mut planned = BlockChanges::default();
    // Keys sort by prefix first, and no prefix is a prefix of another
    // (values carry their length), so one value's changes are adjacent.
    let mut by_prefix: Vec<ValueChanges<'_>> = Vec::new();
    for (key, present) in changes {
        let (prefix, entry) = split_entry_key(key)?;
        match by_prefix.last_mut() {
            Some((last, entries)) if *last == prefix => entries.push((entry, *present)),
            _ => by_prefix.push((prefix, vec![(entry, *present)])),
        }
    }
    for (prefix, entries) in by_prefix {
        // The blocks touched, by the key they have now (`None`: a new one).
        let mut touched: BTreeMap<Option<Vec<u8>>, BTreeSet<Entry>> = BTreeMap::new();
        // The block the last lookup found and where the next one starts:
        // entries come in order, so most fall in the block before them.
        let mut last_found: Option<(Option<Vec<u8>>, Option<Entry>)> = None;
        for (entry, present) in entries {
            let block = match &last_found {
                Some((block, next)) if next.is_none_or(|next| entry < next) => block.clone(),
                _ => {
                    let block = containing_block(tree, prefix, &entry)?.map(|key| key.to_vec());
                    let next = match &block {
                        Some(key) => {
                            match tree.range((Bound::Excluded(key.clone()), Bound::Included(prefix_end(prefix)))).next()
                            {
                                Some(found) => Some(split_entry_key(&found?.0)?.1),
                                None => None,
                            }
                        }
                        None => None,
                    };
                    last_found = Some((block.clone(), next));
                    block
                }
            };
            if !touched.contains_key(&block) {
                let held = match &block {
                    Some(key) => {
                        let value = tree.get(key)?.ok_or_else(|| corrupt("an index block vanished"))?;
                        decode_block(&value)?.into_iter().collect()
                    }
                    None => BTreeSet::new(),
                };
                touched.insert(block.clone(), held);
            }
            if let Some(held) = touched.get_mut(&block) {
                if present {
                    held.insert(entry);
                } else {
                    held.remove(&entry);
                }
            }
        }
        for (old_key, held) in touched {
            let held: Vec<Entry> = held.into_iter().collect();
            let mut written = Vec::new();
            for chunk in even_chunks(&held) {
                let key = block_key(prefix, &chunk[0]);
                written.push(key.clone());
                planned.write.push((key, chunk.concat()));
            }
            if let Some(old_key) = old_key.filter(|old| !written.contains(old)) {
                planned.remove.push(old_key);
            }
        }
    }
    Ok(planned)
}

/// `entries` in blocks of at most [`BLOCK_ENTRIES`], of even sizes.
pub fn even_chunks(entries: &[Entry]) -> impl Iterator<Item = &[Entry]> {
    let blocks = entries.len().div_ceil(BLOCK_ENTRIES).max(1);
    entries.chunks(entries.len().div_ceil(blocks).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> Entry {
        let mut entry = [0u8; ENTRY_BYTES];
        entry[..8].copy_from_slice(&n.to_be_bytes());
        entry[8..16].copy_from_slice(&(n * 7).to_be_bytes());
        entry
    }

    fn key(prefix: &[u8], n: u64) -> Vec<u8> {
        block_key(prefix, &entry(n))
    }

    fn apply(tree: &sled::Tree, changes: &BTreeMap<Vec<u8>, bool>) -> Result<(), StoreError> {
        let planned = plan(tree, changes)?;
        for (key, value) in planned.write {
            tree.insert(key, value)?;
        }
        for key in planned.remove {
            tree.remove(key)?;
        }
        Ok(())
    }

    fn walk(tree: &sled::Tree, prefix: &[u8], after: Option<u64>, reverse: bool) -> Result<Vec<u64>, StoreError> {
        let after = after.map(entry);
        Entries::new(tree, prefix, after.as_ref(), reverse)?
            .map(|entry| entry.map(|e| u64::from_be_bytes(e[..8].try_into().unwrap_or_default())))
            .collect()
    }

    /// Random adds and removes on three values agree with a sorted set
    /// after every step, forwards, backwards and from every position.
    #[test]
    fn blocks_follow_a_sorted_set() -> Result<(), StoreError> {
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
        let tree = sled::open(dir.path())?.open_tree("index")?;
        let prefixes: [&[u8]; 3] = [b"a\0\0\0\0\x01x", b"a\0\0\0\0\x02xy", b"b\0\0\0\0\x00"];
        let mut expected: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); 3];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for step in 0..60 {
            let mut changes = BTreeMap::new();
            // Appends, random inserts and removes, as imports make them.
            for _ in 0..rng.gen_range(1..400) {
                let which = rng.gen_range(0..3);
                let n = if rng.gen_bool(0.5) {
                    10_000 + step * 500 + rng.gen_range(0..500)
                } else {
                    rng.gen_range(0..20_000)
                };
                let add = rng.gen_bool(0.7);
                changes.insert(key(prefixes[which], n), add);
            }
            for (key, add) in &changes {
                let which = prefixes.iter().position(|p| key.starts_with(p) && key.len() == p.len() + ENTRY_BYTES);
                let n = u64::from_be_bytes(key[key.len() - 24..key.len() - 16].try_into().unwrap_or_default());
                if let Some(which) = which {
                    if *add {
                        expected[which].insert(n);
                    } else {
                        expected[which].remove(&n);
                    }
                }
            }
            apply(&tree, &changes)?;
            for (which, prefix) in prefixes.iter().enumerate() {
                let all: Vec<u64> = expected[which].iter().copied().collect();
                assert_eq!(walk(&tree, prefix, None, false)?, all, "step {step}");
                let mut backwards = all.clone();
                backwards.reverse();
                assert_eq!(walk(&tree, prefix, None, true)?, backwards);
                let pivot = rng.gen_range(0..20_000);
                let after: Vec<u64> = all.iter().copied().filter(|n| *n > pivot).collect();
                assert_eq!(walk(&tree, prefix, Some(pivot), false)?, after);
                let before: Vec<u64> = backwards.iter().copied().filter(|n| *n < pivot).collect();
                assert_eq!(walk(&tree, prefix, Some(pivot), true)?, before);
            }
        }
        for entry in tree.iter() {
            let (key, value) = entry?;
            let held = decode_block(&value)?;
            assert!(held.len() <= BLOCK_ENTRIES);
            assert_eq!(split_entry_key(&key)?.1, held[0], "a block's key is its first entry");
        }
        Ok(())
    }

    #[test]
    fn broken_blocks_are_reported() {
        assert!(decode_block(&[]).is_err());
        assert!(decode_block(&[0; 25]).is_err());
        assert!(decode_block(&[entry(2), entry(1)].concat()).is_err());
        assert!(split_entry_key(&[0; 3]).is_err());
    }
}
