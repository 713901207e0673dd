//! The admin routes of API clients (`/admin/v1/clients[/{clientId}[/rotate-secret]]`)
//! and of the signing keys (`/admin/v1/signing-keys[/rotate]`). A client's
//! secret is answered once, when it is made (created or rotated), and
//! never logged.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use esr_oauth::clients::{self, Client};
use esr_oauth::signing_keys;
use serde_json::{Value, json};

use super::admin::{
    AdminState, CredentialRequest, credential_request, organization_exists, parse_uuid, storage_failure,
};
use super::path_parameters;
use super::problem::ApiError;

fn client_json(client: &Client) -> Value {
    json!({
        "client_id": client.id,
        "organization_id": client.organization_id,
        "name": client.name,
        "scopes": client.scopes,
        "state": client.state(esr_system::clock::unix_now_nanos()),
        "created_at": client.created_at,
        "expires_at": client.expires_at,
        "revoked_at": client.revoked_at,
        "secret_rotated_at": client.secret_rotated_at,
    })
}

fn with_secret(made: &clients::WithSecret) -> Value {
    let mut body = client_json(&made.client);
    body["client_secret"] = json!(made.secret);
    body
}

/// `POST /admin/v1/clients` `{"organization_id", "name", "scopes", "expires_at"?}`
/// → `201` with the secret, shown this once.
pub(super) async fn create_client(State(state): State<AdminState>, body: Bytes) -> Result<Response, ApiError> {
    let CredentialRequest { organization_id, name, scopes, expires_at } = credential_request(&body)?;
    let db = state.db.clone();
    let made = state
        .blocking(move || {
            organization_exists(db.as_ref(), organization_id)?;
            clients::create(db.as_ref(), organization_id, &name, &scopes, expires_at).map_err(storage_failure)
        })
        .await?;
    tracing::info!(client_id = %made.client.id, %organization_id, "API client created");
    let mut response = (StatusCode::CREATED, Json(with_secret(&made))).into_response();
    response.extensions_mut().insert(super::audit_trail::AuditedOrganization(organization_id));
    Ok(response)
}

/// `GET /admin/v1/clients?organizationId=…`: never a secret.
pub(super) async fn list_clients(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let mut organization = None;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if name == "organizationId" {
            organization = Some(parse_uuid(&value, "organizationId")?);
        }
    }
    let db = state.db.clone();
    let listed = state
        .blocking(move || {
            if let Some(organization) = organization {
                organization_exists(db.as_ref(), organization)?;
            }
            clients::list(db.as_ref(), organization).map_err(storage_failure)
        })
        .await?;
    Ok(Json(json!({"data": listed.iter().map(client_json).collect::<Vec<_>>()})).into_response())
}

fn client_path(uri: &Uri) -> Result<uuid::Uuid, ApiError> {
    let segment = uri.path().split('/').nth(4).unwrap_or_default().to_owned();
    parse_uuid(&segment, "clientId")
}

fn no_client(id: uuid::Uuid) -> ApiError {
    ApiError::not_found(format!("no API client {id}"))
}

/// `GET /admin/v1/clients/{clientId}`.
pub(super) async fn show_client(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let id = client_path(&uri)?;
    let db = state.db.clone();
    let client = state.blocking(move || clients::get(db.as_ref(), id).map_err(storage_failure)).await?;
    Ok(Json(client_json(&client.ok_or_else(|| no_client(id))?)).into_response())
}

/// `DELETE /admin/v1/clients/{clientId}`: revokes it; its tokens are
/// refused on every host within [`esr_oauth::tokens::CLIENT_RECHECK`].
pub(super) async fn revoke_client(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let [id] = path_parameters(&uri);
    let id = parse_uuid(&id, "clientId")?;
    let db = state.db.clone();
    let client = state.blocking(move || clients::revoke(db.as_ref(), id).map_err(storage_failure)).await?;
    let client = client.ok_or_else(|| no_client(id))?;
    tracing::info!(client_id = %id, "API client revoked");
    let mut response = Json(client_json(&client)).into_response();
    response.extensions_mut().insert(super::audit_trail::AuditedOrganization(client.organization_id));
    Ok(response)
}

/// `POST /admin/v1/clients/{clientId}/rotate-secret`: a new secret, shown
/// this once; the old one stops at once.
pub(super) async fn rotate_client_secret(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let id = client_path(&uri)?;
    let db = state.db.clone();
    let made = state.blocking(move || clients::rotate_secret(db.as_ref(), id).map_err(storage_failure)).await?;
    let made = made.ok_or_else(|| ApiError::not_found(format!("no active API client {id}")))?;
    tracing::info!(client_id = %id, "API client secret rotated");
    let mut response = Json(with_secret(&made)).into_response();
    response.extensions_mut().insert(super::audit_trail::AuditedOrganization(made.client.organization_id));
    Ok(response)
}

fn signing_key_json(key: &signing_keys::StoredKey) -> Value {
    json!({
        "kid": key.kid,
        "algorithm": "EdDSA",
        "created_at": key.created_at,
        "retired_at": key.retired_at,
        "published_until": key.published_until,
    })
}

/// `GET /admin/v1/signing-keys`: ids and dates, never a private key.
pub(super) async fn list_signing_keys(State(state): State<AdminState>) -> Result<Response, ApiError> {
    let db = state.db.clone();
    let keys = state.blocking(move || signing_keys::list(db.as_ref()).map_err(storage_failure)).await?;
    Ok(Json(json!({"data": keys.iter().map(signing_key_json).collect::<Vec<_>>()})).into_response())
}

/// `POST /admin/v1/signing-keys/rotate`: a new key signs from now on (on
/// every host within [`signing_keys::REREAD_EVERY`]); the others stay
/// published until the tokens they signed have expired.
pub(super) async fn rotate_signing_keys(State(state): State<AdminState>) -> Result<Response, ApiError> {
    let (db, authority) = (state.db.clone(), state.serving.oauth.authority.clone());
    let kid = state
        .blocking(move || {
            let kid = signing_keys::rotate(db.as_ref(), authority.settings.ttl).map_err(storage_failure)?;
            authority.reread_keys().map_err(storage_failure)?;
            Ok(kid)
        })
        .await?;
    tracing::info!(%kid, "signing key rotated");
    Ok(Json(json!({"kid": kid})).into_response())
}
