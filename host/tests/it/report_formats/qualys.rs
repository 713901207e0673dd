//! qualys reports through the real host: every real Qualys VM report (an
//! asset data report, a host list detection answer, scan results) comes
//! out as the test reads it itself with roxmltree (hosts, checks, ports,
//! severities, endpoints, what is skipped), and again quietly; hostile XML
//! is a `422` saying what was wrong, and the server carries on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use roxmltree::{Document, Node, ParsingOptions};

use crate::common::{Server, plugins_dir};
use crate::reports::{all, import_ok, new_organization, report_files};

/// What a report holds, read without the importer.
#[derive(Debug, Default)]
struct Reading {
    /// (host name, check, package) → (severity, first CVE).
    findings: BTreeMap<(String, String, String), (&'static str, Option<String>)>,
    /// (host name, IP, OS family) of each host.
    endpoints: BTreeSet<(String, Option<String>, Option<String>)>,
    /// Information gathered: skipped, each with a reason.
    skipped: usize,
}

impl Reading {
    fn host(&mut self, names: [Option<String>; 3], ip: Option<String>, os: Option<String>) -> String {
        let hostname = names.into_iter().flatten().next().expect("a host named somehow");
        self.endpoints.insert((hostname.clone(), ip, os.as_deref().map(family)));
        hostname
    }

    fn found(
        &mut self,
        host: &str,
        qid: &str,
        port: Option<String>,
        protocol: Option<String>,
        level: &str,
        cve: Option<String>,
    ) {
        // One finding per host, QID and port; the port is also the package.
        let package = match (port, protocol) {
            (Some(port), Some(protocol)) => format!("{port}/{}", protocol.to_ascii_lowercase()),
            (Some(port), None) => port,
            (None, _) => "general".to_owned(),
        };
        self.findings.insert((host.to_owned(), format!("qid:{qid}"), package), (severity(level), cve));
    }
}

/// The mapping doc's table: 5 critical, 4 high, 3 medium, 2 and 1 low.
fn severity(level: &str) -> &'static str {
    match level {
        "5" => "critical",
        "4" => "high",
        "3" => "medium",
        "1" | "2" => "low",
        other => panic!("a Qualys level the test does not know: {other}"),
    }
}

fn family(os: &str) -> String {
    let os = os.to_ascii_lowercase();
    if os.contains("windows") {
        "windows".into()
    } else if os.contains("linux") || os.contains("ubuntu") {
        "linux".into()
    } else {
        "other".into()
    }
}

/// The trimmed text of the first child named `name`, CDATA as written.
fn text(node: Node, name: &str) -> Option<String> {
    let child = node.children().find(|child| child.has_tag_name(name))?;
    let text: String = child.children().filter_map(|part| part.text()).collect();
    Some(text.trim().to_owned()).filter(|text| !text.is_empty())
}

fn children<'a, 'input>(node: Node<'a, 'input>, name: &'a str) -> impl Iterator<Item = Node<'a, 'input>> + 'a {
    node.children().filter(move |child| child.has_tag_name(name))
}

/// A CVE list's first id (`CVE_ID_LIST/CVE_ID/ID`).
fn first_cve(node: Node) -> Option<String> {
    children(node, "CVE_ID_LIST").flat_map(|list| children(list, "CVE_ID")).find_map(|cve| text(cve, "ID"))
}

fn asset_data_reading(root: Node) -> Reading {
    let mut reading = Reading::default();
    let mut glossary: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
    for details in root.descendants().filter(|node| node.has_tag_name("VULN_DETAILS")) {
        glossary.insert(
            details.attribute("id").unwrap().to_owned(),
            (text(details, "SEVERITY").unwrap(), first_cve(details)),
        );
    }
    for host in children(root, "HOST_LIST").flat_map(|list| children(list, "HOST")) {
        let names = [text(host, "DNS"), text(host, "NETBIOS"), text(host, "IP")];
        let hostname = reading.host(names, text(host, "IP"), text(host, "OPERATING_SYSTEM"));
        for info in children(host, "VULN_INFO_LIST").flat_map(|list| children(list, "VULN_INFO")) {
            if text(info, "TYPE").as_deref() == Some("Ig") {
                reading.skipped += 1;
                continue;
            }
            let qid = info.children().find(|child| child.has_tag_name("QID")).unwrap();
            let (level, cve) = glossary[qid.attribute("id").unwrap()].clone();
            let qid = text(info, "QID").unwrap();
            reading.found(&hostname, &qid, text(info, "PORT"), text(info, "PROTOCOL"), &level, cve);
        }
    }
    reading
}

fn detection_reading(root: Node) -> Reading {
    let mut reading = Reading::default();
    let hosts = children(root, "RESPONSE").flat_map(|response| children(response, "HOST_LIST"));
    for host in hosts.flat_map(|list| children(list, "HOST")) {
        let names = [text(host, "DNS"), text(host, "NETBIOS"), text(host, "IP")];
        let hostname = reading.host(names, text(host, "IP"), text(host, "OS"));
        for detection in children(host, "DETECTION_LIST").flat_map(|list| children(list, "DETECTION")) {
            if text(detection, "TYPE").as_deref() == Some("Info") {
                reading.skipped += 1;
                continue;
            }
            let (qid, level) = (text(detection, "QID").unwrap(), text(detection, "SEVERITY").unwrap());
            // The detection list names no CVE: the check is the finding.
            reading.found(&hostname, &qid, text(detection, "PORT"), text(detection, "PROTOCOL"), &level, None);
        }
    }
    reading
}

fn scan_reading(root: Node) -> Reading {
    let mut reading = Reading::default();
    for ip in children(root, "IP") {
        let address = ip.attribute("value").map(str::to_owned);
        let name = ip.attribute("name").filter(|name| *name != "No registered hostname").map(str::to_owned);
        let hostname = reading.host([name, None, address.clone()], address, text(ip, "OS"));
        for (section, item_name) in
            [("INFOS", "INFO"), ("SERVICES", "SERVICE"), ("VULNS", "VULN"), ("PRACTICES", "PRACTICE")]
        {
            for category in children(ip, section).flat_map(|list| children(list, "CAT")) {
                for item in children(category, item_name) {
                    if matches!(section, "INFOS" | "SERVICES") {
                        reading.skipped += 1;
                        continue;
                    }
                    let cve = first_cve(item).or_else(|| {
                        item.attribute("cveid").map(|ids| ids.split(',').next().unwrap().trim().to_owned())
                    });
                    reading.found(
                        &hostname,
                        item.attribute("number").unwrap(),
                        category.attribute("port").map(str::to_owned),
                        category.attribute("protocol").map(str::to_owned),
                        item.attribute("severity").unwrap(),
                        cve,
                    );
                }
            }
        }
    }
    reading
}

/// The report read with roxmltree: the DTD its `DOCTYPE` names is not
/// fetched, and text outside the root (scan results open with a comment,
/// before the XML declaration) is left out.
fn reading_of(bytes: &[u8]) -> Reading {
    let text = std::str::from_utf8(bytes).unwrap();
    let text = &text[text.find("<?xml").unwrap_or(0)..];
    let options = ParsingOptions { allow_dtd: true, ..ParsingOptions::default() };
    let document = Document::parse_with_options(text, options).unwrap();
    let root = document.root_element();
    match root.tag_name().name() {
        "ASSET_DATA_REPORT" => asset_data_reading(root),
        "HOST_LIST_VM_DETECTION_OUTPUT" => detection_reading(root),
        "SCAN" => scan_reading(root),
        other => panic!("not a Qualys report: <{other}>"),
    }
}

#[test]
fn every_qualys_report_comes_out_as_a_reading_of_it_says_and_again_quietly() {
    let server = Server::start(&plugins_dir());
    for (index, file) in report_files("qualys").iter().enumerate() {
        let name = file.display();
        let (organization, key) = new_organization(&server, &format!("qualys-{index}"));
        let bytes = std::fs::read(file).unwrap();
        let expected = reading_of(&bytes);
        assert!(!expected.findings.is_empty(), "{name}");
        // The report names its hosts: no endpoint is named by the import.
        let answer = import_ok(&server, &organization, "", bytes.clone());
        assert_eq!(answer["format"], "qualys", "{name}: {answer}");

        let endpoints = all(&server, &key, "endpoints", "");
        let hostnames: BTreeMap<&str, &str> = endpoints
            .iter()
            .map(|endpoint| (endpoint["id"].as_str().unwrap(), endpoint["hostname"].as_str().unwrap()))
            .collect();
        let made: BTreeSet<(String, Option<String>, Option<String>)> = endpoints
            .iter()
            .map(|endpoint| {
                (
                    endpoint["hostname"].as_str().unwrap().to_owned(),
                    endpoint["ip"].as_str().map(str::to_owned),
                    endpoint["operating_system"]["family"].as_str().map(str::to_owned),
                )
            })
            .collect();
        assert_eq!(made, expected.endpoints, "{name}: the endpoints made of its hosts");

        let findings = all(&server, &key, "vulnerability-findings", "");
        assert_eq!(findings.len(), expected.findings.len(), "{name}: one finding per host, QID and port");
        let found: BTreeMap<(String, String, String), (&str, Option<String>)> = findings
            .iter()
            .map(|finding| {
                assert_eq!(
                    (finding["status"].as_str(), finding["source"]["scanner"].as_str()),
                    (Some("open"), Some("qualys"))
                );
                let identity = finding["source"]["scanner_finding_id"].as_str().unwrap();
                let check = identity.split(' ').nth(1).unwrap().to_owned();
                let package = finding["subject"]["product"].as_str().unwrap().to_owned();
                let host = hostnames[finding["endpoint_id"].as_str().unwrap()].to_owned();
                let cve = finding["cve_id"].as_str().map(str::to_owned);
                ((host, check, package), (finding["severity"].as_str().unwrap(), cve))
            })
            .collect();
        assert_eq!(
            found.keys().collect::<Vec<_>>(),
            expected.findings.keys().collect::<Vec<_>>(),
            "{name}: the (host, check, package) triples"
        );
        for (triple, (severity, cve)) in &expected.findings {
            assert_eq!(found[triple], (*severity, cve.clone()), "{name}: {triple:?}: severity and first CVE");
        }
        super::assert_skipped_saying_why(&answer, expected.skipped, &name.to_string());

        super::assert_reimport_quiet(&server, &organization, &key, "", bytes, &findings, &name.to_string());
        assert_eq!(all(&server, &key, "endpoints", "").len(), endpoints.len(), "{name}: no endpoint made twice");
    }
}

/// Each hostile document shaped as a Qualys report (so the Qualys
/// importer is the one that reads it) is refused with what was wrong,
/// writes nothing, and leaves the server answering.
#[cfg(feature = "native-baseline")]
#[test]
fn hostile_qualys_xml_is_refused_saying_why_and_the_server_carries_on() {
    super::assert_hostile_xml_refused(
        &Server::start(&plugins_dir()),
        "qualys",
        &["ASSET_DATA_REPORT", "HOST_LIST_VM_DETECTION_OUTPUT"],
        "",
    );
}
