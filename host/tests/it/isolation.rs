//! Nobody sees what isn't theirs: a hostile component that calls every
//! store function with every argument it can think of, and tries every
//! ambient authority, finds only its caller's records and nothing else;
//! and a webhook subscription receives only its own organization's changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::webhooks;

use std::collections::BTreeSet;

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};
use serde_json::Value;

const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];

/// Record ids by collection.
type IdsByCollection = Vec<(&'static str, BTreeSet<String>)>;

/// Every id of every collection of one demo organization, by collection.
fn all_ids(server: &Server, organization: usize) -> IdsByCollection {
    COLLECTIONS
        .iter()
        .map(|collection| {
            let ids = server
                .all(organization, collection)
                .iter()
                .map(|record| record["id"].as_str().unwrap().to_owned())
                .collect();
            (*collection, ids)
        })
        .collect()
}

/// The demo organizations' ids, read with the stock components, then a
/// server on the same data with `prober` (a file of the test components)
/// as the endpoints component.
fn serve_with_prober(prober: &str) -> (Server, IdsByCollection, IdsByCollection) {
    let mut stock = Server::start(&plugins_dir());
    let acme = all_ids(&stock, 0);
    let globex = all_ids(&stock, 1);
    stock.stop();
    let source = test_plugins_dir().join(prober);
    let dir = plugins_dir_with(&["endpoints.wasm"], &[(prober, &source)]);
    // The prober makes thousands of store calls: a busy machine must not
    // turn its answer into a deadline's `503`.
    let server = Server::start_on_with(dir.path(), stock.data_dir(), &["--plugin-deadline-ms", "20000"]);
    (server, acme, globex)
}

/// A call that fails cleanly: `500` problem+json revealing nothing of the
/// given texts.
fn assert_fails_cleanly(response: reqwest::blocking::Response, secrets: &[&str], what: &str) {
    assert_eq!(response.status(), 500, "{what}");
    assert_eq!(response.headers()["content-type"], "application/problem+json", "{what}");
    let body = response.text().unwrap();
    for secret in secrets {
        assert!(!body.contains(secret), "{what}: {body}");
    }
}

#[test]
fn a_hostile_component_finds_only_its_callers_records_and_no_way_out() {
    // The prober declaring every collection and the organization in its
    // descriptor's `reads`.
    let (server, acme, globex) = serve_with_prober("prober-all-reads.wasm");
    let acme_all: BTreeSet<String> = acme.iter().flat_map(|(_, ids)| ids.iter().cloned()).collect();
    let globex_all: BTreeSet<String> = globex.iter().flat_map(|(_, ids)| ids.iter().cloned()).collect();
    assert!(acme_all.is_disjoint(&globex_all));
    let bait: Vec<&str> = globex.iter().flat_map(|(_, ids)| ids.iter().take(20)).map(String::as_str).collect();
    let admin_port = server.admin_base.rsplit(':').next().unwrap().to_owned();
    let response = server.get(&format!("/v1/endpoints?ids={}&port={admin_port}", bait.join(",")));
    assert_eq!(response.status(), 200, "the request still answers: {}", server.log());
    let page: Value = response.json().unwrap();
    let report = &page["data"][0];

    // The store: only Acme's records, every one of them reachable.
    let seen: BTreeSet<String> =
        report["store"]["seen"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect();
    assert!(seen.is_disjoint(&globex_all), "another organization's records: {:?}", seen.intersection(&globex_all));
    assert_eq!(seen, acme_all, "exactly the caller's records");
    let counts = &report["store"]["counts"];
    let matching = &report["store"]["matching"];
    for (collection, ids) in &acme {
        assert_eq!(counts[*collection], ids.len(), "{collection}");
        assert_eq!(matching[*collection], ids.len(), "{collection}: count-matching");
    }
    assert_eq!(report["store"]["disagreements"], serde_json::json!([]), "count-matching agrees with index-count");
    assert_eq!(report["store"]["organization"]["organization_id"], server.organization_ids[0].as_str());

    // Nothing under the host's other trees: no name reaches them, whatever
    // a component declares.
    for other in ["organizations", "api-keys", "meta", "records/endpoints", "../endpoints", ""] {
        let response = server.get(&format!("/v1/endpoints?probe={other}"));
        assert_fails_cleanly(response, &[], &format!("{other:?}"));
    }

    // The sandbox: no files, environment, arguments, network or processes.
    let ambient = &report["ambient"];
    for attempt in ["read_dir_root", "read_passwd", "read_cwd", "write_file", "connect", "bind", "resolve", "spawn"] {
        assert!(ambient[attempt]["error"].is_string(), "{attempt} must fail: {}", ambient[attempt]);
    }
    assert_eq!(ambient["env"], serde_json::json!([]), "no environment variables");
    assert_eq!(ambient["args"], serde_json::json!([]), "no arguments");

    // A malformed store call fails the call, cleanly, and reveals nothing.
    let misuse = server.get(&format!("/v1/endpoints?misuse=1&ids={}", bait.join(",")));
    assert_fails_cleanly(misuse, &["organization", bait[0]], "misuse");

    // And the server carries on.
    assert_eq!(server.client.get(server.url("/v1/health")).send().unwrap().status(), 200);
}

/// The store functions that take a collection.
const STORE_FUNCTIONS: [&str; 7] =
    ["get", "scan", "count", "index-scan", "index-count", "count-matching", "index-scan-held"];

#[test]
fn a_component_reads_only_the_collections_it_declares() {
    // The prober declaring only `endpoints`, the group it serves.
    let (server, acme, _) = serve_with_prober("prober.wasm");
    let acme_endpoints = &acme.iter().find(|(collection, _)| *collection == "endpoints").unwrap().1;
    let token = server.json("/v1/agent/config?platform=linux")["enrollment_token"].as_str().unwrap().to_owned();

    // Its own collection, through every store function.
    let page: Value = server.json("/v1/endpoints?probe=endpoints");
    let seen: BTreeSet<String> =
        page["data"][0]["store"]["seen"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect();
    assert_eq!(&seen, acme_endpoints);
    assert_eq!(page["data"][0]["store"]["counts"]["endpoints"], acme_endpoints.len());

    // Any other collection, through any store function, fails the call.
    let undeclared = ["remediation-targets", "scopes", "vulnerability-findings"];
    for collection in undeclared {
        for function in STORE_FUNCTIONS {
            let response = server.get(&format!("/v1/endpoints?probe={collection}&via={function}"));
            assert_fails_cleanly(response, &[], &format!("store.{function} on {collection}"));
            let logged = format!("read `{collection}` with store.{function}");
            server.wait_for_log(30, |log| log.contains(&logged) && log.contains("reads"));
        }
    }
    // So does the organization, which carries the enrollment token.
    let response = server.get("/v1/endpoints?probe=organization");
    assert_fails_cleanly(response, &[&token, &server.organization_ids[0]], "store.organization");
    server.wait_for_log(30, |log| log.contains("read `organization` with store.organization"));

    // The failures were the calls' own: the component still serves.
    let page: Value = server.json("/v1/endpoints?probe=endpoints&via=count");
    assert_eq!(page["data"][0]["answers"][0], acme_endpoints.len());
}

#[test]
fn a_page_of_held_records_names_only_what_its_call_held_within_its_memory() {
    let (server, acme, _) = serve_with_prober("prober.wasm");
    let acme_endpoints = &acme.iter().find(|(collection, _)| *collection == "endpoints").unwrap().1;

    // A page of held records is written by the host: the caller's own.
    let response = server.get("/v1/endpoints?held=page");
    assert_eq!(response.status(), 200, "{}", server.log());
    let page: Value = response.json().unwrap();
    let ids: BTreeSet<String> =
        page["data"].as_array().unwrap().iter().map(|record| record["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(&ids, acme_endpoints);

    // A number it was never handed, an answer larger than its memory, and
    // records held past its memory each fail the call, cleanly.
    for (how, logged) in [
        ("unknown", "names held record 4294967294"),
        ("repeated", "more than the call's memory"),
        ("hoard", "held records would exceed its memory"),
    ] {
        let response = server.get(&format!("/v1/endpoints?held={how}"));
        assert_fails_cleanly(response, &[], how);
        server.wait_for_log(30, |log| log.contains(logged));
    }

    // The failures were the calls' own: the component still serves.
    let page: Value = server.json("/v1/endpoints?held=page");
    assert_eq!(page["data"].as_array().unwrap().len(), acme_endpoints.len());
}

/// The singular resource name in a collection's `404` detail.
fn resource(collection: &str) -> &'static str {
    match collection {
        "endpoints" => "endpoint",
        "remediation-targets" => "remediation target",
        "scopes" => "scope",
        _ => "vulnerability finding",
    }
}

#[test]
fn the_public_api_never_reveals_another_organizations_records() {
    never_reveals_another_organizations_records(&Server::start(&plugins_dir()));
}

#[test]
fn the_public_api_never_reveals_another_organizations_records_to_access_tokens() {
    never_reveals_another_organizations_records(&Server::start(&plugins_dir()).with_tokens());
}

/// What the two tests above check, with the server's credentials (keys or tokens).
fn never_reveals_another_organizations_records(server: &Server) {
    let globex_org = server.organization_ids[1].clone();
    let globex = all_ids(server, 1);
    let never_existed = "01900000-0000-7000-8000-000000000000";
    let mut bodies = Vec::new();

    for (collection, ids) in &globex {
        for id in ids.iter().take(15) {
            // Item reads: exactly the 404 of an id that never existed.
            let theirs = server.get(&format!("/v1/{collection}/{id}"));
            assert_eq!(theirs.status(), 404, "{collection}/{id}");
            let theirs: Value = theirs.json().unwrap();
            let nobody: Value = server.get(&format!("/v1/{collection}/{never_existed}")).json().unwrap();
            assert_eq!(
                theirs["detail"].as_str().unwrap().replace(id.as_str(), "ID"),
                nobody["detail"].as_str().unwrap().replace(never_existed, "ID")
            );
            assert_eq!((&theirs["type"], &theirs["title"]), (&nobody["type"], &nobody["title"]));
            assert!(theirs["detail"].as_str().unwrap().contains(&format!("no {}", resource(collection))));
            bodies.push(theirs.to_string());

            // Their ETag does not make a 304 for us.
            let owner = server.get_as(1, &format!("/v1/{collection}/{id}"));
            let etag = owner.headers()["etag"].to_str().unwrap().to_owned();
            let conditional = server
                .client
                .get(server.url(&format!("/v1/{collection}/{id}")))
                .bearer_auth(&server.keys[0])
                .header("if-none-match", etag)
                .send()
                .unwrap();
            assert_eq!(conditional.status(), 404);
        }
    }

    // Filters naming their records find nothing, like filters naming nothing.
    let sample =
        |collection: &str| globex.iter().find(|(c, _)| *c == collection).unwrap().1.iter().next().unwrap().clone();
    let filters = [
        ("vulnerability-findings", "endpointId", sample("endpoints")),
        ("vulnerability-findings", "remediationTargetId", sample("remediation-targets")),
        ("remediation-targets", "endpointId", sample("endpoints")),
        ("remediation-targets", "scopeId", sample("scopes")),
        ("remediation-targets", "findingId", sample("vulnerability-findings")),
    ];
    for (collection, filter, id) in &filters {
        let page: Value = server.json(&format!("/v1/{collection}?{filter}={id}"));
        assert_eq!(page["total"], 0, "{collection}?{filter}=<theirs>");
        assert_eq!(page["data"], serde_json::json!([]));
        bodies.push(page.to_string());
        let owner: Value = server.get_as(1, &format!("/v1/{collection}?{filter}={id}")).json().unwrap();
        assert!(owner["total"].as_u64().unwrap() > 0 || *filter == "remediationTargetId", "the filter itself works");
    }

    // Totals count only our records, with and without filters.
    let acme = all_ids(server, 0);
    for (collection, ids) in &acme {
        let page: Value = server.json(&format!("/v1/{collection}?limit=1"));
        assert_eq!(page["total"], ids.len(), "{collection}");
    }
    let critical: Vec<Value> =
        server.all(0, "vulnerability-findings").into_iter().filter(|f| f["severity"] == "critical").collect();
    let page: Value = server.json("/v1/vulnerability-findings?severity=critical&limit=1");
    assert_eq!(page["total"], critical.len());

    // Their cursors are refused, with a body that says nothing about them.
    let theirs: Value = server.get_as(1, "/v1/vulnerability-findings?limit=2").json().unwrap();
    let cursor = theirs["next_cursor"].as_str().unwrap();
    let replayed = server.get(&format!("/v1/vulnerability-findings?limit=2&cursor={cursor}"));
    assert_eq!(replayed.status(), 400);
    bodies.push(replayed.text().unwrap());

    // Exports hold exactly our records, in every format and with filters
    // naming theirs; resuming after one of their ids is refused as an id
    // that never existed is.
    for (collection, ids) in &acme {
        let text = server.get(&format!("/v1/{collection}/export")).text().unwrap();
        let exported: BTreeSet<String> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok()?["id"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(&exported, ids, "{collection}: the export is exactly ours");
        bodies.push(text);
        let theirs = sample(collection);
        let refused = server.get(&format!("/v1/{collection}/export?after={theirs}"));
        assert_eq!(refused.status(), 400, "{collection}: resuming after their id");
        let refused: Value = refused.json().unwrap();
        let nobody: Value = server.get(&format!("/v1/{collection}/export?after={never_existed}")).json().unwrap();
        for member in ["type", "title", "detail", "invalid_params"] {
            assert_eq!(refused[member], nobody[member], "their id is refused as one that never existed");
        }
        bodies.push(refused.to_string());
    }
    let ocsf = server.get("/v1/vulnerability-findings/export?format=ocsf").text().unwrap();
    assert_eq!(ocsf.lines().count(), acme.iter().find(|(c, _)| *c == "vulnerability-findings").unwrap().1.len() + 1);
    bodies.push(ocsf);
    for (collection, filter, id) in &filters {
        let text = server.get(&format!("/v1/{collection}/export?{filter}={id}")).text().unwrap();
        assert_eq!(text.lines().count(), 1, "{collection}?{filter}=<theirs>: the last line alone: {text}");
        bodies.push(text);
    }

    // The agent configuration is ours alone.
    let config: Value = server.json("/v1/agent/config?platform=linux");
    let their_config: Value = server.get_as(1, "/v1/agent/config?platform=linux").json().unwrap();
    assert_eq!(config["organization_id"], server.organization_ids[0].as_str());
    assert_ne!(config["enrollment_token"], their_config["enrollment_token"]);
    let our_scopes = &acme.iter().find(|(c, _)| *c == "scopes").unwrap().1;
    for scope in config["active_scope_ids"].as_array().unwrap() {
        assert!(our_scopes.contains(scope.as_str().unwrap()), "{scope}");
    }
    let config_text = config.to_string();
    assert!(!config_text.contains(&server.keys[0]), "never the caller's key");
    bodies.push(config_text);

    // Nothing we were answered names their organization or any record we did not ask for.
    let asked: BTreeSet<&str> = globex.iter().flat_map(|(_, ids)| ids.iter().take(15)).map(String::as_str).collect();
    let globex_all: BTreeSet<&String> = globex.iter().flat_map(|(_, ids)| ids.iter()).collect();
    for body in &bodies {
        assert!(!body.contains(&globex_org), "{body}");
        for id in globex_all.iter().filter(|id| !asked.contains(id.as_str())) {
            assert!(!body.contains(id.as_str()), "{id} in {body}");
        }
    }
}

#[test]
fn summaries_count_only_the_callers_records() {
    let server = Server::start(&plugins_dir());
    let (_, empty_key) = server.organization_with_key("Initech", &["findings:read", "endpoints:read", "targets:read"]);
    let acme_endpoint = server.all(0, "endpoints")[0]["id"].as_str().unwrap().to_owned();
    let summaries = [
        ("vulnerability-findings", "severity,status"),
        ("vulnerability-findings", "scanner"),
        ("endpoints", "osFamily,hasAgent"),
        ("remediation-targets", "status,targetType"),
    ];
    for (collection, group_by) in summaries {
        for filter in ["", "&endpointId="] {
            if collection == "endpoints" && !filter.is_empty() {
                continue;
            }
            let filter = if filter.is_empty() { String::new() } else { format!("{filter}{acme_endpoint}") };
            let path = format!("/v1/{collection}/summary?groupBy={group_by}{filter}");
            // An organization with no records counts nothing, whatever it names.
            let response = server.client.get(server.url(&path)).bearer_auth(&empty_key).send().unwrap();
            assert_eq!(response.status(), 200, "{path}");
            let summary: Value = response.json().unwrap();
            assert_eq!(summary, serde_json::json!({"groups": [], "total": 0}), "{path}");
            // Globex naming Acme's endpoint counts nothing either; unfiltered,
            // each organization's total is its own list's.
            let globex = server.json_as(1, &path);
            if filter.is_empty() {
                let acme = server.json_as(0, &path);
                assert_eq!(globex["total"], server.json_as(1, &format!("/v1/{collection}?limit=1"))["total"], "{path}");
                assert_eq!(acme["total"], server.json_as(0, &format!("/v1/{collection}?limit=1"))["total"], "{path}");
                assert_ne!(acme, globex, "{path}: both organizations count alike");
            } else {
                assert_eq!(globex, serde_json::json!({"groups": [], "total": 0}), "{path}");
            }
        }
    }
}

#[test]
fn change_events_and_histories_are_only_the_callers() {
    changes_and_histories_are_only_the_callers(&Server::start(&plugins_dir()));
}

#[test]
fn change_events_and_histories_are_only_the_callers_of_access_tokens() {
    changes_and_histories_are_only_the_callers(&Server::start(&plugins_dir()).with_tokens());
}

/// What the two tests above check, with the server's credentials (keys or tokens).
fn changes_and_histories_are_only_the_callers(server: &Server) {
    let (acme, globex) = (server.organization_ids[0].clone(), server.organization_ids[1].clone());
    // Both organizations change something: each one's feed has events.
    let finding = |n: usize| {
        let endpoint = server.all(n, "endpoints")[0]["id"].as_str().unwrap().to_owned();
        serde_json::json!({
            "endpoint_id": endpoint, "finding_type": "vulnerability", "title": format!("isolated {n}"),
            "severity": "high", "status": "open", "cve_id": "CVE-2024-3094", "kev": false,
            "subject": {"type": "software", "vendor": "Tukaani", "product": "xz-utils", "version": "5.6.0"},
            "source": {"scanner": "trivy", "scanner_finding_id": format!("isolated-{n}")},
            "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00Z",
        })
    };
    let mut theirs = String::new();
    for (n, organization) in [(0, &acme), (1, &globex)] {
        let response = server
            .admin(
                reqwest::Method::POST,
                &format!("/admin/v1/organizations/{organization}/import/vulnerability-findings"),
            )
            .header("content-type", "application/x-ndjson")
            .body(format!("{}\n", finding(n)))
            .send()
            .unwrap();
        let ids = common::imported_ids(response);
        if n == 1 {
            theirs = ids[0].clone();
        }
    }
    let globex_ids: BTreeSet<String> = all_ids(server, 1).into_iter().flat_map(|(_, ids)| ids).collect();
    // Our feed: only our records, never theirs.
    let feed = server.json("/v1/changes?limit=1000");
    assert!(!feed["data"].as_array().unwrap().is_empty());
    let feed_text = feed.to_string();
    assert!(!feed_text.contains(&globex));
    for id in &globex_ids {
        assert!(!feed_text.contains(id.as_str()), "{id} in our feed");
    }
    // Their finding's history: the 404 of a finding that never existed.
    let history = server.get(&format!("/v1/vulnerability-findings/{theirs}/history"));
    assert_eq!(history.status(), 404);
    let body = history.text().unwrap();
    assert!(!body.contains("import") && !body.contains(&globex), "{body}");
    assert_eq!(server.json_as(1, &format!("/v1/vulnerability-findings/{theirs}/history"))["data"][0]["status"], "open");
    // Their feed cursor is refused, saying nothing of them.
    let their_page = server.json_as(1, "/v1/changes?limit=1");
    let cursor = their_page["next_cursor"].as_str().unwrap_or_default().to_owned();
    let replayed = server.get(&format!("/v1/changes?cursor={cursor}"));
    assert_eq!(replayed.status(), 400);
    let replayed = replayed.text().unwrap();
    assert!(!replayed.contains(&globex) && !replayed.contains(&theirs), "{replayed}");
}

/// A cursor is opaque: on PostgreSQL it carries the database's position
/// (which every organization's writes move), encrypted, so a tenant reads
/// neither it nor how far another organization's writes moved it.
#[test]
fn a_cursor_shows_nothing_of_the_database_it_was_read_at() {
    use base64::Engine as _;
    let database = common::postgres::TestDatabase::new();
    let server = Server::start_with(&plugins_dir(), &["--database", &database.url]);
    let next_cursor = || {
        let page = server.json_as(1, "/v1/endpoints?limit=1");
        page["next_cursor"].as_str().unwrap_or_else(|| panic!("a next page: {page}")).to_owned()
    };
    let before = next_cursor();
    // Acme writes; Globex pages again.
    let lines: Vec<Value> = (0..50)
        .map(|n| serde_json::json!({"hostname": format!("acme-{n}"), "operating_system": {"name": "Debian 12", "family": "linux"}}))
        .collect();
    assert_eq!(server.import_lines(&server.organization_ids[0], "endpoints", &lines).status(), 200);
    let after = next_cursor();
    for cursor in [&before, &after] {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).expect("a cursor is base64url");
        let longest_text = bytes
            .split(|byte| !(byte.is_ascii_alphanumeric() || b"{}\":,_-".contains(byte)))
            .map(<[u8]>::len)
            .max()
            .unwrap_or(0);
        // Sealed bytes are random: 69 of 256 byte values count as text, so
        // a run of 8 turns up in about one cursor in 300 by chance, one of
        // 16 in about one in seven million. Plaintext shows far longer runs
        // (a record id alone is 36).
        assert!(longest_text < 16, "{longest_text} bytes of text in the cursor {cursor}: {bytes:?}");
    }
    // The position moved, but not so much as to show in the token's length.
    assert!(before.len().abs_diff(after.len()) <= 1, "{before} and {after}");
    // Both still walk on.
    for cursor in [&before, &after] {
        assert_eq!(server.get_as(1, &format!("/v1/endpoints?limit=1&cursor={cursor}")).status(), 200);
    }
}

#[test]
fn one_organization_s_changes_never_reach_another_s_subscription() {
    let server = Server::start_with(&plugins_dir(), &webhooks::LOOPBACK);
    let (mine, my_key) = server.organization_with_key("Mine", &["endpoints:read"]);
    let (theirs, _) = server.organization_with_key("Theirs", &["endpoints:read"]);
    let receiver = common::receiver::Receiver::start();
    webhooks::subscribe(&server, &mine, serde_json::json!({"url": receiver.url, "collections": ["endpoints"]}));
    webhooks::import(
        &server,
        &theirs,
        "endpoints",
        &(0..20).map(|n| webhooks::endpoint(&format!("theirs-{n}"))).collect::<Vec<_>>(),
    );
    webhooks::import(&server, &mine, "endpoints", &[webhooks::endpoint("mine")]);
    receiver.wait_for_sequence(webhooks::latest_sequence(&server, &my_key), std::time::Duration::from_secs(30));
    let events = receiver.acknowledged_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["record"]["hostname"], "mine");
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(receiver.acknowledged_events().len(), 1);
}
