//! nexpose reports through the real host: each real report is read here
//! with roxmltree, independently of the importer, and checked against the
//! endpoints and findings the host made of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{Server, plugins_dir};
use crate::reports::{all, import_ok, new_organization, report_files};

/// What a report holds, by the mapping in `docs/scanner-report-mapping/nexpose.md`.
#[derive(Default)]
struct Reading {
    /// Host name → (IP, OS family) of each address's endpoint.
    endpoints: BTreeMap<String, (String, String)>,
    /// (host name, finding identity) → (first CVE, severity) of each instance.
    findings: BTreeMap<(String, String), (Option<String>, &'static str)>,
    /// Tests whose status is not `vulnerable-*`.
    skipped: usize,
}

/// The band of a CVSS score.
fn band(score: f64) -> &'static str {
    match score {
        s if s >= 9.0 => "critical",
        s if s >= 7.0 => "high",
        s if s >= 4.0 => "medium",
        s if s > 0.0 => "low",
        _ => "info",
    }
}

fn is_host_name(name: &str) -> bool {
    name.parse::<std::net::IpAddr>().is_err()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn children<'a, 'input>(
    node: roxmltree::Node<'a, 'input>,
    name: &'static str,
) -> impl Iterator<Item = roxmltree::Node<'a, 'input>> {
    node.children().filter(move |child| child.has_tag_name(name))
}

fn child<'a, 'input>(node: roxmltree::Node<'a, 'input>, name: &'static str) -> Option<roxmltree::Node<'a, 'input>> {
    children(node, name).next()
}

fn read_report(text: &str) -> Reading {
    let document = roxmltree::Document::parse(text).unwrap();
    let root = document.root_element();
    assert!(root.has_tag_name("NexposeReport"));
    let definitions: BTreeMap<&str, roxmltree::Node> = child(root, "VulnerabilityDefinitions")
        .into_iter()
        .flat_map(|definitions| children(definitions, "vulnerability"))
        .map(|definition| (definition.attribute("id").unwrap(), definition))
        .collect();
    let nodes: Vec<roxmltree::Node> = children(child(root, "nodes").unwrap(), "node").collect();

    // Every node of an address is one host: its valid names, its most certain fingerprint.
    let mut names: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut fingerprints: BTreeMap<&str, (f64, &str)> = BTreeMap::new();
    for node in &nodes {
        let address = node.attribute("address").unwrap();
        let known = names.entry(address).or_default();
        for name in child(*node, "names").into_iter().flat_map(|names| children(names, "name")) {
            let name = name.text().unwrap().trim();
            if is_host_name(name) {
                known.push(name);
            }
        }
        for os in child(*node, "fingerprints").into_iter().flat_map(|fingerprints| children(fingerprints, "os")) {
            let certainty: f64 = os.attribute("certainty").unwrap().parse().unwrap();
            let family = match os.attribute("family").unwrap_or_default() {
                "Linux" => "linux",
                "Mac OS X" => "macos",
                "Windows" => "windows",
                _ => "other",
            };
            if fingerprints.get(address).is_none_or(|(known, _)| certainty > *known) {
                fingerprints.insert(address, (certainty, family));
            }
        }
    }
    let hostname = |address: &str| -> String {
        let names = &names[address];
        names.iter().find(|name| name.contains('.')).or(names.first()).copied().unwrap_or(address).to_owned()
    };

    let mut reading = Reading::default();
    for address in names.keys() {
        let family = fingerprints.get(address).map_or("other", |(_, family)| family);
        reading.endpoints.insert(hostname(address), ((*address).to_owned(), family.to_owned()));
    }
    for node in &nodes {
        let address = node.attribute("address").unwrap();
        let mut tests: Vec<(roxmltree::Node, &str, Option<String>)> = Vec::new();
        for test in child(*node, "tests").into_iter().flat_map(|tests| children(tests, "test")) {
            tests.push((test, "general", None));
        }
        for endpoint in child(*node, "endpoints").into_iter().flat_map(|endpoints| children(endpoints, "endpoint")) {
            let port = format!("{}/{}", endpoint.attribute("port").unwrap(), endpoint.attribute("protocol").unwrap());
            for service in child(endpoint, "services").into_iter().flat_map(|services| children(services, "service")) {
                for test in child(service, "tests").into_iter().flat_map(|tests| children(tests, "test")) {
                    tests.push((test, service.attribute("name").unwrap(), Some(port.clone())));
                }
            }
        }
        for (test, service, port) in tests {
            if !test.attribute("status").unwrap().starts_with("vulnerable-") {
                reading.skipped += 1;
                continue;
            }
            let id = test.attribute("id").unwrap();
            let key = test.attribute("key").filter(|key| !key.trim().is_empty());
            let location = match (port, key) {
                (Some(port), Some(key)) => format!(" {port} {key}"),
                (Some(port), None) => format!(" {port}"),
                (None, Some(key)) => format!(" {key}"),
                (None, None) => String::new(),
            };
            let identity = format!("other nexpose:{id} {}{location}", service.replace(' ', "_"));
            let definition = definitions[id];
            let cve = child(definition, "references")
                .into_iter()
                .flat_map(|references| children(references, "reference"))
                .find(|reference| reference.attribute("source") == Some("CVE"))
                .map(|reference| reference.text().unwrap().trim().to_owned());
            let severity = band(definition.attribute("cvssScore").unwrap().parse().unwrap());
            reading.findings.insert((hostname(address), identity), (cve, severity));
        }
    }
    reading
}

#[test]
fn every_nexpose_report_comes_out_as_a_reading_of_it_says_and_again_quietly() {
    let server = Server::start(&plugins_dir());
    for (index, file) in report_files("nexpose").iter().enumerate() {
        let name = file.display();
        let (organization, key) = new_organization(&server, &format!("nexpose-{index}"));
        let bytes = std::fs::read(file).unwrap();
        let expected = read_report(std::str::from_utf8(&bytes).unwrap());
        // The report names its hosts: no endpoint is named.
        let answer = import_ok(&server, &organization, "", bytes.clone());
        assert_eq!(answer["format"], "nexpose", "{name}: {answer}");

        let endpoints = all(&server, &key, "endpoints", "");
        let hosts: BTreeMap<String, String> = endpoints
            .iter()
            .map(|endpoint| {
                (endpoint["id"].as_str().unwrap().to_owned(), endpoint["hostname"].as_str().unwrap().to_owned())
            })
            .collect();
        let made: BTreeMap<String, (String, String)> = endpoints
            .iter()
            .map(|endpoint| {
                let hostname = endpoint["hostname"].as_str().unwrap().to_owned();
                let ip = endpoint["ip"].as_str().unwrap_or_default().to_owned();
                (hostname, (ip, endpoint["operating_system"]["family"].as_str().unwrap().to_owned()))
            })
            .collect();
        assert_eq!(made, expected.endpoints, "{name}: the endpoints (host name → IP, OS family)");

        let findings = all(&server, &key, "vulnerability-findings", "");
        let found: BTreeMap<(String, String), (Option<String>, &str)> = findings
            .iter()
            .map(|finding| {
                assert_eq!(finding["source"]["scanner"], "rapid7", "{name}: {finding}");
                assert_eq!(finding["cvss"]["version"], "2.0", "{name}: {finding}");
                let host = hosts[finding["endpoint_id"].as_str().unwrap()].clone();
                let identity = finding["source"]["scanner_finding_id"].as_str().unwrap().to_owned();
                let cve = finding["cve_id"].as_str().map(str::to_owned);
                ((host, identity), (cve, finding["severity"].as_str().unwrap()))
            })
            .collect();
        assert_eq!(findings.len(), expected.findings.len(), "{name}: one finding per instance");
        assert_eq!(found, expected.findings, "{name}: (host, identity) → (first CVE, severity)");
        // The (host, check, package) triples: the identity's second word is the check.
        let triples = |findings: &BTreeMap<(String, String), _>| -> BTreeSet<(String, String, String)> {
            findings
                .keys()
                .map(|(host, identity)| {
                    let mut words = identity.split(' ').skip(1);
                    (host.clone(), words.next().unwrap().to_owned(), words.next().unwrap().to_owned())
                })
                .collect()
        };
        assert_eq!(triples(&found), triples(&expected.findings), "{name}");
        for finding in &findings {
            let product = finding["subject"]["product"].as_str().unwrap().replace(' ', "_");
            let identity = finding["source"]["scanner_finding_id"].as_str().unwrap();
            assert_eq!(identity.split(' ').nth(2), Some(product.as_str()), "{name}: {finding}");
        }

        let skipped = answer["skipped"].as_array().unwrap();
        assert_eq!(skipped.len(), expected.skipped, "{name}: {answer}");
        assert!(
            skipped.iter().all(|entry| entry["reason"].as_str().is_some_and(|reason| reason.starts_with("status "))),
            "{name}: every skipped test says its status: {answer}"
        );

        super::assert_reimport_quiet(&server, &organization, &key, "", bytes, &findings, &name.to_string());
        assert_eq!(all(&server, &key, "endpoints", "").len(), endpoints.len(), "{name}");
    }
}

/// Two `<node>` of address 1.1.1.1 named `localhost:5000` and
/// `localhost:6000` (not host names) are one endpoint, named by its address.
#[test]
fn the_duplicate_node_makes_one_endpoint() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "nexpose-duplicate-node");
    let file = report_files("nexpose").into_iter().find(|file| file.ends_with("dradis_nexpose-2.0_duplicate-node.xml"));
    let answer = import_ok(&server, &organization, "", std::fs::read(file.unwrap()).unwrap());
    assert_eq!((answer["format"].as_str(), answer["created"].as_u64()), (Some("nexpose"), Some(1)), "{answer}");
    let endpoints = all(&server, &key, "endpoints", "");
    let [endpoint] = endpoints.as_slice() else { panic!("{endpoints:?}") };
    assert_eq!((endpoint["hostname"].as_str(), endpoint["ip"].as_str()), (Some("1.1.1.1"), Some("1.1.1.1")));
    let findings = all(&server, &key, "vulnerability-findings", "");
    let [finding] = findings.as_slice() else { panic!("{findings:?}") };
    assert_eq!(finding["cve_id"], "CVE-2012-0053");
    assert_eq!(finding["source"]["scanner_finding_id"], "other nexpose:ntp-clock-variables-disclosure NTP 123/udp");
}

// The hostile documents come from the SDK, which `native-baseline` links.
#[cfg(feature = "native-baseline")]
#[test]
fn hostile_xml_is_refused_and_the_server_stays_up() {
    super::assert_hostile_xml_refused(&Server::start(&plugins_dir()), "nexpose", &["NexposeReport"], "");
}
