//! A host scanner's later scans through the real host, as for the other
//! formats: a scan that no longer lists a check resolves its finding, one
//! that lists it again reopens it, and an older scan changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::common::{Server, plugins_dir, reports_dir};
use crate::reports::{all, import_ok, new_organization};

const REPORT: &str = "nessus/defectdojo_nessus-10.1-cvssv3_vulnweb.nessus";

/// The report with its hosts' times `days` later.
fn days_later(report: &str, days: u64) -> String {
    let mut shifted = report.to_owned();
    for tag in ["HOST_START_TIMESTAMP", "HOST_END_TIMESTAMP"] {
        let open = format!("<tag name=\"{tag}\">");
        let at = shifted.find(&open).unwrap() + open.len();
        let end = at + shifted[at..].find('<').unwrap();
        let seconds: u64 = shifted[at..end].trim().parse().unwrap();
        shifted.replace_range(at..end, &(seconds + days * 86_400).to_string());
    }
    shifted
}

/// The report without its first item that is a finding (severity above
/// 0), and that item's plugin.
fn without_first_finding(report: &str) -> (String, String) {
    let mut at = 0;
    loop {
        let start = at + report[at..].find("<ReportItem ").unwrap();
        let tag_end = start + report[start..].find('>').unwrap();
        let end = start + report[start..].find("</ReportItem>").unwrap() + "</ReportItem>".len();
        let tag = &report[start..tag_end];
        if !tag.contains("severity=\"0\"") {
            let plugin = tag.split("pluginID=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
            return (format!("{}{}", &report[..start], &report[end..]), plugin);
        }
        at = end;
    }
}

fn statuses(server: &Server, key: &str) -> BTreeMap<String, String> {
    all(server, key, "vulnerability-findings", "")
        .iter()
        .map(|finding| {
            (
                finding["source"]["scanner_finding_id"].as_str().unwrap().to_owned(),
                finding["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_later_nessus_scan_resolves_what_it_no_longer_lists_and_reopens_what_it_lists_again() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "nessus-later");
    let report = std::fs::read_to_string(reports_dir().join(REPORT)).unwrap();
    import_ok(&server, &organization, "", report.clone().into_bytes());
    let first = statuses(&server, &key);
    assert!(first.values().all(|status| status == "open"), "{first:?}");

    let (without, plugin) = without_first_finding(&report);
    let check = format!(" nessus:{plugin} ");
    let gone: Vec<&String> = first.keys().filter(|identity| identity.contains(&check)).collect();
    assert!(!gone.is_empty(), "plugin {plugin} made a finding: {first:?}");
    let answer = import_ok(&server, &organization, "", days_later(&without, 1).into_bytes());
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
    let answer = import_ok(&server, &organization, "", days_later(&report, 2).into_bytes());
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
