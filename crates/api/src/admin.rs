//! The admin listener: loopback by default, separate from the public port,
//! authenticated with the admin token. It carries what operators change:
//! organizations, API keys, the import and deletion of records, and plugin
//! reload.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use esr_contract::time::Timestamp;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::admin_auth::FailedAuthentications;
use super::problem::ApiError;
use super::{admin_audit, admin_oauth, admin_webhooks, audit_trail};
use super::{path_parameters, request_id};
use crate::connections::ConnectionStanding;
use esr_auth::admin_token;
use esr_auth::keys::{self, ALL_READ_SCOPES};
use esr_runtime::{ComponentInfo, ComponentRegistry};
use esr_store::{ApiKeyRecord, Collection, Organization, Store, StoreError};
use esr_write::deletions::{self, DeleteError};
use esr_write::ingest::{self, ImportError};

#[derive(Clone)]
pub struct AdminState {
    pub plugins: Arc<ComponentRegistry>,
    pub db: Arc<dyn Store>,
    /// The store permits the public listener takes too.
    pub store_calls: super::store_calls::StoreCalls,
    /// SHA-256 of the admin token.
    pub token_hash: [u8; 32],
    /// Failed authentications by client address, throttled.
    pub failed_authentications: Arc<FailedAuthentications>,
    /// The largest import body accepted, in bytes.
    pub import_max_bytes: usize,
    /// The most lines an import batch may hold.
    pub import_max_lines: usize,
    /// The most findings one scanner report may make.
    pub import_max_findings: usize,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The public listener's state: health's details.
    pub serving: super::AppState,
    /// This host's webhook deliveries (woken by a subscription's change).
    pub webhooks: Arc<esr_webhooks::Dispatcher>,
    /// How long a rotated API key keeps working beside its successor.
    pub key_rotation_overlap: std::time::Duration,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/admin/v1/organizations", post(create_organization).get(list_organizations))
        .route("/admin/v1/keys", post(create_key).get(list_keys))
        .route("/admin/v1/keys/{key_id}", delete(revoke_key))
        .route("/admin/v1/keys/{key_id}/rotate", post(rotate_key))
        .route("/admin/v1/clients", post(admin_oauth::create_client).get(admin_oauth::list_clients))
        .route("/admin/v1/clients/{client_id}", get(admin_oauth::show_client).delete(admin_oauth::revoke_client))
        .route("/admin/v1/clients/{client_id}/rotate-secret", post(admin_oauth::rotate_client_secret))
        .route("/admin/v1/signing-keys", get(admin_oauth::list_signing_keys))
        .route("/admin/v1/signing-keys/rotate", post(admin_oauth::rotate_signing_keys))
        .route("/admin/v1/organizations/{organization_id}/import/{collection}", post(import))
        .route("/admin/v1/organizations/{organization_id}/reports", post(import_report))
        .route("/admin/v1/organizations/{organization_id}/{collection}/{id}", delete(delete_record))
        .route("/admin/v1/organizations/{organization_id}/audit", get(admin_audit::audit))
        .route(
            "/admin/v1/organizations/{organization_id}/webhooks",
            post(admin_webhooks::create).get(admin_webhooks::list),
        )
        .route(
            "/admin/v1/organizations/{organization_id}/webhooks/{id}",
            get(admin_webhooks::show).patch(admin_webhooks::update).delete(admin_webhooks::remove),
        )
        .route("/admin/v1/organizations/{organization_id}/webhooks/{id}/replay", post(admin_webhooks::replay))
        .route(
            "/admin/v1/organizations/{organization_id}/webhooks/{id}/rotate-secret",
            post(admin_webhooks::rotate_secret),
        )
        .route("/admin/v1/organizations/{organization_id}/webhooks/{id}/deliveries", get(admin_webhooks::deliveries))
        .route("/admin/v1/plugins/reload", post(reload))
        .route("/metrics", get(metrics))
        .route("/admin/v1/health", get(health))
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
                "this admin route does not take that method",
            )
        })
        .route_layer(middleware::from_fn(known_parameters))
        .fallback(|| async { ApiError::not_found("no such admin path") })
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(state.serving.audit.clone(), audit_trail::record_admin))
        .layer(middleware::from_fn(request_id))
        .with_state(state)
}

/// The query parameters each admin route takes (by method and route);
/// any other is `400` naming it.
fn parameters_of(method: &axum::http::Method, route: &str) -> &'static [&'static str] {
    match (method.as_str(), route) {
        ("GET", "/admin/v1/keys") => &["organizationId"],
        ("POST", "/admin/v1/organizations/{organization_id}/import/{collection}") => &["dryRun"],
        ("GET", "/admin/v1/clients") => &["organizationId"],
        ("GET", "/admin/v1/organizations/{organization_id}/audit") => &["after", "principal", "since", "limit"],
        ("POST", "/admin/v1/organizations/{organization_id}/reports") => {
            &["format", "endpoint", "createEndpoint", "scanner", "dryRun"]
        }
        _ => &[],
    }
}

/// Refuses a query parameter the route does not take, naming each.
async fn known_parameters(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<axum::extract::MatchedPath>().map(|path| path.as_str().to_owned());
    let known = parameters_of(request.method(), route.as_deref().unwrap_or_default());
    let unknown: Vec<(String, String)> = form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
        .filter(|(name, _)| !known.contains(&name.as_ref()))
        .map(|(name, _)| {
            let reason = if known.is_empty() {
                "unknown parameter; this route takes none".to_owned()
            } else {
                format!("unknown parameter; known: {}", known.join(", "))
            };
            (name.into_owned(), reason)
        })
        .collect();
    if unknown.is_empty() { next.run(request).await } else { ApiError::invalid_parameters(unknown).into_response() }
}

/// `true` or `false`, else `400` naming the parameter.
fn parse_flag(value: &str, name: &str) -> Result<bool, ApiError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ApiError::invalid_parameters(vec![(name.to_owned(), "not true or false".to_owned())])),
    }
}

/// Every admin route needs the admin token. A connection that presents it
/// is marked authenticated (the listener never closes it to make room for
/// another). Failures are counted per client address: past its allowance,
/// an address's failures are answered `429` with `Retry-After` and the
/// connection is closed. The token is always compared, so the operator is
/// never refused for failures another local process made from the same
/// loopback address; guessing is hopeless anyway (at least 128 bits).
async fn authorize(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    // Comparing digests keeps the comparison's timing independent of the token.
    if let Some(presented) = presented
        && admin_token::token_digest(presented) == state.token_hash
    {
        if let Some(connection) = request.extensions().get::<ConnectionStanding>() {
            connection.mark_authenticated();
        }
        return next.run(request).await;
    }
    let address = super::client_address(&request);
    let now = std::time::Instant::now();
    let throttled = state.failed_authentications.retry_after(address, now);
    state.failed_authentications.record(address, now);
    if let Some(wait) = throttled {
        let seconds = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
        let mut problem = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "Too many requests",
            format!("too many failed admin authentications from this address; retry after {seconds} s"),
        )
        .with_header(header::CONNECTION, "close");
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            problem.headers.push((header::RETRY_AFTER, value));
        }
        return problem.into_response();
    }
    match presented {
        None => ApiError::unauthorized("the admin token is required: Authorization: Bearer <admin token>"),
        Some(_) => ApiError::unauthorized("the admin token is not valid"),
    }
    .into_response()
}

/// How long an admin request waits for a store permit (an import waits
/// behind the reads in progress, never inside the connection pool).
const ADMIN_STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl AdminState {
    /// Runs blocking storage work off the async threads, with a store permit.
    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.store_calls.run(tokio::time::Instant::now() + ADMIN_STORE_WAIT, work).await?
    }
}

/// A storage failure: logged, answered `503` while the database is
/// unavailable (nothing was written unless the loss came during the
/// commit: an import sent again changes nothing twice), else `500`.
pub(super) fn storage_failure(error: StoreError) -> ApiError {
    ApiError::store_failure(&error, "admin request")
}

fn invalid_body(detail: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid-body", "Invalid body", detail)
}

/// A JSON object body holding only the `allowed` members, or `400` saying why not.
pub(super) fn json_object(body: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let object = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return Err(invalid_body("the body must be a JSON object".into())),
        Err(error) => return Err(invalid_body(format!("the body is not JSON: {error}"))),
    };
    let unknown: Vec<(String, String)> = object
        .keys()
        .filter(|key| !allowed.contains(&key.as_str()))
        .map(|key| (key.clone(), format!("unknown field; expected {}", allowed.join(", "))))
        .collect();
    if unknown.is_empty() { Ok(object) } else { Err(ApiError::invalid_parameters(unknown)) }
}

/// A required name of 1 to 200 characters.
pub(super) fn name_member(object: &Map<String, Value>, problems: &mut Vec<(String, String)>) -> String {
    match object.get("name").and_then(Value::as_str).map(str::trim) {
        Some(name) if (1..=200).contains(&name.chars().count()) => name.to_owned(),
        _ => {
            problems.push(("name".into(), "a name of 1 to 200 characters is required".into()));
            String::new()
        }
    }
}

pub(super) fn parse_uuid(text: &str, name: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(text).map_err(|_| ApiError::invalid_parameters(vec![(name.to_owned(), "not a UUID".to_owned())]))
}

pub(super) fn organization_exists(db: &dyn Store, id: Uuid) -> Result<(), ApiError> {
    match db.organization(id).map_err(storage_failure)? {
        Some(_) => Ok(()),
        None => Err(ApiError::not_found(format!("no organization {id}"))),
    }
}

fn now_text() -> String {
    esr_system::clock::now_rfc3339()
}

fn organization_json(organization: &Organization) -> Value {
    json!({
        "organization_id": organization.organization_id,
        "name": organization.name,
        "created_at": organization.created_at,
    })
}

/// `POST /admin/v1/organizations` `{"name"}` → `201`.
async fn create_organization(State(state): State<AdminState>, body: Bytes) -> Result<Response, ApiError> {
    let object = json_object(&body, &["name"])?;
    let mut problems = Vec::new();
    let name = name_member(&object, &mut problems);
    if !problems.is_empty() {
        return Err(ApiError::invalid_parameters(problems));
    }
    let organization = keys::new_organization(&name, now_text());
    let (db, stored) = (state.db.clone(), organization.clone());
    state.blocking(move || db.insert_organization(&stored).map_err(storage_failure)).await?;
    tracing::info!(organization_id = %organization.organization_id, "organization created");
    Ok((StatusCode::CREATED, Json(organization_json(&organization))).into_response())
}

/// `GET /admin/v1/organizations`.
async fn list_organizations(State(state): State<AdminState>) -> Result<Response, ApiError> {
    let db = state.db.clone();
    let organizations = state.blocking(move || db.organizations().map_err(storage_failure)).await?;
    Ok(Json(json!({"data": organizations.iter().map(organization_json).collect::<Vec<_>>()})).into_response())
}

fn key_json(record: &ApiKeyRecord) -> Value {
    json!({
        "id": record.id,
        "organization_id": record.organization_id,
        "name": record.name,
        "scopes": record.scopes,
        "prefix": record.prefix,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        "revoked_at": record.revoked_at,
        "last_used_at": record.last_used_at,
    })
}

/// The `scopes` member: a non-empty array of read scopes, each once.
pub(super) fn scopes_member(object: &Map<String, Value>, problems: &mut Vec<(String, String)>) -> Vec<&'static str> {
    let mut scopes = Vec::new();
    let choices = ALL_READ_SCOPES.join(", ");
    match object.get("scopes").and_then(Value::as_array) {
        Some(requested) if !requested.is_empty() => {
            for scope in requested {
                match ALL_READ_SCOPES.iter().find(|known| Some(**known) == scope.as_str()) {
                    Some(known) if !scopes.contains(known) => scopes.push(*known),
                    Some(_) => {}
                    None => problems.push(("scopes".into(), format!("{scope} is not one of {choices}"))),
                }
            }
        }
        _ => problems.push(("scopes".into(), format!("a non-empty array of: {choices}"))),
    }
    scopes
}

/// The `expires_at` member: absent, null, or an RFC 3339 time to come.
pub(super) fn expires_at_member(object: &Map<String, Value>, problems: &mut Vec<(String, String)>) -> Option<String> {
    match object.get("expires_at") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_str().and_then(Timestamp::parse) {
            Some(at) if at.0 > esr_system::clock::unix_now_nanos() => Some(at.format()),
            Some(_) => {
                problems.push(("expires_at".into(), "must be in the future".into()));
                None
            }
            None => {
                problems.push(("expires_at".into(), "not an RFC 3339 timestamp".into()));
                None
            }
        },
    }
}

/// What making a key or an API client asks for: `{"organization_id",
/// "name", "scopes", "expires_at"?}`, each member checked.
pub(super) struct CredentialRequest {
    pub organization_id: Uuid,
    pub name: String,
    pub scopes: Vec<&'static str>,
    pub expires_at: Option<String>,
}

pub(super) fn credential_request(body: &[u8]) -> Result<CredentialRequest, ApiError> {
    let object = json_object(body, &["organization_id", "name", "scopes", "expires_at"])?;
    let mut problems = Vec::new();
    let organization_id = object.get("organization_id").and_then(Value::as_str).and_then(|id| Uuid::try_parse(id).ok());
    if organization_id.is_none() {
        problems.push(("organization_id".into(), "an organization's UUID is required".into()));
    }
    let name = name_member(&object, &mut problems);
    let scopes = scopes_member(&object, &mut problems);
    let expires_at = expires_at_member(&object, &mut problems);
    match organization_id.filter(|_| problems.is_empty()) {
        Some(organization_id) => Ok(CredentialRequest { organization_id, name, scopes, expires_at }),
        None => Err(ApiError::invalid_parameters(problems)),
    }
}

/// `POST /admin/v1/keys` `{"organization_id", "name", "scopes", "expires_at"?}`
/// → `201` with the key, shown this once.
async fn create_key(State(state): State<AdminState>, body: Bytes) -> Result<Response, ApiError> {
    let CredentialRequest { organization_id, name, scopes, expires_at } = credential_request(&body)?;
    let db = state.db.clone();
    let created = state
        .blocking(move || {
            organization_exists(db.as_ref(), organization_id)?;
            keys::create_key(db.as_ref(), organization_id, &name, &scopes, expires_at).map_err(storage_failure)
        })
        .await?;
    tracing::info!(key_id = %created.record.id, %organization_id, "API key created");
    let mut body = key_json(&created.record);
    body["api_key"] = json!(created.api_key);
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    response.extensions_mut().insert(audit_trail::AuditedOrganization(organization_id));
    Ok(response)
}

/// `GET /admin/v1/keys?organizationId=…`: metadata, never the key.
async fn list_keys(State(state): State<AdminState>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let mut organization = None;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        // Any other is refused by `known_parameters`.
        if name == "organizationId" {
            organization = Some(parse_uuid(&value, "organizationId")?);
        }
    }
    let db = state.db.clone();
    let keys = state
        .blocking(move || {
            if let Some(organization) = organization {
                organization_exists(db.as_ref(), organization)?;
            }
            db.api_keys(organization).map_err(storage_failure)
        })
        .await?;
    Ok(Json(json!({"data": keys.iter().map(key_json).collect::<Vec<_>>()})).into_response())
}

/// `DELETE /admin/v1/keys/{keyId}`: refused from the next request on.
async fn revoke_key(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let [key_id] = path_parameters(&uri);
    let key_id = parse_uuid(&key_id, "keyId")?;
    let db = state.db.clone();
    match state.blocking(move || db.revoke_api_key(key_id, &now_text()).map_err(storage_failure)).await? {
        Some(revoked) => {
            tracing::info!(%key_id, "API key revoked");
            let mut response = StatusCode::NO_CONTENT.into_response();
            response.extensions_mut().insert(audit_trail::AuditedOrganization(revoked.organization_id));
            Ok(response)
        }
        None => Err(ApiError::not_found(format!("no API key {key_id}"))),
    }
}

/// `POST /admin/v1/keys/{keyId}/rotate` → `201` with a new key of the
/// same organization, name, scopes and expiry, shown this once; the old
/// key keeps working until `rotated_key_expires_at`: the rotation's
/// overlap from now, or its own expiry when sooner. A revoked or expired
/// key is `409`.
async fn rotate_key(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let [key_id, _] = path_parameters(&uri);
    let key_id = parse_uuid(&key_id, "keyId")?;
    let (db, overlap) = (state.db.clone(), state.key_rotation_overlap);
    let rotation = state
        .blocking(move || keys::rotate_key(db.as_ref(), key_id, overlap).map_err(storage_failure))
        .await?
        .map_err(|refused| match refused {
            keys::NotRotated::Unknown => ApiError::not_found(format!("no API key {key_id}")),
            keys::NotRotated::Revoked(at) => ApiError::new(
                StatusCode::CONFLICT,
                "key-revoked",
                "Key revoked",
                format!("API key {key_id} was revoked at {at}: only an active key is rotated; create a new one"),
            ),
            keys::NotRotated::Expired(at) => ApiError::new(
                StatusCode::CONFLICT,
                "key-expired",
                "Key expired",
                format!("API key {key_id} expired at {at}: only an active key is rotated; create a new one"),
            ),
        })?;
    let (created, replaced) = (&rotation.created, &rotation.replaced);
    tracing::info!(
        key_id = %created.record.id, rotated_key_id = %key_id, organization_id = %created.record.organization_id,
        rotated_key_expires_at = replaced.expires_at.as_deref().unwrap_or_default(), "API key rotated"
    );
    let mut body = key_json(&created.record);
    body["api_key"] = json!(created.api_key);
    body["rotated_key_id"] = json!(key_id);
    body["rotated_key_expires_at"] = json!(replaced.expires_at);
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    response.extensions_mut().insert(audit_trail::AuditedOrganization(created.record.organization_id));
    Ok(response)
}

/// The media types an import body may be sent as.
const NDJSON_TYPES: [&str; 3] = ["application/x-ndjson", "application/jsonl", "application/jsonlines"];

/// `POST /admin/v1/organizations/{organizationId}/import/{collection}`:
/// an NDJSON batch, all or nothing, answered once durable.
async fn import(
    State(state): State<AdminState>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let [organization_id, _, collection] = path_parameters(&uri);
    let mut dry_run = false;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if name == "dryRun" {
            dry_run = parse_flag(&value, "dryRun")?;
        }
    }
    let organization_id = parse_uuid(&organization_id, "organizationId")?;
    let Some(collection) = Collection::named(&collection) else {
        return Err(ApiError::not_found(format!("no collection {collection}; one of {}", Collection::names())));
    };
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or_default();
    if !NDJSON_TYPES.contains(&content_type.split(';').next().unwrap_or_default().trim()) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "send the records as NDJSON (Content-Type: application/x-ndjson), one JSON object per line",
        ));
    }
    let limit = state.import_max_bytes;
    let body = read_body_within(body, &headers, limit, || {
        format!("a batch may hold at most {limit} bytes; split the file into smaller batches")
    })
    .await?;
    let (db, max_lines) = (state.db.clone(), state.import_max_lines);
    let started = std::time::Instant::now();
    let outcome = state
        .blocking(move || {
            organization_exists(db.as_ref(), organization_id)?;
            let outcome = ingest::import(db.as_ref(), organization_id, collection, &body, max_lines, dry_run);
            drop(body);
            db.release_freed_memory();
            Ok(outcome)
        })
        .await?;
    match outcome {
        Ok(summary) => {
            tracing::info!(
                %organization_id, %collection, created = summary.created, updated = summary.updated,
                unchanged = summary.unchanged, dry_run, elapsed_ms = started.elapsed().as_millis(), "batch imported"
            );
            // This host's subscriptions need not wait for the next poll.
            state.webhooks.wake();
            Ok(Json(summary).into_response())
        }
        Err(ImportError::Invalid { lines, problems, invalid_lines }) => {
            let first = lines.first().map_or_else(String::new, |line| {
                let field = if line.field.is_empty() { String::new() } else { format!("{}: ", line.field) };
                format!("; line {}: {field}{}", line.line, line.reason)
            });
            Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-lines",
                "Invalid lines",
                format!("{problems} problem(s) on {invalid_lines} line(s), nothing was written{first}"),
            )
            .with_member("invalid_lines", json!(lines))
            .with_member("invalid_line_count", json!(invalid_lines))
            .with_member("problem_count", json!(problems)))
        }
        Err(ImportError::TooManyLines { lines, max }) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Payload too large",
            format!(
                "a batch may hold at most {max} lines; this one holds {lines}: split it into smaller batches \
                 (esr import --batch-lines)"
            ),
        )),
        Err(ImportError::Store(error)) => Err(storage_failure(error)),
    }
}

/// `DELETE /admin/v1/organizations/{organizationId}/{collection}/{id}`:
/// the record and what depends on it, in one batch (`deletions.rs`) → `204`.
async fn delete_record(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let [organization_id, collection, id] = path_parameters(&uri);
    let organization_id = parse_uuid(&organization_id, "organizationId")?;
    let Some(collection) = Collection::named(&collection) else {
        return Err(ApiError::invalid_parameters(vec![(
            "collection".to_owned(),
            format!("no collection {collection}; one of {}", Collection::names()),
        )]));
    };
    let id = parse_uuid(&id, "id")?;
    let db = state.db.clone();
    let deleted = state
        .blocking(move || {
            organization_exists(db.as_ref(), organization_id)?;
            let outcome = deletions::delete(db.as_ref(), organization_id, collection, id);
            db.release_freed_memory();
            Ok(outcome)
        })
        .await?;
    match deleted {
        Ok(summary) => {
            tracing::info!(
                %organization_id, %collection, %id, deleted = summary.deleted, updated = summary.updated,
                "record deleted"
            );
            state.webhooks.wake();
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        Err(error @ DeleteError::NotFound { .. }) => Err(ApiError::not_found(error.to_string())),
        Err(DeleteError::Store(error)) => Err(storage_failure(error)),
    }
}

/// `POST /admin/v1/organizations/{organizationId}/reports?format=…&endpoint=…&createEndpoint=…&scanner=…&dryRun=…`:
/// a scanner report as the body, converted by the importer component of
/// its format (detected unless given), imported all or nothing.
async fn import_report(
    State(state): State<AdminState>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let [organization_id, _] = path_parameters(&uri);
    let organization_id = parse_uuid(&organization_id, "organizationId")?;
    let mut format = "auto".to_owned();
    let mut options = esr_write::reports::ReportOptions::default();
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "format" => format = value.trim().to_ascii_lowercase(),
            "endpoint" => options.endpoint = Some(value.into_owned()),
            "createEndpoint" => options.create_endpoint = parse_flag(&value, "createEndpoint")?,
            "scanner" => options.scanner = Some(value.into_owned()),
            "dryRun" => options.dry_run = parse_flag(&value, "dryRun")?,
            // Refused by `known_parameters`.
            _ => {}
        }
    }
    let limit = state.import_max_bytes;
    let body = read_body_within(body, &headers, limit, || {
        format!("a report may hold at most {limit} bytes (esr serve --import-max-mib)")
    })
    .await?;
    let (db, plugins) = (state.db.clone(), state.plugins.current());
    let request_id = headers
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .map_or_else(|| Uuid::new_v4().to_string(), str::to_owned)
        .chars()
        .take(64)
        .collect::<String>();
    options.request_id = request_id.clone();
    let max_findings = state.import_max_findings;
    let started = std::time::Instant::now();
    let outcome = state
        .blocking(move || {
            organization_exists(db.as_ref(), organization_id)?;
            let outcome =
                import_report_body(db.as_ref(), &plugins, organization_id, &format, &body, &options, max_findings);
            drop(body);
            db.release_freed_memory();
            outcome
        })
        .await?;
    tracing::info!(
        %organization_id, format = %outcome.format, created = outcome.created, updated = outcome.updated,
        unchanged = outcome.unchanged, resolved = outcome.resolved, reopened = outcome.reopened,
        skipped = outcome.skipped.len(), dry_run = outcome.dry_run, elapsed_ms = started.elapsed().as_millis(),
        "report imported"
    );
    state.webhooks.wake();
    Ok(Json(outcome).into_response())
}

fn unprocessable_report(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-report", "Invalid report", detail)
}

/// Detects (or takes) the format, converts, and imports.
fn import_report_body(
    db: &dyn Store,
    plugins: &esr_runtime::ComponentSet,
    organization_id: Uuid,
    format: &str,
    body: &[u8],
    options: &esr_write::reports::ReportOptions,
    max_findings: usize,
) -> Result<esr_write::reports::ReportOutcome, ApiError> {
    let request_id = options.request_id.as_str();
    use esr_runtime::{Confidence, ConvertError, ImporterError};
    let formats: Vec<String> = plugins.importer_infos().map(|info| info.format.clone()).collect();
    if formats.is_empty() {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-report-format",
            "Unsupported report format",
            "no report importer is loaded (build them with `make plugins`)",
        ));
    }
    // A JSON report (an object or an array) is checked here, whatever its
    // format; XML and CSV reports are bounded by their importers' parsers.
    let json = body.iter().find(|byte| !byte.is_ascii_whitespace()).is_some_and(|first| matches!(first, b'{' | b'['));
    if json && let Some((line, column)) = nested_too_deeply(body) {
        return Err(unprocessable_report(format!(
            "the report nests deeper than {MAX_REPORT_DEPTH} arrays and objects (line {line}, column {column})"
        ))
        .with_member("line", json!(line))
        .with_member("column", json!(column)));
    }
    // Well-formed JSON first, whatever the format: a reader that keeps
    // nothing, so a hostile file costs no memory here.
    if json && let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        let reason = error.to_string();
        let reason = reason.rsplit_once(" at line ").map_or(reason.as_str(), |(reason, _)| reason).to_owned();
        return Err(unprocessable_report(format!(
            "the report is not valid JSON: line {}, column {}: {reason}",
            error.line(),
            error.column()
        ))
        .with_member("line", json!(error.line()))
        .with_member("column", json!(error.column())));
    }
    let format = if format == "auto" {
        let mut best: Option<(Confidence, String)> = None;
        // Every importer that is `certain`: two of them is a file valid in
        // both formats, and which one reads it decides whose findings it
        // is compared with, so the caller must say.
        let mut certain = Vec::new();
        // Importers whose `detect` ran out of time or memory on this report.
        let mut unfinished = Vec::new();
        for (candidate, confidence) in plugins.detect(body, request_id) {
            let confidence = match confidence {
                Ok(confidence) => confidence,
                Err(ConvertError::Timeout | ConvertError::Failed(_)) => {
                    unfinished.push(candidate);
                    continue;
                }
                Err(ConvertError::Report(_)) => continue,
            };
            if confidence == Confidence::Certain {
                certain.push(candidate.clone());
            }
            if confidence != Confidence::No && best.as_ref().is_none_or(|(seen, _)| rank(confidence) > rank(*seen)) {
                best = Some((confidence, candidate));
            }
        }
        if certain.len() > 1 {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "ambiguous-report-format",
                "Ambiguous report format",
                format!(
                    "the report is valid in more than one format ({}): say which with `format` (esr import --format)",
                    certain.join(", ")
                ),
            )
            .with_member("formats_detected", json!(certain)));
        }
        match best {
            Some((_, format)) => format,
            None if !unfinished.is_empty() => {
                return Err(unprocessable_report(format!(
                    "the format could not be told: the {} importer(s) did not finish within their limits (esr serve --importer-memory-mib, --importer-deadline-ms); give the format with `format`",
                    unfinished.join(", ")
                )));
            }
            None => {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported-report-format",
                    "Unsupported report format",
                    format!("the report is in none of the formats tried: {}", formats.join(", ")),
                )
                .with_member("formats_tried", json!(formats)));
            }
        }
    } else if formats.iter().any(|known| known == format) {
        format.to_owned()
    } else {
        return Err(ApiError::invalid_parameters(vec![(
            "format".to_owned(),
            format!("not one of auto, {}", formats.join(", ")),
        )]));
    };
    let converted = match plugins.convert(&format, body, request_id) {
        Some(Ok(bytes)) => bytes,
        Some(Err(ConvertError::Report(ImporterError::Malformed(at)))) => {
            return Err(unprocessable_report(format!(
                "the report is not valid JSON: line {}, column {}: {}",
                at.line, at.column, at.reason
            ))
            .with_member("line", json!(at.line))
            .with_member("column", json!(at.column)));
        }
        Some(Err(ConvertError::Report(ImporterError::Unsupported(reason)))) => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-report-format",
                "Unsupported report format",
                format!("not a report the {format} importer reads: {reason}"),
            )
            .with_member("formats_tried", json!([format])));
        }
        Some(Err(ConvertError::Report(ImporterError::Invalid(reason)))) => {
            return Err(unprocessable_report(format!("the {format} report cannot be read: {reason}")));
        }
        Some(Err(ConvertError::Timeout)) => {
            return Err(unprocessable_report(format!(
                "the {format} importer did not finish within its time limit (esr serve --importer-deadline-ms); nothing was written"
            )));
        }
        Some(Err(ConvertError::Failed(_))) => {
            return Err(unprocessable_report(format!(
                "the {format} importer could not convert the report within its limits (memory: esr serve --importer-memory-mib); nothing was written"
            )));
        }
        None => return Err(ApiError::internal()),
    };
    let report: esr_contract::report::ConvertedReport = serde_json::from_slice(&converted).map_err(|error| {
        tracing::error!(%format, %error, "a report importer returned a converted report that is not readable");
        unprocessable_report(format!("the {format} importer returned a converted report the host cannot read: {error}"))
    })?;
    drop(converted);
    // Each host may become an endpoint: as many as findings at most, or a
    // report of empty hosts would plan endpoints without bound.
    let sizes =
        [(report.entries.len(), "findings", ("makes", "make")), (report.hosts.len(), "hosts", ("names", "name"))];
    if let Some((count, what, (does, may))) = sizes.into_iter().find(|(count, ..)| *count > max_findings) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "report-too-large",
            "Report too large",
            format!(
                "the report {does} {count} {what}; a report may {may} at most {max_findings} (esr serve --import-max-findings): split it, e.g. per host or image; nothing was written"
            ),
        )
        .with_member(what, json!(count))
        .with_member("max_findings", json!(max_findings)));
    }
    if options.scanner.is_none() && report.scanner != format && formats.contains(&report.scanner) {
        // An importer may not compare its reports with another importer's
        // findings; only the uploader can declare that.
        return Err(unprocessable_report(format!(
            "the {format} importer names the scanner {:?}, whose findings another importer's reports hold; declare the scanner with `scanner` if this report is that scanner's",
            report.scanner
        )));
    }
    let version = plugins
        .importer_infos()
        .find(|info| info.format == format)
        .map(|info| info.version.clone())
        .unwrap_or_default();
    let importer = esr_write::reports::Importer { format: &format, version: &version };
    esr_write::reports::import(db, organization_id, importer, report, options).map_err(|error| match error {
        esr_write::reports::ReportError::NoEndpoint(reason) | esr_write::reports::ReportError::Unusable(reason) => {
            unprocessable_report(reason)
        }
        esr_write::reports::ReportError::Invalid(entries) => {
            let first =
                entries.first().map_or_else(String::new, |e| format!("; {}: {}: {}", e.entry, e.field, e.reason));
            unprocessable_report(format!(
                "{} record(s) made from the report are invalid, nothing was written{first}",
                entries.len()
            ))
            .with_member("invalid_entries", json!(entries.iter().take(1000).collect::<Vec<_>>()))
        }
        esr_write::reports::ReportError::Store(error) => storage_failure(error),
    })
}

/// How deep a report's arrays and objects may nest: what the importers'
/// JSON parser (serde_json) accepts.
const MAX_REPORT_DEPTH: usize = 128;

/// Where (1-based line and column) JSON text first nests deeper than
/// [`MAX_REPORT_DEPTH`], if it does; strings are skipped.
fn nested_too_deeply(text: &[u8]) -> Option<(usize, usize)> {
    let (mut depth, mut line, mut column) = (0usize, 1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in text {
        if *byte == b'\n' {
            line += 1;
            column = 0;
        } else {
            column += 1;
        }
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_REPORT_DEPTH {
                    return Some((line, column));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

fn rank(confidence: esr_runtime::Confidence) -> u8 {
    match confidence {
        esr_runtime::Confidence::No => 0,
        esr_runtime::Confidence::Possible => 1,
        esr_runtime::Confidence::Certain => 2,
    }
}

/// `GET /metrics`: the OpenMetrics text format (Prometheus scrapes it).
async fn metrics(State(state): State<AdminState>) -> Result<Response, ApiError> {
    let db = state.db.clone();
    let (store_bytes, subscriptions) = state
        .blocking(move || {
            let subscriptions = esr_webhooks::subscription::all(db.as_ref(), None).map_err(storage_failure)?;
            let by_state = esr_webhooks::SubscriptionState::ALL.map(|wanted| {
                (wanted.name(), subscriptions.iter().filter(|found| found.state == wanted).count() as i64)
            });
            Ok((db.size_on_disk().map_err(storage_failure)?, by_state))
        })
        .await?;
    let body =
        state.metrics.render(store_bytes, &subscriptions, state.serving.audit.as_ref(), state.plugins.idle_slots());
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response())
}

fn describe(info: &ComponentInfo) -> Value {
    json!({
        "group": info.group,
        "version": info.version,
        "file": info.file.display().to_string(),
        "content_hash": format!("sha256:{}", info.sha256),
        "wit_version": info.wit_version,
        "reads": info.reads.names(),
        "loaded_at": info.loaded_at,
    })
}

/// `POST /admin/v1/plugins/reload`: validates the whole directory and
/// swaps it in, or answers why not while the loaded components keep serving.
async fn reload(State(state): State<AdminState>) -> Result<Response, ApiError> {
    let plugins = state.plugins.clone();
    let outcome = tokio::task::spawn_blocking(move || plugins.reload()).await.map_err(|_| ApiError::internal())?;
    match outcome {
        Ok(set) => {
            tracing::info!("plugins reloaded");
            let loaded: Vec<Value> = set.infos().map(describe).collect();
            Ok((StatusCode::OK, Json(json!({"loaded": loaded}))).into_response())
        }
        Err(error) => {
            let reason = format!("{error:#}");
            tracing::error!(error = %reason, "plugin reload refused; the loaded components keep serving");
            Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "reload-refused", "Reload refused", reason))
        }
    }
}

/// The most of an oversized body read and dropped before answering `413`.
/// A client still sending when the server answers and closes sees a broken
/// pipe instead of the answer (as nginx's lingering close knows), so a modest
/// overflow is drained; a larger or slower one is cut off.
const OVERSIZED_DRAIN_BYTES: u64 = 64 << 20;
const OVERSIZED_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// The request body, or `413` when it (or its declared length) exceeds
/// `limit`. After a `413` the connection stays usable when the rest of the
/// body was drained, and closes (saying so) when it was not.
async fn read_body_within(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    detail: impl Fn() -> String,
) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let too_large = || ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large", "Payload too large", detail());
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    let mut body = body;
    if declared.is_none_or(|length| length <= limit as u64) {
        let mut collected = Vec::with_capacity(declared.unwrap_or(0) as usize);
        loop {
            match body.frame().await {
                None => return Ok(Bytes::from(collected)),
                Some(Err(_)) => {
                    return Err(ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "unreadable-body",
                        "Unreadable body",
                        "the request body could not be read to its end",
                    ));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if collected.len() + data.len() > limit {
                            break;
                        }
                        collected.extend_from_slice(&data);
                    }
                }
            }
        }
    }
    // A client waiting for `100 Continue` has sent nothing to drain: reading
    // the body would ask it to send.
    let awaits_continue =
        headers.get(header::EXPECT).is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let within_budget = !awaits_continue && declared.is_none_or(|length| length <= OVERSIZED_DRAIN_BYTES);
    let drained = within_budget
        && tokio::time::timeout(OVERSIZED_DRAIN_TIME, async {
            let mut dropped = 0u64;
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { return false };
                dropped += frame.data_ref().map_or(0, |data| data.len() as u64);
                if dropped > OVERSIZED_DRAIN_BYTES {
                    return false;
                }
            }
            true
        })
        .await
        .unwrap_or(false);
    Err(if drained { too_large() } else { too_large().with_header(header::CONNECTION, "close") })
}

/// `GET /admin/v1/health`: the public health with its details (this
/// host's name, each component's version and hash, each replica's address
/// and lag, the hosts sharing the rate limits).
async fn health(State(state): State<AdminState>) -> Result<Response, ApiError> {
    super::detailed_health(&state.serving).await
}
