//! The record schemas of the four collections (`public-api.md`): one
//! definition for the host's ingest validation and the documents that
//! describe the records.
//!
//! A schema lists a record's fields, each with its kind, whether it may be
//! `null`, and who owns it. Fields the service owns (`created_at`,
//! `updated_at`, derived counts) are never taken from imported data.

use crate::Collection;
use crate::contract::*;

/// What a field holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A string of 1 to `max` characters, without control characters
    /// (C0, DEL, C1), format characters (Cf: bidirectional formatting,
    /// zero-width, tags…), line and paragraph separators or noncharacters
    /// ([`crate::text::Form::Line`]); `multiline` free text may also hold
    /// line feeds, carriage returns, tabs, separators and the zero-width
    /// joiners ([`crate::text::Form::Lines`]).
    Text {
        max: usize,
        multiline: bool,
    },
    /// A name records are matched by (a product, a vendor, a tag): one
    /// line of text of 1 to `max` characters that also holds no
    /// variation selector or other invisible character, and no word
    /// mixing Latin with look-alike letters of Cyrillic or Greek
    /// ([`crate::text::Form::Name`]). Stored as given; matched in
    /// [`crate::text::match_key`] form.
    Name {
        max: usize,
    },
    /// A host name as RFC 1123 allows: dot-separated labels of letters,
    /// digits and inner hyphens, 1 to 63 characters each, 253 in all.
    Hostname,
    /// An e-mail address: a dot-atom local part, `@`, a host name with a dot.
    Email,
    /// A lowercase name token (`[a-z0-9._-]`, 1 to 64 characters).
    Token,
    /// One of these strings.
    Enum(&'static [&'static str]),
    /// A UUID (lowercase, hyphenated).
    Uuid,
    /// The id of a record of this collection, in the same organization.
    Reference(Collection),
    /// An RFC 3339 timestamp.
    Timestamp,
    Bool,
    /// A number in this closed range.
    Number {
        min: f64,
        max: f64,
    },
    /// A whole number in this closed range.
    Integer {
        min: i64,
        max: i64,
    },
    /// An IPv4 or IPv6 address.
    IpAddress,
    /// A MAC address: six hex pairs separated by `:` or `-`.
    MacAddress,
    /// `CVE-YYYY-NNNN…`.
    CveId,
    /// An object with these fields; no others.
    Object(&'static [Field]),
    /// An array of items of this kind (at most [`MAX_ARRAY_ITEMS`]).
    Array(&'static Kind),
}

/// The most items an array field holds.
pub const MAX_ARRAY_ITEMS: usize = 1000;

/// Who sets a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Imported data sets it.
    Client,
    /// The service sets it; imported values are ignored.
    Service,
}

/// One field of a record or object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    /// Required fields must be present (and not null unless `nullable`).
    /// A missing optional field takes its empty value: `null` when
    /// nullable, else `[]`, `false`, or an object of empty fields.
    pub required: bool,
    pub nullable: bool,
    pub owner: Owner,
}

const fn required(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, required: true, nullable: false, owner: Owner::Client }
}

const fn nullable(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, required: false, nullable: true, owner: Owner::Client }
}

const fn optional(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, required: false, nullable: false, owner: Owner::Client }
}

const fn service(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, required: false, nullable: false, owner: Owner::Service }
}

/// One line of text of at most `max` characters.
const fn text(max: usize) -> Kind {
    Kind::Text { max, multiline: false }
}

const SHORT: Kind = text(256);
/// A name that filters and identities match.
const NAME: Kind = Kind::Name { max: 256 };
const NAME_LIST: Kind = Kind::Array(&NAME);
/// Free text that may run over several lines (descriptions, notes).
const LONG: Kind = Kind::Text { max: 8192, multiline: true };
const SHORT_LIST: Kind = Kind::Array(&SHORT);

/// The identity and bookkeeping fields every record has.
const ID: Field = optional("id", Kind::Uuid);
const CREATED_AT: Field = service("created_at", Kind::Timestamp);
const UPDATED_AT: Field = service("updated_at", Kind::Timestamp);

const SEVERITY_COUNT: Kind = Kind::Integer { min: 0, max: i64::MAX };

pub const ENDPOINT: &[Field] = &[
    ID,
    required("hostname", Kind::Hostname),
    nullable("ip", Kind::IpAddress),
    nullable("mac_address", Kind::MacAddress),
    required(
        "operating_system",
        Kind::Object(&[
            required("name", SHORT),
            nullable("version", SHORT),
            required("family", Kind::Enum(OS_FAMILIES)),
            nullable("vendor", SHORT),
            nullable("architecture", SHORT),
        ]),
    ),
    nullable("agent_id", Kind::Uuid),
    nullable("agent_version", SHORT),
    CREATED_AT,
    UPDATED_AT,
    optional("tags", NAME_LIST),
    nullable("owner", Kind::Object(&[nullable("name", SHORT), nullable("email", Kind::Email)])),
    nullable("last_seen_at", Kind::Timestamp),
    service(
        "open_findings",
        Kind::Object(&[
            required("critical", SEVERITY_COUNT),
            required("high", SEVERITY_COUNT),
            required("medium", SEVERITY_COUNT),
            required("low", SEVERITY_COUNT),
            required("info", SEVERITY_COUNT),
        ]),
    ),
];

const SLA: Kind = Kind::Integer { min: 0, max: 3650 };

pub const SCOPE: &[Field] = &[
    ID,
    required("name", SHORT),
    nullable("description", LONG),
    required("status", Kind::Enum(SCOPE_STATUSES)),
    optional(
        "subject_filter",
        Kind::Object(&[
            optional("subject_types", Kind::Array(&Kind::Enum(SUBJECT_TYPES))),
            optional("vendors", NAME_LIST),
            optional("products", NAME_LIST),
            optional("cpe_patterns", SHORT_LIST),
        ]),
    ),
    optional(
        "endpoint_filter",
        Kind::Object(&[
            optional("os_families", Kind::Array(&Kind::Enum(OS_FAMILIES))),
            optional("endpoint_ids", Kind::Array(&Kind::Reference(Collection::Endpoints))),
            nullable("has_agent", Kind::Bool),
            optional("tags", NAME_LIST),
        ]),
    ),
    optional(
        "finding_filter",
        Kind::Object(&[
            optional("finding_types", Kind::Array(&Kind::Enum(FINDING_TYPES))),
            nullable("min_severity", Kind::Enum(SEVERITIES)),
            nullable("min_cvss_score", Kind::Number { min: 0.0, max: 10.0 }),
            optional("kev_only", Kind::Bool),
        ]),
    ),
    optional(
        "sla_days",
        Kind::Object(&[
            optional("critical", SLA),
            optional("high", SLA),
            optional("medium", SLA),
            optional("low", SLA),
            optional("info", SLA),
        ]),
    ),
    CREATED_AT,
    UPDATED_AT,
];

pub const FINDING: &[Field] = &[
    ID,
    required("endpoint_id", Kind::Reference(Collection::Endpoints)),
    required("finding_type", Kind::Enum(FINDING_TYPES)),
    required("title", text(1024)),
    nullable("description", LONG),
    required("severity", Kind::Enum(SEVERITIES)),
    required("status", Kind::Enum(FINDING_STATUSES)),
    nullable("cve_id", Kind::CveId),
    nullable(
        "cvss",
        Kind::Object(&[
            required("version", Kind::Enum(CVSS_VERSIONS)),
            required("base_score", Kind::Number { min: 0.0, max: 10.0 }),
            required("vector", SHORT),
        ]),
    ),
    nullable(
        "epss",
        Kind::Object(&[
            required("score", Kind::Number { min: 0.0, max: 1.0 }),
            required("percentile", Kind::Number { min: 0.0, max: 1.0 }),
        ]),
    ),
    optional("kev", Kind::Bool),
    required(
        "subject",
        Kind::Object(&[
            required("type", Kind::Enum(SUBJECT_TYPES)),
            nullable("vendor", NAME),
            required("product", NAME),
            nullable("version", SHORT),
            nullable("cpe", SHORT),
            nullable("purl", text(1024)),
        ]),
    ),
    nullable("fixed_version", SHORT),
    required("source", Kind::Object(&[required("scanner", Kind::Token), required("scanner_finding_id", SHORT)])),
    nullable("remediation_target_id", Kind::Reference(Collection::RemediationTargets)),
    nullable(
        "suppression",
        Kind::Object(&[
            required("reason", Kind::Enum(SUPPRESSION_REASONS)),
            nullable("note", LONG),
            nullable("expires_at", Kind::Timestamp),
        ]),
    ),
    required("first_seen_at", Kind::Timestamp),
    required("last_seen_at", Kind::Timestamp),
    nullable("resolved_at", Kind::Timestamp),
    CREATED_AT,
    UPDATED_AT,
];

pub const TARGET: &[Field] = &[
    ID,
    required("endpoint_id", Kind::Reference(Collection::Endpoints)),
    required("target_type", Kind::Enum(TARGET_TYPES)),
    required(
        "subject",
        Kind::Object(&[
            required("type", Kind::Enum(SUBJECT_TYPES)),
            nullable("vendor", NAME),
            required("product", NAME),
        ]),
    ),
    nullable("installed_version", SHORT),
    nullable("install_path", text(4096)),
    nullable("package_manager", Kind::Enum(PACKAGE_MANAGERS)),
    required("discovery_method", Kind::Enum(DISCOVERY_METHODS)),
    required("status", Kind::Enum(TARGET_STATUSES)),
    optional("finding_ids", Kind::Array(&Kind::Reference(Collection::VulnerabilityFindings))),
    optional("scope_ids", Kind::Array(&Kind::Reference(Collection::Scopes))),
    nullable(
        "last_execution",
        Kind::Object(&[
            required("status", Kind::Enum(EXECUTION_STATUSES)),
            required("efficacy", Kind::Enum(EXECUTION_EFFICACIES)),
            nullable("started_at", Kind::Timestamp),
            nullable("finished_at", Kind::Timestamp),
            nullable("error", LONG),
        ]),
    ),
    nullable("due_at", Kind::Timestamp),
    nullable("remediated_at", Kind::Timestamp),
    CREATED_AT,
    UPDATED_AT,
];

/// The schema of a collection's records.
pub fn schema(collection: Collection) -> &'static [Field] {
    match collection {
        Collection::Endpoints => ENDPOINT,
        Collection::Scopes => SCOPE,
        Collection::VulnerabilityFindings => FINDING,
        Collection::RemediationTargets => TARGET,
    }
}

/// The JSON Schema (2020-12, as OpenAPI 3.1 uses it) of records as the
/// API answers them: every field the service writes is present (`null`
/// when empty), so all are required except optional ones without an empty
/// value. Objects allow further members: fields are added over time.
pub fn json_schema(fields: &[Field]) -> serde_json::Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for field in fields {
        let mut schema = kind_schema(field.kind);
        if field.nullable {
            schema = nullable_schema(schema);
        }
        properties.insert(field.name.to_owned(), schema);
        let always_present = field.required
            || field.nullable
            || field.owner == Owner::Service
            || field.name == "id"
            || matches!(field.kind, Kind::Array(_) | Kind::Bool | Kind::Object(_));
        if always_present {
            required.push(field.name);
        }
    }
    serde_json::json!({"type": "object", "properties": properties, "required": required})
}

fn kind_schema(kind: Kind) -> serde_json::Value {
    use serde_json::json;
    match kind {
        Kind::Text { max, .. } | Kind::Name { max } => json!({"type": "string", "maxLength": max}),
        Kind::Hostname => json!({"type": "string", "maxLength": 253}),
        Kind::Email => json!({"type": "string", "maxLength": 256}),
        Kind::Token => json!({"type": "string", "pattern": "^[a-z0-9._-]{1,64}$", "maxLength": 64}),
        // The longest text form of an address: IPv4-mapped IPv6.
        Kind::IpAddress => json!({"type": "string", "maxLength": 45}),
        Kind::Enum(values) => json!({"type": "string", "enum": values}),
        Kind::Uuid | Kind::Reference(_) => json!({"type": "string", "format": "uuid", "maxLength": 36}),
        // As stored: UTC, at most nine fraction digits.
        Kind::Timestamp => json!({"type": "string", "format": "date-time", "maxLength": 30}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::Number { min, max } => json!({"type": "number", "minimum": min, "maximum": max}),
        Kind::Integer { min, max } => {
            let format = if i32::try_from(min).is_ok() && i32::try_from(max).is_ok() { "int32" } else { "int64" };
            json!({"type": "integer", "format": format, "minimum": min, "maximum": max})
        }
        Kind::MacAddress => json!({"type": "string", "pattern": "^[0-9a-f]{2}(:[0-9a-f]{2}){5}$", "maxLength": 17}),
        Kind::CveId => json!({"type": "string", "pattern": "^CVE-[0-9]{4}-[0-9]{4,19}$", "maxLength": 28}),
        Kind::Object(fields) => json_schema(fields),
        Kind::Array(item) => json!({"type": "array", "items": kind_schema(*item), "maxItems": MAX_ARRAY_ITEMS}),
    }
}

/// The same schema, also allowing `null`.
fn nullable_schema(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(kind) = schema.get("type").cloned() {
        schema["type"] = serde_json::json!([kind, "null"]);
    }
    if let Some(values) = schema.get_mut("enum").and_then(serde_json::Value::as_array_mut) {
        values.push(serde_json::Value::Null);
    }
    schema
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_schemas_follow_the_field_table() {
        let finding = json_schema(FINDING);
        assert_eq!(finding["properties"]["severity"], json!({"type": "string", "enum": SEVERITIES}));
        assert_eq!(
            finding["properties"]["remediation_target_id"],
            json!({"type": ["string", "null"], "format": "uuid", "maxLength": 36})
        );
        assert_eq!(finding["properties"]["cvss"]["type"], json!(["object", "null"]));
        assert_eq!(finding["properties"]["cvss"]["properties"]["base_score"]["maximum"], json!(10.0));
        let required: Vec<&str> =
            finding["required"].as_array().expect("present").iter().filter_map(|v| v.as_str()).collect();
        for name in ["id", "endpoint_id", "kev", "description", "created_at", "updated_at"] {
            assert!(required.contains(&name), "{name}");
        }
        let scope = json_schema(SCOPE);
        assert_eq!(
            scope["properties"]["finding_filter"]["properties"]["min_severity"]["enum"]
                .as_array()
                .expect("present")
                .last(),
            Some(&json!(null))
        );
        let sla_required = scope["properties"]["sla_days"]["required"].as_array().expect("present");
        assert!(sla_required.is_empty(), "days per severity are each optional");
        assert_eq!(
            json_schema(ENDPOINT)["properties"]["tags"],
            json!({"type": "array", "items": {"type": "string", "maxLength": 256}, "maxItems": 1000})
        );
    }
}
