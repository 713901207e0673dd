//! The change feed as clients read it: a page of events in commit order,
//! each with its record shaped by its group's component exactly as the
//! item route shows it. `GET /v1/changes` answers such pages and webhook
//! deliveries send them, so the two agree byte for byte.

use std::collections::HashMap;

use serde_json::json;
use uuid::Uuid;

use crate::{CallError, ComponentSet, QueryParam, Request, Tenant};
use esr_store::{ChangeEvent, ChangeOperation, Collection, StoreReader, WriteTime};

/// A page of the feed as read, before it becomes JSON.
pub enum FeedPage {
    Events {
        /// Each event with its record as the component shaped it (`None`
        /// for a deletion).
        events: Vec<(ChangeEvent, Option<Vec<u8>>)>,
        /// The sequence of the last event read (shown or not): where the
        /// next page starts.
        last_read: Option<u64>,
        /// Whether the page was full (more may follow at once).
        full: bool,
        /// The organization's latest sequence when the page was read.
        latest: u64,
    },
    /// Deletions after `after` may have been pruned.
    Gone { pruned_through: u64 },
}

/// The request a component is called with for `path`, answering under
/// `base_url`, with these query parameters.
pub fn component_request(path: &str, base_url: &str, query: &[(String, String)]) -> Request {
    Request {
        query: query.iter().map(|(name, value)| QueryParam { name: name.clone(), value: value.clone() }).collect(),
        path: path.to_owned(),
        base_url: base_url.to_owned(),
    }
}

/// Whether `body` is one JSON value starting with `open` (`{` or `[`): a
/// component is untrusted, and what it returns must not corrupt an answer.
pub fn is_json(body: &[u8], open: u8) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&open)
        && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
}

/// The format every record is shown in unless another is asked for: as
/// the item route shows it.
pub const DEFAULT_FORMAT: &str = "esr";
/// The formats the feed (and webhooks) render records in.
pub const FORMATS: [&str; 2] = [DEFAULT_FORMAT, "ocsf"];

/// The collections whose records a format renders (the others are shown as
/// the item route shows them): OCSF has a class for findings alone.
pub fn rendered_by(format: &str) -> &'static [Collection] {
    match format {
        "ocsf" => &[Collection::VulnerabilityFindings],
        _ => &[],
    }
}

/// Whether the feed can render `format` with the components loaded; why
/// not, in words a client can act on.
pub fn check_format(plugins: &ComponentSet, format: &str) -> Result<(), String> {
    if !FORMATS.contains(&format) {
        return Err(format!("not one of {}", FORMATS.join(", ")));
    }
    for collection in rendered_by(format) {
        let info = plugins.get(collection.name());
        let renders = info
            .and_then(|info| info.export_formats.as_ref())
            .is_some_and(|formats| formats.iter().any(|rendered| rendered == format));
        if !renders {
            let built =
                info.map_or_else(String::new, |info| format!(" (built against esr:plugin@{})", info.wit_version));
            return Err(format!("the component serving {collection} renders no {format}{built}"));
        }
    }
    Ok(())
}

/// Reads a page of at most `limit` events after `after` in one session:
/// where the feed stands, the events, the records they name (through each
/// group's component, in `format` where it renders the collection), and
/// where it stands again (a deletion pruned meanwhile is noticed).
pub fn read_page(
    plugins: &ComponentSet,
    tenant: &Tenant,
    base_url: &str,
    after: u64,
    collections: &[Collection],
    (limit, format): (usize, &str),
    request_id: &str,
) -> Result<FeedPage, CallError> {
    let mut session = tenant.session().map_err(CallError::from_store)?;
    let reader: &mut dyn StoreReader = session.reader();
    let before = reader.change_log().map_err(CallError::from_store)?;
    let mut events = Vec::new();
    // A page of at most `limit` events, read in store pages.
    while events.len() < limit {
        let from = events.last().map_or(after, |event: &ChangeEvent| event.sequence);
        let wanted = (limit - events.len()).min(esr_store::MAX_SCAN);
        let read = reader.changes(from, collections, wanted).map_err(CallError::from_store)?;
        let done = read.len() < wanted;
        events.extend(read);
        if done {
            break;
        }
    }
    let standing = reader.change_log().map_err(CallError::from_store)?;
    if after < standing.pruned_through {
        return Ok(FeedPage::Gone { pruned_through: standing.pruned_through });
    }
    let full = events.len() == limit;
    let last_read = events.last().map(|event| event.sequence);
    // Each collection's records, by one instance of its component.
    let mut records: HashMap<(Collection, Uuid), Vec<u8>> = HashMap::new();
    for collection in collections {
        let ids: Vec<Uuid> = events
            .iter()
            .filter(|event| event.collection == *collection && event.operation != ChangeOperation::Deleted)
            .map(|event| event.id)
            .collect();
        if ids.is_empty() {
            continue;
        }
        let query = match rendered_by(format).contains(collection) {
            true => vec![("format".to_owned(), format.to_owned())],
            false => Vec::new(),
        };
        let request = component_request(&format!("/v1/{collection}/{{id}}"), base_url, &query);
        let (shaped, handed_back) =
            plugins.get_records(collection.name(), tenant, session, &ids, &request, request_id)?;
        session = handed_back;
        for (id, record) in ids.into_iter().zip(shaped) {
            match record {
                Some(record) if is_json(&record, b'{') => {
                    records.insert((*collection, id), record);
                }
                Some(_) => {
                    tracing::error!(plugin = collection.name(), "record is not a JSON object");
                    return Err(CallError::Failed(format!("{collection} shaped a record that is not a JSON object")));
                }
                None => {}
            }
        }
    }
    let events = events
        .into_iter()
        .filter_map(|event| match event.operation {
            ChangeOperation::Deleted => Some((event, None)),
            // A record gone since its event was read (a store without
            // snapshots) or one its component does not show: its later
            // change follows in the feed.
            _ => records.remove(&(event.collection, event.id)).map(|record| (event, Some(record))),
        })
        .collect();
    Ok(FeedPage::Events { events, last_read, full, latest: before.latest })
}

/// Appends one event as the feed shows it: the contract's members in
/// order, `record` last.
pub fn write_event(body: &mut Vec<u8>, event: &ChangeEvent, record: Option<&[u8]>) {
    let head = json!({
        "sequence": event.sequence,
        "collection": event.collection,
        "id": event.id,
        "operation": event.operation.as_str(),
        "changed_at": WriteTime(event.changed_at).format(),
    })
    .to_string();
    body.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    body.extend_from_slice(b",\"record\":");
    body.extend_from_slice(record.unwrap_or(b"null"));
    body.push(b'}');
}
