//! A resource group over one collection, written once: implementing
//! [`CollectionGroup`] (the collection, its filters, sort keys and summary
//! fields) implements [`ResourcePlugin`]; [`index_filters`] turns the
//! filters a query gives into index filters.

use serde_json::Value;

use crate::export::{DEFAULT_FORMAT, ExportChunk, Related, export_chunk, requested_format};
use crate::list::{Filter, SortField, list_descriptor, list_filtered, parse_list_request};
use crate::query::{Param, Query};
use crate::summary::{Summary, SummaryField, SummaryInfo, parse_summary_request, summarize, summary_info};
use crate::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};

/// A resource group that serves one collection, named as the group: a list
/// is the collection narrowed by [`CollectionGroup::filters`], a summary
/// counts it within them, an item is the record with that id.
pub trait CollectionGroup {
    /// The collection, which is also the group's name.
    const COLLECTION: &'static str;
    /// The component's version: `env!("CARGO_PKG_VERSION")` of its crate.
    const VERSION: &'static str;
    /// The group's own query parameters, after the common list ones.
    const FILTERS: &'static [Param];
    const SORT_KEYS: &'static [(&'static str, SortField)];
    /// What a summary may group by; none, and the group serves no summary.
    const SUMMARY_FIELDS: &'static [SummaryField] = &[];
    /// The formats an export, the change feed and `get` render records in
    /// (`format`); the first, [`DEFAULT_FORMAT`], is the record as stored.
    /// Any other is [`CollectionGroup::render`]'s.
    const FORMATS: &'static [&'static str] = &[DEFAULT_FORMAT];
    /// Collections besides its own that its renderings read (a finding's
    /// endpoint), for the descriptor's `reads`.
    const RENDERING_READS: &'static [&'static str] = &[];

    /// The filters the query gives, as lists and summaries apply them; a
    /// bad value is rejected on `query`.
    fn filters(query: &mut Query<'_>) -> Vec<Filter<'static>>;

    /// The record in `format`, one of [`CollectionGroup::FORMATS`] but the
    /// first, as a JSON object's bytes.
    fn render(format: &str, _record: &Value, _related: &mut Related<'_>) -> Result<Vec<u8>, PluginError> {
        Err(PluginError::Internal(format!("{} renders no {format}", Self::COLLECTION)))
    }
}

impl<Group: CollectionGroup> ResourcePlugin for Group {
    // A page is `list_filtered`'s, the stored records unchanged.
    const PAGES_ARE_STORED_RECORDS: bool = true;

    fn describe() -> Descriptor {
        list_descriptor(Group::COLLECTION, Group::VERSION, Group::FILTERS, Group::SORT_KEYS)
            .with_reads(Group::RENDERING_READS)
    }

    fn list(store: &dyn Store, request: &Request) -> Result<Page, PluginError> {
        let (mut query, options) = parse_list_request(request, Group::FILTERS, Group::SORT_KEYS);
        let filters = Group::filters(&mut query);
        query.finish()?;
        list_filtered(store, Group::COLLECTION, &options, filters)
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        if Group::FORMATS.len() < 2 {
            return get_record(store, Group::COLLECTION, id, request);
        }
        let mut query = Query::new(&request.query, &["format"]);
        let format = requested_format(&mut query, Group::FORMATS);
        query.finish()?;
        let record = store.get(Group::COLLECTION, id).ok_or(PluginError::NotFound)?;
        match format {
            None => Ok(record),
            Some(format) => {
                let value: Value = serde_json::from_slice(&record)
                    .map_err(|error| PluginError::Internal(format!("stored record {id} is not JSON: {error}")))?;
                Group::render(format, &value, &mut Related::new(store))
            }
        }
    }

    fn export_formats() -> Vec<String> {
        Group::FORMATS.iter().skip(1).map(|format| (*format).to_owned()).collect()
    }

    fn export_chunk(
        store: &dyn Store,
        request: &Request,
        after: Option<&str>,
        max_records: u32,
        max_bytes: u32,
    ) -> Result<ExportChunk, PluginError> {
        export_chunk::<Group>(store, request, after, max_records, max_bytes)
    }

    fn describe_summary() -> SummaryInfo {
        if Group::SUMMARY_FIELDS.is_empty() {
            return SummaryInfo::default();
        }
        summary_info(Group::SUMMARY_FIELDS, Group::FILTERS)
    }

    fn summary(store: &dyn Store, request: &Request) -> Result<Summary, PluginError> {
        if Group::SUMMARY_FIELDS.is_empty() {
            return Err(PluginError::NotFound);
        }
        let (mut query, group_by) = parse_summary_request(request, Group::SUMMARY_FIELDS, Group::FILTERS);
        let filters = Group::filters(&mut query);
        query.finish()?;
        summarize(store, Group::COLLECTION, &group_by, filters)
    }
}

/// A [`Filter::by_index`] of `collection` for each index whose values the
/// query gives (`None`: not asked for), in the order given.
pub fn index_filters(
    collection: &str,
    indexed: impl IntoIterator<Item = (&'static str, Option<Vec<String>>)>,
) -> Vec<Filter<'static>> {
    indexed
        .into_iter()
        .filter_map(|(index, values)| values.map(|values| Filter::by_index(collection, index, values)))
        .collect()
}
