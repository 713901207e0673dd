//! The public read API end to end, against the demo data set: the real
//! binary, the real components, a real sled directory, real HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Server, plugins_dir};
use serde_json::Value;

const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];

/// The JSON type a contract field has.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Uuid,
    Text,
    Timestamp,
    Bool,
    Enum(&'static [&'static str]),
    Object,
    UuidArray,
    TextArray,
}

use Kind::*;

/// `(field, kind, nullable)` per the contract's resource tables.
const ENDPOINT: &[(&str, Kind, bool)] = &[
    ("id", Uuid, false),
    ("hostname", Text, false),
    ("ip", Text, true),
    ("mac_address", Text, true),
    ("operating_system", Object, false),
    ("agent_id", Uuid, true),
    ("agent_version", Text, true),
    ("created_at", Timestamp, false),
    ("updated_at", Timestamp, false),
    ("tags", TextArray, false),
    ("owner", Object, true),
    ("last_seen_at", Timestamp, true),
    ("open_findings", Object, false),
];
const OPERATING_SYSTEM: &[(&str, Kind, bool)] = &[
    ("name", Text, false),
    ("version", Text, true),
    ("family", Enum(&["macos", "windows", "linux", "other"]), false),
    ("vendor", Text, true),
    ("architecture", Text, true),
];
const SCOPE: &[(&str, Kind, bool)] = &[
    ("id", Uuid, false),
    ("name", Text, false),
    ("description", Text, true),
    ("status", Enum(&["active", "paused", "archived"]), false),
    ("subject_filter", Object, false),
    ("endpoint_filter", Object, false),
    ("finding_filter", Object, false),
    ("sla_days", Object, false),
    ("created_at", Timestamp, false),
    ("updated_at", Timestamp, false),
];
const SEVERITIES: &[&str] = &["critical", "high", "medium", "low", "info"];
const FINDING_TYPES: &[&str] = &["vulnerability", "deprecation", "compliance", "licensing", "standardization"];
const FINDING_STATUSES: &[&str] = &["open", "resolved", "reopened", "suppressed"];
const FINDING: &[(&str, Kind, bool)] = &[
    ("id", Uuid, false),
    ("endpoint_id", Uuid, false),
    ("finding_type", Enum(FINDING_TYPES), false),
    ("title", Text, false),
    ("description", Text, true),
    ("severity", Enum(SEVERITIES), false),
    ("status", Enum(FINDING_STATUSES), false),
    ("cve_id", Text, true),
    ("cvss", Object, true),
    ("epss", Object, true),
    ("kev", Bool, false),
    ("subject", Object, false),
    ("fixed_version", Text, true),
    ("source", Object, false),
    ("remediation_target_id", Uuid, true),
    ("suppression", Object, true),
    ("first_seen_at", Timestamp, false),
    ("last_seen_at", Timestamp, false),
    ("resolved_at", Timestamp, true),
    ("created_at", Timestamp, false),
    ("updated_at", Timestamp, false),
];
const TARGET_STATUSES: &[&str] = &[
    "identified",
    "actionable",
    "queued",
    "pending_approval",
    "in_progress",
    "verifying",
    "remediated",
    "blocked",
    "failed",
    "rejected",
    "obsolete",
];
const EXECUTION: &[(&str, Kind, bool)] = &[
    (
        "status",
        Enum(&[
            "pending",
            "pending_approval",
            "blocked",
            "preflight_failed",
            "running",
            "succeeded",
            "failed",
            "rejected",
        ]),
        false,
    ),
    ("efficacy", Enum(&["pending", "verified_fixed", "verified_not_fixed", "unknown"]), false),
    ("started_at", Timestamp, true),
    ("finished_at", Timestamp, true),
    ("error", Text, true),
];
const TARGET: &[(&str, Kind, bool)] = &[
    ("id", Uuid, false),
    ("endpoint_id", Uuid, false),
    ("target_type", Enum(&["software", "os_patch", "configuration", "service"]), false),
    ("subject", Object, false),
    ("installed_version", Text, true),
    ("install_path", Text, true),
    (
        "package_manager",
        Enum(&["apt", "dnf", "yum", "zypper", "homebrew", "chocolatey", "winget", "msi", "none"]),
        true,
    ),
    ("discovery_method", Enum(&["passive", "targeted_query", "operator"]), false),
    ("status", Enum(TARGET_STATUSES), false),
    ("finding_ids", UuidArray, false),
    ("scope_ids", UuidArray, false),
    ("last_execution", Object, true),
    ("due_at", Timestamp, true),
    ("remediated_at", Timestamp, true),
    ("created_at", Timestamp, false),
    ("updated_at", Timestamp, false),
];

fn is_uuid(text: &str) -> bool {
    text.len() == 36 && uuid::Uuid::try_parse(text).is_ok() && text == text.to_lowercase()
}

fn is_timestamp(text: &str) -> bool {
    // RFC 3339 in UTC, e.g. 2026-11-22T05:39:42Z.
    let bytes = text.as_bytes();
    text.ends_with('Z') && bytes.len() >= 20 && bytes[4] == b'-' && bytes[10] == b'T' && bytes[13] == b':'
}

fn check_fields(what: &str, record: &Value, fields: &[(&str, Kind, bool)]) {
    for (name, kind, nullable) in fields {
        let value = record.get(*name).unwrap_or_else(|| panic!("{what}: missing {name} in {record}"));
        if value.is_null() {
            assert!(nullable, "{what}: {name} is null");
            continue;
        }
        let ok = match kind {
            Uuid => value.as_str().is_some_and(is_uuid),
            Text => value.is_string(),
            Timestamp => value.as_str().is_some_and(is_timestamp),
            Bool => value.is_boolean(),
            Enum(values) => value.as_str().is_some_and(|v| values.contains(&v)),
            Object => value.is_object(),
            UuidArray => value.as_array().is_some_and(|items| items.iter().all(|i| i.as_str().is_some_and(is_uuid))),
            TextArray => value.as_array().is_some_and(|items| items.iter().all(Value::is_string)),
        };
        assert!(ok, "{what}: {name} = {value} is not a {kind:?}");
    }
}

fn ids(records: &[Value]) -> BTreeSet<String> {
    records.iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn every_resource_has_the_contract_fields_and_references_hold() {
    let server = Server::start(&plugins_dir());
    let all: BTreeMap<&str, Vec<Value>> = COLLECTIONS.iter().map(|c| (*c, server.all(0, c))).collect();
    let endpoints = &all["endpoints"];
    let findings = &all["vulnerability-findings"];
    let targets = &all["remediation-targets"];
    let scopes = &all["scopes"];
    assert!((90..=110).contains(&endpoints.len()), "about 100 endpoints, got {}", endpoints.len());
    assert!(findings.len() >= endpoints.len() * 8, "about 10 findings per endpoint");
    assert!(!targets.is_empty() && (3..=12).contains(&scopes.len()));

    for endpoint in endpoints {
        check_fields("endpoint", endpoint, ENDPOINT);
        check_fields("endpoint.operating_system", &endpoint["operating_system"], OPERATING_SYSTEM);
        let counts = &endpoint["open_findings"];
        for severity in SEVERITIES {
            assert!(counts[severity].is_u64(), "open_findings.{severity} in {endpoint}");
        }
    }
    for scope in scopes {
        check_fields("scope", scope, SCOPE);
        for field in ["subject_types", "vendors", "products", "cpe_patterns"] {
            assert!(scope["subject_filter"][field].is_array(), "subject_filter.{field}");
        }
        for field in ["os_families", "endpoint_ids", "tags"] {
            assert!(scope["endpoint_filter"][field].is_array(), "endpoint_filter.{field}");
        }
        assert!(
            scope["finding_filter"]["finding_types"].is_array() && scope["finding_filter"]["kev_only"].is_boolean()
        );
    }
    for finding in findings {
        check_fields("finding", finding, FINDING);
        if let Some(cvss) = finding["cvss"].as_object() {
            let score = cvss["base_score"].as_f64().unwrap();
            assert!((0.0..=10.0).contains(&score) && cvss["vector"].is_string());
            assert!(["3.1", "4.0"].contains(&cvss["version"].as_str().unwrap()));
        }
        if let Some(cve) = finding["cve_id"].as_str() {
            assert!(cve.starts_with("CVE-") && cve.len() >= 13, "{cve}");
        }
        if let Some(epss) = finding["epss"].as_object() {
            for field in ["score", "percentile"] {
                assert!((0.0..=1.0).contains(&epss[field].as_f64().unwrap()));
            }
        }
        check_fields(
            "finding.source",
            &finding["source"],
            &[("scanner", Text, false), ("scanner_finding_id", Text, false)],
        );
    }
    for target in targets {
        check_fields("target", target, TARGET);
        if target["last_execution"].is_object() {
            check_fields("target.last_execution", &target["last_execution"], EXECUTION);
        }
    }

    // Demo data spans every severity and status, and several OS families.
    let spread = |records: &[Value], field: &str| -> BTreeSet<String> {
        records.iter().filter_map(|r| r[field].as_str().map(str::to_owned)).collect()
    };
    assert_eq!(spread(findings, "severity").len(), SEVERITIES.len());
    assert_eq!(spread(findings, "status").len(), FINDING_STATUSES.len());
    assert_eq!(spread(scopes, "status").len(), 3);
    let families: BTreeSet<&str> = endpoints.iter().filter_map(|e| e["operating_system"]["family"].as_str()).collect();
    assert!(["macos", "windows", "linux"].iter().all(|f| families.contains(f)));

    // Every reference points at a record of the same organization.
    let (endpoint_ids, finding_ids, target_ids, scope_ids) = (ids(endpoints), ids(findings), ids(targets), ids(scopes));
    for finding in findings {
        assert!(endpoint_ids.contains(finding["endpoint_id"].as_str().unwrap()));
        if let Some(target) = finding["remediation_target_id"].as_str() {
            assert!(target_ids.contains(target), "finding -> target {target}");
        }
    }
    for target in targets {
        assert!(endpoint_ids.contains(target["endpoint_id"].as_str().unwrap()));
        for id in target["finding_ids"].as_array().unwrap() {
            assert!(finding_ids.contains(id.as_str().unwrap()));
        }
        for id in target["scope_ids"].as_array().unwrap() {
            assert!(scope_ids.contains(id.as_str().unwrap()));
        }
    }
}

#[test]
fn lists_page_with_limit_and_offset_and_reject_bad_parameters() {
    let server = Server::start(&plugins_dir());
    for collection in COLLECTIONS {
        let first = server.json(&format!("/v1/{collection}"));
        let total = first["total"].as_u64().unwrap();
        assert_eq!(first["limit"], 50, "{collection}: default limit");
        assert_eq!(first["offset"], 0);
        assert_eq!(first["data"].as_array().unwrap().len() as u64, total.min(50));
        assert_eq!(first["next_cursor"].is_string(), total > 50, "{collection}: next_cursor");
        let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 6, "{collection}: envelope is data, total, limit, offset, next_cursor, sequence");

        // Offset pages tile the collection in creation order.
        let pages: Vec<Value> = (0..total.div_ceil(7).min(4))
            .flat_map(|page| {
                let body = server.json(&format!("/v1/{collection}?limit=7&offset={}", page * 7));
                body["data"].as_array().unwrap().clone()
            })
            .collect();
        let everything = server.all(0, collection);
        assert_eq!(everything.len() as u64, total);
        assert_eq!(pages, everything[..pages.len()]);
        let created: Vec<&str> = everything.iter().map(|r| r["created_at"].as_str().unwrap()).collect();
        assert!(created.windows(2).all(|w| w[0] <= w[1]), "{collection}: default order is created_at ascending");

        for bad in ["limit=0", "limit=101", "limit=ten", "offset=-1", "colour=blue", "limit=5&limit=6"] {
            let response = server.get(&format!("/v1/{collection}?{bad}"));
            assert_eq!(response.status(), 400, "{collection}?{bad}");
            assert_eq!(response.headers()["content-type"], "application/problem+json");
            let problem: Value = response.json().unwrap();
            let name = bad.split('=').next().unwrap();
            assert_eq!(problem["invalid_params"][0]["name"], name, "{collection}?{bad}: {problem}");
            assert!(problem["error"].as_str().unwrap().contains(name));
            assert_eq!(problem["status"], 400);
        }
        let past_the_end = server.json(&format!("/v1/{collection}?offset={}", total + 10));
        assert_eq!((past_the_end["data"].as_array().unwrap().len(), past_the_end["total"].as_u64()), (0, Some(total)));
    }
}

#[test]
fn cursors_walk_and_are_bound_to_their_organization_and_filters() {
    let server = Server::start(&plugins_dir());
    let everything = server.all(0, "vulnerability-findings");
    let mut walked = Vec::new();
    let mut path = "/v1/vulnerability-findings?limit=100".to_owned();
    let mut first_cursor = None;
    loop {
        let response = server.get(&path);
        assert_eq!(response.status(), 200);
        let link = response.headers().get("link").map(|l| l.to_str().unwrap().to_owned());
        let page: Value = response.json().unwrap();
        walked.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => {
                let link = link.expect("a Link header while there is a next page");
                assert!(link.ends_with("rel=\"next\"") && link.contains("cursor="), "{link}");
                first_cursor.get_or_insert(cursor.to_owned());
                path = format!("/v1/vulnerability-findings?limit=100&cursor={cursor}");
                assert!(!page["offset"].is_number() || walked.len() == 100);
            }
            None => {
                assert!(link.is_none());
                break;
            }
        }
    }
    assert_eq!(ids(&walked), ids(&everything));
    assert_eq!(walked.len(), everything.len());

    let cursor = first_cursor.unwrap();
    let rejected = [
        (1, format!("/v1/vulnerability-findings?cursor={cursor}")),
        (0, format!("/v1/vulnerability-findings?cursor={cursor}&severity=high")),
        (0, format!("/v1/endpoints?cursor={cursor}")),
        (0, format!("/v1/vulnerability-findings?cursor={cursor}&offset=5")),
        (0, format!("/v1/vulnerability-findings?cursor=x{cursor}")),
    ];
    for (organization, path) in rejected {
        let response = server.get_as(organization, &path);
        assert_eq!(response.status(), 400, "{path} as organization {organization}");
        let problem: Value = response.json().unwrap();
        assert_eq!(problem["invalid_params"][0]["name"], "cursor", "{problem}");
    }
}

#[test]
fn items_answer_with_the_record_etags_and_errors_per_the_contract() {
    let server = Server::start(&plugins_dir());
    let resources = [
        ("endpoints", "endpoint"),
        ("remediation-targets", "remediation target"),
        ("scopes", "scope"),
        ("vulnerability-findings", "vulnerability finding"),
    ];
    for (collection, resource) in resources {
        let listed = server.json(&format!("/v1/{collection}?limit=3"));
        for record in listed["data"].as_array().unwrap() {
            let path = format!("/v1/{collection}/{}", record["id"].as_str().unwrap());
            let response = server.get(&path);
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["content-type"], "application/json");
            let etag = response.headers()["etag"].to_str().unwrap().to_owned();
            assert!(etag.starts_with('"') && !etag.starts_with("W/"), "strong ETag: {etag}");
            assert_eq!(&response.json::<Value>().unwrap(), record);
            let revalidated = server
                .client
                .get(server.url(&path))
                .bearer_auth(&server.keys[0])
                .header("if-none-match", &etag)
                .send()
                .unwrap();
            assert_eq!(revalidated.status(), 304);
            assert_eq!(revalidated.headers()["etag"], etag.as_str());

            // The other organization cannot see it.
            let other = server.get_as(1, &path);
            assert_eq!(other.status(), 404, "{path} as Globex");
        }
        let malformed = server.get(&format!("/v1/{collection}/not-a-uuid"));
        assert_eq!(malformed.status(), 400);
        let problem: Value = malformed.json().unwrap();
        let resource_title = format!("Invalid {resource} ID format");
        assert_eq!(problem["error"], resource_title.as_str());

        let unknown = server.get(&format!("/v1/{collection}/01890000-0000-7000-8000-000000000000"));
        assert_eq!(unknown.status(), 404);
        assert_eq!(unknown.headers()["content-type"], "application/problem+json");
        assert!(unknown.json::<Value>().unwrap()["error"].is_string());
    }
    // Lists carry ETags too.
    let list = server.get("/v1/scopes");
    let etag = list.headers()["etag"].to_str().unwrap().to_owned();
    let again = server
        .client
        .get(server.url("/v1/scopes"))
        .bearer_auth(&server.keys[0])
        .header("if-none-match", &etag)
        .send()
        .unwrap();
    assert_eq!(again.status(), 304);
}

#[test]
fn organizations_are_isolated_in_lists_and_totals() {
    let server = Server::start(&plugins_dir());
    for collection in COLLECTIONS {
        let acme = ids(&server.all(0, collection));
        let globex = ids(&server.all(1, collection));
        assert!(!acme.is_empty() && !globex.is_empty());
        assert!(acme.is_disjoint(&globex), "{collection}: no record is shared");
    }
    let acme_hosts: Vec<String> =
        server.all(0, "endpoints").iter().map(|e| e["hostname"].as_str().unwrap().to_lowercase()).collect();
    assert!(acme_hosts.iter().all(|h| !h.starts_with("globex")));
}

#[test]
fn authentication_methods_and_request_ids() {
    let server = Server::start(&plugins_dir());
    let anonymous = server.client.get(server.url("/v1/endpoints")).send().unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    assert_eq!(anonymous.headers()["content-type"], "application/problem+json");
    let problem: Value = anonymous.json().unwrap();
    assert!(problem["error"].is_string() && problem["request_id"].is_string());
    assert_eq!(problem["instance"], "/v1/endpoints");

    let key = &server.keys[0];
    let last = if key.ends_with('x') { 'y' } else { 'x' };
    let forged = format!("{}{last}", &key[..key.len() - 1]);
    for key in [forged.as_str(), "esr_", "Bearer", ""] {
        let response = server.client.get(server.url("/v1/scopes")).bearer_auth(key).send().unwrap();
        assert_eq!(response.status(), 401, "key {key:?}");
    }
    let response = server.client.get(server.url("/v1/scopes/01890000-0000-7000-8000-000000000000")).send().unwrap();
    assert_eq!(response.status(), 401, "auth comes before existence");

    for (method, path) in [
        (reqwest::Method::POST, "/v1/endpoints"),
        (reqwest::Method::DELETE, "/v1/scopes/01890000-0000-7000-8000-000000000000"),
        (reqwest::Method::PUT, "/v1/agent/config"),
        (reqwest::Method::POST, "/v1/health"),
    ] {
        let response =
            server.client.request(method.clone(), server.url(path)).bearer_auth(&server.keys[0]).send().unwrap();
        assert_eq!(response.status(), 405, "{method} {path}");
        assert_eq!(response.headers()["allow"], "GET, HEAD");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
    }
    let head = server.client.head(server.url("/v1/scopes")).bearer_auth(&server.keys[0]).send().unwrap();
    assert_eq!(head.status(), 200);

    let accept = |path: &str, accept: &str| {
        server.client.get(server.url(path)).bearer_auth(&server.keys[0]).header("accept", accept).send().unwrap()
    };
    for acceptable in ["application/json", "*/*", "application/*;q=0.5", "text/html, application/json;q=0.1"] {
        assert_eq!(accept("/v1/scopes", acceptable).status(), 200, "{acceptable}");
    }
    assert_eq!(accept("/v1/agent/config?platform=linux&format=toml", "application/toml").status(), 200);
    for refused in ["text/html", "application/xml, text/*", "application/json;q=0", "image/png"] {
        let response = accept("/v1/scopes", refused);
        assert_eq!(response.status(), 406, "{refused}");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
    }

    let echoed = server.client.get(server.url("/v1/health")).header("x-request-id", "trace-42").send().unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "trace-42");
    let insane = server.client.get(server.url("/v1/health")).header("x-request-id", "a b\t<script>").send().unwrap();
    let generated = insane.headers()["x-request-id"].to_str().unwrap();
    assert!(is_uuid(generated), "a generated id replaces an unsafe one: {generated}");

    let unknown = server.get("/v1/nothing-here");
    assert_eq!(unknown.status(), 404);
    assert_eq!(unknown.headers()["content-type"], "application/problem+json");
}

#[test]
fn endpoints_filter_by_os_family_and_agent() {
    let server = Server::start(&plugins_dir());
    let all = server.all(0, "endpoints");
    let count = |predicate: &dyn Fn(&Value) -> bool| all.iter().filter(|e| predicate(e)).count() as u64;
    let macos = server.json("/v1/endpoints?osFamily=macos&limit=100");
    assert_eq!(macos["total"].as_u64().unwrap(), count(&|e| e["operating_system"]["family"] == "macos"));
    assert!(macos["data"].as_array().unwrap().iter().all(|e| e["operating_system"]["family"] == "macos"));
    let two = server.json("/v1/endpoints?osFamily=windows,linux&limit=1");
    assert_eq!(two["total"].as_u64().unwrap(), count(&|e| e["operating_system"]["family"] != "macos"));
    let without_agent = server.json("/v1/endpoints?hasAgent=false&limit=100");
    assert_eq!(without_agent["total"].as_u64().unwrap(), count(&|e| e["agent_id"].is_null()));
    assert!(without_agent["total"].as_u64().unwrap() > 0, "the demo has endpoints without agents");
    let with_agent = server.json("/v1/endpoints?hasAgent=true");
    assert!(with_agent["total"].as_u64().unwrap() > without_agent["total"].as_u64().unwrap(), "agents on most");

    let bad = server.get("/v1/endpoints?osFamily=beos&hasAgent=maybe");
    assert_eq!(bad.status(), 400);
    let problem: Value = bad.json().unwrap();
    let names: Vec<&str> =
        problem["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["osFamily", "hasAgent"]);
}

#[test]
fn health_and_agent_config_answer_per_the_contract() {
    let server = Server::start(&plugins_dir());
    let health = server.client.get(server.url("/v1/health")).send().unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.headers()["content-type"], "application/health+json");
    assert_eq!(health.headers()["cache-control"], "no-store");
    let body: Value = health.json().unwrap();
    assert_eq!(body["status"], "pass");
    assert!(body["version"].is_string());
    assert_eq!(body["checks"]["storage"][0]["status"], "pass");
    // Public health says pass or fail per check, and nothing of where or what runs.
    let groups = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings", "agent"];
    for group in groups {
        let check = &body["checks"][format!("plugin:{group}")][0];
        assert_eq!(check, &serde_json::json!({"status": "pass", "component_type": "component"}), "{body}");
    }
    let mut members: Vec<&String> = body.as_object().unwrap().keys().collect();
    members.sort();
    assert_eq!(members, ["checks", "status", "version"], "{body}");
    let (text, port) = (body.to_string(), server.base.rsplit(':').next().unwrap());
    assert!(!text.contains("sha256:") && !text.contains(&format!(":{port}")), "{text}");

    // The admin listener's health has the details.
    let detailed = server.admin(reqwest::Method::GET, "/admin/v1/health").send().unwrap();
    assert_eq!(detailed.status(), 200);
    assert_eq!(detailed.headers()["content-type"], "application/health+json");
    let detailed: Value = detailed.json().unwrap();
    assert_eq!(detailed["status"], "pass");
    assert!(detailed["host"].as_str().unwrap().ends_with(server.base.rsplit(':').next().unwrap()), "{detailed}");
    for group in groups {
        let check = &detailed["checks"][format!("plugin:{group}")][0];
        assert_eq!(check["name"], group);
        assert_eq!(check["status"], "pass", "{check}");
        assert!(check["version"].is_string());
        assert!(check["content_hash"].as_str().unwrap().starts_with("sha256:"), "{check}");
    }
    let anonymous = server.client.get(format!("{}/admin/v1/health", server.admin_base)).send().unwrap();
    assert_eq!(anonymous.status(), 401, "the details need the admin token");

    // Each platform's file lists the active scopes that apply to it: those
    // whose endpoint filter names no family, or names the platform's.
    let scopes = server.all(0, "scopes");
    let active_for = |platform: &str| -> Vec<String> {
        scopes
            .iter()
            .filter(|s| s["status"] == "active")
            .filter(|s| match s.pointer("/endpoint_filter/os_families").and_then(Value::as_array) {
                Some(families) if !families.is_empty() => families.iter().any(|f| f == platform),
                _ => true,
            })
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    for platform in ["linux", "windows", "macos"] {
        let config: Value = server.json(&format!("/v1/agent/config?platform={platform}"));
        let mut listed: Vec<String> =
            config["active_scope_ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect();
        listed.sort();
        let mut expected = active_for(platform);
        expected.sort();
        assert_eq!(listed, expected, "{platform}");
    }
    assert_ne!(active_for("linux"), active_for("windows"), "the demo has a scope for some platforms only");
    let active_scopes: BTreeSet<String> = active_for("linux").into_iter().collect();
    let response = server.get("/v1/agent/config?platform=linux");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-disposition"], "attachment; filename=\"agent-config.json\"");
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert_eq!(response.headers()["content-type"], "application/json");
    let config: Value = response.json().unwrap();
    assert_eq!(config["organization_id"], server.organization_ids[0].as_str());
    assert_eq!(config["platform"], "linux");
    assert_eq!(config["api_base_url"], format!("{}/v1", server.base));
    let token = config["enrollment_token"].as_str().unwrap();
    assert!(!token.is_empty() && !server.keys.iter().any(|k| k == token), "never an API key");
    assert!(config["schema_version"].is_number() || config["schema_version"].is_string());
    assert!(config["checkin_interval_seconds"].as_u64().unwrap() > 0);
    assert!(config["log_level"].is_string());
    let text = config.to_string();
    assert!(active_scopes.iter().all(|id| text.contains(id.as_str())), "the active scopes' ids: {config}");

    let globex: Value = server.get_as(1, "/v1/agent/config?platform=windows").json().unwrap();
    assert_eq!(globex["organization_id"], server.organization_ids[1].as_str());
    assert_ne!(globex["enrollment_token"], config["enrollment_token"]);

    let toml = server.get("/v1/agent/config?platform=macos&format=toml");
    assert_eq!(toml.status(), 200);
    assert_eq!(toml.headers()["content-disposition"], "attachment; filename=\"agent-config.toml\"");
    let body = toml.text().unwrap();
    assert!(body.contains("platform = \"macos\"") && body.contains(&server.organization_ids[0]), "{body}");

    for bad in ["", "?platform=beos", "?platform=linux&format=xml", "?platform=linux&key=1"] {
        let response = server.get(&format!("/v1/agent/config{bad}"));
        assert_eq!(response.status(), 400, "agent config{bad}");
        assert!(response.json::<Value>().unwrap()["invalid_params"].is_array());
    }
    let anonymous = server.client.get(server.url("/v1/agent/config?platform=linux")).send().unwrap();
    assert_eq!(anonymous.status(), 401);
}
