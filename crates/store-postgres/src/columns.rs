//! Where each index's entries live in PostgreSQL.
//!
//! An index holding at most one value per record (every index but a
//! list's items, [`IndexKey::EachOf`]) is two columns of the record's
//! `records` row: its value (NULL when the record has no entry in it) and
//! its position (`created_position` and `updated_position` are shared by
//! the indexes ordered by creation or update), with a partial PostgreSQL
//! index per collection over `(org_id, value, position, id)`: the keyset
//! walk of an entry's key (migration 0004). An import then writes one row
//! per record instead of one per entry (fifteen per finding), a third of
//! PostgreSQL's time. The other indexes keep a row per entry in
//! `index_entries`.
//!
//! Both are read through [`entries_of`]: the organization's entries of one
//! index as rows `(value, position, id)`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

use esr_contract::indexes::{self, Index, IndexKey, IndexOrder};
use serde_json::Value;
use uuid::Uuid;

use esr_store::{Collection, StoreError};

/// Where an index's entries are.
pub(super) enum Placement {
    /// The `records` rows whose `value` column is not null, at `position`.
    Columns { value: String, position: String },
    /// A row per entry in `index_entries`.
    Rows,
}

/// Where the entries of `index` are.
pub(super) fn placement(index: &Index) -> Placement {
    match index.key {
        IndexKey::EachOf(_) => Placement::Rows,
        _ => Placement::Columns { value: format!("{}_value", index.name), position: position_column(index) },
    }
}

fn position_column(index: &Index) -> String {
    match index.order {
        IndexOrder::CreatedAt => "created_position".to_owned(),
        IndexOrder::UpdatedAt => "updated_position".to_owned(),
        IndexOrder::By(_) => format!("{}_position", index.name),
    }
}

/// Every index column of `records`, over all collections, each once.
pub(super) struct IndexColumns {
    /// The value columns (`bytea`).
    pub values: Vec<String>,
    /// The position columns (`bigint`).
    pub positions: Vec<String>,
}

pub(super) static INDEX_COLUMNS: LazyLock<IndexColumns> = LazyLock::new(|| {
    let (mut values, mut positions) = (BTreeSet::new(), BTreeSet::new());
    for collection in Collection::ALL {
        for index in indexes::indexes(collection) {
            if let Placement::Columns { value, position } = placement(index) {
                values.insert(value);
                positions.insert(position);
            }
        }
    }
    IndexColumns { values: values.into_iter().collect(), positions: positions.into_iter().collect() }
});

/// Where each index's entries go in a `records` row, by collection and
/// index name: the slots of its value and position in [`INDEX_COLUMNS`]
/// (`None`: a row per entry). Found once: an import asks for every entry
/// of every record.
type Slots = HashMap<Collection, HashMap<&'static str, Option<(usize, usize)>>>;
static ROW_SLOTS: LazyLock<Slots> = LazyLock::new(|| {
    let columns = &*INDEX_COLUMNS;
    let mut slots: Slots = HashMap::new();
    for collection in Collection::ALL {
        for index in indexes::indexes(collection) {
            let slot = match placement(index) {
                Placement::Columns { value, position } => {
                    columns.values.binary_search(&value).ok().zip(columns.positions.binary_search(&position).ok())
                }
                Placement::Rows => None,
            };
            slots.entry(collection).or_default().insert(index.name, slot);
        }
    }
    slots
});

/// A record's row values of [`INDEX_COLUMNS`], from its entries (index,
/// value, position): `(values, positions)` in the columns' order.
pub(super) fn row_values(
    collection: Collection,
    entries: &[(&'static str, String, i64)],
) -> (Vec<Option<Vec<u8>>>, Vec<Option<i64>>) {
    let columns = &*INDEX_COLUMNS;
    let mut values = vec![None; columns.values.len()];
    let mut positions = vec![None; columns.positions.len()];
    for (name, value, position) in entries {
        if let Some(Some((value_slot, position_slot))) = row_slot(collection, name) {
            values[*value_slot] = Some(value.as_bytes().to_vec());
            positions[*position_slot] = Some(*position);
        }
    }
    (values, positions)
}

/// Whether `index` of `collection` keeps a row per entry (not columns).
pub(super) fn in_rows(collection: Collection, index: &str) -> bool {
    matches!(row_slot(collection, index), Some(None))
}

fn row_slot(collection: Collection, index: &str) -> Option<&'static Option<(usize, usize)>> {
    ROW_SLOTS.get(&collection)?.get(index)
}

/// The organization's entries of `index` in `collection` as a subquery
/// with the columns `value`, `position` and `id` (and the record's `body`
/// when `bodies`); `$1` is the organization. The collection is written
/// into the text (it is one of [`Collection::ALL`], checked by the caller) so
/// that PostgreSQL can use its partial indexes.
pub(super) fn entries_of(collection: Collection, index: &Index, bodies: bool) -> String {
    debug_assert!(Collection::ALL.contains(&collection));
    match placement(index) {
        Placement::Columns { value, position } => {
            let body = if bodies { ", body" } else { "" };
            format!(
                "SELECT {value} AS value, {position} AS position, id{body} FROM records WHERE org_id = $1 \
                 AND collection = '{collection}' AND {value} IS NOT NULL"
            )
        }
        Placement::Rows => {
            let (body, join) = if bodies {
                (
                    ", r.body",
                    " LEFT JOIN records r ON r.org_id = e.org_id AND r.collection = e.collection AND r.id = e.id",
                )
            } else {
                ("", "")
            };
            format!(
                "SELECT e.value, e.position, e.id{body} FROM index_entries e{join} WHERE e.org_id = $1 \
                 AND e.collection = '{collection}' AND e.index_name = '{}'",
                index.name
            )
        }
    }
}

/// The condition that a `records` row (as `r`) holds one of the values of
/// the array parameter `values` in `index`.
pub(super) fn holds_one_of(collection: Collection, index: &Index, values: &str) -> String {
    match placement(index) {
        Placement::Columns { value, .. } => format!("r.{value} = ANY({values})"),
        Placement::Rows => format!(
            "r.id IN (SELECT id FROM index_entries WHERE org_id = $1 AND collection = '{collection}' \
             AND index_name = '{}' AND value = ANY({values}))",
            index.name
        ),
    }
}

/// Records read at a time by [`fill`].
const FILL_CHUNK: i32 = 10_000;

/// Fills the columns of an index new to the schema, and its counts, from
/// the bodies of `collection`'s records (every organization's), reading
/// them a chunk at a time.
pub(super) fn fill(
    transaction: &mut postgres::Transaction<'_>,
    collection: Collection,
    name: &str,
) -> Result<(), StoreError> {
    let unknown = || StoreError::UnknownIndex(format!("{collection}/{name}"));
    let index = indexes::find(collection, name).ok_or_else(unknown)?;
    let Placement::Columns { value: value_column, position: position_column } = placement(&index) else {
        return Err(unknown());
    };
    let update = transaction
        .prepare(&format!(
            "UPDATE records r SET {value_column} = held.value, {position_column} = held.position \
         FROM unnest($2::uuid[], $3::uuid[], $4::bytea[], $5::int8[]) AS held(org_id, id, value, position) \
         WHERE r.org_id = held.org_id AND r.collection = $1 AND r.id = held.id"
        ))
        .map_err(crate::store_error)?;
    let records = transaction
        .prepare("SELECT org_id, id, body FROM records WHERE collection = $1")
        .map_err(crate::store_error)?;
    let portal = transaction.bind(&records, &[&collection.name()]).map_err(crate::store_error)?;
    let mut counts: BTreeMap<(Uuid, String), i64> = BTreeMap::new();
    loop {
        let rows = transaction.query_portal(&portal, FILL_CHUNK).map_err(crate::store_error)?;
        if rows.is_empty() {
            break;
        }
        let (mut organizations, mut ids, mut values, mut positions) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for row in &rows {
            let (organization, id, body): (Uuid, Uuid, &[u8]) = (row.get(0), row.get(1), row.get(2));
            let record: Value = serde_json::from_slice(body)
                .map_err(|error| StoreError::Corrupt(format!("{collection} record {id}: {error}")))?;
            for value in index.values(&record) {
                organizations.push(organization);
                ids.push(id);
                positions.push(index.position(&record));
                values.push(value.clone().into_bytes());
                *counts.entry((organization, value)).or_default() += 1;
            }
        }
        if !ids.is_empty() {
            transaction
                .execute(&update, &[&collection.name(), &organizations, &ids, &values, &positions])
                .map_err(crate::store_error)?;
        }
    }
    for ((organization, value), n) in counts {
        transaction
            .execute(
                "INSERT INTO counts (org_id, collection, name, value, n) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (org_id, collection, name, value) DO UPDATE SET n = excluded.n",
                &[&organization, &collection.name(), &name, &value.as_bytes(), &n],
            )
            .map_err(crate::store_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns a timestamp sort index's PostgreSQL index carries
    /// beside its key (migration 0010): the collection's other sort
    /// indexes' positions, then their values and the values of the indexes
    /// counted in pairs, each once, in the index table's order (the 8-byte
    /// positions first, so that no value pads one).
    fn carried(collection: Collection, index: &Index) -> Vec<String> {
        if !matches!(index.order, IndexOrder::By(esr_contract::sort::SortField::Timestamp(_)))
            || index.key != IndexKey::SortValue
        {
            return Vec::new();
        }
        let others: Vec<(String, String)> = indexes::indexes(collection)
            .iter()
            .filter(|other| other.key == IndexKey::SortValue && other.name != index.name)
            .filter_map(|other| match placement(other) {
                Placement::Columns { value, position } => Some((value, position)),
                Placement::Rows => None,
            })
            .collect();
        let mut carried: Vec<String> = others.iter().map(|(_, position)| position.clone()).collect();
        carried.extend(others.into_iter().map(|(value, _)| value));
        for other in indexes::indexes(collection) {
            let counted =
                indexes::counted_pairs(collection).iter().any(|(first, second)| [first, second].contains(&&other.name));
            if counted && let Placement::Columns { value, .. } = placement(other) {
                carried.push(value);
            }
        }
        carried
    }

    /// Migrations 0004, 0005 and 0010 leave exactly the PostgreSQL indexes
    /// the index table calls for, over the columns this module reads.
    #[test]
    fn the_migrations_index_every_column_placed_index() {
        let migration = [
            include_str!("migrations/0004_index_columns.sql"),
            include_str!("migrations/0005_suppression_expiry.sql"),
            include_str!("migrations/0010_time_indexes_carry_filters.sql"),
        ]
        .join(";\n");
        // Each index by name as the last statement made it.
        let mut made = BTreeMap::new();
        for statement in migration.split(';') {
            let statement: String = statement
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .flat_map(str::split_whitespace)
                .collect::<Vec<_>>()
                .join(" ");
            let words: Vec<&str> = statement.split(' ').collect();
            match words[..] {
                ["CREATE", "INDEX", name, ..] => made.insert(name.to_owned(), statement.clone()),
                ["DROP", "INDEX", "IF", "EXISTS", name] => made.remove(name),
                _ => None,
            };
        }
        let made: BTreeSet<String> = made.into_values().collect();
        let mut expected = BTreeSet::new();
        for collection in Collection::ALL {
            for index in indexes::indexes(collection) {
                if let Placement::Columns { value, position } = placement(index) {
                    let carried = carried(collection, index);
                    let include =
                        if carried.is_empty() { String::new() } else { format!(" INCLUDE ({})", carried.join(", ")) };
                    expected.insert(format!(
                        "CREATE INDEX records_{}_{} ON records (org_id, {value}, {position}, id){include} WHERE \
                         collection = '{collection}' AND {value} IS NOT NULL",
                        collection.name().replace('-', "_"),
                        index.name
                    ));
                }
            }
        }
        assert_eq!(made, expected);
        for column in INDEX_COLUMNS.values.iter().chain(&INDEX_COLUMNS.positions) {
            assert!(migration.contains(&format!("ADD COLUMN {column} ")), "{column}");
        }
    }
}
