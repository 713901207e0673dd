//! A count of several filters together and, from the same statement, its
//! groups by the indexes a dashboard groups by.
//!
//! A count of two ranges (or of a range and a condition) walks one range's
//! index and tests the rest on each entry it finds: from the index alone
//! where a time index carries the other columns (migration 0010), else
//! from the heap. A summary asks for that count and then for its groups,
//! which would walk the same entries again. So
//! the count is one `GROUPING SETS` statement that also counts the rows by
//! each few-valued index (those whose value combinations the host counts,
//! [`indexes::counted_pairs`]) and by each counted pair; the reader keeps
//! them for the session's next call. The grouping adds up to a sixth to
//! reading the rows (docs/performance.md, "Planned once, counted once,
//! read with the key"), so where the groups are asked for first (a
//! summary's), the statement counts only those beside the total.

use std::collections::HashMap;

use esr_contract::indexes;
use esr_store::{Collection, GroupCount, Matching, StoreError};
use postgres::GenericClient;

use super::{Session, SqlParams, check_filters, columns, known_index, where_matching};

/// The most rows the statement may answer (one per group of each set):
/// past it the groups are not kept, only the total. The sets' indexes hold
/// few values by design; the bound keeps a tenant's unusual data from
/// costing the host memory.
const MAX_GROUP_ROWS: usize = 4096;

/// A count and its groups by each group set, as one statement found them.
#[derive(Debug, Clone)]
pub(super) struct Grouped {
    pub total: u64,
    /// The groups of each set (one or two index names, in the order of
    /// [`group_sets`]); empty when they were too many to keep.
    groups: HashMap<Vec<&'static str>, Vec<GroupCount>>,
}

impl Grouped {
    /// A count without groups.
    pub fn total_only(total: u64) -> Grouped {
        Grouped { total, groups: HashMap::new() }
    }

    /// The groups by `group_by` (one or two indexes, in either order), if
    /// the statement counted them, in their values' byte order (as every
    /// backend answers them).
    pub fn groups(&self, group_by: &[String]) -> Option<Vec<GroupCount>> {
        let asked: Vec<&str> = group_by.iter().map(String::as_str).collect();
        let mut groups = if let Some((_, groups)) = self.groups.iter().find(|(set, _)| **set == asked) {
            groups.clone()
        } else {
            let reversed: Vec<&str> = asked.iter().rev().copied().collect();
            let (_, groups) = self.groups.iter().find(|(set, _)| **set == reversed)?;
            groups
                .iter()
                .map(|group| GroupCount { values: group.values.iter().rev().cloned().collect(), count: group.count })
                .collect()
        };
        groups.sort_by(|a, b| a.values.cmp(&b.values));
        Some(groups)
    }
}

/// The group sets counted beside a count of `collection`: each index of a
/// counted pair alone, then each pair. Only indexes kept as columns.
pub(super) fn group_sets(collection: Collection) -> Vec<Vec<&'static str>> {
    let in_columns = |name: &str| {
        indexes::find(collection, name)
            .is_some_and(|index| matches!(columns::placement(&index), columns::Placement::Columns { .. }))
    };
    let pairs: Vec<(&'static str, &'static str)> = indexes::counted_pairs(collection)
        .iter()
        .copied()
        .filter(|(first, second)| in_columns(first) && in_columns(second))
        .collect();
    let mut sets: Vec<Vec<&'static str>> = Vec::new();
    for name in pairs.iter().flat_map(|(first, second)| [*first, *second]) {
        if !sets.iter().any(|set| set[..] == [name]) {
            sets.push(vec![name]);
        }
    }
    sets.extend(pairs.iter().map(|(first, second)| vec![*first, *second]));
    sets
}

/// `group_by` as a group set, when each of its indexes is kept as a
/// column: the groups a summary asks for, counted with the total.
/// Past [`MAX_GROUP_ROWS`] groups only the total is kept.
pub(super) fn group_set_of(collection: Collection, group_by: &[String]) -> Option<Vec<&'static str>> {
    group_by
        .iter()
        .map(|name| {
            let index = indexes::find(collection, name)?;
            matches!(columns::placement(&index), columns::Placement::Columns { .. }).then_some(index.name)
        })
        .collect()
}

/// Whether a count of `matching` reads its matching rows one by one (from
/// the heap, or from a time index that carries the other columns) whatever
/// else it counts: a range together with another filter.
pub(super) fn reads_rows(matching: &Matching) -> bool {
    let Matching { ranges, conditions, updated_after } = matching;
    !ranges.is_empty() && ranges.len() + conditions.len() + usize::from(updated_after.is_some()) >= 2
}

impl<C: GenericClient + Send> Session<'_, C> {
    /// How many of the organization's records match `matching`, and their
    /// groups by each of `sets`, in one statement (see the module's text).
    pub(super) fn count_with_groups(
        &mut self,
        collection: Collection,
        matching: &Matching,
        sets: &[Vec<&'static str>],
    ) -> Result<Grouped, StoreError> {
        check_filters(collection, &matching.ranges, &matching.conditions)?;
        let mut params = SqlParams::new(self.organization);
        let filter =
            where_matching(collection, &matching.ranges, &matching.conditions, matching.updated_after, &mut params)?;
        // Every index of the sets once, as its value column.
        let mut names: Vec<&'static str> = Vec::new();
        for name in sets.iter().flatten() {
            if !names.contains(name) {
                names.push(name);
            }
        }
        let mut value_columns = Vec::with_capacity(names.len());
        for name in &names {
            let index = known_index(collection, name)?;
            let columns::Placement::Columns { value, .. } = columns::placement(&index) else {
                return Err(StoreError::MalformedCall(format!("{collection}/{name} is not kept as a column")));
            };
            value_columns.push(format!("r.{value}"));
        }
        let set_columns: Vec<String> = sets
            .iter()
            .map(|set| {
                let columns: Vec<&str> = set
                    .iter()
                    .filter_map(|name| names.iter().position(|n| n == name))
                    .map(|n| value_columns[n].as_str())
                    .collect();
                format!("({})", columns.join(", "))
            })
            .collect();
        let listed = value_columns.join(", ");
        // grouping() sets a column's bit when the row is not grouped by it
        // (the first column's is the highest): the total's row has every
        // bit, so it comes first.
        let sql = format!(
            "SELECT grouping({listed})::int8, {listed}, count(*) FROM records r WHERE {filter} \
             GROUP BY GROUPING SETS ({}, ()) ORDER BY 1 DESC LIMIT {}",
            set_columns.join(", "),
            MAX_GROUP_ROWS + 1
        );
        let rows = self.query(&sql, &params.refs())?;
        let every_bit = (1i64 << names.len()) - 1;
        let mut total = 0;
        let mut groups: HashMap<Vec<&'static str>, Vec<GroupCount>> =
            sets.iter().map(|set| (set.clone(), Vec::new())).collect();
        for row in &rows {
            let bits: i64 = row.get(0);
            let count = row.get::<_, i64>(names.len() + 1).max(0) as u64;
            if bits == every_bit {
                total = count;
                continue;
            }
            // The set this row counts: the indexes it is grouped by.
            let grouped_by: Vec<usize> =
                (0..names.len()).filter(|n| bits & (1 << (names.len() - 1 - n)) == 0).collect();
            let Some(set) = sets.iter().find(|set| {
                set.len() == grouped_by.len() && set.iter().all(|name| grouped_by.iter().any(|n| names[*n] == *name))
            }) else {
                continue;
            };
            let mut values = Vec::with_capacity(set.len());
            for name in set {
                let n = names.iter().position(|known| known == name).unwrap_or_default();
                // A record without a value in the index is in no group.
                let Some(value) = row.get::<_, Option<Vec<u8>>>(n + 1) else { break };
                values.push(
                    String::from_utf8(value).map_err(|_| {
                        StoreError::Corrupt(format!("an index entry of {collection}/{name} is not UTF-8"))
                    })?,
                );
            }
            if values.len() == set.len()
                && let Some(counted) = groups.get_mut(set)
            {
                counted.push(GroupCount { values, count });
            }
        }
        if rows.len() > MAX_GROUP_ROWS {
            groups.clear();
            if rows.first().is_none_or(|row| row.get::<_, i64>(0) != every_bit) {
                return Err(StoreError::Backend("a grouped count answered without its total".to_owned()));
            }
        }
        Ok(Grouped { total, groups })
    }
}
