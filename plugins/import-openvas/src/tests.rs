use std::collections::BTreeMap;

use esr_plugin_sdk::report::{self, EntryState, PackageClass, ReportEntry, Severity};
use esr_plugin_sdk::scanner_reports;

use super::*;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

fn real(name: &str) -> ConvertedReport {
    scanner_reports::convert_real_report::<OpenVas>(MANIFEST, "openvas", name)
}

fn severities(converted: &ConvertedReport) -> BTreeMap<Severity, usize> {
    let mut counts = BTreeMap::new();
    for entry in &converted.entries {
        *counts.entry(entry.severity).or_default() += 1;
    }
    counts
}

/// The CVEs an entry names: its id, then its aliases, the check aside.
fn cves(entry: &ReportEntry) -> Vec<&str> {
    std::iter::once(entry.vulnerability_id.as_str())
        .chain(entry.aliases.iter().map(String::as_str))
        .filter(|id| report::is_cve(id))
        .collect()
}

/// What every entry of the importer has, whatever the file.
fn assert_entries_are_checks(name: &str, converted: &ConvertedReport) {
    assert_eq!(converted.scanner, "greenbone", "{name}");
    assert_eq!(converted.scanned_classes, vec![PackageClass::Os, PackageClass::Other], "{name}");
    assert!(!converted.partial, "{name}");
    for entry in &converted.entries {
        let check = entry.check.as_deref().expect("a check");
        assert!(check.starts_with("nvt:1.3.6.1.4.1.25623.") && !check.contains(' '), "{name}: {check}");
        if entry.vulnerability_id == check {
            assert!(entry.aliases.is_empty(), "{name}: no CVE, so the check is the id: {entry:?}");
        } else {
            assert!(report::is_cve(&entry.vulnerability_id), "{name}: the first CVE is the id");
            assert_eq!(entry.aliases.last().map(String::as_str), Some(check), "{name}: the check comes last");
        }
        assert_eq!(entry.class, PackageClass::Other, "{name}: no local check in these files");
        let location = entry.location.as_deref().expect("a port");
        assert!(location.ends_with("/tcp") || location.ends_with("/udp") || location.starts_with("general/"));
        assert!(!entry.package.name.is_empty() && !entry.package.name.contains('('), "{name}: {entry:?}");
        assert!(entry.title.as_deref().is_some_and(|title| !title.contains('\n')), "{name}: {entry:?}");
        assert!(converted.hosts.iter().any(|host| Some(&host.key) == entry.host.as_ref()), "{name}: its host");
    }
    assert!(converted.skipped.iter().all(|skipped| !skipped.reason.is_empty() && !skipped.entry.is_empty()));
}

#[test]
fn the_openvas_6_report_converts_its_rated_results_and_skips_the_log() {
    let name = "golismero_openvas6_metasploitable.xml";
    let converted = real(name);
    assert_entries_are_checks(name, &converted);
    // 159 results: High 45, Medium 25, Low 9, Log 80 (24 of them NVT 0).
    assert_eq!(converted.entries.len(), 79);
    assert_eq!(
        severities(&converted),
        BTreeMap::from([(Severity::Low, 9), (Severity::Medium, 25), (Severity::High, 45)]),
        "no score in OpenVAS 6 results: the threat word rates them"
    );
    assert_eq!(converted.skipped.len(), 80);
    let open_ports = converted.skipped.iter().filter(|skipped| skipped.reason.contains("oid 0")).count();
    assert_eq!(open_ports, 24);
    assert!(
        converted
            .skipped
            .iter()
            .filter(|skipped| !skipped.reason.contains("oid 0"))
            .all(|s| s.reason.contains("threat Log"))
    );
    // 54 results name CVEs (167); 2 of them are Log.
    let naming: Vec<Vec<&str>> =
        converted.entries.iter().map(cves).filter(|cves: &Vec<&str>| !cves.is_empty()).collect();
    assert_eq!((naming.len(), naming.iter().map(Vec::len).sum::<usize>()), (52, 165));
    assert_eq!(naming.iter().map(Vec::len).max(), Some(18));
    let vsftpd = converted
        .entries
        .iter()
        .find(|entry| entry.check.as_deref() == Some("nvt:1.3.6.1.4.1.25623.1.0.103185"))
        .expect("the vsftpd backdoor");
    assert_eq!(vsftpd.vulnerability_id, "nvt:1.3.6.1.4.1.25623.1.0.103185", "NOCVE: the check is the id");
    assert_eq!((vsftpd.package.name.as_str(), vsftpd.location.as_deref()), ("clm_pts", Some("6200/tcp")));
    assert_eq!(vsftpd.severity_given.as_deref(), Some("High"));
    let cvss = &vsftpd.cvss[0];
    assert_eq!(
        (cvss.version.as_str(), cvss.vector.as_deref(), cvss.base_score),
        ("2.0", Some("AV:N/AC:L/Au:N/C:P/I:P/A:P"), Some(7.5))
    );
    let general: Vec<_> =
        converted.entries.iter().filter(|entry| entry.location.as_deref() == Some("general/tcp")).collect();
    assert!(!general.is_empty() && general.iter().all(|entry| entry.package.name == "general"));
    assert_eq!(converted.scanned_at.as_deref(), Some("2014-04-13T02:19:34Z"));
    assert_eq!(converted.scanner_version.as_deref(), Some("6.0.0"));
}

#[test]
fn the_trailing_space_of_the_host_name_is_trimmed_and_the_host_has_its_details() {
    let converted = real("golismero_openvas6_metasploitable.xml");
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!(host.key, "10.211.55.35");
    assert_eq!(host.hostname, "METASPLOITABLE", "the detail reads `METASPLOITABLE `");
    assert_eq!(host.ip.as_deref(), Some("10.211.55.35"));
    assert_eq!(host.mac_address.as_deref(), Some("00:1C:42:96:DD:06"));
    let os = host.operating_system.as_ref().expect("an OS");
    assert_eq!(
        (os.name.as_str(), os.vendor.as_deref(), os.family.as_deref()),
        ("Unix", Some("canonical"), Some("linux")),
        "best_os_txt names it, best_os_cpe tells the family"
    );
    assert!(converted.entries.iter().all(|entry| entry.host.as_deref() == Some("10.211.55.35")));
}

#[test]
fn the_gmp_9_report_is_rated_by_its_severity_numbers() {
    let name = "defectdojo_gmp9_metasploitable2.xml";
    let converted = real(name);
    assert_entries_are_checks(name, &converted);
    assert_eq!((converted.entries.len(), converted.skipped.len()), (44, 0));
    // High 19 (7.4 to 10.0), Medium 23, and 2 empty threats at 4.0.
    assert_eq!(
        severities(&converted),
        BTreeMap::from([(Severity::Medium, 25), (Severity::High, 11), (Severity::Critical, 8)])
    );
    let unrated: Vec<_> = converted
        .entries
        .iter()
        .filter(|entry| entry.severity_given.as_deref().is_some_and(|given| !given.contains('(')))
        .collect();
    assert_eq!(unrated.len(), 2);
    assert!(
        unrated
            .iter()
            .all(|entry| entry.severity == Severity::Medium && entry.severity_given.as_deref() == Some("4.0"))
    );
    let naming: Vec<Vec<&str>> = converted.entries.iter().map(cves).filter(|cves| !cves.is_empty()).collect();
    assert_eq!((naming.len(), naming.iter().map(Vec::len).sum::<usize>()), (23, 55));
    assert_eq!(naming.iter().map(Vec::len).max(), Some(11));
    // The impossible address stays the key; the result's host name names it.
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!((host.key.as_str(), host.hostname.as_str()), ("192.168.1.1001", "b6b9f466d63"));
    assert_eq!(host.ip.as_deref(), Some("192.168.1.1001"), "the host drops it: it is no address");
    assert_eq!(host.operating_system, None);
    let rexec = converted
        .entries
        .iter()
        .find(|entry| entry.check.as_deref() == Some("nvt:1.3.6.1.4.1.25623.1.0.100111"))
        .expect("rexec");
    assert_eq!(
        (rexec.vulnerability_id.as_str(), rexec.package.name.as_str(), rexec.location.as_deref()),
        ("CVE-1999-0618", "512/tcp", Some("512/tcp")),
        "GMP names no service: the port is the package"
    );
    assert_eq!((rexec.severity, rexec.severity_given.as_deref()), (Severity::Critical, Some("10.0 (High)")));
    assert!(rexec.cvss.is_empty(), "a score without a vector is no rating of a known CVSS version");
    let wrapped = converted
        .entries
        .iter()
        .find(|entry| entry.check.as_deref() == Some("nvt:1.3.6.1.4.1.25623.1.0.106223"))
        .expect("the DH group NVT");
    assert_eq!(
        wrapped.title.as_deref(),
        Some("SSL/TLS: Diffie-Hellman Key Exchange Insufficient DH Group Strength Vulnerability")
    );
    // A remote check's `Fixed version:` line; the product it names is not the port's.
    let jquery = converted
        .entries
        .iter()
        .find(|entry| entry.check.as_deref() == Some("nvt:1.3.6.1.4.1.25623.1.0.141636"))
        .expect("the jQuery NVT");
    assert_eq!((jquery.fixed_version.as_deref(), jquery.package.version.as_deref()), (Some("1.9.0"), None));
    assert_eq!(converted.entries.iter().filter(|entry| entry.fixed_version.is_some()).count(), 8);
    assert_eq!(converted.scanned_at.as_deref(), Some("2023-09-26T10:50:34Z"));
}

#[test]
fn the_nvt_with_93_cves_is_one_entry_with_92_cve_aliases_and_the_check() {
    let name = "defectdojo_gmp22.6_one-nvt-93-cves.xml";
    let converted = real(name);
    assert_entries_are_checks(name, &converted);
    let [entry] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    assert_eq!(entry.vulnerability_id, "CVE-2025-49659", "the first CVE ref");
    assert_eq!(entry.aliases.len(), 93);
    assert_eq!(entry.aliases.iter().filter(|alias| report::is_cve(alias)).count(), 92);
    assert_eq!(entry.aliases.last().map(String::as_str), Some("nvt:1.3.6.1.4.1.25623.1.0.836484"));
    assert!(entry.aliases.iter().all(|alias| !alias.starts_with("CB-K") && !alias.starts_with("DFN-CERT")));
    assert_eq!((entry.severity, entry.severity_given.as_deref()), (Severity::Critical, Some("9.8 (High)")));
    let cvss = &entry.cvss[0];
    assert_eq!((cvss.source.as_deref(), cvss.version.as_str(), cvss.base_score), (Some("NVD"), "3.1", Some(9.8)));
    assert_eq!(entry.cvss.len(), 1, "the tag repeats the severities' vector");
    let epss = entry.epss.as_ref().expect("EPSS");
    assert_eq!((epss.score, epss.percentile), (0.09023, Some(0.92284)), "the highest EPSS of its CVEs");
    assert_eq!((entry.package.name.as_str(), entry.location.as_deref()), ("42/tcp", Some("42/tcp")));
    assert_eq!(entry.title.as_deref(), Some("Microsoft Windows Multiple Vulnerabilities (KB5062557)"));
    let description = entry.description.as_deref().unwrap_or_default();
    assert!(description.contains("File checked:") && description.contains("Solution: The vendor has released"));
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!((host.key.as_str(), host.hostname.as_str()), ("10.99.99.99", "server99"));
    assert_eq!(converted.scanned_at.as_deref(), Some("2025-08-22T13:01:38Z"), "15:01:38+02:00 in UTC");
}

#[test]
fn the_csv_export_converts_like_the_xml() {
    let name = "vulnwhisperer_openvas9-csv_vulnweb.csv";
    let converted = real(name);
    assert_entries_are_checks(name, &converted);
    assert_eq!((converted.entries.len(), converted.skipped.len()), (41, 0));
    // Medium 39, High 1 (10.0), Low 1 (2.6).
    assert_eq!(
        severities(&converted),
        BTreeMap::from([(Severity::Low, 1), (Severity::Medium, 39), (Severity::Critical, 1)])
    );
    let naming: Vec<Vec<&str>> = converted.entries.iter().map(cves).filter(|cves| !cves.is_empty()).collect();
    assert_eq!(naming.len(), 20);
    assert_eq!(naming.iter().filter(|cves| cves.len() > 1).count(), 10);
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!((host.key.as_str(), host.hostname.as_str()), ("176.28.50.165", "vulnweb.com"));
    // The end-of-life NVT has no port in the export: a host-level result.
    let eol = converted
        .entries
        .iter()
        .find(|entry| entry.check.as_deref() == Some("nvt:1.3.6.1.4.1.25623.1.0.103674"))
        .expect("OS End Of Life Detection");
    assert_eq!((eol.package.name.as_str(), eol.location.as_deref()), ("general", Some("general/tcp")));
    assert_eq!((eol.severity, eol.severity_given.as_deref()), (Severity::Critical, Some("10.0 (High)")));
    assert!(
        eol.description.as_deref().unwrap_or_default().contains("EOL date:          2015-04-30"),
        "cells span lines"
    );
    let anonymous = converted
        .entries
        .iter()
        .find(|entry| entry.check.as_deref() == Some("nvt:1.3.6.1.4.1.25623.1.0.108147"))
        .expect("anonymous cipher suites");
    assert_eq!(cves(anonymous), vec!["CVE-2007-1858", "CVE-2014-0351"]);
    assert_eq!(anonymous.location.as_deref(), Some("465/tcp"));
    assert_eq!(converted.scanned_at.as_deref(), Some("2019-04-23T07:29:28Z"));
}

#[test]
fn greenbone_reports_are_told_from_every_other_format() {
    scanner_reports::assert_detects_its_own_and_no_other::<OpenVas>(MANIFEST, "openvas");
    // A report of another tool with a `report` root is not one.
    assert_eq!(OpenVas::detect(b"<report><item/></report>"), Confidence::No);
    assert_eq!(
        OpenVas::detect(b"<report id=\"x\"><report><gmp><version>22.4</version></gmp></report></report>"),
        Confidence::Certain
    );
    assert_eq!(OpenVas::detect(b"IP,Hostname,Port\n1.2.3.4,a,80\n"), Confidence::No);
    assert_eq!(OpenVas::detect(b"\xff\xfe<"), Confidence::No);
}

#[test]
fn hostile_xml_is_refused() {
    scanner_reports::assert_refuses_hostile_xml::<OpenVas>("report");
    assert!(matches!(OpenVas::convert(b"<NessusClientData_v2/>"), Err(ReportError::Unsupported(_))));
    assert!(matches!(OpenVas::convert(b"{\"a\": 1}"), Err(ReportError::Unsupported(_))));
    for (what, bytes) in scanner_reports::hostile_inputs() {
        assert_eq!(OpenVas::detect(&bytes), Confidence::No, "{what}");
        assert!(OpenVas::convert(&bytes).is_err(), "{what}");
    }
}

#[test]
fn a_broken_csv_says_where() {
    let header =
        "IP,Hostname,Port,Port Protocol,CVSS,Severity,Solution Type,NVT Name,Summary,Specific Result,NVT OID,CVEs\n";
    let broken = format!("{header}1.2.3.4,a,80,tcp,5.0,Medium,\"\",\"x\",\"y\",\"z\",1.3.6.1.4.1.25623.1.0.1\n");
    match OpenVas::convert(broken.as_bytes()) {
        Err(ReportError::Invalid(reason)) => {
            assert!(reason.contains("line 2") && reason.contains("11 cells"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// A GMP report of `results` (host, port, NVT oid, threat, severity,
/// description), its host details after them.
fn gmp_report(results: &[(&str, &str, &str, &str, &str, &str)], hosts: &str) -> Vec<u8> {
    let mut xml = String::from(
        r#"<report id="r" format_id="a994b278-1f62-11e1-96ac-406186ea4fc5" extension="xml" content_type="text/xml"><report id="r"><gmp><version>22.4</version></gmp><scan_start>2024-05-01T10:00:00</scan_start><results>"#,
    );
    for (host, port, oid, threat, severity, description) in results {
        xml.push_str(&format!(
            "<result><host>{host}</host><port>{port}</port><nvt oid=\"{oid}\"><name>Check {oid}</name><family>Ubuntu Local Security Checks</family><refs><ref type=\"cve\" id=\"CVE-2024-0001\"/></refs></nvt><threat>{threat}</threat><severity>{severity}</severity><original_threat>High</original_threat><original_severity>7.5</original_severity><description>{description}</description></result>"
        ));
    }
    xml.push_str("</results>");
    xml.push_str(hosts);
    xml.push_str("</report></report>");
    xml.into_bytes()
}

#[test]
fn threats_and_severities_map_as_the_table_says() {
    let results = [
        ("10.0.0.1", "443/tcp", "1.3.6.1.4.1.25623.1.0.1", "High", "9.1", ""),
        ("10.0.0.1", "443/tcp", "1.3.6.1.4.1.25623.1.0.2", "", "3.1", ""),
        ("10.0.0.1", "443/tcp", "1.3.6.1.4.1.25623.1.0.3", "Log", "0.0", ""),
        ("10.0.0.1", "443/tcp", "1.3.6.1.4.1.25623.1.0.4", "", "0.0", ""),
        ("10.0.0.1", "443/tcp", "1.3.6.1.4.1.25623.1.0.5", "False Positive", "-1.0", ""),
        ("10.0.0.1", "443/tcp", "1.3.6.1.4.1.25623.1.0.6", "Error", "-3.0", ""),
        ("10.0.0.1", "443/tcp", "0", "Log", "0.0", "Open port."),
        ("10.0.0.1", "443/tcp", "", "High", "7.0", ""),
        ("", "443/tcp", "1.3.6.1.4.1.25623.1.0.7", "High", "7.0", ""),
    ];
    let converted = OpenVas::convert(&gmp_report(&results, "")).expect("converts");
    let rated: Vec<(Severity, bool)> =
        converted.entries.iter().map(|entry| (entry.severity, entry.state.is_some())).collect();
    assert_eq!(rated, vec![(Severity::Critical, false), (Severity::Low, false), (Severity::High, true)]);
    let Some(EntryState::Suppressed { note, .. }) = &converted.entries[2].state else { panic!("suppressed") };
    assert!(note.as_deref().is_some_and(|note| note.contains("False Positive") && note.contains("High 7.5")));
    let reasons: Vec<&str> = converted.skipped.iter().map(|skipped| skipped.reason.as_str()).collect();
    assert_eq!(reasons.len(), 6, "{reasons:?}");
    for (reason, says) in
        reasons.iter().zip(["threat Log", "severity 0.0", "threat Error", "oid 0", "no NVT", "no host"])
    {
        assert!(reason.contains(says), "{reason} should say {says}");
    }
    assert_eq!(converted.scanned_at.as_deref(), Some("2024-05-01T10:00:00Z"), "a zone-less time is UTC");
}

#[test]
fn a_local_security_check_names_its_packages_as_os_packages() {
    let description = "Vulnerable package: openssl\nInstalled version:  1.0.1f-1ubuntu2.27\nFixed version:      1.0.1f-1ubuntu2.28\n\nVulnerable package: libssl1.0.0\nInstalled version:  1.0.1f-1ubuntu2.27\nFixed version:      1.0.1f-1ubuntu2.28\n";
    let results = [("10.0.0.2", "general/tcp", "1.3.6.1.4.1.25623.1.0.844001", "High", "7.5", description)];
    let converted = OpenVas::convert(&gmp_report(&results, "")).expect("converts");
    type Row<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>, PackageClass, Option<&'a str>);
    let packages: Vec<Row> = converted
        .entries
        .iter()
        .map(|entry| {
            (
                entry.package.name.as_str(),
                entry.package.version.as_deref(),
                entry.fixed_version.as_deref(),
                entry.package.package_manager.as_deref(),
                entry.class,
                entry.location.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        packages,
        vec![
            ("openssl", Some("1.0.1f-1ubuntu2.27"), Some("1.0.1f-1ubuntu2.28"), Some("apt"), PackageClass::Os, None),
            (
                "libssl1.0.0",
                Some("1.0.1f-1ubuntu2.27"),
                Some("1.0.1f-1ubuntu2.28"),
                Some("apt"),
                PackageClass::Os,
                None
            ),
        ]
    );
    // A family naming no distribution: the host's OS, whose details come last, tells.
    let rpm = "Vulnerable package: openssl\nInstalled version:  openssl-1.0.1e-30.el6\nFixed version:      openssl-1.0.1e-42.el6\n";
    let report = String::from_utf8(gmp_report(
        &[("10.0.0.3", "general/tcp", "1.3.6.1.4.1.25623.1.0.882001", "High", "7.5", rpm)],
        "<host><ip>10.0.0.3</ip><detail><name>best_os_txt</name><value>CentOS Linux 7</value></detail></host>",
    ))
    .expect("text")
    .replace("Ubuntu Local Security Checks", "Local Security Checks");
    let converted = OpenVas::convert(report.as_bytes()).expect("converts");
    let [entry] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    assert_eq!(
        (
            entry.package.version.as_deref(),
            entry.fixed_version.as_deref(),
            entry.package.ecosystem.as_deref(),
            entry.package.package_manager.as_deref()
        ),
        (Some("1.0.1e-30.el6"), Some("1.0.1e-42.el6"), Some("centos"), Some("dnf"))
    );
    assert_eq!(without_name("openssl", "openssl-1.0.1e-30.el6"), "1.0.1e-30.el6");
    assert_eq!(without_name("openssl", "1.0.1e-30.el6"), "1.0.1e-30.el6");
}

#[test]
fn ports_name_their_service_and_location() {
    assert_eq!(service_and_location("http (80/tcp)"), ("http".into(), "80/tcp".into()));
    assert_eq!(service_and_location("general/icmp"), ("general".into(), "general/icmp".into()));
    assert_eq!(service_and_location("5432/tcp"), ("5432/tcp".into(), "5432/tcp".into()));
    assert_eq!(service_and_location(""), ("general".into(), "general/tcp".into()));
    assert_eq!(rfc3339("Sun Apr 13 02:19:34 2014").as_deref(), Some("2014-04-13T02:19:34Z"));
    assert_eq!(rfc3339("yesterday"), None);
}

/// A report of 1,000 hosts, the host details after all the results, as
/// gvmd writes them: each host keeps its details, each result its host.
/// (The host test converts 1,000 hosts of 50 results each within the
/// importer's memory cap.)
#[test]
fn a_thousand_hosts_keep_the_details_that_follow_their_results() {
    let report = many_hosts_report(1000, 2);
    let converted = OpenVas::convert(&report).expect("converts");
    assert_eq!((converted.entries.len(), converted.hosts.len()), (2000, 1000));
    for (index, host) in converted.hosts.iter().enumerate() {
        let number: usize =
            host.hostname.trim_start_matches("host-").trim_end_matches(".example").parse().expect("named");
        assert_eq!(host.key, format!("10.{}.{}.1", number / 256, number % 256), "{index}: the details of its IP");
        let os = host.operating_system.as_ref().expect("an OS");
        assert_eq!((os.name.as_str(), os.family.as_deref()), ("Debian GNU/Linux 12", Some("linux")));
    }
    assert!(converted.entries.iter().all(|entry| entry.severity == Severity::Medium && entry.cvss.len() == 1));
}

/// A GMP report of `hosts` hosts with `results` results each, every host's
/// details after all the results.
fn many_hosts_report(hosts: usize, results: usize) -> Vec<u8> {
    let mut xml = String::from(
        r#"<report id="r" format_id="a994b278-1f62-11e1-96ac-406186ea4fc5" content_type="text/xml"><report id="r"><scan_start>2024-05-01T10:00:00Z</scan_start><results>"#,
    );
    for host in 0..hosts {
        for check in 0..results {
            xml.push_str(&format!(
                "<result><host>10.{}.{}.1<hostname>h{host}</hostname></host><port>{}/tcp</port><nvt oid=\"1.3.6.1.4.1.25623.1.0.{check}\"><name>Check {check}</name><tags>cvss_base_vector=AV:N/AC:L/Au:N/C:P/I:P/A:P|summary=A summary.</tags><refs><ref type=\"cve\" id=\"CVE-2020-{:04}\"/></refs></nvt><threat>Medium</threat><severity>5.0</severity><description>Found on port {check}.</description></result>",
                host / 256,
                host % 256,
                1000 + check,
                check + 1000
            ));
        }
    }
    xml.push_str("</results>");
    for host in 0..hosts {
        xml.push_str(&format!(
            "<host><ip>10.{}.{}.1</ip><detail><name>hostname</name><value>host-{host}.example</value></detail><detail><name>best_os_txt</name><value>Debian GNU/Linux 12</value></detail></host>",
            host / 256,
            host % 256
        ));
    }
    xml.push_str("</report></report>");
    xml.into_bytes()
}
