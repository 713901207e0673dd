//! An esr component serving the `{{GROUP}}` group.
//!
//! Start here: add filters to `FILTERS` and handle them in `list`, add sort
//! keys to `SORTS`. The logic is plain Rust against the `Store` trait, so
//! `cargo test` runs it natively; `export_resource_plugin!` turns it into a
//! component when built for `wasm32-wasip2`. See PLUGINS.md.

use esr_plugin_sdk::list::{SortField, list_descriptor, list_records, parse_list_request};
use esr_plugin_sdk::query::Param;
use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};
use serde_json::Value;

/// The group (and collection) this component serves.
const COLLECTION: &str = "{{GROUP}}";

/// This component's own query parameters: name, what the value holds (its
/// schema in the API's OpenAPI document) and what it means, e.g.
/// `Param::new("status", ParamKind::AnyOf(&["open", "closed"]), "Statuses, comma-separated.")`.
const FILTERS: &[Param] = &[];

const SORTS: &[(&str, SortField)] =
    &[("created_at", SortField::Timestamp("/created_at")), ("updated_at", SortField::Timestamp("/updated_at"))];

pub struct Plugin;

impl ResourcePlugin for Plugin {
    fn describe() -> Descriptor {
        // Its store reads only COLLECTION; another collection the logic
        // needs goes in `.with_reads(&[…])`, or every read of it fails.
        list_descriptor(COLLECTION, env!("CARGO_PKG_VERSION"), FILTERS, SORTS)
    }

    fn list(store: &dyn Store, request: &Request) -> Result<Page, PluginError> {
        // Read your filters from `query` (make it `mut`) before finishing it.
        let (query, options) = parse_list_request(request, FILTERS, SORTS);
        query.finish()?;
        list_records(store, COLLECTION, &options, |_record: &Value| true)
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, COLLECTION, id, request)
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::Plugin);

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::testing::{MemoryStore, record_id, short_id};
    use serde_json::json;

    use super::*;

    fn store() -> MemoryStore {
        let mut store = MemoryStore::default();
        for (id, created) in [("01", "2026-01-02T00:00:00Z"), ("02", "2026-01-01T00:00:00Z")] {
            // Ids are UUIDs, as every stored record's is.
            store.insert(COLLECTION, json!({"id": record_id(id), "created_at": created, "updated_at": created}));
        }
        store
    }

    #[test]
    fn lists_in_created_order_and_rejects_unknown_parameters() {
        let page = Plugin::list(&store(), &Request::with_query("/v1/x", &[])).expect("list");
        let records: Vec<Value> = serde_json::from_slice(&page.data).expect("json");
        assert_eq!((records[0]["id"].as_str().map(short_id).as_deref(), page.total), (Some("02"), 2));
        let unknown = Plugin::list(&store(), &Request::with_query("/v1/x", &[("colour", "blue")]));
        assert!(matches!(unknown, Err(PluginError::InvalidParameters(_))));
    }

    #[test]
    fn gets_one_record() {
        let request = Request::with_query("/v1/x/01", &[]);
        assert!(Plugin::get(&store(), &record_id("01"), &request).is_ok());
        assert_eq!(Plugin::get(&store(), &record_id("99"), &request), Err(PluginError::NotFound));
    }
}
