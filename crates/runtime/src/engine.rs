//! The compiled-code engine and each call's store: the pooling allocator,
//! the compile cache, epoch deadlines, memory caps and the WASI context.

use super::*;

/// The pool's idle instance slots ([`ComponentEngine::idle_slots`]).
#[derive(Clone, Copy, Debug)]
pub struct IdleSlots {
    /// Linear-memory slots used before and free now.
    pub memories: u32,
    /// The bytes those slots keep resident (at most 16 MiB each): wasmtime
    /// 48 resets every resident page of a slot after each call in it.
    pub resident_bytes: usize,
}

/// A component in an engine's pool with its imports made traps, nothing
/// of a request's call around it: what wasmtime alone costs a call, the
/// floor line of the benchmark's boundary loop.
pub struct BareComponent {
    engine: Engine,
    pre: InstancePre<()>,
    run: Option<ComponentExportIndex>,
}

impl BareComponent {
    /// What `calls` fresh instances take, each made in a store of its own,
    /// its `run` export called when it has one, then dropped.
    pub fn time(&self, calls: usize) -> anyhow::Result<Duration> {
        let timed = || -> wasmtime::Result<Duration> {
            let started = Instant::now();
            for _ in 0..calls {
                let mut store = Store::new(&self.engine, ());
                store.set_epoch_deadline(u64::from(u32::MAX));
                let instance = self.pre.instantiate(&mut store)?;
                if let Some(run) = &self.run {
                    instance.get_typed_func::<(), (u32,)>(&mut store, run)?.call(&mut store, ())?;
                }
            }
            Ok(started.elapsed())
        };
        timed().map_err(|error| anyhow!("timing a component: {error:#}"))
    }
}

/// The compiled-code engine, shared by every loaded component.
#[derive(Clone)]
pub struct ComponentEngine {
    pub(super) engine: Engine,
    /// The same configuration without the pool, for the calls made while
    /// loading (`describe` and the rest): pages they write in a pooled
    /// slot stay resident and are reset after every later request there.
    loading: Engine,
    pub(super) limits: Limits,
    /// Report importers' own limits (`--importer-memory-mib`,
    /// `--importer-deadline-ms`).
    pub(super) importer_limits: Limits,
    /// Where compiled components are kept between runs, if anywhere.
    pub(super) cache_dir: Option<PathBuf>,
}

impl ComponentEngine {
    pub fn new(limits: Limits) -> anyhow::Result<ComponentEngine> {
        ComponentEngine::with_importer_limits(limits, Limits::importer_default())
    }

    /// An engine whose report importers get `importer_limits`; each call's
    /// store enforces its kind's memory cap, the pool allows the larger.
    pub fn with_importer_limits(limits: Limits, importer_limits: Limits) -> anyhow::Result<ComponentEngine> {
        // wasmtime 48's in-place reset finds a slot's written pages among
        // those present: a page the kernel swapped out would keep an
        // earlier call's bytes for the next instance. Where swap is possible
        // every page is released after each call instead.
        let in_place = !esr_system::swap::may_swap();
        let keep_resident = if in_place { KEEP_RESIDENT_BYTES } else { 0 };
        if in_place {
            tracing::info!("component memory is reset in place after each call (this process cannot swap)");
        } else {
            tracing::warn!(
                "swap is on for this process: each component call's memory is released after it, not reset in \
                 place, at a cost in throughput; turn swap off for esr (systemd: MemorySwapMax=0) to reset in place"
            );
        }
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
            .pagemap_scan(if in_place { wasmtime::Enabled::Auto } else { wasmtime::Enabled::No })
            .linear_memory_keep_resident(keep_resident)
            .table_keep_resident(keep_resident);
        let mut config = Config::new();
        config.epoch_interruption(true);
        let loading = Engine::new(&config).map_err(|e| anyhow!("configuring the WebAssembly engine: {e:#}"))?;
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
        let engine = Engine::new(&config).map_err(|e| anyhow!("configuring the WebAssembly engine: {e:#}"))?;
        // The epoch clock that bounds guest CPU time in both engines; it
        // holds only weak handles, so it stops once neither is left.
        // It also notices swap turned on after start, which the in-place
        // reset chosen above is not safe with.
        let weak = [engine.weak(), loading.weak()];
        std::thread::Builder::new()
            .name("esr-epoch".into())
            .spawn(move || {
                let mut since_swap_check = Duration::ZERO;
                loop {
                    let mut ticked = false;
                    for engine in weak.iter().filter_map(|weak| weak.upgrade()) {
                        engine.increment_epoch();
                        ticked = true;
                    }
                    if !ticked {
                        return;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    since_swap_check += EPOCH_TICK;
                    if in_place && since_swap_check >= SWAP_CHECK_EVERY {
                        since_swap_check = Duration::ZERO;
                        if esr_system::swap::may_swap() {
                            tracing::error!(
                                "swap was turned on after esr started: a component call may find a swapped-out \
                                 page of an earlier call's memory; turn swap off for esr or restart it"
                            );
                        }
                    }
                }
            })
            .context("starting the epoch thread")?;
        Ok(ComponentEngine { engine, loading, limits, importer_limits, cache_dir: None })
    }

    /// What the pool's idle instance slots hold: how many there are and
    /// the bytes they keep resident, which their next calls reset again.
    pub fn idle_slots(&self) -> Option<IdleSlots> {
        let pool = self.engine.pooling_allocator_metrics()?;
        Some(IdleSlots { memories: pool.unused_warm_memories(), resident_bytes: pool.unused_memory_bytes_resident() })
    }

    /// A component made ready to be timed alone ([`BareComponent`]).
    pub fn bare_component(&self, component: &[u8]) -> anyhow::Result<BareComponent> {
        let ready = || -> wasmtime::Result<BareComponent> {
            let component = Component::new(&self.engine, component)?;
            let mut linker: Linker<()> = Linker::new(&self.engine);
            linker.define_unknown_imports_as_traps(&component)?;
            let run = component.get_export_index(None, "run");
            Ok(BareComponent { engine: self.engine.clone(), pre: linker.instantiate_pre(&component)?, run })
        };
        ready().map_err(|error| anyhow!("a component to time: {error:#}"))
    }

    /// This engine's twin for the calls made while loading, and
    /// `component` in it.
    pub(super) fn for_loading(&self, component: &Component) -> wasmtime::Result<(ComponentEngine, Component)> {
        let loading = ComponentEngine { engine: self.loading.clone(), ..self.clone() };
        let twin = copy_in(&self.loading, component)?;
        Ok((loading, twin))
    }

    /// `component` again in this engine, as modules of their own: the pool
    /// reuses a slot for the module that used it last, so the copy's
    /// instances keep to slots of their own.
    pub(super) fn copy(&self, component: &Component) -> wasmtime::Result<Component> {
        copy_in(&self.engine, component)
    }

    /// Keeps compiled components in `dir`, keyed by the component's content
    /// hash and the engine's configuration, so restarts skip compiling.
    /// Cached files are machine code run as is, so a directory another user
    /// owns or may write to is not used (a warning says why).
    pub fn with_cache(mut self, dir: PathBuf) -> ComponentEngine {
        match esr_system::private_files::private_directory(&dir) {
            Ok(()) => self.cache_dir = Some(dir),
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), reason, "not caching compiled components: compiling each at start")
            }
        }
        self
    }

    /// The component, from the cache when it holds a compatible build.
    pub(super) fn compile(&self, bytes: &[u8], sha256: &str) -> wasmtime::Result<Component> {
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
            esr_system::private_files::write_private_atomically(dir, &path, &compiled).map_err(|e| e.to_string())
        }) {
            tracing::warn!(dir = %dir.display(), %error, "cannot cache a compiled component");
        }
        Ok(component)
    }

    #[allow(unsafe_code)]
    pub(super) fn deserialize_cached(&self, path: &Path) -> wasmtime::Result<Component> {
        // SAFETY: `deserialize_file` trusts the file to be wasmtime's own
        // output. Cache files are written only by `compile` above, into a
        // directory inside the data directory, owner-only, under a name that
        // holds the source's SHA-256 and the engine configuration's hash;
        // wasmtime itself refuses files from another version or config.
        unsafe { Component::deserialize_file(&self.engine, path) }
    }
}

/// `component`, compiled by one of this server's engines, loaded again in
/// `engine`.
fn copy_in(engine: &Engine, component: &Component) -> wasmtime::Result<Component> {
    let compiled = component.serialize()?;
    // SAFETY: the bytes are wasmtime's own output, made just above in this
    // process from a component this server's engines compiled or checked;
    // the engines share one configuration but the allocator.
    #[allow(unsafe_code)]
    unsafe {
        Component::deserialize(engine, &compiled)
    }
}

pub(super) fn new_store(
    engine: &ComponentEngine,
    group: &str,
    tenant: Option<TenantSession>,
    request_id: &str,
) -> Store<CallState> {
    new_store_limited(engine, &engine.limits, group, tenant, request_id)
}

pub(super) fn new_store_limited(
    engine: &ComponentEngine,
    limits: &Limits,
    group: &str,
    tenant: Option<TenantSession>,
    request_id: &str,
) -> Store<CallState> {
    let state = CallState {
        wasi: None,
        table: ResourceTable::new(),
        limits: StoreLimitsBuilder::new().memory_size(limits.memory_bytes).trap_on_grow_failure(true).build(),
        memory_bytes: limits.memory_bytes,
        tenant,
        group: group.to_owned(),
        reads: Reads::NONE,
        request_id: request_id.to_owned(),
        stderr: None,
        deadline: Instant::now() + limits.deadline,
        log_written: 0,
        log_dropped: 0,
        held: HeldRecords::default(),
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
pub(super) fn finish<T>(
    store: &Store<CallState>,
    result: wasmtime::Result<Result<T, PluginError>>,
) -> Result<T, CallError> {
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(CallError::Plugin(error)),
        Err(error) => Err(call_failure(store, error)),
    }
}

/// What a call that trapped or failed in the runtime answers, logged.
pub(super) fn call_failure(store: &Store<CallState>, error: wasmtime::Error) -> CallError {
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
    let guest_stderr = loggable_guest_text(&state.stderr_text(), STDERR_CAPACITY);
    tracing::error!(
        plugin = %state.group, request_id = %state.request_id, error = %format!("{error:#}"), %guest_stderr,
        "plugin call failed"
    );
    CallError::Failed(format!("{error:#}"))
}

/// A component file of either kind, loaded and checked.
// Made once per file at load time, and taken apart at once: its size
// costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum LoadedComponent {
    Group(LoadedGroup),
    Importer(LoadedImporter),
}

/// A compiled component, the interface it exports and the WIT version.
pub(super) struct Compiled {
    pub(super) component: Component,
    pub(super) sha256: String,
    pub(super) interface: String,
    pub(super) wit_version: String,
}

impl Compiled {
    pub(super) fn load(engine: &ComponentEngine, file: &Path) -> anyhow::Result<Compiled> {
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
pub(super) fn wasi_linker(engine: &ComponentEngine) -> anyhow::Result<Linker<CallState>> {
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
pub fn load_component(engine: &ComponentEngine, file: &Path) -> anyhow::Result<LoadedComponent> {
    let compiled = Compiled::load(engine, file)?;
    if compiled.interface == "importer" {
        LoadedImporter::from_compiled(engine, file, compiled).map(LoadedComponent::Importer)
    } else {
        LoadedGroup::from_compiled(engine, file, compiled).map(LoadedComponent::Group)
    }
}
