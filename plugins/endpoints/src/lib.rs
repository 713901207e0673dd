//! The endpoints group: the devices the service manages.
//!
//! Filters: `osFamily`, `hasAgent`, `hostname` (prefix, case-insensitive),
//! `tag`. Sort keys: `created_at`, `updated_at`, `hostname`, `last_seen_at`.

use esr_plugin_sdk::contract::OS_FAMILIES;
use esr_plugin_sdk::group::{CollectionGroup, index_filters};
use esr_plugin_sdk::list::{Filter, SortField, owned};
use esr_plugin_sdk::query::{Param, ParamKind, Query};
use esr_plugin_sdk::summary::SummaryField;
use serde_json::Value;

const COLLECTION: &str = "endpoints";

/// The longest tag a record holds (the schema's short text).
const MAX_TAG_CHARS: usize = 256;

/// The endpoints plugin.
pub struct Endpoints;

impl CollectionGroup for Endpoints {
    const COLLECTION: &'static str = COLLECTION;
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const FILTERS: &'static [Param] = &[
        Param::new("osFamily", ParamKind::AnyOf(OS_FAMILIES), "Operating system families, comma-separated."),
        Param::new(
            "hasAgent",
            ParamKind::Boolean,
            "true: only endpoints with an enrolled agent; false: only those without.",
        ),
        Param::new("hostname", ParamKind::Text { max: 255 }, "Hostname prefix, case-insensitive."),
        Param::new(
            "tag",
            ParamKind::ListOf { pattern: "[^,]{0,256}", max: MAX_TAG_CHARS },
            "Only endpoints carrying one of these tags, comma-separated.",
        ),
    ];
    const SORT_KEYS: &'static [(&'static str, SortField)] = &[
        ("created_at", SortField::Timestamp("/created_at")),
        ("updated_at", SortField::Timestamp("/updated_at")),
        ("hostname", SortField::Text("/hostname")),
        ("last_seen_at", SortField::Timestamp("/last_seen_at")),
    ];
    const SUMMARY_FIELDS: &'static [SummaryField] =
        &[SummaryField::text("osFamily", "os_family"), SummaryField::boolean("hasAgent", "has_agent")];

    fn filters(query: &mut Query<'_>) -> Vec<Filter<'static>> {
        let os_families = query.any_of("osFamily", OS_FAMILIES);
        let has_agent = query.boolean("hasAgent");
        let hostname_prefix = query.text("hostname", 255).map(str::to_lowercase);
        let tags = query.list(
            "tag",
            |tag| (tag.chars().count() <= MAX_TAG_CHARS).then(|| tag.to_owned()),
            "not a tag (at most 256 characters)",
        );

        let mut filters = index_filters(
            COLLECTION,
            [
                ("os_family", os_families.map(owned)),
                ("has_agent", has_agent.map(|wanted| vec![wanted.to_string()])),
                ("tag", tags),
            ],
        );
        if let Some(prefix) = hostname_prefix {
            let test_prefix = prefix.clone();
            filters.push(Filter::text_prefix(
                COLLECTION,
                "hostname",
                "by_hostname",
                &prefix,
                move |endpoint: &Value| {
                    endpoint
                        .get("hostname")
                        .and_then(Value::as_str)
                        .is_some_and(|h| h.to_lowercase().starts_with(test_prefix.as_str()))
                },
            ));
        }
        filters
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::Endpoints);

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::testing::{MemoryStore, record_id, short_id};
    use esr_plugin_sdk::{PluginError, Request, ResourcePlugin};
    use serde_json::json;

    use super::*;

    fn store() -> MemoryStore {
        let mut store = MemoryStore::default();
        let rows = [
            ("01", "ACME-MBP-1", "macos", true, &["laptop"][..]),
            ("02", "acme-ws-2", "windows", false, &["finance", "laptop"][..]),
            ("03", "web-prod-3", "linux", true, &["server", "prod"][..]),
        ];
        for (id, hostname, family, agent, tags) in rows {
            store.insert(
                COLLECTION,
                json!({"id": record_id(id), "hostname": hostname, "operating_system": {"family": family},
                       "agent_id": if agent { json!("a") } else { Value::Null }, "tags": tags,
                       "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}),
            );
        }
        store
    }

    fn ids(query: &[(&str, &str)]) -> Vec<String> {
        let page = Endpoints::list(&store(), &Request::with_query("/v1/endpoints", query)).expect("list");
        let records: Vec<Value> = serde_json::from_slice(&page.data).expect("json");
        records.iter().filter_map(|r| r["id"].as_str().map(short_id)).collect()
    }

    #[test]
    fn filters_combine() {
        assert_eq!(ids(&[("osFamily", "macos,linux")]), ["01", "03"]);
        assert_eq!(ids(&[("hasAgent", "false")]), ["02"]);
        assert_eq!(ids(&[("hasAgent", "true"), ("osFamily", "linux")]), ["03"]);
        assert_eq!(ids(&[("hostname", "Acme-")]), ["01", "02"]);
        assert_eq!(ids(&[("tag", "laptop")]), ["01", "02"]);
        assert_eq!(ids(&[("sort", "-hostname")]), ["03", "02", "01"]);
    }

    #[test]
    fn bad_filters_are_named() {
        let result = Endpoints::list(
            &store(),
            &Request::with_query("/v1/endpoints", &[("osFamily", "beos"), ("hasAgent", "1")]),
        );
        let Err(PluginError::InvalidParameters(list)) = result else { panic!("expected 400") };
        let names: Vec<&str> = list.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["osFamily", "hasAgent"]);

        // A tag longer than any a record holds is refused, as the schema's pattern says.
        let long_tag = format!("laptop,{}", "t".repeat(MAX_TAG_CHARS + 1));
        let result = Endpoints::list(&store(), &Request::with_query("/v1/endpoints", &[("tag", &long_tag)]));
        let Err(PluginError::InvalidParameters(list)) = result else { panic!("expected 400") };
        assert_eq!(list[0].name, "tag");
        let longest = "t".repeat(MAX_TAG_CHARS);
        assert!(Endpoints::list(&store(), &Request::with_query("/v1/endpoints", &[("tag", &longest)])).is_ok());
    }

    fn summary(store: &MemoryStore, query: &[(&str, &str)]) -> Result<(Value, u64), PluginError> {
        let summary = Endpoints::summary(store, &Request::with_query("/v1/endpoints/summary", query))?;
        Ok((serde_json::from_slice(&summary.groups).expect("json"), summary.total))
    }

    #[test]
    fn a_summary_takes_a_hostname_prefix_and_refuses_one_too_broad_to_read() {
        assert_eq!(
            summary(&store(), &[("groupBy", "osFamily"), ("hostname", "ACME")]),
            Ok((json!([{"osFamily": "macos", "count": 1}, {"osFamily": "windows", "count": 1}]), 2))
        );
        assert_eq!(
            summary(&store(), &[("groupBy", "hasAgent,osFamily"), ("hostname", "acme-"), ("tag", "laptop")]),
            Ok((
                json!([{"hasAgent": false, "osFamily": "windows", "count": 1},
                       {"hasAgent": true, "osFamily": "macos", "count": 1}]),
                2
            ))
        );
        // Each record under the prefix is read: past the list's budget the
        // summary is refused as the list's total is, naming the filter.
        let mut many = MemoryStore::default();
        let budget = esr_plugin_sdk::list::WORK_BUDGET as usize;
        for n in 0..=budget {
            many.insert(
                COLLECTION,
                json!({"id": esr_plugin_sdk::Uuid::from_u128(n as u128 + 1).to_string(), "hostname": format!("web-{n}"),
                       "operating_system": {"family": "linux"}, "tags": [],
                       "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}),
            );
        }
        match summary(&many, &[("groupBy", "osFamily"), ("hostname", "web-")]) {
            Err(PluginError::InvalidParameters(list)) => {
                assert_eq!(list[0].name, "hostname");
                assert!(list[0].reason.contains("too broad to summarize"), "{list:?}");
            }
            other => panic!("a prefix of every endpoint gave {other:?}"),
        }
        assert_eq!(
            summary(&many, &[("groupBy", "osFamily"), ("hostname", "web-1000")]),
            Ok((json!([{"osFamily": "linux", "count": 11}]), 11))
        );
    }

    #[test]
    fn get_is_not_found_for_unknown_ids() {
        let request = Request::with_query("/v1/endpoints/x", &[]);
        assert!(Endpoints::get(&store(), &record_id("01"), &request).is_ok());
        assert_eq!(Endpoints::get(&store(), &record_id("99"), &request), Err(PluginError::NotFound));
    }
}
