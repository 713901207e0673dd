//! The same lab hosts scanned by several scanners are one endpoint each,
//! matched by the rules of `docs/scanner-reports.md` ("Hosts are
//! endpoints"): real reports of Nessus, Greenbone and Wazuh, the second and
//! third given the first one's hosts (as a lab scanned by the three would
//! give them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{Server, plugins_dir, reports_dir};
use crate::reports::{all, import_ok, new_organization};

fn report(path: &str) -> String {
    std::fs::read_to_string(reports_dir().join(path)).unwrap()
}

/// Host name → the scanners whose findings its endpoint holds.
fn scanners_by_host(server: &Server, key: &str) -> BTreeMap<String, BTreeSet<String>> {
    let endpoints = all(server, key, "endpoints", "");
    let names: BTreeMap<String, String> = endpoints
        .iter()
        .map(|endpoint| {
            (endpoint["id"].as_str().unwrap().to_owned(), endpoint["hostname"].as_str().unwrap().to_owned())
        })
        .collect();
    let mut scanners: BTreeMap<String, BTreeSet<String>> =
        names.values().map(|name| (name.clone(), BTreeSet::new())).collect();
    for finding in all(server, key, "vulnerability-findings", "") {
        let host = &names[finding["endpoint_id"].as_str().unwrap()];
        scanners.get_mut(host).unwrap().insert(finding["source"]["scanner"].as_str().unwrap().to_owned());
    }
    scanners
}

#[test]
fn the_same_hosts_from_three_scanners_are_one_endpoint_each() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "lab");

    // Nessus: two hosts known only by their IP, one by its NetBIOS name.
    let nessus =
        import_ok(&server, &organization, "", report("nessus/python-libnessus_3-hosts-ip-only.nessus").into_bytes());
    assert_eq!(nessus["endpoints_created"], 3, "{nessus}");
    let endpoints = all(&server, &key, "endpoints", "");
    let by_name: BTreeMap<&str, &serde_json::Value> =
        endpoints.iter().map(|endpoint| (endpoint["hostname"].as_str().unwrap(), endpoint)).collect();
    assert_eq!(by_name.keys().copied().collect::<Vec<_>>(), ["192.168.2.101", "192.168.2.104", "MIKE-MACBOOK"]);
    assert_eq!(by_name["MIKE-MACBOOK"]["ip"], "192.168.2.100");
    let families: BTreeSet<&str> =
        endpoints.iter().map(|endpoint| endpoint["operating_system"]["family"].as_str().unwrap()).collect();
    assert!(families.contains("linux"), "the Ubuntu host is linux: {families:?}");

    // Greenbone scanned 192.168.2.101 and calls it METASPLOITABLE: the
    // endpoint was named by that IP, so the address is its identity.
    let greenbone = report("openvas/golismero_openvas6_metasploitable.xml").replace("10.211.55.35", "192.168.2.101");
    let answer = import_ok(&server, &organization, "", greenbone.into_bytes());
    assert_eq!(answer["endpoints_created"], 0, "{answer}");

    // Greenbone's CSV names a host `vulnweb.com` at 192.168.2.100, which
    // MIKE-MACBOOK had: a named host at a known address is another machine.
    let csv = report("openvas/vulnwhisperer_openvas9-csv_vulnweb.csv").replace("176.28.50.165", "192.168.2.100");
    let answer = import_ok(&server, &organization, "", csv.into_bytes());
    assert_eq!(answer["endpoints_created"], 1, "{answer}");

    // Wazuh's agent `myhost0` is the Mac under its qualified name: one of
    // the two names unqualified, the short names match.
    let wazuh =
        report("wazuh/defectdojo_wazuh-4.8-indexer.json").replace("\"myhost0\"", "\"mike-macbook.lab.example\"");
    let answer = import_ok(&server, &organization, "", wazuh.into_bytes());
    assert_eq!(answer["endpoints_created"], 1, "myhost1 is new: {answer}");

    let scanners = scanners_by_host(&server, &key);
    let set = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect::<BTreeSet<String>>();
    assert_eq!(scanners["192.168.2.101"], set(&["greenbone", "tenable"]), "{scanners:?}");
    assert_eq!(scanners["MIKE-MACBOOK"], set(&["tenable", "wazuh"]), "{scanners:?}");
    assert_eq!(scanners["vulnweb.com"], set(&["greenbone"]), "{scanners:?}");
    assert_eq!(scanners["myhost1"], set(&["wazuh"]), "{scanners:?}");
    assert_eq!(scanners.len(), 5, "{scanners:?}");

    // Again, in another order, into another organization: the same endpoints.
    let (organization, key) = new_organization(&server, "lab again");
    import_ok(&server, &organization, "", report("nessus/python-libnessus_3-hosts-ip-only.nessus").into_bytes());
    let wazuh =
        report("wazuh/defectdojo_wazuh-4.8-indexer.json").replace("\"myhost0\"", "\"mike-macbook.lab.example\"");
    import_ok(&server, &organization, "", wazuh.into_bytes());
    let greenbone = report("openvas/golismero_openvas6_metasploitable.xml").replace("10.211.55.35", "192.168.2.101");
    import_ok(&server, &organization, "", greenbone.into_bytes());
    let again = scanners_by_host(&server, &key);
    assert_eq!(again["MIKE-MACBOOK"], set(&["tenable", "wazuh"]), "{again:?}");
    assert_eq!(again["192.168.2.101"], set(&["greenbone", "tenable"]), "{again:?}");
}
