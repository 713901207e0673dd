//! The public HTTP API: routing, authentication, request ids, conditional
//! requests and the envelope around what components return.
//!
//! Nothing here knows how a group filters or shapes its records: a list or
//! an item is handed to the group's component with the caller's
//! organization bound into its store.

pub mod admin;
mod admin_audit;
pub mod admin_auth;
mod admin_oauth;
mod admin_webhooks;
mod audit_trail;
pub mod call_threads;
mod changes;
pub mod connections;
pub mod cursor;
mod docs;
pub mod export;
pub mod known_keys;
pub mod limits;
pub mod metrics;
pub mod oauth;
pub mod openapi;
pub mod problem;
pub mod slots;
pub mod store_calls;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use esr_contract::Collection;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use uuid::Uuid;

use cursor::CursorBinding;
use esr_auth::keys::{self, AuthFailure, Bearer, Principal};
use esr_contract::limits::MAX_CURSOR_CHARS;
use esr_contract::limits::MAX_LIMIT;
use esr_runtime::feed::{component_request, is_json};
use esr_runtime::{CallError, CallReads, ComponentRegistry, ComponentSet, OpenedReader, PluginError, Tenant};
use esr_store::{Organization, ReadAhead, ReplicaHealth, Store, StoreError, StoreReader};
pub use problem::ApiError;

/// Everything a request handler needs, behind one pointer (the router
/// clones it for each request).
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    pub fn new(shared: SharedState) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// What an [`AppState`] points to.
pub struct SharedState {
    /// This host's name among the hosts sharing the store (health gives it).
    pub host: String,
    pub db: Arc<dyn Store>,
    pub plugins: Arc<ComponentRegistry>,
    /// The API's public base URL, e.g. `http://127.0.0.1:8080` (no `/v1`).
    pub public_url: String,
    pub cursor_key: [u8; 32],
    /// Bounds concurrent component calls to what the instance pool holds,
    /// and each organization's share of them.
    pub plugin_slots: slots::CallSlots,
    pub rate_limits: limits::RateLimits,
    /// Permits for blocking store calls (one per database connection).
    pub store_calls: store_calls::StoreCalls,
    /// The permits of authentication and health's probe, apart from
    /// `store_calls` (connections of their own).
    pub admission_calls: store_calls::StoreCalls,
    /// Keys recently found valid or unknown.
    pub known_keys: known_keys::KnownKeys,
    /// Access tokens: issued at `/oauth2/token`, checked on every request.
    pub oauth: oauth::OAuth,
    /// The audit trail (`None`: `--no-audit-trail`).
    pub audit: Option<esr_audit::Recorder>,
    /// How long a request may wait for what it needs (a database
    /// connection) before it is answered `503`: its component call's deadline.
    pub request_deadline: std::time::Duration,
    /// Requests in progress at most; beyond, a fast `503` instead of a queue.
    pub request_permits: Arc<Semaphore>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Health's last checks, shared by every health request for [`HEALTH_TTL`].
    pub health: tokio::sync::Mutex<Option<HealthChecks>>,
    /// The exports running on this host, one per key.
    pub exports: export::Exports,
}

/// What health found: storage, components and replicas, when, and for
/// which set of components (by address).
#[derive(Clone)]
pub struct HealthChecks {
    at: std::time::Instant,
    plugin_set: usize,
    /// Why storage is not readable, when it is not.
    storage: Result<(), String>,
    components: Vec<(String, Result<(), String>)>,
    replicas: Vec<ReplicaHealth>,
}

/// The public API's route templates, as the router and the metrics name them.
mod routes {
    pub const HEALTH: &str = "/v1/health";
    pub const OPENAPI: &str = "/v1/openapi.json";
    pub const AGENT_CONFIG: &str = "/v1/agent/config";
    pub const LIST: &str = "/v1/{collection}";
    pub const ITEM: &str = "/v1/{collection}/{id}";
    pub const SUMMARY: &str = "/v1/{collection}/summary";
    pub const CHANGES: &str = "/v1/changes";
    pub const HISTORY: &str = "/v1/{collection}/{id}/history";
    pub const EXPORT: &str = "/v1/{collection}/export";
    pub const TOKEN: &str = "/oauth2/token";
    pub const AUTHORIZATION_SERVER: &str = "/.well-known/oauth-authorization-server";
    pub const JWKS: &str = "/.well-known/jwks.json";
    pub const DOCS: &str = "/docs";
    pub const DOCS_ASSET: &str = "/docs/{file}";
    pub const ALL: [&str; 14] = [
        HEALTH,
        OPENAPI,
        AGENT_CONFIG,
        LIST,
        ITEM,
        SUMMARY,
        EXPORT,
        CHANGES,
        HISTORY,
        TOKEN,
        AUTHORIZATION_SERVER,
        JWKS,
        DOCS,
        DOCS_ASSET,
    ];
}

/// The longest `--public-url`, so every URL built from it has a bound the
/// OpenAPI document states.
pub const MAX_PUBLIC_URL_CHARS: usize = 2048;

/// The longest `Link` header sent; a longer one (a query near the target
/// limit, re-encoded) is left out: `next_cursor` in the body still leads on.
pub const MAX_LINK_CHARS: usize = 32 * 1024;

/// The largest document a document component may render.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024 * 1024;

/// The route template of a request no route matched, in logs and metrics.
const UNMATCHED: &str = "unmatched";

/// The route template a request matched (`/v1/{collection}`; a shared
/// string, cheap to keep). Middleware added with `Router::layer` runs after
/// routing, so every request, whatever its outcome, knows its template.
fn matched_route(request: &Request) -> Option<MatchedPath> {
    request.extensions().get::<MatchedPath>().cloned()
}

/// A matched route's template, or [`UNMATCHED`].
fn route_template(route: Option<&MatchedPath>) -> &str {
    route.map_or(UNMATCHED, MatchedPath::as_str)
}

/// The same as one of [`routes::ALL`], so a metric's label costs no allocation.
fn public_route_template(route: Option<&MatchedPath>) -> &'static str {
    let template = route_template(route);
    routes::ALL.into_iter().find(|known| *known == template).unwrap_or(UNMATCHED)
}

/// The organization a request was served for, for the request's log line.
#[derive(Debug, Clone, Copy)]
struct ServedOrganization(Uuid);

/// Who is calling, as [`rate_limit`] authenticated the request once for
/// the handlers after it, with the organization of a valid key as stored
/// (`None`: it no longer exists). Both are read together (see
/// [`identify`]) on every request with a key not recently found unknown
/// (no cache of valid keys): a revoked key fails its next request.
#[derive(Debug, Clone)]
pub struct Caller {
    principal: Result<Principal, AuthFailure>,
    organization: Option<Arc<Organization>>,
    /// Until when the request may wait for a database connection.
    deadline: tokio::time::Instant,
    /// The record a request for one record names, read with a valid key
    /// when the store reads both in one round trip.
    read_ahead: Option<ReadAhead>,
    /// A key known valid, not looked up yet: its request's component call
    /// looks it up first ([`Confirmation`]).
    confirmation: Option<Arc<Confirmation>>,
}

impl Caller {
    /// A caller refused without the store.
    fn refused(failure: AuthFailure, deadline: tokio::time::Instant) -> Caller {
        Caller { principal: Err(failure), organization: None, deadline, read_ahead: None, confirmation: None }
    }
}

/// A key this host found valid before, whose request runs before its
/// lookup: on a store whose reads block on the network, the lookup runs
/// first on the blocking thread of the request's component call, which
/// runs only if the key is still the one known (one blocking hop fewer
/// than a lookup of its own). A request that made no call (a refusal
/// before it, a handler without one) is looked up after its handler,
/// before its answer leaves ([`rate_limit`]): no answer is sent to a key
/// that was not found valid for it.
#[derive(Debug)]
struct Confirmation {
    hash: [u8; 32],
    /// The record the request reads, read with the key.
    reading: Option<RecordRead>,
    /// Whether the request lists records: its call's read session begins
    /// with the key's lookup ([`Store::api_key_opening_reader`]).
    lists: bool,
    known: known_keys::KnownKey,
    /// Whether the lookup found the key still valid, once it ran.
    valid: std::sync::OnceLock<bool>,
}

impl Confirmation {
    /// Looks the key up (with the record it reads, or the read session a
    /// list's call of `call_time` reads in, into `reads`); whether it is
    /// still the key known.
    fn confirm(&self, db: &dyn Store, call: Option<(&CallReads, std::time::Duration)>) -> Result<bool, StoreError> {
        let opening = call
            .filter(|_| self.lists)
            .map(|(reads, call_time)| (self.known.organization_id(), reads.read_from(Some(call_time))));
        let identity = look_up_key(db, &self.hash, self.reading, opening)?;
        let valid = identity.principal.as_ref().is_ok_and(|principal| *principal == *self.known.principal)
            && identity.organization.is_some_and(|organization| *organization == *self.known.organization);
        if let Some((reads, _)) = call.filter(|_| valid) {
            *reads.read_ahead.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = identity.read_ahead;
            *reads.opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                identity.opened.map(|reader| OpenedReader { organization: self.known.organization_id(), reader });
        }
        Ok(*self.valid.get_or_init(|| valid))
    }
}

/// What a key's lookup found.
struct Identity {
    principal: Result<Principal, AuthFailure>,
    organization: Option<Arc<Organization>>,
    /// The record `reading` named, when the store read it with the key.
    read_ahead: Option<ReadAhead>,
    /// The read session `opening` asked for, when the store began it with
    /// the key's lookup.
    opened: Option<Box<dyn StoreReader>>,
}

/// Looks up a key by its hash, and its organization; with it, the record
/// `reading` names ([`Store::api_key_reading_ahead`]), or a read session
/// on the organization `opening` names ([`Store::api_key_opening_reader`]).
/// Blocking.
fn look_up_key(
    db: &dyn Store,
    hash: &[u8; 32],
    reading: Option<RecordRead>,
    opening: Option<(Uuid, esr_store::ReadFrom)>,
) -> Result<Identity, StoreError> {
    let (key, read_ahead, opened) = match (reading, opening) {
        (Some(RecordRead { organization, collection, id }), _) => {
            let (key, read_ahead) = db.api_key_reading_ahead(hash, organization, collection, id)?;
            (key, read_ahead, None)
        }
        (None, Some((organization, from))) => {
            let (key, opened) = db.api_key_opening_reader(hash, organization, from)?;
            (key, None, opened)
        }
        (None, None) => (db.api_key(hash)?, None, None),
    };
    let principal = keys::principal_of_record(key);
    let organization = match &principal {
        Ok(principal) => db.organization(principal.organization_id)?.map(Arc::new),
        Err(_) => None,
    };
    let read_ahead = read_ahead.filter(|_| principal.is_ok());
    let opened = opened.filter(|_| principal.is_ok());
    Ok(Identity { principal, organization, read_ahead, opened })
}

/// The record a request reads by id, in the organization its key was
/// last found in.
#[derive(Debug, Clone, Copy)]
struct RecordRead {
    organization: Uuid,
    collection: Collection,
    id: Uuid,
}

/// Looks up a well-formed key (by its hash) and its organization, with an
/// admission permit, on a blocking thread unless the store's short reads
/// are local (sled); with it, the record `reading` names
/// ([`Store::api_key_reading_ahead`]).
async fn identify(
    state: &AppState,
    hash: [u8; 32],
    reading: Option<RecordRead>,
    deadline: tokio::time::Instant,
) -> Result<Caller, ApiError> {
    let db = state.db.clone();
    let identified =
        state.admission_calls.run_short(deadline, move || look_up_key(db.as_ref(), &hash, reading, None)).await?;
    let Identity { principal, organization, read_ahead, .. } =
        identified.map_err(|error| ApiError::store_failure(&error, "authenticating"))?;
    Ok(Caller { principal, organization, deadline, read_ahead, confirmation: None })
}

/// Whether a request with a key known valid runs before the key's lookup
/// ([`Confirmation`]): on a store whose short reads are not local, for
/// the routes whose answer is a component call's.
fn confirms_in_its_call(state: &AppState, request: &Request) -> bool {
    !state.admission_calls.reads_in_place()
        && matches!(route_template(matched_route(request).as_ref()), routes::ITEM | routes::LIST)
}

/// Whether a request lists a resource group's records (`GET` or `HEAD`).
fn lists_records(request: &Request) -> bool {
    route_template(matched_route(request).as_ref()) == routes::LIST
        && matches!(*request.method(), Method::GET | Method::HEAD)
}

/// The record a request reads by id (`GET` or `HEAD` of one record of a
/// resource group), for [`identify`] to read with its key.
fn record_read(request: &Request) -> Option<(Collection, Uuid)> {
    if route_template(matched_route(request).as_ref()) != routes::ITEM
        || !matches!(*request.method(), Method::GET | Method::HEAD)
    {
        return None;
    }
    let [collection, id] = path_parameters(request.uri());
    Some((group(&collection).ok()?.collection, parse_id(&id)?))
}

/// A resource group as the router and the OpenAPI document see it: its
/// path, the scope that reads it, how its records are named in messages,
/// and its names in the document.
struct Group {
    collection: Collection,
    scope: &'static str,
    resource: &'static str,
    /// The OpenAPI tag, as the contract titles the group.
    tag: &'static str,
    /// What the group holds, for the OpenAPI tag.
    tag_description: &'static str,
    /// The item path's parameter, e.g. `endpointId`.
    id_parameter: &'static str,
    /// The record schema's name, also the stem of operation ids.
    schema: &'static str,
    /// Whether the contract gives it a summary (`/v1/<collection>/summary`).
    summary: bool,
    /// Whether its records keep a status history (`/v1/<collection>/{id}/history`).
    history: bool,
}

/// Every group a component call is counted under: the resource groups, the
/// agent's and the change feed's.
pub const CALL_GROUPS: [&str; 6] = [
    GROUPS[0].collection.name(),
    GROUPS[1].collection.name(),
    GROUPS[2].collection.name(),
    GROUPS[3].collection.name(),
    esr_runtime::AGENT_GROUP,
    changes::FEED,
];

const GROUPS: [Group; 4] = [
    Group {
        collection: Collection::Endpoints,
        scope: keys::SCOPE_ENDPOINTS,
        resource: "endpoint",
        tag: "Endpoints",
        tag_description: "The devices the service manages.",
        id_parameter: "endpointId",
        schema: "Endpoint",
        summary: true,
        history: false,
    },
    Group {
        collection: Collection::RemediationTargets,
        scope: keys::SCOPE_TARGETS,
        resource: "remediation target",
        tag: "Remediation Targets",
        tag_description: "Concrete remediation work on one endpoint: one installation of one subject that needs fixing.",
        id_parameter: "targetId",
        schema: "RemediationTarget",
        summary: true,
        history: true,
    },
    Group {
        collection: Collection::Scopes,
        scope: keys::SCOPE_SCOPES,
        resource: "scope",
        tag: "Remediation Scopes",
        tag_description: "Standing policies of what to keep healthy: subject, endpoint and finding filters, and fix-by times.",
        id_parameter: "scopeId",
        schema: "Scope",
        summary: false,
        history: false,
    },
    Group {
        collection: Collection::VulnerabilityFindings,
        scope: keys::SCOPE_FINDINGS,
        resource: "vulnerability finding",
        tag: "Vulnerability Findings",
        tag_description: "What vulnerability scanners found on each endpoint.",
        id_parameter: "findingId",
        schema: "VulnerabilityFinding",
        summary: true,
        history: true,
    },
];

/// The request's id, set by [`request_id`] before any handler runs.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The API's router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(routes::HEALTH, any(health))
        .route(routes::OPENAPI, any(openapi_document))
        .route(routes::AGENT_CONFIG, any(agent_config))
        .route(routes::LIST, any(list))
        .route(routes::SUMMARY, any(summary))
        .route(routes::EXPORT, any(export::export))
        .route(routes::ITEM, any(item))
        .route(routes::CHANGES, any(changes::changes))
        .route(routes::HISTORY, any(changes::history))
        .route(routes::TOKEN, any(oauth::token))
        .route(routes::AUTHORIZATION_SERVER, any(oauth::metadata))
        .route(routes::JWKS, any(oauth::jwks))
        .merge(docs::routes())
        .fallback(not_found)
        .layer(middleware::from_fn(acceptable))
        .layer(middleware::from_fn_with_state(state.clone(), rate_limit))
        .layer(middleware::from_fn_with_state(state.clone(), request_limits))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(middleware::from_fn(request_id))
        .with_state(state)
}

/// How long health's checks stay fresh: every health request within it
/// (on either listener) is answered from the same checks, so health stays
/// cheap however often it is asked.
pub const HEALTH_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// Health's checks: the last ones if fresh (and of the serving set of
/// components), else new ones that the health requests arriving meanwhile
/// wait for and share. The storage probe takes an admission permit.
async fn health_checks(state: &AppState, plugins: Arc<ComponentSet>) -> Result<HealthChecks, ApiError> {
    let plugin_set = Arc::as_ptr(&plugins) as usize;
    let deadline = tokio::time::Instant::now() + state.request_deadline;
    let mut cached = tokio::time::timeout_at(deadline, state.health.lock())
        .await
        .map_err(|_| ApiError::unavailable("health is being checked; retry shortly"))?;
    if let Some(checks) = cached.as_ref()
        && checks.plugin_set == plugin_set
        && checks.at.elapsed() < HEALTH_TTL
    {
        return Ok(checks.clone());
    }
    state.metrics.health_checked();
    let db = state.db.clone();
    let probed = state.admission_calls.run_short(deadline, move || (db.probe(), db.replicas())).await;
    let (storage, replicas) = match probed {
        Ok((Ok(()), replicas)) => (Ok(()), replicas),
        Ok((Err(error), replicas)) => {
            tracing::error!(%error, "health: storage probe failed");
            (Err(error.to_string()), replicas)
        }
        Err(problem) => {
            tracing::error!(detail = %problem.detail, "health: no database connection for the storage probe");
            (Err(problem.detail), Vec::new())
        }
    };
    let components = tokio::task::spawn_blocking(move || plugins.check_usable())
        .await
        .unwrap_or_else(|_| vec![(String::new(), Err("the check itself failed".to_owned()))]);
    let checks = HealthChecks { at: std::time::Instant::now(), plugin_set, storage, components, replicas };
    *cached = Some(checks.clone());
    Ok(checks)
}

/// Counts every public request by route template and status, with its latency.
async fn observe(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = public_route_template(matched_route(&request).as_ref());
    let note = Arc::new(RequestNote::default());
    request.extensions_mut().insert(note.clone());
    let request_id = request.extensions().get::<RequestId>().map(|id| id.0.clone()).unwrap_or_default();
    let method = request.method().clone();
    let query = request.uri().query().map(str::to_owned);
    let mut watch = AbandonWatch { state: &state, route, started, note, request_id, answered: false };
    let response = next.run(request).await;
    watch.answered = true;
    let status = response.status().as_u16();
    state.metrics.request(route, status, started.elapsed());
    if let Some(recorder) = &state.audit {
        let audited = response.extensions().get::<audit_trail::AuditedPrincipal>();
        // Every authenticated request, and every refused authentication.
        if let Some(audited) = audited.filter(|audited| !audited.refused || status == 401) {
            let principal = audited.principal.clone();
            let records = match (route, status) {
                (routes::ITEM | routes::AGENT_CONFIG, 200) => Some(1),
                _ => response.extensions().get::<audit_trail::RecordsAnswered>().map(|records| records.0),
            };
            let organization = watch
                .note
                .organization
                .get()
                .copied()
                .or_else(|| response.extensions().get::<ServedOrganization>().map(|served| served.0));
            recorder.record(audit_trail::entry(
                &watch.request_id,
                principal,
                organization,
                method.as_str(),
                route,
                query.as_deref(),
                status,
                records,
            ));
        }
    }
    response
}

/// What the layers learn about a request that its log line needs even if
/// its client goes away before the answer.
#[derive(Default)]
struct RequestNote {
    organization: std::sync::OnceLock<Uuid>,
}

/// Logs and counts a request whose client went away before its answer
/// (hyper drops the request's future): `499`, as proxies log it.
struct AbandonWatch<'a> {
    state: &'a AppState,
    route: &'static str,
    started: std::time::Instant,
    note: Arc<RequestNote>,
    request_id: String,
    answered: bool,
}

impl Drop for AbandonWatch<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        self.state.metrics.abandoned(self.route);
        let organization = self.note.organization.get().map_or("-".to_owned(), Uuid::to_string);
        tracing::info!(
            request_id = %self.request_id, route = self.route, status = 499u16,
            micros = self.started.elapsed().as_micros() as u64, organization_id = %organization,
            "request abandoned by the client"
        );
    }
}

/// Bounds what one request may be and how many run at once: a request
/// target over 8 KiB is `414` and over 100 header fields or 64 KiB of them
/// are `431`, charged to
/// the client address's rate limit before any key is looked up (so they
/// carry its fields like every other answer); when every permit is taken
/// the request is shed at once with `503` and `Retry-After` rather than
/// queued without bound.
async fn request_limits(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let target = request.uri().path_and_query().map_or(0, |target| target.as_str().len());
    let header_bytes: usize = request.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    let oversized = if target > limits::MAX_REQUEST_TARGET_BYTES {
        let detail =
            format!("the request target is {target} bytes; at most {} are served", limits::MAX_REQUEST_TARGET_BYTES);
        Some(ApiError::new(StatusCode::URI_TOO_LONG, "uri-too-long", "URI too long", detail))
    } else if request.headers().len() > limits::MAX_HEADER_FIELDS {
        let detail = format!(
            "the request has {} header fields; at most {} are served",
            request.headers().len(),
            limits::MAX_HEADER_FIELDS
        );
        Some(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "Request header fields too large",
            detail,
        ))
    } else if header_bytes > limits::MAX_HEADER_BYTES {
        let detail =
            format!("the header block is {header_bytes} bytes; at most {} are served", limits::MAX_HEADER_BYTES);
        Some(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "Request header fields too large",
            detail,
        ))
    } else {
        None
    };
    if let Some(problem) = oversized {
        let decision = state.rate_limits.per_address.check(limits::address_key(client_address(&request)));
        let mut response =
            if decision.allowed { problem.into_response() } else { too_many_requests(&state, &decision) };
        decision.write_headers(response.headers_mut());
        return response;
    }
    let Ok(_permit) = state.request_permits.clone().try_acquire_owned() else {
        state.metrics.shed();
        return ApiError::unavailable("the service is at capacity; retry shortly").into_response();
    };
    next.run(request).await
}

/// What a listener does with a request its HTTP parser refused (bare
/// `400`/`431`, the connection closed): counts it, and charges it to the
/// address's rate limit like every other refusal.
pub fn on_malformed(state: &AppState, listener: &'static str) -> crate::connections::OnMalformed {
    let state = state.clone();
    Arc::new(move |address, malformed| {
        state.metrics.malformed(listener, malformed.name());
        let _ = state.rate_limits.per_address.check(limits::address_key(address));
    })
}

/// `406` when `Accept` admits nothing the API answers; after the rate
/// limit, so the answer carries its fields.
async fn acceptable(request: Request, next: Next) -> Response {
    if !accepts_what_the_api_answers(request.headers()) {
        return ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "not-acceptable",
            "Not acceptable",
            format!("the API answers {}; the Accept header admits none of them", ANSWERED_MEDIA_TYPES.join(", ")),
        )
        .into_response();
    }
    next.run(request).await
}

/// The address the request came from (unspecified when unknown).
fn client_address(request: &Request) -> std::net::IpAddr {
    connection_address(request.extensions())
}

/// The address of the connection a request came on.
fn connection_address(extensions: &axum::http::Extensions) -> std::net::IpAddr {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |info| info.0.ip())
}

/// The `429` of a refused rate-limit decision, with `Retry-After`.
fn too_many_requests(state: &AppState, decision: &limits::Decision) -> Response {
    state.metrics.rate_limited(decision.policy);
    let retry_after = decision.retry_after_seconds.to_string();
    let mut problem = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate-limited",
        "Too many requests",
        format!("over the {} rate limit; retry after {retry_after} s", decision.policy),
    );
    if let Ok(value) = HeaderValue::from_str(&retry_after) {
        problem.headers.push((header::RETRY_AFTER, value));
    }
    problem.into_response()
}

/// What the API's operations answer, errors included.
const ANSWERED_MEDIA_TYPES: [&str; 4] =
    ["application/json", "application/problem+json", "application/health+json", "application/toml"];

/// Whether `Accept` is absent or admits (with a non-zero `q`) one of
/// [`ANSWERED_MEDIA_TYPES`], directly or by a wildcard.
fn accepts_what_the_api_answers(headers: &HeaderMap) -> bool {
    let mut ranges = headers.get_all(header::ACCEPT).iter().peekable();
    if ranges.peek().is_none() {
        return true;
    }
    ranges.filter_map(|value| value.to_str().ok()).flat_map(|value| value.split(',')).any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let refused = parts.any(|param| {
            param.split_once('=').is_some_and(|(name, q)| {
                name.trim().eq_ignore_ascii_case("q") && q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
            })
        });
        !refused
            && (media.is_empty()
                || media == "*/*"
                || media == "application/*"
                || ANSWERED_MEDIA_TYPES.contains(&media.as_str()))
    })
}

/// Authenticates the request and charges it to its key's rate limit (the
/// agent configuration's own, lower one for that path), or, without a
/// valid key, to its address's. No key is looked up before a bucket has
/// paid for it: a key recently found valid is charged to its own bucket
/// first, any other to the address's (and one recently found unknown is
/// refused without a lookup). Health is charged to its own bucket of the
/// address. The limit's fields go on every response; over the limit is
/// `429` with `Retry-After`.
async fn rate_limit(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let limits = &state.rate_limits;
    let address = limits::address_key(client_address(&request));
    let (caller, decision) = if request.uri().path() == routes::HEALTH {
        (None, limits.health.check(address))
    } else {
        let deadline = tokio::time::Instant::now() + state.request_deadline;
        let agent_config = request.uri().path() == routes::AGENT_CONFIG;
        let key_bucket =
            |key_id: Uuid| if agent_config { limits.agent_config.check(key_id) } else { limits.per_key.check(key_id) };
        let credential = match request.headers().get(header::AUTHORIZATION).map(|value| value.to_str().ok()) {
            None => Err(AuthFailure::Missing),
            Some(None) => Err(AuthFailure::Invalid),
            Some(Some(value)) => keys::bearer(Some(value)).map(|bearer| match bearer {
                Bearer::Key(key) => Presented::Key(keys::hash_key(key)),
                Bearer::Token(token) => Presented::Token(token.to_owned()),
            }),
        };
        match credential {
            // The token endpoint authenticates its clients itself.
            _ if request.uri().path() == routes::TOKEN => (None, limits.per_address.check(address)),
            Err(failure) => (Some(Caller::refused(failure, deadline)), limits.per_address.check(address)),
            Ok(Presented::Token(token)) => match oauth::verify(&state, &token).await {
                // A token that does not verify costs its address.
                Err(why) => {
                    (Some(Caller::refused(AuthFailure::InvalidToken(why), deadline)), limits.per_address.check(address))
                }
                Ok(verified) => {
                    let first = key_bucket(oauth::principal_id(&verified));
                    if !first.allowed {
                        (None, first)
                    } else {
                        match oauth::identify(&state, verified, deadline).await {
                            Ok(caller) => (Some(caller), first),
                            Err(problem) => return problem.into_response(),
                        }
                    }
                }
            },
            Ok(Presented::Key(hash)) => {
                let known = state.known_keys.valid(&hash);
                let first =
                    known.as_ref().map_or_else(|| limits.per_address.check(address), |key| key_bucket(key.id()));
                // A key known valid names its organization: its request's
                // record may be read with it.
                let reading = known.as_ref().and_then(|key| {
                    record_read(&request).map(|(collection, id)| RecordRead {
                        organization: key.organization_id(),
                        collection,
                        id,
                    })
                });
                if !first.allowed {
                    (None, first)
                } else if known.is_none() && state.known_keys.is_unknown(&hash) {
                    (Some(Caller::refused(AuthFailure::Invalid, deadline)), first)
                } else if let Some(known) = known.clone().filter(|_| confirms_in_its_call(&state, &request)) {
                    let caller = Caller {
                        principal: Ok((*known.principal).clone()),
                        organization: Some(known.organization.clone()),
                        deadline,
                        read_ahead: None,
                        confirmation: Some(Arc::new(Confirmation {
                            hash,
                            reading,
                            lists: lists_records(&request),
                            known,
                            valid: std::sync::OnceLock::new(),
                        })),
                    };
                    (Some(caller), first)
                } else {
                    let caller = match identify(&state, hash, reading, deadline).await {
                        Ok(caller) => caller,
                        Err(problem) => return problem.into_response(),
                    };
                    let found = caller.principal.as_ref().ok().zip(caller.organization.as_ref()).map(
                        |(principal, organization)| known_keys::KnownKey {
                            principal: Arc::new(principal.clone()),
                            organization: organization.clone(),
                        },
                    );
                    let key_id = found.as_ref().map(known_keys::KnownKey::id);
                    state.known_keys.found(hash, found);
                    if let Some(key_id) = key_id {
                        known_keys::note_use(&state, key_id);
                    }
                    let decision = match (key_id, known) {
                        (Some(key_id), None) => key_bucket(key_id),
                        // A key known valid until now: the address pays for its failure.
                        (None, Some(_)) => limits.per_address.check(address),
                        _ => first,
                    };
                    (Some(caller), decision)
                }
            }
        }
    };
    let organization = caller.as_ref().and_then(|caller| caller.principal.as_ref().ok()).map(|p| p.organization_id);
    if let (Some(organization), Some(note)) = (organization, request.extensions().get::<Arc<RequestNote>>()) {
        let _ = note.organization.set(organization);
    }
    let mut audited = caller.as_ref().map(|caller| audit_trail::principal_of_caller(caller, &state));
    let confirmation = caller.as_ref().and_then(|caller| caller.confirmation.clone());
    let deadline = caller.as_ref().map(|caller| caller.deadline);
    let mut decision = decision;
    let mut response = if decision.allowed {
        if let Some(caller) = caller {
            request.extensions_mut().insert(caller);
        }
        next.run(request).await
    } else {
        too_many_requests(&state, &decision)
    };
    if let (Some(confirmation), Some(deadline)) = (confirmation.filter(|_| decision.allowed), deadline) {
        match confirmed(&state, &confirmation, deadline).await {
            Ok(true) => {}
            Ok(false) => {
                // As a lookup before the request: the address pays for the
                // failure, and the answer is the key's refusal.
                decision = limits.per_address.check(address);
                audited = Some(audit_trail::AuditedPrincipal {
                    principal: audit_trail::of_failure(&AuthFailure::Invalid),
                    refused: true,
                });
                response = ApiError::unauthorized("the API key is not valid").into_response();
            }
            Err(problem) => response = problem.into_response(),
        }
    }
    decision.write_headers(response.headers_mut());
    if let Some(organization) = organization {
        response.extensions_mut().insert(ServedOrganization(organization));
    }
    if let Some(audited) = audited {
        response.extensions_mut().insert(audited);
    }
    response
}

/// Whether the key of a request admitted before its lookup is still
/// valid: as its component call found, or looked up now when the request
/// made none. Notes what was found, as [`rate_limit`] does after a lookup.
async fn confirmed(
    state: &AppState,
    confirmation: &Arc<Confirmation>,
    deadline: tokio::time::Instant,
) -> Result<bool, ApiError> {
    let valid = match confirmation.valid.get() {
        Some(valid) => *valid,
        None => {
            let (db, looked_up) = (state.db.clone(), confirmation.clone());
            state
                .admission_calls
                .run_short(deadline, move || looked_up.confirm(db.as_ref(), None))
                .await?
                .map_err(|error| ApiError::store_failure(&error, "authenticating"))?
        }
    };
    if valid {
        state.known_keys.found(confirmation.hash, Some(confirmation.known.clone()));
        known_keys::note_use(state, confirmation.known.id());
    } else {
        state.known_keys.found(confirmation.hash, None);
    }
    Ok(valid)
}

/// What an `Authorization` header presented.
enum Presented {
    /// An API key, by its hash.
    Key([u8; 32]),
    /// An access token.
    Token(String),
}

/// Assigns the request id (the caller's, when it is sane), echoes it, and
/// renders any [`ApiError`] with it.
pub(crate) async fn request_id(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .filter(|value| is_sane_request_id(value))
        .map_or_else(|| Uuid::new_v4().to_string(), str::to_owned);
    let instance = request.uri().path().to_owned();
    let method = request.method().clone();
    let route = matched_route(&request);
    request.extensions_mut().insert(RequestId(id.clone()));
    let started = std::time::Instant::now();
    let mut response = next.run(request).await;
    if let Some(problem) = response.extensions_mut().remove::<ApiError>() {
        let added_on_the_way = std::mem::take(response.headers_mut());
        // What the layers noted (the organization served) outlives the placeholder.
        let noted_on_the_way = std::mem::take(response.extensions_mut());
        response = problem.render(&id, &instance);
        response.extensions_mut().extend(noted_on_the_way);
        let headers = response.headers_mut();
        for (name, value) in &added_on_the_way {
            if !headers.contains_key(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
    }
    let organization =
        response.extensions().get::<ServedOrganization>().map_or("-".to_owned(), |served| served.0.to_string());
    tracing::info!(
        request_id = %id, method = %method, route = route_template(route.as_ref()), path = %instance, status = response.status().as_u16(),
        micros = started.elapsed().as_micros() as u64, organization_id = %organization, "request"
    );
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

/// The last `N` segments of the request path, percent-decoded. Bytes that
/// are not UTF-8 become U+FFFD, so such a segment fails validation like
/// any other bad value (a 400 or 404 problem) instead of being refused in
/// plain text by a typed extractor.
pub(crate) fn path_parameters<const N: usize>(uri: &Uri) -> [String; N] {
    let segments: Vec<&str> = uri.path().split('/').collect();
    let start = segments.len().saturating_sub(N);
    std::array::from_fn(|index| {
        let segment = segments.get(start + index).copied().unwrap_or_default();
        percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned()
    })
}

fn is_sane_request_id(value: &str) -> bool {
    (1..=128).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

fn allow_read_only(method: &Method) -> Result<(), ApiError> {
    if method == Method::GET || method == Method::HEAD { Ok(()) } else { Err(ApiError::method_not_allowed()) }
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such path in this API")
}

fn group(collection: &str) -> Result<&'static Group, ApiError> {
    GROUPS
        .iter()
        .find(|group| group.collection.name() == collection)
        .ok_or_else(|| ApiError::not_found("no such path in this API"))
}

/// A read of a collection: the method is allowed, the group exists and the
/// caller may read it (checked in that order: 405, 404, 401/403).
fn read_group(method: &Method, collection: &str, caller: &Caller) -> Result<(&'static Group, Principal), ApiError> {
    allow_read_only(method)?;
    let group = group(collection)?;
    Ok((group, authorize(caller, group.scope)?))
}

/// The caller, if its key is valid and carries `scope`.
fn authorize(caller: &Caller, scope: &str) -> Result<Principal, ApiError> {
    let principal = authenticated(caller)?;
    if principal.has_scope(scope) { Ok(principal) } else { Err(ApiError::forbidden(scope, principal.is_token())) }
}

/// The caller, if its key is valid.
fn authenticated(caller: &Caller) -> Result<Principal, ApiError> {
    match caller.principal.clone() {
        Ok(principal) => Ok(principal),
        Err(AuthFailure::Missing) => {
            Err(ApiError::unauthorized("an API key or access token is required: Authorization: Bearer <key or token>"))
        }
        Err(AuthFailure::Invalid) => Err(ApiError::unauthorized("the API key is not valid")),
        Err(AuthFailure::InvalidToken(why)) => Err(ApiError::invalid_token(&why)),
    }
}

/// The caller's organization, bound for a component call.
fn tenant(state: &AppState, caller: &Caller) -> Result<Tenant, ApiError> {
    let organization = caller
        .organization
        .as_deref()
        .ok_or_else(|| ApiError::unauthorized("the API key's organization no longer exists"))?;
    let json = json!({
        "organization_id": organization.organization_id,
        "name": organization.name,
        "enrollment_token": organization.enrollment_token,
    });
    Ok(Tenant {
        store: state.db.clone(),
        organization_id: organization.organization_id,
        organization_json: Arc::new(json.to_string().into_bytes()),
        reads: Arc::new(CallReads {
            read_ahead: std::sync::Mutex::new(caller.read_ahead.clone()),
            ..CallReads::default()
        }),
        call_time: Some(state.request_deadline),
    })
}

/// Query parameters in order, percent-decoded.
fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes()).map(|(n, v)| (n.into_owned(), v.into_owned())).collect()
}

/// Marks a call's request abandoned when dropped.
struct AbandonOnDrop(Arc<CallReads>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.abandoned.store(true, Ordering::Relaxed);
    }
}

/// Runs a component call off the async threads, in one of the calling
/// organization's slots, with a store permit (its read session holds a
/// database connection) waited for until the caller's deadline.
async fn call_component<T: Send + 'static>(
    state: &AppState,
    group: &'static str,
    caller: &Caller,
    organization: Uuid,
    reads: &Arc<CallReads>,
    call: impl FnOnce(&ComponentSet) -> Result<T, CallError> + Clone + Send + 'static,
) -> Result<T, ApiError> {
    // The slot is held by the work, not by this future: a client that goes
    // away frees it only when the call has stopped.
    let slot = Arc::new(state.plugin_slots.acquire(organization).await?);
    // Dropped with this future when the client goes away (and harmlessly
    // once the call is done): the call stops at its next check.
    let _abandon = AbandonOnDrop(reads.clone());
    let plugins = state.plugins.current();
    let started = std::time::Instant::now();
    let first = call.clone();
    let first_plugins = plugins.clone();
    let first_slot = slot.clone();
    let confirming = caller.confirmation.clone().filter(|confirmation| confirmation.valid.get().is_none());
    let (db, confirmed_reads, call_time) = (state.db.clone(), reads.clone(), state.request_deadline);
    let mut outcome = state
        .store_calls
        .run(caller.deadline, move || {
            let _slot = first_slot;
            // The key first: nothing runs for a key no longer valid.
            if let Some(confirmation) = confirming {
                match confirmation.confirm(db.as_ref(), Some((&confirmed_reads, call_time))) {
                    Ok(true) => {}
                    Ok(false) => return Err(ApiError::unauthorized("the API key is not valid")),
                    Err(error) => return Err(ApiError::store_failure(&error, "authenticating")),
                }
            }
            Ok(first(&first_plugins))
        })
        .await??;
    // A read a replica lost (a replay conflict cancels it, the replica
    // goes away) is read again on the primary, once.
    if outcome.is_err() && reads.failed_on_replica.swap(false, Ordering::Relaxed) {
        tracing::warn!(group, "a read failed on a replica; reading the primary");
        reads.primary_only.store(true, Ordering::Relaxed);
        outcome = state
            .store_calls
            .run(caller.deadline, move || {
                let _slot = slot;
                call(&plugins)
            })
            .await?;
    }
    let [timeout, abandoned, trap, unavailable] = crate::metrics::CALL_FAILURE_KINDS;
    let failure = match &outcome {
        Err(CallError::Timeout) => Some(timeout),
        Err(CallError::Abandoned) => Some(abandoned),
        Err(CallError::Failed(_)) => Some(trap),
        Err(CallError::Unavailable(_)) => Some(unavailable),
        _ => None,
    };
    state.metrics.component_call(group, started.elapsed(), failure);
    outcome.map_err(|error| match error {
        CallError::Plugin(PluginError::InvalidParameters(params)) => {
            ApiError::invalid_parameters(params.into_iter().map(|p| (p.name, p.reason)).collect())
        }
        CallError::Plugin(PluginError::NotFound) => ApiError::not_found("no such record"),
        CallError::Plugin(PluginError::Internal(message)) => {
            let message = esr_runtime::loggable_guest_text(&message, esr_runtime::LOG_MESSAGE_BYTES);
            tracing::error!(%message, "plugin reported an internal error");
            ApiError::internal()
        }
        CallError::Timeout => ApiError::unavailable("the request took too long; retry shortly"),
        // Nobody reads this answer: its client went away.
        CallError::Abandoned => ApiError::unavailable("the request was abandoned"),
        CallError::Unavailable(reason) => {
            tracing::warn!(group, %reason, "a component call's store failed: the database is unavailable");
            ApiError::database_unavailable()
        }
        CallError::Failed(_) => ApiError::internal(),
    })
}

async fn list(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    RawQuery(raw): RawQuery,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let [collection] = path_parameters(&uri);
    let (group, principal) = read_group(&method, &collection, &caller)?;
    let tenant = tenant(&state, &caller)?;
    let reads = tenant.reads.clone();
    let mut query = query_pairs(raw.as_deref());
    within_declared_lengths(&state, group.collection.name(), &query, |info| Some(&info.parameters))?;
    let binding_query = query.clone();
    let binding = CursorBinding {
        organization_id: principal.organization_id,
        collection: group.collection.name(),
        query: &binding_query,
    };
    for (name, value) in query.iter_mut().filter(|(name, _)| name == "cursor") {
        let (inner, position) = binding.open_at(&state.cursor_key, value).ok_or_else(|| {
            ApiError::invalid_parameters(vec![(
                name.clone(),
                "not a cursor issued for this collection, these filters and this sort".into(),
            )])
        })?;
        // The next page is read where the last one was, or later.
        reads.at_least.fetch_max(position, Ordering::Relaxed);
        *value = inner;
    }
    let path = format!("/v1/{}", group.collection);
    let request = component_request(&path, &state.public_url, &query);
    let (page, sequence) =
        call_component(&state, group.collection.name(), &caller, principal.organization_id, &reads, move |plugins| {
            plugins.list(group.collection.name(), tenant, &request, &request_id)
        })
        .await?;
    let Some(records) = records_of_page(&page) else {
        tracing::error!(
            plugin = group.collection.name(),
            "list page is not a JSON array of at most 100 records and its bounds"
        );
        return Err(ApiError::internal());
    };
    let next_cursor = match page.next_cursor.as_deref() {
        Some(inner) => {
            let position = reads.position.load(Ordering::Relaxed);
            let sealed = binding.seal_at(&state.cursor_key, inner, position).ok_or_else(ApiError::internal)?;
            if sealed.len() > MAX_CURSOR_CHARS {
                tracing::error!(plugin = group.collection.name(), "the component's cursor is too long to seal");
                return Err(ApiError::internal());
            }
            Some(sealed)
        }
        None => None,
    };
    let mut body = Vec::with_capacity(page.data.len() + 160);
    body.extend_from_slice(b"{\"data\":");
    body.extend_from_slice(&page.data);
    let tail = json!({"total": page.total, "limit": page.limit, "offset": page.offset, "next_cursor": next_cursor,
                      "sequence": sequence});
    // The envelope's other members follow `data` in the order clients see
    // them in the contract.
    for (name, value) in ["total", "limit", "offset", "next_cursor", "sequence"].iter().map(|n| (n, &tail[n])) {
        body.extend_from_slice(format!(",\"{name}\":{value}").as_bytes());
    }
    body.push(b'}');
    let mut response = conditional(&headers, body, "application/json");
    response.extensions_mut().insert(audit_trail::RecordsAnswered(records as u64));
    if let Some(token) = next_cursor {
        let mut link_query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in binding_query.iter().filter(|(name, _)| name != "cursor" && name != "offset") {
            link_query.append_pair(name, value);
        }
        link_query.append_pair("cursor", &token);
        let link = format!("<{}{}?{}>; rel=\"next\"", state.public_url, path, link_query.finish());
        if link.len() <= MAX_LINK_CHARS
            && let Ok(value) = HeaderValue::from_str(&link)
        {
            response.headers_mut().insert(header::LINK, value);
        }
    }
    Ok(response)
}

async fn item(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    RawQuery(raw): RawQuery,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let [collection, id] = path_parameters(&uri);
    let (group, principal) = read_group(&method, &collection, &caller)?;
    let id = parse_id(&id).ok_or_else(|| ApiError::invalid_id(group.resource))?;
    let tenant = tenant(&state, &caller)?;
    let reads = tenant.reads.clone();
    let path = format!("/v1/{}/{id}", group.collection);
    let request = component_request(&path, &state.public_url, &query_pairs(raw.as_deref()));
    let id_text = id.to_string();
    let record =
        call_component(&state, group.collection.name(), &caller, principal.organization_id, &reads, move |plugins| {
            plugins.get_record(group.collection.name(), tenant, &id_text, &request, &request_id)
        })
        .await
        .map_err(|error| {
            if error.status == StatusCode::NOT_FOUND {
                ApiError::not_found(format!("no {} with id {id}", group.resource))
            } else {
                error
            }
        })?;
    if !is_json(&record, b'{') {
        tracing::error!(plugin = group.collection.name(), "record is not a JSON object");
        return Err(ApiError::internal());
    }
    Ok(conditional(&headers, record, "application/json"))
}

/// `GET /v1/<collection>/summary`: counts grouped by fields, from the
/// group's component (`summaries.summary`, since WIT 0.3.2). A component
/// built against an earlier 0.3 version serves none: `404` saying so.
async fn summary(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    RawQuery(raw): RawQuery,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let [collection, _] = path_parameters(&uri);
    let (group, principal) = read_group(&method, &collection, &caller)?;
    if !group.summary {
        // As `/v1/scopes/{id}` answers any id that is not a UUID, saying why.
        let mut problem = ApiError::invalid_id(group.resource);
        problem.detail = format!(
            "{}: {} have no summary (summaries: {})",
            problem.detail,
            group.collection,
            GROUPS
                .iter()
                .filter(|group| group.summary)
                .map(|group| group.collection.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Err(problem);
    }
    let served = state.plugins.current().get(group.collection.name()).and_then(|info| info.summary.as_ref()).is_some();
    let not_served = || {
        let plugins = state.plugins.current();
        let built = plugins.get(group.collection.name()).map(|info| info.wit_version.clone()).unwrap_or_default();
        let before_summaries =
            built.split('.').map(|part| part.parse::<u64>().unwrap_or(0)).collect::<Vec<_>>() < vec![0, 3, 2];
        let why = if before_summaries {
            format!(" (it is built against esr:plugin@{built}; summaries need 0.3.2 or later)")
        } else {
            String::new()
        };
        ApiError::not_found(format!("the {} component serves no summary{why}", group.collection))
    };
    if !served {
        return Err(not_served());
    }
    let tenant = tenant(&state, &caller)?;
    let reads = tenant.reads.clone();
    let query = query_pairs(raw.as_deref());
    within_declared_lengths(&state, group.collection.name(), &query, |info| {
        info.summary.as_ref().map(|summary| &summary.parameters)
    })?;
    let path = format!("/v1/{}/summary", group.collection);
    let request = component_request(&path, &state.public_url, &query);
    let answer =
        call_component(&state, group.collection.name(), &caller, principal.organization_id, &reads, move |plugins| {
            plugins.summary(group.collection.name(), tenant, &request, &request_id)
        })
        .await
        .map_err(|error| if error.status == StatusCode::NOT_FOUND { not_served() } else { error })?;
    // The bounds the OpenAPI document states, kept whatever the component gives.
    let groups_are_bounded = serde_json::from_slice::<Vec<serde_json::Map<String, Value>>>(&answer.groups)
        .is_ok_and(|groups| groups.len() <= esr_contract::limits::MAX_SUMMARY_GROUPS);
    if !groups_are_bounded || i64::try_from(answer.total).is_err() {
        tracing::error!(plugin = group.collection.name(), "summary groups are not a bounded JSON array of objects");
        return Err(ApiError::internal());
    }
    let mut body = Vec::with_capacity(answer.groups.len() + 32);
    body.extend_from_slice(b"{\"groups\":");
    body.extend_from_slice(&answer.groups);
    body.extend_from_slice(format!(",\"total\":{}}}", answer.total).as_bytes());
    Ok(conditional(&headers, body, "application/json"))
}

/// Refuses (`400`, naming each) a query value longer than the `maxLength`
/// the group's component declares for it (in the parameters `declared`
/// picks: the list's or the summary's): a bound the OpenAPI document
/// states is a bound the server keeps, whatever the component checks.
fn within_declared_lengths(
    state: &AppState,
    group: &str,
    query: &[(String, String)],
    declared: impl Fn(&esr_runtime::ComponentInfo) -> Option<&Vec<esr_runtime::ParameterDoc>>,
) -> Result<(), ApiError> {
    let plugins = state.plugins.current();
    let Some(parameters) = plugins.infos().find(|info| info.group == group).and_then(declared) else { return Ok(()) };
    let mut too_long = Vec::new();
    for (name, value) in query {
        let declared = parameters.iter().find(|parameter| parameter.name == *name);
        let limit = declared.and_then(|parameter| parameter.schema.get("maxLength")).and_then(Value::as_u64);
        if let Some(limit) = limit
            && value.chars().count() as u64 > limit
            && !too_long.iter().any(|(seen, _): &(String, String)| seen == name)
        {
            too_long.push((name.clone(), format!("longer than {limit} characters")));
        }
    }
    if too_long.is_empty() { Ok(()) } else { Err(ApiError::invalid_parameters(too_long)) }
}

/// How many records a component's page holds, if it keeps the envelope's
/// stated bounds: `data` a JSON array of at most [`MAX_LIMIT`] records,
/// `limit` from 1 to [`MAX_LIMIT`], `total` and `offset` within a signed
/// 64-bit integer.
fn records_of_page(page: &esr_runtime::Page) -> Option<usize> {
    let within_i64 = |n: u64| i64::try_from(n).is_ok();
    let records = serde_json::from_slice::<Vec<serde::de::IgnoredAny>>(&page.data).ok()?.len();
    let kept = page.data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
        && records <= MAX_LIMIT as usize
        && (1..=MAX_LIMIT).contains(&page.limit)
        && within_i64(page.total)
        && page.offset.is_none_or(within_i64);
    kept.then_some(records)
}

/// A UUID as the contract spells it (hyphenated; any case on input).
fn parse_id(text: &str) -> Option<Uuid> {
    (text.len() == 36).then(|| Uuid::try_parse(text).ok()).flatten()
}

/// A `200` with a strong ETag, or `304` when `If-None-Match` matches it.
fn conditional(headers: &HeaderMap, body: Vec<u8>, content_type: &'static str) -> Response {
    let etag = format!("\"{}\"", &hex::encode(Sha256::digest(&body))[..32]);
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag);
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, Body::from(body)).into_response()
    };
    let response_headers = response.headers_mut();
    if !matches {
        response_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    if let Ok(value) = HeaderValue::from_str(&etag) {
        response_headers.insert(header::ETAG, value);
    }
    // Tenant data: never in a shared cache, always revalidated.
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-cache"));
    response_headers.insert(header::VARY, HeaderValue::from_static("Authorization"));
    response
}

async fn agent_config(
    State(state): State<AppState>,
    method: Method,
    RawQuery(raw): RawQuery,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> Result<Response, ApiError> {
    allow_read_only(&method)?;
    let principal = authorize(&caller, keys::SCOPE_AGENT_CONFIG)?;
    let tenant = tenant(&state, &caller)?;
    let reads = tenant.reads.clone();
    let query = query_pairs(raw.as_deref());
    within_declared_lengths(&state, esr_runtime::AGENT_GROUP, &query, |info| Some(&info.parameters))?;
    let request = component_request("/v1/agent/config", &state.public_url, &query);
    let rendered =
        call_component(&state, esr_runtime::AGENT_GROUP, &caller, principal.organization_id, &reads, move |plugins| {
            plugins.render(esr_runtime::AGENT_GROUP, tenant, &request, &request_id)
        })
        .await?;
    if rendered.body.len() > MAX_DOCUMENT_BYTES {
        tracing::error!(bytes = rendered.body.len(), "agent plugin rendered a document over the size limit");
        return Err(ApiError::internal());
    }
    let content_type = match rendered.content_type.as_str() {
        "application/json" => "application/json",
        "application/toml" => "application/toml",
        other => {
            tracing::error!(content_type = other, "agent plugin rendered an unexpected media type");
            return Err(ApiError::internal());
        }
    };
    let filename_is_safe = !rendered.filename.is_empty()
        && rendered.filename.len() <= 64
        && rendered.filename.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if !filename_is_safe {
        tracing::error!("agent plugin rendered an unsafe file name");
        return Err(ApiError::internal());
    }
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{}\"", rendered.filename))
        .map_err(|_| ApiError::internal())?;
    let mut response = (StatusCode::OK, Body::from(rendered.body)).into_response();
    let response_headers = response.headers_mut();
    response_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response_headers.insert(header::CONTENT_DISPOSITION, disposition);
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The OpenAPI document of the API as the loaded components make it.
async fn openapi_document(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    allow_read_only(&method)?;
    let body = openapi::rendered(&state.plugins.current()).to_vec();
    Ok(conditional(&headers, body, "application/json"))
}

/// `GET /v1/health`: pass or fail, the version, and each check's status
/// under the names clients know; where and what runs (the machine, ports,
/// component hashes, replicas' addresses) only on the admin listener
/// ([`detailed_health`]).
async fn health(State(state): State<AppState>, method: Method) -> Result<Response, ApiError> {
    allow_read_only(&method)?;
    health_response(&state, false).await
}

/// `GET /admin/v1/health`: health with every detail.
pub async fn detailed_health(state: &AppState) -> Result<Response, ApiError> {
    health_response(state, true).await
}

async fn health_response(state: &AppState, detailed: bool) -> Result<Response, ApiError> {
    let plugins = state.plugins.current();
    let checks = health_checks(state, plugins.clone()).await?;
    let public = |status: &str, component_type: &str| json!([{"status": status, "component_type": component_type}]);
    let mut healthy = checks.storage.is_ok();
    let mut report = serde_json::Map::new();
    let storage = match &checks.storage {
        Ok(()) => public("pass", "datastore"),
        Err(_) => json!([{"status": "fail", "component_type": "datastore", "output": "storage is not readable"}]),
    };
    report.insert("storage".into(), storage);
    for info in plugins.infos() {
        let failure = checks
            .components
            .iter()
            .find(|(group, _)| *group == info.group)
            .and_then(|(_, outcome)| outcome.as_ref().err());
        if let Some(reason) = failure {
            tracing::error!(group = %info.group, %reason, "health: a component is not usable");
            healthy = false;
        }
        let status = if failure.is_none() { "pass" } else { "fail" };
        let check = if detailed {
            json!([{
                "status": status,
                "component_type": "component",
                "name": info.group,
                "version": info.version,
                "content_hash": format!("sha256:{}", info.sha256),
                "wit_version": info.wit_version,
                "loaded_at": info.loaded_at,
            }])
        } else {
            public(status, "component")
        };
        report.insert(format!("plugin:{}", info.group), check);
    }
    // Read replicas: one that is down or lags is skipped, the primary reads
    // instead, so neither fails the host.
    if !checks.replicas.is_empty() {
        let replicas: Vec<Value> = checks
            .replicas
            .iter()
            .map(|replica| {
                let status = if replica.state == "up" { "pass" } else { "warn" };
                if detailed {
                    json!({
                        "status": status,
                        "component_type": "datastore",
                        "component_id": replica.name,
                        "observed_value": replica.lag_ms,
                        "observed_unit": "ms",
                        "output": replica.state,
                    })
                } else {
                    json!({"status": status, "component_type": "datastore"})
                }
            })
            .collect();
        report.insert("replicas".into(), Value::Array(replicas));
    }
    // The hosts the rate limits are divided among (see `limits.rs`).
    let hosts = if detailed {
        json!([{"status": "pass", "component_type": "system", "observed_value": state.rate_limits.hosts()}])
    } else {
        public("pass", "system")
    };
    report.insert("hosts".into(), hosts);
    let status = if healthy { "pass" } else { "fail" };
    let mut body = json!({"status": status, "version": env!("CARGO_PKG_VERSION"), "checks": report});
    if detailed {
        body["host"] = json!(state.host);
    }
    let code = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut response = (code, body.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/health+json"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
