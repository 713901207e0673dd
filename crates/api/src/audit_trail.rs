//! The audit trail of both listeners: who asked what, and what they were
//! answered. The public API records every request that presented a
//! credential and every refused authentication; the admin listener every
//! request but metrics and health (operators' probes). Entries go to the
//! recorder (`esr-audit`), which never holds a request.

use std::borrow::Cow;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use esr_audit::{AuditPrincipal, Recorder};
use esr_auth::keys::{AuthFailure, Credential, Principal};
use esr_store::AuditEntry;
use uuid::Uuid;

use crate::{AppState, Caller, RequestId};

/// The longest query kept in an entry; a longer one is cut (on a
/// character boundary) and marked.
pub const MAX_QUERY_CHARS: usize = 2048;

/// Who a response answered, noted on it for the entry: the caller the
/// rate limit identified, or the client the token endpoint checked; and
/// whether its credential was refused (recorded only when the request was:
/// a bad key on a route that needs none is not a refused authentication).
#[derive(Debug, Clone)]
pub(crate) struct AuditedPrincipal {
    pub principal: AuditPrincipal,
    pub refused: bool,
}

/// How many records a response holds (a list's page, the feed's events),
/// noted on it for the entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordsAnswered(pub u64);

/// The principal of the caller the rate limit identified, or of its refusal.
pub(crate) fn principal_of_caller(caller: &Caller, state: &AppState) -> AuditedPrincipal {
    match &caller.principal {
        Ok(principal) => AuditedPrincipal {
            principal: of_principal(principal, &state.oauth.authority.settings.issuer),
            refused: false,
        },
        Err(failure) => AuditedPrincipal { principal: of_failure(failure), refused: true },
    }
}

fn principal(kind: &str, id: Option<String>, issuer: Option<String>) -> AuditPrincipal {
    AuditPrincipal { kind: kind.to_owned(), id, issuer }
}

/// The principal of an authenticated caller.
pub(crate) fn of_principal(caller: &Principal, own_issuer: &str) -> AuditPrincipal {
    match &caller.credential {
        Credential::ApiKey => principal("api_key", Some(caller.id.to_string()), None),
        Credential::Client => principal("client", Some(caller.id.to_string()), Some(own_issuer.to_owned())),
        Credential::Token { issuer, subject } => principal("token", Some(subject.clone()), Some(issuer.clone())),
    }
}

/// The principal of a refused authentication: what kind of credential it
/// presented (no credential counts as a key's), never its value.
pub(crate) fn of_failure(failure: &AuthFailure) -> AuditPrincipal {
    match failure {
        AuthFailure::Missing | AuthFailure::Invalid => principal("api_key", None, None),
        AuthFailure::InvalidToken(_) => principal("token", None, None),
    }
}

/// A client authenticating at the token endpoint, by the id it gave.
pub(crate) fn of_client(client_id: Uuid, own_issuer: &str) -> AuditPrincipal {
    principal("client", Some(client_id.to_string()), Some(own_issuer.to_owned()))
}

/// The query as kept: the value of a parameter whose name speaks of a
/// credential (no parameter of the API's does) replaced, at most
/// [`MAX_QUERY_CHARS`] characters.
fn kept_query(query: Option<&str>) -> Option<String> {
    let query = query.filter(|query| !query.is_empty())?;
    let credential = |pair: &str| {
        let name = pair.split('=').next().unwrap_or_default();
        form_urlencoded::parse(name.as_bytes()).next().is_some_and(|(name, _)| {
            let name = name.to_ascii_lowercase();
            CREDENTIAL_WORDS.iter().any(|word| name.contains(word))
        })
    };
    // Most queries name no credential: kept as they are, without a copy.
    let query: Cow<'_, str> = if query.split('&').any(credential) {
        let pairs = query.split('&').map(|pair| {
            if credential(pair) {
                format!("{}={WITHHELD}", pair.split('=').next().unwrap_or_default())
            } else {
                pair.to_owned()
            }
        });
        Cow::Owned(pairs.collect::<Vec<_>>().join("&"))
    } else {
        Cow::Borrowed(query)
    };
    Some(match query.char_indices().nth(MAX_QUERY_CHARS) {
        Some((cut, _)) => format!("{}…", &query[..cut]),
        None => query.into_owned(),
    })
}

/// Words that make a query parameter's value a credential's.
const CREDENTIAL_WORDS: [&str; 5] = ["secret", "token", "key", "password", "assertion"];

/// What the audit trail keeps of a credential sent in a query.
const WITHHELD: &str = "[withheld]";

/// One entry, as both listeners make it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn entry(
    request_id: &str,
    principal: AuditPrincipal,
    organization_id: Option<Uuid>,
    method: &str,
    route: &str,
    query: Option<&str>,
    status: u16,
    records: Option<u64>,
) -> AuditEntry {
    AuditEntry {
        at: esr_audit::now(),
        request_id: request_id.to_owned(),
        principal,
        organization_id,
        method: method.to_owned(),
        route: route.to_owned(),
        query: kept_query(query),
        status,
        records,
    }
}

/// Routes of the admin listener not recorded: scraped and probed often,
/// they change nothing and reveal no organization's data.
const UNRECORDED_ADMIN_ROUTES: [&str; 2] = ["/metrics", "/admin/v1/health"];

/// The organization an admin request acted on: the one its path names,
/// else the one the handler noted (a key or client made for it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuditedOrganization(pub Uuid);

/// Records every admin request (after the admin token was checked or
/// refused) but [`UNRECORDED_ADMIN_ROUTES`].
pub(crate) async fn record_admin(State(recorder): State<Option<Recorder>>, request: Request, next: Next) -> Response {
    let route =
        request.extensions().get::<MatchedPath>().map_or("unmatched".to_owned(), |path| path.as_str().to_owned());
    let Some(recorder) = recorder.filter(|_| !UNRECORDED_ADMIN_ROUTES.contains(&route.as_str())) else {
        return next.run(request).await;
    };
    let method = request.method().to_string();
    let query = request.uri().query().map(str::to_owned);
    let request_id = request.extensions().get::<RequestId>().map(|id| id.0.clone()).unwrap_or_default();
    let from_path = request
        .uri()
        .path()
        .strip_prefix("/admin/v1/organizations/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|id| Uuid::try_parse(id).ok());
    let response = next.run(request).await;
    let organization =
        from_path.or_else(|| response.extensions().get::<AuditedOrganization>().map(|organization| organization.0));
    recorder.record(entry(
        &request_id,
        principal("admin", None, None),
        organization,
        &method,
        &route,
        query.as_deref(),
        response.status().as_u16(),
        None,
    ));
    response
}
