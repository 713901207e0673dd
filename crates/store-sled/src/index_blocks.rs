//! Index entries kept in runs of blocks.
//!
//! An entry is `position (8 bytes, order-preserving) ‖ record id (16)`.
//! One index value (its [`value_prefix`]) holds its entries in one or more
//! **runs**. A run is a sorted sequence of **blocks** of up to
//! [`BLOCK_ENTRIES`] entries, each block keyed `value prefix ‖ run id (u64)
//! ‖ its first entry`; the value's entries are the union of its runs. A
//! value with several runs has a **directory** key, `value prefix ‖ 0xff ×
//! 8` (after every block of the value), listing them, oldest first, with
//! their entry counts; most values have one run and no directory, so that
//! they cost no key beyond their blocks.
//!
//! Why blocks: sled keeps bookkeeping in memory for every page and splits
//! a leaf page every 16 keys, so with a key per entry (14 per finding) the
//! index alone held ~900 MiB resident for a million findings.
//!
//! Why runs: the entries a batch adds to a sort index (findings by CVSS,
//! severity, first or last seen) fall anywhere in its order, so adding
//! them to one sorted sequence rewrote nearly every block of the index on
//! every batch, and imports slowed down as the store grew. Now additions
//! that extend the newest run past its last entry (what the `created_at`
//! and `updated_at` orders get) are appended to it in place; any other
//! additions become a new run of their own, and the newest two runs are
//! merged while the newer holds more than half as many entries as the
//! older (a binary counter), or while there are more than [`MAX_RUNS`]. An
//! entry is then rewritten about log2(entries ÷ batch) times in all, and a
//! read merges a handful of runs. A removal rewrites the block that holds
//! the entry, in whichever run.
//!
//! Writes are planned outside sled's transaction, which cannot read ranges:
//! the store's index-writer lock keeps the blocks read here unchanged until
//! the transaction that replaces them commits. A merged run keeps the older
//! run's id, so a reader that meets a half-applied merge sees entries twice
//! at worst, and [`Entries`] yields each entry once.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use uuid::Uuid;

use esr_store::StoreError;

/// Entries per block at most: a 3 KiB value, small enough to rewrite on
/// every change, large enough that keys are few.
pub const BLOCK_ENTRIES: usize = 128;
/// `position ‖ record id`.
pub const ENTRY_BYTES: usize = 24;
/// Runs a value may keep before the newest two are merged whatever their
/// sizes: what a read merges at most.
const MAX_RUNS: usize = 6;
/// The run id bytes after the value prefix; all ones is the directory.
const RUN_BYTES: usize = 8;
const DIRECTORY: [u8; RUN_BYTES] = [0xff; RUN_BYTES];

pub type Entry = [u8; ENTRY_BYTES];

/// An entry as numbers that order as its bytes do (position, then id):
/// compared without a call to `memcmp`, as walks do for every entry.
pub fn ordered(entry: &Entry) -> (u64, u128) {
    let (position, id) = entry.split_at(8);
    (
        u64::from_be_bytes(position.try_into().unwrap_or_default()),
        u128::from_be_bytes(id.try_into().unwrap_or_default()),
    )
}

/// The key prefix of one value of one index: `organization ‖ index name ‖ 0
/// ‖ value length (u32) ‖ value`. Also the key of its count. No value's
/// prefix is a prefix of another's (the value carries its length).
pub fn value_prefix(organization: Uuid, index: &str, value: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + index.len() + 5 + value.len() + RUN_BYTES + ENTRY_BYTES);
    key.extend_from_slice(organization.as_bytes());
    key.extend_from_slice(index.as_bytes());
    key.push(0);
    key.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_be_bytes());
    key.extend_from_slice(value.as_bytes());
    key
}

/// Where the value prefix of an index-tree key ends.
fn value_prefix_len(key: &[u8]) -> Option<usize> {
    let name_end = 16 + key.get(16..)?.iter().position(|byte| *byte == 0)?;
    let length = u32::from_be_bytes(key.get(name_end + 1..name_end + 5)?.try_into().ok()?);
    let end = name_end + 5 + usize::try_from(length).ok()?;
    (end <= key.len()).then_some(end)
}

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

/// `entries` in blocks of at most [`BLOCK_ENTRIES`], of even sizes.
fn even_chunks(entries: &[Entry]) -> impl Iterator<Item = &[Entry]> {
    let blocks = entries.len().div_ceil(BLOCK_ENTRIES).max(1);
    entries.chunks(entries.len().div_ceil(blocks).max(1))
}

fn block_key(run_prefix: &[u8], first: &Entry) -> Vec<u8> {
    let mut key = Vec::with_capacity(run_prefix.len() + ENTRY_BYTES);
    key.extend_from_slice(run_prefix);
    key.extend_from_slice(first);
    key
}

/// The last key any block of the run could have.
fn run_end(run_prefix: &[u8]) -> Vec<u8> {
    block_key(run_prefix, &[0xff; ENTRY_BYTES])
}

fn run_prefix(prefix: &[u8], run: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + RUN_BYTES + ENTRY_BYTES);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&run.to_be_bytes());
    key
}

fn directory_key(prefix: &[u8]) -> Vec<u8> {
    [prefix, &DIRECTORY[..]].concat()
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

/// One run of a value, as its directory lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    id: u64,
    entries: u64,
}

fn encode_directory(runs: &[Run]) -> Vec<u8> {
    runs.iter().flat_map(|run| [run.id.to_be_bytes(), run.entries.to_be_bytes()]).flatten().collect()
}

fn decode_directory(bytes: &[u8]) -> Result<Vec<Run>, StoreError> {
    if !bytes.len().is_multiple_of(16) {
        return Err(corrupt("an index directory is not a whole number of runs"));
    }
    let number = |bytes: &[u8]| u64::from_be_bytes(bytes.try_into().unwrap_or_default());
    let runs: Vec<Run> =
        bytes.chunks_exact(16).map(|run| Run { id: number(&run[..8]), entries: number(&run[8..]) }).collect();
    if runs.windows(2).any(|pair| pair[0].id >= pair[1].id) || runs.iter().any(|run| run.id == u64::MAX) {
        return Err(corrupt("an index directory's runs are out of order"));
    }
    Ok(runs)
}

/// What an index-tree key names after its value prefix.
enum KeyKind<'k> {
    Directory,
    Block { run: u64, first: &'k [u8] },
}

fn key_kind(rest: &[u8]) -> Result<KeyKind<'_>, StoreError> {
    if rest == DIRECTORY {
        return Ok(KeyKind::Directory);
    }
    match rest.split_first_chunk::<RUN_BYTES>() {
        Some((run, first)) if first.len() == ENTRY_BYTES => Ok(KeyKind::Block { run: u64::from_be_bytes(*run), first }),
        _ => Err(corrupt("an index key is neither a block nor a directory")),
    }
}

/// A value's runs, oldest first: its directory's, or else the one run its
/// blocks hold, whose size is not kept (`None`). One lookup: the last key
/// of the value is its directory when it has one.
fn read_runs(tree: &sled::Tree, prefix: &[u8]) -> Result<Vec<(u64, Option<u64>)>, StoreError> {
    let Some(last) = tree.range(prefix.to_vec()..=directory_key(prefix)).next_back() else { return Ok(Vec::new()) };
    let (key, value) = last.map_err(crate::store_error)?;
    match key_kind(&key[prefix.len()..])? {
        KeyKind::Directory => Ok(decode_directory(&value)?.iter().map(|run| (run.id, Some(run.entries))).collect()),
        KeyKind::Block { run, .. } => Ok(vec![(run, None)]),
    }
}

/// How many entries a stored run holds: read block by block.
fn count_run(tree: &sled::Tree, run_prefix: &[u8]) -> Result<u64, StoreError> {
    let mut entries = 0;
    for block in tree.range(run_prefix.to_vec()..=run_end(run_prefix)) {
        entries += (block.map_err(crate::store_error)?.1.len() / ENTRY_BYTES) as u64;
    }
    Ok(entries)
}

/// The block of a run that holds (or would hold) `entry`: the last block
/// starting at or before it, else the run's first block.
fn containing_block(tree: &sled::Tree, run_prefix: &[u8], entry: &Entry) -> Result<Option<sled::IVec>, StoreError> {
    if let Some(found) = tree.range(run_prefix.to_vec()..=block_key(run_prefix, entry)).next_back() {
        return Ok(Some(found.map_err(crate::store_error)?.0));
    }
    match tree.range(run_prefix.to_vec()..=run_end(run_prefix)).next() {
        Some(found) => Ok(Some(found.map_err(crate::store_error)?.0)),
        None => Ok(None),
    }
}

/// The first entry of the block after `block` in its run, if any: where
/// the entries `block` holds (or would take) end.
fn next_block_start(tree: &sled::Tree, run_prefix: &[u8], block: &[u8]) -> Result<Option<Entry>, StoreError> {
    match tree.range((Bound::Excluded(block.to_vec()), Bound::Included(run_end(run_prefix)))).next() {
        Some(found) => Ok(Some(split_entry_key(&found.map_err(crate::store_error)?.0)?.1)),
        None => Ok(None),
    }
}

/// The entries of one index value in order (or in reverse), strictly
/// after `after` (before it, in reverse): its runs merged, each entry once.
pub struct Entries {
    runs: Vec<RunEntries>,
    /// Each run's next entry, once the runs are started.
    heads: Vec<Option<Entry>>,
    started: bool,
    reverse: bool,
    /// Entries walked: the call's deadline is checked every
    /// [`DEADLINE_CHECK_EVERY`] of them.
    walked: u32,
}

/// How many entries a walk reads between looks at the call's deadline.
const DEADLINE_CHECK_EVERY: u32 = 1024;

impl Entries {
    pub fn new(tree: &sled::Tree, prefix: &[u8], after: Option<&Entry>, reverse: bool) -> Result<Entries, StoreError> {
        let runs = read_runs(tree, prefix)?
            .iter()
            .map(|(id, _)| RunEntries::new(tree, &run_prefix(prefix, *id), after, reverse))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Entries { heads: vec![None; runs.len()], runs, started: false, reverse, walked: 0 })
    }

    fn next_entry(&mut self) -> Result<Option<Entry>, StoreError> {
        if let [only] = self.runs.as_mut_slice() {
            return only.next_entry();
        }
        if !self.started {
            for (head, run) in self.heads.iter_mut().zip(&mut self.runs) {
                *head = run.next_entry()?;
            }
            self.started = true;
        }
        let next = if self.reverse { self.heads.iter().flatten().max() } else { self.heads.iter().flatten().min() };
        let Some(next) = next.copied() else { return Ok(None) };
        for (head, run) in self.heads.iter_mut().zip(&mut self.runs) {
            if *head == Some(next) {
                *head = run.next_entry()?;
            }
        }
        Ok(Some(next))
    }
}

impl Iterator for Entries {
    type Item = Result<Entry, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.walked = self.walked.wrapping_add(1);
        if self.walked.is_multiple_of(DEADLINE_CHECK_EVERY)
            && let Err(error) = esr_store::call_deadline::check()
        {
            return Some(Err(error));
        }
        self.next_entry().transpose()
    }
}

/// Which of `probes` (in ascending order) the index value at `prefix`
/// holds. Each run is sought at the block that would hold a probe, and
/// that block answers the probes after it up to its last entry: at most
/// one lookup per probe, and one per block when the probes are dense.
pub fn held(tree: &sled::Tree, prefix: &[u8], probes: &[Entry]) -> Result<Vec<bool>, StoreError> {
    let mut found = vec![false; probes.len()];
    for (run, _) in read_runs(tree, prefix)? {
        let run_prefix = run_prefix(prefix, run);
        let mut block: Vec<Entry> = Vec::new();
        for (probe, found) in probes.iter().zip(found.iter_mut()) {
            if *found {
                continue;
            }
            let answered =
                block.first().is_some_and(|first| first <= probe) && block.last().is_some_and(|last| probe <= last);
            if !answered {
                block = match tree.range(run_prefix.clone()..=block_key(&run_prefix, probe)).next_back() {
                    Some(stored) => decode_block(&stored.map_err(crate::store_error)?.1)?,
                    None => Vec::new(),
                };
            }
            *found = block.binary_search(probe).is_ok();
        }
    }
    Ok(found)
}

/// The entries of one run, read block by block.
struct RunEntries {
    blocks: Box<dyn DoubleEndedIterator<Item = sled::Result<(sled::IVec, sled::IVec)>> + Send>,
    reverse: bool,
    after: Option<Entry>,
    current: std::vec::IntoIter<Entry>,
}

impl RunEntries {
    fn new(
        tree: &sled::Tree,
        run_prefix: &[u8],
        after: Option<&Entry>,
        reverse: bool,
    ) -> Result<RunEntries, StoreError> {
        let end = run_end(run_prefix);
        let blocks = match (after, reverse) {
            (None, _) => tree.range(run_prefix.to_vec()..=end),
            // Forward from the block that holds `after`.
            (Some(after), false) => match containing_block(tree, run_prefix, after)? {
                Some(start) => tree.range(start.to_vec()..=end),
                None => tree.range(run_prefix.to_vec()..=end),
            },
            // Backward from the last block that starts before `after`.
            (Some(after), true) => {
                tree.range((Bound::Included(run_prefix.to_vec()), Bound::Excluded(block_key(run_prefix, after))))
            }
        };
        Ok(RunEntries { blocks: Box::new(blocks), reverse, after: after.copied(), current: Vec::new().into_iter() })
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
                    // A run's entries come in order: every later one is past too.
                    self.after = None;
                    return Ok(Some(entry));
                }
                continue;
            }
            let block = if self.reverse { self.blocks.next_back() } else { self.blocks.next() };
            match block {
                None => return Ok(None),
                Some(block) => self.current = decode_block(&block.map_err(crate::store_error)?.1)?.into_iter(),
            }
        }
    }
}

/// One index value's prefix and its entries added (`true`) or removed.
type ValueChanges<'k> = (&'k [u8], Vec<(Entry, bool)>);

/// What a write does to the index tree: each key's new value, or `None`
/// where the key goes.
pub type BlockChanges = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Works out the writes that add (`true`) or remove (`false`) the given
/// full entry keys (`value prefix ‖ entry`), reading what they touch from
/// `tree`. The changes are net: an added entry is not held yet (the store
/// derives them from each record's previous state); removing an absent
/// one changes nothing.
pub fn plan(tree: &sled::Tree, changes: &BTreeMap<Vec<u8>, bool>) -> Result<BlockChanges, StoreError> {
    let mut planned = BlockChanges::new();
    // Keys sort by prefix first, and no prefix is a prefix of another, so
    // one value's changes are adjacent.
    let mut by_prefix: Vec<ValueChanges<'_>> = Vec::new();
    for (key, present) in changes {
        let (prefix, entry) = split_entry_key(key)?;
        match by_prefix.last_mut() {
            Some((last, entries)) if *last == prefix => entries.push((entry, *present)),
            _ => by_prefix.push((prefix, vec![(entry, *present)])),
        }
    }
    for (prefix, changes) in by_prefix {
        plan_value(tree, prefix, &changes, &mut planned)?;
    }
    Ok(planned)
}

/// A run while a write is planned.
struct PlannedRun {
    id: u64,
    /// The entries it holds in the store, when known.
    stored_entries: Option<u64>,
    /// Changes to make in place (`true`: add), in entry order at the end.
    in_place: Vec<(Entry, bool)>,
    /// The run's every entry when it is rewritten whole (new or merged).
    whole: Option<Vec<Entry>>,
    /// Blocks stored now that a whole rewrite replaces.
    replaced: Vec<Vec<u8>>,
    /// The stored block the last lookup read: the first entry of the
    /// block after it, and its entries.
    last_read: Option<(Option<Entry>, Vec<Entry>)>,
}

impl PlannedRun {
    fn stored(id: u64, stored_entries: Option<u64>) -> PlannedRun {
        PlannedRun { id, stored_entries, in_place: Vec::new(), whole: None, replaced: Vec::new(), last_read: None }
    }

    /// How many entries it holds once the write is done. The size of a
    /// value's only run is counted from its blocks when first needed: when
    /// the value gets a second run.
    fn entries(&mut self, tree: &sled::Tree, prefix: &[u8]) -> Result<u64, StoreError> {
        if let Some(whole) = &self.whole {
            return Ok(whole.len() as u64);
        }
        let stored = match self.stored_entries {
            Some(stored) => stored,
            None => {
                let counted = count_run(tree, &run_prefix(prefix, self.id))?;
                self.stored_entries = Some(counted);
                counted
            }
        };
        let added = self.in_place.iter().filter(|(_, add)| *add).count() as u64;
        let removed = self.in_place.len() as u64 - added;
        Ok((stored + added).saturating_sub(removed))
    }

    /// Whether the stored run holds `entry`. Lookups come in entry order,
    /// so the block the last one read usually answers the next.
    fn holds(&mut self, tree: &sled::Tree, prefix: &[u8], entry: &Entry) -> Result<bool, StoreError> {
        if let Some(whole) = &self.whole {
            return Ok(whole.binary_search(entry).is_ok());
        }
        if let Some((next, held)) = &self.last_read
            && held.first().is_some_and(|first| first <= entry)
            && next.is_none_or(|next| *entry < next)
        {
            return Ok(held.binary_search(entry).is_ok());
        }
        let run_prefix = run_prefix(prefix, self.id);
        let Some(block) = containing_block(tree, &run_prefix, entry)? else { return Ok(false) };
        let held = decode_block(
            &tree.get(&block).map_err(crate::store_error)?.ok_or_else(|| corrupt("an index block vanished"))?,
        )?;
        let next = next_block_start(tree, &run_prefix, &block)?;
        let found = held.binary_search(entry).is_ok();
        self.last_read = Some((next, held));
        Ok(found)
    }

    /// The run's last entry as stored.
    fn last_entry(&self, tree: &sled::Tree, prefix: &[u8]) -> Result<Option<Entry>, StoreError> {
        let run_prefix = run_prefix(prefix, self.id);
        match tree.range(run_prefix.clone()..=run_end(&run_prefix)).next_back() {
            Some(found) => Ok(decode_block(&found.map_err(crate::store_error)?.1)?.last().copied()),
            None => Ok(None),
        }
    }

    /// Reads the whole run into memory with its in-place changes applied.
    fn load(&mut self, tree: &sled::Tree, prefix: &[u8]) -> Result<(), StoreError> {
        if self.whole.is_some() {
            return Ok(());
        }
        let run_prefix = run_prefix(prefix, self.id);
        let mut held = BTreeSet::new();
        for block in tree.range(run_prefix.clone()..=run_end(&run_prefix)) {
            let (key, value) = block.map_err(crate::store_error)?;
            held.extend(decode_block(&value)?);
            self.replaced.push(key.to_vec());
        }
        for (entry, add) in self.in_place.drain(..) {
            if add {
                held.insert(entry);
            } else {
                held.remove(&entry);
            }
        }
        self.whole = Some(held.into_iter().collect());
        Ok(())
    }

    /// Takes `newer`'s entries into this run (which keeps its id).
    fn absorb(&mut self, tree: &sled::Tree, prefix: &[u8], mut newer: PlannedRun) -> Result<(), StoreError> {
        self.load(tree, prefix)?;
        newer.load(tree, prefix)?;
        let mut merged = self.whole.take().unwrap_or_default();
        merged.extend(newer.whole.take().unwrap_or_default());
        merged.sort_unstable();
        merged.dedup();
        self.whole = Some(merged);
        self.replaced.append(&mut newer.replaced);
        Ok(())
    }
}

/// Plans one value's changes (in entry order): removals where the entries
/// are, additions appended to the newest run or as a run of their own,
/// then the merges that keep the runs few.
fn plan_value(
    tree: &sled::Tree,
    prefix: &[u8],
    changes: &[(Entry, bool)],
    planned: &mut BlockChanges,
) -> Result<(), StoreError> {
    let before = read_runs(tree, prefix)?;
    let mut runs: Vec<PlannedRun> = before.iter().map(|(id, entries)| PlannedRun::stored(*id, *entries)).collect();
    let mut additions = Vec::new();
    for (entry, add) in changes {
        if *add {
            additions.push(*entry);
            continue;
        }
        for run in runs.iter_mut().rev() {
            if run.holds(tree, prefix, entry)? {
                run.in_place.push((*entry, false));
                break;
            }
        }
    }
    if let Some(first) = additions.first() {
        let appends = match runs.last() {
            Some(newest) => newest.last_entry(tree, prefix)?.is_none_or(|last| *first > last),
            None => false,
        };
        match runs.last_mut() {
            Some(newest) if appends => newest.in_place.extend(additions.iter().map(|entry| (*entry, true))),
            _ => {
                let id = runs.last().map_or(0, |newest| newest.id + 1);
                let mut run = PlannedRun::stored(id, Some(0));
                run.whole = Some(additions);
                runs.push(run);
            }
        }
    }
    while runs.len() >= 2 {
        let count = runs.len();
        let newer = runs[count - 1].entries(tree, prefix)?;
        let older = runs[count - 2].entries(tree, prefix)?;
        if newer * 2 <= older && count <= MAX_RUNS {
            break;
        }
        let Some(newer) = runs.pop() else { break };
        if let Some(older) = runs.last_mut() {
            older.absorb(tree, prefix, newer)?;
        }
    }
    // Sizes are known for every run once there are several.
    let mut after = Vec::with_capacity(runs.len());
    if runs.len() >= 2 {
        for run in &mut runs {
            let entries = run.entries(tree, prefix)?;
            if entries > 0 {
                after.push(Run { id: run.id, entries });
            }
        }
    }
    for run in &mut runs {
        let run_prefix = run_prefix(prefix, run.id);
        match &run.whole {
            Some(entries) => {
                for key in run.replaced.drain(..) {
                    planned.insert(key, None);
                }
                if !entries.is_empty() {
                    for chunk in even_chunks(entries) {
                        planned.insert(block_key(&run_prefix, &chunk[0]), Some(chunk.concat()));
                    }
                }
            }
            None if run.in_place.is_empty() => {}
            None => {
                run.in_place.sort_unstable();
                rewrite_in_place(tree, &run_prefix, &run.in_place, planned)?;
            }
        }
    }
    let had_directory = before.len() >= 2;
    if after.len() >= 2 {
        let unchanged = had_directory
            && before
                .iter()
                .map(|(id, entries)| Run { id: *id, entries: entries.unwrap_or_default() })
                .eq(after.iter().copied());
        if !unchanged {
            planned.insert(directory_key(prefix), Some(encode_directory(&after)));
        }
    } else if had_directory {
        planned.insert(directory_key(prefix), None);
    }
    Ok(())
}

/// Plans the rewrite of the blocks of one stored run that the changes (in
/// entry order) fall in.
fn rewrite_in_place(
    tree: &sled::Tree,
    run_prefix: &[u8],
    changes: &[(Entry, bool)],
    planned: &mut BlockChanges,
) -> Result<(), StoreError> {
    // The blocks touched, by the key they have now (`None`: a new one).
    let mut touched: BTreeMap<Option<Vec<u8>>, BTreeSet<Entry>> = BTreeMap::new();
    // The block the last lookup found and where the next one starts:
    // changes come in order, so most fall in the block before them.
    let mut last_found: Option<(Option<Vec<u8>>, Option<Entry>)> = None;
    for (entry, add) in changes {
        let block = match &last_found {
            Some((block, next)) if next.is_none_or(|next| *entry < next) => block.clone(),
            _ => {
                let block = containing_block(tree, run_prefix, entry)?.map(|key| key.to_vec());
                let next = match &block {
                    Some(key) => next_block_start(tree, run_prefix, key)?,
                    None => None,
                };
                last_found = Some((block.clone(), next));
                block
            }
        };
        if !touched.contains_key(&block) {
            let held = match &block {
                Some(key) => {
                    let value =
                        tree.get(key).map_err(crate::store_error)?.ok_or_else(|| corrupt("an index block vanished"))?;
                    decode_block(&value)?.into_iter().collect()
                }
                None => BTreeSet::new(),
            };
            touched.insert(block.clone(), held);
        }
        if let Some(held) = touched.get_mut(&block) {
            if *add {
                held.insert(*entry);
            } else {
                held.remove(entry);
            }
        }
    }
    for (old_key, held) in touched {
        if let Some(old_key) = old_key {
            planned.insert(old_key, None);
        }
        let held: Vec<Entry> = held.into_iter().collect();
        if !held.is_empty() {
            for chunk in even_chunks(&held) {
                planned.insert(block_key(run_prefix, &chunk[0]), Some(chunk.concat()));
            }
        }
    }
    Ok(())
}

/// The keys and values that store one value's entries (sorted, unique) as
/// a single run, for a rebuild.
pub fn single_run(prefix: &[u8], entries: &[Entry]) -> Vec<(Vec<u8>, Vec<u8>)> {
    if entries.is_empty() {
        return Vec::new();
    }
    let first_run = run_prefix(prefix, 0);
    even_chunks(entries).map(|chunk| (block_key(&first_run, &chunk[0]), chunk.concat())).collect()
}

/// An index entry's whole key (its value prefix, then the entry) as 128
/// bits: a check of every entry compares these, sixteen bytes an entry
/// whatever the key's length, rather than the keys.
pub type EntryDigest = [u8; 16];

/// The [`EntryDigest`] of the key made of `parts`, one after another.
pub fn entry_digest(parts: &[&[u8]]) -> EntryDigest {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    let mut digest = [0u8; 16];
    digest.copy_from_slice(&hasher.finalize()[..16]);
    digest
}

/// How many of `expected` are not in `stored`, and how many of `stored`
/// are not in `expected` (both sorted, each digest once).
pub fn differences(expected: &[EntryDigest], stored: &[EntryDigest]) -> (usize, usize) {
    let (mut missing, mut extra) = (0, 0);
    let (mut e, mut s) = (expected.iter().peekable(), stored.iter().peekable());
    loop {
        match (e.peek(), s.peek()) {
            (Some(a), Some(b)) if a == b => {
                e.next();
                s.next();
            }
            (Some(a), Some(b)) if a < b => {
                missing += 1;
                e.next();
            }
            (Some(_), Some(_)) | (None, Some(_)) => {
                extra += 1;
                s.next();
            }
            (Some(_), None) => {
                missing += 1;
                e.next();
            }
            (None, None) => return (missing, extra),
        }
    }
}

/// Every entry the tree holds, as the sorted [`EntryDigest`]s of their
/// full keys (`value prefix ‖ entry`), each once, and what is wrong with
/// how they are kept: blocks not keyed by
/// their first entry or too large, an entry in two runs, runs missing from
/// their directory or holding another number of entries than it says.
pub fn stored_entries(tree: &sled::Tree) -> Result<(Vec<EntryDigest>, Vec<String>), StoreError> {
    let mut entries = Vec::new();
    let mut problems = BTreeSet::new();
    // Per value: the runs its blocks hold (with their entries), and the
    // runs its directory lists.
    let mut found: BTreeMap<Vec<u8>, BTreeMap<u64, u64>> = BTreeMap::new();
    let mut listed: BTreeMap<Vec<u8>, BTreeMap<u64, u64>> = BTreeMap::new();
    for item in tree.iter() {
        let (key, value) = item.map_err(crate::store_error)?;
        let at = value_prefix_len(&key).ok_or_else(|| corrupt("an index key has no value prefix"))?;
        let (prefix, rest) = key.split_at(at);
        let (run, first) = match key_kind(rest)? {
            KeyKind::Directory => {
                let runs = decode_directory(&value)?;
                listed.insert(prefix.to_vec(), runs.iter().map(|run| (run.id, run.entries)).collect());
                continue;
            }
            KeyKind::Block { run, first } => (run, first),
        };
        let held = decode_block(&value)?;
        if held.first().map(|entry| &entry[..]) != Some(first) || held.len() > BLOCK_ENTRIES {
            problems.insert("an index block is not keyed by its first entry".to_owned());
        }
        *found.entry(prefix.to_vec()).or_default().entry(run).or_default() += held.len() as u64;
        entries.extend(held.iter().map(|entry| entry_digest(&[prefix, &entry[..]])));
    }
    entries.sort_unstable();
    let held = entries.len();
    entries.dedup();
    if entries.len() < held {
        problems.insert("an index entry is held by two runs".to_owned());
    }
    // A value with one run has no directory; one with several lists them.
    for (prefix, runs) in &found {
        let agrees = match listed.get(prefix) {
            Some(listed) => listed == runs && listed.len() >= 2,
            None => runs.len() == 1,
        };
        if !agrees {
            problems.insert("index runs disagree with their directories".to_owned());
        }
    }
    if listed.keys().any(|prefix| !found.contains_key(prefix)) {
        problems.insert("an index directory lists runs that hold nothing".to_owned());
    }
    Ok((entries, problems.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    fn entry(n: u64) -> Entry {
        let mut entry = [0u8; ENTRY_BYTES];
        entry[..8].copy_from_slice(&n.to_be_bytes());
        entry[8..16].copy_from_slice(&(n * 7).to_be_bytes());
        entry
    }

    fn number(entry: &Entry) -> u64 {
        u64::from_be_bytes(entry[..8].try_into().unwrap_or_default())
    }

    fn apply(tree: &sled::Tree, changes: &BTreeMap<Vec<u8>, bool>) -> Result<(), StoreError> {
        for (key, value) in plan(tree, changes)? {
            match value {
                Some(value) => tree.insert(key, value).map_err(crate::store_error)?,
                None => tree.remove(key).map_err(crate::store_error)?,
            };
        }
        Ok(())
    }

    fn walk(tree: &sled::Tree, prefix: &[u8], after: Option<u64>, reverse: bool) -> Result<Vec<u64>, StoreError> {
        let after = after.map(entry);
        Entries::new(tree, prefix, after.as_ref(), reverse)?.map(|entry| entry.map(|e| number(&e))).collect()
    }

    fn prefixes() -> [Vec<u8>; 3] {
        let (acme, globex) = (Uuid::from_u128(7), Uuid::from_u128(8));
        [
            value_prefix(acme, "by_cvss", ""),
            value_prefix(acme, "by_cvss", "null"),
            value_prefix(globex, "status", "open"),
        ]
    }

    /// Random additions (appends, and anywhere in the order) and removals
    /// on three values agree with a sorted set after every write,
    /// forwards, backwards and from a random position; the runs stay few
    /// and agree with their directories.
    #[test]
    fn runs_follow_a_sorted_set() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let tree =
            sled::open(dir.path()).map_err(crate::store_error)?.open_tree("index").map_err(crate::store_error)?;
        let prefixes = prefixes();
        let mut expected: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); 3];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut most_runs = 0;
        for step in 0..80 {
            let mut changes = BTreeMap::new();
            let size = if rng.gen_bool(0.2) { rng.gen_range(1..20) } else { rng.gen_range(100..1200) };
            for _ in 0..size {
                let which = rng.gen_range(0..3);
                let add = rng.gen_bool(0.75);
                let n = match (add, rng.gen_range(0..3)) {
                    // A removal of something held, when there is any.
                    (false, _) => match expected[which].iter().nth(rng.gen_range(0..expected[which].len().max(1))) {
                        Some(held) => *held,
                        None => rng.gen_range(0..50_000),
                    },
                    // Appends past everything so far.
                    (true, 0) => 100_000 + step * 1_000 + rng.gen_range(0..1_000),
                    (true, _) => rng.gen_range(0..50_000),
                };
                // Changes are net, as the store makes them: an addition is
                // of an entry not held yet.
                if add && expected[which].contains(&n) {
                    continue;
                }
                changes.insert([prefixes[which].as_slice(), &entry(n)].concat(), add);
            }
            for (key, add) in &changes {
                let (prefix, entry) = split_entry_key(key)?;
                let which = prefixes.iter().position(|p| p == prefix).unwrap_or_default();
                if *add {
                    expected[which].insert(number(&entry));
                } else {
                    expected[which].remove(&number(&entry));
                }
            }
            apply(&tree, &changes)?;
            for (which, prefix) in prefixes.iter().enumerate() {
                let all: Vec<u64> = expected[which].iter().copied().collect();
                assert_eq!(walk(&tree, prefix, None, false)?, all, "step {step}");
                let mut backwards = all.clone();
                backwards.reverse();
                assert_eq!(walk(&tree, prefix, None, true)?, backwards);
                let pivot = rng.gen_range(0..200_000);
                let after: Vec<u64> = all.iter().copied().filter(|n| *n > pivot).collect();
                assert_eq!(walk(&tree, prefix, Some(pivot), false)?, after);
                let before: Vec<u64> = backwards.iter().copied().filter(|n| *n < pivot).collect();
                assert_eq!(walk(&tree, prefix, Some(pivot), true)?, before);
                let runs = read_runs(&tree, prefix)?;
                assert!(runs.len() <= MAX_RUNS, "{} runs", runs.len());
                most_runs = most_runs.max(runs.len());
                if runs.len() >= 2 {
                    assert_eq!(
                        runs.iter().map(|(_, entries)| entries.unwrap_or_default()).sum::<u64>(),
                        all.len() as u64
                    );
                }
            }
            let (stored, problems) = stored_entries(&tree)?;
            assert!(problems.is_empty(), "step {step}: {problems:?}");
            assert_eq!(stored.len(), expected.iter().map(BTreeSet::len).sum::<usize>());
        }
        assert!(most_runs >= 3, "the walk never met several runs ({most_runs})");
        Ok(())
    }

    #[test]
    fn differences_count_what_each_side_lacks() {
        let digest = |n: u8| [n; 16];
        let (one, two, three, four, five) = (digest(1), digest(2), digest(3), digest(4), digest(5));
        assert_eq!(differences(&[one, two, four], &[two, three, four, five]), (1, 2));
        assert_eq!(differences(&[], &[one]), (0, 1));
        assert_eq!(differences(&[one], &[]), (1, 0));
        assert_eq!(differences(&[one, two], &[one, two]), (0, 0));
        assert_eq!(entry_digest(&[b"ab", b"c"]), entry_digest(&[b"abc"]));
        assert_ne!(entry_digest(&[b"abc"]), entry_digest(&[b"abd"]));
    }

    /// Additions out of order make new runs, merged as a binary counter:
    /// each entry is rewritten a few times, not once per write.
    #[test]
    fn scattered_additions_rewrite_little() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let tree =
            sled::open(dir.path()).map_err(crate::store_error)?.open_tree("index").map_err(crate::store_error)?;
        let prefix = &prefixes()[0];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (batches, per_batch) = (64, 1_000);
        let mut written_entries = 0;
        let mut numbers: Vec<u64> = (0..(batches * per_batch) as u64).collect();
        rand::seq::SliceRandom::shuffle(numbers.as_mut_slice(), &mut rng);
        for batch in numbers.chunks(per_batch) {
            let changes: BTreeMap<Vec<u8>, bool> =
                batch.iter().map(|n| ([prefix.as_slice(), &entry(*n)].concat(), true)).collect();
            let planned = plan(&tree, &changes)?;
            written_entries += planned.values().flatten().map(|value| value.len() / ENTRY_BYTES).sum::<usize>();
            apply(&tree, &changes)?;
        }
        let total = batches * per_batch;
        assert_eq!(walk(&tree, prefix, None, false)?.len(), total);
        // One sorted sequence would have rewritten about half the index per
        // batch (~32 entries written per entry); a binary counter of 64
        // batches about log2(64) + 1.
        assert!(written_entries <= total * 8, "{written_entries} entries written for {total}");
        Ok(())
    }

    #[test]
    fn broken_blocks_and_directories_are_reported() {
        assert!(decode_block(&[]).is_err());
        assert!(decode_block(&[0; 25]).is_err());
        assert!(decode_block(&[entry(2), entry(1)].concat()).is_err());
        assert!(split_entry_key(&[0; 3]).is_err());
        assert!(decode_directory(&[0; 15]).is_err());
        let out_of_order = encode_directory(&[Run { id: 2, entries: 1 }, Run { id: 1, entries: 1 }]);
        assert!(decode_directory(&out_of_order).is_err());
        assert_eq!(value_prefix_len(&[prefixes()[2].as_slice(), &[1; 32]].concat()), Some(prefixes()[2].len()));
        assert_eq!(value_prefix_len(&[9; 20]), None);
    }
}
