//! Guest-side helpers every esr plugin shares.
//!
//! A plugin keeps its logic in plain Rust against the [`Store`] trait, so the
//! same code is unit-tested natively and runs inside the component. This
//! crate holds what every group needs:
//!
//! - [`query`]: strict query-parameter parsing that collects every problem.
//! - [`list`]: filtering, sorting, `limit`/`offset`/`cursor` paging, `total`.
//! - [`group`]: a group over one collection, its list, item, summary and
//!   export written once ([`group::CollectionGroup`]).
//! - [`export`]: a collection's records in id order, chunk by chunk.
//! - [`importing`]: what report importers share beyond the converted report.
//! - `xml`: XML reports read safely, record by record.
//! - [`ocsf`]: a finding as an OCSF Vulnerability Finding (`format=ocsf`).
//! - The contract the host shares (crate `esr-contract`, re-exported):
//!   [`time`], [`schema`], [`contract`], [`text`], [`indexes`], [`limits`],
//!   and [`report`], the neutral report importers return;
//!   [`scanner_reports`] finds the real reports importers' tests read.
//! - [`component`]: the WIT glue macros that turn a [`ResourcePlugin`],
//!   [`DocumentPlugin`] or [`report::ReportImporter`] into a component
//!   (only active on `wasm32`).

#[cfg(target_arch = "wasm32")]
mod arena;
pub mod component;
pub mod export;
pub mod group;
pub mod importing;
pub mod list;
pub mod ocsf;
pub mod query;
#[cfg(not(target_arch = "wasm32"))]
pub mod scanner_reports;
mod stored;
pub mod summary;
pub mod xml;

// The WIT package and the macro generating its bindings (build.rs).
include!(concat!(env!("OUT_DIR"), "/wit_bindings.rs"));

/// What the generated bindings run on; the export macros name it.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

// The contract the host shares, under the names components know it by.
pub use bytes::Bytes;
pub use esr_contract::{Collection, Uuid, contract, indexes, limits, report, schema, sort, text, time};
// What the store's index reads name, the same types the host's store takes.
pub use esr_contract::indexes::{
    GroupCount, IndexCondition, IndexPosition, IndexRange, IndexWalk, Matching, RecordWalk,
};

/// The index `name` of the collection a component names (as the WIT
/// does, by its name), if both exist.
pub fn index_of(collection: &str, name: &str) -> Option<indexes::Index> {
    Collection::named(collection).and_then(|collection| indexes::find(collection, name))
}

/// Every component built with the SDK allocates from its instance arena.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: arena::InstanceAllocator = arena::InstanceAllocator;

/// A stored record with its id, as the host's store returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    /// The record as stored: a UTF-8 JSON object (a view of the batch it
    /// was read in, which is not copied again).
    pub value: Bytes,
    /// Where the record stands in the index an `index_scan` walked
    /// (`IndexPosition::position`); `None` from `scan`.
    pub position: Option<i64>,
}

impl Entry {
    /// The records of a `store.index-scan-batch` answer (its four lists),
    /// each record a view of `values`: copying them out would double what
    /// the call writes, and what the host then resets.
    ///
    /// # Panics
    ///
    /// When the lists disagree (the host's fault): the call then fails
    /// rather than answer from a batch cut short.
    pub fn from_batch(ids: &str, positions: &[i64], ends: &[u32], values: Vec<u8>) -> Vec<Entry> {
        use esr_contract::UUID_TEXT_LEN;
        let values = Bytes::from(values);
        let agree = ids.len() == positions.len() * UUID_TEXT_LEN
            && ends.len() == positions.len()
            && ends.last().map_or(values.is_empty(), |&end| end as usize == values.len())
            && ends.windows(2).all(|pair| pair[0] <= pair[1]);
        assert!(
            agree,
            "store.index-scan-batch: a malformed batch ({} bytes of ids, {} positions, {} ends, {} bytes of records)",
            ids.len(),
            positions.len(),
            ends.len(),
            values.len()
        );
        let mut start = 0;
        positions
            .iter()
            .zip(ends)
            .enumerate()
            .map(|(number, (&position, &end))| {
                let range = start..end as usize;
                start = range.end;
                let id = ids.get(number * UUID_TEXT_LEN..(number + 1) * UUID_TEXT_LEN).unwrap_or_default();
                Entry { id: id.to_owned(), value: values.slice(range), position: Some(position) }
            })
            .collect()
    }
}

/// A record the store holds for the rest of a call instead of handing it
/// over ([`Store::index_scan_held`]); a page names it by `number`
/// ([`Page::held`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub id: String,
    /// Where the record stands in the walked index.
    pub position: i64,
    pub number: u32,
}

impl Held {
    /// The records of a `store.index-scan-held` answer: the batch's first
    /// number, its ids (36 characters each) and positions.
    ///
    /// # Panics
    ///
    /// When the lists disagree (the host's fault), as
    /// [`Entry::from_batch`].
    pub fn from_batch(first: u32, ids: &str, positions: &[i64]) -> Vec<Held> {
        use esr_contract::UUID_TEXT_LEN;
        assert!(
            ids.len() == positions.len() * UUID_TEXT_LEN,
            "store.index-scan-held: a malformed batch ({} bytes of ids, {} positions)",
            ids.len(),
            positions.len()
        );
        (first..)
            .zip(positions)
            .enumerate()
            .map(|(index, (number, &position))| Held {
                id: ids.get(index * UUID_TEXT_LEN..(index + 1) * UUID_TEXT_LEN).unwrap_or_default().to_owned(),
                position,
                number,
            })
            .collect()
    }
}

/// Read-only access to the caller's records: the WIT `store` interface.
///
/// The host binds the caller's organization behind it; nothing here can
/// name another one.
pub trait Store {
    /// The record with this id, or `None`.
    fn get(&self, collection: &str, id: &str) -> Option<Vec<u8>>;
    /// The records of `walk` (see [`RecordWalk`]), in id (creation) order,
    /// at most 1,000.
    fn scan(&self, collection: &str, walk: &RecordWalk) -> Vec<Entry>;
    /// How many records the collection holds.
    fn count(&self, collection: &str) -> u64;
    /// The records of `walk` (see [`IndexWalk`] and [`indexes`]): those
    /// holding its value in its index, in index order, at most 1,000.
    fn index_scan(&self, collection: &str, walk: &IndexWalk<'_>) -> Vec<Entry>;
    /// Where the records [`Store::index_scan`] would hand out stand, from
    /// the index alone (no record is read).
    fn index_positions(&self, collection: &str, walk: &IndexWalk<'_>) -> Vec<IndexPosition>;
    /// How many records hold `value` in the index.
    fn index_count(&self, collection: &str, index: &str, value: &str) -> u64;
    /// How many records `matching` matches (see [`Matching`]): within its
    /// range, holding one of each condition's values, and updated strictly
    /// after its `updated_after`; from index counts and entries alone.
    fn count_matching(&self, collection: &str, matching: &Matching) -> u64;
    /// How many records `matching` matches per combination of the values
    /// they hold in the `group_by` indexes (one or two single-valued
    /// indexes), in the order of their values; combinations held by none
    /// are left out. From index counts and entries alone.
    fn count_groups(&self, collection: &str, group_by: &[String], matching: &Matching) -> Vec<GroupCount>;
    /// The caller's organization as a JSON object.
    fn organization(&self) -> Vec<u8>;
    /// The records [`Store::index_scan`] would hand out, held by the store
    /// for the page instead (`store.index-scan-held`): no bytes cross.
    /// `None` where the store holds no records (the caller then reads
    /// them); only a page answered as [`Page::held`] asks.
    fn index_scan_held(&self, _collection: &str, _walk: &IndexWalk<'_>) -> Option<Vec<Held>> {
        None
    }
}

/// One query parameter as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryParam {
    pub name: String,
    pub value: String,
}

/// What a plugin learns of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub query: Vec<QueryParam>,
    pub path: String,
    pub base_url: String,
}

impl Request {
    /// A request with these query parameters (for tests and native callers).
    pub fn with_query(path: &str, query: &[(&str, &str)]) -> Request {
        Request {
            query: query
                .iter()
                .map(|(name, value)| QueryParam { name: (*name).to_owned(), value: (*value).to_owned() })
                .collect(),
            path: path.to_owned(),
            base_url: String::new(),
        }
    }
}

/// One invalid parameter and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidParam {
    pub name: String,
    pub reason: String,
}

/// Why an operation failed; the host maps each case to a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginError {
    InvalidParameters(Vec<InvalidParam>),
    NotFound,
    Internal(String),
}

impl PluginError {
    /// A single invalid parameter.
    pub fn invalid(name: &str, reason: impl Into<String>) -> PluginError {
        PluginError::InvalidParameters(vec![InvalidParam { name: name.to_owned(), reason: reason.into() }])
    }
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The page's records as a UTF-8 JSON array (empty when `held`).
    pub data: Vec<u8>,
    /// The page's records by number, when the store holds them
    /// ([`Store::index_scan_held`]): the host writes them as the array.
    pub held: Option<Vec<u32>>,
    pub total: u64,
    pub limit: u32,
    pub offset: Option<u64>,
    pub next_cursor: Option<String>,
}

/// A query parameter a plugin accepts, for documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParameterInfo {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its value, as JSON text.
    pub schema: String,
    pub required: bool,
}

/// What a plugin serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub group: String,
    pub version: String,
    pub parameters: Vec<ParameterInfo>,
    pub sort_keys: Vec<String>,
    /// The JSON Schema of a record (or of the JSON document), as JSON text.
    pub response_schema: String,
    /// The collections its store may read, and [`ORGANIZATION`] for
    /// [`Store::organization`]; any other read fails the call.
    pub reads: Vec<String>,
}

/// The name a descriptor's `reads` gives [`Store::organization`].
pub use esr_contract::ORGANIZATION;

impl Descriptor {
    /// A descriptor from static tables; its response schema says nothing
    /// (`{}`) until [`Descriptor::with_response_schema`], and it reads
    /// nothing until [`Descriptor::with_reads`].
    pub fn new(group: &str, version: &str, parameters: &[query::Param], sort_keys: &[&str]) -> Descriptor {
        Descriptor {
            group: group.to_owned(),
            version: version.to_owned(),
            parameters: parameters
                .iter()
                .map(|param| ParameterInfo {
                    name: param.name.to_owned(),
                    description: param.description.to_owned(),
                    schema: param.schema().to_string(),
                    required: param.required,
                })
                .collect(),
            sort_keys: sort_keys.iter().map(|key| (*key).to_owned()).collect(),
            response_schema: "{}".to_owned(),
            reads: Vec::new(),
        }
    }

    /// The same descriptor, reading these collections (or [`ORGANIZATION`])
    /// as well.
    pub fn with_reads(mut self, reads: &[&str]) -> Descriptor {
        self.reads.extend(reads.iter().map(|read| (*read).to_owned()));
        self
    }

    /// The same descriptor, answering records (or documents) of this schema.
    pub fn with_response_schema(self, schema: &serde_json::Value) -> Descriptor {
        Descriptor { response_schema: schema.to_string(), ..self }
    }
}

/// A rendered downloadable document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub content_type: String,
    pub filename: String,
    pub body: Vec<u8>,
}

/// The read logic of one resource group.
pub trait ResourcePlugin {
    /// Whether its list pages hold the stored records as they are, so the
    /// host may write a page's records itself rather than have them cross
    /// into the component and back (`held-lists`, WIT 0.3.6; its `list`
    /// then gets a store that may hold them, and [`Page::held`] may be
    /// set). A plugin that reshapes a page's records leaves it `false`:
    /// its `list` then always sees their bytes. [`group::CollectionGroup`]
    /// sets it.
    const PAGES_ARE_STORED_RECORDS: bool = false;
    fn describe() -> Descriptor;
    fn list(store: &dyn Store, request: &Request) -> Result<Page, PluginError>;
    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError>;
    /// What its summary accepts; by default none is served.
    fn describe_summary() -> summary::SummaryInfo {
        summary::SummaryInfo::default()
    }
    /// Counts grouped by fields (see [`summary`]); by default `not-found`:
    /// the group serves no summary.
    fn summary(_store: &dyn Store, _request: &Request) -> Result<summary::Summary, PluginError> {
        Err(PluginError::NotFound)
    }
    /// The formats its export renders besides `esr`.
    fn export_formats() -> Vec<String> {
        Vec::new()
    }
    /// One chunk of its export (see [`export`]); by default `not-found`:
    /// the group serves no export.
    fn export_chunk(
        _store: &dyn Store,
        _request: &Request,
        _after: Option<&str>,
        _max_records: u32,
        _max_bytes: u32,
    ) -> Result<export::ExportChunk, PluginError> {
        Err(PluginError::NotFound)
    }
}

/// The logic of one downloadable document.
pub trait DocumentPlugin {
    fn describe() -> Descriptor;
    fn render(store: &dyn Store, request: &Request) -> Result<Rendered, PluginError>;
}

/// The one record with this id, or `not-found`; item reads take no query
/// parameters.
pub fn get_record(store: &dyn Store, collection: &str, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
    query::Query::new(&request.query, &[]).finish()?;
    store.get(collection, id).ok_or(PluginError::NotFound)
}

/// An in-memory [`Store`] for plugins' native unit tests.
pub mod testing {
    use std::cell::RefCell;
    use std::collections::{BTreeMap, HashMap};
    use std::ops::Bound;
    use std::rc::Rc;

    use crate::indexes::{Index, IndexKey};
    use crate::{Entry, IndexCondition, IndexPosition, IndexRange, IndexWalk, Matching, RecordWalk, Store};

    /// Records by collection, in id order, as the host keeps them.
    #[derive(Debug, Default)]
    pub struct MemoryStore {
        pub collections: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
        pub organization: Vec<u8>,
        /// Index entries and parsed records already worked out, with the
        /// collection's size then; [`MemoryStore::insert`] clears it.
        cache: RefCell<Cache>,
    }

    type IndexEntries = Rc<Vec<(IndexPosition, Vec<u8>)>>;

    #[derive(Debug, Default)]
    struct Cache {
        entries: HashMap<(String, String, String), (usize, IndexEntries)>,
        records: HashMap<String, (usize, Rc<Vec<serde_json::Value>>)>,
    }

    /// What test records' ids start with: [`record_id`].
    const TEST_ID_PREFIX: &str = "00000000-0000-7000-8000-0000000000";

    /// A test record's id: a UUID, as every stored record's is, ending in
    /// the two hex digits `short` ("01"), so that ids sort as `short` does.
    pub fn record_id(short: &str) -> String {
        assert!(short.len() == 2 && short.bytes().all(|b| b.is_ascii_hexdigit()), "two hex digits: {short:?}");
        format!("{TEST_ID_PREFIX}{}", short.to_ascii_lowercase())
    }

    /// The two digits a [`record_id`] ends in (any other id as it is), for
    /// assertions that read like the test's records.
    pub fn short_id(id: &str) -> String {
        id.strip_prefix(TEST_ID_PREFIX).unwrap_or(id).to_owned()
    }

    impl MemoryStore {
        /// An empty store whose `organization()` is this JSON object.
        pub fn for_organization(organization: &serde_json::Value) -> MemoryStore {
            MemoryStore { organization: organization.to_string().into_bytes(), ..MemoryStore::default() }
        }

        /// Adds a record under its `id` field, which must be a UUID, as
        /// every record the host stores has (a test of other ids would
        /// pass on records no store holds).
        pub fn insert(&mut self, collection: &str, record: serde_json::Value) {
            let id = record.get("id").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            assert!(crate::Uuid::try_parse(&id).is_ok(), "a record's id must be a UUID, as the host's are: {id:?}");
            self.collections.entry(collection.to_owned()).or_default().insert(id, record.to_string().into_bytes());
            *self.cache.get_mut() = Cache::default();
        }

        /// The collection's records, parsed.
        fn parsed(&self, collection: &str) -> Rc<Vec<serde_json::Value>> {
            let size = self.collections.get(collection).map_or(0, BTreeMap::len);
            if let Some((cached_size, records)) = self.cache.borrow().records.get(collection)
                && *cached_size == size
            {
                return records.clone();
            }
            let records: Rc<Vec<serde_json::Value>> = Rc::new(
                self.collections
                    .get(collection)
                    .map(|records| records.values().filter_map(|bytes| serde_json::from_slice(bytes).ok()).collect())
                    .unwrap_or_default(),
            );
            self.cache.borrow_mut().records.insert(collection.to_owned(), (size, records.clone()));
            records
        }
    }

    impl Store for MemoryStore {
        fn get(&self, collection: &str, id: &str) -> Option<Vec<u8>> {
            self.collections.get(collection)?.get(id).cloned()
        }

        fn scan(&self, collection: &str, walk: &RecordWalk) -> Vec<Entry> {
            let Some(records) = self.collections.get(collection) else { return Vec::new() };
            let entry = |(id, value): (&String, &Vec<u8>)| Entry {
                id: id.clone(),
                value: value.clone().into(),
                position: None,
            };
            let limit = walk.limit.min(1000);
            // Ids are UUIDs, whose text sorts as they do.
            let after = walk.after.map(|id| id.to_string());
            match (after.as_deref(), walk.reverse) {
                (None, false) => records.iter().take(limit).map(entry).collect(),
                (None, true) => records.iter().rev().take(limit).map(entry).collect(),
                (Some(after), false) => {
                    records.range::<str, _>((Bound::Excluded(after), Bound::Unbounded)).take(limit).map(entry).collect()
                }
                (Some(after), true) => records
                    .range::<str, _>((Bound::Unbounded, Bound::Excluded(after)))
                    .rev()
                    .take(limit)
                    .map(entry)
                    .collect(),
            }
        }

        fn count(&self, collection: &str) -> u64 {
            self.collections.get(collection).map_or(0, |c| c.len() as u64)
        }

        fn organization(&self) -> Vec<u8> {
            self.organization.clone()
        }

        fn index_scan(&self, collection: &str, walk: &IndexWalk<'_>) -> Vec<Entry> {
            let walked = self.walk(collection, walk);
            walked
                .into_iter()
                .map(|(at, value)| Entry { id: at.id.to_string(), value: value.into(), position: Some(at.position) })
                .collect()
        }

        fn index_positions(&self, collection: &str, walk: &IndexWalk<'_>) -> Vec<IndexPosition> {
            let walked = self.walk(collection, walk);
            walked.into_iter().map(|(position, _)| position).collect()
        }

        fn index_count(&self, collection: &str, index: &str, value: &str) -> u64 {
            self.index_entries(collection, index, value).len() as u64
        }

        fn count_matching(&self, collection: &str, matching: &Matching) -> u64 {
            let mut count = 0;
            self.for_each_matched("count-matching", collection, matching, |_| count += 1);
            count
        }

        fn count_groups(&self, collection: &str, group_by: &[String], matching: &Matching) -> Vec<crate::GroupCount> {
            assert!(
                (1..=2).contains(&group_by.len()),
                "store.count-groups by {} indexes; the host fails the call (give one or two)",
                group_by.len()
            );
            for index in group_by {
                let found = known_index("count-groups", collection, index);
                assert!(
                    matches!(found.key, IndexKey::Field(_) | IndexKey::Present(_)),
                    "store.count-groups by {index}, where a record may hold several values or none: the host fails \
                     the call"
                );
            }
            let mut groups: BTreeMap<Vec<String>, u64> = BTreeMap::new();
            self.for_each_matched("count-groups", collection, matching, |record| {
                let values: Vec<String> = group_by
                    .iter()
                    .filter_map(|index| {
                        crate::index_of(collection, index).and_then(|index| index.values(record).into_iter().next())
                    })
                    .collect();
                if values.len() == group_by.len() {
                    *groups.entry(values).or_default() += 1;
                }
            });
            groups.into_iter().map(|(values, count)| crate::GroupCount { values, count }).collect()
        }
    }

    impl MemoryStore {
        /// Visits each record `matching` matches, after refusing what the
        /// host refuses.
        fn for_each_matched(
            &self,
            call: &str,
            collection: &str,
            matching: &Matching,
            mut visit: impl FnMut(&serde_json::Value),
        ) {
            refuse_unknown_conditions(call, collection, &matching.conditions);
            assert!(
                matching.ranges.len() <= esr_contract::limits::MAX_RANGES,
                "store.{call} with {} ranges: the host fails the call",
                matching.ranges.len()
            );
            let in_ranges: Vec<_> = matching
                .ranges
                .iter()
                .map(|range| {
                    sort_index(call, collection, &range.index);
                    self.ids_in_range(collection, range)
                })
                .collect();
            for record in self.parsed(collection).iter() {
                let id = record.get("id").and_then(serde_json::Value::as_str).unwrap_or_default();
                if in_ranges.iter().all(|ids| ids.contains(id))
                    && matches_all(collection, record, &matching.conditions, matching.updated_after)
                {
                    visit(record);
                }
            }
        }
    }

    impl MemoryStore {
        /// The ids of the records in a range of a sort index.
        fn ids_in_range(&self, collection: &str, range: &IndexRange) -> std::collections::HashSet<String> {
            self.index_entries(collection, &range.index, crate::indexes::SORTED)
                .into_iter()
                .filter(|(position, _)| {
                    range.after.as_ref().is_none_or(|after| position > after)
                        && range.before.as_ref().is_none_or(|before| position < before)
                })
                .map(|(position, _)| position.id.to_string())
                .collect()
        }
    }

    /// The collection's index `index`; the host fails a call naming another
    /// one, and so does this store (the test fails, as the request would).
    fn known_index(call: &str, collection: &str, index: &str) -> Index {
        match crate::index_of(collection, index) {
            Some(found) => found,
            None => panic!("store.{call}: {collection} has no index {index:?}; the host fails the call"),
        }
    }

    fn refuse_unknown_conditions(call: &str, collection: &str, conditions: &[IndexCondition]) {
        for condition in conditions {
            known_index(call, collection, &condition.index);
        }
    }

    /// The range's index must be a sort index, as the host requires.
    fn sort_index(call: &str, collection: &str, index: &str) {
        let found = known_index(call, collection, index);
        assert!(
            found.key == IndexKey::SortValue,
            "store.{call}: {index} of {collection} is not a sort index; the host fails the call"
        );
    }

    /// Whether a record holds one of each condition's values and, when
    /// given, was updated after `updated_after`: what the host's counts count.
    fn matches_all(
        collection: &str,
        record: &serde_json::Value,
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> bool {
        let holds = |condition: &IndexCondition| {
            crate::index_of(collection, &condition.index)
                .is_some_and(|index| index.values(record).iter().any(|value| condition.values.contains(value)))
        };
        conditions.iter().all(holds)
            && updated_after.is_none_or(|after| {
                record
                    .get("updated_at")
                    .and_then(serde_json::Value::as_str)
                    .and_then(crate::time::Timestamp::parse)
                    .is_some_and(|updated| updated.0 > after)
            })
    }

    impl MemoryStore {
        /// Up to `limit` of the records holding `value` in the index, in
        /// index order (reversed when `reverse`), past `after`: the one
        /// walk behind `index_scan` and `index_positions`.
        fn walk(&self, collection: &str, walk: &IndexWalk<'_>) -> Vec<(IndexPosition, Vec<u8>)> {
            let mut held = self.index_entries(collection, walk.index, walk.value);
            if walk.reverse {
                held.reverse();
            }
            held.into_iter()
                .filter(|(position, _)| match walk.after {
                    None => true,
                    Some(after) if walk.reverse => *position < after,
                    Some(after) => *position > after,
                })
                .take(walk.limit.min(1000))
                .collect()
        }

        /// The records holding `value` in the index, in index order, as the
        /// host keeps them.
        fn index_entries(&self, collection: &str, index: &str, value: &str) -> Vec<(IndexPosition, Vec<u8>)> {
            let size = self.collections.get(collection).map_or(0, BTreeMap::len);
            let key = (collection.to_owned(), index.to_owned(), value.to_owned());
            if let Some((cached_size, entries)) = self.cache.borrow().entries.get(&key)
                && *cached_size == size
            {
                return entries.to_vec();
            }
            let entries = Rc::new(self.work_out_index_entries(collection, index, value));
            self.cache.borrow_mut().entries.insert(key, (size, entries.clone()));
            entries.to_vec()
        }

        fn work_out_index_entries(&self, collection: &str, index: &str, value: &str) -> Vec<(IndexPosition, Vec<u8>)> {
            let index = known_index("index-scan", collection, index);
            let Some(records) = self.collections.get(collection) else {
                return Vec::new();
            };
            let mut held: Vec<(IndexPosition, Vec<u8>)> = records
                .iter()
                .filter_map(|(id, bytes)| {
                    let record: serde_json::Value = serde_json::from_slice(bytes).ok()?;
                    // The host keeps only records whose id is a UUID.
                    let id = crate::Uuid::parse_str(id).ok()?;
                    index
                        .values(&record)
                        .iter()
                        .any(|v| v == value)
                        .then(|| (IndexPosition::new(index.position(&record), id), bytes.clone()))
                })
                .collect();
            held.sort_by_key(|a| a.0);
            held
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::Entry;

    const A: &str = "0192f0b4-0000-7000-8000-000000000001";
    const B: &str = "0192f0b4-0000-7000-8000-000000000002";
    const C: &str = "0192f0b4-0000-7000-8000-000000000003";

    #[test]
    fn a_batch_gives_each_record_its_id_position_and_bytes() {
        let ids = format!("{A}{B}{C}");
        let entries = Entry::from_batch(&ids, &[7, -2, 7], &[7, 7, 17], br#"{"a":1}{"bc":[2]}"#.to_vec());
        let got: Vec<(&str, &[u8], Option<i64>)> =
            entries.iter().map(|entry| (entry.id.as_str(), &entry.value[..], entry.position)).collect();
        assert_eq!(
            got,
            [(A, &br#"{"a":1}"#[..], Some(7)), (B, &b""[..], Some(-2)), (C, &br#"{"bc":[2]}"#[..], Some(7))]
        );
        assert!(Entry::from_batch("", &[], &[], Vec::new()).is_empty());
    }

    #[test]
    #[should_panic(expected = "a malformed batch")]
    fn a_batch_whose_ends_pass_its_records_fails() {
        Entry::from_batch(&format!("{A}{B}"), &[1, 2], &[3, 9], b"{}{}".to_vec());
    }

    #[test]
    #[should_panic(expected = "a malformed batch")]
    fn a_batch_with_fewer_ids_than_positions_fails() {
        Entry::from_batch(A, &[1, 2], &[2, 4], b"{}{}".to_vec());
    }

    #[test]
    #[should_panic(expected = "a malformed batch")]
    fn a_batch_whose_ends_go_back_fails() {
        Entry::from_batch(&format!("{A}{B}"), &[1, 2], &[4, 2], b"{}{}".to_vec());
    }

    #[test]
    #[should_panic(expected = "a malformed batch")]
    fn a_batch_with_bytes_past_its_last_record_fails() {
        Entry::from_batch(A, &[1], &[2], b"{}{}".to_vec());
    }
}
