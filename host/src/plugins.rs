//! The plugin runtime: loading, validating and calling components.
//!
//! Every component in the plugins directory is compiled once, checked
//! (world, WIT package version, the group its `describe()` claims and what
//! its store may read, no two claiming one group) and pre-instantiated.
//! Each call then gets a fresh `Store` and instance from the pooling
//! allocator, with the caller's organization and the component's reads
//! bound into the store, an epoch deadline (which also ends any wait in
//! WASI), a memory cap and bounded logging, so no state
//! survives a request and a misbehaving guest fails only its own request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};
use uuid::Uuid;
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, Resource, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder,
};
use wasmtime_wasi::p2::bindings::sync::io::poll as wasi_poll;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_io::bindings::wasi::io::poll as async_wasi_poll;
use wasmtime_wasi_io::poll::DynPollable;

use crate::store::{IndexCondition, IndexPosition, StoreError, StoreReader};

mod reads;
pub use reads::{READABLE, Reads};

mod bindings {
    pub mod resource {
        wasmtime::component::bindgen!({
            path: "../wit",
            world: "esr:plugin/resource-plugin",
            imports: { default: trappable },
        });
    }
    pub mod document {
        wasmtime::component::bindgen!({
            path: "../wit",
            world: "esr:plugin/document-plugin",
            imports: { default: trappable },
            with: {
                "esr:plugin/types": super::resource::esr::plugin::types,
                "esr:plugin/store": super::resource::esr::plugin::store,
                "esr:plugin/log": super::resource::esr::plugin::log,
            },
        });
    }
    pub mod importer {
        wasmtime::component::bindgen!({
            path: "../wit",
            world: "esr:plugin/report-importer",
            imports: { default: trappable },
            with: {
                "esr:plugin/log": super::resource::esr::plugin::log,
            },
        });
    }
}

use bindings::document::{DocumentPlugin, DocumentPluginPre};
use bindings::importer::{ReportImporter, ReportImporterPre};
use bindings::resource::ResourcePlugin;
use bindings::resource::esr::plugin::{log, store as wit_store, types};
use bindings::resource::exports::esr::plugin::{handler, summaries};

pub use bindings::document::exports::esr::plugin::document::Rendered;
pub use bindings::importer::exports::esr::plugin::importer::{Confidence, ReportError as ImporterError};
pub use bindings::resource::exports::esr::plugin::handler::Page;
pub use bindings::resource::exports::esr::plugin::summaries::SummaryAnswer as Summary;
pub use types::{Descriptor, Error as PluginError, InvalidParam, QueryParam, Request};

/// The WIT package components are built against.
pub const WIT_PACKAGE: &str = "esr:plugin";
/// The package versions this host loads: `0.3.x` (for `0.y`, a minor
/// version is a breaking one under semver).
pub const ACCEPTED_VERSIONS: &str = "0.3.x";
/// The package version this host is built against.
const WIT_VERSION: &str = "0.3.2";
const ACCEPTED_MAJOR_MINOR: (u64, u64) = (0, 3);

/// The resource groups served by the `handler` world, as the API names them.
pub const RESOURCE_GROUPS: [&str; 4] = crate::store::COLLECTIONS;
/// The group served by the `document` world.
pub const AGENT_GROUP: &str = "agent";

/// Per-call limits on a guest.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Guest linear memory, in bytes.
    pub memory_bytes: usize,
    /// Time per call: guest code, and its waits in WASI.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { memory_bytes: 64 << 20, deadline: Duration::from_secs(2) }
    }
}

impl Limits {
    /// What a report importer gets by default: a report of 10,000
    /// vulnerabilities is tens of MiB of JSON, parsed and answered again.
    pub fn importer_default() -> Limits {
        Limits { memory_bytes: 512 << 20, deadline: Duration::from_secs(20) }
    }
}

/// Memory and table bytes per instance slot reset in place rather than
/// released: the stack, data and the SDK's 8 MiB arena.
const KEEP_RESIDENT_BYTES: usize = 16 << 20;
const EPOCH_TICK: Duration = Duration::from_millis(10);
/// Captured guest stderr per call (a panic message is what matters).
const STDERR_CAPACITY: usize = 16 * 1024;
/// `log` messages kept per call; the rest are counted in one line.
const LOG_MESSAGES_PER_CALL: u32 = 100;
/// Bytes of one `log` message kept (escaped); the rest is cut and marked.
pub const LOG_MESSAGE_BYTES: usize = 4 * 1024;

/// The compiled-code engine, shared by every loaded component.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    limits: Limits,
    /// Report importers' own limits (`--importer-memory-mib`,
    /// `--importer-deadline-ms`).
    importer_limits: Limits,
    /// Where compiled components are kept between runs, if anywhere.
    cache_dir: Option<PathBuf>,
}

impl PluginEngine {
    pub fn new(limits: Limits) -> anyhow::Result<PluginEngine> {
        PluginEngine::with_importer_limits(limits, Limits::importer_default())
    }

    /// An engine whose report importers get `importer_limits`; each call's
    /// store enforces its kind's memory cap, the pool allows the larger.
    pub fn with_importer_limits(limits: Limits, importer_limits: Limits) -> anyhow::Result<PluginEngine> {
        let mut pooling = PoolingAllocationConfig::default();
        pooling
            .total_component_instances(256)
            .total_core_instances(2048)
            .total_memories(512)
            .total_tables(1024)
            .max_memory_size(limits.memory_bytes.max(importer_limits.memory_bytes))
            // Resetting an instance's memory with `madvise` flushed the
            // TLB of every core on every call, the largest cost a component
            // added. Instead the pages a call wrote (found with the
            // PAGEMAP_SCAN ioctl, Linux 6.7+; without it, the lowest ones)
            // are reset in place, up to this much per slot; the SDK's
            // arena keeps a typical call inside it (docs/performance.md).
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(KEEP_RESIDENT_BYTES);
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
        let engine = Engine::new(&config).map_err(|e| anyhow!("configuring the WebAssembly engine: {e:#}"))?;
        // The epoch clock that bounds guest CPU time; it holds only a weak
        // handle so that it stops with the engine.
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("esr-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .context("starting the epoch thread")?;
        Ok(PluginEngine { engine, limits, importer_limits, cache_dir: None })
    }

    /// Keeps compiled components in `dir`, keyed by the component's content
    /// hash and the engine's configuration, so restarts skip compiling.
    /// Cached files are machine code run as is, so a directory another user
    /// owns or may write to is not used (a warning says why).
    pub fn with_cache(mut self, dir: PathBuf) -> PluginEngine {
        match crate::private_files::private_directory(&dir) {
            Ok(()) => self.cache_dir = Some(dir),
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), reason, "not caching compiled components: compiling each at start")
            }
        }
        self
    }

    /// The component, from the cache when it holds a compatible build.
    fn compile(&self, bytes: &[u8], sha256: &str) -> wasmtime::Result<Component> {
        let Some(dir) = &self.cache_dir else { return Component::new(&self.engine, bytes) };
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&self.engine.precompile_compatibility_hash(), &mut hasher);
        let path = dir.join(format!("{sha256}-{:016x}.cwasm", std::hash::Hasher::finish(&hasher)));
        if path.exists() {
            match self.deserialize_cached(&path) {
                Ok(component) => return Ok(component),
                Err(error) => tracing::warn!(file = %path.display(), %error, "ignoring an unusable cached component"),
            }
        }
        let component = Component::new(&self.engine, bytes)?;
        if let Err(error) = component.serialize().map_err(|e| e.to_string()).and_then(|compiled| {
            crate::private_files::write_private_atomically(dir, &path, &compiled).map_err(|e| e.to_string())
        }) {
            tracing::warn!(dir = %dir.display(), %error, "cannot cache a compiled component");
        }
        Ok(component)
    }

    #[allow(unsafe_code)]
    fn deserialize_cached(&self, path: &Path) -> wasmtime::Result<Component> {
        // SAFETY: `deserialize_file` trusts the file to be wasmtime's own
        // output. Cache files are written only by `compile` above, into a
        // directory inside the data directory, owner-only, under a name that
        // holds the source's SHA-256 and the engine configuration's hash;
        // wasmtime itself refuses files from another version or config.
        unsafe { Component::deserialize_file(&self.engine, path) }
    }
}

/// The caller's organization, bound into a call's store.
#[derive(Clone)]
pub struct Tenant {
    pub store: Arc<dyn crate::store::Store>,
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
}

impl Tenant {
    /// Opens the call's read session on the organization's records: every
    /// store function of one call reads through it. Blocks: call it on the
    /// thread that runs the call.
    pub fn session(&self) -> Result<TenantSession, StoreError> {
        let from = crate::store::ReadFrom {
            position: self.reads.at_least.load(Ordering::Relaxed),
            primary_only: self.reads.primary_only.load(Ordering::Relaxed),
            deadline: self.call_time.map(|time| Instant::now() + time),
        };
        Ok(TenantSession {
            reader: self.store.reader_from(self.organization_id, from)?,
            organization_json: self.organization_json.clone(),
            reads: self.reads.clone(),
        })
    }
}

/// One call's read session on its organization's records.
pub struct TenantSession {
    reader: Box<dyn StoreReader>,
    /// `{"organization_id", "name", "enrollment_token"}`.
    pub organization_json: Arc<Vec<u8>>,
    reads: Arc<CallReads>,
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
struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    /// `None` while validating at load time: the store is then empty.
    tenant: Option<TenantSession>,
    group: String,
    /// What the component's descriptor declares its store may read.
    reads: Reads,
    request_id: String,
    /// The guest's stderr: a panic reaches the host only as a trap plus
    /// the message the guest wrote here.
    stderr: MemoryOutputPipe,
    /// When the call's time is up: the epoch deadline interrupts guest
    /// code, and a wait in WASI ends here too.
    deadline: Instant,
    /// `log` messages written and dropped so far in this call.
    log_written: u32,
    log_dropped: u32,
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
struct DeadlineReached;

/// A call whose request was abandoned: nobody waits for its answer.
#[derive(Debug, thiserror::Error)]
#[error("the call's request was abandoned by its client")]
struct Abandoned;

/// Runs a WASI wait, ending it at `deadline`. The stock synchronous WASI
/// blocks the calling thread without limit (a guest's `sleep` or clock
/// poll), and epoch interruption only fires in guest code.
fn until_deadline<T>(
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
fn is_layout_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl types::Host for CallState {}

impl CallState {
    /// Whether the call's request was abandoned by its client.
    fn abandoned(&self) -> bool {
        self.tenant.as_ref().is_some_and(|tenant| tenant.reads.abandoned.load(Ordering::Relaxed))
    }

    /// Fails the call when its request was abandoned or its time is up.
    fn still_wanted(&self) -> wasmtime::Result<()> {
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
    fn may_read(&self, name: &str, function: &str) -> wasmtime::Result<()> {
        self.still_wanted()?;
        if self.reads.allows(name) {
            return Ok(());
        }
        Err(wasmtime::format_err!(
            "the {} component read `{name}` with store.{function}, which its descriptor does not declare in `reads`",
            self.group
        ))
    }
}

/// A range of a sort index as components give it: the index, and the
/// positions (with ids as text) it lies strictly between.
pub type RangeOfIds<'a> = (&'a str, Option<(i64, &'a str)>, Option<(i64, &'a str)>);

/// A stored record's id and bytes, as the store functions hand them out.
pub type StoreEntry = (String, Vec<u8>);

/// A position a component gave (its id as text) as the store's, or a
/// malformed call naming `function`.
fn index_position(function: &str, bound: Option<(i64, &str)>) -> Result<Option<IndexPosition>, StoreError> {
    let Some((position, id)) = bound else { return Ok(None) };
    match Uuid::parse_str(id) {
        Ok(id) => Ok(Some((position, id))),
        Err(_) => Err(StoreError::MalformedCall(format!("{function} {id:?}, which is not a UUID"))),
    }
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

    pub fn get(&mut self, collection: &str, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Ok(id) = Uuid::parse_str(id) else { return Ok(None) };
        self.reader.get(collection, id)
    }

    pub fn scan(
        &mut self,
        collection: &str,
        after: Option<&str>,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        let after = match after {
            Some(id) => Some(
                Uuid::parse_str(id)
                    .map_err(|_| StoreError::MalformedCall(format!("scan after {id:?}, which is not a UUID")))?,
            ),
            None => None,
        };
        let records = self.reader.scan(collection, after, limit as usize, reverse)?;
        Ok(records.into_iter().map(|(id, value)| (id.to_string(), value)).collect())
    }

    pub fn count(&mut self, collection: &str) -> Result<u64, StoreError> {
        self.reader.count(collection)
    }

    pub fn index_scan(
        &mut self,
        collection: &str,
        index: &str,
        value: &str,
        after: Option<(i64, &str)>,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        let after = index_position("index-scan after", after)?;
        let records = self.reader.index_scan(collection, index, value, after, limit as usize, reverse)?;
        Ok(records.into_iter().map(|(id, value)| (id.to_string(), value)).collect())
    }

    /// `store.index-positions`: positions and ids, no records.
    pub fn index_positions(
        &mut self,
        collection: &str,
        index: &str,
        value: &str,
        after: Option<(i64, &str)>,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let after = index_position("index-positions after", after)?;
        let positions = self.reader.index_positions(collection, index, value, after, limit as usize, reverse)?;
        Ok(positions.into_iter().map(|(position, id)| (position, id.to_string())).collect())
    }

    pub fn index_count(&mut self, collection: &str, index: &str, value: &str) -> Result<u64, StoreError> {
        self.reader.index_count(collection, index, value)
    }

    pub fn count_matching(
        &mut self,
        collection: &str,
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        self.reader.count_matching(collection, conditions, updated_after)
    }

    /// `store.count-groups`: `range` is a sort index and positions with ids.
    pub fn count_groups(
        &mut self,
        collection: &str,
        group_by: &[String],
        range: Option<RangeOfIds<'_>>,
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<Vec<(Vec<String>, u64)>, StoreError> {
        let range = match range {
            Some((index, after, before)) => Some(crate::store::IndexRange {
                index: index.to_owned(),
                after: index_position("count-groups bound at", after)?,
                before: index_position("count-groups bound at", before)?,
            }),
            None => None,
        };
        let groups = self.reader.count_groups(collection, group_by, range.as_ref(), conditions, updated_after)?;
        Ok(groups.into_iter().map(|group| (group.values, group.count)).collect())
    }

    /// `store.count-in-range`: `after` and `before` are positions with ids.
    pub fn count_in_range(
        &mut self,
        collection: &str,
        index: &str,
        after: Option<(i64, &str)>,
        before: Option<(i64, &str)>,
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        let after = index_position("count-in-range bound at", after)?;
        let before = index_position("count-in-range bound at", before)?;
        self.reader.count_in_range(collection, index, after, before, conditions, updated_after)
    }
}

/// The component's view: a call without a tenant (at load time) sees an
/// empty store; a malformed call, or one reading what the component did not
/// declare, traps.
impl wit_store::Host for CallState {
    fn get(&mut self, collection: String, id: String) -> wasmtime::Result<Option<Vec<u8>>> {
        self.may_read(&collection, "get")?;
        let Some(tenant) = &mut self.tenant else { return Ok(None) };
        Ok(tenant.get(&collection, &id)?)
    }

    fn scan(
        &mut self,
        collection: String,
        after: Option<String>,
        limit: u32,
        reverse: bool,
    ) -> wasmtime::Result<Vec<wit_store::Entry>> {
        self.may_read(&collection, "scan")?;
        let Some(tenant) = &mut self.tenant else { return Ok(Vec::new()) };
        let records = tenant.scan(&collection, after.as_deref(), limit, reverse)?;
        Ok(records.into_iter().map(|(id, value)| wit_store::Entry { id, value }).collect())
    }

    fn count(&mut self, collection: String) -> wasmtime::Result<u64> {
        self.may_read(&collection, "count")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        Ok(tenant.count(&collection)?)
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
        self.may_read(&collection, "index-scan")?;
        let Some(tenant) = &mut self.tenant else { return Ok(Vec::new()) };
        let after = after.as_ref().map(|position| (position.created_at, position.id.as_str()));
        let records = tenant.index_scan(&collection, &index, &value, after, limit, reverse)?;
        Ok(records.into_iter().map(|(id, value)| wit_store::Entry { id, value }).collect())
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
        self.may_read(&collection, "index-positions")?;
        let Some(tenant) = &mut self.tenant else { return Ok(Vec::new()) };
        let after = after.as_ref().map(|position| (position.created_at, position.id.as_str()));
        let positions = tenant.index_positions(&collection, &index, &value, after, limit, reverse)?;
        Ok(positions.into_iter().map(|(created_at, id)| wit_store::IndexPosition { created_at, id }).collect())
    }

    fn index_count(&mut self, collection: String, index: String, value: String) -> wasmtime::Result<u64> {
        self.may_read(&collection, "index-count")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        Ok(tenant.index_count(&collection, &index, &value)?)
    }

    fn count_matching(
        &mut self,
        collection: String,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<u64> {
        self.may_read(&collection, "count-matching")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        let conditions: Vec<(String, Vec<String>)> =
            conditions.into_iter().map(|condition| (condition.index, condition.values)).collect();
        Ok(tenant.count_matching(&collection, &conditions, updated_after)?)
    }

    fn count_in_range(
        &mut self,
        collection: String,
        range: wit_store::IndexRange,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<u64> {
        self.may_read(&collection, "count-in-range")?;
        let Some(tenant) = &mut self.tenant else { return Ok(0) };
        let conditions: Vec<(String, Vec<String>)> =
            conditions.into_iter().map(|condition| (condition.index, condition.values)).collect();
        fn bound(position: &Option<wit_store::IndexPosition>) -> Option<(i64, &str)> {
            position.as_ref().map(|position| (position.created_at, position.id.as_str()))
        }
        Ok(tenant.count_in_range(
            &collection,
            &range.index,
            bound(&range.after),
            bound(&range.before),
            &conditions,
            updated_after,
        )?)
    }

    fn count_groups(
        &mut self,
        collection: String,
        group_by: Vec<String>,
        range: Option<wit_store::IndexRange>,
        conditions: Vec<wit_store::IndexCondition>,
        updated_after: Option<i64>,
    ) -> wasmtime::Result<Vec<wit_store::GroupCount>> {
        self.may_read(&collection, "count-groups")?;
        let Some(tenant) = &mut self.tenant else { return Ok(Vec::new()) };
        let conditions: Vec<(String, Vec<String>)> =
            conditions.into_iter().map(|condition| (condition.index, condition.values)).collect();
        fn bound(position: &Option<wit_store::IndexPosition>) -> Option<(i64, &str)> {
            position.as_ref().map(|position| (position.created_at, position.id.as_str()))
        }
        let range = range.as_ref().map(|range| (range.index.as_str(), bound(&range.after), bound(&range.before)));
        let groups = tenant.count_groups(&collection, &group_by, range, &conditions, updated_after)?;
        Ok(groups.into_iter().map(|(values, count)| wit_store::GroupCount { values, count }).collect())
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

/// What a loaded component is, for health and logs.
#[derive(Debug, Clone)]
pub struct PluginInfo {
    pub group: String,
    pub version: String,
    pub file: PathBuf,
    /// SHA-256 of the component file, hex.
    pub sha256: String,
    /// The WIT package version it was built against.
    pub wit_version: String,
    pub parameters: Vec<ParameterDoc>,
    pub sort_keys: Vec<String>,
    /// The JSON Schema of a record (or of the JSON document) it answers.
    pub response_schema: serde_json::Value,
    /// What its store may read.
    pub reads: Reads,
    /// What its summary accepts; `None` when it serves none (built before
    /// WIT 0.3.2, or grouping by nothing).
    pub summary: Option<SummaryDoc>,
    pub loaded_at: String,
}

/// What a component's summary accepts, as its `describe-summary()` says.
#[derive(Debug, Clone)]
pub struct SummaryDoc {
    /// The fields `groupBy` may name.
    pub group_by: Vec<String>,
    /// `groupBy` and the filters.
    pub parameters: Vec<ParameterDoc>,
}

/// A query parameter a component accepts, as its `describe()` documents it.
#[derive(Debug, Clone)]
pub struct ParameterDoc {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its value.
    pub schema: serde_json::Value,
    pub required: bool,
}

/// The most bytes of schema text one `describe()` may give, in all.
const MAX_DESCRIPTOR_SCHEMA_BYTES: usize = 1 << 20;

/// A JSON Schema a component gave as text: a JSON object, or why not.
fn descriptor_schema(text: &str, what: &str) -> anyhow::Result<serde_json::Value> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(schema) if schema.is_object() => Ok(schema),
        _ => bail!("describe() gives a {what} that is not a JSON Schema object"),
    }
}

/// The parameters and response schema of a descriptor, checked: names are
/// query-parameter names, each appears once, schemas are JSON objects.
fn descriptor_documents(descriptor: &Descriptor) -> anyhow::Result<(Vec<ParameterDoc>, serde_json::Value)> {
    let size: usize =
        descriptor.response_schema.len() + descriptor.parameters.iter().map(|p| p.schema.len()).sum::<usize>();
    if size > MAX_DESCRIPTOR_SCHEMA_BYTES {
        bail!("describe() gives {size} bytes of schemas, more than {MAX_DESCRIPTOR_SCHEMA_BYTES}");
    }
    Ok((
        parameter_documents(&descriptor.parameters)?,
        descriptor_schema(&descriptor.response_schema, "response schema")?,
    ))
}

/// What `describe-summary()` gives, checked like a descriptor's parameters;
/// `None` when it groups by nothing.
fn summary_document(info: &summaries::SummaryInfo) -> anyhow::Result<Option<SummaryDoc>> {
    if info.group_by.is_empty() {
        return Ok(None);
    }
    let size: usize = info.parameters.iter().map(|p| p.schema.len()).sum();
    if size > MAX_DESCRIPTOR_SCHEMA_BYTES {
        bail!("describe-summary() gives {size} bytes of schemas, more than {MAX_DESCRIPTOR_SCHEMA_BYTES}");
    }
    let field_is_sane = |field: &String| {
        (1..=64).contains(&field.len()) && field.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if let Some(field) = info.group_by.iter().find(|field| !field_is_sane(field)) {
        bail!("describe-summary() gives a field name that is not usable: {field:?}");
    }
    Ok(Some(SummaryDoc { group_by: info.group_by.clone(), parameters: parameter_documents(&info.parameters)? }))
}

fn parameter_documents(given: &[types::ParameterInfo]) -> anyhow::Result<Vec<ParameterDoc>> {
    let mut parameters: Vec<ParameterDoc> = Vec::with_capacity(given.len());
    for parameter in given {
        let name_is_sane = (1..=64).contains(&parameter.name.len())
            && parameter.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !name_is_sane || parameters.iter().any(|p| p.name == parameter.name) {
            bail!("describe() gives a parameter name that is not usable or repeated: {:?}", parameter.name);
        }
        parameters.push(ParameterDoc {
            name: parameter.name.clone(),
            description: parameter.description.clone(),
            schema: descriptor_schema(&parameter.schema, &format!("schema for parameter `{}`", parameter.name))?,
            required: parameter.required,
        });
    }
    Ok(parameters)
}

enum Pre {
    Resource(ResourcePre),
    Document(DocumentPluginPre<CallState>),
}

/// A pre-instantiated resource component: its `handler`, and its
/// `summaries` when it was built against WIT 0.3.2 or later (earlier 0.3
/// components export only `handler`, and still load).
struct ResourcePre {
    pre: InstancePre<CallState>,
    handler: handler::GuestIndices,
    summaries: Option<summaries::GuestIndices>,
}

impl ResourcePre {
    fn new(pre: InstancePre<CallState>) -> wasmtime::Result<ResourcePre> {
        let handler = handler::GuestIndices::new(&pre)?;
        let exports_summaries =
            pre.component().get_export_index(None, format!("{WIT_PACKAGE}/summaries@{WIT_VERSION}")).is_some();
        let summaries = if exports_summaries { Some(summaries::GuestIndices::new(&pre)?) } else { None };
        Ok(ResourcePre { pre, handler, summaries })
    }

    fn handler(&self, store: &mut Store<CallState>) -> wasmtime::Result<handler::Guest> {
        let instance = self.pre.instantiate(&mut *store)?;
        self.handler.load(&mut *store, &instance)
    }

    /// The component's `summaries`, or `None` when it exports none.
    fn summaries(&self, store: &mut Store<CallState>) -> wasmtime::Result<Option<summaries::Guest>> {
        let Some(indices) = &self.summaries else { return Ok(None) };
        let instance = self.pre.instantiate(&mut *store)?;
        indices.load(&mut *store, &instance).map(Some)
    }
}

/// One validated, pre-instantiated component.
pub struct LoadedPlugin {
    pub info: PluginInfo,
    pre: Pre,
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The component answered with a typed error.
    Plugin(PluginError),
    /// It ran past its deadline.
    Timeout,
    /// Its request was abandoned by the client, and it stopped.
    Abandoned,
    /// A store call failed because the database cannot serve now
    /// ([`StoreError::Unavailable`]); the request may be retried.
    Unavailable(String),
    /// It trapped, ran out of memory, or broke the contract.
    Failed(String),
}

impl CallError {
    /// A call that could not open or use its store: unavailable when the
    /// database is, else failed.
    pub fn from_store(error: StoreError) -> CallError {
        match error {
            StoreError::Unavailable(reason) => CallError::Unavailable(reason),
            StoreError::DeadlineReached => CallError::Timeout,
            StoreError::TooBroad(reason) => CallError::too_broad(&reason),
            error => CallError::Failed(format!("the store: {error}")),
        }
    }

    /// A summary over its work budget: the request's grouping and filters
    /// are what to narrow (`400`, as a list past its budget).
    fn too_broad(reason: &str) -> CallError {
        CallError::Plugin(PluginError::InvalidParameters(vec![InvalidParam {
            name: "groupBy".into(),
            reason: reason.to_owned(),
        }]))
    }
}

/// Calls answered without the components: the native baseline
/// (`native.rs`, measurement only), handed in by whoever starts the
/// server, so the component runtime does not depend on it.
pub trait NativeCalls: Send + Sync {
    fn list(&self, group: &str, tenant: &Tenant, request: &Request) -> Result<Page, CallError>;
    fn get_record(&self, group: &str, tenant: &Tenant, id: &str, request: &Request) -> Result<Vec<u8>, CallError>;
    fn render(&self, group: &str, tenant: &Tenant, request: &Request) -> Result<Rendered, CallError>;
    fn summary(&self, group: &str, tenant: &Tenant, request: &Request) -> Result<Summary, CallError>;
}

/// The components being served, replaceable while requests run.
///
/// A request takes the current [`PluginSet`] once and finishes on it, so a
/// reload never disturbs requests in flight; a reload that fails validation
/// leaves the current set serving.
pub struct PluginRegistry {
    engine: PluginEngine,
    dir: PathBuf,
    /// Serve with the native baseline instead of the components.
    native: Option<Arc<dyn NativeCalls>>,
    current: std::sync::RwLock<Arc<PluginSet>>,
    /// Serializes reloads, so two at once cannot interleave.
    reloading: std::sync::Mutex<()>,
}

impl PluginRegistry {
    /// Loads the plugins directory; fails if it is not servable.
    pub fn load(engine: PluginEngine, dir: &Path) -> anyhow::Result<PluginRegistry> {
        PluginRegistry::load_serving(engine, dir, None)
    }

    /// Loads the plugins directory; with `native`, requests are served by
    /// the native baseline (the components still describe the API and
    /// answer health).
    pub fn load_serving(
        engine: PluginEngine,
        dir: &Path,
        native: Option<Arc<dyn NativeCalls>>,
    ) -> anyhow::Result<PluginRegistry> {
        let mut set = PluginSet::load_dir(&engine, dir)?;
        set.native = native.clone();
        Ok(PluginRegistry {
            engine,
            native,
            dir: dir.to_path_buf(),
            current: std::sync::RwLock::new(Arc::new(set)),
            reloading: std::sync::Mutex::new(()),
        })
    }

    /// The set serving new requests.
    pub fn current(&self) -> Arc<PluginSet> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads the plugins directory and swaps in the new set if every
    /// component in it is valid; otherwise the current set keeps serving.
    pub fn reload(&self) -> anyhow::Result<Arc<PluginSet>> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut fresh = PluginSet::load_dir(&self.engine, &self.dir)?;
        fresh.native = self.native.clone();
        let fresh = Arc::new(fresh);
        match self.current.write() {
            Ok(mut current) => *current = fresh.clone(),
            Err(poisoned) => *poisoned.into_inner() = fresh.clone(),
        }
        Ok(fresh)
    }
}

/// The loaded components, one per group.
pub struct PluginSet {
    engine: PluginEngine,
    plugins: BTreeMap<String, LoadedPlugin>,
    /// Report importers by format.
    importers: BTreeMap<String, LoadedImporter>,
    /// The OpenAPI document these components make, rendered once.
    openapi: std::sync::OnceLock<Vec<u8>>,
    /// Calls go to the native baseline instead (measurement only).
    native: Option<Arc<dyn NativeCalls>>,
}

impl PluginSet {
    /// Loads every `.wasm` component in `dir` and checks that each required
    /// group is served exactly once.
    pub fn load_dir(engine: &PluginEngine, dir: &Path) -> anyhow::Result<PluginSet> {
        let entries = std::fs::read_dir(dir).with_context(|| {
            format!("cannot read the plugins directory {} (build the components with `make plugins`)", dir.display())
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
            .collect();
        files.sort();
        let mut plugins: BTreeMap<String, LoadedPlugin> = BTreeMap::new();
        let mut importers: BTreeMap<String, LoadedImporter> = BTreeMap::new();
        for file in files {
            let plugin = match load_component(engine, &file)? {
                LoadedComponent::Plugin(plugin) => plugin,
                LoadedComponent::Importer(importer) => {
                    if let Some(existing) = importers.get(&importer.info.format) {
                        bail!(
                            "{} and {} both import the format `{}`; keep one of them in {}",
                            existing.info.file.display(),
                            file.display(),
                            importer.info.format,
                            dir.display()
                        );
                    }
                    importers.insert(importer.info.format.clone(), importer);
                    continue;
                }
            };
            if let Some(existing) = plugins.get(&plugin.info.group) {
                bail!(
                    "{} and {} both serve the group `{}`; keep one of them in {}",
                    existing.info.file.display(),
                    file.display(),
                    plugin.info.group,
                    dir.display()
                );
            }
            plugins.insert(plugin.info.group.clone(), plugin);
        }
        let missing: Vec<&str> = RESOURCE_GROUPS
            .iter()
            .chain([&AGENT_GROUP])
            .copied()
            .filter(|group| !plugins.contains_key(*group))
            .collect();
        if !missing.is_empty() {
            bail!(
                "no component in {} serves {}; build them with `make plugins` or point --plugins-dir at a directory that has them",
                dir.display(),
                missing.join(", ")
            );
        }
        Ok(PluginSet { engine: engine.clone(), plugins, importers, openapi: std::sync::OnceLock::new(), native: None })
    }

    /// The API's OpenAPI document for these components, made by `render`
    /// on first use and kept while the set serves (`http::openapi::rendered`
    /// is the one caller).
    pub fn openapi_document(&self, render: impl FnOnce(&PluginSet) -> Vec<u8>) -> &[u8] {
        self.openapi.get_or_init(|| render(self))
    }

    /// The loaded report importers, by format.
    pub fn importer_infos(&self) -> impl Iterator<Item = &ImporterInfo> {
        self.importers.values().map(|importer| &importer.info)
    }

    /// Each importer's confidence that `report` is its format, by format.
    pub fn detect(&self, report: &[u8], request_id: &str) -> Vec<(String, Result<Confidence, ConvertError>)> {
        self.importers
            .iter()
            .map(|(format, importer)| {
                let confidence = importer.call(&self.engine, request_id, |instance, store| {
                    instance.esr_plugin_importer().call_detect(store, report)
                });
                (format.clone(), confidence)
            })
            .collect()
    }

    /// The report converted by the importer of `format`: the converted
    /// report's JSON bytes. `None` when no importer has that format.
    pub fn convert(&self, format: &str, report: &[u8], request_id: &str) -> Option<Result<Vec<u8>, ConvertError>> {
        let importer = self.importers.get(format)?;
        let result = importer.call(&self.engine, request_id, |instance, store| {
            instance.esr_plugin_importer().call_convert(store, report)
        });
        Some(match result {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(error)) => Err(ConvertError::Report(error)),
            Err(error) => Err(error),
        })
    }

    pub fn infos(&self) -> impl Iterator<Item = &PluginInfo> {
        self.plugins.values().map(|plugin| &plugin.info)
    }

    pub fn get(&self, group: &str) -> Option<&PluginInfo> {
        self.plugins.get(group).map(|plugin| &plugin.info)
    }

    /// Whether each component still instantiates and answers its smoke
    /// call (with an empty store: nothing is read), by group.
    pub fn check_usable(&self) -> Vec<(String, Result<(), String>)> {
        self.plugins
            .iter()
            .map(|(group, plugin)| (group.clone(), smoke_call(&self.engine, &plugin.pre, plugin.info.reads)))
            .collect()
    }

    /// One page of a group's list, with the organization's change-feed
    /// sequence read in the page's session before the page: a client that
    /// lists everything and then follows the feed from it misses nothing.
    pub fn list(
        &self,
        group: &str,
        tenant: Tenant,
        request: &Request,
        request_id: &str,
    ) -> Result<(Page, u64), CallError> {
        let mut session = tenant.session().map_err(CallError::from_store)?;
        let sequence = session.reader().change_log().map_err(CallError::from_store)?.latest;
        if let Some(native) = &self.native {
            return Ok((native.list(group, &tenant, request)?, sequence));
        }
        let (plugin, mut store) = self.start_in(group, Some(session), request_id)?;
        let Pre::Resource(pre) = &plugin.pre else { return Err(CallError::Failed(format!("{group} is not a list"))) };
        let result = pre.handler(&mut store).and_then(|handler| handler.call_list(&mut store, request));
        Ok((finish(&store, result)?, sequence))
    }

    /// Records of a group by id, each as the component's `get` answers it
    /// (`None` where it answers `not-found`), read through `session` by one
    /// instance of the component; the session is handed back for the
    /// caller's next reads, so what it read before and the records agree.
    pub fn get_records(
        &self,
        group: &str,
        tenant: &Tenant,
        session: TenantSession,
        ids: &[Uuid],
        request: &Request,
        request_id: &str,
    ) -> Result<(Vec<Option<ShapedRecord>>, TenantSession), CallError> {
        let answer = |result: Result<Vec<u8>, CallError>| match result {
            Ok(record) => Ok(Some(record)),
            Err(CallError::Plugin(PluginError::NotFound)) => Ok(None),
            Err(error) => Err(error),
        };
        if let Some(native) = &self.native {
            let records = ids
                .iter()
                .map(|id| answer(native.get_record(group, tenant, &id.to_string(), request)))
                .collect::<Result<_, _>>()?;
            return Ok((records, session));
        }
        let (plugin, mut store) = self.start_in(group, Some(session), request_id)?;
        let Pre::Resource(pre) = &plugin.pre else { return Err(CallError::Failed(format!("{group} has no records"))) };
        let handler = pre.handler(&mut store).map_err(|error| call_failure(&store, error))?;
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            let result = handler.call_get(&mut store, &id.to_string(), request);
            records.push(answer(finish(&store, result))?);
        }
        let session =
            store.data_mut().tenant.take().ok_or_else(|| CallError::Failed("the call lost its session".into()))?;
        Ok((records, session))
    }

    /// A group's summary; `not-found` when its component serves none.
    pub fn summary(
        &self,
        group: &str,
        tenant: Tenant,
        request: &Request,
        request_id: &str,
    ) -> Result<Summary, CallError> {
        if let Some(native) = &self.native {
            return native.summary(group, &tenant, request);
        }
        let (plugin, mut store) = self.start(group, Some(&tenant), request_id)?;
        let Pre::Resource(pre) = &plugin.pre else { return Err(CallError::Plugin(PluginError::NotFound)) };
        let result = pre.summaries(&mut store).and_then(|summaries| match summaries {
            Some(summaries) => summaries.call_summary(&mut store, request),
            None => Ok(Err(PluginError::NotFound)),
        });
        finish(&store, result)
    }

    /// One record of a group.
    pub fn get_record(
        &self,
        group: &str,
        tenant: Tenant,
        id: &str,
        request: &Request,
        request_id: &str,
    ) -> Result<Vec<u8>, CallError> {
        if let Some(native) = &self.native {
            return native.get_record(group, &tenant, id, request);
        }
        let (plugin, mut store) = self.start(group, Some(&tenant), request_id)?;
        let Pre::Resource(pre) = &plugin.pre else { return Err(CallError::Failed(format!("{group} has no records"))) };
        let result = pre.handler(&mut store).and_then(|handler| handler.call_get(&mut store, id, request));
        finish(&store, result)
    }

    /// A rendered document.
    pub fn render(
        &self,
        group: &str,
        tenant: Tenant,
        request: &Request,
        request_id: &str,
    ) -> Result<Rendered, CallError> {
        if let Some(native) = &self.native {
            return native.render(group, &tenant, request);
        }
        let (plugin, mut store) = self.start(group, Some(&tenant), request_id)?;
        let Pre::Document(pre) = &plugin.pre else {
            return Err(CallError::Failed(format!("{group} is not a document")));
        };
        let result = pre
            .instantiate(&mut store)
            .and_then(|instance| instance.esr_plugin_document().call_render(&mut store, request));
        finish(&store, result)
    }

    fn start(
        &self,
        group: &str,
        tenant: Option<&Tenant>,
        request_id: &str,
    ) -> Result<(&LoadedPlugin, Store<CallState>), CallError> {
        let session = match tenant {
            Some(tenant) => Some(tenant.session().map_err(CallError::from_store)?),
            None => None,
        };
        self.start_in(group, session, request_id)
    }

    /// [`PluginSet::start`] on a read session already open.
    fn start_in(
        &self,
        group: &str,
        session: Option<TenantSession>,
        request_id: &str,
    ) -> Result<(&LoadedPlugin, Store<CallState>), CallError> {
        let plugin = self.plugins.get(group).ok_or_else(|| CallError::Failed(format!("no plugin serves {group}")))?;
        let mut store = new_store(&self.engine, group, session, request_id);
        store.data_mut().reads = plugin.info.reads;
        Ok((plugin, store))
    }
}

fn new_store(engine: &PluginEngine, group: &str, tenant: Option<TenantSession>, request_id: &str) -> Store<CallState> {
    new_store_limited(engine, &engine.limits, group, tenant, request_id)
}

fn new_store_limited(
    engine: &PluginEngine,
    limits: &Limits,
    group: &str,
    tenant: Option<TenantSession>,
    request_id: &str,
) -> Store<CallState> {
    let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
    // No sockets: nothing a call could wait on beyond the clocks.
    let wasi = WasiCtx::builder().stderr(stderr.clone()).allow_tcp(false).allow_udp(false).build();
    let state = CallState {
        wasi,
        table: ResourceTable::new(),
        limits: StoreLimitsBuilder::new().memory_size(limits.memory_bytes).trap_on_grow_failure(true).build(),
        tenant,
        group: group.to_owned(),
        reads: Reads::NONE,
        request_id: request_id.to_owned(),
        stderr,
        deadline: Instant::now() + limits.deadline,
        log_written: 0,
        log_dropped: 0,
    };
    let mut store = Store::new(&engine.engine, state);
    store.limiter(|state| &mut state.limits);
    // Every tick, guest code stops when the call's time is up or its
    // request was abandoned.
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|context| {
        let state = context.data();
        if state.abandoned() {
            return Err(Abandoned.into());
        }
        if Instant::now() >= state.deadline {
            return Err(wasmtime::Trap::Interrupt.into());
        }
        Ok(wasmtime::UpdateDeadline::Continue(1))
    });
    store
}

/// Turns a call's outcome into the caller's result, logging guest failures.
fn finish<T>(store: &Store<CallState>, result: wasmtime::Result<Result<T, PluginError>>) -> Result<T, CallError> {
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(CallError::Plugin(error)),
        Err(error) => Err(call_failure(store, error)),
    }
}

/// What a call that trapped or failed in the runtime answers, logged.
fn call_failure(store: &Store<CallState>, error: wasmtime::Error) -> CallError {
    let state = store.data();
    if error.downcast_ref::<Abandoned>().is_some() {
        tracing::info!(plugin = %state.group, request_id = %state.request_id, "plugin call stopped: its request was abandoned");
        return CallError::Abandoned;
    }
    if error.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt)
        || error.downcast_ref::<DeadlineReached>().is_some()
        || matches!(error.downcast_ref::<StoreError>(), Some(StoreError::DeadlineReached))
    {
        tracing::warn!(plugin = %state.group, request_id = %state.request_id, "plugin overran its deadline");
        return CallError::Timeout;
    }
    // A store function's failure traps the guest; the database's outage
    // is not the component's fault, nor a request too broad to count.
    match error.downcast_ref::<StoreError>() {
        Some(StoreError::Unavailable(reason)) => return CallError::Unavailable(reason.clone()),
        Some(StoreError::TooBroad(reason)) => return CallError::too_broad(reason),
        _ => {}
    }
    let guest_stderr = loggable_guest_text(String::from_utf8_lossy(&state.stderr.contents()).trim(), STDERR_CAPACITY);
    tracing::error!(
        plugin = %state.group, request_id = %state.request_id, error = %format!("{error:#}"), %guest_stderr,
        "plugin call failed"
    );
    CallError::Failed(format!("{error:#}"))
}

/// A component file of either kind, loaded and checked.
pub enum LoadedComponent {
    Plugin(LoadedPlugin),
    Importer(LoadedImporter),
}

/// A compiled component, the interface it exports and the WIT version.
struct Compiled {
    component: Component,
    sha256: String,
    interface: String,
    wit_version: String,
}

impl Compiled {
    fn load(engine: &PluginEngine, file: &Path) -> anyhow::Result<Compiled> {
        let bytes = std::fs::read(file).with_context(|| format!("{}: cannot read", file.display()))?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let component = engine
            .compile(&bytes, &sha256)
            .map_err(|error| anyhow!("{}: not a valid WebAssembly component: {error}", file.display()))?;
        let (interface, wit_version) =
            exported_interface(engine, &component).map_err(|reason| anyhow!("{}: {reason}", file.display()))?;
        Ok(Compiled { component, sha256, interface, wit_version })
    }
}

/// A linker with WASI (no grants) and `wasi:io/poll` bounded by the call's
/// deadline.
fn wasi_linker(engine: &PluginEngine) -> anyhow::Result<Linker<CallState>> {
    let mut linker: Linker<CallState> = Linker::new(&engine.engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| anyhow!("linking WASI: {e:#}"))?;
    // The same `wasi:io/poll`, with its waits ended at the call's deadline.
    linker.allow_shadowing(true);
    wasi_poll::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
        .map_err(|e| anyhow!("linking WASI poll: {e:#}"))?;
    linker.allow_shadowing(false);
    Ok(linker)
}

/// Compiles and checks one component file of any kind.
pub fn load_component(engine: &PluginEngine, file: &Path) -> anyhow::Result<LoadedComponent> {
    let compiled = Compiled::load(engine, file)?;
    if compiled.interface == "importer" {
        LoadedImporter::from_compiled(engine, file, compiled).map(LoadedComponent::Importer)
    } else {
        LoadedPlugin::from_compiled(engine, file, compiled).map(LoadedComponent::Plugin)
    }
}

impl LoadedPlugin {
    /// Compiles and checks one resource or document component file.
    pub fn load(engine: &PluginEngine, file: &Path) -> anyhow::Result<LoadedPlugin> {
        match load_component(engine, file)? {
            LoadedComponent::Plugin(plugin) => Ok(plugin),
            LoadedComponent::Importer(_) => bail!("{}: is a report importer, not a resource component", file.display()),
        }
    }

    fn from_compiled(engine: &PluginEngine, file: &Path, compiled: Compiled) -> anyhow::Result<LoadedPlugin> {
        let Compiled { component, sha256, interface, wit_version } = compiled;
        let mut linker = wasi_linker(engine)?;
        let pre = match interface.as_str() {
            "handler" => {
                ResourcePlugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
                    .map_err(|e| anyhow!("linking the esr imports: {e:#}"))?;
                let pre = linker
                    .instantiate_pre(&component)
                    .map_err(|error| anyhow!("{}: imports what the host does not offer: {error:#}", file.display()))?;
                Pre::Resource(ResourcePre::new(pre).map_err(|error| {
                    anyhow!("{}: does not match the resource-plugin world: {error:#}", file.display())
                })?)
            }
            _ => {
                DocumentPlugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
                    .map_err(|e| anyhow!("linking the esr imports: {e:#}"))?;
                let pre = linker
                    .instantiate_pre(&component)
                    .map_err(|error| anyhow!("{}: imports what the host does not offer: {error:#}", file.display()))?;
                Pre::Document(DocumentPluginPre::new(pre).map_err(|error| {
                    anyhow!("{}: does not match the document-plugin world: {error:#}", file.display())
                })?)
            }
        };

        let descriptor =
            describe(engine, &pre).map_err(|error| anyhow!("{}: describe() failed: {error}", file.display()))?;
        let expected: &[&str] = match pre {
            Pre::Resource(_) => &RESOURCE_GROUPS,
            Pre::Document(_) => &[AGENT_GROUP],
        };
        if !expected.contains(&descriptor.group.as_str()) {
            bail!(
                "{}: says it serves `{}`, but a component of its world serves one of {}",
                file.display(),
                descriptor.group,
                expected.join(", ")
            );
        }
        if descriptor.version.trim().is_empty() || descriptor.version.len() > 64 {
            bail!("{}: describe() gives no usable version", file.display());
        }
        let (parameters, response_schema) =
            descriptor_documents(&descriptor).map_err(|error| anyhow!("{}: {error}", file.display()))?;
        let reads = Reads::from_names(descriptor.reads.iter().map(String::as_str)).map_err(|name| {
            anyhow!(
                "{}: describe() declares it reads {name:?}, which is none of {}",
                file.display(),
                READABLE.join(", ")
            )
        })?;
        smoke_call(engine, &pre, reads)
            .map_err(|error| anyhow!("{}: fails its smoke call: {error}", file.display()))?;
        let summary = match &pre {
            Pre::Resource(resource) => describe_summary(engine, resource)
                .map_err(|error| anyhow!("{}: describe-summary() failed: {error}", file.display()))?
                .map(|info| summary_document(&info))
                .transpose()
                .map_err(|error| anyhow!("{}: {error}", file.display()))?
                .flatten(),
            Pre::Document(_) => None,
        };
        Ok(LoadedPlugin {
            info: PluginInfo {
                group: descriptor.group,
                version: descriptor.version,
                file: file.to_path_buf(),
                sha256,
                wit_version,
                parameters,
                sort_keys: descriptor.sort_keys,
                response_schema,
                reads,
                summary,
                loaded_at: crate::clock::now_rfc3339(),
            },
            pre,
        })
    }
}

/// What a loaded report importer converts, for health and logs.
#[derive(Debug, Clone)]
pub struct ImporterInfo {
    /// The format's name (`trivy`), as `--format` takes it.
    pub format: String,
    pub version: String,
    pub description: String,
    pub file: PathBuf,
    pub sha256: String,
    pub wit_version: String,
    pub loaded_at: String,
}

/// One validated, pre-instantiated report importer.
pub struct LoadedImporter {
    pub info: ImporterInfo,
    pre: ReportImporterPre<CallState>,
}

/// Why a conversion failed.
#[derive(Debug)]
pub enum ConvertError {
    /// The importer refused the report (the caller's fault).
    Report(ImporterError),
    /// It ran past its deadline.
    Timeout,
    /// It trapped (a memory cap, a panic) or broke the contract.
    Failed(String),
}

impl LoadedImporter {
    fn from_compiled(engine: &PluginEngine, file: &Path, compiled: Compiled) -> anyhow::Result<LoadedImporter> {
        let Compiled { component, sha256, wit_version, .. } = compiled;
        let mut linker = wasi_linker(engine)?;
        ReportImporter::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
            .map_err(|e| anyhow!("linking the esr imports: {e:#}"))?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|error| anyhow!("{}: imports what the host does not offer: {error:#}", file.display()))?;
        let pre = ReportImporterPre::new(pre)
            .map_err(|error| anyhow!("{}: does not match the report-importer world: {error:#}", file.display()))?;
        let mut importer = LoadedImporter {
            info: ImporterInfo {
                format: String::new(),
                version: String::new(),
                description: String::new(),
                file: file.to_path_buf(),
                sha256,
                wit_version,
                loaded_at: crate::clock::now_rfc3339(),
            },
            pre,
        };
        let described = importer
            .call_loading(engine, |instance, store| instance.esr_plugin_importer().call_describe(store))
            .map_err(|error| anyhow!("{}: describe() failed: {error:?}", file.display()))?;
        let format_is_sane = (1..=32).contains(&described.format.len())
            && described.format.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !format_is_sane || described.format == "auto" {
            bail!(
                "{}: describe() gives the format {:?}; a format is lowercase letters, digits and dashes, and not `auto`",
                file.display(),
                described.format
            );
        }
        if described.version.trim().is_empty() || described.version.len() > 64 {
            bail!("{}: describe() gives no usable version", file.display());
        }
        importer.info.format = described.format;
        importer.info.version = described.version;
        importer.info.description = described.description.chars().take(512).collect();
        // A smoke call: detect on a trivial report must give an answer.
        importer
            .call_loading(engine, |instance, store| instance.esr_plugin_importer().call_detect(store, b"{}"))
            .map_err(|error| anyhow!("{}: fails its smoke call (detect): {error:?}", file.display()))?;
        Ok(importer)
    }

    /// One call into a fresh instance, with the importers' limits.
    fn call<T>(
        &self,
        engine: &PluginEngine,
        request_id: &str,
        run: impl FnOnce(&ReportImporter, &mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, ConvertError> {
        self.call_limited(engine, &engine.importer_limits, request_id, run)
    }

    /// A call at load, with every component's limits: the importers' own
    /// (`--importer-deadline-ms`, `--importer-memory-mib`) bound the
    /// reading of reports, not the loading.
    fn call_loading<T>(
        &self,
        engine: &PluginEngine,
        run: impl FnOnce(&ReportImporter, &mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, ConvertError> {
        self.call_limited(engine, &engine.limits, "load", run)
    }

    fn call_limited<T>(
        &self,
        engine: &PluginEngine,
        limits: &Limits,
        request_id: &str,
        run: impl FnOnce(&ReportImporter, &mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, ConvertError> {
        let group = format!("import-{}", self.info.format);
        let mut store = new_store_limited(engine, limits, &group, None, request_id);
        let result = self.pre.instantiate(&mut store).and_then(|instance| run(&instance, &mut store));
        match finish(&store, result.map(Ok)) {
            Ok(value) => Ok(value),
            Err(CallError::Timeout | CallError::Abandoned) => Err(ConvertError::Timeout),
            Err(CallError::Failed(reason) | CallError::Unavailable(reason)) => Err(ConvertError::Failed(reason)),
            Err(CallError::Plugin(error)) => Err(ConvertError::Failed(format!("{error:?}"))),
        }
    }
}

fn describe(engine: &PluginEngine, pre: &Pre) -> Result<Descriptor, String> {
    let mut store = new_store(engine, "loading", None, "load");
    let result = match pre {
        Pre::Resource(pre) => pre.handler(&mut store).and_then(|handler| handler.call_describe(&mut store)),
        Pre::Document(pre) => {
            pre.instantiate(&mut store).and_then(|instance| instance.esr_plugin_document().call_describe(&mut store))
        }
    };
    result.map_err(|error| format!("{error:#}"))
}

/// What a resource component's summary accepts, or `None` when it exports
/// no `summaries`.
fn describe_summary(engine: &PluginEngine, pre: &ResourcePre) -> Result<Option<summaries::SummaryInfo>, String> {
    let mut store = new_store(engine, "loading", None, "load");
    let result = pre.summaries(&mut store).and_then(|summaries| match summaries {
        Some(summaries) => summaries.call_describe_summary(&mut store).map(Some),
        None => Ok(None),
    });
    result.map_err(|error| format!("{error:#}"))
}

/// A smoke call with an empty store, reading only `reads`: `get` of an id
/// that cannot exist, or `render` without parameters. Any typed answer
/// passes; a trap, an overrun or a malformed record fails the component
/// before it serves.
fn smoke_call(engine: &PluginEngine, pre: &Pre, reads: Reads) -> Result<(), String> {
    let mut store = new_store(engine, "loading", None, "load");
    store.data_mut().reads = reads;
    let request = Request { query: Vec::new(), path: "/v1/smoke".into(), base_url: "http://localhost".into() };
    let outcome = match pre {
        Pre::Resource(pre) => pre
            .handler(&mut store)
            .and_then(|handler| handler.call_get(&mut store, &Uuid::nil().to_string(), &request))
            .map(|result| result.map(drop)),
        Pre::Document(pre) => pre
            .instantiate(&mut store)
            .and_then(|instance| instance.esr_plugin_document().call_render(&mut store, &request))
            .map(|result| result.map(drop)),
    };
    match outcome {
        Ok(_) => Ok(()),
        Err(error) => {
            let guest_stderr = String::from_utf8_lossy(&store.data().stderr.contents()).trim().to_owned();
            Err(format!("{error:#} {guest_stderr}").trim().to_owned())
        }
    }
}

/// Which of the package's interfaces the component exports (`handler` or
/// `document`) and the package version it was built against.
fn exported_interface(engine: &PluginEngine, component: &Component) -> Result<(String, String), String> {
    let component_type = component.component_type();
    let exports: Vec<String> = component_type.exports(&engine.engine).map(|(name, _)| name.to_owned()).collect();
    let prefix = format!("{WIT_PACKAGE}/");
    let mut ours: Vec<&String> = exports.iter().filter(|name| name.starts_with(&prefix)).collect();
    // A resource component exports `summaries` beside `handler` (since
    // 0.3.2), in the same package version.
    if let [first, second] = ours.as_slice() {
        let versioned = |name: &str| name[prefix.len()..].split_once('@').map(|(i, v)| (i.to_owned(), v.to_owned()));
        if let (Some((a, a_version)), Some((b, b_version))) = (versioned(first), versioned(second))
            && a_version == b_version
        {
            match (a.as_str(), b.as_str()) {
                ("handler", "summaries") => ours.truncate(1),
                ("summaries", "handler") => {
                    ours.remove(0);
                }
                _ => {}
            }
        }
    }
    let [name] = ours.as_slice() else {
        return Err(if ours.is_empty() {
            format!(
                "exports none of {WIT_PACKAGE}/handler, {WIT_PACKAGE}/document or {WIT_PACKAGE}/importer (it exports: {}); is it built for another world?",
                if exports.is_empty() { "nothing".to_owned() } else { exports.join(", ") }
            )
        } else {
            format!("exports more than one esr interface ({}); a component serves one group", exports.join(", "))
        });
    };
    let rest = &name[prefix.len()..];
    let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
    if !["handler", "document", "importer"].contains(&interface) {
        return Err(format!(
            "exports {name}, which is none of {WIT_PACKAGE}/handler, {WIT_PACKAGE}/document, {WIT_PACKAGE}/importer"
        ));
    }
    let mut parts = version.split('.').map(|part| part.parse::<u64>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) if (major, minor) == ACCEPTED_MAJOR_MINOR => {
            Ok((interface.to_owned(), version.to_owned()))
        }
        _ => Err(format!(
            "is built against {WIT_PACKAGE}@{}, but this host loads {WIT_PACKAGE}@{ACCEPTED_VERSIONS}; rebuild it against the WIT in this release{}",
            if version.is_empty() { "an unversioned package" } else { version },
            // 0.3.0 added the descriptor's `reads`.
            if version.starts_with("0.2.") || version.starts_with("0.1.") {
                " and declare what its store reads in the descriptor's `reads` (wit/README.md, 0.3.0)"
            } else {
                ""
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::loggable_guest_text;

    #[test]
    fn guest_text_cannot_start_a_line_or_steer_a_terminal() {
        let forged = "a\nb\r\tc\u{1b}[31m\u{7f}\u{85}\u{202e}d\u{2028}é";
        assert_eq!(loggable_guest_text(forged, 1024), r"a\nb\r\tc\u{1b}[31m\u{7f}\u{85}\u{202e}d\u{2028}é");
    }

    #[test]
    fn guest_text_is_cut_at_a_character_boundary_and_marked() {
        let long = "é".repeat(3000);
        let kept = loggable_guest_text(&long, 4096);
        assert!(kept.starts_with(&"é".repeat(2048)));
        assert!(kept.ends_with("… [truncated, 6000 bytes in all]"), "{kept}");
        assert_eq!(loggable_guest_text("short", 4096), "short");
    }
}
