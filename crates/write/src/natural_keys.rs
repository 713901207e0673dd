//! What an import line without an `id` is, by its content: so that running
//! a file again (or after a batch failed part-way) updates the records it
//! made, or leaves them unchanged, instead of making them twice.
//!
//! | collection | natural key |
//! |---|---|
//! | endpoints | `agent_id` when given, else `hostname` (without regard to case) |
//! | vulnerability-findings | `endpoint_id` + `source.scanner` + `source.scanner_finding_id` |
//! | scopes | `name` (without regard to case) |
//! | remediation-targets | `endpoint_id` + `target_type` + `subject` |
//!
//! A key two stored records share is ambiguous: the line is refused, and
//! naming the id settles it.

use std::collections::HashMap;

use esr_contract::Collection;
use serde_json::{Map, Value};
use uuid::Uuid;

use esr_store::{StoreError, StoreReader, for_each_by_index};

/// A line's natural key, and the endpoint whose records hold it (`None`:
/// keys of the whole collection).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NaturalKey {
    pub endpoint: Option<String>,
    pub key: String,
}

/// The natural key of a record of `collection`, when its content gives one.
pub fn of(collection: Collection, content: &Map<String, Value>) -> Option<NaturalKey> {
    let text = |field: &str| content.get(field).and_then(Value::as_str);
    let endpoint = || text("endpoint_id").map(|id| id.to_ascii_lowercase());
    match collection {
        Collection::Endpoints => match (text("agent_id"), text("hostname")) {
            (Some(agent), _) => {
                Some(NaturalKey { endpoint: None, key: format!("agent {}", agent.to_ascii_lowercase()) })
            }
            (None, Some(hostname)) => {
                Some(NaturalKey { endpoint: None, key: format!("host {}", hostname.to_lowercase()) })
            }
            (None, None) => None,
        },
        Collection::Scopes => text("name").map(|name| NaturalKey { endpoint: None, key: name.trim().to_lowercase() }),
        Collection::VulnerabilityFindings => {
            let source = content.get("source")?;
            let scanner = source.get("scanner")?.as_str()?;
            let finding = source.get("scanner_finding_id")?.as_str()?;
            Some(NaturalKey { endpoint: Some(endpoint()?), key: format!("{scanner}\u{0}{finding}") })
        }
        Collection::RemediationTargets => {
            let subject = content.get("subject").map(canonical).unwrap_or_default();
            Some(NaturalKey { endpoint: Some(endpoint()?), key: format!("{}\u{0}{subject}", text("target_type")?) })
        }
    }
}

/// JSON text with object keys in order and no nulls, so that two subjects
/// written differently (key order, a null field left out) are one.
fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().filter(|(_, v)| !v.is_null()).collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sorted(v))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// The stored records' natural keys, read once per batch (per endpoint for
/// findings and targets, the whole collection for endpoints and scopes),
/// with the ids earlier lines of the batch gave to keys.
#[derive(Default)]
pub struct NaturalIds {
    /// By endpoint (`None`: the whole collection), each key's stored ids.
    stored: HashMap<Option<String>, HashMap<String, Vec<Uuid>>>,
    /// Keys lines of this batch gave a new id.
    given: HashMap<NaturalKey, Uuid>,
}

/// What a line's natural key names.
pub enum Found {
    /// No record yet: the line makes one.
    New,
    Existing(Uuid),
    /// Several stored records hold the key.
    Ambiguous(Vec<Uuid>),
}

impl NaturalIds {
    /// The record `key` names, as stored or as an earlier line made it.
    pub fn find(
        &mut self,
        reader: &mut dyn StoreReader,
        collection: Collection,
        key: &NaturalKey,
    ) -> Result<Found, StoreError> {
        if let Some(id) = self.given.get(key) {
            return Ok(Found::Existing(*id));
        }
        if !self.stored.contains_key(&key.endpoint) {
            let keys = stored_keys(reader, collection, key.endpoint.as_deref())?;
            self.stored.insert(key.endpoint.clone(), keys);
        }
        let ids = self.stored.get(&key.endpoint).and_then(|keys| keys.get(&key.key));
        Ok(match ids.map(Vec::as_slice) {
            None | Some([]) => Found::New,
            Some([id]) => Found::Existing(*id),
            Some(several) => Found::Ambiguous(several.to_vec()),
        })
    }

    /// Remembers the id a line without one was given.
    pub fn give(&mut self, key: NaturalKey, id: Uuid) {
        self.given.insert(key, id);
    }
}

/// Each natural key the stored records hold, with their ids: an endpoint
/// holds its agent id's key and its host name's, so a line naming either
/// finds it.
fn stored_keys(
    reader: &mut dyn StoreReader,
    collection: Collection,
    endpoint: Option<&str>,
) -> Result<HashMap<String, Vec<Uuid>>, StoreError> {
    // Only the keys are kept: a large organization's records are walked a
    // page at a time, never held at once.
    let mut keys: HashMap<String, Vec<Uuid>> = HashMap::new();
    let mut keep = |record: Value| {
        let (Some(map), Some(id)) = (record.as_object(), record.get("id").and_then(Value::as_str)) else { return };
        let Ok(id) = Uuid::parse_str(id) else { return };
        let mut held = Vec::new();
        if collection == Collection::Endpoints {
            // Both of an endpoint's keys: a line may give either.
            if let Some(hostname) = map.get("hostname").and_then(Value::as_str) {
                held.push(format!("host {}", hostname.to_lowercase()));
            }
        }
        held.extend(of(collection, map).map(|natural| natural.key));
        held.dedup();
        for key in held {
            keys.entry(key).or_default().push(id);
        }
    };
    match endpoint {
        Some(endpoint) => for_each_by_index(reader, collection, "endpoint_id", endpoint, &mut keep)?,
        None => for_each_by_index(reader, collection, esr_contract::indexes::CREATED_AT, "", &mut keep)?,
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(collection: Collection, content: Value) -> Option<String> {
        of(collection, content.as_object().expect("object")).map(|natural| natural.key)
    }

    #[test]
    fn keys_ignore_case_key_order_and_absent_fields() {
        assert_eq!(
            key(Collection::Endpoints, json!({"hostname": "Web-1"})),
            key(Collection::Endpoints, json!({"hostname": "web-1"}))
        );
        assert_eq!(
            key(Collection::Scopes, json!({"name": " Patch OpenSSL "})),
            key(Collection::Scopes, json!({"name": "patch openssl"}))
        );
        let a = json!({"endpoint_id": "E", "target_type": "software",
                       "subject": {"type": "software", "product": "openssl", "vendor": null}});
        let b = json!({"endpoint_id": "e", "target_type": "software",
                       "subject": {"product": "openssl", "type": "software"}});
        assert_eq!(
            of(Collection::RemediationTargets, a.as_object().expect("object")),
            of(Collection::RemediationTargets, b.as_object().expect("object"))
        );
        assert_eq!(
            key(Collection::VulnerabilityFindings, json!({"endpoint_id": "e", "source": {"scanner": "trivy"}})),
            None
        );
    }
}
