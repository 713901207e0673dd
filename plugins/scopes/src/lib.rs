//! The scopes group: remediation scopes, the standing policies that define
//! what to keep healthy.
//!
//! Filters: `status`, `q` (name contains, case-insensitive). Sort keys:
//! `created_at`, `updated_at`, `name`.

use esr_plugin_sdk::contract::SCOPE_STATUSES as STATUSES;
use esr_plugin_sdk::group::{CollectionGroup, index_filters};
use esr_plugin_sdk::list::{Filter, SortField, owned, text_at};
use esr_plugin_sdk::query::{Param, ParamKind, Query};
use serde_json::Value;

const COLLECTION: &str = "scopes";
/// Long enough for any scope name; bounds the work a search can ask for.
const MAX_NAME_QUERY_LEN: usize = 255;

/// The scopes plugin.
pub struct Scopes;

impl CollectionGroup for Scopes {
    const COLLECTION: &'static str = COLLECTION;
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const FILTERS: &'static [Param] = &[
        Param::new("status", ParamKind::AnyOf(STATUSES), "Statuses, comma-separated."),
        Param::new(
            "q",
            ParamKind::Text { max: MAX_NAME_QUERY_LEN },
            "Only scopes whose name contains this text, case-insensitive.",
        ),
    ];
    const SORT_KEYS: &'static [(&'static str, SortField)] = &[
        ("created_at", SortField::Timestamp("/created_at")),
        ("updated_at", SortField::Timestamp("/updated_at")),
        ("name", SortField::Text("/name")),
    ];

    fn filters(query: &mut Query<'_>) -> Vec<Filter<'static>> {
        let statuses = query.any_of("status", STATUSES);
        let name_contains = query.text("q", MAX_NAME_QUERY_LEN).map(str::to_lowercase);

        let mut filters = index_filters(COLLECTION, [("status", statuses.map(owned))]);
        if let Some(needle) = name_contains {
            filters.push(
                Filter::test(move |scope: &Value| {
                    text_at(scope, "/name").is_some_and(|name| name.to_lowercase().contains(needle.as_str()))
                })
                .named("q"),
            );
        }
        filters
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::Scopes);

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::testing::{MemoryStore, record_id, short_id};
    use esr_plugin_sdk::{PluginError, Request, ResourcePlugin};
    use serde_json::json;

    use super::*;

    fn store() -> MemoryStore {
        let mut store = MemoryStore::default();
        let rows = [
            ("01", "Critical CVEs on laptops", "active", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"),
            ("02", "browser hygiene", "paused", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"),
            ("03", "Legacy Java", "archived", "2026-01-03T00:00:00Z", "2026-03-01T00:00:00Z"),
            ("04", "Server CVE sweep", "active", "2026-01-04T00:00:00Z", "2026-01-05T00:00:00Z"),
        ];
        for (id, name, status, created, updated) in rows {
            store.insert(
                COLLECTION,
                json!({"id": record_id(id), "name": name, "description": null, "status": status,
                       "subject_filter": {"subject_types": [], "vendors": [], "products": [], "cpe_patterns": []},
                       "endpoint_filter": {"os_families": [], "endpoint_ids": [], "has_agent": null, "tags": []},
                       "finding_filter": {"finding_types": [], "min_severity": null, "min_cvss_score": null,
                                          "kev_only": false},
                       "sla_days": {"critical": 7, "high": 30, "medium": 90, "low": 180},
                       "created_at": created, "updated_at": updated}),
            );
        }
        store
    }

    fn ids(query: &[(&str, &str)]) -> Vec<String> {
        let page = Scopes::list(&store(), &Request::with_query("/v1/scopes", query)).expect("list");
        let records: Vec<Value> = serde_json::from_slice(&page.data).expect("json");
        records.iter().filter_map(|r| r["id"].as_str().map(short_id)).collect()
    }

    #[test]
    fn filters_combine() {
        assert_eq!(ids(&[]), ["01", "02", "03", "04"]);
        assert_eq!(ids(&[("status", "active")]), ["01", "04"]);
        assert_eq!(ids(&[("status", "paused,archived")]), ["02", "03"]);
        assert_eq!(ids(&[("q", "cve")]), ["01", "04"]);
        assert_eq!(ids(&[("q", "CVE S"), ("status", "active")]), ["04"]);
        assert_eq!(ids(&[("q", "cve"), ("status", "paused")]), Vec::<String>::new());
        assert_eq!(ids(&[("updatedAfter", "2026-01-31T00:00:00Z"), ("status", "active")]), ["01"]);
    }

    #[test]
    fn sorts_by_the_contract_keys() {
        assert_eq!(ids(&[("sort", "name")]), ["02", "01", "03", "04"]);
        assert_eq!(ids(&[("sort", "-updated_at")]), ["03", "01", "04", "02"]);
        assert_eq!(ids(&[("sort", "-created_at")]), ["04", "03", "02", "01"]);
    }

    #[test]
    fn bad_filters_are_named() {
        let request = Request::with_query("/v1/scopes", &[("status", "active,deleted"), ("q", ""), ("name", "x")]);
        let Err(PluginError::InvalidParameters(list)) = Scopes::list(&store(), &request) else {
            panic!("expected 400")
        };
        let names: Vec<&str> = list.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["name", "status", "q"]);
        assert_eq!(list[1].reason, "'deleted' is not one of active, paused, archived");
    }

    #[test]
    fn describe_lists_the_contract_names() {
        let descriptor = Scopes::describe();
        assert_eq!(descriptor.group, "scopes");
        assert_eq!(descriptor.sort_keys, ["created_at", "updated_at", "name"]);
        assert!(descriptor.parameters.iter().any(|p| p.name == "q"));
        assert_eq!(descriptor.reads, ["scopes"], "its own collection only");
    }

    #[test]
    fn get_is_not_found_for_unknown_ids() {
        let request = Request::with_query("/v1/scopes/x", &[]);
        assert!(Scopes::get(&store(), &record_id("01"), &request).is_ok());
        assert_eq!(Scopes::get(&store(), &record_id("99"), &request), Err(PluginError::NotFound));
    }
}
