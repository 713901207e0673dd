//! The remediation-targets group: concrete remediation work on one
//! endpoint, one installation of one subject that needs fixing.
//!
//! Filters: `endpointId`, `scopeId`, `findingId`, `status`, `targetType`,
//! `packageManager`, `dueBefore`. Sort keys: `created_at`, `updated_at`,
//! `due_at`.

use esr_plugin_sdk::contract::{PACKAGE_MANAGERS, TARGET_STATUSES as STATUSES, TARGET_TYPES};
use esr_plugin_sdk::group::{CollectionGroup, index_filters};
use esr_plugin_sdk::list::{Filter, SortField, owned};
use esr_plugin_sdk::query::{Param, ParamKind, Query};
use esr_plugin_sdk::summary::SummaryField;

const COLLECTION: &str = "remediation-targets";

/// The remediation-targets plugin.
pub struct RemediationTargets;

impl CollectionGroup for RemediationTargets {
    const COLLECTION: &'static str = COLLECTION;
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const FILTERS: &'static [Param] = &[
        Param::new("endpointId", ParamKind::Uuids, "Endpoint ids, comma-separated."),
        Param::new(
            "scopeId",
            ParamKind::Uuids,
            "Only targets put in motion by one of these scope ids, comma-separated.",
        ),
        Param::new(
            "findingId",
            ParamKind::Uuids,
            "Only targets that resolve one of these finding ids, comma-separated.",
        ),
        Param::new("status", ParamKind::AnyOf(STATUSES), "Statuses, comma-separated."),
        Param::new("targetType", ParamKind::AnyOf(TARGET_TYPES), "Target types, comma-separated."),
        Param::new("packageManager", ParamKind::AnyOf(PACKAGE_MANAGERS), "Package managers, comma-separated."),
        Param::new(
            "dueBefore",
            ParamKind::Timestamp,
            "Only targets due strictly before this time; targets without a due date never match.",
        ),
    ];
    const SORT_KEYS: &'static [(&'static str, SortField)] = &[
        ("created_at", SortField::Timestamp("/created_at")),
        ("updated_at", SortField::Timestamp("/updated_at")),
        ("due_at", SortField::Timestamp("/due_at")),
    ];
    const SUMMARY_FIELDS: &'static [SummaryField] = &[
        SummaryField::text("status", "status"),
        SummaryField::text("targetType", "target_type"),
        SummaryField::text("packageManager", "package_manager"),
    ];

    fn filters(query: &mut Query<'_>) -> Vec<Filter<'static>> {
        let endpoint_ids = query.uuids("endpointId");
        let scope_ids = query.uuids("scopeId");
        let finding_ids = query.uuids("findingId");
        let statuses = query.any_of("status", STATUSES);
        let target_types = query.any_of("targetType", TARGET_TYPES);
        let package_managers = query.any_of("packageManager", PACKAGE_MANAGERS);
        let due_before = query.timestamp("dueBefore");

        let mut filters = index_filters(
            COLLECTION,
            [
                ("endpoint_id", endpoint_ids),
                ("scope_id", scope_ids),
                ("finding_id", finding_ids),
                ("status", statuses.map(owned)),
                ("target_type", target_types.map(owned)),
                // A null package manager (unknown) matches no value, not even `none`.
                ("package_manager", package_managers.map(owned)),
            ],
        );
        if let Some(before) = due_before {
            filters.push(Filter::in_range(COLLECTION, "dueBefore", "by_due_at", None, Some(before.0)));
        }
        filters
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::RemediationTargets);

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::testing::{MemoryStore, record_id, short_id};
    use esr_plugin_sdk::{PluginError, Request, ResourcePlugin};
    use serde_json::{Value, json};

    use super::*;

    const ENDPOINT_A: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a0a";
    const ENDPOINT_B: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a0b";
    const SCOPE_A: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b0a";
    const SCOPE_B: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b0b";
    const FINDING_A: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9c0a";
    const FINDING_B: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9c0b";

    struct Row {
        id: &'static str,
        endpoint: &'static str,
        target_type: &'static str,
        package_manager: Option<&'static str>,
        status: &'static str,
        finding_ids: &'static [&'static str],
        scope_ids: &'static [&'static str],
        due_at: Option<&'static str>,
    }

    fn store() -> MemoryStore {
        let mut store = MemoryStore::default();
        let rows = [
            Row {
                id: "01",
                endpoint: ENDPOINT_A,
                target_type: "software",
                package_manager: Some("homebrew"),
                status: "queued",
                finding_ids: &[FINDING_A],
                scope_ids: &[SCOPE_A],
                due_at: Some("2026-02-01T00:00:00Z"),
            },
            Row {
                id: "02",
                endpoint: ENDPOINT_A,
                target_type: "os_patch",
                package_manager: None,
                status: "identified",
                finding_ids: &[FINDING_A, FINDING_B],
                scope_ids: &[],
                due_at: None,
            },
            Row {
                id: "03",
                endpoint: ENDPOINT_B,
                target_type: "software",
                package_manager: Some("none"),
                status: "in_progress",
                finding_ids: &[FINDING_B],
                scope_ids: &[SCOPE_A, SCOPE_B],
                due_at: Some("2026-01-15T00:00:00Z"),
            },
            Row {
                id: "04",
                endpoint: ENDPOINT_B,
                target_type: "configuration",
                package_manager: Some("winget"),
                status: "remediated",
                finding_ids: &[],
                scope_ids: &[SCOPE_B],
                due_at: Some("2026-03-01T00:00:00Z"),
            },
        ];
        for row in rows {
            store.insert(
                COLLECTION,
                json!({"id": record_id(row.id), "endpoint_id": row.endpoint, "target_type": row.target_type,
                       "subject": {"type": "software", "vendor": "google", "product": "chrome"},
                       "installed_version": "119.0", "install_path": null,
                       "package_manager": row.package_manager, "discovery_method": "passive",
                       "status": row.status, "finding_ids": row.finding_ids, "scope_ids": row.scope_ids,
                       "last_execution": null, "due_at": row.due_at, "remediated_at": null,
                       "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}),
            );
        }
        store
    }

    fn ids(query: &[(&str, &str)]) -> Vec<String> {
        let request = Request::with_query("/v1/remediation-targets", query);
        let page = RemediationTargets::list(&store(), &request).expect("list");
        let records: Vec<Value> = serde_json::from_slice(&page.data).expect("json");
        records.iter().filter_map(|r| r["id"].as_str().map(short_id)).collect()
    }

    #[test]
    fn filters_select_the_matching_targets() {
        assert_eq!(ids(&[("endpointId", ENDPOINT_B)]), ["03", "04"]);
        assert_eq!(ids(&[("endpointId", &ENDPOINT_A.to_uppercase())]), ["01", "02"]);
        assert_eq!(ids(&[("scopeId", SCOPE_A)]), ["01", "03"]);
        assert_eq!(ids(&[("scopeId", &format!("{SCOPE_A},{SCOPE_B}"))]), ["01", "03", "04"]);
        assert_eq!(ids(&[("findingId", FINDING_B)]), ["02", "03"]);
        assert_eq!(ids(&[("status", "queued,in_progress")]), ["01", "03"]);
        assert_eq!(ids(&[("targetType", "software")]), ["01", "03"]);
        assert_eq!(ids(&[("packageManager", "none")]), ["03"]);
        assert_eq!(ids(&[("packageManager", "homebrew,winget")]), ["01", "04"]);
        assert_eq!(ids(&[("dueBefore", "2026-02-01T00:00:00Z")]), ["03"]);
    }

    #[test]
    fn filters_combine() {
        assert_eq!(ids(&[("scopeId", SCOPE_B), ("targetType", "software")]), ["03"]);
        assert_eq!(ids(&[("findingId", FINDING_A), ("endpointId", ENDPOINT_A), ("status", "identified")]), ["02"]);
        assert_eq!(ids(&[("scopeId", SCOPE_A), ("dueBefore", "2026-01-01T00:00:00Z")]), Vec::<String>::new());
    }

    #[test]
    fn due_at_sorts_with_undated_targets_last() {
        assert_eq!(ids(&[("sort", "due_at")]), ["03", "01", "04", "02"]);
        assert_eq!(ids(&[("sort", "-due_at")]), ["04", "01", "03", "02"]);
    }

    #[test]
    fn bad_filters_are_named() {
        for (name, value) in [
            ("endpointId", "not-a-uuid"),
            ("scopeId", "x"),
            ("findingId", "1,2"),
            ("status", "done"),
            ("targetType", "firmware"),
            ("packageManager", "snap"),
            ("dueBefore", "tomorrow"),
            ("sort", "name"),
            ("scope_id", SCOPE_A),
        ] {
            let request = Request::with_query("/v1/remediation-targets", &[(name, value)]);
            match RemediationTargets::list(&store(), &request) {
                Err(PluginError::InvalidParameters(list)) => assert_eq!(list[0].name, name, "{name}={value}"),
                other => panic!("{name}={value} gave {other:?}"),
            }
        }
    }

    #[test]
    fn describe_lists_the_contract_names() {
        let descriptor = RemediationTargets::describe();
        assert_eq!(descriptor.group, "remediation-targets");
        assert_eq!(descriptor.sort_keys, ["created_at", "updated_at", "due_at"]);
        assert_eq!(descriptor.reads, ["remediation-targets"], "its own collection only");
        for filter in ["endpointId", "scopeId", "findingId", "status", "targetType", "packageManager", "dueBefore"] {
            assert!(descriptor.parameters.iter().any(|p| p.name == filter), "{filter}");
        }
    }

    #[test]
    fn get_is_not_found_for_unknown_ids() {
        let request = Request::with_query("/v1/remediation-targets/x", &[]);
        assert!(RemediationTargets::get(&store(), &record_id("01"), &request).is_ok());
        assert_eq!(RemediationTargets::get(&store(), &record_id("99"), &request), Err(PluginError::NotFound));
    }
}
