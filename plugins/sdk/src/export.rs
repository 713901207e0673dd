//! Exports: every record of a collection that matches the list's filters,
//! in id order, one chunk per call. The host streams the chunks as NDJSON
//! and resumes after the last id a client received, so a chunk is a plain
//! walk of the store from an id: no cursor, no total, no work budget.
//!
//! Records pass through as stored, as `get` shows them; a group that
//! renders other formats ([`CollectionGroup::FORMATS`], e.g. `ocsf`)
//! renders each record with [`CollectionGroup::render`], reading related
//! records (a finding's endpoint) through [`Related`] once per chunk.

use std::collections::HashMap;

use serde_json::Value;

use crate::group::CollectionGroup;
use crate::list::{LIST_PARAMETERS, Residual};
use crate::query::{Param, Query, not_one_of};
use crate::stored::StoredRecord;
use crate::{PluginError, RecordWalk, Request, Store};

/// The format every group answers: records as `get` shows them.
pub const DEFAULT_FORMAT: &str = "esr";

/// The list's parameters an export does not take: it walks in id order
/// from `after`, which the host passes apart.
const PAGING_PARAMETERS: [&str; 5] = ["limit", "offset", "cursor", "sort", "id"];

/// One chunk of an export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportChunk {
    /// The matching records, each followed by `\n`.
    pub lines: Vec<u8>,
    pub count: u32,
    /// The last id read; `None` when the collection ended in this chunk.
    pub last_read: Option<String>,
}

/// The export's own parameters: the list's, without its paging and sort.
pub fn export_parameters(filters: &[Param]) -> Vec<Param> {
    LIST_PARAMETERS.iter().chain(filters).filter(|param| !PAGING_PARAMETERS.contains(&param.name)).copied().collect()
}

/// The format a request asks for among `formats`: `None` for
/// [`DEFAULT_FORMAT`].
pub fn requested_format(query: &mut Query<'_>, formats: &'static [&'static str]) -> Option<&'static str> {
    let raw = query.raw("format")?;
    match formats.iter().find(|format| **format == raw) {
        Some(&DEFAULT_FORMAT) => None,
        Some(format) => Some(format),
        None => {
            query.reject("format", not_one_of(formats));
            None
        }
    }
}

/// Records of other collections a rendering reads (a finding's endpoint),
/// each read once per call.
pub struct Related<'s> {
    store: &'s dyn Store,
    read: HashMap<(String, String), Option<Value>>,
}

impl<'s> Related<'s> {
    pub fn new(store: &'s dyn Store) -> Related<'s> {
        Related { store, read: HashMap::new() }
    }

    /// The record `id` of `collection`, if it exists and is JSON.
    pub fn get(&mut self, collection: &str, id: &str) -> Option<&Value> {
        let store = self.store;
        self.read
            .entry((collection.to_owned(), id.to_owned()))
            .or_insert_with(|| store.get(collection, id).and_then(|bytes| serde_json::from_slice(&bytes).ok()))
            .as_ref()
    }
}

/// One chunk of `Group`'s export: the records after `after` matching the
/// request's filters, reading at most `max_records` records and stopping
/// once the lines reach `max_bytes`.
pub fn export_chunk<Group: CollectionGroup>(
    store: &dyn Store,
    request: &Request,
    after: Option<&str>,
    max_records: u32,
    max_bytes: u32,
) -> Result<ExportChunk, PluginError> {
    let mut names: Vec<&str> = export_parameters(Group::FILTERS).iter().map(|param| param.name).collect();
    names.push("format");
    let mut query = Query::new(&request.query, &names);
    let updated_after = query.timestamp("updatedAfter");
    let format = requested_format(&mut query, Group::FORMATS);
    let filters = Group::filters(&mut query);
    query.finish()?;
    let after = match after {
        Some(id) => {
            Some(crate::Uuid::parse_str(id).map_err(|_| PluginError::invalid("after", "not a record id (a UUID)"))?)
        }
        None => None,
    };
    let limit = max_records.max(1) as usize;
    let entries = store.scan(Group::COLLECTION, &RecordWalk { after, limit, reverse: false });
    let mut chunk = ExportChunk::default();
    let mut ended = entries.len() < limit;
    let residual = Residual::exporting(updated_after, &filters);
    let mut related = Related::new(store);
    for entry in entries {
        if chunk.lines.len() >= max_bytes as usize {
            ended = false;
            break;
        }
        let record = StoredRecord::new(entry.id, entry.value);
        chunk.last_read = Some(record.id.clone());
        if !residual.passes(&record)? {
            continue;
        }
        match format {
            None => chunk.lines.extend_from_slice(&record.bytes),
            Some(format) => chunk.lines.extend(Group::render(format, record.value()?, &mut related)?),
        }
        chunk.lines.push(b'\n');
        chunk.count += 1;
    }
    if ended {
        chunk.last_read = None;
    }
    Ok(chunk)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::list::SortField;
    use crate::query::ParamKind;
    use crate::testing::{MemoryStore, record_id};

    struct Things;

    impl CollectionGroup for Things {
        const COLLECTION: &'static str = "scopes";
        const VERSION: &'static str = "1.0.0";
        const FILTERS: &'static [Param] = &[Param::new("status", ParamKind::AnyOf(&["active", "paused"]), "")];
        const SORT_KEYS: &'static [(&'static str, SortField)] = &[("created_at", SortField::Timestamp("/created_at"))];

        fn filters(query: &mut Query<'_>) -> Vec<crate::list::Filter<'static>> {
            let statuses = query.any_of("status", &["active", "paused"]);
            crate::group::index_filters("scopes", [("status", statuses.map(crate::list::owned))])
        }
    }

    fn store() -> MemoryStore {
        let mut store = MemoryStore::default();
        for (n, status) in ["active", "paused", "active", "active", "paused"].iter().enumerate() {
            store.insert(
                "scopes",
                json!({"id": record_id(&format!("0{}", n + 1)), "status": status,
                       "created_at": "2026-01-01T00:00:00Z", "updated_at": format!("2026-01-0{}T00:00:00Z", n + 1)}),
            );
        }
        store
    }

    fn walk(query: &[(&str, &str)], max_records: u32, max_bytes: u32) -> (Vec<Value>, usize) {
        let store = store();
        let request = Request::with_query("/v1/scopes/export", query);
        let (mut records, mut after, mut calls) = (Vec::new(), None, 0);
        loop {
            let chunk =
                export_chunk::<Things>(&store, &request, after.as_deref(), max_records, max_bytes).expect("chunk");
            calls += 1;
            let text = String::from_utf8(chunk.lines).expect("utf-8");
            let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).expect("json")).collect();
            assert_eq!(lines.len(), chunk.count as usize);
            records.extend(lines);
            match chunk.last_read {
                Some(last) => after = Some(last),
                None => return (records, calls),
            }
        }
    }

    #[test]
    fn chunks_walk_every_matching_record_in_id_order() {
        let (all, calls) = walk(&[], 2, u32::MAX);
        let ids: Vec<&str> = all.iter().filter_map(|r| r["id"].as_str()).collect();
        assert_eq!(ids, (1..=5).map(|n| record_id(&format!("0{n}"))).collect::<Vec<_>>());
        assert_eq!(calls, 3);
        let (paused, _) = walk(&[("status", "paused")], 2, u32::MAX);
        assert_eq!(paused.len(), 2);
        let (recent, _) = walk(&[("updatedAfter", "2026-01-03T00:00:00Z")], 10, u32::MAX);
        assert_eq!(recent.len(), 2);
        // A byte bound ends a chunk early; nothing is lost.
        let (small, calls) = walk(&[], 10, 1);
        assert_eq!((small.len(), calls), (5, 5));
    }

    #[test]
    fn paging_parameters_and_unknown_formats_are_refused() {
        let store = store();
        for (name, value) in [("limit", "10"), ("cursor", "x"), ("sort", "created_at"), ("format", "ocsf")] {
            let request = Request::with_query("/v1/scopes/export", &[(name, value)]);
            match export_chunk::<Things>(&store, &request, None, 10, u32::MAX) {
                Err(PluginError::InvalidParameters(list)) => assert_eq!(list[0].name, name),
                other => panic!("{name}={value} gave {other:?}"),
            }
        }
        let request = Request::with_query("/v1/scopes/export", &[]);
        match export_chunk::<Things>(&store, &request, Some("not-an-id"), 10, u32::MAX) {
            Err(PluginError::InvalidParameters(list)) => assert_eq!(list[0].name, "after"),
            other => panic!("after=not-an-id gave {other:?}"),
        }
    }
}
