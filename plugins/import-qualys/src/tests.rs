use std::collections::{BTreeMap, BTreeSet};

use esr_plugin_sdk::scanner_reports;

use super::*;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");
const ASSET_REPORT: &str = "sample-scan-files_asset-data-report_7-hosts.xml";
const DETECTIONS: &str = "graph-qualys_host-list-vm-detection.xml";
const SCAN_RESULTS: &str = "dradis_scan-xml_2-hosts.xml";

fn real(name: &str) -> ConvertedReport {
    scanner_reports::convert_real_report::<Qualys>(MANIFEST, "qualys", name)
}

fn counted<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeMap<T, usize> {
    let mut counts = BTreeMap::new();
    for item in items {
        *counts.entry(item).or_insert(0) += 1;
    }
    counts
}

fn host<'a>(converted: &'a ConvertedReport, key: &str) -> &'a ReportHost {
    converted.hosts.iter().find(|host| host.key == key).unwrap_or_else(|| panic!("no host {key}"))
}

/// (host, QID, location) of a skipped item, from how skipped entries name
/// it: `HOST 10.0.0.1: QID 6 on 443/tcp`, `IP 10.0.0.1 INFOS: QID 6`.
fn skipped_item(skipped: &SkippedEntry) -> (String, String, Option<String>) {
    let (owner, item) = skipped.entry.split_once(": QID ").expect("an item's name");
    let host = owner.split(' ').nth(1).expect("a host").to_owned();
    match item.split_once(" on ") {
        Some((qid, location)) => (host, qid.to_owned(), Some(location.to_owned())),
        None => (host, item.to_owned(), None),
    }
}

/// (host, QID, location) of an entry.
fn entry_item(entry: &ReportEntry) -> (String, String, Option<String>) {
    let qid = entry.check.as_deref().and_then(|check| check.strip_prefix("qid:")).expect("a QID check");
    (entry.host.clone().expect("a host"), qid.to_owned(), entry.location.clone())
}

#[test]
fn every_real_report_converts_one_entry_per_host_qid_and_port() {
    for (name, bytes) in scanner_reports::real_reports(MANIFEST, "qualys") {
        let converted = Qualys::convert(&bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(converted.scanner, "qualys", "{name}");
        assert_eq!(converted.scanned_classes, [PackageClass::Os, PackageClass::Other], "{name}");
        assert!(!converted.partial, "{name}");
        assert!(converted.scanned_at.as_deref().and_then(Timestamp::parse).is_some(), "{name}");
        assert!(!converted.entries.is_empty(), "{name}");
        for entry in &converted.entries {
            let at = format!("{name}: {entry:?}");
            let host = entry.host.as_deref().expect("every entry names its host");
            assert!(converted.hosts.iter().any(|known| known.key == host), "{at}");
            let check = entry.check.as_deref().expect("a check");
            let qid = check.strip_prefix("qid:").expect("qid:<n>");
            assert!(!qid.is_empty() && qid.bytes().all(|byte| byte.is_ascii_digit()), "{at}");
            let first_cve =
                std::iter::once(&entry.vulnerability_id).chain(&entry.aliases).find(|id| report::is_cve(id));
            match first_cve {
                Some(cve) => assert_eq!(cve, &entry.vulnerability_id, "{at}: the first CVE is the id"),
                None => assert_eq!(entry.vulnerability_id, check, "{at}: without a CVE the check is the id"),
            }
            assert_eq!(
                entry.aliases.last().map(String::as_str) == Some(check),
                entry.vulnerability_id != check,
                "{at}"
            );
            assert_eq!(entry.class, PackageClass::Other, "{at}");
            assert_eq!(entry.package.name, entry.location.clone().unwrap_or_else(|| "general".into()), "{at}");
            assert!(entry.title.as_deref().is_some_and(|title| !title.is_empty()), "{at}");
        }
        // Qualys counts one instance per host, QID and port; so does the conversion.
        let items: Vec<_> = converted.entries.iter().map(entry_item).collect();
        assert_eq!(items.iter().collect::<BTreeSet<_>>().len(), items.len(), "{name}: an instance twice");
        assert!(converted.skipped.iter().all(|skipped| !skipped.reason.is_empty()), "{name}");
    }
}

#[test]
fn the_asset_data_report_holds_what_the_readme_counts() {
    let converted = real(ASSET_REPORT);
    assert_eq!(converted.scanned_at.as_deref(), Some("2019-08-01T20:03:10Z"));
    // 299 VULN_INFO: 90 of TYPE Vuln are entries, the 209 of TYPE Ig skipped.
    assert_eq!((converted.entries.len(), converted.skipped.len()), (90, 209));
    assert!(converted.skipped.iter().all(|skipped| skipped.reason.contains("TYPE Ig")), "{:?}", converted.skipped);
    // The Vuln ones by glossary severity; with the Ig ones (1 ×169, 2 ×26,
    // 3 ×14) they are the README's 177, 65, 46, 4 and 7.
    let levels = counted(converted.entries.iter().filter_map(|entry| entry.severity_given.as_deref()));
    assert_eq!(levels, BTreeMap::from([("1", 8), ("2", 39), ("3", 32), ("4", 4), ("5", 7)]));
    let severities = counted(converted.entries.iter().map(|entry| entry.severity));
    let expected = [(Severity::Low, 47), (Severity::Medium, 32), (Severity::High, 4), (Severity::Critical, 7)];
    assert_eq!(severities, BTreeMap::from(expected));
    // 51 (host, QID) pairs come again on other ports; each port is its own item.
    let mut items: Vec<_> = converted.entries.iter().map(entry_item).collect();
    items.extend(converted.skipped.iter().map(skipped_item));
    assert_eq!(items.len(), 299);
    assert_eq!(items.iter().collect::<BTreeSet<_>>().len(), 299, "no (host, QID, port) twice");
    let pairs: BTreeSet<_> = items.iter().map(|(host, qid, _)| (host, qid)).collect();
    assert_eq!(items.len() - pairs.len(), 51);
    let vuln_pairs: BTreeSet<_> = converted.entries.iter().map(|entry| (&entry.host, &entry.check)).collect();
    assert_eq!(converted.entries.len() - vuln_pairs.len(), 23);
    // The repeats of a (host, QID) differ by port, e.g. 443 and 8443.
    let ports_of = |qid: &str, host: &str| -> BTreeSet<Option<String>> {
        items.iter().filter(|item| item.0 == host && item.1 == qid).map(|item| item.2.clone()).collect()
    };
    assert!(items.iter().any(|(host, qid, _)| {
        let ports = ports_of(qid, host);
        ports.contains(&Some("443/tcp".into())) && ports.contains(&Some("8443/tcp".into()))
    }));
    // The QIDs of the Vuln entries, with the glossary's CVEs.
    let checks: BTreeSet<_> = converted.entries.iter().filter_map(|entry| entry.check.as_deref()).collect();
    assert_eq!(checks.len(), 37);
    let with_cve: BTreeSet<_> = converted
        .entries
        .iter()
        .filter(|entry| report::is_cve(&entry.vulnerability_id))
        .filter_map(|entry| entry.check.as_deref())
        .collect();
    assert_eq!(with_cve.len(), 19);
    let cves: BTreeSet<_> = converted
        .entries
        .iter()
        .flat_map(|entry| std::iter::once(&entry.vulnerability_id).chain(&entry.aliases))
        .filter(|id| report::is_cve(id))
        .collect();
    assert_eq!(cves.len(), 43);
    let libxml = converted.entries.iter().find(|entry| entry.check.as_deref() == Some("qid:11803")).expect("11803");
    assert_eq!(libxml.vulnerability_id, "CVE-2015-8806");
    assert_eq!((libxml.aliases.len(), libxml.aliases.last().map(String::as_str)), (16, Some("qid:11803")));
    assert_eq!(libxml.title.as_deref(), Some("libxml2 Multiple Vulnerabilities"));
    assert!(libxml.description.as_deref().is_some_and(|text| text.starts_with("libxml2 is prone")));
    // This template has no CVSS, and every item is New.
    assert!(converted.entries.iter().all(|entry| entry.cvss.is_empty() && entry.state.is_none()));
    // 7 hosts: 4 tracked by DNS, 3 by NetBIOS (Windows), all with a DNS name.
    assert_eq!(converted.hosts.len(), 7);
    let windows = host(&converted, "64.41.200.247");
    assert_eq!(
        (windows.hostname.as_str(), windows.fqdn.as_deref(), windows.netbios_name.as_deref(), windows.ip.as_deref()),
        ("trn-win7.trn.qualys.com", Some("trn-win7.trn.qualys.com"), Some("TRN-WIN7"), Some("64.41.200.247"))
    );
    let families = counted(converted.hosts.iter().filter_map(|host| host.operating_system.as_ref()?.family.clone()));
    assert_eq!(families, BTreeMap::from([("linux".to_owned(), 4), ("windows".to_owned(), 3)]));
    let netbios: BTreeSet<_> = converted.hosts.iter().filter_map(|host| host.netbios_name.as_deref()).collect();
    assert_eq!(netbios, BTreeSet::from(["TRN-WIN7", "WIN2008R2", "TRN-WIN2012-DC"]));
    assert!(converted.hosts.iter().all(|host| host.fqdn.as_deref() == Some(host.hostname.as_str())));
}

#[test]
fn the_detection_list_names_qids_only_and_keeps_cdata_verbatim() {
    let converted = real(DETECTIONS);
    assert_eq!(converted.scanned_at.as_deref(), Some("2020-09-27T01:29:21Z"), "the answer's time");
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!(host.key, "6506432", "the Qualys host id");
    assert_eq!(
        (host.hostname.as_str(), host.fqdn.as_deref(), host.netbios_name.as_deref(), host.ip.as_deref()),
        ("2k8r2-u-10-11", None, Some("2K8R2-U-10-11"), Some("10.10.10.11"))
    );
    let os = host.operating_system.as_ref().expect("an OS");
    assert_eq!((os.name.as_str(), os.family.as_deref()), ("Windows 2008 R2 Enterprise Service Pack1", Some("windows")));
    let checks: Vec<_> = converted.entries.iter().filter_map(|entry| entry.check.as_deref()).collect();
    assert_eq!(checks, ["qid:38170", "qid:38173", "qid:38601"]);
    for entry in &converted.entries {
        let check = entry.check.as_deref().expect("a check");
        assert_eq!((entry.vulnerability_id.as_str(), entry.aliases.len()), (check, 0), "no CVE in the detection list");
        assert_eq!(entry.title, Some(format!("Qualys QID {}", &check[4..])));
        assert_eq!((entry.location.as_deref(), entry.package.name.as_str()), (Some("3389/tcp"), "3389/tcp"));
        assert_eq!((entry.severity_given.as_deref(), entry.severity), (Some("2"), Severity::Low));
        assert_eq!(entry.state, None, "STATUS Active is open");
    }
    assert!(converted.skipped.is_empty());
    // CDATA is not entity-decoded: the literal text stays as Qualys wrote it.
    let result = converted.entries[0].description.as_deref().expect("the result");
    assert_eq!(result, "Certificate #0 CN=2k8r2-u-10-11(2k8r2-u-10-11) doesn&apos;tresolve");
}

#[test]
fn the_scan_results_skip_information_gathered_and_name_no_placeholder() {
    let converted = real(SCAN_RESULTS);
    assert_eq!(converted.scanned_at.as_deref(), Some("2011-12-20T12:00:00Z"));
    assert_eq!(converted.scanner_version.as_deref(), Some("4.14.30-1"));
    let [named, unnamed] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!(
        (named.hostname.as_str(), named.fqdn.as_deref(), named.ip.as_deref()),
        ("smtp.example.com", Some("smtp.example.com"), Some("10.0.155.157"))
    );
    assert_eq!(unnamed.names(), ["10.0.155.160"], "`No registered hostname` is no name");
    assert_eq!((unnamed.fqdn.as_deref(), unnamed.ip.as_deref()), (None, Some("10.0.155.160")));
    assert!(converted.hosts.iter().all(|host| {
        host.operating_system
            .as_ref()
            .is_some_and(|os| os.name == "Linux 2.4-2.6" && os.family.as_deref() == Some("linux"))
    }));
    // 14 items: INFOS 5 and SERVICES 5 skipped, VULNS 4.
    assert_eq!((converted.entries.len(), converted.skipped.len()), (4, 10));
    let sections = counted(converted.skipped.iter().map(|skipped| skipped.entry.split(':').next().unwrap_or("")));
    assert_eq!(sections.values().sum::<usize>(), 10);
    let per_section = counted(sections.keys().map(|owner| owner.rsplit(' ').next().unwrap_or("")));
    assert_eq!(per_section, BTreeMap::from([("INFOS", 2), ("SERVICES", 2)]), "both hosts have both");
    assert_eq!(converted.skipped.iter().filter(|skipped| skipped.entry.contains(" INFOS:")).count(), 5);
    // QIDs 45038, 82054 and 86000 are on both hosts.
    let mut qids_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (host, qid, _) in converted.entries.iter().map(entry_item).chain(converted.skipped.iter().map(skipped_item)) {
        qids_of.entry(host).or_default().insert(qid);
    }
    let [first, second] = [&qids_of["10.0.155.157"], &qids_of["10.0.155.160"]];
    assert_eq!(first.intersection(second).map(String::as_str).collect::<Vec<_>>(), ["45038", "82054", "86000"]);
    let found: Vec<_> = converted
        .entries
        .iter()
        .map(|entry| {
            let rating = entry.cvss.first().expect("a CVSS base score");
            assert_eq!((rating.version.as_str(), rating.vector.as_deref()), ("2.0", None));
            (
                entry.host.as_deref().unwrap_or(""),
                entry.check.as_deref().unwrap_or(""),
                entry.vulnerability_id.as_str(),
                entry.location.as_deref(),
                entry.severity,
                rating.base_score,
                rating.source.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("10.0.155.157", "qid:82054", "CVE-2004-0230", None, Severity::Low, Some(5.0), None),
            ("10.0.155.160", "qid:82054", "CVE-2004-0230", None, Severity::Low, Some(5.0), None),
            ("10.0.155.160", "qid:86821", "CVE-2006-3918", Some("80/tcp"), Severity::Medium, Some(4.3), Some("qualys")),
            ("10.0.155.160", "qid:86477", "qid:86477", Some("80/tcp"), Severity::Low, Some(4.3), Some("qualys")),
        ]
    );
    let apache = &converted.entries[2];
    assert_eq!(apache.title.as_deref(), Some("Apache 1.3 HTTP Server Expect Header Cross-Site Scripting"));
    assert_eq!(apache.aliases, ["qid:86821"]);
    assert!(apache.description.as_deref().is_some_and(|text| text.starts_with("A vulnerability exists in Apache")));
}

#[test]
fn qualys_reports_are_told_from_every_other_format() {
    scanner_reports::assert_detects_its_own_and_no_other::<Qualys>(MANIFEST, "qualys");
    assert_eq!(Qualys::detect(b"<?xml version=\"1.0\"?>\n<SCAN><IP value=\"10.0.0.1\"/></SCAN>"), Confidence::No);
    assert_eq!(Qualys::detect(b"<SCAN value=\"scan/1.2\">"), Confidence::Certain, "only the root is read");
    assert_eq!(Qualys::detect(b"<!DOCTYPE SCAN SYSTEM \"scan-1.dtd\">\n<SCAN>"), Confidence::Certain);
    assert_eq!(Qualys::detect(br#"{"ASSET_DATA_REPORT": 1}"#), Confidence::No);
    assert_eq!(Qualys::detect(b""), Confidence::No);
}

#[test]
fn hostile_and_foreign_xml_is_refused_saying_why() {
    scanner_reports::assert_refuses_hostile_xml::<Qualys>(ASSET_DATA_REPORT);
    scanner_reports::assert_refuses_hostile_xml::<Qualys>(DETECTION_OUTPUT);
    scanner_reports::assert_refuses_hostile_xml::<Qualys>(SCAN);
    // Refused for what is wrong, each with where.
    for (what, bytes) in scanner_reports::hostile_xml_inputs(ASSET_DATA_REPORT) {
        match Qualys::convert(&bytes) {
            Err(ReportError::Invalid(reason)) => assert!(reason.contains("line "), "{what}: {reason}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    let foreign = Qualys::convert(b"<NessusClientData_v2><Report/></NessusClientData_v2>");
    assert!(matches!(&foreign, Err(ReportError::Unsupported(reason)) if reason.contains("<NessusClientData_v2>")));
    let headless = Qualys::convert(b"<ASSET_DATA_REPORT><HOST_LIST/></ASSET_DATA_REPORT>");
    assert!(matches!(&headless, Err(ReportError::Unsupported(reason)) if reason.contains("no HEADER")));
    let broken = Qualys::convert(b"<HOST_LIST_VM_DETECTION_OUTPUT>\n<RESPONSE>\n</HOST_LIST_VM_DETECTION_OUTPUT>");
    assert!(matches!(&broken, Err(ReportError::Invalid(reason)) if reason.contains("line 3")), "{broken:?}");
}

#[test]
fn detections_map_type_status_and_ports_and_stream_host_by_host() {
    let answer = br#"<?xml version="1.0" encoding="UTF-8" ?>
<!DOCTYPE HOST_LIST_VM_DETECTION_OUTPUT SYSTEM "https://qualysapi.qualys.com/api/2.0/fo/asset/host/vm/detection/host_list_vm_detection_output.dtd">
<HOST_LIST_VM_DETECTION_OUTPUT><RESPONSE><DATETIME>2024-03-01 10:00:00</DATETIME><HOST_LIST>
<HOST><ID>11</ID><IP>10.0.0.1</IP><DNS><![CDATA[web-1]]></DNS>
  <DNS_DATA><HOSTNAME>web-1</HOSTNAME><DOMAIN>corp.example</DOMAIN><FQDN>web-1.corp.example</FQDN></DNS_DATA>
  <DETECTION_LIST>
    <DETECTION><QID>100</QID><TYPE>Confirmed</TYPE><SEVERITY>5</SEVERITY><PORT>443</PORT><PROTOCOL>TCP</PROTOCOL><STATUS>Fixed</STATUS></DETECTION>
    <DETECTION><QID>101</QID><TYPE>Potential</TYPE><SEVERITY>4</SEVERITY><STATUS>Re-Opened</STATUS><IS_IGNORED>1</IS_IGNORED></DETECTION>
    <DETECTION><QID>102</QID><TYPE>Info</TYPE><SEVERITY>3</SEVERITY></DETECTION>
    <DETECTION><TYPE>Confirmed</TYPE></DETECTION>
  </DETECTION_LIST></HOST>
<HOST><ID>12</ID><IP>10.0.0.2</IP><NETBIOS>FILES</NETBIOS>
  <DETECTION_LIST><DETECTION><QID>100</QID><TYPE>Confirmed</TYPE><SEVERITY>3</SEVERITY><PORT>443</PORT><PROTOCOL>tcp</PROTOCOL><STATUS>New</STATUS></DETECTION></DETECTION_LIST></HOST>
<HOST><ID>13</ID><IPV6>fe80::1</IPV6></HOST>
</HOST_LIST>
<WARNING><CODE>1980</CODE><TEXT>1000 record limit exceeded. Use URL to get next batch of results.</TEXT><URL><![CDATA[https://qualysapi.qualys.com/api/2.0/fo/asset/host/vm/detection/?action=list&id_min=14]]></URL></WARNING>
</RESPONSE></HOST_LIST_VM_DETECTION_OUTPUT>"#;
    assert_eq!(Qualys::detect(answer), Confidence::Certain);
    let converted = Qualys::convert(answer).expect("converts");
    assert_eq!(converted.scanned_at.as_deref(), Some("2024-03-01T10:00:00Z"), "a zone-less time is UTC");
    let hosts: Vec<_> = converted.hosts.iter().map(|host| (host.key.as_str(), host.names())).collect();
    assert_eq!(hosts, [("11", vec!["web-1.corp.example"]), ("12", vec!["FILES"]), ("13", vec!["fe80::1"]),]);
    let entries: Vec<_> = converted
        .entries
        .iter()
        .map(|entry| {
            (
                entry.host.as_deref(),
                entry.check.as_deref(),
                entry.location.as_deref(),
                entry.severity,
                entry.state.clone(),
            )
        })
        .collect();
    let ignored = EntryState::Suppressed {
        reason: SuppressionReason::AcceptedRisk,
        note: Some("ignored in Qualys (IS_IGNORED)".into()),
    };
    assert_eq!(
        entries,
        [
            (Some("11"), Some("qid:100"), Some("443/tcp"), Severity::Critical, Some(EntryState::Resolved)),
            (Some("11"), Some("qid:101"), None, Severity::High, Some(ignored)),
            (Some("12"), Some("qid:100"), Some("443/tcp"), Severity::Medium, None),
        ]
    );
    assert_eq!(converted.entries[1].package.name, "general");
    // A page of the host list resolves nothing; information gathered and a
    // detection without QID are skipped, each saying why.
    assert!(converted.partial);
    let skipped: Vec<_> = converted.skipped.iter().map(|skipped| skipped.entry.as_str()).collect();
    assert_eq!(skipped, ["HOST 11: QID 102", "HOST 11: DETECTION (line 10)", "RESPONSE/WARNING"]);
    assert!(converted.skipped[0].reason.contains("TYPE Info"));
    assert!(
        converted.skipped[2].reason.contains("id_min=14")
            && converted.skipped[2].reason.contains("nothing is resolved")
    );
}

#[test]
fn an_asset_data_report_joins_its_glossary_with_cvss_and_status() {
    let report = br#"<?xml version="1.0" encoding="UTF-8" ?>
<!DOCTYPE ASSET_DATA_REPORT SYSTEM "https://qualysguard.qualys.com/asset_data_report.dtd">
<ASSET_DATA_REPORT><HEADER><GENERATION_DATETIME>2024-05-02T08:00:00+02:00</GENERATION_DATETIME></HEADER>
<HOST_LIST>
  <HOST><IP>10.0.0.1</IP><TRACKING_METHOD>IP</TRACKING_METHOD><VULN_INFO_LIST>
    <VULN_INFO><QID id="qid_200">200</QID><TYPE>Vuln</TYPE><PORT>443</PORT><PROTOCOL>tcp</PROTOCOL><VULN_STATUS>Fixed</VULN_STATUS></VULN_INFO>
    <VULN_INFO><QID id="qid_201">201</QID><TYPE>Practice</TYPE><VULN_STATUS>Active</VULN_STATUS></VULN_INFO>
    <VULN_INFO><QID id="qid_202">202</QID><TYPE>Ig</TYPE></VULN_INFO>
    <VULN_INFO><QID id="qid_299">299</QID><TYPE>Vuln</TYPE></VULN_INFO>
  </VULN_INFO_LIST></HOST>
  <HOST><IP>10.0.0.1</IP><NETBIOS>OTHER</NETBIOS><VULN_INFO_LIST>
    <VULN_INFO><QID id="qid_200">200</QID><TYPE>Vuln</TYPE><PORT>443</PORT><PROTOCOL>tcp</PROTOCOL></VULN_INFO>
  </VULN_INFO_LIST></HOST>
  <HOST><ERROR number="1">host not found</ERROR></HOST>
</HOST_LIST>
<GLOSSARY><VULN_DETAILS_LIST>
  <VULN_DETAILS id="qid_200"><QID id="qid_200">200</QID><TITLE><![CDATA[Weak TLS]]></TITLE><SEVERITY>4</SEVERITY>
    <THREAT><![CDATA[Weak <B>ciphers</B>]]></THREAT>
    <CVE_ID_LIST><CVE_ID><ID><![CDATA[CVE-2016-2183]]></ID></CVE_ID><CVE_ID><ID><![CDATA[CVE-2016-6329]]></ID></CVE_ID></CVE_ID_LIST>
    <CVSS_SCORE><CVSS_BASE source="service">5.0</CVSS_BASE><CVSS_TEMPORAL>3.7</CVSS_TEMPORAL></CVSS_SCORE>
    <CVSS3_SCORE><CVSS3_BASE>7.5 (AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N)</CVSS3_BASE></CVSS3_SCORE>
  </VULN_DETAILS>
  <VULN_DETAILS id="qid_201"><QID id="qid_201">201</QID><TITLE><![CDATA[Maybe]]></TITLE><SEVERITY>1</SEVERITY>
    <CVSS3_SCORE><CVSS3_BASE>-</CVSS3_BASE></CVSS3_SCORE></VULN_DETAILS>
  <VULN_DETAILS id="qid_202"><QID id="qid_202">202</QID><TITLE><![CDATA[Open ports]]></TITLE><SEVERITY>3</SEVERITY></VULN_DETAILS>
</VULN_DETAILS_LIST></GLOSSARY></ASSET_DATA_REPORT>"#;
    assert_eq!(Qualys::detect(report), Confidence::Certain);
    let converted = Qualys::convert(report).expect("converts");
    assert_eq!(converted.scanned_at.as_deref(), Some("2024-05-02T08:00:00+02:00"));
    let keys: Vec<_> = converted.hosts.iter().map(|host| (host.key.as_str(), host.hostname.as_str())).collect();
    assert_eq!(keys, [("10.0.0.1", "10.0.0.1"), ("10.0.0.1#2", "OTHER")], "one address listed twice");
    let [tls, maybe, unknown, again] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    assert_eq!(
        (tls.vulnerability_id.as_str(), tls.aliases.clone(), tls.title.as_deref(), tls.severity, tls.state.clone()),
        (
            "CVE-2016-2183",
            vec!["CVE-2016-6329".to_owned(), "qid:200".to_owned()],
            Some("Weak TLS"),
            Severity::High,
            Some(EntryState::Resolved)
        )
    );
    assert_eq!(tls.description.as_deref(), Some("Weak <B>ciphers</B>"));
    let ratings: Vec<_> = tls
        .cvss
        .iter()
        .map(|rating| (rating.version.as_str(), rating.vector.as_deref(), rating.base_score, rating.source.as_deref()))
        .collect();
    assert_eq!(
        ratings,
        [
            ("3.0", Some("CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N"), Some(7.5), None),
            ("2.0", None, Some(5.0), Some("qualys")),
        ]
    );
    assert_eq!(
        (maybe.check.as_deref(), maybe.severity, maybe.cvss.len(), maybe.state.clone()),
        (Some("qid:201"), Severity::Low, 0, None)
    );
    // A QID the glossary lacks is still found, with what the host item says.
    assert_eq!(
        (unknown.title.as_deref(), unknown.severity, unknown.severity_given.clone()),
        (Some("Qualys QID 299"), Severity::Info, None)
    );
    assert_eq!((again.host.as_deref(), again.state.clone()), (Some("10.0.0.1#2"), None));
    let skipped: Vec<_> = converted.skipped.iter().map(|skipped| skipped.entry.as_str()).collect();
    assert_eq!(skipped, ["HOST_LIST/HOST[3]", "HOST 10.0.0.1: QID 202"], "Ig is skipped even at severity 3");
    assert!(converted.skipped[0].reason.contains("host not found"));
}

#[test]
fn scan_results_take_practices_and_leave_down_hosts_out() {
    let scan = br#"<!-- a comment first -->
<?xml version="1.0" encoding="UTF-8" ?>
<!DOCTYPE SCAN SYSTEM "https://qualysguard.qualys.com/scan-1.dtd">
<SCAN value="scan/1.1">
<IP value="10.0.0.9" status="down"/>
<IP value="10.0.0.1" name="No registered hostname"><OS><![CDATA[Windows 2019]]></OS>
  <PRACTICES><CAT value="Windows" port="445" protocol="tcp">
    <PRACTICE number="90043" severity="2" cveid="CVE-2016-2115,CVE-2017-0143"><TITLE><![CDATA[SMB Signing Disabled]]></TITLE>
      <CVSS_BASE>7.3</CVSS_BASE><CVSS3_BASE>5.3</CVSS3_BASE></PRACTICE>
  </CAT></PRACTICES>
  <VULNS><CAT value="General" port="22"><VULN severity="3"><TITLE>no number</TITLE></VULN></CAT></VULNS>
</IP>
<HEADER><KEY value="DATE">2024-01-02T03:04:05Z</KEY></HEADER>
</SCAN>"#;
    let converted = Qualys::convert(scan).expect("converts");
    assert_eq!(converted.scanned_at.as_deref(), Some("2024-01-02T03:04:05Z"));
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!((host.hostname.as_str(), host.fqdn.as_deref()), ("10.0.0.1", None));
    let [practice] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    assert_eq!(
        (practice.vulnerability_id.as_str(), practice.location.as_deref(), practice.severity),
        ("CVE-2016-2115", Some("445/tcp"), Severity::Low)
    );
    assert_eq!(practice.aliases, ["CVE-2017-0143", "qid:90043"]);
    let versions: Vec<_> = practice.cvss.iter().map(|rating| (rating.version.as_str(), rating.base_score)).collect();
    assert_eq!(versions, [("3.0", Some(5.3)), ("2.0", Some(7.3))], "the newest version first");
    assert_eq!(converted.skipped.len(), 1);
    assert!(converted.skipped[0].entry.starts_with("IP 10.0.0.1: VULNS/VULN"), "{:?}", converted.skipped);
}

#[test]
fn a_report_of_too_many_items_is_refused() {
    let mut answer = String::from(
        "<HOST_LIST_VM_DETECTION_OUTPUT><RESPONSE><DATETIME>2024-01-01T00:00:00Z</DATETIME><HOST_LIST><HOST><ID>1</ID><DETECTION_LIST>",
    );
    for qid in 0..=report::MAX_ENTRIES {
        answer.push_str(&format!("<DETECTION><QID>{qid}</QID><TYPE>Info</TYPE></DETECTION>"));
    }
    answer.push_str("</DETECTION_LIST></HOST></HOST_LIST></RESPONSE></HOST_LIST_VM_DETECTION_OUTPUT>");
    esr_plugin_sdk::importing::assert_refused_past_max_entries(Qualys::convert(answer.as_bytes()), FAN_OUT);
}
