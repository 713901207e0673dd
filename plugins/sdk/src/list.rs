//! Lists: the common parameters (`limit`, `offset`, `cursor`, `sort`,
//! `updatedAfter`), sorting with ties broken by id, paging and `total`.
//!
//! A plugin supplies which records match and how its sort keys read a
//! record; [`list_records`] does the rest. Records pass through as stored:
//! the page's `data` is the stored bytes joined into a JSON array.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::indexes::{CREATED_AT, UPDATED_AT};
use crate::query::{Param, ParamKind, Query, not_one_of};
pub use crate::sort::{SortField, SortValue};
use crate::stored::StoredRecord;
use crate::time::Timestamp;
use crate::{Bytes, Page, PluginError, Store};

/// The parameters every list accepts. `sort`'s values depend on the
/// group's sort keys: [`list_descriptor`] fills them in.
pub const LIST_PARAMETERS: &[Param] = &[
    Param::new("limit", ParamKind::Integer { min: 1, max: MAX_LIMIT as u64 }, "Page size.").with_default("50"),
    // No declared default: generated clients would send it with every
    // cursor, and the two do not combine.
    Param::new(
        "offset",
        ParamKind::Integer { min: 0, max: i64::MAX as u64 },
        "Records to skip (0 when absent); not combinable with cursor.",
    ),
    Param::new("cursor", ParamKind::Cursor, "Opaque token from a previous page's next_cursor."),
    Param::new("sort", ParamKind::Text { max: 64 }, "Sort key, '-' prefix for descending; ties by id.")
        .with_default("created_at"),
    Param::new("updatedAfter", ParamKind::Timestamp, "Only records whose updated_at is strictly later."),
    Param::new("id", ParamKind::Uuids, "Only these records (ids, comma-separated, at most 100), if they match."),
];

pub const DEFAULT_LIMIT: u32 = 50;
pub use esr_contract::limits::MAX_LIMIT;
/// How many records one store scan asks for.
const SCAN_BATCH: u32 = 1000;
/// How much larger each batch of a walk is than the one before.
const BATCH_GROWTH: u32 = 4;

/// The requested order: a key from the plugin's table and a direction.
#[derive(Debug, Clone, Copy)]
pub struct SortOrder {
    pub key: &'static str,
    pub field: SortField,
    pub descending: bool,
}

impl SortOrder {
    /// The `sort` parameter's spelling of this order.
    pub fn spelling(&self) -> String {
        if self.descending { format!("-{}", self.key) } else { self.key.to_owned() }
    }

    fn compare(&self, a: &Position, b: &Position) -> Ordering {
        a.value.compare(&b.value, self.descending).then_with(|| {
            let by_id = a.id.cmp(&b.id);
            if self.descending { by_id.reverse() } else { by_id }
        })
    }
}

/// Where a record stands in an order; a cursor is the last one returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Position {
    pub value: SortValue,
    pub id: String,
}

/// What a cursor holds before the host seals it.
#[derive(Debug, Serialize, Deserialize)]
struct CursorState {
    sort: String,
    after: Position,
}

/// The parsed common list parameters.
#[derive(Debug, Clone)]
pub struct ListOptions {
    pub limit: u32,
    pub offset: u64,
    pub after: Option<Position>,
    pub sort: SortOrder,
    pub updated_after: Option<Timestamp>,
    /// Only these records (`id`), as stored ids.
    pub ids: Option<Vec<String>>,
}

impl ListOptions {
    /// Parses the common parameters against the plugin's sort keys (the
    /// first must be `created_at`, the default).
    pub fn parse(query: &mut Query, sort_keys: &[(&'static str, SortField)]) -> ListOptions {
        let (default_key, default_field) =
            sort_keys.first().copied().unwrap_or(("created_at", SortField::Timestamp("/created_at")));
        let mut sort = SortOrder { key: default_key, field: default_field, descending: false };
        if let Some(raw) = query.raw("sort") {
            let (descending, key) = match raw.strip_prefix('-') {
                Some(key) => (true, key),
                None => (false, raw),
            };
            match sort_keys.iter().find(|(name, _)| *name == key) {
                Some((key, field)) => sort = SortOrder { key, field: *field, descending },
                None => {
                    let names: Vec<&str> = sort_keys.iter().map(|(name, _)| *name).collect();
                    query.reject("sort", format!("{} (optionally prefixed with '-')", not_one_of(&names)));
                }
            }
        }
        let limit = query.integer("limit", 1, u64::from(MAX_LIMIT)).map_or(DEFAULT_LIMIT, |l| l as u32);
        let offset = query.integer("offset", 0, i64::MAX as u64);
        let after = query.raw("cursor").and_then(|raw| {
            let state: Option<CursorState> = serde_json::from_str(raw).ok();
            match state {
                Some(state) if state.sort == sort.spelling() => Some(state.after),
                Some(_) => {
                    query.reject("cursor", "was issued for another sort order");
                    None
                }
                None => {
                    query.reject("cursor", "not a valid cursor");
                    None
                }
            }
        });
        if after.is_some() && offset.is_some() {
            query.reject("cursor", "cannot be combined with offset");
        }
        let updated_after = query.timestamp("updatedAfter");
        let ids = query.uuids("id");
        ListOptions { limit, offset: offset.unwrap_or(0), after, sort, updated_after, ids }
    }
}

/// A list group's descriptor: the common list parameters followed by the
/// group's own `filters`, its sort keys, the JSON Schema of its records
/// from the collection's field table, and its own collection to read.
pub fn list_descriptor(
    group: &str,
    version: &str,
    filters: &[Param],
    sort_keys: &[(&'static str, SortField)],
) -> crate::Descriptor {
    let parameters: Vec<Param> = LIST_PARAMETERS.iter().chain(filters).copied().collect();
    let keys: Vec<&str> = sort_keys.iter().map(|(key, _)| *key).collect();
    let mut descriptor = crate::Descriptor::new(group, version, &parameters, &keys).with_reads(&[group]);
    let sort_values: Vec<String> = keys.iter().flat_map(|key| [(*key).to_owned(), format!("-{key}")]).collect();
    for parameter in descriptor.parameters.iter_mut().filter(|p| p.name == "sort") {
        let default = keys.first().copied().unwrap_or("created_at");
        parameter.schema = serde_json::json!({"type": "string", "enum": sort_values, "default": default}).to_string();
    }
    match crate::Collection::named(group).map(crate::schema::schema) {
        Some(fields) => descriptor.with_response_schema(&crate::schema::json_schema(fields)),
        None => descriptor,
    }
}

/// Starts parsing a list request that accepts the common parameters and
/// `filters`: the common options, and the parser to read the filters with
/// (finish it with [`Query::finish`]).
pub fn parse_list_request<'r>(
    request: &'r crate::Request,
    filters: &[Param],
    sort_keys: &[(&'static str, SortField)],
) -> (Query<'r>, ListOptions) {
    let names: Vec<&str> = LIST_PARAMETERS.iter().chain(filters).map(|param| param.name).collect();
    let mut query = Query::new(&request.query, &names);
    let options = ListOptions::parse(&mut query, sort_keys);
    (query, options)
}

/// One filter of a list: a test on a record, and, when the host keeps an
/// index that answers it exactly, that index and the values it selects, or
/// the range of a sort index it selects.
pub struct Filter<'a> {
    index: Option<(&'static str, Vec<String>)>,
    range: Option<Range>,
    /// The query parameter it comes from, named when it is too broad.
    param: Option<&'static str>,
    test: Box<dyn Fn(&Value) -> bool + 'a>,
}

/// Positions of a sort index strictly between two ends (an absent end is
/// open), among the records holding the sort value.
#[derive(Debug, Clone)]
struct Range {
    index: crate::indexes::Index,
    above: Option<i64>,
    below: Option<i64>,
    /// Whether the range holds exactly the filter's records (else a
    /// superset, which the filter's test narrows).
    exact: bool,
}

/// The smallest and largest record ids, as index positions' tie-breakers.
const FIRST_ID: crate::Uuid = crate::Uuid::nil();
const LAST_ID: crate::Uuid = crate::Uuid::max();

/// The place of the stored record `id` (always a UUID) at `at` in an index.
fn index_position(at: i64, id: &str) -> Result<crate::IndexPosition, PluginError> {
    let id = crate::Uuid::parse_str(id).map_err(|_| PluginError::Internal(format!("{id:?} is not a record id")))?;
    Ok(crate::IndexPosition::new(at, id))
}

impl Range {
    /// The store's form: entries strictly after `(above, last id)` and
    /// strictly before `(below, first id)`.
    fn index_range(&self) -> crate::IndexRange {
        crate::IndexRange {
            index: self.index.name.to_owned(),
            after: self.above.map(|at| crate::IndexPosition::new(at, LAST_ID)),
            before: self.below.map(|at| crate::IndexPosition::new(at, FIRST_ID)),
        }
    }

    fn holds(&self, position: i64) -> bool {
        self.above.is_none_or(|above| position > above) && self.below.is_none_or(|below| position < below)
    }

    /// Whether a record holding `value` where the index reads it is in
    /// the range (as the index says: records without the sort value never are).
    fn holds_value(&self, value: Option<&Value>) -> bool {
        let crate::indexes::IndexOrder::By(field) = self.index.order else { return false };
        crate::indexes::sort_position(&field.of(value)).is_some() && self.holds(self.index.position_of(value))
    }
}

impl<'a> Filter<'a> {
    /// A filter the index `index` answers exactly: a record matches when it
    /// holds one of `values` there, which `test` must also say.
    pub fn indexed(index: &'static str, values: Vec<String>, test: impl Fn(&Value) -> bool + 'a) -> Filter<'a> {
        Filter { index: Some((index, values)), range: None, param: None, test: Box::new(test) }
    }

    /// A record holds one of `values` in the collection's index `index`
    /// (see [`crate::indexes`]); the index answers it, and the test reads
    /// a record the way the index does.
    pub fn by_index(collection: &str, index: &'static str, values: Vec<String>) -> Filter<'a> {
        let definition = crate::index_of(collection, index);
        let wanted = values.clone();
        Filter::indexed(index, values, move |record: &Value| {
            definition.is_some_and(|definition| definition.values(record).iter().any(|value| wanted.contains(value)))
        })
    }

    /// A record has a value in the collection's sort index `index` whose
    /// position is strictly above `above` and strictly below `below` (an
    /// absent end is open); records without the value never match. The
    /// sort index answers it (a walk starts at an end, a count reads no
    /// record), and the test reads a record the way the index does. An
    /// unknown index matches nothing.
    pub fn in_range(
        collection: &str,
        param: &'static str,
        index: &'static str,
        above: Option<i64>,
        below: Option<i64>,
    ) -> Filter<'a> {
        let Some(definition) = crate::index_of(collection, index) else {
            return Filter::test(|_| false).named(param);
        };
        let range = Range { index: definition, above, below, exact: true };
        let tested = range.clone();
        Filter {
            index: None,
            range: Some(range),
            param: Some(param),
            test: Box::new(move |record: &Value| tested.holds_value(record.pointer(definition.position_pointer()))),
        }
    }

    /// Records whose text in the collection's text sort index `index`
    /// starts with `prefix` (lowercase), as `test` says: the index's range
    /// of the prefix holds them (and perhaps others sharing a position with
    /// them), so a walk reads that range instead of every record, and
    /// `test` decides.
    pub fn text_prefix(
        collection: &str,
        param: &'static str,
        index: &'static str,
        prefix: &str,
        test: impl Fn(&Value) -> bool + 'a,
    ) -> Filter<'a> {
        let range = crate::index_of(collection, index).map(|definition| {
            let above = crate::indexes::text_position(prefix).checked_sub(1);
            // Every text starting with `prefix` sorts before the first
            // string past them: the prefix with its last byte raised.
            let mut past = prefix.as_bytes().to_vec();
            while past.last() == Some(&0xff) {
                past.pop();
            }
            let raised = match past.last_mut() {
                Some(last) => {
                    *last += 1;
                    true
                }
                None => false,
            };
            let below = raised.then(|| crate::indexes::bytes_position(&past).saturating_add(1));
            Range { index: definition, above, below, exact: false }
        });
        Filter { index: None, range, param: Some(param), test: Box::new(test) }
    }

    /// A filter no index answers.
    pub fn test(test: impl Fn(&Value) -> bool + 'a) -> Filter<'a> {
        Filter { index: None, range: None, param: None, test: Box::new(test) }
    }

    /// The same filter, naming the query parameter it comes from (in the
    /// `400` of a request too broad to answer).
    pub fn named(self, param: &'static str) -> Filter<'a> {
        Filter { param: Some(param), ..self }
    }
}

/// Owned copies of parsed values, e.g. for [`Filter::by_index`].
pub fn owned(values: Vec<&str>) -> Vec<String> {
    values.into_iter().map(str::to_owned).collect()
}

/// One page of `collection`: the records for which `matches` holds, in the
/// requested order, after the cursor or offset. Reads the whole collection;
/// prefer [`list_filtered`] where indexes answer the filters.
pub fn list_records(
    store: &dyn Store,
    collection: &str,
    options: &ListOptions,
    matches: impl Fn(&Value) -> bool,
) -> Result<Page, PluginError> {
    list_filtered(store, collection, options, vec![Filter::test(matches)])
}

/// One page of `collection`: the records that pass every filter, in the
/// requested order, after the cursor or offset.
///
/// The walk starts from the most selective indexed or range filter (by the
/// index's counts), so a selective filter never reads the whole
/// collection. In the default `created_at` order the page is read in index
/// order and the walk stops after it. In an order a sort index keeps, a
/// large candidate set is walked in that index instead (from the end of a
/// range on the same index). Other orders, and small candidate sets, read
/// every candidate and sort them. `total` comes from the index entries
/// alone (`count_matching`) whenever indexes answer every
/// filter, and from counting the matching records otherwise. A request
/// that would read more than [`WORK_BUDGET`] records for its page or its
/// total is refused with `invalid-parameters` saying what to narrow.
pub fn list_filtered(
    store: &dyn Store,
    collection: &str,
    options: &ListOptions,
    filters: Vec<Filter<'_>>,
) -> Result<Page, PluginError> {
    if let Some(ids) = &options.ids {
        return list_named(store, collection, options, ids, &filters);
    }
    let sort_field = match options.sort.field {
        SortField::Timestamp(pointer) => pointer,
        _ => "",
    };
    // One indexed condition in `created_at` order is walked whatever it
    // holds: its count (the total) is asked for after the page, which a
    // store may read with the page's records (PostgreSQL: one round trip).
    let lone_condition = sort_field == "/created_at"
        && options.updated_after.is_none()
        && matches!(filters.as_slice(), [only] if only.range.is_none()
            && only.index.as_ref().is_some_and(|(index, _)| crate::index_of(collection, index).is_some()));
    let best = if lone_condition { None } else { most_selective(store, collection, &filters, true) };
    // Records strictly after `updatedAfter` start right after this position
    // in the `updated_at` index.
    let updated_from = options.updated_after.map(|after| crate::IndexPosition::new(after.0, LAST_ID));
    let small_range = best.is_some_and(|(held, _)| held <= SMALL_RANGE);
    let mut counted = counted_by_indexes(collection, &filters);
    // A range alone was counted to choose the walk: that is the total.
    if let (Some(counted), Some((held, _)), [only]) = (counted.as_mut(), best, filters.as_slice())
        && only.range.is_some()
        && options.updated_after.is_none()
    {
        counted.known = Some(held);
    }
    let budget = Budget::new(&filters);
    // A small range: read it whole and sort it.
    if let Some((_, position)) = best
        && small_range
        && let Some(range) = &filters[position].range
    {
        let source = range_source(range);
        // An exact range needs no test of its own; a superset keeps it.
        let residual = Residual { skip: range.exact.then_some(position), ..Residual::of(options, &filters) };
        return sort_everything(store, collection, options, &source, &residual, &budget);
    }
    if !small_range
        && !matches!(sort_field, "/created_at" | "/updated_at")
        && let Some(index) = crate::Collection::named(collection)
            .and_then(|collection| crate::indexes::sort_index(collection, options.sort.field))
    {
        // A range on the sorted index bounds the walk: the walk's records
        // need no test of it (a count of another source still tests it).
        let bounding =
            filters.iter().position(|filter| filter.range.as_ref().is_some_and(|range| range.index.name == index.name));
        let bounds = bounding.and_then(|position| filters[position].range.clone());
        let source = match best {
            Some((_, position)) => filter_source(&filters[position]),
            None => Source::everything(),
        };
        let residual = Residual::of(options, &filters);
        let walk = SortWalk { index, bounds: bounds.as_ref(), source: &source };
        let page_residual = Residual { skip: bounding, ..Residual::of(options, &filters) };
        return walk_sort_index(store, collection, options, &walk, (&page_residual, &residual), counted, &budget);
    }
    // Walk the `updated_at` index in its own order, or when few records
    // changed since `updatedAfter` (incremental sync reads only those); a
    // wide `updatedAfter` is a test on each record of the usual walk.
    let by_update = !small_range
        && (sort_field == "/updated_at"
            || options.updated_after.is_some_and(|after| few_updated_since(store, collection, after)));
    let walked_filter = match (lone_condition, by_update) {
        (true, _) => Some(0),
        (false, false) => most_selective(store, collection, &filters, false).map(|(_, position)| position),
        (false, true) => None,
    };
    let source = match walked_filter {
        Some(position) => filter_source(&filters[position]),
        None if by_update => Source { index: UPDATED_AT, values: vec![String::new()], from: updated_from, until: None },
        None => Source::everything(),
    };
    let residual = Residual { skip: walked_filter, ..Residual::of(options, &filters) };
    let exact_count = options.updated_after.is_none() && filters.len() == usize::from(walked_filter.is_some());
    let in_source_order = match source.index {
        UPDATED_AT => sort_field == "/updated_at",
        _ => sort_field == "/created_at",
    };
    if !in_source_order {
        return sort_everything(store, collection, options, &source, &residual, &budget);
    }
    // Counting by reading records reads the smallest source, ranges included.
    let (count_source, count_residual) = match best {
        Some((_, position)) => {
            let answered = filters[position].range.as_ref().is_none_or(|range| range.exact);
            let skip = answered.then_some(position);
            (filter_source(&filters[position]), Residual { skip, ..Residual::of(options, &filters) })
        }
        None => (Source::everything(), Residual::of(options, &filters)),
    };
    let walk = InOrder { source: &source, residual: &residual, exact_count };
    walk_in_index_order(store, collection, options, &walk, (&count_source, &count_residual), counted, &budget)
}

/// A walk in the order of its source's index.
struct InOrder<'w, 'f, 'a> {
    source: &'w Source,
    residual: &'w Residual<'f, 'a>,
    /// Whether the source's index counts answer `total` (no other filter).
    exact_count: bool,
}

/// Below this many candidates an indexed filter is read whole and sorted,
/// whatever the order asked for.
const SMALL_RANGE: u64 = 5_000;

/// The most records a list reads for one page, or to count its `total`:
/// beyond it the request is refused as too broad (its filters select too
/// few of the records their walk has to read), rather than running into
/// the call's deadline or memory cap.
pub const WORK_BUDGET: u64 = 20_000;

/// Counts the records a request reads and refuses it past [`WORK_BUDGET`].
struct Budget {
    read: std::cell::Cell<u64>,
    /// The filter to narrow, named in the refusal.
    param: &'static str,
}

impl Budget {
    fn new(filters: &[Filter<'_>]) -> Budget {
        let tested = filters.iter().filter(|filter| filter.index.is_none()).find_map(|filter| filter.param);
        let param = tested.or_else(|| filters.iter().find_map(|filter| filter.param)).unwrap_or("sort");
        Budget { read: std::cell::Cell::new(0), param }
    }

    /// One more record read, for `what` ("answer this page", "count the total").
    fn spend(&self, what: &str) -> Result<(), PluginError> {
        let read = self.read.get() + 1;
        self.read.set(read);
        if read > WORK_BUDGET {
            return Err(PluginError::invalid(
                self.param,
                format!(
                    "too broad to {what}: more than {WORK_BUDGET} records would have to be read; \
                     add a filter on an indexed field (e.g. a status, type or id) or narrow {}",
                    self.param
                ),
            ));
        }
        Ok(())
    }
}

/// Whether at most [`SMALL_RANGE`] records were updated after `after`
/// (the host counts them from its hourly tallies, reading no record).
fn few_updated_since(store: &dyn Store, collection: &str, after: Timestamp) -> bool {
    let updated = crate::Matching { updated_after: Some(after.0), ..crate::Matching::default() };
    store.count_matching(collection, &updated) <= SMALL_RANGE
}

/// The walk of one indexed filter's values, in order, each value once, or
/// of its range.
fn filter_source(filter: &Filter<'_>) -> Source {
    if let Some(range) = &filter.range {
        return range_source(range);
    }
    let Some((index, mut values)) = filter.index.clone() else { return Source::everything() };
    values.sort();
    values.dedup();
    Source { index, values, from: None, until: None }
}

/// The walk of a range of a sort index, in its order.
fn range_source(range: &Range) -> Source {
    let crate::IndexRange { after, before, .. } = range.index_range();
    Source { index: range.index.name, values: vec![crate::indexes::SORTED.to_owned()], from: after, until: before }
}

/// What indexes count of the filters, when they answer every one: index
/// conditions and exact ranges (at most the host's
/// [`MAX_RANGES`](crate::limits::MAX_RANGES)).
pub(crate) struct Counted {
    pub(crate) conditions: Vec<crate::IndexCondition>,
    pub(crate) ranges: Vec<crate::IndexRange>,
    /// The count, when already known (a range alone, counted to choose the walk).
    known: Option<u64>,
}

pub(crate) fn counted_by_indexes(collection: &str, filters: &[Filter<'_>]) -> Option<Counted> {
    let mut counted = Counted { conditions: Vec::new(), ranges: Vec::new(), known: None };
    for filter in filters {
        match (&filter.index, &filter.range) {
            (Some((index, values)), _) => {
                crate::index_of(collection, index)?;
                counted.conditions.push(crate::IndexCondition { index: (*index).to_owned(), values: values.clone() });
            }
            (None, Some(range)) if range.exact && counted.ranges.len() < crate::limits::MAX_RANGES => {
                counted.ranges.push(range.index_range())
            }
            _ => return None,
        }
    }
    Some(counted)
}

/// What a list walks: the values of one index, from a position on.
struct Source {
    index: &'static str,
    values: Vec<String>,
    /// Only entries after this position (ascending) count.
    from: Option<crate::IndexPosition>,
    /// Only entries before this position (ascending) count.
    until: Option<crate::IndexPosition>,
}

impl Source {
    /// Every record, in `created_at` order.
    fn everything() -> Source {
        Source { index: CREATED_AT, values: vec![String::new()], from: None, until: None }
    }
}

/// The indexed filter (or, with `ranges`, range filter) holding the fewest
/// records, by the index's counts, with that count.
fn most_selective(store: &dyn Store, collection: &str, filters: &[Filter<'_>], ranges: bool) -> Option<(u64, usize)> {
    filters
        .iter()
        .enumerate()
        .filter_map(|(position, filter)| {
            if let Some(range) = filter.range.as_ref().filter(|_| ranges) {
                let within = crate::Matching::range(range.index_range());
                return Some((store.count_matching(collection, &within), position));
            }
            let (index, values) = filter.index.as_ref()?;
            crate::index_of(collection, index)?;
            let held: u64 = values.iter().map(|value| store.index_count(collection, index, value)).sum();
            Some((held, position))
        })
        .min()
}

/// How many records one store call asks for while walking.
fn batch_size(wanted: u64) -> u32 {
    u32::try_from(wanted.clamp(16, u64::from(SCAN_BATCH))).unwrap_or(SCAN_BATCH)
}

/// A record met in an index walk. Its position in the index is worked out
/// only when asked for: a walk of one index value needs it for the last
/// record of a batch and of a page, not for the others.
struct Walked {
    record: StoredRecord,
    index: crate::indexes::Index,
    at: std::cell::Cell<Option<i64>>,
    /// Read in a full batch, whose bytes its records share: a page that
    /// keeps it copies its bytes, so as not to hold the whole batch.
    in_full_batch: bool,
}

impl Walked {
    fn new(record: StoredRecord, index: crate::indexes::Index) -> Walked {
        Walked { record, index, at: std::cell::Cell::new(None), in_full_batch: false }
    }

    /// The record as a page keeps it: bytes of its own when it came in a
    /// full batch (a sparse filter would otherwise keep a batch for each
    /// record of its page, up to the whole work budget).
    fn kept(mut self) -> Walked {
        if self.in_full_batch {
            self.record.bytes = Bytes::copy_from_slice(&self.record.bytes);
        }
        self
    }

    /// Where the record stands in the walked index's own order.
    fn position(&self) -> Result<crate::IndexPosition, PluginError> {
        let at = match self.at.get() {
            Some(at) => at,
            None => {
                let at = self.index.position_of(self.record.at(self.index.position_pointer())?.as_ref());
                self.at.set(Some(at));
                at
            }
        };
        index_position(at, &self.record.id)
    }
}

/// The records of one index value, fetched batch by batch.
struct IndexStream<'s> {
    store: &'s dyn Store,
    collection: &'s str,
    index: crate::indexes::Index,
    value: String,
    reverse: bool,
    after: Option<crate::IndexPosition>,
    buffered: std::collections::VecDeque<Walked>,
    exhausted: bool,
    batch: u32,
    /// A batch was read: the next ones share their bytes ([`Walked::kept`]).
    past_first: bool,
    /// Ask the store to hold the records ([`Store::index_scan_held`]).
    hold: bool,
}

impl IndexStream<'_> {
    /// The next record, fetching a batch when none is buffered.
    fn front(&mut self) -> Result<Option<&Walked>, PluginError> {
        if self.buffered.is_empty() && !self.exhausted {
            let walk = crate::IndexWalk {
                index: self.index.name,
                value: &self.value,
                after: self.after,
                limit: self.batch as usize,
                reverse: self.reverse,
            };
            let held = if self.hold { self.store.index_scan_held(self.collection, &walk) } else { None };
            let entries = if held.is_some() { Vec::new() } else { self.store.index_scan(self.collection, &walk) };
            let found = held.as_ref().map_or(entries.len(), Vec::len);
            self.exhausted = found < self.batch as usize;
            // The walk is past its first page: a filter the index does not
            // answer, or an offset. Each later batch is four times the one
            // before, up to a full one, so a page that needs a few records
            // more does not read a thousand.
            self.batch = self.batch.saturating_mul(BATCH_GROWTH).min(SCAN_BATCH);
            let index = self.index;
            let in_full_batch = std::mem::replace(&mut self.past_first, true);
            self.buffered.extend(entries.into_iter().map(|entry| {
                let mut walked = Walked::new(StoredRecord::new(entry.id, entry.value), index);
                walked.in_full_batch = in_full_batch;
                // The store's own position, where it gives one: the record
                // is then never read to learn it.
                walked.at.set(entry.position);
                walked
            }));
            self.buffered.extend(held.into_iter().flatten().map(|held| {
                let walked = Walked::new(StoredRecord::held(held.id, held.number), index);
                walked.at.set(Some(held.position));
                walked
            }));
            // The next batch resumes after the last record of this one.
            if let Some(last) = self.buffered.back() {
                self.after = Some(last.position()?);
            }
        }
        Ok(self.buffered.front())
    }
}

/// The records of a source in its index order (or the reverse), each
/// once, starting after `after`.
struct MergedWalk<'s> {
    streams: Vec<IndexStream<'s>>,
    reverse: bool,
    last_id: Option<String>,
    /// The walk ends at this position (inclusive).
    stop_at: Option<crate::IndexPosition>,
    /// Text order: ties on the index position sorted by the whole text.
    ties: Option<Ties>,
}

/// A text sort index orders by a prefix of the text: each group of records
/// at one position is sorted by the whole text, then id, before it is
/// handed out, and a cursor's group is read from its start and the records
/// up to the cursor dropped.
struct Ties {
    order: SortOrder,
    /// Only records after this position in the order (a cursor's).
    after: Option<Position>,
    group: std::collections::VecDeque<Walked>,
    pending: Option<Walked>,
}

impl<'s> MergedWalk<'s> {
    fn new(
        store: &'s dyn Store,
        collection: &'s str,
        source: &Source,
        after: Option<crate::IndexPosition>,
        reverse: bool,
        wanted: u64,
    ) -> MergedWalk<'s> {
        // Without an index of its own the source is read in creation order.
        let index = crate::index_of(collection, source.index)
            .unwrap_or(crate::indexes::Index { name: source.index, ..crate::indexes::EVERYTHING });
        // Ascending: from the later of the cursor and the source's start;
        // descending: from the earlier of the cursor and the source's end.
        let start = if reverse {
            [after, source.until].into_iter().flatten().min()
        } else {
            [after, source.from].into_iter().flatten().max()
        };
        let streams = source
            .values
            .iter()
            .map(|value| IndexStream {
                store,
                collection,
                index,
                value: value.clone(),
                reverse,
                after: start,
                buffered: std::collections::VecDeque::new(),
                exhausted: false,
                batch: batch_size(wanted),
                past_first: false,
                hold: false,
            })
            .collect();
        let stop_at = if reverse { source.from } else { source.until };
        MergedWalk { streams, reverse, last_id: None, stop_at, ties: None }
    }

    /// Asks the store to hold the walk's records rather than hand them
    /// over, when `hold`: the page is then answered by their numbers.
    fn holding(mut self, hold: bool) -> MergedWalk<'s> {
        for stream in &mut self.streams {
            stream.hold = hold;
        }
        self
    }

    /// Sorts each group of equal index positions by the text of `order`.
    fn with_text_ties(self, order: SortOrder, after: Option<Position>) -> MergedWalk<'s> {
        let ties = Ties { order, after, group: std::collections::VecDeque::new(), pending: None };
        MergedWalk { ties: Some(ties), ..self }
    }

    fn next(&mut self) -> Result<Option<Walked>, PluginError> {
        let Some(mut ties) = self.ties.take() else { return self.next_in_index() };
        let next = self.next_with_ties(&mut ties);
        self.ties = Some(ties);
        next
    }

    fn next_with_ties(&mut self, ties: &mut Ties) -> Result<Option<Walked>, PluginError> {
        loop {
            if let Some(walked) = ties.group.pop_front() {
                return Ok(Some(walked));
            }
            let first = match ties.pending.take() {
                Some(first) => first,
                None => match self.next_in_index()? {
                    Some(first) => first,
                    None => return Ok(None),
                },
            };
            let at = first.position()?.position;
            let mut group = vec![first];
            while let Some(walked) = self.next_in_index()? {
                if walked.position()?.position != at {
                    ties.pending = Some(walked);
                    break;
                }
                group.push(walked);
            }
            let field = ties.order.field;
            let mut keyed = Vec::with_capacity(group.len());
            for walked in group {
                let value = field.of(walked.record.at(field.pointer())?.as_ref());
                let position = Position { value, id: walked.record.id.clone() };
                if ties.after.as_ref().is_none_or(|after| ties.order.compare(&position, after) == Ordering::Greater) {
                    keyed.push((position, walked));
                }
            }
            keyed.sort_by(|(a, _), (b, _)| ties.order.compare(a, b));
            ties.group = keyed.into_iter().map(|(_, walked)| walked).collect();
        }
    }

    fn next_in_index(&mut self) -> Result<Option<Walked>, PluginError> {
        // One value in index order: nothing to merge or compare.
        if let [stream] = self.streams.as_mut_slice() {
            stream.front()?;
            let Some(walked) = stream.buffered.pop_front() else { return Ok(None) };
            if let Some(stop) = &self.stop_at {
                let position = walked.position()?;
                if (&position >= stop) != self.reverse || &position == stop {
                    stream.buffered.clear();
                    stream.exhausted = true;
                    return Ok(None);
                }
            }
            return Ok(Some(walked));
        }
        loop {
            let mut best: Option<(usize, crate::IndexPosition)> = None;
            for (index, stream) in self.streams.iter_mut().enumerate() {
                if let Some(walked) = stream.front()? {
                    let position = walked.position()?;
                    let better = match &best {
                        None => true,
                        Some((_, current)) => (&position < current) != self.reverse && &position != current,
                    };
                    if better {
                        best = Some((index, position));
                    }
                }
            }
            let Some((index, position)) = best else { return Ok(None) };
            if let Some(stop) = &self.stop_at
                && ((&position >= stop) != self.reverse || &position == stop)
            {
                return Ok(None);
            }
            let Some(item) = self.streams[index].buffered.pop_front() else { return Ok(None) };
            // A record holding two of the values appears in two streams.
            if self.last_id.as_deref() == Some(item.record.id.as_str()) {
                continue;
            }
            self.last_id = Some(item.record.id.clone());
            return Ok(Some(item));
        }
    }
}

fn walk_in_index_order(
    store: &dyn Store,
    collection: &str,
    options: &ListOptions,
    walk: &InOrder<'_, '_, '_>,
    (count_source, count_residual): (&Source, &Residual<'_, '_>),
    counted: Option<Counted>,
    budget: &Budget,
) -> Result<Page, PluginError> {
    let InOrder { source, residual, exact_count } = *walk;
    let reverse = options.sort.descending;
    let after = match &options.after {
        Some(Position { value: SortValue::Int(nanos), id }) => Some(index_position(*nanos, id)?),
        Some(Position { value: _, id }) => Some(index_position(i64::MIN, id)?),
        None => None,
    };
    // A page none of whose records is read (no filter left to test) is
    // answered from records the store holds, when it holds them: they
    // need not cross into a component and back.
    let hold = residual.reads_nothing() && wanted(options) <= HOLD_AT_MOST;
    let walk = MergedWalk::new(store, collection, source, after, reverse, wanted(options)).holding(hold);
    let Collected { page, matched, more } = collect_page(vec![walk], options, residual, budget)?;
    let total = if exact_count {
        single_valued_count(store, collection, source)
            .map_or_else(|| count_all(store, collection, source, residual, budget), Ok)?
    } else if !more && options.after.is_none() {
        // The walk reached the end from the beginning: it saw every match.
        matched
    } else {
        count_matches(store, collection, options, count_source, count_residual, counted, budget)?
    };
    let next = match page.last().filter(|_| more) {
        Some(last) => {
            let at = last.position()?;
            Some(Position { value: SortValue::Int(at.position), id: at.id.to_string() })
        }
        None => None,
    };
    let held: Vec<u32> = page.iter().filter_map(|walked| walked.record.held).collect();
    if held.is_empty() {
        return finish_page(options, page.iter().map(|walked| &walked.record.bytes[..]), total, next);
    }
    if held.len() < page.len() {
        return Err(PluginError::Internal("a page mixed held records with records read".into()));
    }
    let page = finish_page(options, std::iter::empty(), total, next)?;
    Ok(Page { data: Vec::new(), held: Some(held), ..page })
}

/// The most records a walk may hold for its page: a deep offset's records
/// are held too, where a walk that reads them lets each batch go.
const HOLD_AT_MOST: u64 = 1001;

/// How many records a walk looks for: those the offset skips, a page, and
/// one more to know whether another page follows.
fn wanted(options: &ListOptions) -> u64 {
    let skip = if options.after.is_some() { 0 } else { options.offset };
    skip.saturating_add(u64::from(options.limit)).saturating_add(1)
}

/// What [`collect_page`] found.
struct Collected {
    /// The page's records with their positions in the walked index.
    page: Vec<Walked>,
    /// Matches seen, including those the offset skipped.
    matched: u64,
    /// Whether a match follows the page.
    more: bool,
}

/// Reads the walks in turn, skipping the offset's matches, until a page
/// and one more match are found.
fn collect_page(
    walks: Vec<MergedWalk<'_>>,
    options: &ListOptions,
    residual: &Residual<'_, '_>,
    budget: &Budget,
) -> Result<Collected, PluginError> {
    let skip = if options.after.is_some() { 0 } else { options.offset };
    let mut collected = Collected { page: Vec::new(), matched: 0, more: false };
    for mut walk in walks {
        while let Some(walked) = walk.next()? {
            budget.spend("answer this page")?;
            if !residual.passes(&walked.record)? {
                continue;
            }
            collected.matched += 1;
            if collected.matched <= skip {
                continue;
            }
            if collected.page.len() < options.limit as usize {
                collected.page.push(walked.kept());
            } else {
                collected.more = true;
                return Ok(collected);
            }
        }
    }
    Ok(collected)
}

/// The page of these records, with the cursor of the next page when one
/// follows `next` (the page's last position).
fn finish_page<'a>(
    options: &ListOptions,
    records: impl Iterator<Item = &'a [u8]>,
    total: u64,
    next: Option<Position>,
) -> Result<Page, PluginError> {
    let next_cursor = match next {
        Some(after) => {
            let state = CursorState { sort: options.sort.spelling(), after };
            Some(serde_json::to_string(&state).map_err(|e| PluginError::Internal(e.to_string()))?)
        }
        None => None,
    };
    Ok(Page {
        data: join_json_array(records),
        held: None,
        total,
        limit: options.limit,
        offset: if options.after.is_some() { None } else { Some(options.offset) },
        next_cursor,
    })
}

/// The source's size from the index's counts, when each record holds at
/// most one of its values (so counts add up without double counting).
fn single_valued_count(store: &dyn Store, collection: &str, source: &Source) -> Option<u64> {
    let index = crate::index_of(collection, source.index)?;
    let single = !matches!(index.key, crate::indexes::IndexKey::EachOf(_)) || source.values.len() == 1;
    single.then(|| source.values.iter().map(|value| store.index_count(collection, source.index, value)).sum())
}

/// How many records match: from the index entries when indexes answer
/// every filter, else by reading the source's records.
fn count_matches(
    store: &dyn Store,
    collection: &str,
    options: &ListOptions,
    source: &Source,
    residual: &Residual<'_, '_>,
    counted: Option<Counted>,
    budget: &Budget,
) -> Result<u64, PluginError> {
    let updated_after = options.updated_after.map(|after| after.0);
    match counted {
        Some(Counted { known: Some(total), .. }) => Ok(total),
        Some(Counted { conditions, ranges, .. }) => {
            Ok(store.count_matching(collection, &crate::Matching { ranges, conditions, updated_after }))
        }
        None => count_all(store, collection, source, residual, budget),
    }
}

/// A walk in a sort index, bounded by a range filter on it.
struct SortWalk<'w> {
    index: crate::indexes::Index,
    bounds: Option<&'w Range>,
    /// What `total` counts when indexes do not answer every filter.
    source: &'w Source,
}

/// A walk in a sort index: the records with the sort value in its order,
/// then those without it in id order (nulls last both ways), each tested
/// against every filter, until the page is full. A text index orders by a
/// prefix of the text: ties on it are sorted by the whole text.
fn walk_sort_index(
    store: &dyn Store,
    collection: &str,
    options: &ListOptions,
    walk: &SortWalk<'_>,
    (page_residual, residual): (&Residual<'_, '_>, &Residual<'_, '_>),
    counted: Option<Counted>,
    budget: &Budget,
) -> Result<Page, PluginError> {
    use crate::indexes::{SORTED, UNSORTED, sort_position};
    let reverse = options.sort.descending;
    let text = matches!(options.sort.field, SortField::Text(_));
    // Where a cursor resumes: in the sorted part at its value, or in the
    // unsorted part (its value is null) at its id. A text cursor resumes
    // at the start of its value's group of ties.
    let (mut segments, resume) = match &options.after {
        None => (vec![SORTED, UNSORTED], None),
        Some(Position { value, id }) => match sort_position(value) {
            Some(at) if text => {
                let id = if reverse { LAST_ID } else { FIRST_ID };
                (vec![SORTED, UNSORTED], Some(crate::IndexPosition::new(at, id)))
            }
            Some(at) => (vec![SORTED, UNSORTED], Some(index_position(at, id)?)),
            None => (vec![UNSORTED], Some(index_position(0, id)?)),
        },
    };
    // A range holds no record without the sort value.
    if walk.bounds.is_some() {
        segments.retain(|segment| *segment == SORTED);
    }
    let walks = segments
        .into_iter()
        .enumerate()
        .map(|(number, segment)| {
            let part = match walk.bounds {
                Some(range) if segment == SORTED => range_source(range),
                _ => Source { index: walk.index.name, values: vec![segment.to_owned()], from: None, until: None },
            };
            let after = if number == 0 { resume } else { None };
            let merged = MergedWalk::new(store, collection, &part, after, reverse, wanted(options));
            if text && segment == SORTED { merged.with_text_ties(options.sort, options.after.clone()) } else { merged }
        })
        .collect();
    let Collected { page, matched, more } = collect_page(walks, options, page_residual, budget)?;
    let total = if !more && options.after.is_none() {
        matched
    } else {
        count_matches(store, collection, options, walk.source, residual, counted, budget)?
    };
    let next = match page.last().filter(|_| more) {
        Some(last) => Some(Position {
            value: options.sort.field.of(last.record.at(options.sort.field.pointer())?.as_ref()),
            id: last.record.id.clone(),
        }),
        None => None,
    };
    finish_page(options, page.iter().map(|walked| &walked.record.bytes[..]), total, next)
}

/// Counts the source's records that match, walking all of them.
fn count_all(
    store: &dyn Store,
    collection: &str,
    source: &Source,
    residual: &Residual<'_, '_>,
    budget: &Budget,
) -> Result<u64, PluginError> {
    let mut walk = MergedWalk::new(store, collection, source, None, false, u64::from(SCAN_BATCH));
    let mut total = 0;
    while let Some(walked) = walk.next()? {
        budget.spend("count the total")?;
        if residual.passes(&walked.record)? {
            total += 1;
        }
    }
    Ok(total)
}

/// Visits each record passing every filter, walking the records of the
/// most selective indexed or range filter (every record without one); a
/// walk reading more than [`WORK_BUDGET`] records is refused, as a list's
/// total is, naming the filter to narrow.
pub(crate) fn for_each_matching(
    store: &dyn Store,
    collection: &str,
    filters: &[Filter<'_>],
    what: &str,
    mut visit: impl FnMut(&StoredRecord) -> Result<(), PluginError>,
) -> Result<(), PluginError> {
    let budget = Budget::new(filters);
    let everything = Residual { updated_after: None, filters, skip: None };
    let (source, residual) = match most_selective(store, collection, filters, true) {
        Some((_, position)) => {
            let answered = filters[position].range.as_ref().is_none_or(|range| range.exact);
            (filter_source(&filters[position]), Residual { skip: answered.then_some(position), ..everything })
        }
        None => (Source::everything(), everything),
    };
    let mut walk = MergedWalk::new(store, collection, &source, None, false, u64::from(SCAN_BATCH));
    while let Some(walked) = walk.next()? {
        budget.spend(what)?;
        if residual.passes(&walked.record)? {
            visit(&walked.record)?;
        }
    }
    Ok(())
}

/// Any order no walk keeps: read every candidate, sort, page. Only the
/// candidates' positions are kept; the page's records are read again by id,
/// so memory follows the candidates' sort values, not their records.
fn sort_everything(
    store: &dyn Store,
    collection: &str,
    options: &ListOptions,
    source: &Source,
    residual: &Residual<'_, '_>,
    budget: &Budget,
) -> Result<Page, PluginError> {
    let mut walk = MergedWalk::new(store, collection, source, None, false, u64::from(SCAN_BATCH));
    let mut selected: Vec<Position> = Vec::new();
    while let Some(Walked { record, .. }) = walk.next()? {
        budget.spend("answer this page")?;
        if residual.passes(&record)? {
            let value = options.sort.field.of(record.at(options.sort.field.pointer())?.as_ref());
            selected.push(Position { value, id: record.id });
        }
    }
    selected.sort_by(|a, b| options.sort.compare(a, b));

    let start = match &options.after {
        Some(cursor) => selected.partition_point(|p| options.sort.compare(p, cursor) != Ordering::Greater),
        None => usize::try_from(options.offset).unwrap_or(usize::MAX).min(selected.len()),
    };
    let end = start.saturating_add(options.limit as usize).min(selected.len());
    let page = &selected[start..end];
    let mut records = Vec::with_capacity(page.len());
    for position in page {
        // Records are never deleted; one missing here is the store's fault.
        let record = store.get(collection, &position.id).ok_or_else(|| {
            PluginError::Internal(format!("record {} of {collection} vanished during a list", position.id))
        })?;
        records.push(record);
    }

    let next = page.last().filter(|_| end < selected.len()).cloned();
    finish_page(options, records.iter().map(Vec::as_slice), selected.len() as u64, next)
}

/// A page of the records named by `id` that pass every filter: each is
/// read by its id (at most [`crate::query::MAX_LIST_VALUES`]), tested and
/// sorted, whatever the filters.
fn list_named(
    store: &dyn Store,
    collection: &str,
    options: &ListOptions,
    ids: &[String],
    filters: &[Filter<'_>],
) -> Result<Page, PluginError> {
    let residual = Residual::of(options, filters);
    let mut selected: Vec<(Position, Bytes)> = Vec::new();
    for id in ids {
        let Some(bytes) = store.get(collection, id) else { continue };
        let record = StoredRecord::new(id.clone(), bytes);
        if residual.passes(&record)? {
            let value = options.sort.field.of(record.at(options.sort.field.pointer())?.as_ref());
            selected.push((Position { value, id: id.clone() }, record.bytes));
        }
    }
    selected.sort_by(|(a, _), (b, _)| options.sort.compare(a, b));
    let start = match &options.after {
        Some(cursor) => selected.partition_point(|(p, _)| options.sort.compare(p, cursor) != Ordering::Greater),
        None => usize::try_from(options.offset).unwrap_or(usize::MAX).min(selected.len()),
    };
    let end = start.saturating_add(options.limit as usize).min(selected.len());
    let next = selected[..end].last().filter(|_| end < selected.len()).map(|(position, _)| position.clone());
    let page = &selected[start..end];
    finish_page(options, page.iter().map(|(_, bytes)| &bytes[..]), selected.len() as u64, next)
}

/// What a record walked from an index must also meet: `updatedAfter`
/// and the filters the index did not answer. The record is parsed only
/// when a filter has to test it.
pub(crate) struct Residual<'f, 'a> {
    updated_after: Option<Timestamp>,
    filters: &'f [Filter<'a>],
    /// A filter the walk already answers (a range bounding it).
    skip: Option<usize>,
}

impl<'f, 'a> Residual<'f, 'a> {
    fn of(options: &ListOptions, filters: &'f [Filter<'a>]) -> Residual<'f, 'a> {
        Residual { updated_after: options.updated_after, filters, skip: None }
    }

    /// What an export tests on each record it walks: every filter.
    pub(crate) fn exporting(updated_after: Option<Timestamp>, filters: &'f [Filter<'a>]) -> Residual<'f, 'a> {
        Residual { updated_after, filters, skip: None }
    }

    /// Whether [`Residual::passes`] passes every record without reading it.
    fn reads_nothing(&self) -> bool {
        self.updated_after.is_none() && (0..self.filters.len()).all(|number| Some(number) == self.skip)
    }

    pub(crate) fn passes(&self, record: &StoredRecord) -> Result<bool, PluginError> {
        if let Some(after) = self.updated_after {
            let updated = record.at("/updated_at")?;
            if updated.as_ref().and_then(Value::as_str).and_then(Timestamp::parse).is_none_or(|at| at <= after) {
                return Ok(false);
            }
        }
        let mut tested = Vec::with_capacity(self.filters.len());
        for (number, filter) in self.filters.iter().enumerate() {
            if Some(number) == self.skip {
                continue;
            }
            // An exact range reads one field, not the whole record.
            match &filter.range {
                Some(range) if range.exact => {
                    if !range.holds_value(record.at(range.index.position_pointer())?.as_ref()) {
                        return Ok(false);
                    }
                }
                _ => tested.push(filter),
            }
        }
        if tested.is_empty() {
            return Ok(true);
        }
        let value = record.value()?;
        Ok(tested.iter().all(|filter| (filter.test)(value)))
    }
}

/// Joins JSON documents into one JSON array without parsing them again.
pub fn join_json_array<'a>(items: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.push(b'[');
    for (index, item) in items.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
    out
}

/// The string at `pointer`, if it is one.
pub fn text_at<'v>(record: &'v Value, pointer: &str) -> Option<&'v str> {
    record.pointer(pointer).and_then(Value::as_str)
}

/// Whether any string in the array at `pointer` is in `wanted`.
pub fn array_contains_any(record: &Value, pointer: &str, wanted: &[String]) -> bool {
    record
        .pointer(pointer)
        .and_then(Value::as_array)
        .is_some_and(|items| items.iter().filter_map(Value::as_str).any(|item| wanted.iter().any(|w| w == item)))
}

/// Whether the string at `pointer` is one of `wanted`.
pub fn text_in<S: AsRef<str>>(record: &Value, pointer: &str, wanted: &[S]) -> bool {
    text_at(record, pointer).is_some_and(|value| wanted.iter().any(|w| w.as_ref() == value))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Request;
    use crate::testing::{MemoryStore, record_id, short_id};

    const SORTS: &[(&str, SortField)] = &[
        ("created_at", SortField::Timestamp("/created_at")),
        ("name", SortField::Text("/name")),
        ("severity", SortField::Rank("/severity", &["low", "high", "critical"])),
    ];

    fn store() -> MemoryStore {
        let mut store = MemoryStore::default();
        let rows = [
            ("01", "b", Some("high"), "2026-01-01T00:00:00Z"),
            ("02", "a", None, "2026-01-02T00:00:00Z"),
            ("03", "C", Some("critical"), "2026-01-03T00:00:00Z"),
            ("04", "a", Some("low"), "2026-01-04T00:00:00Z"),
            ("05", "d", Some("high"), "2026-01-05T00:00:00Z"),
        ];
        for (id, name, severity, created) in rows {
            store.insert(
                "scopes",
                json!({"id": record_id(id), "name": name, "severity": severity, "created_at": created,
                       "updated_at": created}),
            );
        }
        store
    }

    fn ids(page: &Page) -> Vec<String> {
        let records: Vec<Value> = serde_json::from_slice(&page.data).expect("page data is JSON");
        records.iter().map(|r| short_id(r["id"].as_str().unwrap_or_default())).collect()
    }

    fn list(store: &MemoryStore, query: &[(&str, &str)]) -> Result<Page, PluginError> {
        let request = Request::with_query("/things", query);
        let names: Vec<&str> = LIST_PARAMETERS.iter().map(|param| param.name).collect();
        let mut parsed = Query::new(&request.query, &names);
        let options = ListOptions::parse(&mut parsed, SORTS);
        parsed.finish()?;
        list_records(store, "scopes", &options, |_| true)
    }

    #[test]
    fn default_order_is_created_at_with_the_envelope_filled() {
        let page = list(&store(), &[("limit", "2")]).expect("ok");
        assert_eq!(ids(&page), ["01", "02"]);
        assert_eq!((page.total, page.limit, page.offset), (5, 2, Some(0)));
        assert!(page.next_cursor.is_some());
    }

    #[test]
    fn sorts_with_ties_by_id_and_nulls_last() {
        let store = store();
        assert_eq!(ids(&list(&store, &[("sort", "name")]).expect("ok")), ["02", "04", "01", "03", "05"]);
        assert_eq!(ids(&list(&store, &[("sort", "-name")]).expect("ok")), ["05", "03", "01", "04", "02"]);
        assert_eq!(ids(&list(&store, &[("sort", "-severity")]).expect("ok")), ["03", "05", "01", "04", "02"]);
        assert_eq!(ids(&list(&store, &[("sort", "severity")]).expect("ok")), ["04", "01", "05", "03", "02"]);
    }

    #[test]
    fn cursor_walk_equals_offset_pages() {
        let store = store();
        for sort in ["created_at", "-name", "severity", "-severity"] {
            let mut walked = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut query = vec![("limit", "2"), ("sort", sort)];
                if let Some(c) = cursor.as_deref() {
                    query.push(("cursor", c));
                }
                let page = list(&store, &query).expect("ok");
                assert_eq!(page.offset.is_none(), cursor.is_some());
                walked.extend(ids(&page));
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            let all = ids(&list(&store, &[("sort", sort)]).expect("ok"));
            assert_eq!(walked, all, "sort {sort}");
        }
    }

    #[test]
    fn offset_beyond_the_end_is_an_empty_last_page() {
        let page = list(&store(), &[("offset", "10")]).expect("ok");
        assert_eq!(ids(&page), Vec::<String>::new());
        assert_eq!((page.total, page.next_cursor), (5, None));
    }

    #[test]
    fn updated_after_is_strict() {
        let page = list(&store(), &[("updatedAfter", "2026-01-03T00:00:00Z")]).expect("ok");
        assert_eq!(ids(&page), ["04", "05"]);
    }

    #[test]
    fn bad_parameters_are_named() {
        let store = store();
        let cursor = list(&store, &[("limit", "1")]).expect("ok").next_cursor.expect("more");
        for (query, name) in [
            (vec![("limit", "0")], "limit"),
            (vec![("limit", "101")], "limit"),
            (vec![("sort", "bogus")], "sort"),
            (vec![("sort", "-")], "sort"),
            (vec![("cursor", "garbage")], "cursor"),
            (vec![("cursor", cursor.as_str()), ("offset", "1")], "cursor"),
            (vec![("cursor", cursor.as_str()), ("sort", "name")], "cursor"),
            (vec![("updatedAfter", "yesterday")], "updatedAfter"),
        ] {
            match list(&store, &query) {
                Err(PluginError::InvalidParameters(list)) => assert_eq!(list[0].name, name, "{query:?}"),
                other => panic!("{query:?} gave {other:?}"),
            }
        }
    }

    /// A store that counts the records it hands out and, without
    /// `positions`, gives none from its index walks (each is then read
    /// from the record, as from a host before `index-scan-batch`). With
    /// `holding` it holds the records a page may name, as the host does
    /// for `held-lists.list`.
    struct Counting {
        inner: MemoryStore,
        read: std::cell::Cell<usize>,
        positions: bool,
        holding: bool,
        held: std::cell::RefCell<Vec<crate::Bytes>>,
    }

    impl Counting {
        fn new(inner: MemoryStore) -> Counting {
            Counting {
                inner,
                read: std::cell::Cell::new(0),
                positions: true,
                holding: false,
                held: std::cell::RefCell::new(Vec::new()),
            }
        }

        /// The page's records as the host writes them, held or not.
        fn records_of(&self, page: &Page) -> Vec<u8> {
            match &page.held {
                Some(numbers) => {
                    assert!(page.data.is_empty(), "a held page carries no bytes of its own");
                    let held = self.held.borrow();
                    join_json_array(numbers.iter().map(|&number| &held[number as usize][..]))
                }
                None => page.data.clone(),
            }
        }
    }

    impl Store for Counting {
        fn get(&self, collection: &str, id: &str) -> Option<Vec<u8>> {
            self.read.set(self.read.get() + 1);
            self.inner.get(collection, id)
        }
        fn scan(&self, collection: &str, walk: &crate::RecordWalk) -> Vec<crate::Entry> {
            let entries = self.inner.scan(collection, walk);
            self.read.set(self.read.get() + entries.len());
            entries
        }
        fn count(&self, collection: &str) -> u64 {
            self.inner.count(collection)
        }
        fn organization(&self) -> Vec<u8> {
            self.inner.organization()
        }
        fn index_scan(&self, collection: &str, walk: &crate::IndexWalk<'_>) -> Vec<crate::Entry> {
            let mut entries = self.inner.index_scan(collection, walk);
            self.read.set(self.read.get() + entries.len());
            if !self.positions {
                entries.iter_mut().for_each(|entry| entry.position = None);
            }
            entries
        }
        fn index_positions(&self, collection: &str, walk: &crate::IndexWalk<'_>) -> Vec<crate::IndexPosition> {
            self.inner.index_positions(collection, walk)
        }
        fn index_scan_held(&self, collection: &str, walk: &crate::IndexWalk<'_>) -> Option<Vec<crate::Held>> {
            if !self.holding {
                return None;
            }
            let mut held = self.held.borrow_mut();
            let entries = self.inner.index_scan(collection, walk);
            Some(
                entries
                    .into_iter()
                    .map(|entry| {
                        held.push(entry.value);
                        let number = u32::try_from(held.len() - 1).expect("few");
                        crate::Held { id: entry.id, position: entry.position.expect("walked"), number }
                    })
                    .collect(),
            )
        }
        fn index_count(&self, collection: &str, index: &str, value: &str) -> u64 {
            self.inner.index_count(collection, index, value)
        }
        fn count_matching(&self, collection: &str, matching: &crate::Matching) -> u64 {
            self.inner.count_matching(collection, matching)
        }
        fn count_groups(
            &self,
            collection: &str,
            group_by: &[String],
            matching: &crate::Matching,
        ) -> Vec<crate::GroupCount> {
            self.inner.count_groups(collection, group_by, matching)
        }
    }

    #[test]
    fn pages_and_cursors_are_the_same_whether_the_store_gives_positions_or_not() {
        let sorts: &[(&'static str, SortField)] = &[
            ("created_at", SortField::Timestamp("/created_at")),
            ("cvss", SortField::Number("/cvss/base_score")),
            ("severity", SortField::Rank("/severity", crate::contract::SEVERITY_RANK)),
        ];
        let (given, read) = (many_findings(), Counting { positions: false, ..Counting::new(many_findings()) });
        let queries: &[&[(&str, &str)]] = &[
            &[("limit", "100")],
            &[("sort", "-cvss"), ("limit", "100")],
            &[("sort", "severity"), ("limit", "100")],
            &[("updatedAfter", "2026-01-01T01:35:00Z"), ("sort", "-created_at"), ("limit", "100")],
        ];
        for query in queries {
            let mut cursor: Option<String> = None;
            // Twelve pages: past the first batch into full ones.
            for page_number in 0..12 {
                let mut query = query.to_vec();
                if let Some(cursor) = &cursor {
                    query.push(("cursor", cursor));
                }
                let request = Request::with_query("/v1/vulnerability-findings", &query);
                let (parsed, options) = parse_list_request(&request, &[], sorts);
                parsed.finish().expect("valid");
                let from_store = list_filtered(&given, "vulnerability-findings", &options, Vec::new()).expect("page");
                let from_records = list_filtered(&read, "vulnerability-findings", &options, Vec::new()).expect("page");
                assert_eq!(from_store.data, from_records.data, "{query:?}, page {page_number}");
                assert_eq!(from_store.total, from_records.total, "{query:?}, page {page_number}");
                assert_eq!(from_store.next_cursor, from_records.next_cursor, "{query:?}, page {page_number}");
                let Some(next) = from_store.next_cursor else { break };
                cursor = Some(next);
            }
        }
    }

    #[test]
    fn pages_of_held_records_are_the_pages_of_records_read() {
        let sorts: &[(&'static str, SortField)] =
            &[("created_at", SortField::Timestamp("/created_at")), ("cvss", SortField::Number("/cvss/base_score"))];
        let (read, holding) = (many_findings(), Counting { holding: true, ..Counting::new(many_findings()) });
        fn critical() -> Vec<Filter<'static>> {
            vec![Filter::by_index("vulnerability-findings", "severity", owned(vec!["critical"]))]
        }
        fn critical_or_high() -> Vec<Filter<'static>> {
            vec![Filter::by_index("vulnerability-findings", "severity", owned(vec!["critical", "high"]))]
        }
        fn open_and_critical() -> Vec<Filter<'static>> {
            let mut filters = critical();
            filters.push(Filter::by_index("vulnerability-findings", "status", owned(vec!["open"])));
            filters
        }
        type Filters = fn() -> Vec<Filter<'static>>;
        /// A query, its filters, and whether its first page and the pages
        /// after it by cursor hold their records.
        type Case = (&'static [(&'static str, &'static str)], Filters, (bool, bool));
        let cases: &[Case] = &[
            (&[("limit", "100")], Vec::new, (true, true)),
            (&[("limit", "7"), ("sort", "-created_at")], Vec::new, (true, true)),
            (&[("limit", "50")], critical, (true, true)),
            (&[("limit", "50"), ("sort", "-created_at")], critical_or_high, (true, true)),
            (&[("limit", "20"), ("offset", "40")], critical, (true, true)),
            // An offset past what a walk may hold reads its records.
            (&[("limit", "10"), ("offset", "2000")], Vec::new, (false, true)),
            // A filter the walked index does not answer reads each record.
            (&[("limit", "50")], open_and_critical, (false, false)),
            (&[("limit", "50"), ("updatedAfter", "2026-01-01T01:35:00Z")], Vec::new, (false, false)),
            // Other orders read their records.
            (&[("limit", "50"), ("sort", "-cvss")], Vec::new, (false, false)),
        ];
        for &(query, filters, (first_held, later_held)) in cases {
            let mut cursor: Option<String> = None;
            for page_number in 0..4 {
                let mut query = query.to_vec();
                if let Some(cursor) = &cursor {
                    query.retain(|(name, _)| *name != "offset");
                    query.push(("cursor", cursor));
                }
                let request = Request::with_query("/v1/vulnerability-findings", &query);
                let (parsed, options) = parse_list_request(&request, &[], sorts);
                parsed.finish().expect("valid");
                let from_read = list_filtered(&read, "vulnerability-findings", &options, filters()).expect("page");
                let from_held = list_filtered(&holding, "vulnerability-findings", &options, filters()).expect("page");
                let held = if page_number == 0 { first_held } else { later_held };
                assert_eq!(from_held.held.is_some(), held, "{query:?}, page {page_number}");
                assert!(from_read.held.is_none());
                assert_eq!(holding.records_of(&from_held), from_read.data, "{query:?}, page {page_number}");
                assert_eq!(from_held.total, from_read.total, "{query:?}, page {page_number}");
                assert_eq!(from_held.next_cursor, from_read.next_cursor, "{query:?}, page {page_number}");
                assert_eq!(from_held.offset, from_read.offset, "{query:?}, page {page_number}");
                let Some(next) = from_read.next_cursor else { break };
                cursor = Some(next);
            }
        }
    }

    /// 6,000 findings, beyond `SMALL_RANGE`: sorts the host keeps a sort
    /// index for walk it. Some have no CVSS (nulls sort last both ways),
    /// many share a score or a first-seen time (ties by id).
    fn many_findings() -> MemoryStore {
        let mut store = MemoryStore::default();
        let at =
            |seconds: u32| format!("2026-01-01T{:02}:{:02}:{:02}Z", seconds / 3600, (seconds / 60) % 60, seconds % 60);
        for n in 0..6000u32 {
            let cvss = if n % 7 == 0 { Value::Null } else { json!({"base_score": f64::from((n * 37) % 101) / 10.0}) };
            store.insert(
                "vulnerability-findings",
                json!({
                    "id": format!("0192f0b4-0000-7000-8000-{n:012}"),
                    "severity": crate::contract::SEVERITY_RANK[(n as usize * 13) % 5],
                    "status": if n % 3 == 0 { "resolved" } else { "open" },
                    "cvss": cvss,
                    "first_seen_at": at((n * 17) % 3000),
                    "created_at": at(n),
                    "updated_at": at((n * 7919) % 6000),
                }),
            );
        }
        store
    }

    #[test]
    fn a_wide_updated_after_walks_the_usual_order_and_a_narrow_one_the_updates() {
        let sorts: &[(&'static str, SortField)] =
            &[("created_at", SortField::Timestamp("/created_at")), ("cvss", SortField::Number("/cvss/base_score"))];
        let at =
            |seconds: u32| format!("2026-01-01T{:02}:{:02}:{:02}Z", seconds / 3600, (seconds / 60) % 60, seconds % 60);
        for (since, sort) in [(100, "created_at"), (100, "-cvss"), (5950, "created_at"), (5950, "-cvss")] {
            let store = many_findings();
            let after = at(since);
            let request =
                Request::with_query("/v1/vulnerability-findings", &[("updatedAfter", &after), ("sort", sort)]);
            let (query, options) = parse_list_request(&request, &[], sorts);
            query.finish().expect("valid");
            let page = list_filtered(&store, "vulnerability-findings", &options, Vec::new()).expect("page");
            // `updated_at` of record n is at((n * 7919) % 6000): a permutation.
            let expected_total = (0..6000u32).filter(|n| (n * 7919) % 6000 > since).count() as u64;
            assert_eq!(page.total, expected_total, "since {since}, {sort}");
            let data: Vec<Value> = serde_json::from_slice(&page.data).expect("json");
            assert_eq!(data.len() as u64, expected_total.min(50));
            assert!(data.iter().all(|r| r["updated_at"].as_str().expect("text") > after.as_str()));
        }
    }

    #[test]
    fn sort_index_walks_agree_with_sorting_every_record() {
        let store = many_findings();
        let mut records: Vec<Value> = Vec::new();
        loop {
            let after =
                records.last().and_then(|r: &Value| r["id"].as_str()).and_then(|id| crate::Uuid::parse_str(id).ok());
            let batch = store.scan("vulnerability-findings", &crate::RecordWalk::new(1000).after(after));
            if batch.is_empty() {
                break;
            }
            records.extend(batch.iter().map(|entry| serde_json::from_slice::<Value>(&entry.value).expect("json")));
        }
        assert_eq!(records.len(), 6000);
        let sorts: &[(&'static str, SortField)] = &[
            ("created_at", SortField::Timestamp("/created_at")),
            ("cvss", SortField::Number("/cvss/base_score")),
            ("severity", SortField::Rank("/severity", crate::contract::SEVERITY_RANK)),
            ("first_seen_at", SortField::Timestamp("/first_seen_at")),
        ];
        fn both_statuses() -> Filter<'static> {
            Filter::by_index("vulnerability-findings", "status", owned(vec!["open", "resolved"]))
        }
        fn serious() -> Filter<'static> {
            Filter::by_index("vulnerability-findings", "severity", owned(vec!["critical", "high"]))
        }
        fn scored() -> Filter<'static> {
            Filter::test(|record: &Value| {
                record.pointer("/cvss/base_score").and_then(Value::as_f64).is_some_and(|s| s >= 5.0)
            })
        }
        fn cvss_at_least_4() -> Filter<'static> {
            let above = crate::indexes::number_position(4.0).checked_sub(1);
            Filter::in_range("vulnerability-findings", "minCvss", "by_cvss", above, None)
        }
        fn seen_after_00_20() -> Filter<'static> {
            let after = Timestamp::parse("2026-01-01T00:20:00Z").map(|t| t.0);
            Filter::in_range("vulnerability-findings", "firstSeenAfter", "by_first_seen_at", after, None)
        }
        /// A name, the filters, and the oracle's test for them.
        type Case = (&'static str, fn() -> Vec<Filter<'static>>, fn(&Value) -> bool);
        let cases: [Case; 6] = [
            (
                "a range",
                || vec![cvss_at_least_4()],
                |r| r.pointer("/cvss/base_score").and_then(Value::as_f64).is_some_and(|s| s >= 4.0),
            ),
            (
                "a range and statuses",
                || vec![seen_after_00_20(), both_statuses()],
                |r| r["first_seen_at"].as_str().is_some_and(|t| t > "2026-01-01T00:20:00Z"),
            ),
            (
                "two ranges",
                || vec![seen_after_00_20(), cvss_at_least_4()],
                |r| {
                    r["first_seen_at"].as_str().is_some_and(|t| t > "2026-01-01T00:20:00Z")
                        && r.pointer("/cvss/base_score").and_then(Value::as_f64).is_some_and(|s| s >= 4.0)
                },
            ),
            ("none", Vec::new, |_| true),
            (
                "statuses and a test",
                || vec![both_statuses(), scored()],
                |r| r.pointer("/cvss/base_score").and_then(Value::as_f64).is_some_and(|s| s >= 5.0),
            ),
            (
                "statuses and severities",
                || vec![both_statuses(), serious()],
                |r| matches!(r["severity"].as_str(), Some("critical" | "high")),
            ),
        ];
        // The first page by CVSS, descending, reads about a page, not all
        // (a candidate set under `SMALL_RANGE` would be read whole and sorted).
        let counting = Counting::new(many_findings());
        let request = Request::with_query("/v1/vulnerability-findings", &[("sort", "-cvss")]);
        let (_, options) = parse_list_request(&request, &[], sorts);
        let first = list_filtered(&counting, "vulnerability-findings", &options, Vec::new()).expect("page");
        assert_eq!(first.total, 6000);
        assert!(counting.read.get() < 600, "read {} records for one page", counting.read.get());
        for (key, _) in &sorts[1..] {
            for descending in [false, true] {
                for (name, filters, oracle) in cases {
                    let sort = format!("{}{key}", if descending { "-" } else { "" });
                    let what = format!("sort={sort}, filters: {name}");
                    let parse = |query: &[(&str, &str)]| {
                        let request = Request::with_query("/v1/vulnerability-findings", query);
                        let (query, options) = parse_list_request(&request, &[], sorts);
                        query.finish().expect("valid");
                        options
                    };
                    let options = parse(&[("sort", &sort)]);
                    let mut expected: Vec<&Value> = records.iter().filter(|r| oracle(r)).collect();
                    let position = |r: &Value| Position {
                        value: options.sort.field.read(r),
                        id: r["id"].as_str().expect("id").to_owned(),
                    };
                    expected.sort_by(|a, b| options.sort.compare(&position(a), &position(b)));
                    let expected: Vec<&str> = expected.iter().map(|r| r["id"].as_str().expect("id")).collect();

                    // The first 500 by cursor; then from an offset page
                    // 950 before the end, by cursor to the end (through the
                    // records without a CVSS, which come last).
                    for start in [0, expected.len().saturating_sub(950)] {
                        let mut walked: Vec<String> = Vec::new();
                        let mut cursor: Option<String> = None;
                        loop {
                            let offset = start.to_string();
                            let mut query = vec![("sort", sort.as_str()), ("limit", "100")];
                            match &cursor {
                                Some(cursor) => query.push(("cursor", cursor)),
                                None => query.push(("offset", &offset)),
                            }
                            let page = list_filtered(&store, "vulnerability-findings", &parse(&query), filters())
                                .expect("page");
                            assert_eq!(page.total, expected.len() as u64, "{what}: total");
                            let data: Vec<Value> = serde_json::from_slice(&page.data).expect("json");
                            walked.extend(data.iter().map(|r| r["id"].as_str().expect("id").to_owned()));
                            match page.next_cursor {
                                Some(next) if start > 0 || walked.len() < 500 => cursor = Some(next),
                                _ => break,
                            }
                        }
                        let end = (start + walked.len()).min(expected.len());
                        assert_eq!(walked, expected[start..end], "{what}: walk from {start}");
                        if start > 0 {
                            assert_eq!(end, expected.len(), "{what}: the walk reaches the end");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn text_sort_index_walks_agree_with_sorting_every_record() {
        let mut store = MemoryStore::default();
        let stems = ["team 0001: ", "TEAM 0001: ", "team 0001:", "équipe ", "a", "", "zz-top-", "Team 0001: Z"];
        for n in 0..6000u32 {
            let name = match n % 97 {
                0 => Value::Null,
                _ => json!(format!("{}{}", stems[(n as usize * 7) % stems.len()], (n * 7919) % 40)),
            };
            let at = format!("2026-01-01T{:02}:{:02}:{:02}Z", n / 3600, (n / 60) % 60, n % 60);
            store.insert(
                "scopes",
                json!({"id": format!("0192f0b4-0000-7000-8000-{n:012}"), "name": name, "status": "active",
                       "created_at": at, "updated_at": at}),
            );
        }
        let everything: Vec<Value> = store
            .collections
            .get("scopes")
            .map(|records| records.values().map(|bytes| serde_json::from_slice(bytes).expect("json")).collect())
            .unwrap_or_default();
        for sort in ["name", "-name"] {
            let options = |query: &[(&str, &str)]| {
                let request = Request::with_query("/v1/scopes", query);
                let (query, options) = parse_list_request(&request, &[], SORTS);
                query.finish().expect("valid");
                options
            };
            let order = options(&[("sort", sort)]).sort;
            let mut expected: Vec<Position> = everything
                .iter()
                .map(|r| Position { value: order.field.read(r), id: r["id"].as_str().expect("id").to_owned() })
                .collect();
            expected.sort_by(|a, b| order.compare(a, b));
            let expected: Vec<String> = expected.into_iter().map(|p| p.id).collect();
            let mut walked: Vec<String> = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut query = vec![("sort", sort), ("limit", "100")];
                if let Some(cursor) = cursor.as_deref() {
                    query.push(("cursor", cursor));
                }
                let page = list_filtered(&store, "scopes", &options(&query), Vec::new()).expect("page");
                assert_eq!(page.total, 6000);
                walked.extend(ids(&page));
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(walked, expected, "sort={sort}: cursor walk");
            for offset in [0usize, 1, 99, 2500, 5950, 6000] {
                let text = offset.to_string();
                let page = list_filtered(&store, "scopes", &options(&[("sort", sort), ("offset", &text)]), Vec::new())
                    .expect("page");
                assert_eq!(ids(&page), expected[offset..(offset + 50).min(6000)], "sort={sort} offset {offset}");
            }
        }
    }

    #[test]
    fn a_request_too_broad_to_count_names_what_to_narrow() {
        let store = many_findings();
        let request = Request::with_query("/v1/vulnerability-findings", &[]);
        let (_, options) = parse_list_request(&request, &[], SORTS);
        let broad = || {
            vec![
                Filter::test(|_| true).named("q"),
                Filter::test(|_| true),
                Filter::by_index("vulnerability-findings", "status", owned(vec!["open"])),
            ]
        };
        // 6,000 records to count fit the budget; a budget of fewer would not.
        assert!(list_filtered(&store, "vulnerability-findings", &options, broad()).is_ok());
        let budget = Budget { read: std::cell::Cell::new(WORK_BUDGET - 10), param: Budget::new(&broad()).param };
        let walk = MergedWalk::new(&store, "vulnerability-findings", &Source::everything(), None, false, 100);
        let filters = broad();
        let residual = Residual::of(&options, &filters);
        let refused = collect_page(vec![walk], &ListOptions { limit: 100, ..options.clone() }, &residual, &budget);
        match refused {
            Err(PluginError::InvalidParameters(list)) => {
                assert_eq!(list[0].name, "q");
                assert!(list[0].reason.contains("too broad") && list[0].reason.contains("narrow q"), "{list:?}");
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("not refused"),
        }
    }

    #[test]
    fn a_selective_filter_reads_only_its_index_range_and_a_page_stops_the_walk() {
        let mut inner = MemoryStore::default();
        for n in 0..3000 {
            let status = if n % 100 == 0 { "archived" } else { "active" };
            let created = format!("2026-01-01T{:02}:{:02}:{:02}Z", n / 3600, (n / 60) % 60, n % 60);
            let id = format!("0192f0b4-0000-7000-8000-{n:012}");
            inner.insert("scopes", json!({"id": id, "status": status, "created_at": created}));
        }
        let store = Counting::new(inner);
        let list = |query: &[(&str, &str)], filters: Vec<Filter>| {
            let request = Request::with_query("/v1/scopes", query);
            let (query, options) =
                parse_list_request(&request, &[Param::new("status", ParamKind::Text { max: 64 }, "")], SORTS);
            query.finish().expect("valid");
            list_filtered(&store, "scopes", &options, filters).expect("list")
        };

        let archived =
            list(&[("status", "archived")], vec![Filter::by_index("scopes", "status", vec!["archived".into()])]);
        assert_eq!(archived.total, 30);
        assert!(store.read.get() <= 30, "read {} records for 30 matches", store.read.get());

        store.read.set(0);
        let first_page = list(&[("limit", "10")], vec![]);
        assert_eq!((first_page.total, first_page.next_cursor.is_some()), (3000, true));
        assert!(store.read.get() <= 32, "read {} records for a page of 10", store.read.get());
    }
}
