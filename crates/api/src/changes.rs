//! What integrations follow: the change feed (`GET /v1/changes`) and each
//! finding's and remediation target's status history
//! (`GET /v1/<collection>/{id}/history`).
//!
//! The feed's events come from the store (one per record: its latest
//! change, in commit order); each record in it is shaped by its group's
//! component exactly as the item route shows it, read in the same session
//! as the events, so an event and its record agree. History is host data
//! (what changed a status, and why) and is answered without a component.

use std::sync::atomic::Ordering;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use super::{
    AppState, Caller, GROUPS, RequestId, allow_read_only, authenticated, call_component, conditional, parse_id,
    path_parameters, query_pairs, read_group, tenant,
};
use crate::audit_trail::RecordsAnswered;
use crate::cursor::CursorBinding;
use crate::problem::ApiError;
use esr_runtime::feed::{self, FeedPage};
use esr_store::Collection;

/// Events per page unless `limit` says otherwise, and at most.
pub const DEFAULT_CHANGES_LIMIT: usize = 100;
pub const MAX_CHANGES_LIMIT: usize = 1000;

/// The longest `collection` value of the feed.
pub const MAX_COLLECTION_PARAMETER_CHARS: usize = 128;

/// History entries answered at most: the latest ones, oldest first.
pub const MAX_HISTORY_ENTRIES: usize = 10_000;

/// The parameters `GET /v1/changes` takes.
const CHANGES_PARAMETERS: [&str; 5] = ["limit", "after", "cursor", "collection", "format"];

/// Why a cursor is refused (clients and tests match it).
pub const CURSOR_NOT_ISSUED: &str = "not a cursor issued for this feed and these collections";

/// The cursor binding's name for the feed (no collection is called so).
pub(crate) const FEED: &str = "changes";

/// `GET /v1/changes`.
pub(super) async fn changes(
    State(state): State<AppState>,
    method: Method,
    RawQuery(raw): RawQuery,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    allow_read_only(&method)?;
    let query = query_pairs(raw.as_deref());
    let principal = authenticated(&caller)?;
    let parameters = FeedParameters::parse(&query)?;
    // The collections asked for (every one when none is named) that the
    // key may read; naming one it may not read is refused.
    let mut collections: Vec<Collection> = Vec::new();
    for group in &GROUPS {
        let named = parameters.collections.as_ref().is_none_or(|named| named.contains(&group.collection));
        if !named {
            continue;
        }
        if principal.has_scope(group.scope) {
            collections.push(group.collection);
        } else if parameters.collections.is_some() {
            return Err(ApiError::forbidden(group.scope, principal.is_token()));
        }
    }
    if collections.is_empty() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Forbidden",
            "this API key can read none of the collections the change feed follows",
        ));
    }
    // A cursor is bound to the collections followed; `after` only starts a walk.
    let binding_query: Vec<(String, String)> = query.iter().filter(|(name, _)| name == "collection").cloned().collect();
    let binding = CursorBinding { organization_id: principal.organization_id, collection: FEED, query: &binding_query };
    // The cursor is checked first: one this server did not issue is
    // refused as such, whatever else the request says.
    let opened = match &parameters.cursor {
        Some(token) => {
            let (inner, position) = binding
                .open_at(&state.cursor_key, token)
                .ok_or_else(|| ApiError::invalid_parameters(vec![("cursor".into(), CURSOR_NOT_ISSUED.into())]))?;
            Some((inner.parse::<u64>().map_err(|_| ApiError::internal())?, position))
        }
        None => None,
    };
    let after = match (opened, parameters.after) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_parameters(vec![(
                "after".into(),
                "give either after or cursor, not both".into(),
            )]));
        }
        (Some(opened), None) => Some(opened),
        (None, after) => after.map(|after| (after, 0)),
    };
    let tenant = tenant(&state, &caller)?;
    let reads = tenant.reads.clone();
    if let Some((_, position)) = after {
        reads.at_least.fetch_max(position, Ordering::Relaxed);
    }
    let after = after.map_or(0, |(after, _)| after);
    let (limit, format) = (parameters.limit, parameters.format);
    feed::check_format(&state.plugins.current(), &format)
        .map_err(|reason| ApiError::invalid_parameters(vec![("format".into(), reason)]))?;
    let base_url = state.public_url.clone();
    let page = call_component(&state, FEED, &caller, principal.organization_id, &reads, move |plugins| {
        feed::read_page(plugins, &tenant, &base_url, after, &collections, (limit, &format), &request_id)
    })
    .await?;
    let (events, last_read, full, latest) = match page {
        FeedPage::Gone { pruned_through } => {
            return Err(ApiError::new(
                StatusCode::GONE,
                "changes-gone",
                "Changes no longer kept",
                format!(
                    "deletions after sequence {after} are no longer kept (kept through sequence {pruned_through} \
                     no more); start again: list the collections, then follow /v1/changes from the list's `sequence`"
                ),
            )
            .with_member("pruned_through", json!(pruned_through)));
        }
        FeedPage::Events { events, last_read, full, latest } => (events, last_read, full, latest),
    };
    let next_cursor = match last_read.filter(|_| full) {
        Some(last) => {
            let position = reads.position.load(Ordering::Relaxed);
            Some(binding.seal_at(&state.cursor_key, &last.to_string(), position).ok_or_else(ApiError::internal)?)
        }
        None => None,
    };
    let mut body = Vec::with_capacity(256 * events.len() + 64);
    body.extend_from_slice(b"{\"data\":[");
    for (n, (event, record)) in events.iter().enumerate() {
        if n > 0 {
            body.push(b',');
        }
        feed::write_event(&mut body, event, record.as_deref());
    }
    let sequence = latest.max(last_read.unwrap_or(0));
    body.extend_from_slice(format!("],\"next_cursor\":{},\"sequence\":{sequence}}}", json!(next_cursor)).as_bytes());
    let mut response = conditional(&headers, body, "application/json");
    response.extensions_mut().insert(RecordsAnswered(events.len() as u64));
    Ok(response)
}

/// The feed's parameters, checked.
struct FeedParameters {
    limit: usize,
    after: Option<u64>,
    cursor: Option<String>,
    collections: Option<Vec<Collection>>,
    /// How records are rendered (`esr` or `ocsf`), checked against the
    /// components loaded when the page is read.
    format: String,
}

impl FeedParameters {
    fn parse(query: &[(String, String)]) -> Result<FeedParameters, ApiError> {
        let mut problems: Vec<(String, String)> = Vec::new();
        let mut parameters = FeedParameters {
            limit: DEFAULT_CHANGES_LIMIT,
            after: None,
            cursor: None,
            collections: None,
            format: feed::DEFAULT_FORMAT.to_owned(),
        };
        let mut seen: Vec<&str> = Vec::new();
        for (name, value) in query {
            if !CHANGES_PARAMETERS.contains(&name.as_str()) {
                problems.push((
                    name.clone(),
                    format!("unknown parameter; this operation takes {}", CHANGES_PARAMETERS.join(", ")),
                ));
                continue;
            }
            if seen.contains(&name.as_str()) {
                problems.push((name.clone(), "given more than once".into()));
                continue;
            }
            seen.push(name);
            // The bounds the OpenAPI document states.
            let longest = match name.as_str() {
                "cursor" => esr_contract::limits::MAX_CURSOR_CHARS,
                "collection" => MAX_COLLECTION_PARAMETER_CHARS,
                _ => usize::MAX,
            };
            if value.chars().count() > longest {
                problems.push((name.clone(), format!("longer than {longest} characters")));
                continue;
            }
            match name.as_str() {
                "limit" => match value.parse::<usize>() {
                    Ok(limit) if (1..=MAX_CHANGES_LIMIT).contains(&limit) => parameters.limit = limit,
                    _ => problems.push((name.clone(), format!("must be an integer from 1 to {MAX_CHANGES_LIMIT}"))),
                },
                "after" => match value.parse::<u64>() {
                    Ok(after) if i64::try_from(after).is_ok() => parameters.after = Some(after),
                    _ => problems.push((name.clone(), "must be a sequence: an integer from 0".into())),
                },
                "cursor" => parameters.cursor = Some(value.clone()),
                "format" => parameters.format = value.clone(),
                _ => {
                    let named: Result<Vec<Collection>, &str> =
                        value.split(',').map(|name| Collection::named(name).ok_or(name)).collect();
                    match named {
                        Err(unknown) => problems.push((
                            "collection".into(),
                            format!(
                                "no collection {unknown:?}; give one or more of {}, comma-separated",
                                Collection::names()
                            ),
                        )),
                        Ok(named) => parameters.collections = Some(named),
                    }
                }
            }
        }
        if problems.is_empty() { Ok(parameters) } else { Err(ApiError::invalid_parameters(problems)) }
    }
}

/// `GET /v1/<collection>/{id}/history`: a finding's or remediation
/// target's status changes, oldest first (the latest
/// [`MAX_HISTORY_ENTRIES`]).
pub(super) async fn history(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let [collection, id, _] = path_parameters(&uri);
    let (group, principal) = read_group(&method, &collection, &caller)?;
    if !group.history {
        return Err(ApiError::not_found("no such path in this API"));
    }
    let id = parse_id(&id).ok_or_else(|| ApiError::invalid_id(group.resource))?;
    let tenant = tenant(&state, &caller)?;
    let organization = principal.organization_id;
    let read = state
        .store_calls
        .run(caller.deadline, move || -> Result<Option<Vec<Vec<u8>>>, esr_store::StoreError> {
            let mut reader = tenant.store.reader(organization)?;
            if reader.get(group.collection, id)?.is_none() {
                return Ok(None);
            }
            reader.history(group.collection, id).map(Some)
        })
        .await?
        .map_err(|error| ApiError::store_failure(&error, "reading a history"))?;
    let mut entries = read.ok_or_else(|| ApiError::not_found(format!("no {} with id {id}", group.resource)))?;
    let beyond = entries.len().saturating_sub(MAX_HISTORY_ENTRIES);
    entries.drain(..beyond);
    let mut body = Vec::with_capacity(entries.iter().map(Vec::len).sum::<usize>() + 16);
    body.extend_from_slice(b"{\"data\":[");
    for (n, entry) in entries.iter().enumerate() {
        if serde_json::from_slice::<Value>(entry).map_or(true, |entry| !entry.is_object()) {
            tracing::error!(collection = group.collection.name(), %id, "a stored history entry is not a JSON object");
            return Err(ApiError::internal());
        }
        if n > 0 {
            body.push(b',');
        }
        body.extend_from_slice(entry);
    }
    body.extend_from_slice(b"]}");
    let mut response = conditional(&headers, body, "application/json");
    response.extensions_mut().insert(RecordsAnswered(entries.len() as u64));
    Ok(response)
}
