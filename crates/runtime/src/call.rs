//! One call's state: the caller's organization and what its store may
//! read, the deadline, and the host functions a component calls (store,
//! log, WASI polling).

use super::*;
use esr_contract::Collection;
use esr_contract::limits::MAX_RANGES;

/// The caller's organization, bound into a call's store.
#[derive(Clone)]
pub struct Tenant {
    pub store: Arc<dyn esr_store::Store>,
    pub organization_id: Uuid,
    /// `{"organization_id", "name", "enrollment_token"}`.
    pub organization_json: Arc<Vec<u8>>,
    /// Where the call's reads may come from, and what they saw.
    pub reads: Arc<CallReads>,
    /// How long a call may run (`--plugin-deadline-ms`): a call's read
    /// session ends there too, so the store's statements and walks stop
    /// with guest code, counted from when the call starts (time spent
    /// queueing for a slot is not the store's).
    pub call_time: Option<Duration>,
}

/// What a call's read sessions must see and what they saw: the position a
/// cursor carries in, the position the next page's cursor carries out, and
/// whether a read failed on a replica (the call is then run again on the
/// primary).
#[derive(Debug, Default)]
pub struct CallReads {
    /// The position the reads must have reached (from the request's cursor).
    pub at_least: AtomicU64,
    /// Read the primary only (a retry after a replica failed).
    pub primary_only: AtomicBool,
    /// The latest position a session of the call read at (0: unknown).
    pub position: AtomicU64,
    pub failed_on_replica: AtomicBool,
    /// The request was abandoned (its client went away): the call stops
    /// at its next epoch check or store call.
    pub abandoned: AtomicBool,
    /// The record read with the request's key, for the call's first read
    /// of it ([`esr_store::Store::api_key_reading_ahead`]).
    pub read_ahead: std::sync::Mutex<Option<esr_store::ReadAhead>>,
    /// The read session begun with the request's key, for the call's
    /// session ([`esr_store::Store::api_key_opening_reader`]).
    pub opened: std::sync::Mutex<Option<OpenedReader>>,
}

/// A read session begun with a request's key, and its organization.
pub struct OpenedReader {
    pub organization: Uuid,
    pub reader: Box<dyn StoreReader>,
}

impl std::fmt::Debug for OpenedReader {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("OpenedReader").field("organization", &self.organization).finish_non_exhaustive()
    }
}

impl CallReads {
    /// Where a session of a call that may run `call_time` from now reads from.
    pub fn read_from(&self, call_time: Option<Duration>) -> esr_store::ReadFrom {
        esr_store::ReadFrom {
            position: self.at_least.load(Ordering::Relaxed),
            primary_only: self.primary_only.load(Ordering::Relaxed),
            deadline: call_time.map(|time| Instant::now() + time),
        }
    }
}

/// What `slot` holds, taken out of it.
fn taken<T>(slot: &std::sync::Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
}

impl Tenant {
    /// Opens the call's read session on the organization's records: every
    /// store function of one call reads through it. Blocks: call it on the
    /// thread that runs the call.
    pub fn session(&self) -> Result<TenantSession, StoreError> {
        let organization = self.organization_id;
        let read_ahead = taken(&self.reads.read_ahead).filter(|read| read.organization == organization);
        let reader = match taken(&self.reads.opened).filter(|opened| opened.organization == organization) {
            Some(opened) => opened.reader,
            None => self.store.reader_from(organization, self.reads.read_from(self.call_time))?,
        };
        Ok(TenantSession {
            reader,
            organization_json: self.organization_json.clone(),
            reads: self.reads.clone(),
            read_ahead,
        })
    }
}

/// One call's read session on its organization's records.
pub struct TenantSession {
    pub(super) reader: Box<dyn StoreReader>,
    /// `{"organization_id", "name", "enrollment_token"}`.
    pub organization_json: Arc<Vec<u8>>,
    pub(super) reads: Arc<CallReads>,
    /// The record read with the request's key, until the session reads it.
    read_ahead: Option<esr_store::ReadAhead>,
}

impl Drop for TenantSession {
    fn drop(&mut self) {
        if let Some(position) = self.reader.position() {
            self.reads.position.fetch_max(position, Ordering::Relaxed);
        }
        if self.reader.failed_on_replica() {
            self.reads.failed_on_replica.store(true, Ordering::Relaxed);
        }
    }
}

/// What one call's store holds.
pub(super) struct CallState {
    /// Made on the call's first use of WASI: the read components import
    /// none, and making one (clocks, random generators, stdio) was a
    /// measurable part of every call (docs/performance.md).
    pub(super) wasi: Option<WasiCtx>,
    pub(super) table: ResourceTable,
    pub(super) limits: StoreLimits,
    /// The most memory the component may have (what `limits` enforces).
    pub(super) memory_bytes: usize,
    /// `None` while validating at load time: the store is then empty.
    pub(super) tenant: Option<TenantSession>,
    pub(super) group: String,
    /// What the component's descriptor declares its store may read.
    pub(super) reads: Reads,
    pub(super) request_id: String,
    /// The guest's stderr, made with the WASI context: a panic reaches the
    /// host only as a trap plus the message the guest wrote here (or, built
    /// without WASI, through the `log` import).
    pub(super) stderr: Option<MemoryOutputPipe>,
    /// When the call's time is up: the epoch deadline interrupts guest
    /// code, and a wait in WASI ends here too.
    pub(super) deadline: Instant,
    /// `log` messages written and dropped so far in this call.
    pub(super) log_written: u32,
    pub(super) log_dropped: u32,
    /// The records `store.index-scan-held` handed out, for the page.
    pub(super) held: HeldRecords,
}

/// The records a call holds (`store.index-scan-held`), numbered in the
/// order handed out, until its page names them (`held-lists.list`). At
/// most the call's memory cap in bytes: what the component could have
/// been handed as `index-scan-batch`es.
#[derive(Default)]
pub(super) struct HeldRecords {
    bytes: Vec<u8>,
    /// Where each record's bytes end in `bytes`.
    ends: Vec<usize>,
}

impl HeldRecords {
    fn record(&self, number: u32) -> Option<&[u8]> {
        let number = usize::try_from(number).ok()?;
        let end = *self.ends.get(number)?;
        let start = match number.checked_sub(1) {
            Some(before) => self.ends[before],
            None => 0,
        };
        Some(&self.bytes[start..end])
    }

    /// The held records `numbers` names, in that order, as a JSON array. A
    /// number never handed out, or an answer over `at_most` bytes (a
    /// number may repeat), fails the call.
    fn json_array(&self, numbers: &[u32], at_most: usize) -> wasmtime::Result<Vec<u8>> {
        // Sized before anything is allocated: the numbers are the
        // component's, and may repeat a large record millions of times.
        let mut size = 2usize;
        for &number in numbers {
            let record = self.record(number).ok_or_else(|| {
                wasmtime::Error::msg(format!(
                    "held-lists.list: its page names held record {number}, and the call held {}",
                    self.ends.len()
                ))
            })?;
            size = size.saturating_add(record.len() + 1);
        }
        if size > at_most {
            return Err(wasmtime::Error::msg(format!(
                "held-lists.list: its page of {} held records would take {size} bytes, more than the call's memory \
                 ({at_most} bytes)",
                numbers.len()
            )));
        }
        let mut array = Vec::with_capacity(size);
        array.push(b'[');
        for (position, record) in numbers.iter().filter_map(|&number| self.record(number)).enumerate() {
            if position > 0 {
                array.push(b',');
            }
            array.extend_from_slice(record);
        }
        array.push(b']');
        Ok(array)
    }
}

impl CallState {
    /// `handler.page` of a `held-lists.list` answer: held records written
    /// from the host's copies.
    pub(super) fn page_of(&self, page: held_lists::HeldPage) -> wasmtime::Result<Page> {
        let data = match page.records {
            held_lists::PageRecords::Json(data) => data,
            held_lists::PageRecords::Held(numbers) => self.held.json_array(&numbers, self.memory_bytes)?,
        };
        Ok(Page { data, total: page.total, limit: page.limit, offset: page.offset, next_cursor: page.next_cursor })
    }
}

impl Drop for CallState {
    fn drop(&mut self) {
        if self.log_dropped > 0 {
            tracing::warn!(
                plugin = %self.group, request_id = %self.request_id,
                "{} messages dropped (at most {LOG_MESSAGES_PER_CALL} are logged per call)", self.log_dropped
            );
        }
    }
}

/// A call that reached its deadline while its guest waited in WASI, or
/// before a store call.
#[derive(Debug, thiserror::Error)]
#[error("the call reached its deadline")]
pub(super) struct DeadlineReached;

/// A call whose request was abandoned: nobody waits for its answer.
#[derive(Debug, thiserror::Error)]
#[error("the call's request was abandoned by its client")]
pub(super) struct Abandoned;

/// Runs a WASI wait, ending it at `deadline`. The stock synchronous WASI
/// blocks the calling thread without limit (a guest's `sleep` or clock
/// poll), and epoch interruption only fires in guest code.
pub(super) fn until_deadline<T>(
    deadline: Instant,
    wait: impl std::future::Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    wasmtime_wasi::runtime::in_tokio(tokio::time::timeout(remaining, wait)).unwrap_or(Err(DeadlineReached.into()))
}

/// `wasi:io/poll` with every wait bounded by the call's deadline; it
/// shadows the stock one. Every other WASI call that could block is on a
/// stream the host makes always ready (closed stdin, discarded stdout,
/// stderr into memory) or on a socket, which a call cannot create.
impl wasi_poll::Host for CallState {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        until_deadline(self.deadline, async_wasi_poll::Host::poll(&mut self.table, pollables))
    }
}

impl wasi_poll::HostPollable for CallState {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        wasi_poll::HostPollable::ready(&mut self.table, pollable)
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        until_deadline(self.deadline, async_wasi_poll::HostPollable::block(&mut self.table, pollable))
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        wasi_poll::HostPollable::drop(&mut self.table, pollable)
    }
}

/// Text a component wrote, fit for one log line: at most `max_bytes`
/// (cut at a character boundary and marked), with control characters
/// escaped (`\n` as `\\n`, others as `\u{..}`) so that it cannot start a
/// line of its own, move the cursor or reorder what a terminal shows.
pub fn loggable_guest_text(text: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_bytes) + 32);
    for c in text.chars() {
        let before = out.len();
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_layout_control(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
        if out.len() > max_bytes {
            out.truncate(before);
            out.push_str(&format!("… [truncated, {} bytes in all]", text.len()));
            break;
        }
    }
    out
}

/// Characters that are not C0 or C1 controls but change how a line shows:
/// bidirectional overrides, embeddings and isolates, and line separators.
pub(super) fn is_layout_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let ctx = self.wasi.get_or_insert_with(|| {
            let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
            self.stderr = Some(stderr.clone());
            // No sockets: nothing a call could wait on beyond the clocks.
            WasiCtx::builder().stderr(stderr).allow_tcp(false).allow_udp(false).build()
        });
        WasiCtxView { ctx, table: &mut self.table }
    }
}

impl types::Host for CallState {}

impl CallState {
    /// What the guest wrote to stderr, if it had one.
    pub(super) fn stderr_text(&self) -> String {
        let written = self.stderr.as_ref().map(MemoryOutputPipe::contents).unwrap_or_default();
        String::from_utf8_lossy(&written).trim().to_owned()
    }

    /// Whether the call's request was abandoned by its client.
    pub(super) fn abandoned(&self) -> bool {
        self.tenant.as_ref().is_some_and(|tenant| tenant.reads.abandoned.load(Ordering::Relaxed))
    }

    /// Fails the call when its request was abandoned or its time is up.
    pub(super) fn still_wanted(&self) -> wasmtime::Result<()> {
        if self.abandoned() {
            return Err(Abandoned.into());
        }
        if Instant::now() >= self.deadline {
            return Err(DeadlineReached.into());
        }
        Ok(())
    }

    /// Fails the call unless the component declared `name` in its `reads`,
    /// and while the call is still wanted (every store function asks this
    /// first, so host work stops at the next store call too).
    pub(super) fn may_read(&self, name: &str, function: &str) -> wasmtime::Result<()> {
        self.still_wanted()?;
        if self.reads.allows(name) {
            return Ok(());
        }
        Err(wasmtime::format_err!(
            "the {} component read `{name}` with store.{function}, which its descriptor does not declare in `reads`",
            self.group
        ))
    }

    /// An index walk as a component asked for it (`function` names the
    /// store function): nothing without a tenant.
    fn walk_index<T: Default>(
        &mut self,
        collection: &str,
        function: &str,
        walk: WitWalk<'_>,
        read: impl FnOnce(&mut TenantSession, Collection, &IndexWalk<'_>) -> Result<T, StoreError>,
    ) -> wasmtime::Result<T> {
        let collection = self.collection_read(collection, function)?;
        let Some(tenant) = &mut self.tenant else { return Ok(T::default()) };
        let after = position_from_wit(function, "after", walk.after)?;
        let walk = IndexWalk {
            index: walk.index,
            value: walk.value,
            after,
            limit: walk.limit as usize,
            reverse: walk.reverse,
        };
        Ok(read(tenant, collection, &walk)?)
    }

    /// The collection a store call names, once [`Self::may_read`] allows
    /// it (`organization` is read with `store.organization` only).
    fn collection_read(&self, name: &str, function: &str) -> wasmtime::Result<Collection> {
        self.may_read(name, function)?;
        Collection::named(name).ok_or_else(|| {
            StoreError::MalformedCall(format!("store.{function} of `{name}`, which is not a collection")).into()
        })
    }
}

/// Records a batch makes room for when its first is read; more grow it.
const BATCH_RESERVE_RECORDS: usize = 128;

/// A batch's record id (36 characters, after the others) and its position.
fn push_id_and_position(ids: &mut String, positions: &mut Vec<i64>, at: &IndexPosition) {
    ids.push_str(at.id.hyphenated().encode_lower(&mut Uuid::encode_buffer()));
    positions.push(at.position);
}

/// An index walk with the WIT's values (its position as the component
/// gave it).
struct WitWalk<'a> {
    index: &'a str,
    value: &'a str,
    after: Option<&'a wit_store::IndexPosition>,
    limit: u32,
    reverse: bool,
}

/// A stored record's id and bytes, as the store functions hand them out.
pub type StoreEntry = (String, Vec<u8>);

/// A position a component gave (its id as text) as the contract's, or a
/// malformed call naming `function` and the position's `role` (the
/// message is made only then: this runs on every index read).
fn position_from_wit(
    function: &str,
    role: &str,
    position: Option<&wit_store::IndexPosition>,
) -> Result<Option<IndexPosition>, StoreError> {
    let Some(wit_store::IndexPosition { created_at, id }) = position else { return Ok(None) };
    match Uuid::parse_str(id) {
        Ok(id) => Ok(Some(IndexPosition::new(*created_at, id))),
        Err(_) => Err(StoreError::MalformedCall(format!("{function} {role} {id:?}, which is not a UUID"))),
    }
}

fn position_to_wit(position: IndexPosition) -> wit_store::IndexPosition {
    wit_store::IndexPosition { created_at: position.position, id: position.id.to_string() }
}

fn range_from_wit(function: &str, range: &wit_store::IndexRange) -> Result<IndexRange, StoreError> {
    Ok(IndexRange {
        index: range.index.clone(),
        after: position_from_wit(function, "bound at", range.after.as_ref())?,
        before: position_from_wit(function, "bound at", range.before.as_ref())?,
    })
}

fn ranges_from_wit(function: &str, ranges: &[wit_store::IndexRange]) -> Result<Vec<IndexRange>, StoreError> {
    ranges.iter().map(|range| range_from_wit(function, range)).collect()
}

/// A count names at most [`MAX_RANGES`] ranges: each is a walk.
fn check_ranges(function: &str, matching: &Matching) -> Result<(), StoreError> {
    if matching.ranges.len() > MAX_RANGES {
        return Err(StoreError::MalformedCall(format!(
            "{function} with {} ranges; give at most {MAX_RANGES}",
            matching.ranges.len()
        )));
    }
    Ok(())
}

fn conditions_from_wit(conditions: Vec<wit_store::IndexCondition>) -> Vec<IndexCondition> {
    conditions.into_iter().map(|condition| IndexCondition::new(condition.index, condition.values)).collect()
}

/// A record as a component's `get` shapes it: JSON bytes.
pub type ShapedRecord = Vec<u8>;

/// The `store` functions on the tenant's records, shared by components
/// (through [`wit_store::Host`]) and the native baseline. An `Err` is a
/// malformed call (the caller's fault, never the data's) or a storage
/// failure.
impl TenantSession {
    /// The session's reader, for the host's own reads in it (the change
    /// feed's events, a list's sequence).
    pub fn reader(&mut self) -> &mut dyn StoreReader {
        &mut *self.reader
    }

    pub fn get(&mut self, collection: Collection, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Ok(id) = Uuid::parse_str(id) else { return Ok(None) };
        if let Some(read) = self.read_ahead.take_if(|read| read.collection == collection && read.id == id) {
            if let Some(position) = read.position {
                self.reads.position.fetch_max(position, Ordering::Relaxed);
            }
            return Ok(read.body);
        }
        self.reader.get(collection, id)
    }

    pub fn scan(&mut self, collection: Collection, walk: &RecordWalk) -> Result<Vec<StoreEntry>, StoreError> {
        let records = self.reader.scan(collection, walk)?;
        Ok(records.into_iter().map(|(id, value)| (id.to_string(), value)).collect())
    }

    pub fn count(&mut self, collection: Collection) -> Result<u64, StoreError> {
        self.reader.count(collection)
    }

    pub fn index_scan(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
    ) -> Result<Vec<IndexedRecord>, StoreError> {
        self.reader.index_scan(collection, walk)
    }

    /// `store.index-scan-batch`: the same records, each borrowed as read.
    pub fn index_scan_each(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
        each: &mut esr_store::EachIndexed<'_>,
    ) -> Result<(), StoreError> {
        self.reader.index_scan_each(collection, walk, each)
    }

    /// `store.index-positions`: positions and ids, no records.
    pub fn index_positions(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
    ) -> Result<Vec<IndexPosition>, StoreError> {
        self.reader.index_positions(collection, walk)
    }

    pub fn index_count(&mut self, collection: Collection, index: &str, value: &str) -> Result<u64, StoreError> {
        self.reader.index_count(collection, index, value)
    }

    pub fn count_matching(&mut self, collection: Collection, matching: &Matching) -> Result<u64, StoreError> {
        check_ranges("count-in-ranges", matching)?;
        self.reader.count_matching(collection, matching)
    }

    pub fn count_groups(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
    ) -> Result<Vec<GroupCount>, StoreError> {
        check_ranges("count-groups-in-ranges", matching)?;
        self.reader.count_groups(collection, group_by, matching)
    }
}

/// The component's view: a call without a tenant (at load time) sees an
/// empty store; a malformed call, or one reading what the component did not
/// declare, traps.
impl wit_store::Host for CallState {
    fn get(&mut self, collection: String, id: String) -> wasmtime::Result<Option<Vec<u8>>> {
        let collection = self.collection_read(&collection, "get")?;
        let Some(tenant) = &mut self.tenant else { return Ok(None) };
        Ok(tenant.get(collection, &id)?)
    }

    fn scan(
        &mut self,
        collection: String,
        after: Option<String>,
        limit: u32,
        reverse: bool,
    ) -> wasmtime::Result<Vec<wit_store::Entry>> {
        let collection = self.collection_read(&collection, "scan")?;
        let Some(tenant) = &mut self.tenant else { return Ok(Vec::new()) };
        let after = match after {
            Some(id) => Some(
                Uuid::parse_str(&id)
                    .map_err(|_| StoreError::MalformedCall(format!("scan after {id:?}, which is not a UUID")))?,
            ),
            None => None,
        };
        let records = tenant.scan(collection, &RecordWalk { after, limit: limit as usize, reverse })?;
        Ok(records.into_iter().map(|(id, value)| wit_store::Entry { id, value }).collect())
    }

    fn count(&mut self, collection: String) -> wasmtime::Result<u64> {
        let collection = self.collection_read(&collection, "count")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        Ok(tenant.count(collection)?)
    }

    fn index_scan(
        &mut self,
        collection: String,
        index: String,
        value: String,
        after: Option<wit_store::IndexPosition>,
        limit: u32,
        reverse: bool,
    ) -> wasmtime::Result<Vec<wit_store::Entry>> {
        let walk = WitWalk { index: &index, value: &value, after: after.as_ref(), limit, reverse };
        let records = self.walk_index(&collection, "index-scan", walk, TenantSession::index_scan)?;
        Ok(records.into_iter().map(|(at, value)| wit_store::Entry { id: at.id.to_string(), value }).collect())
    }

    fn index_scan_batch(
        &mut self,
        collection: String,
        index: String,
        value: String,
        after: Option<wit_store::IndexPosition>,
        limit: u32,
        reverse: bool,
    ) -> wasmtime::Result<wit_store::EntryBatch> {
        let walk = WitWalk { index: &index, value: &value, after: after.as_ref(), limit, reverse };
        // The records go straight from the store into the batch: one copy
        // of each on the host. Those past the component's memory are
        // counted, not copied, and fail the call below.
        let memory_bytes = self.memory_bytes;
        let fits = move |bytes: usize| u32::try_from(bytes).is_ok() && bytes <= memory_bytes;
        let mut batch =
            wit_store::EntryBatch { ids: String::new(), positions: Vec::new(), ends: Vec::new(), values: Vec::new() };
        let (mut count, mut bytes) = (0usize, 0usize);
        let mut add = |at: IndexPosition, record: &[u8]| {
            count += 1;
            bytes = bytes.saturating_add(record.len());
            if !fits(bytes) {
                return Ok(());
            }
            if batch.ends.is_empty() {
                // Sized from the first record: a page's records are alike.
                let expected = (limit as usize).min(BATCH_RESERVE_RECORDS);
                batch.ids.reserve(expected * esr_contract::UUID_TEXT_LEN);
                batch.positions.reserve(expected);
                batch.ends.reserve(expected);
                batch.values.reserve(expected * record.len());
            }
            push_id_and_position(&mut batch.ids, &mut batch.positions, &at);
            batch.values.extend_from_slice(record);
            // At most `bytes`, which fits in a u32 (checked above).
            batch.ends.push(batch.values.len() as u32);
            Ok(())
        };
        self.walk_index(&collection, "index-scan-batch", walk, |tenant, collection, walk| {
            tenant.index_scan_each(collection, walk, &mut add)
        })?;
        if !fits(bytes) {
            return Err(wasmtime::Error::msg(format!(
                "store.index-scan-batch: {count} records of {bytes} bytes exceed the component's memory ({memory_bytes} bytes)"
            )));
        }
        Ok(batch)
    }

    fn index_scan_held(
        &mut self,
        collection: String,
        index: String,
        value: String,
        after: Option<wit_store::IndexPosition>,
        limit: u32,
        reverse: bool,
    ) -> wasmtime::Result<wit_store::HeldBatch> {
        let walk = WitWalk { index: &index, value: &value, after: after.as_ref(), limit, reverse };
        let memory_bytes = self.memory_bytes;
        let mut held = std::mem::take(&mut self.held);
        let first = u32::try_from(held.ends.len())
            .map_err(|_| wasmtime::Error::msg("store.index-scan-held: too many held records"))?;
        let mut batch = wit_store::HeldBatch { first, ids: String::new(), positions: Vec::new() };
        let mut over = false;
        let read = {
            let mut add = |at: IndexPosition, record: &[u8]| {
                if over || held.bytes.len().saturating_add(record.len()) > memory_bytes {
                    over = true;
                    return Ok(());
                }
                push_id_and_position(&mut batch.ids, &mut batch.positions, &at);
                held.bytes.extend_from_slice(record);
                held.ends.push(held.bytes.len());
                Ok(())
            };
            self.walk_index(&collection, "index-scan-held", walk, |tenant, collection, walk| {
                tenant.index_scan_each(collection, walk, &mut add)
            })
        };
        self.held = held;
        read?;
        if over {
            return Err(wasmtime::Error::msg(format!(
                "store.index-scan-held: the call's held records would exceed its memory ({memory_bytes} bytes)"
            )));
        }
        Ok(batch)
    }

    fn index_positions(
        &mut self,
        collection: String,
        index: String,
        value: String,
        after: Option<wit_store::IndexPosition>,
        limit: u32,
        reverse: bool,
    ) -> wasmtime::Result<Vec<wit_store::IndexPosition>> {
        let walk = WitWalk { index: &index, value: &value, after: after.as_ref(), limit, reverse };
        let positions = self.walk_index(&collection, "index-positions", walk, TenantSession::index_positions)?;
        Ok(positions.into_iter().map(position_to_wit).collect())
    }

    fn index_count(&mut self, collection: String, index: String, value: String) -> wasmtime::Result<u64> {
        let collection = self.collection_read(&collection, "index-count")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        Ok(tenant.index_count(collection, &index, &value)?)
    }

    fn count_matching(
        &mut self,
        collection: String,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<u64> {
        let collection = self.collection_read(&collection, "count-matching")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        let matching = Matching { conditions: conditions_from_wit(conditions), updated_after, ranges: Vec::new() };
        Ok(tenant.count_matching(collection, &matching)?)
    }

    fn count_in_range(
        &mut self,
        collection: String,
        range: wit_store::IndexRange,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<u64> {
        self.count_in_ranges(collection, vec![range], conditions, updated_after)
    }

    fn count_in_ranges(
        &mut self,
        collection: String,
        ranges: Vec<wit_store::IndexRange>,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<u64> {
        let collection = self.collection_read(&collection, "count-in-ranges")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        if ranges.is_empty() {
            return Err(StoreError::MalformedCall("count-in-ranges without a range".to_owned()).into());
        }
        let ranges = ranges_from_wit("count-in-ranges", &ranges)?;
        let matching = Matching { ranges, conditions: conditions_from_wit(conditions), updated_after };
        Ok(tenant.count_matching(collection, &matching)?)
    }

    fn count_groups(
        &mut self,
        collection: String,
        group_by: Vec<String>,
        range: Option<wit_store::IndexRange>,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<Vec<wit_store::GroupCount>> {
        self.count_groups_in_ranges(collection, group_by, range.into_iter().collect(), conditions, updated_after)
    }

    fn count_groups_in_ranges(
        &mut self,
        collection: String,
        group_by: Vec<String>,
        ranges: Vec<wit_store::IndexRange>,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<Vec<wit_store::GroupCount>> {
        let collection = self.collection_read(&collection, "count-groups-in-ranges")?;
        let Some(tenant) = &mut self.tenant else { return Ok(Vec::new()) };
        let ranges = ranges_from_wit("count-groups-in-ranges", &ranges)?;
        let matching = Matching { ranges, conditions: conditions_from_wit(conditions), updated_after };
        let groups = tenant.count_groups(collection, &group_by, &matching)?;
        Ok(groups.into_iter().map(|group| wit_store::GroupCount { values: group.values, count: group.count }).collect())
    }

    fn organization(&mut self) -> wasmtime::Result<Vec<u8>> {
        self.may_read(reads::ORGANIZATION, "organization")?;
        Ok(self.tenant.as_ref().map(|t| t.organization_json.to_vec()).unwrap_or_else(|| b"{}".to_vec()))
    }
}

impl log::Host for CallState {
    fn write(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        if self.log_written >= LOG_MESSAGES_PER_CALL {
            self.log_dropped = self.log_dropped.saturating_add(1);
            return Ok(());
        }
        self.log_written += 1;
        let message = loggable_guest_text(&message, LOG_MESSAGE_BYTES);
        let (group, request_id) = (&self.group, &self.request_id);
        match level {
            log::Level::Debug => tracing::debug!(plugin = %group, request_id = %request_id, "{message}"),
            log::Level::Info => tracing::info!(plugin = %group, request_id = %request_id, "{message}"),
            log::Level::Warn => tracing::warn!(plugin = %group, request_id = %request_id, "{message}"),
            log::Level::Error => tracing::error!(plugin = %group, request_id = %request_id, "{message}"),
        }
        Ok(())
    }
}
