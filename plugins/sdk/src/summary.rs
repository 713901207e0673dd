//! Summaries: exact counts of a collection's records grouped by one or two
//! fields, within the list's filters, counted by the host from its index
//! counts and entries (`store.count-groups`): no record is read.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::list::{Filter, counted_by_indexes, for_each_matching};
use crate::query::{Param, Query};
use crate::{GroupCount, ParameterInfo, PluginError, Request, Store};

/// The query parameter naming the fields to group by.
pub const GROUP_BY: &str = "groupBy";

/// The most fields one summary groups by.
pub const MAX_GROUP_FIELDS: usize = 2;

pub use esr_contract::limits::{MAX_SUMMARY_GROUPS, MAX_SUMMARY_VALUE_CHARS};

/// A field a summary may group by: its name in the API and the index (one
/// value per record) whose counts answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryField {
    pub name: &'static str,
    pub index: &'static str,
    /// Whether the index holds `true`/`false`, answered as JSON booleans.
    pub boolean: bool,
}

impl SummaryField {
    /// A field whose values are text.
    pub const fn text(name: &'static str, index: &'static str) -> SummaryField {
        SummaryField { name, index, boolean: false }
    }

    /// A field whose values are `true` or `false`.
    pub const fn boolean(name: &'static str, index: &'static str) -> SummaryField {
        SummaryField { name, index, boolean: true }
    }

    /// The value of a group as JSON.
    fn json(&self, value: &str) -> Value {
        match (self.boolean, value) {
            (true, "true") => Value::Bool(true),
            (true, "false") => Value::Bool(false),
            _ => Value::String(value.to_owned()),
        }
    }
}

/// What a summary accepts (`summaries.describe-summary`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SummaryInfo {
    /// The fields `groupBy` may name; empty when the group serves none.
    pub group_by: Vec<String>,
    /// `groupBy` and the filters, as a descriptor's parameters.
    pub parameters: Vec<ParameterInfo>,
}

/// A summary's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The groups as a UTF-8 JSON array.
    pub groups: Vec<u8>,
    pub total: u64,
}

/// What a summary of `fields` accepts: `groupBy` (required) and `filters`.
pub fn summary_info(fields: &[SummaryField], filters: &[Param]) -> SummaryInfo {
    let names: Vec<&str> = fields.iter().map(|field| field.name).collect();
    // Every value accepted, spelled out: one field, or two different ones.
    let pairs = names.iter().flat_map(|a| names.iter().filter(move |b| *b != a).map(move |b| format!("{a},{b}")));
    let accepted: Vec<String> = names.iter().map(|name| (*name).to_owned()).chain(pairs).collect();
    let group_by = ParameterInfo {
        name: GROUP_BY.to_owned(),
        description: format!("One or two fields to group by, comma-separated, each once: {}.", names.join(", ")),
        schema: serde_json::json!({
            "type": "string",
            "pattern": format!("^({})$", accepted.join("|")),
            "maxLength": names.iter().map(|name| name.len()).max().unwrap_or(0) * MAX_GROUP_FIELDS + 1,
        })
        .to_string(),
        required: true,
    };
    let filters = crate::Descriptor::new("", "", filters, &[]).parameters;
    SummaryInfo {
        group_by: names.iter().map(|name| (*name).to_owned()).collect(),
        parameters: [group_by].into_iter().chain(filters).collect(),
    }
}

/// Starts parsing a summary request: the fields `groupBy` names (checked:
/// known, each once, one or two) and the parser to read `filters` with
/// (finish it with [`Query::finish`]).
pub fn parse_summary_request<'r>(
    request: &'r Request,
    fields: &[SummaryField],
    filters: &[Param],
) -> (Query<'r>, Vec<SummaryField>) {
    let names: Vec<&str> = [GROUP_BY].into_iter().chain(filters.iter().map(|param| param.name)).collect();
    let mut query = Query::new(&request.query, &names);
    let allowed: Vec<&str> = fields.iter().map(|field| field.name).collect();
    let allowed_text = allowed.join(", ");
    let mut chosen: Vec<SummaryField> = Vec::new();
    match query.raw(GROUP_BY) {
        None if !request.query.iter().any(|param| param.name == GROUP_BY) => {
            query.reject(GROUP_BY, format!("required: one or two of {allowed_text}, comma-separated"));
        }
        None => {}
        Some(raw) => {
            for name in raw.split(',') {
                match fields.iter().find(|field| field.name == name) {
                    None => query.reject(GROUP_BY, format!("{name:?} is not one of {allowed_text}")),
                    Some(field) if chosen.contains(field) => {
                        query.reject(GROUP_BY, format!("{name} is named more than once"))
                    }
                    Some(field) => chosen.push(*field),
                }
            }
            if raw.split(',').count() > MAX_GROUP_FIELDS {
                query.reject(GROUP_BY, format!("at most {MAX_GROUP_FIELDS} fields, of {allowed_text}"));
            }
        }
    }
    (query, chosen)
}

/// The summary of `collection` grouped by `group_by`, within `filters`.
/// Where indexes answer every filter (index conditions and exact ranges),
/// the host counts from its index counts and entries, reading no record;
/// otherwise (a test on each record, such as a text prefix) the matching
/// records are read and grouped, within the list's [`WORK_BUDGET`]: a
/// broader one is `invalid-parameters` naming the filter to narrow, as the
/// list's total is. Groups are ordered by count, largest first, then by
/// their values.
///
/// [`WORK_BUDGET`]: crate::list::WORK_BUDGET
pub fn summarize(
    store: &dyn Store,
    collection: &str,
    group_by: &[SummaryField],
    filters: Vec<Filter<'_>>,
) -> Result<Summary, PluginError> {
    let (groups, total) = match counted_by_indexes(collection, &filters) {
        Some(counted) => {
            let matching =
                crate::Matching { ranges: counted.ranges, conditions: counted.conditions, updated_after: None };
            let indexes: Vec<String> = group_by.iter().map(|field| field.index.to_owned()).collect();
            // Groups first: a backend that reads the matching records for
            // them counts the total in the same pass, and keeps it.
            let groups = store.count_groups(collection, &indexes, &matching);
            (groups, store.count_matching(collection, &matching))
        }
        None => grouped_by_reading(store, collection, group_by, &filters)?,
    };
    answer(group_by, groups, total)
}

/// The groups and total of the records passing `filters`, read one by one.
fn grouped_by_reading(
    store: &dyn Store,
    collection: &str,
    group_by: &[SummaryField],
    filters: &[Filter<'_>],
) -> Result<(Vec<GroupCount>, u64), PluginError> {
    let indexes: Vec<crate::indexes::Index> = group_by
        .iter()
        .map(|field| {
            crate::index_of(collection, field.index)
                .ok_or_else(|| PluginError::Internal(format!("summary: {collection} has no index {}", field.index)))
        })
        .collect::<Result<_, _>>()?;
    let mut groups: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    let mut total = 0;
    for_each_matching(store, collection, filters, "summarize", |record| {
        total += 1;
        let record = record.value()?;
        let values: Option<Vec<String>> = indexes.iter().map(|index| index.values(record).into_iter().next()).collect();
        if let Some(values) = values {
            *groups.entry(values).or_default() += 1;
        }
        Ok(())
    })?;
    Ok((groups.into_iter().map(|(values, count)| GroupCount { values, count }).collect(), total))
}

/// The answer from the groups: largest first, at most
/// [`MAX_SUMMARY_GROUPS`].
fn answer(group_by: &[SummaryField], mut groups: Vec<GroupCount>, total: u64) -> Result<Summary, PluginError> {
    groups.retain(|group| group.count > 0 && group.values.len() == group_by.len());
    if groups.len() > MAX_SUMMARY_GROUPS {
        return Err(PluginError::invalid(
            GROUP_BY,
            format!("more than {MAX_SUMMARY_GROUPS} groups; add a filter or group by fewer fields"),
        ));
    }
    groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.values.cmp(&b.values)));
    let rows: Vec<Value> = groups
        .iter()
        .map(|group| {
            let mut row = Map::new();
            for (field, value) in group_by.iter().zip(&group.values) {
                row.insert(field.name.to_owned(), field.json(value));
            }
            row.insert("count".to_owned(), Value::from(group.count));
            Value::Object(row)
        })
        .collect();
    let groups = serde_json::to_vec(&rows).map_err(|error| PluginError::Internal(format!("summary: {error}")))?;
    Ok(Summary { groups, total })
}
