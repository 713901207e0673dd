//! The native baseline (`--features native-baseline`, `esr serve
//! --native-handlers`): the plugin crates' own logic compiled into the
//! host and called directly, on the same store functions components use.
//! It exists only to measure what running each request in a fresh
//! component instance costs; it is never the default, and it gives up the
//! isolation, deadlines and memory caps of components.

use std::cell::RefCell;

use esr_contract::Collection;
use esr_plugin_sdk::{DocumentPlugin, GroupCount, IndexPosition, IndexWalk, Matching, RecordWalk, ResourcePlugin};
use esr_plugin_sdk::{PluginError as SdkError, Request as SdkRequest, Store as SdkStore};

use esr_runtime::{
    CallError, ExportChunk, InvalidParam, NativeCalls, Page, PluginError, Rendered, Request, Summary, Tenant,
    TenantSession,
};

/// The native baseline as the component runtime calls it.
pub struct NativeBaseline;

impl NativeCalls for NativeBaseline {
    fn list(&self, group: &str, tenant: &Tenant, request: &Request) -> Result<Page, CallError> {
        list(group, tenant, request)
    }

    fn get_record(&self, group: &str, tenant: &Tenant, id: &str, request: &Request) -> Result<Vec<u8>, CallError> {
        get_record(group, tenant, id, request)
    }

    fn render(&self, group: &str, tenant: &Tenant, request: &Request) -> Result<Rendered, CallError> {
        render(group, tenant, request)
    }

    fn summary(&self, group: &str, tenant: &Tenant, request: &Request) -> Result<Summary, CallError> {
        summary(group, tenant, request)
    }

    fn export_chunk(
        &self,
        group: &str,
        tenant: &Tenant,
        request: &Request,
        after: Option<&str>,
        (max_records, max_bytes): (u32, u32),
    ) -> Result<ExportChunk, CallError> {
        let request = sdk_request(request);
        let chunk = with_store(tenant, |store| {
            native_logic(group).and_then(|logic| (logic.export_chunk)(store, &request, after, max_records, max_bytes))
        })?;
        Ok(ExportChunk { lines: chunk.lines, count: chunk.count, last_read: chunk.last_read })
    }
}

/// The SDK's `Store` on a tenant's read session; the first failed call is
/// kept and fails the request, as a trap would.
struct NativeStore {
    tenant: RefCell<TenantSession>,
    failure: RefCell<Option<crate::store::StoreError>>,
}

impl NativeStore {
    fn answer<T: Default>(&self, result: Result<T, crate::store::StoreError>) -> T {
        result.unwrap_or_else(|error| {
            self.failure.borrow_mut().get_or_insert(error);
            T::default()
        })
    }

    /// The tenant's session with the collection a component named. A
    /// name that is no collection holds no records and has no indexes, as
    /// the backends answered before names were checked where they enter
    /// (a component cannot name one: its `reads` hold only collections and
    /// `organization`): a read by `index` fails, any other is empty.
    fn read<T: Default>(
        &self,
        collection: &str,
        index: Option<&str>,
        read: impl FnOnce(&mut TenantSession, Collection) -> Result<T, crate::store::StoreError>,
    ) -> T {
        let known = Collection::named(collection);
        self.answer(match (known, index) {
            (Some(collection), _) => read(&mut self.tenant.borrow_mut(), collection),
            (None, Some(index)) => {
                Err(crate::store::StoreError::UnknownIndex(format!("{collection} has no index {index}")))
            }
            (None, None) => Ok(T::default()),
        })
    }

    fn finish(self) -> Result<(), CallError> {
        match self.failure.into_inner() {
            Some(failure) => Err(CallError::from_store(failure)),
            None => Ok(()),
        }
    }
}

fn entries(records: Vec<esr_runtime::StoreEntry>) -> Vec<esr_plugin_sdk::Entry> {
    records.into_iter().map(|(id, value)| esr_plugin_sdk::Entry { id, value: value.into(), position: None }).collect()
}

impl esr_plugin_sdk::Store for NativeStore {
    fn get(&self, collection: &str, id: &str) -> Option<Vec<u8>> {
        self.read(collection, None, |tenant, collection| tenant.get(collection, id))
    }

    fn scan(&self, collection: &str, walk: &RecordWalk) -> Vec<esr_plugin_sdk::Entry> {
        entries(self.read(collection, None, |tenant, collection| tenant.scan(collection, walk)))
    }

    fn count(&self, collection: &str) -> u64 {
        self.read(collection, None, |tenant, collection| tenant.count(collection))
    }

    fn index_scan(&self, collection: &str, walk: &IndexWalk<'_>) -> Vec<esr_plugin_sdk::Entry> {
        let records = self.read(collection, Some(walk.index), |tenant, collection| tenant.index_scan(collection, walk));
        records
            .into_iter()
            .map(|(at, value)| esr_plugin_sdk::Entry {
                id: at.id.to_string(),
                value: value.into(),
                position: Some(at.position),
            })
            .collect()
    }

    fn index_positions(&self, collection: &str, walk: &IndexWalk<'_>) -> Vec<IndexPosition> {
        self.read(collection, Some(walk.index), |tenant, collection| tenant.index_positions(collection, walk))
    }

    fn index_count(&self, collection: &str, index: &str, value: &str) -> u64 {
        self.read(collection, Some(index), |tenant, collection| tenant.index_count(collection, index, value))
    }

    fn count_matching(&self, collection: &str, matching: &Matching) -> u64 {
        let index = matching.ranges.first().map(|range| range.index.as_str());
        let index = index.or(matching.conditions.first().map(|condition| condition.index.as_str()));
        self.read(collection, index, |tenant, collection| tenant.count_matching(collection, matching))
    }

    fn count_groups(&self, collection: &str, group_by: &[String], matching: &Matching) -> Vec<GroupCount> {
        let index = group_by.first().map(String::as_str);
        self.read(collection, index, |tenant, collection| tenant.count_groups(collection, group_by, matching))
    }

    fn organization(&self) -> Vec<u8> {
        self.tenant.borrow().organization_json.to_vec()
    }
}

fn sdk_request(request: &Request) -> esr_plugin_sdk::Request {
    esr_plugin_sdk::Request {
        query: request
            .query
            .iter()
            .map(|param| esr_plugin_sdk::QueryParam { name: param.name.clone(), value: param.value.clone() })
            .collect(),
        path: request.path.clone(),
        base_url: request.base_url.clone(),
    }
}

fn call_error(error: esr_plugin_sdk::PluginError) -> CallError {
    CallError::Plugin(match error {
        esr_plugin_sdk::PluginError::InvalidParameters(params) => PluginError::InvalidParameters(
            params.into_iter().map(|p| InvalidParam { name: p.name, reason: p.reason }).collect(),
        ),
        esr_plugin_sdk::PluginError::NotFound => PluginError::NotFound,
        esr_plugin_sdk::PluginError::Internal(message) => PluginError::Internal(message),
    })
}

/// Runs `call` on the tenant's store as the SDK's `Store`: the store
/// functions components call, in one read session. The native baseline's
/// logic runs here, and so do the checks that the SDK's `MemoryStore` reads
/// as the backends do.
pub fn with_store<T>(
    tenant: &Tenant,
    call: impl FnOnce(&dyn esr_plugin_sdk::Store) -> Result<T, esr_plugin_sdk::PluginError>,
) -> Result<T, CallError> {
    let session = tenant.session().map_err(CallError::from_store)?;
    let store = NativeStore { tenant: RefCell::new(session), failure: RefCell::new(None) };
    let answer = call(&store);
    store.finish()?;
    answer.map_err(call_error)
}

/// A resource component's logic, linked in.
struct NativeLogic {
    list: fn(&dyn SdkStore, &SdkRequest) -> SdkResult<esr_plugin_sdk::Page>,
    get: fn(&dyn SdkStore, &str, &SdkRequest) -> SdkResult<Vec<u8>>,
    summary: fn(&dyn SdkStore, &SdkRequest) -> SdkResult<esr_plugin_sdk::summary::Summary>,
    export_chunk: ExportChunkFn,
}

type SdkResult<T> = Result<T, SdkError>;

/// `ResourcePlugin::export_chunk`: the request, where it resumes, and its
/// bounds in records and bytes.
type ExportChunkFn =
    fn(&dyn SdkStore, &SdkRequest, Option<&str>, u32, u32) -> SdkResult<esr_plugin_sdk::export::ExportChunk>;

fn logic_of<Logic: ResourcePlugin>() -> NativeLogic {
    NativeLogic { list: Logic::list, get: Logic::get, summary: Logic::summary, export_chunk: Logic::export_chunk }
}

/// The logic of the collection `group` names, or the error of a group
/// no native logic serves.
fn native_logic(group: &str) -> Result<NativeLogic, SdkError> {
    Ok(match Collection::named(group).ok_or_else(|| unknown(group))? {
        Collection::Endpoints => logic_of::<esr_plugin_endpoints::Endpoints>(),
        Collection::RemediationTargets => logic_of::<esr_plugin_remediation_targets::RemediationTargets>(),
        Collection::Scopes => logic_of::<esr_plugin_scopes::Scopes>(),
        Collection::VulnerabilityFindings => logic_of::<esr_plugin_vulnerability_findings::VulnerabilityFindings>(),
    })
}

fn unknown(group: &str) -> esr_plugin_sdk::PluginError {
    esr_plugin_sdk::PluginError::Internal(format!("no native logic serves {group}"))
}

/// One page of a group's list, natively.
pub fn list(group: &str, tenant: &Tenant, request: &Request) -> Result<Page, CallError> {
    let request = sdk_request(request);
    let page = with_store(tenant, |store| native_logic(group).and_then(|logic| (logic.list)(store, &request)))?;
    if page.held.is_some() {
        return Err(CallError::Failed(format!("{group}: a native page named held records")));
    }
    Ok(Page {
        data: page.data,
        total: page.total,
        limit: page.limit,
        offset: page.offset,
        next_cursor: page.next_cursor,
    })
}

/// One record of a group, natively.
pub fn get_record(group: &str, tenant: &Tenant, id: &str, request: &Request) -> Result<Vec<u8>, CallError> {
    let request = sdk_request(request);
    with_store(tenant, |store| native_logic(group).and_then(|logic| (logic.get)(store, id, &request)))
}

/// A rendered document, natively.
pub fn render(group: &str, tenant: &Tenant, request: &Request) -> Result<Rendered, CallError> {
    let request = sdk_request(request);
    let rendered = with_store(tenant, |store| match group {
        esr_runtime::AGENT_GROUP => esr_plugin_agent::Agent::render(store, &request),
        other => Err(unknown(other)),
    })?;
    Ok(Rendered { content_type: rendered.content_type, filename: rendered.filename, body: rendered.body })
}

/// A group's summary, natively.
pub fn summary(group: &str, tenant: &Tenant, request: &Request) -> Result<Summary, CallError> {
    let request = sdk_request(request);
    let summary = with_store(tenant, |store| native_logic(group).and_then(|logic| (logic.summary)(store, &request)))?;
    Ok(Summary { groups: summary.groups, total: summary.total })
}
