//! The count rows a read session has read, kept for its snapshot: one
//! snapshot gives the same answers, so a list or summary that asks for a
//! count again (to choose its walk, then for its total; each group) costs
//! no round trip the second time.
//!
//! - Every row of a few-valued name (each index of a counted pair, and
//!   each pair) is read at the name's first use, in one statement; the
//!   indexes' rows all together ([`counted_indexes`]).
//! - A page of records carries the count rows of its walked condition's
//!   value and of the collection's size (`created_at`) while the session
//!   has not read them ([`count_column`]): page 1 of a list and its total
//!   are then one round trip.
//! - Another name's rows are kept one by one as they are read.

use std::collections::{HashMap, HashSet};

use esr_contract::indexes;
use esr_store::Collection;

/// One name's count rows: `n` by value.
pub(super) type CountRows = HashMap<Vec<u8>, u64>;

/// The most count rows of one name a read session keeps.
pub(super) const MAX_COUNT_ROWS_READ: usize = 4096;

/// The most single count rows of other names a session keeps.
const MAX_VALUES_READ: usize = 1024;

/// What a read session read of the counts.
#[derive(Debug, Default)]
pub(super) struct CountsRead {
    /// Every row of a name, by collection and name. `None`: the name held
    /// more rows than are kept.
    names: HashMap<Collection, HashMap<String, Option<CountRows>>>,
    /// Single rows of other names (0 for a row not stored).
    values: HashMap<(Collection, String, Vec<u8>), u64>,
    /// The collections whose [`counted_indexes`] were read together (or
    /// found too many to keep): never read together twice.
    counted_indexes_read: HashSet<Collection>,
}

impl CountsRead {
    /// Every row of `name`, when they were read.
    pub fn rows(&self, collection: Collection, name: &str) -> Option<&Option<CountRows>> {
        self.names.get(&collection)?.get(name)
    }

    /// Keeps every row of `name` (`None`: more than are kept).
    pub fn keep_rows(&mut self, collection: Collection, name: &str, rows: Option<CountRows>) {
        self.names.entry(collection).or_default().insert(name.to_owned(), rows);
    }

    /// Whether this is the first read of `collection`'s counted indexes
    /// together; notes it.
    pub fn first_read_of_counted_indexes(&mut self, collection: Collection) -> bool {
        self.counted_indexes_read.insert(collection)
    }

    /// Whether the session read the count row of `name` and `value`.
    pub fn knows(&self, collection: Collection, name: &str, value: &[u8]) -> bool {
        self.value(collection, name, value).is_some() || self.rows(collection, name).is_some_and(|rows| rows.is_some())
    }

    /// One row read on its own: a name of many values, or a value a page
    /// carried.
    pub fn value(&self, collection: Collection, name: &str, value: &[u8]) -> Option<u64> {
        self.values.get(&(collection, name.to_owned(), value.to_vec())).copied()
    }

    /// Keeps one row, while fewer than [`MAX_VALUES_READ`] are kept.
    pub fn keep_value(&mut self, collection: Collection, name: &str, value: &[u8], n: u64) {
        if self.values.len() < MAX_VALUES_READ {
            self.values.insert((collection, name.to_owned(), value.to_vec()), n);
        }
    }
}

/// Whether `name` is a count name of few values: an index of a counted
/// pair, or a pair.
pub(super) fn few_valued(collection: Collection, name: &str) -> bool {
    indexes::counted_pairs(collection).iter().any(|(first, second)| {
        name == *first || name == *second || name.split_once('+').is_some_and(|(a, b)| a == *first && b == *second)
    })
}

/// The indexes of `collection`'s counted pairs, whose rows are read
/// together at the first use of one: a list or summary that counts by one
/// mostly counts by another next (a second condition, a group). The pairs,
/// of many more rows, are read at their own first use.
pub(super) fn counted_indexes(collection: Collection) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for name in indexes::counted_pairs(collection).iter().flat_map(|(first, second)| [*first, *second]) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// A column a page's statement may carry: the count row of `name` and
/// `value` (a literal or a parameter of the statement), as a sub-select
/// of no row of the page, which PostgreSQL runs once per statement. `$1`
/// is the organization.
pub(super) fn count_column(collection: Collection, name: &str, value: &str) -> String {
    format!(
        ", (SELECT n FROM counts WHERE org_id = $1 AND collection = {} AND name = {} AND value = {value})",
        super::text_literal(collection.name()),
        super::text_literal(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names read together are few-valued: the indexes of the
    /// counted pairs, each once.
    #[test]
    fn the_counted_indexes_are_read_together() {
        for collection in Collection::ALL {
            let names = counted_indexes(collection);
            assert!(names.iter().all(|name| few_valued(collection, name)), "{collection}: {names:?}");
            for (first, second) in indexes::counted_pairs(collection) {
                assert!(names.contains(first) && names.contains(second), "{collection}: {first}, {second}");
            }
            let unique: std::collections::HashSet<&str> = names.iter().copied().collect();
            assert_eq!(unique.len(), names.len(), "{collection}: {names:?}");
            assert!(!few_valued(collection, "created_at"));
        }
    }
}
