//! The loaded set: each group's component, checked at load (world, WIT
//! version, the group it claims, what it reads) and called per request.

use super::*;

pub(super) enum Pre {
    Resource(ResourcePre),
    Document(DocumentPluginPre<CallState>),
}

/// A pre-instantiated resource component: its `handler`, its `summaries`
/// when it was built against WIT 0.3.2 or later, its `bulk-export` from
/// 0.3.3 and its `held-lists` from 0.3.6 (earlier 0.3 components export
/// less, and still load).
pub(super) struct ResourcePre {
    /// Lists and summaries (and the calls made at load).
    pub(super) pre: InstancePre<CallState>,
    /// The same component loaded again for `handler.get` alone, and again
    /// for `bulk-export`. A slot keeps resident what its calls wrote (up to
    /// 16 MiB), wasmtime 48 zeroes all of it after every later call there,
    /// and the pool gives a module's call the slot it used last: a page of
    /// large records halved every organization's get-by-id throughput
    /// after it, and an export's chunks (megabytes) slow the lists after
    /// it. A get writes a few pages, a list page up to a few hundred KiB.
    get_pre: InstancePre<CallState>,
    export_pre: InstancePre<CallState>,
    pub(super) handler: handler::GuestIndices,
    /// `handler.get` and `handler.list`, found once: a request's instance
    /// type-checks only the function it calls (a whole `handler` checks
    /// `describe`'s descriptor too, on every call).
    get: ComponentExportIndex,
    list: ComponentExportIndex,
    /// `held-lists.list`, called for a page instead of `handler.list`.
    held_list: Option<ComponentExportIndex>,
    pub(super) summaries: Option<summaries::GuestIndices>,
    pub(super) bulk_export: Option<bulk_export::GuestIndices>,
}

/// `handler.get` of one instance.
pub(super) type GetFunc<'a> = TypedFunc<(&'a str, &'a Request), (Result<Vec<u8>, PluginError>,)>;

impl ResourcePre {
    /// `get_pre` and `export_pre` are `pre` again, each of a copy of its
    /// component or `pre` itself.
    pub(super) fn new(
        pre: InstancePre<CallState>,
        get_pre: InstancePre<CallState>,
        export_pre: InstancePre<CallState>,
    ) -> wasmtime::Result<ResourcePre> {
        let handler = handler::GuestIndices::new(&pre)?;
        let summaries = if export_index(&pre, None, "summaries")?.is_some() {
            Some(summaries::GuestIndices::new(&pre)?)
        } else {
            None
        };
        let bulk_export = if export_index(&export_pre, None, "bulk-export")?.is_some() {
            Some(bulk_export::GuestIndices::new(&export_pre)?)
        } else {
            None
        };
        let held_list = export_index(&pre, Some("list"), "held-lists")?;
        let list = export_index(&pre, Some("list"), "handler")?
            .ok_or_else(|| wasmtime::format_err!("no exported instance named `handler`"))?;
        let get = export_index(&get_pre, Some("get"), "handler")?
            .ok_or_else(|| wasmtime::format_err!("no exported instance named `handler`"))?;
        Ok(ResourcePre { pre, get_pre, export_pre, handler, get, list, held_list, summaries, bulk_export })
    }

    /// The whole `handler` of a new instance (the calls made at load).
    pub(super) fn handler(&self, store: &mut Store<CallState>) -> wasmtime::Result<handler::Guest> {
        let instance = self.pre.instantiate(&mut *store)?;
        self.handler.load(&mut *store, &instance)
    }

    /// `handler.get` of a new instance.
    pub(super) fn get<'a>(&self, store: &mut Store<CallState>) -> wasmtime::Result<GetFunc<'a>> {
        let instance = self.get_pre.instantiate(&mut *store)?;
        instance.get_typed_func(&mut *store, self.get)
    }

    /// One page of `held-lists.list` (or of `handler.list`, for a component
    /// without it), from a new instance.
    pub(super) fn list(
        &self,
        store: &mut Store<CallState>,
        request: &Request,
    ) -> wasmtime::Result<Result<Page, PluginError>> {
        let instance = self.pre.instantiate(&mut *store)?;
        if let Some(held_list) = self.held_list {
            type HeldListResult = Result<held_lists::HeldPage, PluginError>;
            let list = instance.get_typed_func::<(&Request,), (HeldListResult,)>(&mut *store, held_list)?;
            let (page,) = list.call(&mut *store, (request,))?;
            return match page {
                Ok(page) => store.data().page_of(page).map(Ok),
                Err(error) => Ok(Err(error)),
            };
        }
        let list = instance.get_typed_func::<(&Request,), (Result<Page, PluginError>,)>(&mut *store, self.list)?;
        list.call(&mut *store, (request,)).map(|(page,)| page)
    }

    /// The component's `bulk-export`, or `None` when it exports none.
    pub(super) fn bulk_export(&self, store: &mut Store<CallState>) -> wasmtime::Result<Option<bulk_export::Guest>> {
        let Some(indices) = &self.bulk_export else { return Ok(None) };
        let instance = self.export_pre.instantiate(&mut *store)?;
        indices.load(&mut *store, &instance).map(Some)
    }

    /// The component's `summaries`, or `None` when it exports none.
    pub(super) fn summaries(&self, store: &mut Store<CallState>) -> wasmtime::Result<Option<summaries::Guest>> {
        let Some(indices) = &self.summaries else { return Ok(None) };
        let instance = self.pre.instantiate(&mut *store)?;
        indices.load(&mut *store, &instance).map(Some)
    }
}

/// The export index of `interface` in `pre`'s component (this WIT
/// version), or of its `function` when one is named; `None` when the
/// interface is not exported, an error when the function is not.
fn export_index(
    pre: &InstancePre<CallState>,
    function: Option<&str>,
    interface: &str,
) -> wasmtime::Result<Option<ComponentExportIndex>> {
    let component = pre.component();
    let Some(exported) = component.get_export_index(None, format!("{WIT_PACKAGE}/{interface}@{WIT_VERSION}")) else {
        return Ok(None);
    };
    let Some(name) = function else { return Ok(Some(exported)) };
    component
        .get_export_index(Some(&exported), name)
        .map(Some)
        .ok_or_else(|| wasmtime::format_err!("`{interface}` exports no function named `{name}`"))
}

/// One validated, pre-instantiated component that serves a group (a
/// collection, or the agent's document).
pub struct LoadedGroup {
    pub info: ComponentInfo,
    pub(super) pre: Pre,
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
    pub(super) fn too_broad(reason: &str) -> CallError {
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
    fn export_chunk(
        &self,
        group: &str,
        tenant: &Tenant,
        request: &Request,
        after: Option<&str>,
        bounds: (u32, u32),
    ) -> Result<ExportChunk, CallError>;
}

/// The components being served, replaceable while requests run.
///
/// A request takes the current [`ComponentSet`] once and finishes on it, so a
/// reload never disturbs requests in flight; a reload that fails validation
/// leaves the current set serving.
pub struct ComponentRegistry {
    pub(super) engine: ComponentEngine,
    pub(super) dir: PathBuf,
    /// Serve with the native baseline instead of the components.
    pub(super) native: Option<Arc<dyn NativeCalls>>,
    pub(super) current: std::sync::RwLock<Arc<ComponentSet>>,
    /// Serializes reloads, so two at once cannot interleave.
    pub(super) reloading: std::sync::Mutex<()>,
}

impl ComponentRegistry {
    /// Loads the plugins directory; fails if it is not servable.
    pub fn load(engine: ComponentEngine, dir: &Path) -> anyhow::Result<ComponentRegistry> {
        ComponentRegistry::load_serving(engine, dir, None)
    }

    /// Loads the plugins directory; with `native`, requests are served by
    /// the native baseline (the components still describe the API and
    /// answer health).
    pub fn load_serving(
        engine: ComponentEngine,
        dir: &Path,
        native: Option<Arc<dyn NativeCalls>>,
    ) -> anyhow::Result<ComponentRegistry> {
        let mut set = ComponentSet::load_dir(&engine, dir)?;
        set.native = native.clone();
        Ok(ComponentRegistry {
            engine,
            native,
            dir: dir.to_path_buf(),
            current: std::sync::RwLock::new(Arc::new(set)),
            reloading: std::sync::Mutex::new(()),
        })
    }

    /// What the instance pool's idle slots hold (for the metrics).
    pub fn idle_slots(&self) -> Option<IdleSlots> {
        self.engine.idle_slots()
    }

    /// The set serving new requests.
    pub fn current(&self) -> Arc<ComponentSet> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads the plugins directory and swaps in the new set if every
    /// component in it is valid; otherwise the current set keeps serving.
    pub fn reload(&self) -> anyhow::Result<Arc<ComponentSet>> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut fresh = ComponentSet::load_dir(&self.engine, &self.dir)?;
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
pub struct ComponentSet {
    pub(super) engine: ComponentEngine,
    pub(super) plugins: BTreeMap<String, LoadedGroup>,
    /// Report importers by format.
    pub(super) importers: BTreeMap<String, LoadedImporter>,
    /// The OpenAPI document these components make, rendered once.
    pub(super) openapi: std::sync::OnceLock<Vec<u8>>,
    /// Calls go to the native baseline instead (measurement only).
    pub(super) native: Option<Arc<dyn NativeCalls>>,
}

impl ComponentSet {
    /// Loads every `.wasm` component in `dir` and checks that each required
    /// group is served exactly once.
    pub fn load_dir(engine: &ComponentEngine, dir: &Path) -> anyhow::Result<ComponentSet> {
        let entries = std::fs::read_dir(dir).with_context(|| {
            format!("cannot read the plugins directory {} (build the components with `make plugins`)", dir.display())
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
            .collect();
        files.sort();
        let mut plugins: BTreeMap<String, LoadedGroup> = BTreeMap::new();
        let mut importers: BTreeMap<String, LoadedImporter> = BTreeMap::new();
        for file in files {
            let plugin = match load_component(engine, &file)? {
                LoadedComponent::Group(plugin) => plugin,
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
        Ok(ComponentSet {
            engine: engine.clone(),
            plugins,
            importers,
            openapi: std::sync::OnceLock::new(),
            native: None,
        })
    }

    /// The API's OpenAPI document for these components, made by `render`
    /// on first use and kept while the set serves (`http::openapi::rendered`
    /// is the one caller).
    pub fn openapi_document(&self, render: impl FnOnce(&ComponentSet) -> Vec<u8>) -> &[u8] {
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

    pub fn infos(&self) -> impl Iterator<Item = &ComponentInfo> {
        self.plugins.values().map(|plugin| &plugin.info)
    }

    pub fn get(&self, group: &str) -> Option<&ComponentInfo> {
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
        let result = pre.list(&mut store, request);
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
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        let get = pre.get(&mut store).map_err(|error| call_failure(&store, error))?;
        let mut records = Vec::with_capacity(ids.len());
        for id in &ids {
            let result = get.call(&mut store, (id, request)).map(|(record,)| record);
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

    /// Where an export starts: the organization's change-feed sequence
    /// (read before any record, so following the feed from it misses
    /// nothing) and, when it resumes after `after`, whether that id names
    /// a record of the group in the caller's organization.
    pub fn export_start(&self, group: &str, tenant: &Tenant, after: Option<Uuid>) -> Result<(u64, bool), CallError> {
        let collection =
            Collection::named(group).ok_or_else(|| CallError::Failed(format!("{group} is not a collection")))?;
        let mut session = tenant.session().map_err(CallError::from_store)?;
        let reader = session.reader();
        let sequence = reader.change_log().map_err(CallError::from_store)?.latest;
        let known = match after {
            Some(id) => reader.get(collection, id).map_err(CallError::from_store)?.is_some(),
            None => true,
        };
        Ok((sequence, known))
    }

    /// One chunk of a group's export (`bulk-export.export-chunk`);
    /// `not-found` when its component serves none.
    pub fn export_chunk(
        &self,
        group: &str,
        tenant: Tenant,
        request: &Request,
        after: Option<&str>,
        (max_records, max_bytes): (u32, u32),
        request_id: &str,
    ) -> Result<ExportChunk, CallError> {
        if let Some(native) = &self.native {
            return native.export_chunk(group, &tenant, request, after, (max_records, max_bytes));
        }
        let (plugin, mut store) = self.start(group, Some(&tenant), request_id)?;
        let Pre::Resource(pre) = &plugin.pre else { return Err(CallError::Plugin(PluginError::NotFound)) };
        let result = pre.bulk_export(&mut store).and_then(|export| match export {
            Some(export) => export.call_export_chunk(&mut store, request, after, max_records, max_bytes),
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
        let result = pre.get(&mut store).and_then(|get| get.call(&mut store, (id, request))).map(|(record,)| record);
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

    pub(super) fn start(
        &self,
        group: &str,
        tenant: Option<&Tenant>,
        request_id: &str,
    ) -> Result<(&LoadedGroup, Store<CallState>), CallError> {
        let session = match tenant {
            Some(tenant) => Some(tenant.session().map_err(CallError::from_store)?),
            None => None,
        };
        self.start_in(group, session, request_id)
    }

    /// [`ComponentSet::start`] on a read session already open.
    pub(super) fn start_in(
        &self,
        group: &str,
        session: Option<TenantSession>,
        request_id: &str,
    ) -> Result<(&LoadedGroup, Store<CallState>), CallError> {
        let plugin = self.plugins.get(group).ok_or_else(|| CallError::Failed(format!("no plugin serves {group}")))?;
        let mut store = new_store(&self.engine, group, session, request_id);
        store.data_mut().reads = plugin.info.reads;
        Ok((plugin, store))
    }
}

impl LoadedGroup {
    /// Compiles and checks one resource or document component file.
    pub fn load(engine: &ComponentEngine, file: &Path) -> anyhow::Result<LoadedGroup> {
        match load_component(engine, file)? {
            LoadedComponent::Group(plugin) => Ok(plugin),
            LoadedComponent::Importer(_) => bail!("{}: is a report importer, not a resource component", file.display()),
        }
    }

    pub(super) fn from_compiled(
        engine: &ComponentEngine,
        file: &Path,
        compiled: Compiled,
    ) -> anyhow::Result<LoadedGroup> {
        let Compiled { component, sha256, interface, wit_version } = compiled;
        let copies = match interface.as_str() {
            "handler" => {
                let copy = || {
                    engine
                        .copy(&component)
                        .map_err(|error| anyhow!("{}: cannot be loaded again: {error:#}", file.display()))
                };
                Some(Copies { get: copy()?, export: copy()? })
            }
            _ => None,
        };
        let serving = group_pre(engine, &component, copies.as_ref(), &interface, file)?;
        // The checks below call the component in an engine of its own, so
        // that what they leave in memory is not in the slots requests reuse.
        let (loading, twin) = engine
            .for_loading(&component)
            .map_err(|error| anyhow!("{}: cannot be loaded for its checks: {error:#}", file.display()))?;
        let pre = group_pre(&loading, &twin, None, &interface, file)?;
        let engine = &loading;
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
        let export_formats = match &pre {
            Pre::Resource(resource) => describe_export(engine, resource)
                .map_err(|error| anyhow!("{}: export-formats() failed: {error}", file.display()))?,
            Pre::Document(_) => None,
        };
        let summary = match &pre {
            Pre::Resource(resource) => describe_summary(engine, resource)
                .map_err(|error| anyhow!("{}: describe-summary() failed: {error}", file.display()))?
                .map(|info| summary_document(&info))
                .transpose()
                .map_err(|error| anyhow!("{}: {error}", file.display()))?
                .flatten(),
            Pre::Document(_) => None,
        };
        Ok(LoadedGroup {
            info: ComponentInfo {
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
                export_formats,
                loaded_at: esr_system::clock::now_rfc3339(),
            },
            pre: serving,
        })
    }
}

/// Copies of a resource component for the calls that keep to pool slots
/// of their own ([`ResourcePre`]).
struct Copies {
    get: Component,
    export: Component,
}

/// The pre-instantiated component of a resource or document group; with
/// `copies`, a resource component's gets and exports are called on them.
fn group_pre(
    engine: &ComponentEngine,
    component: &Component,
    copies: Option<&Copies>,
    interface: &str,
    file: &Path,
) -> anyhow::Result<Pre> {
    let mut linker = wasi_linker(engine)?;
    let linked = |added: wasmtime::Result<()>| added.map_err(|e| anyhow!("linking the esr imports: {e:#}"));
    let instantiate_pre = |linker: &Linker<CallState>, component: &Component| {
        linker
            .instantiate_pre(component)
            .map_err(|error| anyhow!("{}: imports what the host does not offer: {error:#}", file.display()))
    };
    let mismatch = |world: &str, error: wasmtime::Error| {
        anyhow!("{}: does not match the {world} world: {error:#}", file.display())
    };
    Ok(match interface {
        "handler" => {
            linked(ResourcePlugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state))?;
            let pre = instantiate_pre(&linker, component)?;
            let (get_pre, export_pre) = match copies {
                Some(copies) => (instantiate_pre(&linker, &copies.get)?, instantiate_pre(&linker, &copies.export)?),
                None => (pre.clone(), pre.clone()),
            };
            Pre::Resource(
                ResourcePre::new(pre, get_pre, export_pre).map_err(|error| mismatch("resource-plugin", error))?,
            )
        }
        _ => {
            linked(DocumentPlugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state))?;
            let pre = instantiate_pre(&linker, component)?;
            Pre::Document(DocumentPluginPre::new(pre).map_err(|error| mismatch("document-plugin", error))?)
        }
    })
}

pub(super) fn describe(engine: &ComponentEngine, pre: &Pre) -> Result<Descriptor, String> {
    let mut store = new_store(engine, "loading", None, "load");
    let result = match pre {
        Pre::Resource(pre) => pre.handler(&mut store).and_then(|handler| handler.call_describe(&mut store)),
        Pre::Document(pre) => {
            pre.instantiate(&mut store).and_then(|instance| instance.esr_plugin_document().call_describe(&mut store))
        }
    };
    result.map_err(|error| format!("{error:#}"))
}

/// The formats a resource component's export renders besides `esr`, or
/// `None` when it exports no `bulk-export`. Each is a short lowercase name.
pub(super) fn describe_export(engine: &ComponentEngine, pre: &ResourcePre) -> Result<Option<Vec<String>>, String> {
    let mut store = new_store(engine, "loading", None, "load");
    let result = pre.bulk_export(&mut store).and_then(|export| match export {
        Some(export) => export.call_export_formats(&mut store).map(Some),
        None => Ok(None),
    });
    let formats = result.map_err(|error| format!("{error:#}"))?;
    if let Some(formats) = &formats {
        let usable = |format: &String| {
            (1..=32).contains(&format.len())
                && format.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && format != "esr"
        };
        if formats.len() > 16 || !formats.iter().all(usable) {
            return Err("gives formats that are not up to 16 distinct short lowercase names besides esr".into());
        }
    }
    Ok(formats)
}

/// What a resource component's summary accepts, or `None` when it exports
/// no `summaries`.
pub(super) fn describe_summary(
    engine: &ComponentEngine,
    pre: &ResourcePre,
) -> Result<Option<summaries::SummaryInfo>, String> {
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
pub(super) fn smoke_call(engine: &ComponentEngine, pre: &Pre, reads: Reads) -> Result<(), String> {
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
            let guest_stderr = store.data().stderr_text();
            Err(format!("{error:#} {guest_stderr}").trim().to_owned())
        }
    }
}

/// What a resource component exports of the package: `handler`, and
/// the interfaces added beside it since.
const RESOURCE_EXPORTS: [&str; 4] = ["handler", "summaries", "bulk-export", "held-lists"];

/// Which of the package's interfaces the component exports (`handler` or
/// `document`) and the package version it was built against.
pub(super) fn exported_interface(engine: &ComponentEngine, component: &Component) -> Result<(String, String), String> {
    let component_type = component.component_type();
    let exports: Vec<String> = component_type.exports(&engine.engine).map(|(name, _)| name.to_owned()).collect();
    let prefix = format!("{WIT_PACKAGE}/");
    let mut ours: Vec<&String> = exports.iter().filter(|name| name.starts_with(&prefix)).collect();
    // A resource component exports `summaries` (since 0.3.2),
    // `bulk-export` (since 0.3.3) and `held-lists` (since 0.3.6) beside
    // `handler`, in the same package version: `handler` names what it is.
    let versioned = |name: &str| name[prefix.len()..].split_once('@').map(|(i, v)| (i.to_owned(), v.to_owned()));
    if let Some((_, version)) = ours.iter().filter_map(|name| versioned(name)).find(|(i, _)| i == "handler")
        && ours.len() <= RESOURCE_EXPORTS.len()
        && ours
            .iter()
            .all(|name| versioned(name).is_some_and(|(i, v)| v == version && RESOURCE_EXPORTS.contains(&i.as_str())))
    {
        ours.retain(|name| versioned(name).is_some_and(|(i, _)| i == "handler"));
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
                " and declare what its store reads in the descriptor's `reads` (plugins/sdk/wit/README.md, 0.3.0)"
            } else {
                ""
            }
        )),
    }
}
