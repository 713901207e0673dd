//! OAuth 2.0 on the public listener: the client-credentials grant at
//! `POST /oauth2/token` (RFC 6749 §4.4), the server's metadata (RFC 8414)
//! and key set, and the bearer access tokens requests present.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use esr_auth::keys::{ALL_READ_SCOPES, AuthFailure, Credential, Principal};
use esr_oauth::{Authority, Refusal, Verified, clients};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::problem::ApiError;
use crate::{AppState, Caller};

/// The largest token request read.
const MAX_TOKEN_REQUEST_BYTES: usize = 8 * 1024;

/// The public listener's OAuth state: the authority that issues and
/// checks tokens, and the permits of secret verification (Argon2 takes
/// 19 MiB and tens of milliseconds each, so only this many run at once).
pub struct OAuth {
    pub authority: Arc<Authority>,
    pub hashing: tokio::sync::Semaphore,
}

impl OAuth {
    pub fn new(authority: Arc<Authority>) -> OAuth {
        OAuth { authority, hashing: tokio::sync::Semaphore::new(2) }
    }
}

/// An RFC 6749 §5.2 error.
fn token_error(status: StatusCode, error: &'static str, description: impl Into<String>) -> Response {
    let mut response = (status, Json(json!({"error": error, "error_description": description.into()}))).into_response();
    no_store(response.headers_mut());
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"esr\""));
    }
    response
}

fn no_store(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

fn invalid_request(description: impl Into<String>) -> Response {
    token_error(StatusCode::BAD_REQUEST, "invalid_request", description)
}

fn invalid_client() -> Response {
    token_error(StatusCode::UNAUTHORIZED, "invalid_client", "client authentication failed")
}

/// An `Authorization` header that is not HTTP Basic credentials.
struct NotBasic;

/// The client id and secret of HTTP Basic (RFC 6749 §2.3.1: each
/// form-urlencoded before base64).
fn basic_credentials(headers: &HeaderMap) -> Result<Option<(String, String)>, NotBasic> {
    let Some(value) = headers.get(header::AUTHORIZATION) else { return Ok(None) };
    let value = value.to_str().map_err(|_| NotBasic)?;
    let (scheme, encoded) = value.trim().split_once(' ').ok_or(NotBasic)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(NotBasic);
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).map_err(|_| NotBasic)?;
    let decoded = String::from_utf8(decoded).map_err(|_| NotBasic)?;
    let (id, secret) = decoded.split_once(':').ok_or(NotBasic)?;
    let unescape =
        |text: &str| form_urlencoded::parse(format!("x={text}").as_bytes()).next().map(|(_, value)| value.into_owned());
    Ok(Some((unescape(id).unwrap_or_default(), unescape(secret).unwrap_or_default())))
}

/// `POST /oauth2/token`: the client-credentials grant.
pub(crate) async fn token(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    if parts.method != Method::POST {
        return ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", "Method not allowed", "use POST")
            .with_header(header::ALLOW, "POST")
            .into_response();
    }
    let form_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"));
    if !form_type {
        return invalid_request("the body must be application/x-www-form-urlencoded");
    }
    // RFC 6749 §2.3.1: credentials never in the URI, where logs and the
    // audit trail keep it. The endpoint's own URI has no query.
    if parts.uri.query().is_some() {
        return invalid_request("the token endpoint takes its parameters in the body, not the URL");
    }
    // Read no more than the limit, whatever the request's length says.
    let Ok(body) = axum::body::to_bytes(body, MAX_TOKEN_REQUEST_BYTES).await else {
        return invalid_request(format!("the body is larger than {MAX_TOKEN_REQUEST_BYTES} bytes, or was cut off"));
    };
    let mut form: HashMap<String, String> = HashMap::new();
    for (name, value) in form_urlencoded::parse(&body) {
        // RFC 6749 §3.2: parameters must not be repeated.
        if form.insert(name.clone().into_owned(), value.into_owned()).is_some() {
            return invalid_request(format!("{name} is given more than once"));
        }
    }
    match form.get("grant_type").map(String::as_str) {
        None => return invalid_request("grant_type is required"),
        Some("client_credentials") => {}
        Some(_) => {
            return token_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "only the client_credentials grant is supported",
            );
        }
    }
    let Ok(basic) = basic_credentials(headers) else { return invalid_client() };
    let posted = match (form.get("client_id"), form.get("client_secret")) {
        (Some(id), Some(secret)) => Some((id.clone(), secret.clone())),
        (None, None) => None,
        _ => return invalid_request("client_id and client_secret go together"),
    };
    let (client_id, secret) = match (basic, posted) {
        (Some(_), Some(_)) => return invalid_request("use one client authentication method, not two"),
        (Some(credentials), None) | (None, Some(credentials)) => credentials,
        (None, None) => return invalid_client(),
    };
    let Ok(client_id) = Uuid::try_parse(&client_id) else { return invalid_client() };
    let audited = crate::audit_trail::AuditedPrincipal {
        principal: crate::audit_trail::of_client(client_id, &state.oauth.authority.settings.issuer),
        refused: false,
    };
    let address = crate::limits::address_key(crate::connection_address(&parts.extensions));
    let mut response = issue_for(&state, (client_id, address), secret, &form).await;
    response.extensions_mut().insert(audited);
    response
}

/// The token endpoint's answer for a client that gave these credentials
/// from this address. A client's attempts are limited per address, so
/// that guesses from one address cannot lock the client out elsewhere.
async fn issue_for(
    state: &AppState,
    (client_id, address): (Uuid, std::net::IpAddr),
    secret: String,
    form: &HashMap<String, String>,
) -> Response {
    let decision = state.rate_limits.token_per_client.check((client_id, address));
    if !decision.allowed {
        let mut response = crate::too_many_requests(state, &decision);
        decision.write_headers(response.headers_mut());
        return response;
    }
    let deadline = tokio::time::Instant::now() + state.request_deadline;
    let Ok(Ok(_permit)) = tokio::time::timeout_at(deadline, state.oauth.hashing.acquire()).await else {
        return ApiError::unavailable("too many token requests at once; retry shortly").into_response();
    };
    let db = state.db.clone();
    let checked = state
        .admission_calls
        .run_short(deadline, move || -> Result<Option<(clients::Client, bool)>, esr_store::StoreError> {
            let client = clients::get(db.as_ref(), client_id)?;
            let matches = clients::secret_matches(client.as_ref(), &secret);
            Ok(client.map(|client| (client, matches)))
        })
        .await;
    let (client, matches) = match checked {
        Ok(Ok(Some(checked))) => checked,
        Ok(Ok(None)) => return invalid_client(),
        Ok(Err(error)) => return ApiError::store_failure(&error, "checking the client").into_response(),
        Err(problem) => return problem.into_response(),
    };
    // Attempts on a client, right or wrong, are its organization's to audit.
    let mut response = issue_to(state, &client, matches, form);
    response.extensions_mut().insert(crate::ServedOrganization(client.organization_id));
    response
}

/// The token endpoint's answer once the client is read.
fn issue_to(state: &AppState, client: &clients::Client, matches: bool, form: &HashMap<String, String>) -> Response {
    if !matches || !client.is_usable(esr_system::clock::unix_now_nanos()) {
        return invalid_client();
    }
    let scopes: Vec<String> = match form.get("scope") {
        None => client.scopes.clone(),
        Some(requested) => {
            let mut scopes: Vec<String> = Vec::new();
            for scope in requested.split(' ').filter(|scope| !scope.is_empty()) {
                if !client.scopes.iter().any(|held| held == scope) {
                    let why = if ALL_READ_SCOPES.contains(&scope) {
                        format!("the client does not hold {scope}")
                    } else {
                        format!("{scope} is not a scope of this API")
                    };
                    return token_error(StatusCode::BAD_REQUEST, "invalid_scope", why);
                }
                if !scopes.iter().any(|seen| seen == scope) {
                    scopes.push(scope.to_owned());
                }
            }
            if scopes.is_empty() {
                return token_error(StatusCode::BAD_REQUEST, "invalid_scope", "scope names no scope");
            }
            scopes
        }
    };
    match state.oauth.authority.issue(client, &scopes) {
        Ok((access_token, expires_in)) => {
            tracing::info!(client_id = %client.id, organization_id = %client.organization_id, scope = %scopes.join(" "), "access token issued");
            let mut response = Json(json!({
                "access_token": access_token,
                "token_type": "Bearer",
                "expires_in": expires_in,
                "scope": scopes.join(" "),
            }))
            .into_response();
            no_store(response.headers_mut());
            response
        }
        Err(refusal) => {
            tracing::error!(?refusal, "no token could be signed");
            ApiError::unavailable("no token could be signed; retry shortly").into_response()
        }
    }
}

/// `GET /.well-known/oauth-authorization-server` (RFC 8414).
pub(crate) async fn metadata(State(state): State<AppState>, method: Method) -> Result<Response, ApiError> {
    crate::allow_read_only(&method)?;
    let issuer = &state.oauth.authority.settings.issuer;
    Ok(Json(json!({
        "issuer": issuer,
        "token_endpoint": format!("{}{}", state.public_url, crate::routes::TOKEN),
        "jwks_uri": format!("{}{}", state.public_url, crate::routes::JWKS),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": ALL_READ_SCOPES,
        "response_types_supported": [],
        "access_token_signing_alg_values_supported": ["EdDSA"],
    }))
    .into_response())
}

/// `GET /.well-known/jwks.json`: the published signing keys.
pub(crate) async fn jwks(State(state): State<AppState>, method: Method) -> Result<Response, ApiError> {
    crate::allow_read_only(&method)?;
    let keys: Vec<Value> = state.oauth.authority.keys().published.iter().map(|key| key.jwk()).collect();
    let mut response = Json(json!({ "keys": keys })).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=60"));
    Ok(response)
}

/// Checks a token without the database; a key id the host does not know
/// rereads the keys (this server's, or the provider's), once, rate-limited.
pub(crate) async fn verify(state: &AppState, token: &str) -> Result<Verified, String> {
    let authority = &state.oauth.authority;
    match authority.verify(token) {
        Ok(verified) => return Ok(verified),
        Err(Refusal::Invalid(why)) => return Err(why),
        Err(Refusal::UnknownKey { provider: None }) if authority.may_reread_keys() => {
            let reread = authority.clone();
            let deadline = tokio::time::Instant::now() + state.request_deadline;
            if let Ok(Err(error)) = state.admission_calls.run_short(deadline, move || reread.reread_keys()).await {
                tracing::warn!(%error, "the signing keys could not be reread");
            }
        }
        Err(Refusal::UnknownKey { provider: Some(index) }) => {
            if let Some(provider) = authority.providers.get(index) {
                provider.refetch().await;
            }
        }
        Err(Refusal::UnknownKey { .. }) => {}
    }
    authority.verify(token).map_err(|refusal| match refusal {
        Refusal::Invalid(why) => why,
        Refusal::UnknownKey { .. } => "signed with a key its issuer does not publish".to_owned(),
    })
}

/// The id a verified token's requests are charged to.
pub(crate) fn principal_id(verified: &Verified) -> Uuid {
    verified.client_id.unwrap_or_else(|| {
        let digest = Sha256::digest(format!("{}\n{}", verified.issuer, verified.subject));
        let mut bytes = [0; 16];
        bytes.copy_from_slice(&digest[..16]);
        uuid::Builder::from_custom_bytes(bytes).into_uuid()
    })
}

/// The caller of a verified token: its client (this server's tokens) is
/// still usable and of the token's organization, and the organization
/// exists. A client's state is at most [`esr_oauth::tokens::CLIENT_RECHECK`]
/// old.
pub(crate) async fn identify(
    state: &AppState,
    verified: Verified,
    deadline: tokio::time::Instant,
) -> Result<Caller, ApiError> {
    let (authority, db) = (state.oauth.authority.clone(), state.db.clone());
    let id = principal_id(&verified);
    let identified = state
        .admission_calls
        .run_short(deadline, move || -> Result<Caller, esr_store::StoreError> {
            let refused = |why: &str| Caller::refused(AuthFailure::InvalidToken(why.to_owned()), deadline);
            let credential = match verified.client_id {
                Some(client_id) => {
                    let client = authority.client(client_id)?;
                    let usable = client.is_some_and(|client| {
                        client.is_usable(esr_system::clock::unix_now_nanos())
                            && client.organization_id == verified.organization_id
                    });
                    if !usable {
                        return Ok(refused("its client is revoked, expired or gone"));
                    }
                    Credential::Client
                }
                None => Credential::Token { issuer: verified.issuer.clone(), subject: verified.subject.clone() },
            };
            let Some(organization) = db.organization(verified.organization_id)? else {
                return Ok(refused("it names an organization this server does not hold"));
            };
            let principal =
                Principal { id, credential, organization_id: verified.organization_id, scopes: verified.scopes };
            Ok(Caller {
                principal: Ok(principal),
                organization: Some(Arc::new(organization)),
                deadline,
                read_ahead: None,
                confirmation: None,
            })
        })
        .await?;
    identified.map_err(|error| ApiError::store_failure(&error, "authenticating"))
}
