//! The importer against the real reports and made-up corners.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use esr_plugin_sdk::scanner_reports;

use super::*;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");
const VERSION_1: &str = "sample-scan-files_nexpose-1.0_8-nodes.xml";
const VERSION_2: &str = "defectdojo_nexpose-2.0_4-ubuntu-nodes.xml";
const DUPLICATE_NODE: &str = "dradis_nexpose-2.0_duplicate-node.xml";

/// One test as the report lists it: (address, id, location, status).
type Listed = (String, String, Option<String>, String);

/// Every test of a report, read as one tree (not by the importer's walk),
/// with the location the mapping gives it: `<port>/<protocol>` of its
/// endpoint, then its key.
fn listed_tests(document: &Element) -> Vec<Listed> {
    let mut listed = Vec::new();
    let nodes = document.child("nodes").expect("nodes");
    for node in nodes.children_named("node") {
        let address = node.attribute("address").expect("an address").to_owned();
        let mut add = |test: &Element, port: Option<String>| {
            let key = test.attribute("key").map(str::trim).filter(|key| !key.is_empty());
            let location = match (port, key) {
                (Some(port), Some(key)) => Some(format!("{port} {key}")),
                (port, key) => port.or(key.map(str::to_owned)),
            };
            let id = test.attribute("id").expect("an id").to_owned();
            listed.push((address.clone(), id, location, test.attribute("status").expect("a status").to_owned()));
        };
        for test in node.find(&["tests"]).into_iter().flat_map(|tests| tests.children_named("test")) {
            add(test, None);
        }
        for endpoint in node.find(&["endpoints"]).into_iter().flat_map(|e| e.children_named("endpoint")) {
            let port = format!("{}/{}", endpoint.attribute("port").unwrap(), endpoint.attribute("protocol").unwrap());
            for service in endpoint.find(&["services"]).into_iter().flat_map(|s| s.children_named("service")) {
                for test in service.find(&["tests"]).into_iter().flat_map(|tests| tests.children_named("test")) {
                    add(test, Some(port.clone()));
                }
            }
        }
    }
    listed
}

fn is_vulnerable(status: &str) -> bool {
    status.starts_with("vulnerable-")
}

/// What the README states of each real report.
struct Stated {
    file: &'static str,
    /// Tests by status.
    statuses: &'static [(&'static str, usize)],
    /// Distinct (node address, test, port, key) of the vulnerable tests.
    instances: usize,
    hosts: usize,
    definitions: usize,
    definitions_with_cves: usize,
    cve_references: usize,
}

const STATED: [Stated; 3] = [
    Stated {
        file: VERSION_1,
        statuses: &[
            ("vulnerable-exploited", 157),
            ("vulnerable-version", 4),
            ("not-vulnerable", 400),
            ("skipped-version", 52),
            ("error", 6),
            ("unknown", 1),
        ],
        // 161 vulnerable tests: http-basic-auth-cleartext is listed twice on 192.168.1.33 80/tcp key "/".
        instances: 160,
        hosts: 8,
        definitions: 135,
        definitions_with_cves: 64,
        cve_references: 74,
    },
    Stated {
        file: VERSION_2,
        statuses: &[("vulnerable-exploited", 10), ("vulnerable-version", 16)],
        // 26 vulnerable tests: unix-user-home-dir-mode four times per node with an empty key.
        instances: 14,
        hosts: 4,
        definitions: 4,
        definitions_with_cves: 0,
        cve_references: 0,
    },
    Stated {
        file: DUPLICATE_NODE,
        statuses: &[("vulnerable-exploited", 2)],
        // Two nodes of one address, the same test on the same port.
        instances: 1,
        hosts: 1,
        definitions: 1,
        definitions_with_cves: 1,
        cve_references: 1,
    },
];

#[test]
fn every_real_report_converts_with_the_counts_the_readme_states() {
    let reports = scanner_reports::real_reports(MANIFEST, "nexpose");
    assert_eq!(reports.len(), STATED.len(), "a report the test does not know");
    for stated in &STATED {
        let name = stated.file;
        let (_, bytes) = reports.iter().find(|(file, _)| file == name).unwrap_or_else(|| panic!("{name} is missing"));
        let document = xml::parse_document(bytes).expect("the real report is XML");
        let listed = listed_tests(&document);
        let converted = Nexpose::convert(bytes).unwrap_or_else(|error| panic!("{name}: {error}"));

        // The statuses the README counts: vulnerable ones are entries, the others skipped saying so.
        let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, _, _, status) in &listed {
            *statuses.entry(status.as_str()).or_default() += 1;
        }
        assert_eq!(statuses, stated.statuses.iter().copied().collect(), "{name}");
        let not_vulnerable = listed.iter().filter(|(.., status)| !is_vulnerable(status)).count();
        assert_eq!(converted.skipped.len(), not_vulnerable, "{name}");
        for (status, count) in stated.statuses.iter().filter(|(status, _)| !is_vulnerable(status)) {
            let said =
                converted.skipped.iter().filter(|skipped| skipped.reason.starts_with(&format!("status {status}:")));
            assert_eq!(said.count(), *count, "{name}: skipped as {status}");
        }

        // One entry per instance, as listed.
        let instances: BTreeSet<(String, String, Option<String>)> = listed
            .iter()
            .filter(|(.., status)| is_vulnerable(status))
            .map(|(address, id, location, _)| (address.clone(), format!("nexpose:{id}"), location.clone()))
            .collect();
        assert_eq!(instances.len(), stated.instances, "{name}");
        let converted_instances: BTreeSet<(String, String, Option<String>)> = converted
            .entries
            .iter()
            .map(|entry| (entry.host.clone().unwrap(), entry.check.clone().unwrap(), entry.location.clone()))
            .collect();
        assert_eq!(converted.entries.len(), stated.instances, "{name}: no repeats");
        assert_eq!(converted_instances, instances, "{name}");
        assert_eq!(converted.hosts.len(), stated.hosts, "{name}");

        // The definitions and their CVEs, as the importer reads them.
        let definitions: Vec<&Element> =
            document.child("VulnerabilityDefinitions").expect("definitions").children_named("vulnerability").collect();
        let read: Vec<Definition> = definitions.iter().map(|definition| Definition::read(definition)).collect();
        assert_eq!(read.len(), stated.definitions, "{name}");
        assert_eq!(read.iter().filter(|definition| !definition.cves.is_empty()).count(), stated.definitions_with_cves);
        assert_eq!(read.iter().map(|definition| definition.cves.len()).sum::<usize>(), stated.cve_references);

        // Each entry carries its definition: first CVE, rating, severity by the score's band.
        for entry in &converted.entries {
            let id = entry.check.as_deref().unwrap().strip_prefix("nexpose:").unwrap();
            let definition = definitions.iter().find(|definition| definition.attribute("id") == Some(id)).unwrap();
            let cves: Vec<&str> = definition
                .find(&["references"])
                .into_iter()
                .flat_map(|references| references.children_named("reference"))
                .filter(|reference| reference.attribute("source") == Some("CVE"))
                .filter_map(Element::text)
                .collect();
            let at = format!("{name} {id} on {:?}", entry.host);
            assert_eq!(
                entry.vulnerability_id,
                cves.first().copied().unwrap_or(entry.check.as_deref().unwrap()),
                "{at}"
            );
            assert_eq!(entry.aliases.last(), cves.first().and(entry.check.as_ref()), "{at}: the check is an alias");
            assert_eq!(entry.title.as_deref(), definition.attribute("title"), "{at}");
            assert_eq!(entry.severity_given.as_deref(), definition.attribute("severity"), "{at}");
            let score: f64 = definition.attribute("cvssScore").unwrap().parse().unwrap();
            assert_eq!(entry.cvss[0].base_score, Some(score), "{at}");
            assert_eq!(entry.cvss[0].version, "2.0", "{at}");
            let vector = definition.attribute("cvssVector").unwrap();
            assert_eq!(Some(format!("({})", entry.cvss[0].vector.as_deref().unwrap())).as_deref(), Some(vector));
            assert_eq!(entry.severity, Severity::from_score(score), "{at}");
            assert_eq!((entry.class, entry.state.as_ref()), (PackageClass::Other, None), "{at}");
            assert!(entry.description.as_deref().is_some_and(|text| text.contains("Proof: ")), "{at}");
        }
        assert_eq!(converted.scanner, "rapid7");
        assert_eq!(converted.scanned_classes, [PackageClass::Os, PackageClass::Other]);
        assert!(!converted.partial);
    }
}

#[test]
fn what_the_version_1_report_is_known_to_hold() {
    let converted = scanner_reports::convert_real_report::<Nexpose>(MANIFEST, "nexpose", VERSION_1);
    assert_eq!(converted.scanned_at.as_deref(), Some("2013-11-27T05:02:42.739Z"), "startTime read as UTC");
    let host = |address: &str| converted.hosts.iter().find(|host| host.key == address).expect(address);
    let named = host("192.168.1.37");
    assert_eq!(
        (named.hostname.as_str(), named.ip.as_deref(), named.mac_address.as_deref(), named.fqdn.as_deref()),
        ("MACBOOKPRO-C9A7", Some("192.168.1.37"), Some("E4:CE:8F:49:0D:7C"), None)
    );
    assert_eq!(named.operating_system, None, "no fingerprint");
    let router = host("192.168.1.1");
    assert_eq!(router.hostname, "192.168.1.1", "no name: the address");
    let os = router.operating_system.as_ref().unwrap();
    assert_eq!(
        (os.name.as_str(), os.version.as_deref(), os.family.as_deref()),
        ("Linux", Some("2.6.9"), Some("linux"))
    );
    let mac = host("192.168.1.34").operating_system.as_ref().unwrap();
    assert_eq!((mac.name.as_str(), mac.family.as_deref()), ("Apple Mac OS X", Some("macos")));
    // Ten fingerprints: the most certain (0.68, Mac OS X 10.5.6) wins.
    let guessed = host("192.168.1.35").operating_system.as_ref().unwrap();
    assert_eq!((guessed.name.as_str(), guessed.version.as_deref()), ("Apple Mac OS X", Some("10.5.6")));
    let windows = host("192.168.1.40").operating_system.as_ref().unwrap();
    assert_eq!((windows.name.as_str(), windows.family.as_deref()), ("Microsoft Windows", Some("windows")));
    let camera = host("192.168.1.33").operating_system.as_ref().unwrap();
    assert_eq!(camera.architecture.as_deref(), Some("armv5tejl"));

    let entry = |address: &str, check: &str, location: Option<&str>| {
        converted
            .entries
            .iter()
            .find(|entry| {
                entry.host.as_deref() == Some(address)
                    && entry.check.as_deref() == Some(check)
                    && entry.location.as_deref() == location
            })
            .unwrap_or_else(|| panic!("{address} {check} {location:?}"))
    };
    // On the node: package `general`, no location; CVE first, the check after.
    let sequence = entry("192.168.1.1", "nexpose:tcp-seq-num-approximation", None);
    assert_eq!(sequence.package.name, "general");
    assert_eq!(
        (sequence.vulnerability_id.as_str(), sequence.aliases.as_slice()),
        ("CVE-2004-0230", ["nexpose:tcp-seq-num-approximation".to_owned()].as_slice())
    );
    assert_eq!((sequence.severity, sequence.severity_given.as_deref()), (Severity::Medium, Some("5")));
    assert_eq!(sequence.cvss[0].vector.as_deref(), Some("AV:N/AC:L/Au:N/C:N/I:N/A:P"));
    // A CVSS score of 0.0 is info, whatever Nexpose's own 1.
    let timestamp = entry("192.168.1.1", "nexpose:generic-tcp-timestamp", None);
    assert_eq!((timestamp.severity, timestamp.severity_given.as_deref()), (Severity::Info, Some("1")));
    assert_eq!(timestamp.vulnerability_id, "nexpose:generic-tcp-timestamp");
    // On a service: its name, the port, then the key.
    let cookie = entry("192.168.1.1", "nexpose:http-cookie-http-only-flag", Some("80/tcp /cgi-bin/webproc"));
    assert_eq!(cookie.package.name, "HTTP");
    let telnet = entry("192.168.1.18", "nexpose:telnet-open-port", Some("23/tcp"));
    assert_eq!((telnet.package.name.as_str(), telnet.severity), ("Telnet", Severity::Low));
    let dd_wrt = entry("192.168.1.18", "nexpose:http-dd-wrt-remote-command-execution", Some("80/tcp"));
    assert_eq!((dd_wrt.vulnerability_id.as_str(), dd_wrt.severity), ("CVE-2009-2765", Severity::High));
    let root = entry("192.168.1.1", "nexpose:ssh-default-account-root-password-root", Some("22/tcp"));
    assert_eq!(root.severity, Severity::Critical);
    let description = root.description.as_deref().unwrap();
    assert!(description.contains("Proof: ") && description.contains("Solution: "), "{description}");
    let cleartext = converted
        .entries
        .iter()
        .filter(|entry| entry.check.as_deref() == Some("nexpose:http-basic-auth-cleartext"))
        .filter(|entry| entry.host.as_deref() == Some("192.168.1.18"))
        .count();
    assert_eq!(cleartext, 134, "one per key (URL path)");
    assert!(
        converted.skipped.iter().any(|skipped| skipped.entry == "node 192.168.1.1 test ftp-generic-0001 on 21/tcp")
    );
}

#[test]
fn what_the_version_2_reports_are_known_to_hold() {
    let converted = scanner_reports::convert_real_report::<Nexpose>(MANIFEST, "nexpose", VERSION_2);
    assert_eq!(converted.scanned_at.as_deref(), Some("2021-02-11T16:23:40.221Z"));
    let names: Vec<(&str, &str)> =
        converted.hosts.iter().map(|host| (host.key.as_str(), host.hostname.as_str())).collect();
    assert_eq!(
        names,
        [("192.168.0.12", "host0"), ("192.168.0.10", "host1"), ("192.168.0.11", "host3"), ("192.168.0.42", "host4")]
    );
    let os = converted.hosts[0].operating_system.as_ref().unwrap();
    assert_eq!(
        (os.name.as_str(), os.version.as_deref(), os.family.as_deref(), os.vendor.as_deref()),
        ("Ubuntu Linux", Some("20.04"), Some("linux"), Some("Ubuntu"))
    );
    // Four repeats with an empty key: one entry per node, keeping each one's proof.
    let home_dirs: Vec<&ReportEntry> = converted
        .entries
        .iter()
        .filter(|entry| entry.check.as_deref() == Some("nexpose:unix-user-home-dir-mode"))
        .collect();
    assert_eq!(home_dirs.len(), 4);
    for entry in home_dirs {
        assert_eq!((entry.location.as_deref(), entry.package.name.as_str()), (None, "general"));
        let description = entry.description.as_deref().unwrap();
        for user in ["anycastcontrol", "netdata", "lxd", "ubuntu"] {
            assert!(description.contains(&format!("home directory of user {user} ")), "{user}: {description}");
        }
    }

    let converted = scanner_reports::convert_real_report::<Nexpose>(MANIFEST, "nexpose", DUPLICATE_NODE);
    // Two nodes of 1.1.1.1 named `localhost:5000` and `localhost:6000` (not host names): one host, by its address.
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!((host.hostname.as_str(), host.ip.as_deref(), host.fqdn.as_deref()), ("1.1.1.1", Some("1.1.1.1"), None));
    let os = host.operating_system.as_ref().unwrap();
    assert_eq!((os.name.as_str(), os.family.as_deref()), ("Cisco IOS", Some("other")));
    let [entry] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    assert_eq!(
        (entry.vulnerability_id.as_str(), entry.package.name.as_str(), entry.location.as_deref()),
        ("CVE-2012-0053", "NTP", Some("123/udp"))
    );
    assert_eq!((entry.severity, entry.severity_given.as_deref()), (Severity::Medium, Some("4")));
    assert_eq!(converted.scanned_at.as_deref(), Some("2014-11-10T09:45:38.362Z"));
}

/// A report with what the real ones lack: exceptions, `vulnerable-potential`,
/// a definition without CVSS, none at all, names of every kind.
const MADE_UP: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<NexposeReport version="2.0">
  <scans>
    <scan id="1" startTime="20240102T030405000" status="finished"/>
    <scan id="2" startTime="20240301T101010" status="finished"/>
    <scan id="3" startTime="yesterday" status="finished"/>
  </scans>
  <nodes>
    <node address="10.0.0.5" hardware-address="00-11-22-33-44-55">
      <names><name>WEB01</name><name>web01.corp.example.</name><name>DB-ALIAS</name><name>10.0.0.5</name></names>
      <fingerprints>
        <os certainty="0.50" vendor="Microsoft" family="Windows" product="Windows Server 2016"/>
        <os certainty="0.90" vendor="Microsoft" family="Windows" product="Microsoft Windows Server 2019" version="1809"/>
      </fingerprints>
      <tests>
        <test id="Local-Check" key="/etc/passwd" status="vulnerable-potential"><Paragraph>found</Paragraph></test>
        <test id="accepted" status="exception-vulnerable-version"/>
        <test id="no-definition" status="vulnerable-exploited"/>
        <test id="quiet" status="skipped-dos"/>
        <test status="vulnerable-exploited"/>
      </tests>
      <endpoints>
        <endpoint port="8080" protocol="tcp">
          <services><service name="&lt;unknown&gt;"><tests><test id="old-server" key="" status="vulnerable-version"/></tests></service></services>
        </endpoint>
      </endpoints>
    </node>
    <node status="alive"/>
  </nodes>
  <VulnerabilityDefinitions>
    <vulnerability id="local-check" title="Local   check" severity="8">
      <references><reference source="CVE">CVE-2024-0002</reference><reference source="BID">1</reference>
        <reference source="CVE">cve-2024-0001</reference><reference source="CVE">CVE-2024-0002</reference></references>
      <description><ContainerBlockElement><Paragraph>First.</Paragraph><UnorderedList><ListItem>one</ListItem>
        <ListItem><Paragraph>two</Paragraph></ListItem></UnorderedList><Paragraph>See <URLLink LinkURL="https://example.com/a" LinkTitle="the advisory"/></Paragraph></ContainerBlockElement></description>
    </vulnerability>
    <vulnerability id="accepted" severity="3"/>
    <vulnerability id="old-server" severity="10" cvssVector="(AV:N/AC:L/Au:N/C:C/I:C/A:C)"/>
    <vulnerability id="unused" severity="10"/>
  </VulnerabilityDefinitions>
</NexposeReport>"#;

#[test]
fn exceptions_potential_findings_and_missing_parts() {
    let converted = Nexpose::convert(MADE_UP.as_bytes()).expect("converts");
    assert_eq!(converted.scanned_at.as_deref(), Some("2024-03-01T10:10:10Z"), "the latest readable start");
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!(
        (host.hostname.as_str(), host.fqdn.as_deref(), host.netbios_name.as_deref()),
        ("web01.corp.example", Some("web01.corp.example"), Some("DB-ALIAS")),
        "WEB01 is the FQDN's own label"
    );
    assert_eq!(host.mac_address.as_deref(), Some("00:11:22:33:44:55"));
    let os = host.operating_system.as_ref().unwrap();
    assert_eq!(
        (os.name.as_str(), os.version.as_deref(), os.family.as_deref()),
        ("Microsoft Windows Server 2019", Some("1809"), Some("windows"))
    );

    let [local, accepted, undefined, old] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    // A node-level test with a key: the key is the location.
    assert_eq!((local.check.as_deref(), local.location.as_deref()), (Some("nexpose:local-check"), Some("/etc/passwd")));
    assert_eq!(local.vulnerability_id, "CVE-2024-0002");
    assert_eq!(local.aliases, ["CVE-2024-0001", "nexpose:local-check"]);
    assert_eq!((local.title.as_deref(), local.state.as_ref()), (Some("Local check"), None));
    assert_eq!((local.severity, local.cvss.as_slice()), (Severity::High, [].as_slice()), "no CVSS: Nexpose's 8");
    assert_eq!(
        local.description.as_deref(),
        Some("First.\n\n- one\n- two\n\nSee the advisory (https://example.com/a)\n\nProof: found")
    );
    assert_eq!(accepted.severity, Severity::Low);
    assert!(matches!(
        &accepted.state,
        Some(EntryState::Suppressed { reason: SuppressionReason::AcceptedRisk, note: Some(note) })
            if note.contains("exception-vulnerable-version")
    ));
    assert_eq!((undefined.severity, undefined.title.as_deref()), (Severity::Info, None));
    assert!(undefined.description.as_deref().unwrap().contains("no definition"));
    // An unnamed service is `general`; an empty key adds nothing; the vector's score rates it.
    assert_eq!((old.package.name.as_str(), old.location.as_deref()), ("general", Some("8080/tcp")));
    assert_eq!((old.severity, old.cvss[0].base_score), (Severity::Critical, Some(10.0)));

    let skipped: Vec<(&str, &str)> =
        converted.skipped.iter().map(|skipped| (skipped.entry.as_str(), skipped.reason.as_str())).collect();
    assert_eq!(
        skipped,
        [
            ("node 10.0.0.5 test quiet", "status skipped-dos: the check was not performed"),
            ("node 10.0.0.5 test at line 20", "the test has no id"),
            ("nodes/node[2] (line 28)", "the node has no address: it names no host"),
        ]
    );
}

#[test]
fn definitions_before_the_nodes_are_joined_too() {
    let report = br#"<NexposeReport version="2.0">
      <VulnerabilityDefinitions><vulnerability id="x" title="X" cvssScore="9.3"/></VulnerabilityDefinitions>
      <nodes><node address="10.0.0.1"><tests><test id="x" status="vulnerable-exploited"/></tests></node></nodes>
    </NexposeReport>"#;
    let converted = Nexpose::convert(report).expect("converts");
    let [entry] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    assert_eq!((entry.title.as_deref(), entry.severity), (Some("X"), Severity::Critical));
    assert_eq!(converted.scanned_at, None, "no scans: the import's time");
}

#[test]
fn scan_times_and_names() {
    assert_eq!(scan_time("20131127T050242739").map(Timestamp::format).as_deref(), Some("2013-11-27T05:02:42.739Z"));
    assert_eq!(scan_time("20131127T050242").map(Timestamp::format).as_deref(), Some("2013-11-27T05:02:42Z"));
    for wrong in ["20131327T050242739", "2013-11-27T05:02:42Z", "20131127T05024", "20131127T0502427é", ""] {
        assert_eq!(scan_time(wrong), None, "{wrong}");
    }
    assert!(is_host_name("MACBOOKPRO-C9A7") && is_host_name("web-1.corp.example"));
    assert!(!is_host_name("localhost:5000") && !is_host_name("1.1.1.1") && !is_host_name("-x") && !is_host_name(""));
    assert_eq!(mac_address("e4ce8f490d7c").as_deref(), Some("e4:ce:8f:49:0d:7c"));
    assert_eq!(mac_address("E4CE8F490D7"), None);
}

#[test]
fn nexpose_reports_are_told_from_every_other_format() {
    scanner_reports::assert_detects_its_own_and_no_other::<Nexpose>(MANIFEST, "nexpose");
    assert_eq!(Nexpose::detect(b"<NexposeReport version=\"3.0\"><nodes/></NexposeReport>"), Confidence::Possible);
    assert_eq!(Nexpose::detect(b"<NeXposeSimpleXML version=\"1.0\"/>"), Confidence::No);
}

#[test]
fn hostile_and_foreign_input_is_an_error() {
    scanner_reports::assert_refuses_hostile_xml::<Nexpose>("NexposeReport");
    // Each refusal names what was wrong, also where no record is being read.
    let named = ["DTD", "DTD", "DTD", "&xxe;", "deeper than", "MiB of text", "not UTF-8"];
    for ((what, bytes), named) in scanner_reports::hostile_xml_inputs("NexposeReport").into_iter().zip(named) {
        match Nexpose::convert(&bytes) {
            Err(ReportError::Invalid(reason)) => assert!(reason.contains(named), "{what}: {reason}"),
            other => panic!("{what}: {:?}", other.map(|converted| converted.entries.len())),
        }
    }
    assert!(matches!(Nexpose::convert(b"<NessusClientData_v2/>"), Err(ReportError::Unsupported(_))));
    assert!(matches!(Nexpose::convert(b"{\"nodes\": []}"), Err(ReportError::Invalid(_))));
    match Nexpose::convert(b"<NexposeReport version=\"2.0\"><scans/></NexposeReport>") {
        Err(ReportError::Invalid(reason)) => assert!(reason.contains("no <nodes>"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let empty = Nexpose::convert(b"<NexposeReport version=\"2.0\"><nodes/></NexposeReport>").expect("no assets");
    assert!(empty.entries.is_empty() && empty.hosts.is_empty());
}
