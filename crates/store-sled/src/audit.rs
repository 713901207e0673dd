//! The audit trail: two trees. `audit` holds an organization's entries
//! in chunks, each under `organization ‖ position` (16 + 8 bytes,
//! big-endian) where the position is its last entry's, so an
//! organization's trail is one contiguous range in recording order and the
//! chunks that hold positions from `p` on start at the key of `p`;
//! `audit-by-time` holds `at ‖ position` (8 + 8 bytes, the time
//! order-preserving; the chunk's newest time and last position) →
//! organization, so expiry reads the oldest chunks first and nothing else.
//!
//! A chunk holds the entries of one organization recorded within
//! [`CHUNK_SPAN_NANOS`] of each other in one append, at most
//! [`CHUNK_ENTRIES`] of them: two inserts per chunk instead of two per
//! entry, which under load cost a fifth of a read request's throughput
//! (docs/performance.md, "The audit trail at a million findings"). An
//! entry written before chunks is a value of its own, its JSON object,
//! and reads as a chunk of one.
//!
//! Positions come from sled's id generator (increasing, never reused,
//! across restarts too), plus one so that none is 0. A batch is written
//! time index first, chunks second, and removed in the other order: a
//! crash in between leaves at worst a time-index key pointing at nothing,
//! which the next expiry removes; never a chunk expiry cannot find.

use std::collections::HashMap;

use esr_store::{AUDIT_EXAMINED, AuditEntry, AuditPage, MAX_SCAN, StoreError};
use uuid::Uuid;

use super::{Trees, store_error};

pub(super) const AUDIT: &str = "audit";
pub(super) const AUDIT_BY_TIME: &str = "audit-by-time";

/// How many chunks one expiry batch removes.
const EXPIRY_BATCH: usize = 10_000;

/// The first byte of a chunk's value. A value written before chunks is
/// one entry's JSON object, whose first byte is `{`.
const CHUNK_MARK: u8 = 1;

/// The most entries one chunk holds: a page of the trail decodes at most
/// this many it does not return.
const CHUNK_ENTRIES: usize = 64;

/// The most bytes of a chunk holding more than one entry, before it is
/// compressed: sled keeps up to 17 values in a leaf and writes a leaf
/// larger than 128 KiB to a file of its own, so even entries that do not
/// compress (a client's query strings) keep their leaf within it.
const CHUNK_BYTES: usize = 6 * 1024;

/// The most bytes a stored chunk may say it holds: a chunk whose header
/// says more is corrupt, and is not given the memory it asks for.
const CHUNK_MAX_BYTES: usize = 64 << 20;

/// The most time between a chunk's oldest and newest entries. A chunk is
/// removed once its newest entry is past the retention, so an entry is
/// kept at most this much longer than the retention says.
const CHUNK_SPAN_NANOS: i64 = 1_000_000_000;

/// An entry's position and length in a chunk.
const ENTRY_HEADER: usize = 8 + 4;

/// One organization's entries of one append, being gathered: each entry's
/// position (8 bytes, big-endian), its JSON's length (4) and its JSON;
/// stored as [`CHUNK_MARK`] and the LZ4 block of those bytes, their length
/// first.
struct Chunk {
    trail: Uuid,
    oldest: i64,
    newest: i64,
    last: u64,
    entries: usize,
    bytes: Vec<u8>,
}

impl Chunk {
    fn new(trail: Uuid, at: i64) -> Chunk {
        Chunk { trail, oldest: at, newest: at, last: 0, entries: 0, bytes: Vec::new() }
    }

    /// Whether an entry recorded at `at`, of `length` bytes, belongs in this chunk.
    fn takes(&self, at: i64, length: usize) -> bool {
        self.entries < CHUNK_ENTRIES
            && self.bytes.len() + ENTRY_HEADER + length <= CHUNK_BYTES
            && at.max(self.newest).saturating_sub(at.min(self.oldest)) <= CHUNK_SPAN_NANOS
    }

    fn push(&mut self, position: u64, at: i64, body: &[u8]) -> Result<(), StoreError> {
        let length = u32::try_from(body.len())
            .map_err(|_| StoreError::InvalidRecord("an audit entry is larger than 4 GiB".into()))?;
        self.bytes.extend_from_slice(&position.to_be_bytes());
        self.bytes.extend_from_slice(&length.to_be_bytes());
        self.bytes.extend_from_slice(body);
        (self.oldest, self.newest, self.last) = (self.oldest.min(at), self.newest.max(at), position);
        self.entries += 1;
        Ok(())
    }

    /// The value stored.
    fn value(&self) -> Vec<u8> {
        let mut value = vec![CHUNK_MARK];
        value.extend(lz4_flex::compress_prepend_size(&self.bytes));
        value
    }
}

/// The entries a stored value holds, with their positions: a chunk's, or
/// the one entry of a value written before chunks (at the key's position).
fn entries_of(key_position: u64, value: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let Some((&CHUNK_MARK, compressed)) = value.split_first() else {
        return Ok(vec![(key_position, value.to_vec())]);
    };
    let corrupt = |what: &str| StoreError::Corrupt(format!("an audit chunk {what}"));
    let size = compressed.first_chunk::<4>().map(|size| u32::from_le_bytes(*size) as usize);
    if size.is_none_or(|size| size > CHUNK_MAX_BYTES) {
        return Err(corrupt("says it holds more than a chunk can"));
    }
    let bytes = lz4_flex::decompress_size_prepended(compressed).map_err(|error| corrupt(&error.to_string()))?;
    let mut rest = &bytes[..];
    let mut entries = Vec::new();
    while !rest.is_empty() {
        let truncated = || corrupt("ends inside an entry");
        let (position, after) = rest.split_first_chunk::<8>().ok_or_else(truncated)?;
        let (length, after) = after.split_first_chunk::<4>().ok_or_else(truncated)?;
        let length = usize::try_from(u32::from_be_bytes(*length)).map_err(|_| truncated())?;
        let (body, after) = after.split_at_checked(length).ok_or_else(truncated)?;
        entries.push((u64::from_be_bytes(*position), body.to_vec()));
        rest = after;
    }
    Ok(entries)
}

/// An entry's key: its organization, then its position.
fn entry_key(organization: Uuid, position: u64) -> [u8; 24] {
    let mut key = [0; 24];
    key[..16].copy_from_slice(organization.as_bytes());
    key[16..].copy_from_slice(&position.to_be_bytes());
    key
}

/// Unix nanoseconds as bytes that sort as the times do (the sign bit flipped).
fn time_bytes(at: i64) -> [u8; 8] {
    ((at as u64) ^ (1 << 63)).to_be_bytes()
}

/// A time-index key: the entry's time, then its position.
fn time_key(at: i64, position: u64) -> [u8; 16] {
    let mut key = [0; 16];
    key[..8].copy_from_slice(&time_bytes(at));
    key[8..].copy_from_slice(&position.to_be_bytes());
    key
}

/// The position that ends a key (of either tree).
fn position_of(key: &[u8]) -> Result<u64, StoreError> {
    key.last_chunk::<8>()
        .map(|bytes| u64::from_be_bytes(*bytes))
        .ok_or_else(|| StoreError::Corrupt("an audit key is shorter than its position".into()))
}

/// Whether `body` may hold the principal id whose JSON text is `quoted`:
/// serde_json writes a string the same way each time, so an entry whose
/// bytes do not contain it cannot match, and is not parsed.
fn may_hold(body: &[u8], quoted: &[u8]) -> bool {
    body.windows(quoted.len()).any(|window| window == quoted)
}

fn corrupt(error: serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("an audit entry is not the JSON it was stored as: {error}"))
}

impl Trees {
    pub(super) fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let times = entries.iter().map(AuditEntry::checked_at).collect::<Result<Vec<_>, _>>()?;
        // One appender at a time, so that positions are applied in the
        // order they are given and a reader never sees a later one first.
        let _appending = self.audit_appender.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut open: HashMap<Uuid, Chunk> = HashMap::new();
        let mut chunks = Vec::new();
        for (entry, at) in entries.iter().zip(times) {
            let position = self.db.generate_id().map_err(store_error)?.saturating_add(1);
            let body = serde_json::to_vec(entry).map_err(|error| StoreError::InvalidRecord(error.to_string()))?;
            let trail = entry.trail();
            if open.get(&trail).is_some_and(|chunk| !chunk.takes(at, body.len())) {
                chunks.extend(open.remove(&trail));
            }
            open.entry(trail).or_insert_with(|| Chunk::new(trail, at)).push(position, at, &body)?;
        }
        chunks.extend(open.into_values());
        // In the order of their last positions, so that a reader paging
        // through an organization's trail never passes a chunk not yet
        // written. Chunk by chunk, not as one `sled::Batch`: a batch holds
        // sled's store-wide write lock while it applies, and every read of
        // every request would wait behind it. Chunks need no atomicity
        // between them; each is in its time index before its trail.
        chunks.sort_by_key(|chunk| chunk.last);
        for chunk in chunks {
            self.audit_by_time
                .insert(&time_key(chunk.newest, chunk.last)[..], &chunk.trail.as_bytes()[..])
                .map_err(store_error)?;
            self.audit.insert(&entry_key(chunk.trail, chunk.last)[..], chunk.value()).map_err(store_error)?;
        }
        self.flush()
    }

    pub(super) fn audit_page(
        &self,
        organization: Uuid,
        after: Option<u64>,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let limit = limit.clamp(1, MAX_SCAN);
        let Some(first) = after.unwrap_or(0).checked_add(1) else {
            return Ok(AuditPage::default());
        };
        let quoted = principal
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|error| StoreError::MalformedCall(error.to_string()))?;
        let mut page = AuditPage::default();
        let mut examined = 0;
        for item in self.audit.range(entry_key(organization, first)..=entry_key(organization, u64::MAX)) {
            let (key, value) = item.map_err(store_error)?;
            // The first chunk may begin before `first`.
            for (position, body) in entries_of(position_of(&key)?, &value)? {
                if position < first {
                    continue;
                }
                examined += 1;
                if quoted.as_deref().is_none_or(|quoted| may_hold(&body, quoted)) {
                    let entry: AuditEntry = serde_json::from_slice(&body).map_err(corrupt)?;
                    // The id's text may have been elsewhere in the entry (a route, a query).
                    if principal.is_none() || entry.principal.id.as_deref() == principal {
                        page.entries.push((position, entry));
                        if page.entries.len() == limit {
                            page.next = Some(position);
                            return Ok(page);
                        }
                    }
                }
                if examined == AUDIT_EXAMINED {
                    page.next = Some(position);
                    return Ok(page);
                }
            }
        }
        Ok(page)
    }

    pub(super) fn expire_audit(&self, before: i64) -> Result<u64, StoreError> {
        let end = time_key(before, 0);
        let mut removed = 0;
        loop {
            let mut by_time = sled::Batch::default();
            let mut trail = sled::Batch::default();
            let mut batched = 0;
            for item in self.audit_by_time.range(..end).take(EXPIRY_BATCH) {
                let (key, organization) = item.map_err(store_error)?;
                let organization = Uuid::from_slice(&organization)
                    .map_err(|_| StoreError::Corrupt("an audit time-index entry names no organization".into()))?;
                let position = position_of(&key)?;
                let entry = entry_key(organization, position);
                // A key left by a crash between an append's two writes points at nothing.
                if let Some(value) = self.audit.get(entry).map_err(store_error)? {
                    removed += entries_of(position, &value)?.len() as u64;
                }
                trail.remove(&entry[..]);
                by_time.remove(key);
                batched += 1;
            }
            if batched == 0 {
                break;
            }
            self.audit.apply_batch(trail).map_err(store_error)?;
            self.audit_by_time.apply_batch(by_time).map_err(store_error)?;
            self.flush()?;
            if batched < EXPIRY_BATCH {
                break;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use esr_store::{AuditPrincipal, Store, WriteTime};

    use super::super::SledStore;
    use super::*;

    fn entry(organization: Uuid, n: u64, at: i64) -> AuditEntry {
        AuditEntry {
            at: WriteTime(at).format(),
            request_id: format!("request-{n}"),
            principal: AuditPrincipal { kind: "api_key".into(), id: Some(format!("key-{}", n % 2)), issuer: None },
            organization_id: Some(organization),
            method: "GET".into(),
            route: "/v1/endpoints".into(),
            query: None,
            status: 200,
            records: Some(n),
        }
    }

    #[test]
    fn a_chunk_reads_back_entry_by_entry_and_a_value_from_before_chunks_as_one() {
        let mut chunk = Chunk::new(Uuid::nil(), 0);
        let bodies: [(u64, &[u8]); 3] = [(3, b"{\"a\":1}"), (9, b""), (12, b"{}")];
        for (position, body) in bodies {
            chunk.push(position, 0, body).unwrap();
        }
        assert_eq!(chunk.last, 12);
        let read = entries_of(12, &chunk.value()).unwrap();
        assert_eq!(read, bodies.map(|(position, body)| (position, body.to_vec())));
        assert_eq!(entries_of(7, b"{\"a\":1}").unwrap(), [(7, b"{\"a\":1}".to_vec())]);

        // A chunk cut short is read without a panic (sled's checksums are
        // what find a damaged value); one whose entries end inside one is
        // corrupt.
        let value = chunk.value();
        for cut in 1..value.len() {
            if let Ok(entries) = entries_of(12, &value[..cut]) {
                assert!(entries.len() <= 3, "cut at {cut}");
            }
        }
        for cut in 1..chunk.bytes.len() {
            let whole_entries = [19, 31].contains(&cut);
            let mut shorter = Chunk::new(Uuid::nil(), 0);
            shorter.bytes = chunk.bytes[..cut].to_vec();
            assert_eq!(entries_of(12, &shorter.value()).is_ok(), whole_entries, "entries cut at {cut}");
        }
        // One that says it holds more than a chunk can is not inflated.
        let mut huge = vec![CHUNK_MARK];
        huge.extend(u32::MAX.to_le_bytes());
        huge.extend([0; 16]);
        assert!(matches!(entries_of(12, &huge), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn a_chunk_takes_entries_within_its_span_up_to_its_size() {
        let mut chunk = Chunk::new(Uuid::nil(), 5 * CHUNK_SPAN_NANOS);
        chunk.push(1, 5 * CHUNK_SPAN_NANOS, b"{}").unwrap();
        assert!(chunk.takes(4 * CHUNK_SPAN_NANOS, 2) && chunk.takes(6 * CHUNK_SPAN_NANOS, 2));
        assert!(!chunk.takes(4 * CHUNK_SPAN_NANOS - 1, 2) && !chunk.takes(6 * CHUNK_SPAN_NANOS + 1, 2));
        chunk.push(2, 6 * CHUNK_SPAN_NANOS, b"{}").unwrap();
        assert!(!chunk.takes(5 * CHUNK_SPAN_NANOS - 1, 2), "the span is from the oldest to the newest");
        for position in 3..=CHUNK_ENTRIES as u64 {
            assert!(chunk.takes(6 * CHUNK_SPAN_NANOS, 2));
            chunk.push(position, 6 * CHUNK_SPAN_NANOS, b"{}").unwrap();
        }
        assert!(!chunk.takes(6 * CHUNK_SPAN_NANOS, 2), "full at {CHUNK_ENTRIES} entries");
        assert!(!Chunk::new(Uuid::nil(), i64::MIN).takes(i64::MAX, 2));

        let mut chunk = Chunk::new(Uuid::nil(), 0);
        let room = CHUNK_BYTES - 2 * ENTRY_HEADER;
        chunk.push(1, 0, &vec![b' '; room / 2]).unwrap();
        assert!(chunk.takes(0, room - room / 2) && !chunk.takes(0, room - room / 2 + 1), "full at {CHUNK_BYTES} bytes");
    }

    #[test]
    fn a_leaf_of_chunks_of_entries_that_do_not_compress_stays_within_sled_s_log() {
        // sled splits a leaf past 16 values and writes a page larger than a
        // quarter of its 512 KiB segment to a file of its own.
        let mut chunk = Chunk::new(Uuid::nil(), 0);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut noise = |length: usize| -> Vec<u8> {
            (0..length)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        };
        let mut position = 0;
        while chunk.takes(0, 500) {
            position += 1;
            chunk.push(position, 0, &noise(500)).unwrap();
        }
        assert!(17 * (24 + chunk.value().len()) < 128 * 1024, "{} bytes", chunk.value().len());
    }

    #[test]
    fn entries_written_before_chunks_are_paged_and_expired_with_the_chunks_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let organization = Uuid::now_v7();
        let now = WriteTime::parse("2026-03-01T12:00:00Z").unwrap().0;
        // Three entries as they were written before chunks: one value each.
        let before: Vec<(u64, AuditEntry)> =
            (0..3).map(|n| (store.db.generate_id().unwrap() + 1, entry(organization, n, now - 10))).collect();
        for (position, entry) in &before {
            let at = entry.at_nanos().unwrap();
            store.audit_by_time.insert(&time_key(at, *position)[..], &organization.as_bytes()[..]).unwrap();
            store.audit.insert(&entry_key(organization, *position)[..], serde_json::to_vec(entry).unwrap()).unwrap();
        }
        let after: Vec<AuditEntry> = (3..200).map(|n| entry(organization, n, now + n as i64 * 1_000)).collect();
        store.append_audit(&after).unwrap();
        let chunks = store.audit.len() - 3;
        assert!(chunks >= after.len().div_ceil(CHUNK_ENTRIES) && chunks < after.len() / 8, "{chunks} chunks");

        let mut trail = Vec::new();
        let mut from = None;
        loop {
            let page = store.audit_page(organization, from, None, 7).unwrap();
            trail.extend(page.entries);
            match page.next {
                Some(next) => from = Some(next),
                None => break,
            }
        }
        assert!(trail.windows(2).all(|pair| pair[0].0 < pair[1].0));
        assert_eq!(trail[..3], before);
        let read: Vec<AuditEntry> = trail.into_iter().skip(3).map(|(_, entry)| entry).collect();
        assert_eq!(read, after);
        let key_1 = store.audit_page(organization, None, Some("key-1"), 1000).unwrap();
        assert_eq!(key_1.entries.len(), 100);

        assert_eq!(store.expire_audit(now).unwrap(), 3, "the entries from before chunks");
        assert_eq!(store.expire_audit(now + 10_000).unwrap(), 0, "a chunk goes when its newest entry does");
        assert_eq!(store.expire_audit(now + 1_000_000).unwrap(), 197);
        assert!(store.audit.is_empty() && store.audit_by_time.is_empty());
    }

    #[test]
    fn time_keys_sort_as_times_do() {
        let times = [i64::MIN, -1_000, -1, 0, 1, 1_700_000_000_000_000_000, i64::MAX];
        let keys: Vec<_> = times.iter().map(|at| time_key(*at, 7)).collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(time_key(5, u64::MAX) < time_key(6, 0));
    }
}
