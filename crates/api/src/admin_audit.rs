//! `GET /admin/v1/organizations/{organizationId}/audit?after=&principal=&since=&limit=`:
//! an organization's audit trail, oldest first, paged like the lists
//! (`next_cursor`, `null` at the end of what is recorded so far), as JSON
//! or, with `Accept: application/x-ndjson`, one entry per line.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use esr_contract::time::Timestamp;
use esr_store::{AuditEntry, MAX_SCAN};
use serde_json::{Value, json};

use super::admin::{AdminState, organization_exists, parse_uuid, storage_failure};
use super::problem::ApiError;

/// Entries per page when `limit` is not given.
const DEFAULT_LIMIT: usize = 100;

fn entry_json(position: u64, entry: &AuditEntry) -> Value {
    let mut value = serde_json::to_value(entry).unwrap_or(Value::Null);
    value["position"] = json!(position.to_string());
    value
}

fn invalid(name: &str, reason: &str) -> ApiError {
    ApiError::invalid_parameters(vec![(name.to_owned(), reason.to_owned())])
}

pub(super) async fn audit(
    State(state): State<AdminState>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let organization = parse_uuid(uri.path().split('/').nth(4).unwrap_or_default(), "organizationId")?;
    let (mut after, mut principal, mut since, mut limit) = (None, None, None, DEFAULT_LIMIT);
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "after" => after = Some(value.parse::<u64>().map_err(|_| invalid("after", "not a position"))?),
            "principal" if value.chars().count() <= 256 => principal = Some(value.into_owned()),
            "principal" => return Err(invalid("principal", "longer than 256 characters")),
            "since" => {
                since = Some(Timestamp::parse(&value).ok_or_else(|| invalid("since", "not an RFC 3339 timestamp"))?)
            }
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|limit| (1..=MAX_SCAN).contains(limit))
                    .ok_or_else(|| invalid("limit", &format!("an integer from 1 to {MAX_SCAN}")))?;
            }
            // Any other is refused by `known_parameters`.
            _ => {}
        }
    }
    let db = state.db.clone();
    let page = state
        .blocking(move || {
            organization_exists(db.as_ref(), organization)?;
            db.audit_page(organization, after, principal.as_deref(), limit).map_err(storage_failure)
        })
        .await?;
    let entries: Vec<Value> = page
        .entries
        .iter()
        .filter(|(_, entry)| since.is_none_or(|since| entry.at_nanos().is_some_and(|at| at >= since.0)))
        .map(|(position, entry)| entry_json(*position, entry))
        .collect();
    let next_cursor = page.next.map(|next| next.to_string());
    let ndjson = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("application/x-ndjson"));
    if ndjson {
        let body: String = entries.iter().map(|entry| format!("{entry}\n")).collect();
        let mut response = body.into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
        if let Some(next) = next_cursor.as_deref().and_then(|next| HeaderValue::from_str(next).ok()) {
            response.headers_mut().insert("x-next-cursor", next);
        }
        return Ok(response);
    }
    Ok(Json(json!({"data": entries, "next_cursor": next_cursor})).into_response())
}
