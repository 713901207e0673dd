//! The secondary indexes the host keeps, per collection.
//!
//! This table is the one definition: the host builds and maintains exactly
//! these (in the same atomic write as the record), and components ask for
//! them by name through the `store` interface. Every index orders its
//! entries by `created_at`, then id, within each value, so a walk in the
//! default order over one value never sorts.
//!
//! The index [`CREATED_AT`] has a single value, the empty string, and holds
//! every record: it is the collection in `created_at` order. [`UPDATED_AT`]
//! is the same in `updated_at` order (its positions carry `updated_at`).

use serde_json::Value;

/// How an index reads its values from a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKey {
    /// The string (or boolean, as `true`/`false`) at this JSON pointer;
    /// no entry when it is missing or null.
    Field(&'static str),
    /// One entry per string in the array at this pointer.
    EachOf(&'static str),
    /// `true` when the value at this pointer is present and not null,
    /// else `false`.
    Present(&'static str),
    /// One entry with the empty string: every record.
    Everything,
}

/// Which timestamp orders an index's entries within a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexOrder {
    CreatedAt,
    UpdatedAt,
}

impl IndexOrder {
    /// The record field holding the ordering timestamp.
    pub fn field(self) -> &'static str {
        match self {
            IndexOrder::CreatedAt => "created_at",
            IndexOrder::UpdatedAt => "updated_at",
        }
    }
}

/// One index: its name, how it reads a record, and its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Index {
    pub name: &'static str,
    pub key: IndexKey,
    pub order: IndexOrder,
}

/// The index of every record, in `created_at` order.
pub const CREATED_AT: &str = "created_at";

/// The index of every record, in `updated_at` order: incremental sync
/// (`updatedAfter`) and `sort=updated_at` walk it.
pub const UPDATED_AT: &str = "updated_at";

const fn index(name: &'static str, key: IndexKey) -> Index {
    Index { name, key, order: IndexOrder::CreatedAt }
}

const EVERYTHING: Index = index(CREATED_AT, IndexKey::Everything);
const BY_UPDATE: Index = Index { name: UPDATED_AT, key: IndexKey::Everything, order: IndexOrder::UpdatedAt };

const ENDPOINTS: &[Index] = &[
    EVERYTHING,
    BY_UPDATE,
    index("os_family", IndexKey::Field("/operating_system/family")),
    index("has_agent", IndexKey::Present("/agent_id")),
    index("tag", IndexKey::EachOf("/tags")),
];

const FINDINGS: &[Index] = &[
    EVERYTHING,
    BY_UPDATE,
    index("endpoint_id", IndexKey::Field("/endpoint_id")),
    index("severity", IndexKey::Field("/severity")),
    index("status", IndexKey::Field("/status")),
    index("finding_type", IndexKey::Field("/finding_type")),
    index("cve_id", IndexKey::Field("/cve_id")),
    index("kev", IndexKey::Field("/kev")),
    index("scanner", IndexKey::Field("/source/scanner")),
    index("remediation_target_id", IndexKey::Field("/remediation_target_id")),
];

const TARGETS: &[Index] = &[
    EVERYTHING,
    BY_UPDATE,
    index("endpoint_id", IndexKey::Field("/endpoint_id")),
    index("status", IndexKey::Field("/status")),
    index("target_type", IndexKey::Field("/target_type")),
    index("package_manager", IndexKey::Field("/package_manager")),
    index("scope_id", IndexKey::EachOf("/scope_ids")),
    index("finding_id", IndexKey::EachOf("/finding_ids")),
];

const SCOPES: &[Index] = &[EVERYTHING, BY_UPDATE, index("status", IndexKey::Field("/status"))];

/// The indexes of a collection (empty for an unknown one).
pub fn indexes(collection: &str) -> &'static [Index] {
    match collection {
        "endpoints" => ENDPOINTS,
        "vulnerability-findings" => FINDINGS,
        "remediation-targets" => TARGETS,
        "scopes" => SCOPES,
        _ => &[],
    }
}

/// The index with this name in a collection.
pub fn find(collection: &str, name: &str) -> Option<Index> {
    indexes(collection).iter().copied().find(|index| index.name == name)
}

impl Index {
    /// The timestamp (Unix nanoseconds) that orders a record in this index;
    /// a record without it sorts first.
    pub fn position(&self, record: &Value) -> i64 {
        record
            .get(self.order.field())
            .and_then(Value::as_str)
            .and_then(crate::time::Timestamp::parse)
            .map_or(i64::MIN, |t| t.0)
    }

    /// The values a record has in this index (possibly none).
    pub fn values(&self, record: &Value) -> Vec<String> {
        let scalar = |value: &Value| match value {
            Value::String(text) => Some(text.clone()),
            Value::Bool(flag) => Some(flag.to_string()),
            _ => None,
        };
        match self.key {
            IndexKey::Field(pointer) => record.pointer(pointer).and_then(scalar).into_iter().collect(),
            IndexKey::EachOf(pointer) => {
                let mut values: Vec<String> = record
                    .pointer(pointer)
                    .and_then(Value::as_array)
                    .map(|items| items.iter().filter_map(scalar).collect())
                    .unwrap_or_default();
                values.sort();
                values.dedup();
                values
            }
            IndexKey::Present(pointer) => {
                vec![record.pointer(pointer).is_some_and(|value| !value.is_null()).to_string()]
            }
            IndexKey::Everything => vec![String::new()],
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_follow_the_key_kind() {
        let target = json!({"scope_ids": ["b", "a", "b"], "status": "queued", "package_manager": null});
        assert_eq!(
            find("remediation-targets", "scope_id").map(|i| i.values(&target)),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(find("remediation-targets", "status").map(|i| i.values(&target)), Some(vec!["queued".into()]));
        assert_eq!(find("remediation-targets", "package_manager").map(|i| i.values(&target)), Some(vec![]));
        let endpoint = json!({"agent_id": null});
        assert_eq!(find("endpoints", "has_agent").map(|i| i.values(&endpoint)), Some(vec!["false".into()]));
        assert_eq!(
            find("vulnerability-findings", "kev").map(|i| i.values(&json!({"kev": true}))),
            Some(vec!["true".into()])
        );
        assert!(indexes("nothing").is_empty());
        assert!(
            ["endpoints", "vulnerability-findings", "remediation-targets", "scopes"]
                .iter()
                .all(|c| find(c, CREATED_AT).is_some())
        );
    }
}
