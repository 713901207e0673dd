//! Sort keys: how a key reads a record, and how the values it reads order.
//! Both the list walk and the sort indexes build on these.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Timestamp;

/// How a sort key reads a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortField {
    /// An RFC 3339 timestamp at this JSON pointer.
    Timestamp(&'static str),
    /// A string at this pointer, compared case-insensitively.
    Text(&'static str),
    /// A number at this pointer.
    Number(&'static str),
    /// An enum at this pointer, ranked by its position in the list
    /// (first = lowest).
    Rank(&'static str, &'static [&'static str]),
}

impl SortField {
    pub fn read(self, record: &Value) -> SortValue {
        self.of(record.pointer(self.pointer()))
    }

    /// Where the key is in a record.
    pub fn pointer(self) -> &'static str {
        match self {
            SortField::Timestamp(pointer)
            | SortField::Text(pointer)
            | SortField::Number(pointer)
            | SortField::Rank(pointer, _) => pointer,
        }
    }

    /// The sort value of what a record holds at [`SortField::pointer`].
    pub fn of(self, value: Option<&Value>) -> SortValue {
        match self {
            SortField::Timestamp(_) => value
                .and_then(Value::as_str)
                .and_then(Timestamp::parse)
                .map_or(SortValue::Null, |t| SortValue::Int(t.0)),
            SortField::Text(_) => {
                value.and_then(Value::as_str).map_or(SortValue::Null, |s| SortValue::Text(s.to_lowercase()))
            }
            SortField::Number(_) => value.and_then(Value::as_f64).map_or(SortValue::Null, SortValue::Number),
            SortField::Rank(_, ranks) => value
                .and_then(Value::as_str)
                .and_then(|s| ranks.iter().position(|r| *r == s))
                .map_or(SortValue::Null, |rank| SortValue::Int(rank as i64)),
        }
    }
}

/// A record's value under a sort key. Nulls sort last in both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SortValue {
    Null,
    Int(i64),
    Number(f64),
    Text(String),
}

impl SortValue {
    fn rank(&self) -> u8 {
        match self {
            SortValue::Null => 3,
            SortValue::Int(_) => 0,
            SortValue::Number(_) => 1,
            SortValue::Text(_) => 2,
        }
    }

    /// The order of two values under a sort, nulls last in both directions.
    pub fn compare(&self, other: &SortValue, descending: bool) -> Ordering {
        let ordering = match (self, other) {
            (SortValue::Null, SortValue::Null) => return Ordering::Equal,
            (SortValue::Null, _) => return Ordering::Greater,
            (_, SortValue::Null) => return Ordering::Less,
            (SortValue::Int(a), SortValue::Int(b)) => a.cmp(b),
            (SortValue::Number(a), SortValue::Number(b)) => a.total_cmp(b),
            (SortValue::Text(a), SortValue::Text(b)) => a.cmp(b),
            (a, b) => a.rank().cmp(&b.rank()),
        };
        if descending { ordering.reverse() } else { ordering }
    }
}
