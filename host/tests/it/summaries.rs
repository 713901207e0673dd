//! Summaries (`GET /v1/<collection>/summary`) on the real server with the
//! real components: every count equals what a walk of the filtered list
//! counts, on sled and on PostgreSQL alike (byte for byte); a bad `groupBy`
//! is a `400` naming it and the fields allowed; a component built against
//! WIT 0.3.1 still loads and its summary route answers `404`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::postgres::Twins;
use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};
use serde_json::Value;

/// Where a record holds the value of a summary field, as the contract names it.
fn field_value(collection: &str, field: &str, record: &Value) -> Option<Value> {
    let pointer = match (collection, field) {
        (_, "severity") => "/severity",
        (_, "status") => "/status",
        (_, "findingType") => "/finding_type",
        (_, "kev") => "/kev",
        (_, "scanner") => "/source/scanner",
        (_, "osFamily") => "/operating_system/family",
        (_, "targetType") => "/target_type",
        (_, "packageManager") => "/package_manager",
        (_, "hasAgent") => return Some(Value::Bool(record.get("agent_id").is_some_and(|id| !id.is_null()))),
        (collection, field) => panic!("no summary field {field} in {collection}"),
    };
    record.pointer(pointer).filter(|value| !value.is_null()).cloned()
}

/// Every record of the list with these filters (`filters`: a query
/// string, maybe empty), by walking its cursor pages.
fn walk(server: &Server, organization: usize, collection: &str, filters: &str) -> Vec<Value> {
    let mut records = Vec::new();
    let mut path = format!("/v1/{collection}?limit=100{}{filters}", if filters.is_empty() { "" } else { "&" });
    loop {
        let page = server.json_as(organization, &path);
        records.extend(page["data"].as_array().unwrap().iter().cloned());
        let Some(cursor) = page["next_cursor"].as_str() else { break };
        path =
            format!("/v1/{collection}?limit=100&cursor={cursor}{}{filters}", if filters.is_empty() { "" } else { "&" });
    }
    records
}

/// What the summary must answer, counted from the list's records.
fn expected(collection: &str, group_by: &[&str], records: &[Value]) -> (BTreeMap<String, u64>, u64) {
    let mut groups: BTreeMap<String, u64> = BTreeMap::new();
    for record in records {
        let values: Option<Vec<Value>> = group_by.iter().map(|field| field_value(collection, field, record)).collect();
        if let Some(values) = values {
            *groups.entry(Value::Array(values).to_string()).or_default() += 1;
        }
    }
    (groups, records.len() as u64)
}

/// The groups a summary answered, keyed like [`expected`]; checks each
/// group has exactly the fields asked and a count above zero, and the
/// order (count descending).
fn answered(group_by: &[&str], summary: &Value) -> (BTreeMap<String, u64>, u64) {
    let rows = summary["groups"].as_array().unwrap();
    let counts: Vec<u64> = rows.iter().map(|row| row["count"].as_u64().unwrap()).collect();
    assert!(counts.windows(2).all(|pair| pair[0] >= pair[1]), "groups are not ordered by count: {summary}");
    let mut groups = BTreeMap::new();
    for row in rows {
        let object = row.as_object().unwrap();
        assert_eq!(object.len(), group_by.len() + 1, "{row}");
        assert!(row["count"].as_u64().unwrap() > 0, "a group of none: {row}");
        let values: Vec<Value> = group_by.iter().map(|field| row[*field].clone()).collect();
        assert!(groups.insert(Value::Array(values).to_string(), row["count"].as_u64().unwrap()).is_none(), "{row}");
    }
    (groups, summary["total"].as_u64().unwrap())
}

/// One record's value at `pointer`, for building filters from the data.
fn some_value(records: &[Value], pointer: &str) -> String {
    records.iter().find_map(|record| record.pointer(pointer)?.as_str().map(str::to_owned)).unwrap()
}

#[test]
fn summaries_count_what_a_walk_of_the_list_counts_on_sled_and_postgres() {
    let twins = Twins::start(&plugins_dir());
    let findings = walk(&twins.sled, 0, "vulnerability-findings", "");
    let targets = walk(&twins.sled, 0, "remediation-targets", "");
    let endpoints = walk(&twins.sled, 0, "endpoints", "");
    assert!(findings.len() > 50 && targets.len() > 10 && endpoints.len() > 5, "the demo data set is too small");
    // The endpoint with the most findings, so its summary has several groups.
    let mut per_endpoint: BTreeMap<String, usize> = BTreeMap::new();
    for finding in &findings {
        *per_endpoint.entry(finding["endpoint_id"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    let busiest = per_endpoint.iter().max_by_key(|(_, count)| **count).map(|(id, _)| id.clone()).unwrap();
    let scanner = some_value(&findings, "/source/scanner");
    let tag = some_value(
        &endpoints
            .iter()
            .filter_map(|e| e["tags"].get(0).cloned().map(|t| serde_json::json!({"t": t})))
            .collect::<Vec<_>>(),
        "/t",
    );
    let target_endpoint = some_value(&targets, "/endpoint_id");
    let hostname = some_value(&endpoints, "/hostname");

    let cases: Vec<(&str, &str, String)> = vec![
        ("vulnerability-findings", "severity", String::new()),
        ("vulnerability-findings", "severity,status", String::new()),
        ("vulnerability-findings", "status,severity", format!("endpointId={busiest}")),
        ("vulnerability-findings", "severity,status", format!("endpointId={busiest}&kev=false")),
        ("vulnerability-findings", "kev", "status=open".to_owned()),
        ("vulnerability-findings", "scanner", String::new()),
        ("vulnerability-findings", "findingType,kev", "severity=critical,high".to_owned()),
        ("vulnerability-findings", "scanner,status", format!("scanner={scanner}")),
        ("vulnerability-findings", "severity", "minCvss=7.5".to_owned()),
        ("vulnerability-findings", "status", "firstSeenAfter=2025-06-01T00:00:00Z&severity=high".to_owned()),
        ("vulnerability-findings", "severity", "cveId=CVE-1999-0001".to_owned()),
        // Two ranges: counted from the ranges' index entries.
        ("vulnerability-findings", "severity", "minCvss=7&firstSeenAfter=2025-06-01T00:00:00Z".to_owned()),
        ("vulnerability-findings", "status,kev", "minCvss=4.5&firstSeenAfter=2025-01-01T00:00:00Z".to_owned()),
        (
            "vulnerability-findings",
            "severity,status",
            format!("minCvss=5&firstSeenAfter=2025-01-01T00:00:00Z&endpointId={busiest}"),
        ),
        ("vulnerability-findings", "scanner", "minCvss=9&firstSeenAfter=2024-01-01T00:00:00Z&status=open".to_owned()),
        ("endpoints", "osFamily", String::new()),
        // A hostname prefix: its records read and grouped.
        ("endpoints", "osFamily", format!("hostname={}", &hostname[..1])),
        ("endpoints", "hasAgent,osFamily", format!("hostname={}&tag={tag}", &hostname[..2])),
        ("endpoints", "osFamily,hasAgent", String::new()),
        ("endpoints", "hasAgent", format!("tag={tag}")),
        ("remediation-targets", "status", String::new()),
        ("remediation-targets", "status,targetType", String::new()),
        ("remediation-targets", "packageManager", "status=identified,queued".to_owned()),
        ("remediation-targets", "targetType,status", format!("endpointId={target_endpoint}")),
        ("remediation-targets", "status", "dueBefore=2030-01-01T00:00:00Z".to_owned()),
    ];
    let mut nonempty = 0;
    for (collection, group_by, filters) in &cases {
        let path = format!(
            "/v1/{collection}/summary?groupBy={group_by}{}{filters}",
            if filters.is_empty() { "" } else { "&" }
        );
        let (status, body) = twins.same_at(0, &path);
        assert_eq!(status, 200, "{path}: {body}");
        let fields: Vec<&str> = group_by.split(',').collect();
        let summary: Value = serde_json::from_str(&body).unwrap();
        let records = walk(&twins.sled, 0, collection, filters);
        assert_eq!(answered(&fields, &summary), expected(collection, &fields, &records), "{path}");
        nonempty += usize::from(!records.is_empty());
    }
    assert!(nonempty >= cases.len() - 1, "too many cases count nothing");
}

#[test]
fn a_bad_group_by_is_400_naming_it_and_the_fields_allowed() {
    let server = Server::start(&plugins_dir());
    let cases = [
        ("/v1/vulnerability-findings/summary", "required"),
        ("/v1/vulnerability-findings/summary?groupBy=", "empty"),
        ("/v1/vulnerability-findings/summary?groupBy=cvss", "severity, status, findingType, kev, scanner"),
        ("/v1/vulnerability-findings/summary?groupBy=severity,status,kev", "at most 2"),
        ("/v1/vulnerability-findings/summary?groupBy=severity,severity", "more than once"),
        ("/v1/vulnerability-findings/summary?groupBy=severity&groupBy=status", "more than once"),
        ("/v1/endpoints/summary?groupBy=tag", "osFamily, hasAgent"),
        ("/v1/remediation-targets/summary?groupBy=endpointId", "status, targetType, packageManager"),
    ];
    for (path, says) in cases {
        let response = server.get(path);
        assert_eq!(response.status(), 400, "{path}");
        assert_eq!(response.headers()["content-type"], "application/problem+json", "{path}");
        let problem: Value = response.json().unwrap();
        let params = problem["invalid_params"].as_array().unwrap();
        assert!(
            params.iter().any(|p| p["name"] == "groupBy" && p["reason"].as_str().unwrap().contains(says)),
            "{path}: {problem}"
        );
    }
    // Filters are checked as the list checks them; list-only parameters
    // are refused by name.
    for (path, name) in [
        ("/v1/vulnerability-findings/summary?groupBy=severity&severity=urgent", "severity"),
        ("/v1/vulnerability-findings/summary?groupBy=severity&limit=10", "limit"),
        ("/v1/vulnerability-findings/summary?groupBy=severity&minCvss=11", "minCvss"),
    ] {
        let response = server.get(path);
        assert_eq!(response.status(), 400, "{path}");
        let problem: Value = response.json().unwrap();
        assert!(problem["invalid_params"].as_array().unwrap().iter().any(|p| p["name"] == name), "{path}: {problem}");
    }
    // Scopes have no summary: the path is an item whose id is not a UUID.
    assert_eq!(server.get("/v1/scopes/summary?groupBy=status").status(), 400);
    // The scope is the list's.
    let (_, key) = server.organization_with_key("no findings", &["endpoints:read"]);
    let response = server
        .client
        .get(server.url("/v1/vulnerability-findings/summary?groupBy=severity"))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        server
            .client
            .get(server.url("/v1/endpoints/summary?groupBy=osFamily"))
            .bearer_auth(&key)
            .send()
            .unwrap()
            .status(),
        200
    );
}

#[test]
fn a_component_built_against_wit_0_3_1_loads_and_its_summary_is_404() {
    let old = test_plugins_dir().join("endpoints-wit-0-3-1.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("endpoints.wasm", &old)]);
    let server = Server::start(dir.path());
    let health = server.health_details();
    assert!(health.to_string().contains("+wit-0.3.1"), "{health}");
    // It serves its list and records as before.
    let page = server.json("/v1/endpoints");
    assert!(page["total"].as_u64().unwrap() > 0);
    let id = page["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(server.json(&format!("/v1/endpoints/{id}"))["id"], id.as_str());
    // Its summary route says why there is none.
    let response = server.get("/v1/endpoints/summary?groupBy=osFamily");
    assert_eq!(response.status(), 404);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    let problem: Value = response.json().unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("serves no summary") && detail.contains("0.3.1"), "{problem}");
    // The other groups' summaries are served, and the document leaves the
    // endpoints summary out.
    assert_eq!(server.get("/v1/vulnerability-findings/summary?groupBy=severity").status(), 200);
    let document = server.json("/v1/openapi.json");
    assert!(document["paths"].get("/v1/endpoints/summary").is_none());
    assert!(document["paths"].get("/v1/vulnerability-findings/summary").is_some());
}

/// The deadline bounds the store's work, not only the component's: a
/// summary counted per combination of values (many store calls, each a
/// walk of index entries) answers `503` within its deadline and a margin,
/// on sled and on PostgreSQL, rather than when the counting is done
/// (measured at 200,000 findings on sled: 3.8 s with no deadline in reach).
#[test]
fn a_summary_answers_within_its_deadline_on_both_backends() {
    const DEADLINE_MS: u64 = 100;
    // Room for a loaded machine: the counting alone takes seconds.
    const MARGIN: std::time::Duration = std::time::Duration::from_millis(900);
    let database = common::postgres::TestDatabase::new();
    let deadline = DEADLINE_MS.to_string();
    for backend in [&[][..], &["--database", database.url.as_str()][..]] {
        let extra: Vec<&str> = [&["--plugin-deadline-ms", deadline.as_str()][..], backend].concat();
        // More findings than a summary counts from its candidates (100,000):
        // it counts per combination of values.
        let server = Server::start_seeded_with(&plugins_dir(), 1500, 100, &extra);
        for path in [
            "/v1/vulnerability-findings/summary?groupBy=findingType,scanner&status=open,reopened",
            "/v1/vulnerability-findings/summary?groupBy=scanner,kev&status=open",
        ] {
            let started = std::time::Instant::now();
            let response = server.get(path);
            let elapsed = started.elapsed();
            let status = response.status().as_u16();
            eprintln!("{backend:?} {path}: {status} in {elapsed:?}");
            assert!(
                elapsed <= std::time::Duration::from_millis(DEADLINE_MS) + MARGIN,
                "{backend:?} {path}: answered {status} after {elapsed:?} with a deadline of {DEADLINE_MS} ms"
            );
            assert!(status == 200 || status == 503, "{backend:?} {path}: {status}");
        }
    }
}

/// Every value a summary groups by is one its list's filter accepts, and
/// lists as many records as the group counts (an endpoint of the family
/// `other` included); scopes, which have no summary, say so.
#[test]
fn every_summary_group_lists_with_its_filter() {
    let server = Server::start(&plugins_dir());
    let other = serde_json::json!({"hostname": "plan9-1", "operating_system": {"name": "Plan 9", "family": "other"}});
    assert_eq!(server.import_lines(&server.organization_ids[0], "endpoints", &[other]).status(), 200);
    let fields: [(&str, &[&str]); 3] = [
        ("endpoints", &["osFamily", "hasAgent"]),
        ("vulnerability-findings", &["severity", "status", "findingType", "kev", "scanner"]),
        ("remediation-targets", &["status", "targetType", "packageManager"]),
    ];
    let mut listed = 0;
    for (collection, fields) in fields {
        for field in fields {
            let summary = server.json(&format!("/v1/{collection}/summary?groupBy={field}"));
            for group in summary["groups"].as_array().unwrap_or_else(|| panic!("{summary}")) {
                let value = match &group[*field] {
                    Value::String(text) => text.clone(),
                    Value::Bool(flag) => flag.to_string(),
                    // A record without the field is counted apart; no filter names it.
                    Value::Null => continue,
                    other => panic!("{collection} {field}: {other}"),
                };
                let path = format!("/v1/{collection}?{field}={value}&limit=1");
                let response = server.get(&path);
                assert_eq!(response.status(), 200, "{path}: {}", response.text().unwrap());
                let page: Value = response.json().unwrap();
                assert_eq!(page["total"], group["count"], "{path}: {page}");
                listed += 1;
            }
        }
    }
    assert!(listed >= 15, "only {listed} groups");
    let families = server.json("/v1/endpoints/summary?groupBy=osFamily");
    assert!(families["groups"].as_array().unwrap().iter().any(|g| g["osFamily"] == "other"), "{families}");

    let scopes = server.get("/v1/scopes/summary");
    assert_eq!(scopes.status(), 400);
    let problem: Value = scopes.json().unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("scopes have no summary"), "{problem}");
}
