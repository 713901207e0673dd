//! The host scanners' and Snyk's reports through the real host, one
//! module per format; the shared helpers are in `reports.rs`.

mod hosts;
mod lifecycle;
mod nessus;
mod nexpose;
mod openvas;
mod qualys;
mod snyk;

use crate::common::Server;
use crate::reports::{all, import_ok, new_organization, post_report};
use serde_json::Value;

/// Each of the SDK's hostile XML documents, shaped as `root`, posted
/// through the real host (with `query`, e.g. the format): a `422` whose
/// detail names the `format`'s importer, the line and what was wrong; the
/// server answers after each, and nothing is written.
pub(crate) fn assert_hostile_xml_refused(server: &Server, format: &str, roots: &[&str], query: &str) {
    let (organization, key) = new_organization(server, &format!("{format}-hostile"));
    for root in roots {
        for (what, bytes) in esr_plugin_sdk::scanner_reports::hostile_xml_inputs(root) {
            let (status, problem) = post_report(server, &organization, query, bytes);
            assert_eq!(status, 422, "{root}, {what}: {problem}");
            let detail = problem["detail"].as_str().unwrap_or_default();
            let named = match what {
                "a billion laughs" | "an external entity naming a local file" | "an external entity naming a URL" => {
                    "declares a DTD"
                }
                "an entity never declared" => "&xxe;",
                "elements nested 100,000 deep" => "nest deeper",
                "a 50 MB text node" => "MiB of text",
                "invalid UTF-8" => "not UTF-8",
                other => panic!("a hostile input the test does not know: {other}"),
            };
            assert!(
                detail.contains(&format!("{format} report cannot be read"))
                    && detail.contains(named)
                    && detail.contains("line "),
                "{root}, {what}: {problem}"
            );
            assert_eq!(server.get("/v1/health").status(), 200, "{root}, {what}: the server answers after it");
        }
    }
    assert!(all(server, &key, "endpoints", "").is_empty(), "nothing was written");
    assert!(all(server, &key, "vulnerability-findings", "").is_empty(), "nothing was written");
}

/// The report imported again changes nothing: no finding created, updated
/// or resolved, and the findings read the same as `listed`.
pub(crate) fn assert_reimport_quiet(
    server: &Server,
    organization: &str,
    key: &str,
    query: &str,
    bytes: Vec<u8>,
    listed: &[Value],
    name: &str,
) {
    let again = import_ok(server, organization, query, bytes);
    assert_eq!(
        (again["created"].as_u64(), again["updated"].as_u64(), again["resolved"].as_u64()),
        (Some(0), Some(0), Some(0)),
        "{name}: {again}"
    );
    assert_eq!(all(server, key, "vulnerability-findings", ""), listed, "{name}: nothing moved");
}

/// The import's answer skipped `expected` entries, each with its reason.
pub(crate) fn assert_skipped_saying_why(answer: &Value, expected: usize, name: &str) {
    let skipped = answer["skipped"].as_array().unwrap_or_else(|| panic!("{name}: {answer}"));
    assert_eq!(skipped.len(), expected, "{name}: the entries skipped: {answer}");
    assert!(
        skipped.iter().all(|entry| !entry["reason"].as_str().unwrap_or_default().is_empty()),
        "{name}: every skipped entry says why: {answer}"
    );
}
