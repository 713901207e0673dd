//! Nessus reports through the real host: every real `.nessus` file imports
//! with the hosts, plugins, packages and severities a reading of it here
//! (roxmltree, independent of the importer) gives; importing it again
//! changes nothing; hostile XML is refused and the server carries on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::common::{Server, plugins_dir};
use crate::reports::{all, import_ok, new_organization, post_report, report_files};

/// What a finding of the report should say: severity, `cve_id`, and for
/// an OS package its installed and fixed versions.
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    severity: &'static str,
    cve_id: Option<String>,
    versions: Option<(String, String)>,
}

/// (host name, check, package, location).
type Identity = (String, String, String, String);

/// An endpoint as compared: host name, IP, MAC address, OS family.
type Endpoint = (String, Option<String>, Option<String>, String);

#[derive(Default)]
struct Reading {
    findings: BTreeMap<Identity, Expected>,
    endpoints: BTreeSet<Endpoint>,
    informational: usize,
}

fn child_text<'a>(node: roxmltree::Node<'a, 'a>, name: &str) -> Option<&'a str> {
    node.children().find(|child| child.has_tag_name(name)).and_then(|child| child.text()).map(str::trim)
}

/// An RPM `name-version-release`'s name and `version-release`.
fn rpm(text: &str) -> (String, String) {
    let parts: Vec<&str> = text.trim().rsplitn(3, '-').collect();
    let [release, version, name] = parts[..] else { panic!("not an RPM package: {text}") };
    (name.to_owned(), format!("{version}-{release}"))
}

/// The report as the mapping (docs/scanner-report-mapping/nessus.md) says
/// it comes out: each host named by its FQDN (a `host-fqdn` with a dot),
/// else its short name, else its NetBIOS name, else its IP; each item of
/// severity 1–4 one finding per package its `Remote package installed`
/// lines name, else one on its service and port; severity 0 skipped.
fn read(bytes: &[u8]) -> Reading {
    let text = std::str::from_utf8(bytes).unwrap();
    let document = roxmltree::Document::parse(text).unwrap();
    assert!(document.root_element().has_tag_name("NessusClientData_v2"));
    let mut reading = Reading::default();
    for host in document.descendants().filter(|node| node.has_tag_name("ReportHost")) {
        let tags: BTreeMap<&str, &str> = host
            .children()
            .find(|node| node.has_tag_name("HostProperties"))
            .unwrap()
            .children()
            .filter(|node| node.has_tag_name("tag"))
            .map(|tag| (tag.attribute("name").unwrap(), tag.text().unwrap_or_default().trim()))
            .collect();
        let key = host.attribute("name").unwrap();
        let is_ip = |name: &str| name.parse::<std::net::IpAddr>().is_ok();
        let fqdn = tags.get("host-fqdn").copied().filter(|name| name.contains('.'));
        let short = tags.get("host-fqdn").copied().or(Some(key).filter(|key| !is_ip(key)));
        let hostname = fqdn.or(short).or(tags.get("netbios-name").copied()).or(tags.get("host-ip").copied()).unwrap();
        let os = tags.get("operating-system").copied().unwrap_or_default();
        let family = if os.contains("Windows") {
            "windows"
        } else if os.contains("Linux") {
            "linux"
        } else {
            "other"
        };
        let mac = tags.get("mac-address").map(|mac| mac.lines().next().unwrap().trim().to_ascii_lowercase());
        reading.endpoints.insert((
            hostname.to_owned(),
            tags.get("host-ip").map(|ip| (*ip).to_owned()),
            mac,
            family.to_owned(),
        ));
        for item in host.children().filter(|node| node.has_tag_name("ReportItem")) {
            let severity = match item.attribute("severity").unwrap() {
                "0" => {
                    reading.informational += 1;
                    continue;
                }
                "1" => "low",
                "2" => "medium",
                "3" => "high",
                "4" => "critical",
                other => panic!("severity {other}"),
            };
            let check = format!("nessus:{}", item.attribute("pluginID").unwrap());
            let cve_id = child_text(item, "cve").map(str::to_owned);
            let output = child_text(item, "plugin_output").unwrap_or_default();
            let mut lines = output.lines().map(str::trim);
            let mut named = Vec::new();
            while let Some(line) = lines.next() {
                if let Some(installed) = line.strip_prefix("Remote package installed : ") {
                    let should_be = lines.next().unwrap().strip_prefix("Should be : ").unwrap();
                    let (name, version) = rpm(installed);
                    let (fixed_name, fixed) = rpm(should_be);
                    assert_eq!(name, fixed_name);
                    named.push((name, version, fixed));
                }
            }
            let mut add = |package: String, location: String, versions: Option<(String, String)>| {
                let identity = (hostname.to_owned(), check.clone(), package, location);
                let expected = Expected { severity, cve_id: cve_id.clone(), versions };
                // A plugin listed twice on one port (58987 on 80/tcp) is one finding.
                let previous = reading.findings.insert(identity.clone(), expected.clone());
                assert!(previous.is_none_or(|previous| previous == expected), "{identity:?}");
            };
            if named.is_empty() {
                let service = item.attribute("svc_name").unwrap().to_owned();
                let location = format!("{}/{}", item.attribute("port").unwrap(), item.attribute("protocol").unwrap());
                add(service, location, None);
            } else {
                for (name, version, fixed) in named {
                    add(name, String::new(), Some((version, fixed)));
                }
            }
        }
    }
    reading
}

/// The organization's findings (as listed) by identity, and its endpoints.
fn found(server: &Server, key: &str, listed: &[Value]) -> (BTreeMap<Identity, Value>, BTreeSet<Endpoint>) {
    let endpoints = all(server, key, "endpoints", "");
    let hostnames: BTreeMap<&str, &str> = endpoints
        .iter()
        .map(|endpoint| (endpoint["id"].as_str().unwrap(), endpoint["hostname"].as_str().unwrap()))
        .collect();
    let findings = listed
        .iter()
        .map(|finding| {
            let identity = finding["source"]["scanner_finding_id"].as_str().unwrap().to_owned();
            let words: Vec<&str> = identity.split(' ').collect();
            let host = hostnames[finding["endpoint_id"].as_str().unwrap()].to_owned();
            let location = words.get(3).copied().unwrap_or_default().to_owned();
            let product = finding["subject"]["product"].as_str().unwrap().to_owned();
            ((host, words[1].to_owned(), product, location), finding.clone())
        })
        .collect();
    let endpoints = endpoints
        .iter()
        .map(|endpoint| {
            (
                endpoint["hostname"].as_str().unwrap().to_owned(),
                endpoint["ip"].as_str().map(str::to_owned),
                endpoint["mac_address"].as_str().map(str::to_owned),
                endpoint["operating_system"]["family"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (findings, endpoints)
}

#[test]
fn every_nessus_report_comes_out_as_a_reading_of_it_says_and_again_quietly() {
    let server = Server::start(&plugins_dir());
    for (index, file) in report_files("nessus").iter().enumerate() {
        let name = file.display();
        let bytes = std::fs::read(file).unwrap();
        let expected = read(&bytes);
        let (organization, key) = new_organization(&server, &format!("nessus-{index}"));
        let answer = import_ok(&server, &organization, "", bytes.clone());
        assert_eq!(answer["format"], "nessus", "{name}: {answer}");

        let listed = all(&server, &key, "vulnerability-findings", "");
        let (findings, endpoints) = found(&server, &key, &listed);
        assert_eq!(findings.len(), listed.len(), "{name}: one finding per identity");
        assert_eq!(endpoints, expected.endpoints, "{name}: the endpoints");
        assert_eq!(
            findings.keys().collect::<Vec<_>>(),
            expected.findings.keys().collect::<Vec<_>>(),
            "{name}: the (host, check, package, location) of the findings"
        );
        for (identity, wanted) in &expected.findings {
            let finding = &findings[identity];
            assert_eq!(finding["source"]["scanner"], "tenable", "{name}: {identity:?}");
            assert_eq!(finding["severity"], wanted.severity, "{name}: {identity:?}");
            assert_eq!(finding["cve_id"].as_str(), wanted.cve_id.as_deref(), "{name}: {identity:?}");
            assert_eq!(finding["status"], "open", "{name}: {identity:?}");
            match &wanted.versions {
                Some((version, fixed)) => {
                    assert!(finding["source"]["scanner_finding_id"].as_str().unwrap().starts_with("os "));
                    assert_eq!(finding["subject"]["version"].as_str(), Some(version.as_str()), "{name}: {identity:?}");
                    assert_eq!(finding["fixed_version"].as_str(), Some(fixed.as_str()), "{name}: {identity:?}");
                }
                None => {
                    assert!(finding["source"]["scanner_finding_id"].as_str().unwrap().starts_with("other "));
                    assert!(finding["subject"]["version"].is_null(), "{name}: {identity:?}");
                }
            }
        }
        super::assert_skipped_saying_why(&answer, expected.informational, &name.to_string());

        super::assert_reimport_quiet(&server, &organization, &key, "", bytes, &listed, &name.to_string());
    }
}

#[test]
fn hostile_xml_is_refused_saying_why_and_the_server_carries_on() {
    super::assert_hostile_xml_refused(&Server::start(&plugins_dir()), "nessus", &["NessusClientData_v2"], "");
}

/// A scan of 1,000 hosts with 50 items each (the real reports' items in
/// turn, informational ones among them, about 100 MB) converts within the
/// importer's 512 MiB: the report is read host by host. It makes more
/// findings than an import may write, which the answer counts.
#[test]
fn a_scan_of_1000_hosts_of_50_items_converts_within_the_importers_memory() {
    let texts: Vec<String> = report_files("nessus").iter().map(|file| std::fs::read_to_string(file).unwrap()).collect();
    let mut items: Vec<(&str, usize)> = Vec::new();
    for text in &texts {
        let document = roxmltree::Document::parse(text).unwrap();
        for item in document.descendants().filter(|node| node.has_tag_name("ReportItem")) {
            let entries = match item.attribute("severity") {
                Some("0") => 0,
                _ => child_text(item, "plugin_output")
                    .map_or(0, |output| output.matches("Remote package installed : ").count())
                    .max(1),
            };
            items.push((&text[item.range()], entries));
        }
    }
    let (hosts, per_host) = (1_000, 50);
    let mut report = String::from(
        "<?xml version=\"1.0\" ?>\n<NessusClientData_v2>\n<Report name=\"large\" xmlns:cm=\"http://www.nessus.org/cm\">\n",
    );
    let mut expected = 0;
    let mut next = items.iter().cycle();
    for host in 0..hosts {
        report.push_str(&format!(
            "<ReportHost name=\"10.1.{}.{}\"><HostProperties><tag name=\"host-ip\">10.1.{}.{}</tag><tag name=\"HOST_START\">Thu Mar 20 00:30:57 2014</tag></HostProperties>\n",
            host / 250,
            host % 250 + 1,
            host / 250,
            host % 250 + 1
        ));
        for (text, entries) in next.by_ref().take(per_host) {
            report.push_str(text);
            report.push('\n');
            expected += entries;
        }
        report.push_str("</ReportHost>\n");
    }
    report.push_str("</Report>\n</NessusClientData_v2>\n");
    assert!(report.len() > 80 << 20, "{} bytes", report.len());

    let server = Server::start_with(&plugins_dir(), &["--importer-memory-mib", "512", "--import-max-mib", "256"]);
    let (organization, key) = new_organization(&server, "nessus-large");
    let (status, answer) = post_report(&server, &organization, "", report.into_bytes());
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["findings"].as_u64(), Some(expected as u64), "{answer}");
    assert!(all(&server, &key, "endpoints", "").is_empty(), "nothing was written");
}
