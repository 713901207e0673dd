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
use uuid::Uuid;

use crate::Collection;
use crate::contract::SEVERITY_RANK;
use crate::sort::{SortField, SortValue};

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
    /// [`SORTED`] when the record has the value the index orders by, else
    /// [`UNSORTED`] (with [`IndexOrder::By`]).
    SortValue,
    /// [`SORTED`] when the string at the pointer is the one given and the
    /// record has the value the index orders by; no entry otherwise (with
    /// [`IndexOrder::By`]): the records of one state in that value's order.
    SortValueWhere(&'static str, &'static str),
}

/// What orders an index's entries within a value (then the record id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexOrder {
    CreatedAt,
    UpdatedAt,
    /// A sort key's value (a timestamp, number or rank, or the
    /// [`text_position`] of a text). Such an index has the key
    /// [`IndexKey::SortValue`]: records holding the value under [`SORTED`],
    /// the rest under [`UNSORTED`] in id order, so that a walk of the first
    /// then the second puts nulls last both ways, as lists sort them.
    By(SortField),
}

/// The value of a sort index holding the records that have the sort key.
pub const SORTED: &str = "";
/// The value of a sort index holding the records without the sort key.
pub const UNSORTED: &str = "null";

/// A number's position in a sort index: an `i64` that orders like
/// [`f64::total_cmp`], so the index agrees with how lists compare numbers.
pub fn number_position(value: f64) -> i64 {
    let bits = value.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
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

/// A sort index: `sort=name` (or `-name`) on a large collection walks it.
const fn sorted_by(name: &'static str, field: SortField) -> Index {
    Index { name, key: IndexKey::SortValue, order: IndexOrder::By(field) }
}

/// Every record in `created_at` order (what any collection's walk falls
/// back to).
pub const EVERYTHING: Index = index(CREATED_AT, IndexKey::Everything);
const BY_UPDATE: Index = Index { name: UPDATED_AT, key: IndexKey::Everything, order: IndexOrder::UpdatedAt };

const ENDPOINTS: &[Index] = &[
    EVERYTHING,
    BY_UPDATE,
    index("os_family", IndexKey::Field("/operating_system/family")),
    index("has_agent", IndexKey::Present("/agent_id")),
    index("tag", IndexKey::EachOf("/tags")),
    sorted_by("by_last_seen_at", SortField::Timestamp("/last_seen_at")),
    sorted_by("by_hostname", SortField::Text("/hostname")),
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
    sorted_by("by_first_seen_at", SortField::Timestamp("/first_seen_at")),
    sorted_by("by_last_seen_at", SortField::Timestamp("/last_seen_at")),
    sorted_by("by_severity", SortField::Rank("/severity", SEVERITY_RANK)),
    sorted_by("by_cvss", SortField::Number("/cvss/base_score")),
    SUPPRESSION_EXPIRY,
];

/// The suppressed findings whose suppression expires, soonest first: the
/// service reopens those that expired by reading only them.
pub const SUPPRESSION_EXPIRY: Index = Index {
    name: "suppression_expiry",
    key: IndexKey::SortValueWhere("/status", "suppressed"),
    order: IndexOrder::By(SortField::Timestamp("/suppression/expires_at")),
};

const TARGETS: &[Index] = &[
    EVERYTHING,
    BY_UPDATE,
    index("endpoint_id", IndexKey::Field("/endpoint_id")),
    index("status", IndexKey::Field("/status")),
    index("target_type", IndexKey::Field("/target_type")),
    index("package_manager", IndexKey::Field("/package_manager")),
    index("scope_id", IndexKey::EachOf("/scope_ids")),
    index("finding_id", IndexKey::EachOf("/finding_ids")),
    sorted_by("by_due_at", SortField::Timestamp("/due_at")),
];

const SCOPES: &[Index] = &[
    EVERYTHING,
    BY_UPDATE,
    index("status", IndexKey::Field("/status")),
    sorted_by("by_name", SortField::Text("/name")),
];

/// Pairs of single-valued indexes whose value combinations the host also
/// counts (no entries, counts only), so that an exact `total` of the
/// dashboards' commonest pair of filters ("open and critical") is two
/// lookups, not an intersection of hundreds of thousands of entries.
pub fn counted_pairs(collection: Collection) -> &'static [(&'static str, &'static str)] {
    match collection {
        Collection::VulnerabilityFindings => &[
            ("status", "severity"),
            ("status", "kev"),
            ("severity", "kev"),
            ("status", "finding_type"),
            ("severity", "finding_type"),
        ],
        Collection::RemediationTargets => &[("status", "target_type"), ("status", "package_manager")],
        Collection::Endpoints => &[("os_family", "has_agent")],
        Collection::Scopes => &[],
    }
}

/// The name under which the counts of a pair's value combinations live.
pub fn pair_name(first: &str, second: &str) -> String {
    format!("{first}+{second}")
}

/// The value a record counts under for a pair.
pub fn pair_value(first: &str, second: &str) -> String {
    format!("{first}\u{0}{second}")
}

/// The host also counts records by the hour of their `updated_at` (counts
/// only), so a wide `updatedAfter` is counted from hourly totals.
pub const UPDATED_HOUR: &str = "updated_hour";

/// The `updated_hour` value of an instant: its hour since the epoch as
/// fixed-width hex that sorts like the hour.
pub fn hour_value(nanos: i64) -> String {
    format!("{:016x}", (nanos.div_euclid(NANOS_PER_HOUR) as u64) ^ (1 << 63))
}

/// The first instant of the hour after the one `nanos` falls in.
pub fn next_hour_start(nanos: i64) -> i64 {
    (nanos.div_euclid(NANOS_PER_HOUR) + 1).saturating_mul(NANOS_PER_HOUR)
}

const NANOS_PER_HOUR: i64 = 3_600_000_000_000;

/// The indexes of a collection.
pub fn indexes(collection: Collection) -> &'static [Index] {
    match collection {
        Collection::Endpoints => ENDPOINTS,
        Collection::VulnerabilityFindings => FINDINGS,
        Collection::RemediationTargets => TARGETS,
        Collection::Scopes => SCOPES,
    }
}

/// The index with this name in a collection.
pub fn find(collection: Collection, name: &str) -> Option<Index> {
    indexes(collection).iter().copied().find(|index| index.name == name)
}

/// The collection's sort index ordered by `field`, if it keeps one.
pub fn sort_index(collection: Collection, field: SortField) -> Option<Index> {
    indexes(collection)
        .iter()
        .copied()
        .find(|index| index.key == IndexKey::SortValue && index.order == IndexOrder::By(field))
}

impl Index {
    /// What orders a record in this index: a timestamp in Unix
    /// nanoseconds, a rank or a [`number_position`]. A record without a
    /// timestamp sorts first; one without a sort value is under
    /// [`UNSORTED`], at 0.
    pub fn position(&self, record: &Value) -> i64 {
        self.position_of(record.pointer(self.position_pointer()))
    }

    /// Where in a record the value that orders it in this index is.
    pub fn position_pointer(&self) -> &'static str {
        match self.order {
            IndexOrder::CreatedAt => "/created_at",
            IndexOrder::UpdatedAt => "/updated_at",
            IndexOrder::By(field) => field.pointer(),
        }
    }

    /// The position of a record holding `value` at [`Index::position_pointer`].
    pub fn position_of(&self, value: Option<&Value>) -> i64 {
        match self.order {
            IndexOrder::CreatedAt | IndexOrder::UpdatedAt => {
                value.and_then(Value::as_str).and_then(crate::time::Timestamp::parse).map_or(i64::MIN, |t| t.0)
            }
            IndexOrder::By(field) => sort_position(&field.of(value)).unwrap_or(0),
        }
    }

    /// Whether `value` is one of the few values an index of this kind can
    /// hold: every index's but a field's or a list's items' (whose values
    /// come from the records).
    pub fn holds_only_fixed(&self, value: &str) -> bool {
        match self.key {
            IndexKey::Field(_) | IndexKey::EachOf(_) => false,
            IndexKey::Everything => value == SORTED,
            IndexKey::Present(_) => value == "true" || value == "false",
            IndexKey::SortValue => value == SORTED || value == UNSORTED,
            IndexKey::SortValueWhere(..) => value == SORTED,
        }
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
            IndexKey::SortValue => vec![if self.holds_sort_value(record) { SORTED } else { UNSORTED }.to_owned()],
            IndexKey::SortValueWhere(pointer, wanted) => {
                let in_state = record.pointer(pointer).and_then(Value::as_str) == Some(wanted);
                if in_state && self.holds_sort_value(record) { vec![SORTED.to_owned()] } else { Vec::new() }
            }
        }
    }

    /// Whether the record has the value this index orders by (a sort index's).
    fn holds_sort_value(&self, record: &Value) -> bool {
        match self.order {
            IndexOrder::By(field) => sort_position(&field.read(record)).is_some(),
            _ => false,
        }
    }
}

/// Where a sort value stands in a sort index; `None` for null.
pub fn sort_position(value: &SortValue) -> Option<i64> {
    match value {
        SortValue::Int(value) => Some(*value),
        SortValue::Number(value) => Some(number_position(*value)),
        SortValue::Text(text) => Some(text_position(text)),
        SortValue::Null => None,
    }
}

/// How many leading bytes of a text its [`text_position`] encodes.
const TEXT_POSITION_BYTES: usize = 10;

/// A text's position in a text sort index: its first bytes, 6 bits each,
/// in an order that never contradicts the texts' own (byte-wise, which is
/// how lists compare text): `a < b` gives `text_position(a) <=
/// text_position(b)`. Texts sharing a position are sorted by the whole
/// text when walked. The characters of host names and most names (space,
/// `-`, `.`, `/`, digits, `_`, lowercase letters) each have a code of
/// their own; any other byte shares a code with its neighbours, and the
/// encoding stops after it (what follows could order either way).
pub fn text_position(text: &str) -> i64 {
    bytes_position(text.as_bytes())
}

/// [`text_position`] of any bytes (such as a bound past a prefix's texts).
pub fn bytes_position(text: &[u8]) -> i64 {
    let mut position: u64 = 0;
    let mut open = true;
    for slot in 0..TEXT_POSITION_BYTES {
        let code = match text.get(slot) {
            Some(byte) if open => {
                let (code, exact) = byte_code(*byte);
                open = exact;
                code
            }
            _ => 0,
        };
        position = (position << 6) | u64::from(code);
    }
    position as i64
}

/// The 6-bit code of one byte of a text, in byte order (0 is the end of
/// the text), and whether it is this byte's alone.
fn byte_code(byte: u8) -> (u8, bool) {
    match byte {
        0x00..=0x1f => (1, false),
        b' ' => (2, true),
        0x21..=0x2c => (3, false),
        b'-' => (4, true),
        b'.' => (5, true),
        b'/' => (6, true),
        b'0'..=b'9' => (7 + (byte - b'0'), true),
        0x3a..=0x5e => (17, false),
        b'_' => (18, true),
        b'`' => (19, true),
        b'a'..=b'z' => (20 + (byte - b'a'), true),
        0x7b..=0x7f => (46, false),
        0x80..=0xff => (47, false),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A summary counts a counted pair's value combinations with one count
    /// row each and no work budget (`count_groups_within` in the store),
    /// which stays small only while each index of a pair holds one of a
    /// few values: an enumeration or a flag the schema checks on write.
    #[test]
    fn counted_pairs_hold_few_values() {
        use crate::schema::{Field, Kind, schema};
        fn kind_at(fields: &[Field], pointer: &str) -> Option<Kind> {
            let (name, rest) = pointer
                .trim_start_matches('/')
                .split_once('/')
                .map_or((pointer.trim_start_matches('/'), None), |(name, rest)| (name, Some(rest)));
            let field = fields.iter().find(|field| field.name == name)?;
            match (field.kind, rest) {
                (kind, None) => Some(kind),
                (Kind::Object(inner), Some(rest)) => kind_at(inner, rest),
                _ => None,
            }
        }
        for collection in Collection::ALL {
            for (first, second) in counted_pairs(collection) {
                for name in [first, second] {
                    let index = find(collection, name).unwrap_or_else(|| panic!("{collection}/{name}: no such index"));
                    let pointer = match index.key {
                        // `true` or `false`.
                        IndexKey::Present(_) => continue,
                        IndexKey::Field(pointer) => pointer,
                        _ => panic!("{collection}/{name}: neither a field nor a presence"),
                    };
                    let kind = kind_at(schema(collection), pointer);
                    assert!(
                        matches!(kind, Some(Kind::Enum(_) | Kind::Bool)),
                        "{collection}/{name} ({pointer}) is {kind:?}: not a few-valued field"
                    );
                }
            }
        }
    }

    #[test]
    fn text_positions_never_contradict_the_text_order() {
        let mut texts: Vec<String> = [
            "",
            " ",
            "-",
            "a",
            "a ",
            "a-",
            "a.b",
            "a0",
            "a9",
            "a_",
            "a`",
            "az",
            "b",
            "acme-lt-0001",
            "acme-lt-0002",
            "acme-lt-00010",
            "acme-lt-0001x",
            "acme-mbp-jdoe-001",
            "acme-mbp-jdoe-002",
            "web-prod-01",
            "web-prod-01\u{0}",
            "z!",
            "z#",
            "z#a",
            "z!z",
            "zz{",
            "zz~a",
            "é",
            "éa",
            "ü",
            "\u{7f}",
            "\u{1}",
            "\u{1f}b",
            "critical cves on laptops",
            "critical cves on servers",
            "a:b",
            "a@",
            "a[",
            "a^z",
            "server cve sweep",
        ]
        .iter()
        .map(|text| text.to_string())
        .collect();
        texts.sort();
        for pair in texts.windows(2) {
            assert!(text_position(&pair[0]) <= text_position(&pair[1]), "{:?} then {:?}", pair[0], pair[1]);
        }
        // Distinct on the characters of host names, up to the tenth.
        assert!(text_position("acme-lt-01") < text_position("acme-lt-02"));
        assert!(text_position("a") < text_position("a-"));
        assert_eq!(text_position("acme-lt-0001"), text_position("acme-lt-0002"));
        assert!(text_position("zzzzzzzzzz") > 0);
    }

    #[test]
    fn only_indexes_not_read_from_a_field_hold_fixed_values() {
        let index = |collection, name| find(collection, name).unwrap_or(EVERYTHING);
        let findings = Collection::VulnerabilityFindings;
        // Every value each kind can hold is fixed, and nothing else is.
        assert!(index(findings, CREATED_AT).holds_only_fixed(SORTED));
        assert!(index(findings, "by_cvss").holds_only_fixed(SORTED));
        assert!(index(findings, "by_cvss").holds_only_fixed(UNSORTED));
        assert!(SUPPRESSION_EXPIRY.holds_only_fixed(SORTED) && !SUPPRESSION_EXPIRY.holds_only_fixed(UNSORTED));
        assert!(index(Collection::Endpoints, "has_agent").holds_only_fixed("false"));
        assert!(!index(Collection::Endpoints, "has_agent").holds_only_fixed("maybe"));
        assert!(!index(findings, "by_cvss").holds_only_fixed("critical"));
        for (collection, name) in [(findings, "severity"), (findings, "endpoint_id"), (Collection::Endpoints, "tag")] {
            assert!(!index(collection, name).holds_only_fixed(SORTED), "{name}");
            assert!(!index(collection, name).holds_only_fixed("true"), "{name}");
        }
    }

    #[test]
    fn values_follow_the_key_kind() {
        let target = json!({"scope_ids": ["b", "a", "b"], "status": "queued", "package_manager": null});
        assert_eq!(
            find(Collection::RemediationTargets, "scope_id").map(|i| i.values(&target)),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            find(Collection::RemediationTargets, "status").map(|i| i.values(&target)),
            Some(vec!["queued".into()])
        );
        assert_eq!(find(Collection::RemediationTargets, "package_manager").map(|i| i.values(&target)), Some(vec![]));
        let endpoint = json!({"agent_id": null});
        assert_eq!(find(Collection::Endpoints, "has_agent").map(|i| i.values(&endpoint)), Some(vec!["false".into()]));
        assert_eq!(
            find(Collection::VulnerabilityFindings, "kev").map(|i| i.values(&json!({"kev": true}))),
            Some(vec!["true".into()])
        );
        // Only suppressed findings with an expiry, at the expiry.
        let suppressed = json!({"status": "suppressed", "suppression": {"expires_at": "1970-01-01T00:00:01Z"}});
        assert_eq!(SUPPRESSION_EXPIRY.values(&suppressed), vec![SORTED.to_owned()]);
        assert_eq!(SUPPRESSION_EXPIRY.position(&suppressed), 1_000_000_000);
        let for_good = json!({"status": "suppressed", "suppression": {"reason": "accepted_risk"}});
        let reopened = json!({"status": "open", "suppression": {"expires_at": "1970-01-01T00:00:01Z"}});
        assert!(SUPPRESSION_EXPIRY.values(&for_good).is_empty());
        assert!(SUPPRESSION_EXPIRY.values(&reopened).is_empty());
        assert!(Collection::ALL.into_iter().all(|c| find(c, CREATED_AT).is_some()));
    }
}

/// Where a record stands in an index: its position (`created_at`,
/// `updated_at` or the sort value, as Unix nanoseconds or an
/// order-preserving code, see [`Index::position`]), then its id, which
/// breaks ties. Index order is this type's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexPosition {
    pub position: i64,
    pub id: Uuid,
}

impl IndexPosition {
    pub fn new(position: i64, id: Uuid) -> IndexPosition {
        IndexPosition { position, id }
    }
}

/// A walk of a collection's records in id order (creation order: ids are
/// UUIDv7): strictly after `after` when given (before it when `reverse`,
/// which walks from the newest), at most `limit` records (the store caps
/// it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordWalk {
    pub after: Option<Uuid>,
    pub limit: usize,
    pub reverse: bool,
}

impl RecordWalk {
    /// The first `limit` records, oldest first.
    pub fn new(limit: usize) -> RecordWalk {
        RecordWalk { after: None, limit, reverse: false }
    }

    /// The same walk, strictly after `after` when given.
    pub fn after(self, after: Option<Uuid>) -> RecordWalk {
        RecordWalk { after, ..self }
    }

    /// The same walk, from the newest when `reverse`.
    pub fn reversed(self, reverse: bool) -> RecordWalk {
        RecordWalk { reverse, ..self }
    }
}

/// A walk of the entries holding `value` in the index `index`: in index
/// order (descending when `reverse`), strictly after `after` in that order
/// when given, at most `limit` entries (the store caps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexWalk<'a> {
    pub index: &'a str,
    pub value: &'a str,
    pub after: Option<IndexPosition>,
    pub limit: usize,
    pub reverse: bool,
}

impl<'a> IndexWalk<'a> {
    /// The first `limit` entries holding `value`, in index order.
    pub fn new(index: &'a str, value: &'a str, limit: usize) -> IndexWalk<'a> {
        IndexWalk { index, value, after: None, limit, reverse: false }
    }

    /// The same walk, strictly after `after` when given.
    pub fn after(self, after: Option<IndexPosition>) -> IndexWalk<'a> {
        IndexWalk { after, ..self }
    }

    /// The same walk, from the end when `reverse`.
    pub fn reversed(self, reverse: bool) -> IndexWalk<'a> {
        IndexWalk { reverse, ..self }
    }
}

/// Records holding any of `values` in the index `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexCondition {
    pub index: String,
    pub values: Vec<String>,
}

/// The records of the sort index `index` that hold its sort value (index
/// value [`SORTED`]) at a position strictly after `after` and strictly
/// before `before`; an absent end is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRange {
    pub index: String,
    pub after: Option<IndexPosition>,
    pub before: Option<IndexPosition>,
}

impl IndexCondition {
    pub fn new(index: impl Into<String>, values: Vec<String>) -> IndexCondition {
        IndexCondition { index: index.into(), values }
    }
}

/// The records a count counts: those in every one of `ranges` (at most
/// [`MAX_RANGES`](crate::limits::MAX_RANGES)), holding one of each
/// condition's values, and updated strictly after `updated_after` (Unix
/// nanoseconds) when given. The default matches every record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matching {
    pub ranges: Vec<IndexRange>,
    pub conditions: Vec<IndexCondition>,
    pub updated_after: Option<i64>,
}

impl Matching {
    /// The records meeting every condition.
    pub fn conditions(conditions: Vec<IndexCondition>) -> Matching {
        Matching { conditions, ..Matching::default() }
    }

    /// The records in `range`.
    pub fn range(range: IndexRange) -> Matching {
        Matching { ranges: vec![range], ..Matching::default() }
    }

    /// These records, further narrowed by `more` conditions.
    pub fn and(&self, more: impl IntoIterator<Item = IndexCondition>) -> Matching {
        let mut narrowed = self.clone();
        narrowed.conditions.extend(more);
        narrowed
    }
}

/// One group of a count by index values: the value held in each grouping
/// index, in the order asked, and how many records hold them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCount {
    pub values: Vec<String>,
    pub count: u64,
}
