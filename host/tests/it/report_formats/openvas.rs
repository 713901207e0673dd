//! Greenbone / OpenVAS reports through the real host: every real XML
//! report and CSV export imports with the hosts, NVTs, ports and
//! severities a reading of it here (roxmltree and the csv crate,
//! independent of the importer) gives; importing it again changes nothing;
//! hostile XML is refused and the server carries on; a scan of 1,000 hosts
//! of 50 results converts within the importer's memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::common::{Server, plugins_dir};
use crate::reports::{all, import_ok, new_organization, post_report, report_files};

/// What a finding of the report should say.
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    severity: &'static str,
    cve_id: Option<String>,
    /// A remote check's `Fixed version:` line.
    fixed_version: Option<String>,
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

/// One result as either form gives it.
struct Observed<'a> {
    host: &'a str,
    port: &'a str,
    oid: &'a str,
    threat: &'a str,
    severity: Option<&'a str>,
    cves: Vec<String>,
    description: &'a str,
}

/// What a host is called and what it runs, by IP.
#[derive(Default)]
struct Host {
    name: Option<String>,
    mac: Option<String>,
    os: String,
}

/// The severity the mapping table gives, or `None`: informational.
fn severity(result: &Observed) -> Option<&'static str> {
    if result.oid == "0" || result.threat == "Log" {
        return None;
    }
    match result.severity.map(|score| score.parse::<f64>().unwrap()) {
        Some(score) if score >= 9.0 => Some("critical"),
        Some(score) if score >= 7.0 => Some("high"),
        Some(score) if score >= 4.0 => Some("medium"),
        Some(score) if score > 0.0 => Some("low"),
        Some(_) => None,
        None => Some(match result.threat {
            "High" => "high",
            "Medium" => "medium",
            "Low" => "low",
            other => panic!("threat {other:?}"),
        }),
    }
}

/// `http (80/tcp)` → (`http`, `80/tcp`); `general/tcp` → (`general`,
/// `general/tcp`); `80/tcp` → (`80/tcp`, `80/tcp`); the CSV's empty port
/// (a host-level result) → (`general`, `general/tcp`).
fn package_and_location(port: &str) -> (String, String) {
    if port.is_empty() {
        return ("general".into(), "general/tcp".into());
    }
    if let Some((service, rest)) = port.split_once(" (") {
        return (service.to_owned(), rest.trim_end_matches(')').to_owned());
    }
    let package = if port.starts_with("general/") { "general" } else { port };
    (package.to_owned(), port.to_owned())
}

fn cve_list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|id| id.starts_with("CVE-")).map(str::to_owned).collect()
}

impl Reading {
    fn add(&mut self, result: Observed, hosts: &BTreeMap<String, Host>) {
        assert!(!result.description.contains("Vulnerable package:"), "no local security check in these reports");
        let Some(severity) = severity(&result) else {
            self.informational += 1;
            return;
        };
        let (package, location) = package_and_location(result.port);
        let hostname = hosts.get(result.host).and_then(|host| host.name.clone()).unwrap_or(result.host.to_owned());
        let identity = (hostname, format!("nvt:{}", result.oid), package, location);
        let fixed_version = result
            .description
            .lines()
            .find_map(|line| line.trim().strip_prefix("Fixed version:"))
            .map(|version| version.trim().to_owned());
        let expected = Expected { severity, cve_id: result.cves.first().cloned(), fixed_version };
        let previous = self.findings.insert(identity.clone(), expected.clone());
        assert!(previous.is_none_or(|previous| previous == expected), "{identity:?}");
    }

    fn add_endpoints(&mut self, hosts: &BTreeMap<String, Host>) {
        for (ip, host) in hosts {
            let name = host.name.clone().unwrap_or(ip.clone());
            let address = ip.parse::<std::net::IpAddr>().ok().map(|_| ip.clone());
            self.endpoints.insert((name, address, host.mac.clone(), host.os.clone()));
        }
    }
}

fn child<'a>(node: roxmltree::Node<'a, 'a>, name: &str) -> Option<roxmltree::Node<'a, 'a>> {
    node.children().find(|child| child.has_tag_name(name))
}

fn child_text<'a>(node: roxmltree::Node<'a, 'a>, name: &str) -> &'a str {
    child(node, name).and_then(|child| child.text()).map(str::trim).unwrap_or_default()
}

/// The XML report as the mapping (docs/scanner-report-mapping/openvas.md)
/// says it comes out.
fn read_xml(text: &str) -> Reading {
    let document = roxmltree::Document::parse(text).unwrap();
    assert!(document.root_element().has_tag_name("report"));
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    // The host details, wherever they are (after the results in gvmd's order).
    for host in document
        .descendants()
        .filter(|node| node.has_tag_name("host") && node.parent().is_some_and(|parent| parent.has_tag_name("report")))
    {
        let details: BTreeMap<&str, &str> = host
            .children()
            .filter(|node| node.has_tag_name("detail"))
            .filter(|detail| child(*detail, "name").is_some())
            .map(|detail| (child_text(detail, "name"), child_text(detail, "value")))
            .collect();
        let os = format!("{} {}", details.get("best_os_txt").unwrap_or(&""), details.get("best_os_cpe").unwrap_or(&""));
        let entry = hosts.entry(child_text(host, "ip").to_owned()).or_default();
        entry.name = details.get("hostname").map(|name| name.trim().to_owned()).filter(|name| !name.is_empty());
        entry.mac = details.get("MAC").map(|mac| mac.to_ascii_lowercase());
        entry.os = if os.contains("ubuntu") || os.contains("Linux") { "linux" } else { "other" }.to_owned();
    }
    let results: Vec<roxmltree::Node> = document
        .descendants()
        .filter(|node| {
            node.has_tag_name("result") && node.parent().is_some_and(|parent| parent.has_tag_name("results"))
        })
        .collect();
    for result in &results {
        let host = child(*result, "host").unwrap();
        let ip = host.text().unwrap().trim();
        let entry = hosts.entry(ip.to_owned()).or_default();
        if entry.name.is_none() {
            entry.name = child(host, "hostname").and_then(|name| name.text()).map(str::to_owned);
        }
        if entry.os.is_empty() {
            entry.os = "other".into();
        }
    }
    let mut reading = Reading::default();
    for result in results {
        let nvt = child(result, "nvt").unwrap();
        let mut cves: Vec<String> = child(nvt, "refs")
            .into_iter()
            .flat_map(|refs| refs.children())
            .filter(|reference| reference.attribute("type") == Some("cve"))
            .map(|reference| reference.attribute("id").unwrap().to_owned())
            .collect();
        cves.extend(cve_list(child_text(nvt, "cve")));
        let severity = Some(child_text(result, "severity")).filter(|score| !score.is_empty());
        reading.add(
            Observed {
                host: child(result, "host").unwrap().text().unwrap().trim(),
                port: child_text(result, "port"),
                oid: nvt.attribute("oid").unwrap(),
                threat: child_text(result, "threat"),
                severity,
                cves,
                description: child_text(result, "description"),
            },
            &hosts,
        );
    }
    reading.add_endpoints(&hosts);
    reading
}

/// The CSV export, read by its header row's names.
fn read_csv(bytes: &[u8]) -> Reading {
    let mut reader = csv::Reader::from_reader(bytes);
    let header = reader.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|column| column == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(|row| row.unwrap()).collect();
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    for row in &rows {
        let host = hosts.entry(row[column("IP")].to_owned()).or_default();
        host.name = Some(row[column("Hostname")].to_owned()).filter(|name| !name.is_empty());
        host.os = "other".into();
    }
    let mut reading = Reading::default();
    for row in &rows {
        let port = match (&row[column("Port")], &row[column("Port Protocol")]) {
            ("", _) => String::new(),
            (port, protocol) => format!("{port}/{protocol}"),
        };
        reading.add(
            Observed {
                host: &row[column("IP")],
                port: &port,
                oid: &row[column("NVT OID")],
                threat: &row[column("Severity")],
                severity: Some(&row[column("CVSS")]).filter(|score| !score.is_empty()),
                cves: cve_list(&row[column("CVEs")]),
                description: &row[column("Specific Result")],
            },
            &hosts,
        );
    }
    reading.add_endpoints(&hosts);
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
            let identity = finding["source"]["scanner_finding_id"].as_str().unwrap();
            let words: Vec<&str> = identity.split(' ').collect();
            let [_, check, package, location] = words[..] else { panic!("{identity}") };
            let host = hostnames[finding["endpoint_id"].as_str().unwrap()].to_owned();
            assert_eq!(finding["subject"]["product"], package, "{identity}");
            ((host, check.to_owned(), package.to_owned(), location.to_owned()), finding.clone())
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
fn every_openvas_report_comes_out_as_a_reading_of_it_says_and_again_quietly() {
    let server = Server::start(&plugins_dir());
    for (index, file) in report_files("openvas").iter().enumerate() {
        let name = file.display();
        let bytes = std::fs::read(file).unwrap();
        let expected = if file.extension().is_some_and(|extension| extension == "csv") {
            read_csv(&bytes)
        } else {
            read_xml(std::str::from_utf8(&bytes).unwrap())
        };
        assert!(!expected.findings.is_empty(), "{name}");
        let (organization, key) = new_organization(&server, &format!("openvas-{index}"));
        let answer = import_ok(&server, &organization, "", bytes.clone());
        assert_eq!(answer["format"], "openvas", "{name}: {answer}");

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
            assert_eq!(finding["source"]["scanner"], "greenbone", "{name}: {identity:?}");
            assert_eq!(finding["severity"], wanted.severity, "{name}: {identity:?}");
            assert_eq!(finding["cve_id"].as_str(), wanted.cve_id.as_deref(), "{name}: {identity:?}");
            assert_eq!(finding["status"], "open", "{name}: {identity:?}");
            assert_eq!(finding["fixed_version"].as_str(), wanted.fixed_version.as_deref(), "{name}: {identity:?}");
            assert!(finding["subject"]["version"].is_null(), "{name}: {identity:?}");
            assert!(finding["source"]["scanner_finding_id"].as_str().unwrap().starts_with("other "));
        }
        super::assert_skipped_saying_why(&answer, expected.informational, &name.to_string());

        super::assert_reimport_quiet(&server, &organization, &key, "", bytes, &listed, &name.to_string());
    }
}

#[test]
fn hostile_xml_is_refused_saying_why_and_the_server_carries_on() {
    super::assert_hostile_xml_refused(&Server::start(&plugins_dir()), "openvas", &["report"], "format=openvas");
}

/// A scan of 1,000 hosts with 50 results each (the real XML reports'
/// results in turn, Log ones among them; the host details after all the
/// results, as gvmd writes them) converts within the importer's 512 MiB:
/// the report is read result by result. It makes more findings than an
/// import may write, which the answer counts.
#[test]
fn a_scan_of_1000_hosts_of_50_results_converts_within_the_importers_memory() {
    let texts: Vec<String> = report_files("openvas")
        .iter()
        .filter(|file| file.extension().is_some_and(|extension| extension == "xml"))
        .map(|file| std::fs::read_to_string(file).unwrap())
        .collect();
    // Each result with its host element cut out, and whether it is a finding.
    let mut results: Vec<(String, usize)> = Vec::new();
    for text in &texts {
        let document = roxmltree::Document::parse(text).unwrap();
        for result in document
            .descendants()
            .filter(|node| node.has_tag_name("result") && node.parent().is_some_and(|p| p.has_tag_name("results")))
        {
            let host = child(result, "host").unwrap().range();
            let range = result.range();
            let cut = format!("{}<host>HOST</host>{}", &text[range.start..host.start], &text[host.end..range.end]);
            let nvt = child(result, "nvt").unwrap();
            let reading = Observed {
                host: "",
                port: "",
                oid: nvt.attribute("oid").unwrap(),
                threat: child_text(result, "threat"),
                severity: Some(child_text(result, "severity")).filter(|score| !score.is_empty()),
                cves: Vec::new(),
                description: "",
            };
            results.push((cut, usize::from(severity(&reading).is_some())));
        }
    }
    let (hosts, per_host) = (1_000, 50);
    let address = |host: usize| format!("10.2.{}.{}", host / 250, host % 250 + 1);
    let mut report = String::from(
        "<report id=\"large\" format_id=\"a994b278-1f62-11e1-96ac-406186ea4fc5\" extension=\"xml\" content_type=\"text/xml\"><report id=\"large\"><scan_start>2024-05-01T10:00:00Z</scan_start><results>\n",
    );
    let mut expected = 0;
    let mut next = results.iter().cycle();
    for host in 0..hosts {
        for (text, entries) in next.by_ref().take(per_host) {
            report.push_str(&text.replace("<host>HOST</host>", &format!("<host>{}</host>", address(host))));
            report.push('\n');
            expected += entries;
        }
    }
    report.push_str("</results>\n");
    for host in 0..hosts {
        report.push_str(&format!(
            "<host><ip>{}</ip><detail><name>hostname</name><value>scanned-{host}</value></detail></host>\n",
            address(host)
        ));
    }
    report.push_str("</report></report>\n");
    assert!(report.len() > 40 << 20, "{} bytes", report.len());

    let server = Server::start_with(&plugins_dir(), &["--importer-memory-mib", "512", "--import-max-mib", "256"]);
    let (organization, key) = new_organization(&server, "openvas-large");
    let (status, answer) = post_report(&server, &organization, "", report.into_bytes());
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["findings"].as_u64(), Some(expected as u64), "{answer}");
    assert!(all(&server, &key, "endpoints", "").is_empty(), "nothing was written");
}
