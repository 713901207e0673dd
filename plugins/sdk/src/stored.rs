//! A stored record as a list walks it: the bytes the store returned,
//! parsed only as far as the walk needs.
//!
//! Most pages need one or two fields of each record (its position in an
//! index, a sort value) and none of the rest: building a whole
//! `serde_json::Value` for each record was most of a list's cost, twice so
//! inside a component. A field is read by a scan that follows one JSON
//! pointer and skips everything else without allocating; the whole record
//! is parsed only when a filter has to test it.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::fmt;

use bytes::Bytes;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::PluginError;

/// One record from a store scan.
pub(crate) struct StoredRecord {
    pub id: String,
    pub bytes: Bytes,
    /// Its number when the store holds it ([`crate::Held`]): `bytes` is
    /// then empty, and a walk that reads a field of it is mistaken.
    pub held: Option<u32>,
    parsed: OnceCell<Value>,
}

impl StoredRecord {
    pub fn new(id: String, bytes: impl Into<Bytes>) -> StoredRecord {
        StoredRecord { id, bytes: bytes.into(), held: None, parsed: OnceCell::new() }
    }

    /// A record the store holds, by its number.
    pub fn held(id: String, number: u32) -> StoredRecord {
        StoredRecord { id, bytes: Bytes::new(), held: Some(number), parsed: OnceCell::new() }
    }

    /// The whole record, parsed on first use.
    pub fn value(&self) -> Result<&Value, PluginError> {
        if let Some(value) = self.parsed.get() {
            return Ok(value);
        }
        self.readable()?;
        let value = serde_json::from_slice(&self.bytes).map_err(|e| self.not_json(e))?;
        Ok(self.parsed.get_or_init(|| value))
    }

    /// The value at the JSON `pointer` (`None` when absent), read without
    /// parsing the rest of the record.
    pub fn at(&self, pointer: &str) -> Result<Option<Value>, PluginError> {
        if let Some(value) = self.parsed.get() {
            return Ok(value.pointer(pointer).cloned());
        }
        self.readable()?;
        value_at(&self.bytes, pointer).map_err(|e| self.not_json(e))
    }

    fn readable(&self) -> Result<(), PluginError> {
        match self.held {
            Some(number) => Err(PluginError::Internal(format!("held record {number} ({}) was read", self.id))),
            None => Ok(()),
        }
    }

    fn not_json(&self, error: serde_json::Error) -> PluginError {
        PluginError::Internal(format!("stored record {} is not JSON: {error}", self.id))
    }
}

/// The value at the JSON `pointer` in the document `bytes`, skipping every
/// other member. `Value::pointer` semantics for objects; a pointer through
/// an array finds nothing (no record field needs one).
pub fn value_at(bytes: &[u8], pointer: &str) -> Result<Option<Value>, serde_json::Error> {
    let unescape = |segment| match segment {
        escaped if str::contains(escaped, '~') => Cow::Owned(escaped.replace("~1", "/").replace("~0", "~")),
        plain => Cow::Borrowed(plain),
    };
    let segments: Vec<Cow<'_, str>> = pointer.split('/').skip(1).map(unescape).collect();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let found = PointerSeed { segments: &segments }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(found)
}

/// Follows the remaining pointer segments through one JSON value.
struct PointerSeed<'p> {
    segments: &'p [Cow<'p, str>],
}

impl<'de> DeserializeSeed<'de> for PointerSeed<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<Value>, D::Error> {
        match self.segments.split_first() {
            None => serde::Deserialize::deserialize(deserializer).map(Some),
            Some((key, rest)) => deserializer.deserialize_any(MemberVisitor { key, rest }),
        }
    }
}

/// Looks for one member of an object; anything else holds nothing there.
struct MemberVisitor<'p> {
    key: &'p str,
    rest: &'p [Cow<'p, str>],
}

impl<'de> Visitor<'de> for MemberVisitor<'_> {
    type Value = Option<Value>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let mut found = None;
        while let Some(is_key) = map.next_key_seed(KeyIs(self.key))? {
            if is_key {
                // The last of duplicate members wins, as in `Value`.
                found = map.next_value_seed(PointerSeed { segments: self.rest })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
}

/// Whether an object key equals the wanted one, without allocating it.
struct KeyIs<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pointer_reads_what_value_pointer_reads() {
        let record = json!({
            "id": "a", "cvss": {"version": "3.1", "base_score": 9.8, "vector": null},
            "tags": ["x", {"y": 1}], "a/b": {"c~d": true}, "escaped \"key\"": "v",
            "n": null, "dup": 1, "severity": "critical"
        });
        let bytes = serde_json::to_vec(&record).expect("json");
        let pointers = [
            "",
            "/id",
            "/cvss",
            "/cvss/base_score",
            "/cvss/vector",
            "/cvss/missing",
            "/missing",
            "/missing/deeper",
            "/id/deeper",
            "/n",
            "/n/deeper",
            "/a~1b/c~0d",
            "/escaped \"key\"",
            "/severity",
            "/tags/0",
        ];
        for pointer in pointers {
            let expected = if pointer.starts_with("/tags/") { None } else { record.pointer(pointer).cloned() };
            assert_eq!(value_at(&bytes, pointer).expect("parses"), expected, "{pointer}");
        }
    }

    #[test]
    fn the_last_duplicate_member_wins_and_bad_json_is_an_error() {
        assert_eq!(value_at(br#"{"a":1,"b":{"c":2},"a":3}"#, "/a").expect("parses"), Some(json!(3)));
        assert!(value_at(br#"{"a":1,"b":"#, "/a").is_err());
        assert!(value_at(br#"{"a":1} trailing"#, "/a").is_err());
        let record = StoredRecord::new("r".into(), b"{\"a\":[1,2".to_vec());
        assert!(matches!(record.at("/a"), Err(PluginError::Internal(message)) if message.contains("stored record r")));
        assert!(record.value().is_err());
    }

    #[test]
    fn a_parsed_record_answers_from_its_value() {
        let record = StoredRecord::new("r".into(), br#"{"a":{"b":"c"}}"#.to_vec());
        assert_eq!(record.at("/a/b").expect("reads"), Some(json!("c")));
        assert_eq!(record.value().expect("parses")["a"]["b"], "c");
        assert_eq!(record.at("/a/b").expect("reads"), Some(json!("c")));
        assert_eq!(record.at("/a/x").expect("reads"), None);
    }
}
