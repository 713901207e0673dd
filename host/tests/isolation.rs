//! Nobody sees what isn't theirs: a hostile component that calls every
//! store function with every argument it can think of, and tries every
//! ambient authority, finds only its caller's records and nothing else.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};
use serde_json::Value;

const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];

/// Every id of every collection of one demo organization, by collection.
fn all_ids(server: &Server, organization: usize) -> Vec<(&'static str, BTreeSet<String>)> {
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

#[test]
fn a_hostile_component_finds_only_its_callers_records_and_no_way_out() {
    // The organizations' ids, read with the stock components.
    let mut stock = Server::start(&plugins_dir());
    let acme = all_ids(&stock, 0);
    let globex = all_ids(&stock, 1);
    let acme_all: BTreeSet<String> = acme.iter().flat_map(|(_, ids)| ids.iter().cloned()).collect();
    let globex_all: BTreeSet<String> = globex.iter().flat_map(|(_, ids)| ids.iter().cloned()).collect();
    assert!(acme_all.is_disjoint(&globex_all));
    stock.stop();

    // The same data served with the prober as the endpoints component.
    let source = test_plugins_dir().join("prober.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("prober.wasm", &source)]);
    let server = Server::start_on(dir.path(), stock.data_dir());
    let bait: Vec<&str> = globex.iter().flat_map(|(_, ids)| ids.iter().take(20)).map(String::as_str).collect();
    let admin_port = server.admin_base.rsplit(':').next().unwrap().to_owned();
    let response = server.get(&format!("/v1/endpoints?ids={}&port={admin_port}", bait.join(",")));
    assert_eq!(response.status(), 200, "the request still answers: {}", server.log());
    let page: Value = response.json().unwrap();
    let report = &page["data"][0];

    // The store: only Acme's records, every one of them reachable, and
    // nothing under the host's other trees.
    let seen: BTreeSet<String> =
        report["store"]["seen"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect();
    assert!(seen.is_disjoint(&globex_all), "another organization's records: {:?}", seen.intersection(&globex_all));
    assert_eq!(seen, acme_all, "exactly the caller's records");
    let counts = &report["store"]["counts"];
    for (collection, ids) in &acme {
        assert_eq!(counts[*collection], ids.len(), "{collection}");
    }
    for other in ["organizations", "api-keys", "meta", "records/endpoints", "../endpoints", ""] {
        assert_eq!(counts[other], 0, "{other:?}");
    }
    assert_eq!(report["store"]["organization"]["organization_id"], server.organization_ids[0].as_str());

    // The sandbox: no files, environment, arguments, network or processes.
    let ambient = &report["ambient"];
    for attempt in ["read_dir_root", "read_passwd", "read_cwd", "write_file", "connect", "bind", "resolve", "spawn"] {
        assert!(ambient[attempt]["error"].is_string(), "{attempt} must fail: {}", ambient[attempt]);
    }
    assert_eq!(ambient["env"], serde_json::json!([]), "no environment variables");
    assert_eq!(ambient["args"], serde_json::json!([]), "no arguments");

    // A malformed store call fails the call, cleanly, and reveals nothing.
    let misuse = server.get(&format!("/v1/endpoints?misuse=1&ids={}", bait.join(",")));
    assert_eq!(misuse.status(), 500);
    assert_eq!(misuse.headers()["content-type"], "application/problem+json");
    let body = misuse.text().unwrap();
    assert!(!body.contains("organization") && !body.contains(bait[0]), "{body}");

    // And the server carries on.
    assert_eq!(server.client.get(server.url("/v1/health")).send().unwrap().status(), 200);
}
