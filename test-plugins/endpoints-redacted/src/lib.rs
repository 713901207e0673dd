//! An alternative endpoints component: the same records with the owner,
//! IP and MAC address withheld, as a privacy-minded operator might ship.
//! It takes only the common list parameters and reports its own version,
//! so a test can tell it apart from the stock component.

use esr_plugin_sdk::list::{SortField, join_json_array, list_descriptor, list_filtered, parse_list_request};
use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};
use serde_json::Value;

const COLLECTION: &str = "endpoints";
const WITHHELD: [&str; 3] = ["owner", "ip", "mac_address"];
const SORTS: &[(&str, SortField)] =
    &[("created_at", SortField::Timestamp("/created_at")), ("updated_at", SortField::Timestamp("/updated_at"))];

pub struct RedactedEndpoints;

fn redact(record: &[u8]) -> Result<Vec<u8>, PluginError> {
    let mut value: Value =
        serde_json::from_slice(record).map_err(|e| PluginError::Internal(format!("stored record: {e}")))?;
    if let Some(object) = value.as_object_mut() {
        for field in WITHHELD {
            object.insert(field.to_owned(), Value::Null);
        }
    }
    serde_json::to_vec(&value).map_err(|e| PluginError::Internal(e.to_string()))
}

impl ResourcePlugin for RedactedEndpoints {
    fn describe() -> Descriptor {
        list_descriptor(COLLECTION, concat!(env!("CARGO_PKG_VERSION"), "+redacted"), &[], SORTS)
    }

    fn list(store: &dyn Store, request: &Request) -> Result<Page, PluginError> {
        let (query, options) = parse_list_request(request, &[], SORTS);
        query.finish()?;
        // No filter: with the stock components' `PAGES_ARE_STORED_RECORDS`
        // this page would be held and never reach `redact`. Left `false`,
        // its records' bytes always come here.
        let mut page = list_filtered(store, COLLECTION, &options, Vec::new())?;
        let records: Vec<Value> =
            serde_json::from_slice(&page.data).map_err(|e| PluginError::Internal(format!("page: {e}")))?;
        let redacted: Vec<Vec<u8>> =
            records.iter().map(|r| redact(r.to_string().as_bytes())).collect::<Result<_, _>>()?;
        page.data = join_json_array(redacted.iter().map(Vec::as_slice));
        Ok(page)
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        redact(&get_record(store, COLLECTION, id, request)?)
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::RedactedEndpoints);

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::testing::{MemoryStore, record_id};
    use serde_json::json;

    use super::*;

    #[test]
    fn personal_fields_are_withheld() {
        let mut store = MemoryStore::default();
        store.insert(
            COLLECTION,
            json!({"id": record_id("01"), "hostname": "h", "ip": "10.0.0.1", "owner": {"name": "A"},
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}),
        );
        let record: Value = serde_json::from_slice(
            &RedactedEndpoints::get(&store, &record_id("01"), &Request::default()).expect("get"),
        )
        .expect("json");
        assert_eq!(
            (record["ip"].clone(), record["owner"].clone(), record["hostname"].clone()),
            (Value::Null, Value::Null, json!("h"))
        );
        let page = RedactedEndpoints::list(&store, &Request::default()).expect("list");
        let records: Vec<Value> = serde_json::from_slice(&page.data).expect("json");
        assert_eq!(records[0]["ip"], Value::Null);
    }
}
