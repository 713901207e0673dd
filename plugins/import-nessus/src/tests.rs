use std::collections::BTreeSet;

use esr_plugin_sdk::importing::assert_refused_past_max_entries;
use esr_plugin_sdk::scanner_reports;

use super::*;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

fn real(name: &str) -> ConvertedReport {
    scanner_reports::convert_real_report::<Nessus>(MANIFEST, "nessus", name)
}

fn host<'a>(converted: &'a ConvertedReport, key: &str) -> &'a ReportHost {
    converted
        .hosts
        .iter()
        .find(|host| host.key == key)
        .unwrap_or_else(|| panic!("no host {key}: {:?}", converted.hosts))
}

/// A report's findings as the items they came from: a remote check is one
/// entry; a local check naming packages, one entry per package, all of
/// one (host, check).
fn items(converted: &ConvertedReport) -> Vec<&ReportEntry> {
    let mut seen_local = BTreeSet::new();
    converted
        .entries
        .iter()
        .filter(|entry| {
            entry.class == PackageClass::Other || seen_local.insert((entry.host.clone(), entry.check.clone()))
        })
        .collect()
}

/// What the README of the real reports states of each file: items by
/// severity 1–4, informational items, items naming CVEs and their `<cve>`
/// count (each less what informational items hold), and the entries the
/// mapping makes of them (one per package a local check names).
struct Stated {
    file: &'static str,
    by_severity: [usize; 4],
    informational: usize,
    cve_items: usize,
    cves: usize,
    entries: usize,
}

const STATED: &[Stated] = &[
    // 49 items; 19 name CVEs (138 `<cve>`), one of them informational with one CVE.
    Stated {
        file: "defectdojo_nessus-10.1-cvssv3_vulnweb.nessus",
        by_severity: [1, 13, 10, 2],
        informational: 23,
        cve_items: 19 - 1,
        cves: 138 - 1,
        entries: 26,
    },
    Stated {
        file: "python-libnessus_3-hosts-ip-only.nessus",
        by_severity: [10, 20, 3, 2],
        informational: 71,
        cve_items: 27,
        cves: 52,
        entries: 35,
    },
    // 167 items; 67 name CVEs (156 `<cve>`), one of them informational with one CVE;
    // 52 CentOS local checks name 155 packages.
    Stated {
        file: "python-libnessus_centos63-credentialed-pci.nessus",
        by_severity: [5, 44, 21, 3],
        informational: 94,
        cve_items: 67 - 1,
        cves: 156 - 1,
        entries: 176,
    },
    Stated {
        file: "sample-scan-files_7-windows-hosts_nessus-5.2.nessus",
        by_severity: [7, 23, 0, 0],
        informational: 265,
        cve_items: 7,
        cves: 7,
        entries: 30,
    },
];

#[test]
fn every_real_report_converts_with_the_counts_its_readme_states() {
    let reports = scanner_reports::real_reports(MANIFEST, "nessus");
    assert_eq!(reports.len(), STATED.len(), "a real report the test does not know");
    for (name, bytes) in reports {
        let stated = STATED.iter().find(|stated| stated.file == name).unwrap_or_else(|| panic!("{name}: not stated"));
        let converted = Nessus::convert(&bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(converted.scanner, "tenable", "{name}");
        assert_eq!(converted.scanned_classes, [PackageClass::Os, PackageClass::Other], "{name}");
        assert!(!converted.partial, "{name}");
        assert_eq!(converted.entries.len(), stated.entries, "{name}");
        let items = items(&converted);
        let by_severity = [Severity::Low, Severity::Medium, Severity::High, Severity::Critical]
            .map(|severity| items.iter().filter(|entry| entry.severity == severity).count());
        assert_eq!(by_severity, stated.by_severity, "{name}: items by severity");
        let cve_items: Vec<_> = items.iter().filter(|entry| report::is_cve(&entry.vulnerability_id)).collect();
        assert_eq!(cve_items.len(), stated.cve_items, "{name}: items naming CVEs");
        let cves: usize =
            cve_items.iter().map(|entry| 1 + entry.aliases.iter().filter(|alias| report::is_cve(alias)).count()).sum();
        assert_eq!(cves, stated.cves, "{name}: their CVEs");
        // Informational items are skipped, each saying so.
        assert_eq!(converted.skipped.len(), stated.informational, "{name}");
        assert!(
            converted.skipped.iter().all(|skipped| skipped.reason.starts_with("informational (severity 0)")
                && skipped.entry.starts_with("ReportHost ")),
            "{name}: {:?}",
            converted.skipped.first()
        );
        for entry in &converted.entries {
            let check = entry.check.as_deref().expect("every entry names its plugin");
            assert!(check.starts_with("nessus:") && check[7..].bytes().all(|b| b.is_ascii_digit()), "{check}");
            assert_eq!(
                entry.aliases.last().map(String::as_str),
                if report::is_cve(&entry.vulnerability_id) { Some(check) } else { None }
            );
            if !report::is_cve(&entry.vulnerability_id) {
                assert_eq!(entry.vulnerability_id, check, "{name}: without a CVE the plugin is the id");
            }
            assert!(entry.title.as_deref().is_some_and(|title| !title.is_empty()), "{name}: {check}");
            assert!(entry.description.as_deref().is_some_and(|text| !text.is_empty()), "{name}: {check}");
            assert!(converted.hosts.iter().any(|host| Some(&host.key) == entry.host.as_ref()), "{name}: {check}");
            match entry.class {
                PackageClass::Other => {
                    let location = entry.location.as_deref().expect("a port");
                    assert!(location.ends_with("/tcp") || location.ends_with("/udp"), "{name}: {location}");
                }
                _ => assert_eq!((entry.class, entry.location.as_deref()), (PackageClass::Os, None), "{name}"),
            }
            // No report here predates the plugins' CVSS v2 scores but one item.
            assert!(entry.cvss.iter().all(|rating| rating.source.as_deref() == Some("tenable")), "{name}");
        }
        assert!(converted.hosts.iter().all(|host| host.agent_id.is_none()), "{name}");
        assert!(converted.scanned_at.is_some(), "{name}");
    }
}

#[test]
fn the_credentialed_centos_scan_names_its_os_packages_with_installed_and_fixed_versions() {
    let converted = real("python-libnessus_centos63-credentialed-pci.nessus");
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!(host.key, "127.0.0.1");
    // `host-fqdn` is the short name `python-dev`: a host name, not an FQDN.
    assert_eq!((host.hostname.as_str(), host.fqdn.as_deref()), ("python-dev", None));
    assert_eq!(host.ip.as_deref(), Some("127.0.0.1"));
    // The tag ends in a newline.
    assert_eq!(host.mac_address.as_deref(), Some("08:00:27:41:f0:43"));
    let os = host.operating_system.as_ref().expect("an OS");
    assert_eq!(os.name, "Linux Kernel 2.6.32-279.el6.x86_64 on CentOS release 6.3 (Final)");
    assert_eq!(os.family.as_deref(), Some("linux"));
    assert_eq!(converted.scanned_at.as_deref(), Some("2014-01-07T08:19:20Z"), "HOST_START read as UTC");
    assert_eq!((converted.tool.as_deref(), converted.scanner_version.as_deref()), (Some("nessus"), Some("5.2.4")));

    let packages: Vec<&ReportEntry> =
        converted.entries.iter().filter(|entry| entry.class == PackageClass::Os).collect();
    assert_eq!(packages.len(), 155);
    assert!(packages.iter().all(|entry| entry.package.version.is_some() && entry.fixed_version.is_some()));
    assert!(packages.iter().all(|entry| entry.package.package_manager.as_deref() == Some("dnf")
        && entry.package.ecosystem.as_deref() == Some("rpm")));
    let pixman = packages.iter().find(|entry| entry.package.name == "pixman").expect("pixman");
    assert_eq!(pixman.check.as_deref(), Some("nessus:71584"));
    assert_eq!(pixman.package.version.as_deref(), Some("0.26.2-5.el6_4"));
    assert_eq!(pixman.fixed_version.as_deref(), Some("0.26.2-5.1.el6_5"));
    assert_eq!(pixman.title.as_deref(), Some("CentOS 5 / 6 : pixman (CESA-2013:1869)"));
    // One plugin, five packages: five entries of one check.
    let nspr: Vec<(&str, Option<&str>, Option<&str>)> = packages
        .iter()
        .filter(|entry| entry.check.as_deref() == Some("nessus:64381"))
        .map(|entry| (entry.package.name.as_str(), entry.package.version.as_deref(), entry.fixed_version.as_deref()))
        .collect();
    assert_eq!(
        nspr,
        [
            ("nspr", Some("4.9-1.el6"), Some("4.9.2-0.el6_3.1")),
            ("nss", Some("3.13.3-6.el6"), Some("3.13.6-2.el6_3")),
            ("nss-sysinit", Some("3.13.3-6.el6"), Some("3.13.6-2.el6_3")),
            ("nss-tools", Some("3.13.3-6.el6"), Some("3.13.6-2.el6_3")),
            ("nss-util", Some("3.13.3-2.el6"), Some("3.13.6-1.el6_3")),
        ]
    );
    // Names with dashes and digits keep them.
    assert!(
        packages.iter().any(|entry| entry.package.name == "perl-Pod-Escapes"
            && entry.package.version.as_deref() == Some("1.04-127.el6"))
    );
    assert!(packages.iter().any(|entry| entry.package.name == "krb5-libs"));
    // "CentOS Update Set" is local but names no package: the host's `general` service.
    let update_set =
        converted.entries.iter().find(|entry| entry.check.as_deref() == Some("nessus:44340")).expect("44340");
    assert_eq!(
        (update_set.class, update_set.package.name.as_str(), update_set.location.as_deref()),
        (PackageClass::Other, "general", Some("0/tcp"))
    );
    // A remote check stating a fixed version keeps it, on its service.
    let openssh = converted.entries.iter().find(|entry| entry.check.as_deref() == Some("nessus:44081")).expect("44081");
    assert_eq!(
        (openssh.package.name.as_str(), openssh.package.version.as_deref(), openssh.location.as_deref()),
        ("ssh", None, Some("22/tcp"))
    );
    assert_eq!(openssh.fixed_version.as_deref(), Some("5.7"));
    let mysql = converted.entries.iter().find(|entry| entry.check.as_deref() == Some("nessus:64503")).expect("64503");
    assert_eq!(mysql.fixed_version.as_deref(), Some("5.5.33, 5.6.13"));
}

#[test]
fn hosts_of_the_three_host_scan_are_named_by_netbios_or_only_by_ip() {
    let converted = real("python-libnessus_3-hosts-ip-only.nessus");
    let described: Vec<_> = converted
        .hosts
        .iter()
        .map(|host| {
            (
                host.key.as_str(),
                host.hostname.as_str(),
                host.fqdn.as_deref(),
                host.netbios_name.as_deref(),
                host.ip.as_deref(),
                host.operating_system.as_ref().map(|os| (os.name.as_str(), os.family.as_deref().unwrap_or_default())),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            ("192.168.2.104", "192.168.2.104", None, None, Some("192.168.2.104"), None),
            ("192.168.2.101", "192.168.2.101", None, None, Some("192.168.2.101"), Some(("AIX 5.3", "other"))),
            (
                "192.168.2.100",
                "MIKE-MACBOOK",
                None,
                Some("MIKE-MACBOOK"),
                Some("192.168.2.100"),
                Some(("Linux Kernel 2.6 on Ubuntu 10.10 (maverick)", "linux"))
            ),
        ]
    );
    assert!(converted.hosts.iter().all(|host| host.mac_address.is_none()));
    // The earliest host start: all three started together.
    assert_eq!(converted.scanned_at.as_deref(), Some("2014-03-20T00:30:57Z"));
    // A host with informational items only is listed all the same (a clean scan of it).
    let keys: BTreeSet<&str> = converted.entries.iter().filter_map(|entry| entry.host.as_deref()).collect();
    assert_eq!(keys, BTreeSet::from(["192.168.2.100", "192.168.2.101"]));
    // One plugin on two ports of one host: two entries.
    let openssh: BTreeSet<_> = converted
        .entries
        .iter()
        .filter(|entry| entry.check.as_deref() == Some("nessus:44081"))
        .map(|entry| (entry.host.as_deref().unwrap_or_default(), entry.location.as_deref().unwrap_or_default()))
        .collect();
    assert!(
        openssh.contains(&("192.168.2.101", "22/tcp")) && openssh.contains(&("192.168.2.101", "2222/tcp")),
        "{openssh:?}"
    );
}

#[test]
fn the_vulnweb_scan_lists_plugin_58987_twice_on_80_tcp_and_rates_by_cvss_v3_first() {
    let converted = real("defectdojo_nessus-10.1-cvssv3_vulnweb.nessus");
    let [host] = converted.hosts.as_slice() else { panic!("{:?}", converted.hosts) };
    assert_eq!(
        (host.hostname.as_str(), host.fqdn.as_deref(), host.ip.as_deref()),
        ("testphp.vulnweb.com", Some("testphp.vulnweb.com"), Some("44.228.249.3"))
    );
    assert_eq!(host.operating_system.as_ref().and_then(|os| os.family.as_deref()), Some("linux"));
    // HOST_START_TIMESTAMP, exact; HOST_START (`Wed Mar 23 14:31:51 2022`) is the scanner's local time.
    assert_eq!(converted.scanned_at.as_deref(), Some("2022-03-23T13:31:51Z"));
    assert_eq!(converted.scanner_version.as_deref(), Some("10.1.1"));
    let unsupported: Vec<&ReportEntry> =
        converted.entries.iter().filter(|entry| entry.check.as_deref() == Some("nessus:58987")).collect();
    assert_eq!(unsupported.len(), 2);
    for entry in &unsupported {
        assert_eq!(
            (entry.package.name.as_str(), entry.location.as_deref(), entry.class, entry.severity),
            ("www", Some("80/tcp"), PackageClass::Other, Severity::Critical)
        );
        assert_eq!(entry.vulnerability_id, "nessus:58987");
        assert_eq!(entry.title.as_deref(), Some("PHP Unsupported Version Detection"));
    }
    // 27 CVEs on one plugin: the first is the id, the others and the plugin are aliases.
    let php = converted.entries.iter().find(|entry| entry.check.as_deref() == Some("nessus:24907")).expect("24907");
    assert_eq!(php.vulnerability_id, "CVE-2006-6383");
    assert_eq!(php.aliases[0], "CVE-2007-0905");
    assert_eq!(php.aliases.len(), 27);
    assert_eq!(php.aliases.last().map(String::as_str), Some("nessus:24907"));
    assert_eq!(php.fixed_version.as_deref(), Some("5.2.1"));
    // CVSS v3 and v2 given: v3 first; `CVSS2#` dropped from the v2 vector.
    let rated = converted.entries.iter().find(|entry| entry.cvss.len() == 2).expect("an item with v2 and v3");
    assert_eq!(rated.cvss[0].version, "3.0");
    assert_eq!(rated.cvss[1].version, "2.0");
    assert!(rated.cvss[1].vector.as_deref().is_some_and(|vector| vector.starts_with("AV:")), "{:?}", rated.cvss);
    assert!(converted.entries.iter().all(|entry| entry.severity_given.is_some()));
    // Tenable's rating stands even where it follows CVSS v2 (5.0) and not v3 (7.5).
    let rated_by_v2 =
        converted.entries.iter().find(|entry| entry.check.as_deref() == Some("nessus:142591")).expect("142591");
    assert_eq!(rated_by_v2.severity, Severity::Medium);
    assert_eq!((rated_by_v2.cvss[0].version.as_str(), rated_by_v2.cvss[0].base_score), ("3.0", Some(7.5)));
}

#[test]
fn the_seven_windows_hosts_are_named_by_their_short_names() {
    let converted = real("sample-scan-files_7-windows-hosts_nessus-5.2.nessus");
    assert_eq!(converted.hosts.len(), 7);
    let host = host(&converted, "qa3app01");
    assert_eq!(
        (host.hostname.as_str(), host.fqdn.as_deref(), host.netbios_name.as_deref(), host.ip.as_deref()),
        ("qa3app01", None, Some("QA3APP01"), Some("10.31.112.21"))
    );
    assert_eq!(host.mac_address.as_deref(), Some("00:50:56:81:01:b8"));
    let os = host.operating_system.as_ref().expect("an OS");
    assert_eq!(
        (os.name.as_str(), os.family.as_deref()),
        ("Microsoft Windows Server 2008 R2 Standard Service Pack 1", Some("windows"))
    );
    assert_eq!(converted.scanned_at.as_deref(), Some("2013-07-01T11:33:11Z"));
    assert_eq!(converted.scanner_version.as_deref(), Some("5.2.1"));
}

#[test]
fn nessus_reports_are_told_from_every_other_format() {
    scanner_reports::assert_detects_its_own_and_no_other::<Nessus>(MANIFEST, "nessus");
}

#[test]
fn hostile_xml_is_refused_saying_why() {
    scanner_reports::assert_refuses_hostile_xml::<Nessus>("NessusClientData_v2");
}

#[test]
fn hostile_and_other_input_is_not_nessus() {
    for (what, bytes) in scanner_reports::hostile_inputs() {
        assert_eq!(Nessus::detect(&bytes), Confidence::No, "{what}");
        let error = Nessus::convert(&bytes).expect_err(what);
        assert!(!error.to_string().is_empty(), "{what}");
    }
    assert_eq!(Nessus::detect(b"<NessusClientData><Report/></NessusClientData>"), Confidence::No);
    match Nessus::convert(b"<NessusClientData><Report/></NessusClientData>") {
        Err(ReportError::Unsupported(reason)) => assert!(reason.contains("<NessusClientData>"), "{reason}"),
        other => panic!("{other:?}"),
    }
    match Nessus::convert(
        b"<?xml version=\"1.0\"?>\n<NessusClientData_v2>\n<Report name=\"x\">\n<ReportHost name=\"a\">",
    ) {
        Err(ReportError::Invalid(reason)) => assert!(reason.contains("never closed"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// A one-host report with these host tags and items.
fn report_of(tags: &str, items: &str) -> Vec<u8> {
    format!(
        r#"<?xml version="1.0" ?>
<NessusClientData_v2>
<Report name="t" xmlns:cm="http://www.nessus.org/cm">
<ReportHost name="web-1"><HostProperties>{tags}</HostProperties>
{items}
</ReportHost>
</Report>
</NessusClientData_v2>"#
    )
    .into_bytes()
}

fn item(id: &str, severity: &str, port: &str, inner: &str) -> String {
    format!(
        r#"<ReportItem port="{port}" svc_name="general" protocol="tcp" severity="{severity}" pluginID="{id}" pluginName="Plugin {id}" pluginFamily="Misc."><plugin_type>local</plugin_type>{inner}</ReportItem>"#
    )
}

#[test]
fn host_tags_become_the_hosts_names_and_the_agent_tag_stays_out_of_agent_id() {
    let tags = r#"<tag name="host-ip">10.0.0.5</tag><tag name="host-fqdn">web-1.corp.example</tag>
        <tag name="netbios-name">WEB-1</tag><tag name="mac-address">not-a-mac
00:1A:2B:3C:4D:5E
00:1a:2b:3c:4d:5f
</tag><tag name="TAG">0123456789abcdef0123456789abcdef</tag><tag name="os">windows</tag>
        <tag name="HOST_START">Mon Jul  1 11:33:11 2013</tag>"#;
    let converted = Nessus::convert(&report_of(tags, &item("1", "2", "0", ""))).expect("converts");
    let [host] = converted.hosts.as_slice() else { panic!() };
    assert_eq!(host.key, "web-1");
    assert_eq!(host.hostname, "web-1.corp.example");
    assert_eq!(host.fqdn.as_deref(), Some("web-1.corp.example"));
    assert_eq!(host.netbios_name.as_deref(), Some("WEB-1"));
    assert_eq!(host.mac_address.as_deref(), Some("00:1A:2B:3C:4D:5E"));
    assert_eq!(host.agent_id, None, "Tenable's agent id is not esr's");
    let os = host.operating_system.as_ref().expect("an OS from `os`");
    assert_eq!((os.name.as_str(), os.family.as_deref()), ("windows", Some("windows")));
    assert_eq!(converted.scanned_at.as_deref(), Some("2013-07-01T11:33:11Z"));
    assert_eq!(converted.entries[0].host.as_deref(), Some("web-1"));
    // No name but the address: the address names it; a name with a space is none.
    let converted =
        Nessus::convert(&report_of(r#"<tag name="host-fqdn">No registered hostname</tag>"#, &item("1", "2", "0", "")))
            .expect("converts");
    assert_eq!((converted.hosts[0].hostname.as_str(), converted.hosts[0].fqdn.as_deref()), ("web-1", None));
}

#[test]
fn windows_and_debian_local_checks_name_their_packages() {
    let windows = item(
        "100",
        "3",
        "445",
        "<plugin_output>\n  Path              : C:\\Program Files\\Mozilla Firefox\\\n  Installed version : 90.0\n  Fixed version     : 91.0\n\n  Path              : D:\\Firefox\\\n  Installed version : 89.0\n  Fixed version     : 91.0\n</plugin_output>",
    );
    let bulletin = item(
        "101",
        "4",
        "445",
        "<plugin_output>\n  - C:\\Windows\\system32\\win32k.sys has not been patched.\n    Remote version : 6.1.7601.17514\n    Should be      : 6.1.7601.22016\n</plugin_output>",
    );
    let product = item(
        "102",
        "2",
        "0",
        "<plugin_output>\n  Product           : Microsoft Office 2010\n  Installed version : 14.0.1\n  Fixed version     : 14.0.2 / 15.0.1\n</plugin_output>",
    );
    let converted = Nessus::convert(&report_of(
        r#"<tag name="operating-system">Microsoft Windows 10 Pro</tag>"#,
        &format!("{windows}{bulletin}{product}"),
    ))
    .expect("converts");
    let named: Vec<_> = converted
        .entries
        .iter()
        .map(|entry| {
            (
                entry.check.as_deref().unwrap_or_default(),
                entry.package.name.as_str(),
                entry.package.version.as_deref(),
                entry.fixed_version.as_deref(),
                entry.class,
                entry.package.package_manager.as_deref(),
            )
        })
        .collect();
    let os = PackageClass::Os;
    assert_eq!(
        named,
        [
            ("nessus:100", "C:\\Program Files\\Mozilla Firefox\\", Some("90.0"), Some("91.0"), os, Some("msi")),
            ("nessus:100", "D:\\Firefox\\", Some("89.0"), Some("91.0"), os, Some("msi")),
            (
                "nessus:101",
                "C:\\Windows\\system32\\win32k.sys",
                Some("6.1.7601.17514"),
                Some("6.1.7601.22016"),
                os,
                Some("msi")
            ),
            ("nessus:102", "Microsoft Office 2010", Some("14.0.1"), Some("14.0.2, 15.0.1"), os, Some("msi")),
        ]
    );
    assert!(converted.entries.iter().all(|entry| entry.location.is_none()));

    let debian = format!(
        r#"<ReportItem port="0" svc_name="general" protocol="tcp" severity="3" pluginID="200" pluginName="Debian DSA-1 : gcc" pluginFamily="Debian Local Security Checks"><plugin_type>local</plugin_type><plugin_output>{}</plugin_output></ReportItem>"#,
        "Remote package installed : cpp-4.9_4.9.2-10\nShould be : cpp-4.9_4.9.2-10+deb8u1\n\nRemote package installed : gcc-4.9-base_4.9.2-10\nShould be : gcc-4.9-base_4.9.2-10+deb8u1\n"
    );
    let converted = Nessus::convert(&report_of(
        r#"<tag name="operating-system">Linux Kernel 3.16.0-4-amd64 on Debian 8.7</tag>"#,
        &debian,
    ))
    .expect("converts");
    let named: Vec<_> = converted
        .entries
        .iter()
        .map(|entry| (entry.package.name.as_str(), entry.package.version.as_deref(), entry.fixed_version.as_deref()))
        .collect();
    assert_eq!(
        named,
        [
            ("cpp-4.9", Some("4.9.2-10"), Some("4.9.2-10+deb8u1")),
            ("gcc-4.9-base", Some("4.9.2-10"), Some("4.9.2-10+deb8u1"))
        ]
    );
    assert_eq!(converted.entries[0].package.ecosystem.as_deref(), Some("deb"));
    assert_eq!(converted.entries[0].package.package_manager.as_deref(), Some("apt"));
}

#[test]
fn package_strings_split_into_name_and_version() {
    let split = |text: &str, debian: bool| {
        let (name, version, ecosystem) = split_package(text, debian);
        (name, version, ecosystem)
    };
    let owned = |name: &str, version: &str, ecosystem: &'static str| {
        (name.to_owned(), Some(version.to_owned()), Some(ecosystem))
    };
    assert_eq!(split("pixman-0.26.2-5.el6_4", false), owned("pixman", "0.26.2-5.el6_4", "rpm"));
    assert_eq!(split("bind-libs-32:9.11.4-26.P2.el7_9.5", false), owned("bind-libs", "32:9.11.4-26.P2.el7_9.5", "rpm"));
    assert_eq!(
        split("java-1.8.0-openjdk-1.8.0.292.b10-1.el7_9", false),
        owned("java-1.8.0-openjdk", "1.8.0.292.b10-1.el7_9", "rpm")
    );
    assert_eq!(split("musl-1.1.24-r2", false), owned("musl", "1.1.24-r2", "apk"));
    assert_eq!(split("libssl1.0.0_1.0.1e-2+deb7u4", true), owned("libssl1.0.0", "1.0.1e-2+deb7u4", "deb"));
    assert_eq!(split("openssl", false), ("openssl".to_owned(), None, None));
    // A different package in `Should be`: kept as given.
    let renamed = linux_package("foo-1.0-1.el7", Some("bar-2.0-1.el7"), false);
    assert_eq!((renamed.name.as_str(), renamed.fixed_version.as_deref()), ("foo", Some("bar-2.0-1.el7")));
}

#[test]
fn ratings_severities_and_what_is_skipped() {
    let rated = item(
        "300",
        "4",
        "443",
        "<cve>CVE-2024-0002</cve><cve>cve-2024-0001</cve><cve>CVE-2024-0002</cve><cve>not-a-cve</cve>\
         <cvss4_base_score>9.3</cvss4_base_score><cvss4_vector>AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N</cvss4_vector>\
         <cvss3_base_score>9.8</cvss3_base_score><cvss3_vector>CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H</cvss3_vector>\
         <cvss_base_score>7.5</cvss_base_score><cvss_vector>AV:N/AC:L/Au:N/C:P/I:P/A:P</cvss_vector>\
         <epss_score>0.9436</epss_score><xref>CISA-KNOWN-EXPLOITED:2021/12/10</xref>\
         <description>Bad.</description><solution>Upgrade.</solution>",
    )
    .replace("<plugin_type>local</plugin_type>", "<plugin_type>remote</plugin_type>");
    let without_severity = r#"<ReportItem port="80" svc_name="www" protocol="tcp" pluginID="301" pluginName="P"><risk_factor>High</risk_factor></ReportItem>"#;
    let informational = item("302", "0", "0", "");
    let compliance = item(
        "21157",
        "3",
        "0",
        "<cm:compliance-check-name>1.1 Ensure /tmp is a separate partition</cm:compliance-check-name><cm:compliance-result>FAILED</cm:compliance-result>",
    );
    let no_id = r#"<ReportItem port="0" protocol="tcp" severity="2" pluginName="P"></ReportItem>"#;
    let converted =
        Nessus::convert(&report_of("", &format!("{rated}{without_severity}{informational}{compliance}{no_id}")))
            .expect("converts");
    let [first, second] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
    assert_eq!(first.vulnerability_id, "CVE-2024-0002");
    assert_eq!(first.aliases, ["CVE-2024-0001", "nessus:300"]);
    assert_eq!(first.cvss.iter().map(|rating| rating.version.as_str()).collect::<Vec<_>>(), ["4.0", "3.1", "2.0"]);
    assert_eq!(first.cvss[0].vector.as_deref().map(|vector| &vector[..9]), Some("CVSS:4.0/"));
    assert_eq!(first.cvss[0].base_score, Some(9.3));
    assert_eq!((first.severity, first.severity_given.as_deref()), (Severity::Critical, Some("4")));
    assert_eq!(first.epss.as_ref().map(|epss| epss.score), Some(0.9436));
    assert_eq!(first.kev, Some(true));
    assert_eq!(first.description.as_deref(), Some("Bad.\n\nSolution: Upgrade."));
    assert_eq!(
        (first.package.name.as_str(), first.location.as_deref(), first.class),
        ("general", Some("443/tcp"), PackageClass::Other)
    );
    assert_eq!((second.severity, second.severity_given.as_deref()), (Severity::High, Some("High")));
    assert_eq!((second.package.name.as_str(), second.kev), ("www", None));
    let reasons: Vec<&str> = converted.skipped.iter().map(|skipped| skipped.reason.as_str()).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].starts_with("informational (severity 0)"), "{reasons:?}");
    assert!(reasons[1].contains("compliance check (FAILED: 1.1 Ensure /tmp"), "{reasons:?}");
    assert!(reasons[2].contains("no pluginID"), "{reasons:?}");
    assert!(converted.skipped[1].entry.contains("ReportItem 21157 on 0/tcp"), "{:?}", converted.skipped);
}

#[test]
fn a_report_past_the_entry_bound_is_refused() {
    let packages: String =
        (0..=report::MAX_ENTRIES).map(|index| format!("Remote package installed : p{index}-1.0-1.el7\n")).collect();
    let report = report_of("", &item("400", "2", "0", &format!("<plugin_output>{packages}</plugin_output>")));
    assert_refused_past_max_entries(Nessus::convert(&report), "packages a plugin names");
}
