//! What a loaded component says of itself (its parameters, schemas and
//! summary), checked and kept for the OpenAPI document and health.

use super::*;

/// What a loaded component is, for health and logs.
#[derive(Debug, Clone)]
pub struct ComponentInfo {
    pub group: String,
    pub version: String,
    pub file: PathBuf,
    /// SHA-256 of the component file, hex.
    pub sha256: String,
    /// The WIT package version it was built against.
    pub wit_version: String,
    pub parameters: Vec<ParameterDoc>,
    pub sort_keys: Vec<String>,
    /// The JSON Schema of a record (or of the JSON document) it answers.
    pub response_schema: serde_json::Value,
    /// What its store may read.
    pub reads: Reads,
    /// What its summary accepts; `None` when it serves none (built before
    /// WIT 0.3.2, or grouping by nothing).
    pub summary: Option<SummaryDoc>,
    /// The formats its export renders besides `esr`; `None` when it serves
    /// no export (built before WIT 0.3.3).
    pub export_formats: Option<Vec<String>>,
    pub loaded_at: String,
}

/// What a component's summary accepts, as its `describe-summary()` says.
#[derive(Debug, Clone)]
pub struct SummaryDoc {
    /// The fields `groupBy` may name.
    pub group_by: Vec<String>,
    /// `groupBy` and the filters.
    pub parameters: Vec<ParameterDoc>,
}

/// A query parameter a component accepts, as its `describe()` documents it.
#[derive(Debug, Clone)]
pub struct ParameterDoc {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its value.
    pub schema: serde_json::Value,
    pub required: bool,
}

/// The most bytes of schema text one `describe()` may give, in all.
pub(super) const MAX_DESCRIPTOR_SCHEMA_BYTES: usize = 1 << 20;

/// A JSON Schema a component gave as text: a JSON object, or why not.
pub(super) fn descriptor_schema(text: &str, what: &str) -> anyhow::Result<serde_json::Value> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(schema) if schema.is_object() => Ok(schema),
        _ => bail!("describe() gives a {what} that is not a JSON Schema object"),
    }
}

/// The parameters and response schema of a descriptor, checked: names are
/// query-parameter names, each appears once, schemas are JSON objects.
pub(super) fn descriptor_documents(descriptor: &Descriptor) -> anyhow::Result<(Vec<ParameterDoc>, serde_json::Value)> {
    let size: usize =
        descriptor.response_schema.len() + descriptor.parameters.iter().map(|p| p.schema.len()).sum::<usize>();
    if size > MAX_DESCRIPTOR_SCHEMA_BYTES {
        bail!("describe() gives {size} bytes of schemas, more than {MAX_DESCRIPTOR_SCHEMA_BYTES}");
    }
    Ok((
        parameter_documents(&descriptor.parameters)?,
        descriptor_schema(&descriptor.response_schema, "response schema")?,
    ))
}

/// What `describe-summary()` gives, checked like a descriptor's parameters;
/// `None` when it groups by nothing.
pub(super) fn summary_document(info: &summaries::SummaryInfo) -> anyhow::Result<Option<SummaryDoc>> {
    if info.group_by.is_empty() {
        return Ok(None);
    }
    let size: usize = info.parameters.iter().map(|p| p.schema.len()).sum();
    if size > MAX_DESCRIPTOR_SCHEMA_BYTES {
        bail!("describe-summary() gives {size} bytes of schemas, more than {MAX_DESCRIPTOR_SCHEMA_BYTES}");
    }
    let field_is_sane = |field: &String| {
        (1..=64).contains(&field.len()) && field.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if let Some(field) = info.group_by.iter().find(|field| !field_is_sane(field)) {
        bail!("describe-summary() gives a field name that is not usable: {field:?}");
    }
    Ok(Some(SummaryDoc { group_by: info.group_by.clone(), parameters: parameter_documents(&info.parameters)? }))
}

pub(super) fn parameter_documents(given: &[types::ParameterInfo]) -> anyhow::Result<Vec<ParameterDoc>> {
    let mut parameters: Vec<ParameterDoc> = Vec::with_capacity(given.len());
    for parameter in given {
        let name_is_sane = (1..=64).contains(&parameter.name.len())
            && parameter.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !name_is_sane || parameters.iter().any(|p| p.name == parameter.name) {
            bail!("describe() gives a parameter name that is not usable or repeated: {:?}", parameter.name);
        }
        parameters.push(ParameterDoc {
            name: parameter.name.clone(),
            description: parameter.description.clone(),
            schema: descriptor_schema(&parameter.schema, &format!("schema for parameter `{}`", parameter.name))?,
            required: parameter.required,
        });
    }
    Ok(parameters)
}
