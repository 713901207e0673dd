//! Host scanners' later scans through the real host, as for the other
//! formats (a real report, edited as the next scan would write it): a scan that no longer lists a check resolves its finding, one
//! that lists it again reopens it, and an older scan changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::common::{Server, plugins_dir, reports_dir};
use crate::reports::{all, import_ok, new_organization};

/// How a test edits one format's report: its records (a start and an end
/// marker), which of them are findings, the check each names, and its
/// scan time moved on.
struct Layout {
    file: &'static str,
    record_start: &'static str,
    record_end: &'static str,
    is_finding: fn(&str) -> bool,
    check_of: fn(&str) -> String,
    days_later: fn(&str, u64) -> String,
}

fn between<'a>(text: &'a str, before: &str, after: &str) -> &'a str {
    text.split(before).nth(1).unwrap().split(after).next().unwrap()
}

const NESSUS: Layout = Layout {
    file: "nessus/defectdojo_nessus-10.1-cvssv3_vulnweb.nessus",
    record_start: "<ReportItem ",
    record_end: "</ReportItem>",
    is_finding: |item| !item[..item.find('>').unwrap()].contains("severity=\"0\""),
    check_of: |item| format!("nessus:{}", between(item, "pluginID=\"", "\"")),
    days_later: |report, days| {
        let mut shifted = report.to_owned();
        for tag in ["HOST_START_TIMESTAMP", "HOST_END_TIMESTAMP"] {
            let open = format!("<tag name=\"{tag}\">");
            let at = shifted.find(&open).unwrap() + open.len();
            let end = at + shifted[at..].find('<').unwrap();
            let seconds: u64 = shifted[at..end].trim().parse().unwrap();
            shifted.replace_range(at..end, &(seconds + days * 86_400).to_string());
        }
        shifted
    },
};

const GREENBONE: Layout = Layout {
    file: "openvas/defectdojo_gmp9_metasploitable2.xml",
    record_start: "<result id=",
    record_end: "</result>",
    is_finding: |result| result.contains("<threat>High</threat>"),
    check_of: |result| format!("nvt:{}", between(result, "<nvt oid=\"", "\"")),
    days_later: |report, days| {
        report.replace("<scan_start>2023-09-26T", &format!("<scan_start>2023-09-{}T", 26 + days))
    },
};

const NEXPOSE: Layout = Layout {
    file: "nexpose/defectdojo_nexpose-2.0_4-ubuntu-nodes.xml",
    record_start: "<test ",
    record_end: "</test>",
    is_finding: |test| test.contains("status=\"vulnerable-"),
    check_of: |test| format!("nexpose:{}", between(test, "id=\"", "\"")),
    days_later: |report, days| report.replace("startTime=\"20210211T", &format!("startTime=\"202102{}T", 11 + days)),
};

const QUALYS: Layout = Layout {
    file: "qualys/sample-scan-files_asset-data-report_7-hosts.xml",
    record_start: "<VULN_INFO>",
    record_end: "</VULN_INFO>",
    is_finding: |info| info.contains("<TYPE>Vuln</TYPE>"),
    check_of: |info| format!("qid:{}", between(info, "\">", "</QID>")),
    days_later: |report, days| {
        report.replace("<GENERATION_DATETIME>2019-08-01T", &format!("<GENERATION_DATETIME>2019-08-0{}T", 1 + days))
    },
};

/// The report without any record of its first finding's check, and that
/// check.
fn without_first_check(report: &str, layout: &Layout) -> (String, String) {
    let records = |text: &str| -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        let mut at = 0;
        while let Some(offset) = text[at..].find(layout.record_start) {
            let start = at + offset;
            let end = start + text[start..].find(layout.record_end).unwrap() + layout.record_end.len();
            found.push((start, end));
            at = end;
        }
        found
    };
    let all = records(report);
    let (start, end) = *all.iter().find(|(start, end)| (layout.is_finding)(&report[*start..*end])).unwrap();
    let check = (layout.check_of)(&report[start..end]);
    let mut kept = String::new();
    let mut at = 0;
    for (start, end) in all {
        if (layout.check_of)(&report[start..end]) == check {
            kept.push_str(&report[at..start]);
            at = end;
        }
    }
    kept.push_str(&report[at..]);
    (kept, check)
}

/// Each finding's status by its endpoint and identity.
fn statuses(server: &Server, key: &str) -> BTreeMap<String, String> {
    all(server, key, "vulnerability-findings", "")
        .iter()
        .map(|finding| {
            (
                // The endpoint, then the identity: one check on several hosts is several findings.
                format!(
                    "{} {}",
                    finding["endpoint_id"].as_str().unwrap(),
                    finding["source"]["scanner_finding_id"].as_str().unwrap()
                ),
                finding["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A later scan resolves what it no longer lists, an older one changes
/// nothing, a later one listing it again reopens it.
fn later_scans_resolve_and_reopen(layout: &Layout) {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, layout.file);
    let report = std::fs::read_to_string(reports_dir().join(layout.file)).unwrap();
    import_ok(&server, &organization, "", report.clone().into_bytes());
    let first = statuses(&server, &key);
    assert!(first.values().all(|status| status == "open"), "{first:?}");

    let (without, check) = without_first_check(&report, layout);
    let check = format!(" {check} ");
    let gone: Vec<&String> = first.keys().filter(|identity| identity.contains(&check)).collect();
    assert!(!gone.is_empty(), "{check} made a finding: {first:?}");
    let answer = import_ok(&server, &organization, "", (layout.days_later)(&without, 1).into_bytes());
    assert_eq!(answer["resolved"], gone.len(), "{answer}");
    assert_eq!((answer["created"].as_u64(), answer["reopened"].as_u64()), (Some(0), Some(0)), "{answer}");
    let later = statuses(&server, &key);
    for (identity, status) in &later {
        let expected = if identity.contains(&check) { "resolved" } else { "open" };
        assert_eq!(status, expected, "{identity}");
    }

    // An older scan (the first one's time) listing everything changes nothing.
    let answer = import_ok(&server, &organization, "", report.clone().into_bytes());
    assert_eq!((answer["created"].as_u64(), answer["reopened"].as_u64()), (Some(0), Some(0)), "{answer}");
    assert_eq!(statuses(&server, &key), later, "an older scan changes nothing");

    // A later one listing the plugin again reopens its findings.
    let answer = import_ok(&server, &organization, "", (layout.days_later)(&report, 2).into_bytes());
    assert_eq!(
        (answer["reopened"].as_u64(), answer["resolved"].as_u64()),
        (Some(gone.len() as u64), Some(0)),
        "{answer}"
    );
    let again = statuses(&server, &key);
    for (identity, status) in &again {
        let expected = if identity.contains(&check) { "reopened" } else { "open" };
        assert_eq!(status, expected, "{identity}");
    }
}

#[test]
fn a_later_nessus_scan_resolves_what_it_no_longer_lists_and_reopens_what_it_lists_again() {
    later_scans_resolve_and_reopen(&NESSUS);
}

#[test]
fn a_later_greenbone_scan_resolves_what_it_no_longer_lists_and_reopens_what_it_lists_again() {
    later_scans_resolve_and_reopen(&GREENBONE);
}

#[test]
fn a_later_nexpose_scan_resolves_what_it_no_longer_lists_and_reopens_what_it_lists_again() {
    later_scans_resolve_and_reopen(&NEXPOSE);
}

#[test]
fn a_later_qualys_scan_resolves_what_it_no_longer_lists_and_reopens_what_it_lists_again() {
    later_scans_resolve_and_reopen(&QUALYS);
}

/// Snyk's reports carry no scan time (the import's is theirs): a report
/// without one vulnerability resolves its findings, the next listing it
/// again reopens them.
#[test]
fn a_later_snyk_test_resolves_what_it_no_longer_lists_and_reopens_what_it_lists_again() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "snyk-later");
    let query = "createEndpoint=true&endpoint=scanned-host";
    let bytes = std::fs::read(reports_dir().join("snyk/heimdall2_nodejs-goof_npm.json")).unwrap();
    let mut report: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    import_ok(&server, &organization, query, bytes.clone());
    let first = statuses(&server, &key);
    let vulnerabilities = report["vulnerabilities"].as_array_mut().unwrap();
    let id = vulnerabilities[0]["id"].as_str().unwrap().to_owned();
    vulnerabilities.retain(|vulnerability| vulnerability["id"] != id.as_str());
    // The finding's identity names its first CVE, else the Snyk id.
    let named: Vec<String> =
        std::iter::once(id.clone()).chain(report_cves(&bytes, &id)).map(|name| format!(" {name} ")).collect();
    let gone = first.keys().filter(|identity| named.iter().any(|name| identity.contains(name))).count();
    assert!(gone > 0, "{id}: {first:?}");
    let answer = import_ok(&server, &organization, query, serde_json::to_vec(&report).unwrap());
    assert_eq!((answer["resolved"].as_u64(), answer["created"].as_u64()), (Some(gone as u64), Some(0)), "{answer}");
    let answer = import_ok(&server, &organization, query, bytes);
    assert_eq!((answer["reopened"].as_u64(), answer["resolved"].as_u64()), (Some(gone as u64), Some(0)), "{answer}");
}

/// The CVEs the report gives vulnerability `id`.
fn report_cves(bytes: &[u8], id: &str) -> Vec<String> {
    let report: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    report["vulnerabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vulnerability| vulnerability["id"] == id)
        .flat_map(|vulnerability| vulnerability["identifiers"]["CVE"].as_array().cloned().unwrap_or_default())
        .filter_map(|cve| cve.as_str().map(str::to_owned))
        .collect()
}
