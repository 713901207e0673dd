//! Strict query-parameter parsing.
//!
//! A [`Query`] checks that every parameter is known and sent once, then
//! parses values on request, collecting every problem so that one `400`
//! names all of them rather than the first.

use crate::time::Timestamp;
use crate::{InvalidParam, PluginError, QueryParam};

/// A query parameter a plugin accepts: its name, what it holds and what it
/// means. The same table names the parameters [`Query::new`] allows and
/// gives the host the JSON Schema of each for the API's OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    pub description: &'static str,
    pub required: bool,
    /// The value the plugin uses when the parameter is absent, as sent.
    pub default: Option<&'static str>,
}

/// What a parameter's value holds; each matches one of [`Query`]'s parsers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamKind {
    /// Free text of 1 to `max` characters ([`Query::text`]).
    Text { max: usize },
    /// One value out of these ([`Query::one_of`]).
    OneOf(&'static [&'static str]),
    /// Comma-separated values out of these ([`Query::any_of`]).
    AnyOf(&'static [&'static str]),
    /// Comma-separated UUIDs ([`Query::uuids`]).
    Uuids,
    /// Comma-separated values, each matching `pattern` (ECMA-262, as JSON
    /// Schema reads it) and at most `max` characters long ([`Query::list`]).
    ListOf { pattern: &'static str, max: usize },
    /// `true` or `false` ([`Query::boolean`]).
    Boolean,
    /// A whole number in this range ([`Query::integer`]).
    Integer { min: u64, max: u64 },
    /// A number in this range ([`Query::number`]).
    Number { min: f64, max: f64 },
    /// An RFC 3339 timestamp ([`Query::timestamp`]).
    Timestamp,
    /// An opaque token the service issued.
    Cursor,
}

/// The most values a comma-separated parameter takes ([`Query::list`]).
pub const MAX_LIST_VALUES: usize = 100;

pub use esr_contract::limits::MAX_CURSOR_CHARS;

/// The longest timestamp parameter accepted, in characters (RFC 3339
/// allows any number of fraction digits; beyond nanoseconds they are dropped).
pub const MAX_TIMESTAMP_CHARS: usize = 64;

/// A UUID in any case, as [`normalize_uuid`] accepts it.
const UUID_PATTERN: &str = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";

impl Param {
    /// An optional parameter.
    pub const fn new(name: &'static str, kind: ParamKind, description: &'static str) -> Param {
        Param { name, kind, description, required: false, default: None }
    }

    /// The same parameter, required.
    pub const fn required(self) -> Param {
        Param { required: true, ..self }
    }

    /// The same parameter, with the value used when it is absent.
    pub const fn with_default(self, default: &'static str) -> Param {
        Param { default: Some(default), ..self }
    }

    /// The JSON Schema of the values the parser accepts. Every string
    /// states its longest value (`maxLength`, which the host enforces
    /// before a component sees the request) and every integer its format.
    pub fn schema(&self) -> serde_json::Value {
        use serde_json::json;
        let mut schema = match self.kind {
            ParamKind::Text { max } => json!({"type": "string", "minLength": 1, "maxLength": max}),
            ParamKind::OneOf(values) => json!({"type": "string", "enum": values}),
            ParamKind::AnyOf(values) => {
                // Duplicates collapse, so any number of them is accepted
                // within the length of the most distinct values.
                let one = format!("({})", values.join("|"));
                let longest = values.iter().map(|value| value.chars().count()).max().unwrap_or(0);
                json!({
                    "type": "string",
                    "pattern": format!("^{one}(,{one})*$"),
                    "maxLength": list_max_chars(longest),
                })
            }
            ParamKind::Uuids => list_schema(UUID_PATTERN, 36),
            ParamKind::ListOf { pattern, max } => list_schema(pattern, max),
            ParamKind::Boolean => json!({"type": "boolean"}),
            ParamKind::Integer { min, max } => {
                let format = if max > i32::MAX as u64 { "int64" } else { "int32" };
                json!({"type": "integer", "format": format, "minimum": min, "maximum": max})
            }
            ParamKind::Number { min, max } => json!({"type": "number", "minimum": min, "maximum": max}),
            ParamKind::Timestamp => json!({"type": "string", "format": "date-time", "maxLength": MAX_TIMESTAMP_CHARS}),
            ParamKind::Cursor => json!({"type": "string", "minLength": 1, "maxLength": MAX_CURSOR_CHARS}),
        };
        if let Some(default) = self.default {
            schema["default"] = match self.kind {
                ParamKind::Integer { .. } => default.parse::<u64>().map_or_else(|_| json!(default), |n| json!(n)),
                _ => json!(default),
            };
        }
        schema
    }
}

/// The longest comma-separated list of [`MAX_LIST_VALUES`] values of at
/// most `longest` characters each.
fn list_max_chars(longest: usize) -> usize {
    MAX_LIST_VALUES * (longest + 1) - 1
}

/// A comma-separated list of 1 to [`MAX_LIST_VALUES`] values matching `one`,
/// each at most `longest` characters.
fn list_schema(one: &str, longest: usize) -> serde_json::Value {
    let more = MAX_LIST_VALUES - 1;
    serde_json::json!({
        "type": "string",
        "minLength": 1,
        "maxLength": list_max_chars(longest),
        "pattern": format!("^({one})(,({one})){{0,{more}}}$"),
    })
}

/// The parameters of one request, being parsed.
pub struct Query<'a> {
    params: &'a [QueryParam],
    errors: Vec<InvalidParam>,
}

impl<'a> Query<'a> {
    /// Starts parsing; an unknown or repeated parameter is an error.
    pub fn new(params: &'a [QueryParam], allowed: &[&str]) -> Query<'a> {
        let mut query = Query { params, errors: Vec::new() };
        for (index, param) in params.iter().enumerate() {
            if !allowed.contains(&param.name.as_str()) {
                query.reject(&param.name, "unknown parameter");
            } else if params[..index].iter().any(|earlier| earlier.name == param.name) {
                query.reject(&param.name, "given more than once");
            }
        }
        query
    }

    /// Records a problem with parameter `name`, once per name and reason.
    pub fn reject(&mut self, name: &str, reason: impl Into<String>) {
        let reason = reason.into();
        if !self.errors.iter().any(|e| e.name == name && e.reason == reason) {
            self.errors.push(InvalidParam { name: name.to_owned(), reason });
        }
    }

    /// The raw value of `name`, if sent. An empty value is an error.
    pub fn raw(&mut self, name: &str) -> Option<&'a str> {
        let value = self.params.iter().find(|p| p.name == name)?.value.as_str();
        if value.is_empty() {
            self.reject(name, "must not be empty");
            return None;
        }
        Some(value)
    }

    /// A free-text value of at most `max_len` characters.
    pub fn text(&mut self, name: &str, max_len: usize) -> Option<&'a str> {
        let value = self.raw(name)?;
        if value.chars().count() > max_len {
            self.reject(name, format!("longer than {max_len} characters"));
            return None;
        }
        Some(value)
    }

    /// One value out of `allowed`.
    pub fn one_of(&mut self, name: &str, allowed: &[&str]) -> Option<&'a str> {
        let value = self.raw(name)?;
        if allowed.contains(&value) {
            Some(value)
        } else {
            self.reject(name, not_one_of(allowed));
            None
        }
    }

    /// Comma-separated values, each out of `allowed`; duplicates collapse.
    pub fn any_of(&mut self, name: &str, allowed: &[&str]) -> Option<Vec<&'a str>> {
        let values = self.list(name, |value| allowed.contains(&value).then_some(value), &not_one_of(allowed))?;
        Some(values)
    }

    /// Comma-separated UUIDs (lowercased).
    pub fn uuids(&mut self, name: &str) -> Option<Vec<String>> {
        self.list(name, normalize_uuid, "not a UUID")
    }

    /// Comma-separated values, each parsed by `parse`; `reason` names what a
    /// bad one is not. At most 100 values.
    pub fn list<T: PartialEq>(
        &mut self,
        name: &str,
        parse: impl Fn(&'a str) -> Option<T>,
        reason: &str,
    ) -> Option<Vec<T>> {
        let raw = self.raw(name)?;
        let mut values = Vec::new();
        for part in raw.split(',') {
            match parse(part) {
                Some(value) if !values.contains(&value) => values.push(value),
                Some(_) => {}
                None => {
                    let shown: String = part.chars().take(64).collect();
                    self.reject(name, format!("'{shown}' is {reason}"));
                    return None;
                }
            }
        }
        if values.len() > MAX_LIST_VALUES {
            self.reject(name, format!("more than {MAX_LIST_VALUES} values"));
            return None;
        }
        Some(values)
    }

    /// `true` or `false`.
    pub fn boolean(&mut self, name: &str) -> Option<bool> {
        match self.raw(name)? {
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                self.reject(name, "not a boolean (true or false)");
                None
            }
        }
    }

    /// A whole number in `min..=max`.
    pub fn integer(&mut self, name: &str, min: u64, max: u64) -> Option<u64> {
        let raw = self.raw(name)?;
        match raw.parse::<u64>() {
            Ok(value) if (min..=max).contains(&value) && raw.bytes().all(|b| b.is_ascii_digit()) => Some(value),
            _ => {
                self.reject(name, format!("not a whole number from {min} to {max}"));
                None
            }
        }
    }

    /// A decimal number in `min..=max`.
    pub fn number(&mut self, name: &str, min: f64, max: f64) -> Option<f64> {
        let raw = self.raw(name)?;
        // Decimal notation, exponent allowed (`0.5`, `5e-1`); never `inf` or `NaN`.
        let decimal = raw.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
        match raw.parse::<f64>() {
            Ok(value) if decimal && value.is_finite() && value >= min && value <= max => Some(value),
            _ => {
                self.reject(name, format!("not a number from {min} to {max}"));
                None
            }
        }
    }

    /// An RFC 3339 timestamp.
    pub fn timestamp(&mut self, name: &str) -> Option<Timestamp> {
        let raw = self.raw(name)?;
        match Timestamp::parse_saturating(raw) {
            Some(value) => Some(value),
            None => {
                self.reject(name, "not an RFC 3339 timestamp (e.g. 2026-11-22T05:39:42Z)");
                None
            }
        }
    }

    /// A UUID (lowercased).
    pub fn uuid(&mut self, name: &str) -> Option<String> {
        let raw = self.raw(name)?;
        match normalize_uuid(raw) {
            Some(value) => Some(value),
            None => {
                self.reject(name, "not a UUID");
                None
            }
        }
    }

    /// Ends parsing: every problem found, or none.
    pub fn finish(self) -> Result<(), PluginError> {
        if self.errors.is_empty() { Ok(()) } else { Err(PluginError::InvalidParameters(self.errors)) }
    }
}

/// `not one of a, b, c`: the reason for a value outside an enum.
pub fn not_one_of(allowed: &[&str]) -> String {
    format!("not one of {}", allowed.join(", "))
}

/// The lowercase hyphenated form of a UUID, or `None` if `raw` is not one.
pub fn normalize_uuid(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    for (index, byte) in bytes.iter().enumerate() {
        let hyphen = matches!(index, 8 | 13 | 18 | 23);
        if hyphen != (*byte == b'-') || (!hyphen && !byte.is_ascii_hexdigit()) {
            return None;
        }
    }
    Some(raw.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    fn errors(result: Result<(), PluginError>) -> Vec<(String, String)> {
        match result {
            Err(PluginError::InvalidParameters(list)) => list.into_iter().map(|e| (e.name, e.reason)).collect(),
            other => panic!("expected invalid parameters, got {other:?}"),
        }
    }

    #[test]
    fn unknown_and_repeated_parameters_are_named() {
        let request = Request::with_query("/", &[("limit", "1"), ("bogus", "x"), ("limit", "2")]);
        let query = Query::new(&request.query, &["limit"]);
        let found = errors(query.finish());
        assert_eq!(
            found,
            vec![
                ("bogus".to_owned(), "unknown parameter".to_owned()),
                ("limit".to_owned(), "given more than once".to_owned())
            ]
        );
    }

    #[test]
    fn enum_lists_accept_known_values_and_name_the_bad_one() {
        let request = Request::with_query("/", &[("osFamily", "macos,linux,macos")]);
        let mut query = Query::new(&request.query, &["osFamily"]);
        assert_eq!(query.any_of("osFamily", &["macos", "windows", "linux"]), Some(vec!["macos", "linux"]));
        assert!(query.finish().is_ok());

        let request = Request::with_query("/", &[("osFamily", "macos,beos")]);
        let mut query = Query::new(&request.query, &["osFamily"]);
        assert_eq!(query.any_of("osFamily", &["macos", "windows", "linux"]), None);
        assert_eq!(
            errors(query.finish()),
            vec![("osFamily".to_owned(), "'beos' is not one of macos, windows, linux".to_owned())]
        );
    }

    #[test]
    fn integers_booleans_and_uuids_are_strict() {
        let request = Request::with_query(
            "/",
            &[("limit", "+5"), ("hasAgent", "yes"), ("endpointId", "not-a-uuid"), ("offset", "")],
        );
        let mut query = Query::new(&request.query, &["limit", "hasAgent", "endpointId", "offset"]);
        assert_eq!(query.integer("limit", 1, 100), None);
        assert_eq!(query.boolean("hasAgent"), None);
        assert_eq!(query.uuid("endpointId"), None);
        assert_eq!(query.integer("offset", 0, u64::MAX), None);
        let names: Vec<String> = errors(query.finish()).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["limit", "hasAgent", "endpointId", "offset"]);
    }

    #[test]
    fn uuids_are_lowercased() {
        assert_eq!(
            normalize_uuid("0192F0B4-1C2D-7E3F-8A4B-5C6D7E8F9A0B").as_deref(),
            Some("0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a0b")
        );
        assert_eq!(normalize_uuid("0192f0b41c2d7e3f8a4b5c6d7e8f9a0b"), None);
    }
}
