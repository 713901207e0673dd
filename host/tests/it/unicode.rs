//! Look-alike and invisible text, end to end: names written with
//! invisible characters or letters of another script are refused where
//! they are stored, and names written in compatibility forms (full-width,
//! mathematical, circled letters) are matched as the plain name, so that
//! none escapes a scope written for it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};

/// What becomes of a look-alike of `openssl`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// Refused, the reason saying this.
    Refused(&'static str),
    /// Taken as `openssl` itself.
    Openssl,
}

use Outcome::{Openssl, Refused};

/// The 17 look-alikes of `openssl` the issue found stored as packages of
/// their own.
const LOOK_ALIKES: [(&str, &str, Outcome); 17] = [
    ("full-width", "ｏｐｅｎｓｓｌ", Openssl),
    ("mathematical bold", "𝐨𝐩𝐞𝐧𝐬𝐬𝐥", Openssl),
    ("circled", "ⓞⓟⓔⓝⓢⓢⓛ", Openssl),
    ("zero-width space", "open\u{200B}ssl", Refused("invisible format character U+200B (zero-width space)")),
    ("zero-width non-joiner", "open\u{200C}ssl", Refused("invisible format character U+200C")),
    ("zero-width joiner", "open\u{200D}ssl", Refused("invisible format character U+200D")),
    ("word joiner", "opens\u{2060}sl", Refused("invisible format character U+2060 (word joiner)")),
    ("byte order mark", "\u{FEFF}openssl", Refused("invisible format character U+FEFF (byte order mark)")),
    ("soft hyphen", "open\u{00AD}ssl", Refused("invisible format character U+00AD (soft hyphen)")),
    ("tag characters", "openssl\u{E0020}\u{E0078}", Refused("invisible format character U+E0020 (tag character)")),
    ("variation selector 16", "openssl\u{FE0F}", Refused("U+FE0F (a variation selector)")),
    ("variation selector 17", "open\u{E0100}ssl", Refused("U+E0100 (a variation selector)")),
    ("Cyrillic o", "\u{043E}penssl", Refused("mixes the Cyrillic and Latin scripts")),
    ("Cyrillic e and p", "o\u{0440}\u{0435}nssl", Refused("mixes the Cyrillic and Latin scripts")),
    ("Greek omicron", "\u{03BF}penssl", Refused("mixes the Greek and Latin scripts")),
    ("trailing line separator", "openssl\u{2028}", Refused("line or paragraph separator U+2028")),
    ("trailing paragraph separator", "openssl\u{2029}", Refused("line or paragraph separator U+2029")),
];

/// Beyond the 17: more characters the same rules refuse.
const MORE_HIDDEN: [(&str, &str, Outcome); 4] = [
    ("interlinear annotation", "\u{FFF9}openssl\u{FFFA}ssl\u{FFFB}", Refused("U+FFF9 (interlinear annotation)")),
    ("noncharacter", "openssl\u{FDD0}", Refused("noncharacter U+FDD0")),
    ("Hangul filler", "open\u{3164}ssl", Refused("U+3164 (a Hangul filler)")),
    ("combining grapheme joiner", "open\u{034F}ssl", Refused("U+034F (the combining grapheme joiner)")),
];

fn new_organization(server: &Server, name: &str) -> (String, String) {
    server.organization_with_key(name, &["endpoints:read", "targets:read", "scopes:read", "findings:read"])
}

/// Imports the endpoint `web-1`; its id.
fn import_web_1(server: &Server, organization: &str) -> String {
    let line = json!({"hostname": "web-1", "operating_system": {"name": "Debian 12", "family": "linux"}});
    let (status, answer) = import(server, organization, "endpoints", &[line]);
    assert_eq!(status, 200, "{answer}");
    answer["ids"][0].as_str().unwrap().to_owned()
}

fn import(server: &Server, organization: &str, collection: &str, lines: &[Value]) -> (u16, Value) {
    let response = server.import_lines(organization, collection, lines);
    (response.status().as_u16(), response.json().unwrap_or(Value::Null))
}

fn post_report(server: &Server, organization: &str, report: &Value) -> (u16, Value) {
    let response = server
        .admin(
            Method::POST,
            &format!("/admin/v1/organizations/{organization}/reports?format=trivy&createEndpoint=true&endpoint=web-1"),
        )
        .header("content-type", "application/json")
        .body(report.to_string())
        .send()
        .unwrap();
    (response.status().as_u16(), response.json().unwrap_or(Value::Null))
}

/// Every record of a collection the key reads.
fn all(server: &Server, key: &str, collection: &str) -> Vec<Value> {
    let mut records = Vec::new();
    loop {
        let url = server.url(&format!("/v1/{collection}?limit=100&offset={}", records.len()));
        let page: Value = server.client.get(url).bearer_auth(key).send().unwrap().json().unwrap();
        let data = page["data"].as_array().unwrap_or_else(|| panic!("{page}"));
        records.extend(data.iter().cloned());
        if data.is_empty() || records.len() as u64 >= page["total"].as_u64().unwrap() {
            return records;
        }
    }
}

/// A Trivy report of the Debian packages of one image: (vulnerability,
/// package) pairs, each installed at 3.0.11-1 and fixed in 3.0.13-1.
fn trivy_report(minute: usize, vulnerabilities: &[(&str, &str)]) -> Value {
    let vulnerabilities: Vec<Value> = vulnerabilities
        .iter()
        .map(|(id, package)| {
            json!({
                "VulnerabilityID": id, "PkgName": package, "InstalledVersion": "3.0.11-1",
                "FixedVersion": "3.0.13-1", "Severity": "HIGH", "Title": format!("{id}: a flaw in OpenSSL"),
            })
        })
        .collect();
    json!({
        "SchemaVersion": 2,
        "CreatedAt": format!("2026-11-01T{:02}:{:02}:00Z", minute / 60, minute % 60),
        "ArtifactName": "registry.example/web:1",
        "ArtifactType": "container_image",
        "Metadata": {"OS": {"Family": "debian", "Name": "12.4"}},
        "Results": [{
            "Target": "registry.example/web:1 (debian 12.4)", "Class": "os-pkgs", "Type": "debian",
            "Vulnerabilities": vulnerabilities,
        }],
    })
}

/// An active scope of `openssl` with a 30-day SLA for high findings.
fn openssl_scope(products: &[&str]) -> Value {
    json!({
        "name": "OpenSSL everywhere", "status": "active",
        "subject_filter": {"products": products},
        "sla_days": {"critical": 7, "high": 30},
    })
}

#[test]
fn look_alikes_of_openssl_in_reports_are_refused_or_join_the_openssl_target_its_scope_queues() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "look-alikes");
    assert_eq!(import(&server, &organization, "scopes", &[openssl_scope(&["openssl"])]).0, 200);
    let scope_id = all(&server, &key, "scopes")[0]["id"].clone();

    let (status, first) = post_report(&server, &organization, &trivy_report(0, &[("CVE-2024-0001", "openssl")]));
    assert_eq!((status, first["targets_created"].as_u64()), (200, Some(1)), "{first}");
    let targets = all(&server, &key, "remediation-targets");
    let openssl = targets[0].clone();
    assert_eq!((openssl["status"].as_str(), openssl["scope_ids"].clone()), (Some("queued"), json!([scope_id])));
    assert!(openssl["due_at"].is_string(), "{openssl}");

    // Each look-alike beside openssl itself, in a report of its own.
    let mut wrong = Vec::new();
    let mut joined = 0;
    for (index, (label, name, expected)) in LOOK_ALIKES.iter().chain(&MORE_HIDDEN).enumerate() {
        let cve = format!("CVE-2024-1{index:03}");
        let before = all(&server, &key, "vulnerability-findings").len();
        let report = trivy_report(index + 1, &[("CVE-2024-0001", "openssl"), (&cve, name)]);
        let (status, answer) = post_report(&server, &organization, &report);
        match expected {
            Refused(reason) => {
                let refusal = &answer["invalid_entries"][0];
                let named = refusal["entry"].as_str().is_some_and(|entry| entry.starts_with("entries[1]"))
                    && refusal["field"] == "package.name"
                    && refusal["reason"].as_str().is_some_and(|said| said.contains(reason))
                    && answer["invalid_entries"].as_array().map(Vec::len) == Some(1);
                let written = all(&server, &key, "vulnerability-findings").len() - before;
                if status != 422 || !named || written != 0 {
                    wrong.push(format!(
                        "{label}: not refused naming entries[1] package.name ({reason}), {written} finding(s) written: {status} {answer}"
                    ));
                }
            }
            Openssl => {
                let findings = all(&server, &key, "vulnerability-findings");
                let finding = findings.iter().find(|finding| finding["cve_id"] == cve.as_str());
                let target = finding.map(|finding| finding["remediation_target_id"].clone());
                if status != 200 || answer["targets_created"] != 0 || target.as_ref() != Some(&openssl["id"]) {
                    wrong.push(format!("{label}: not on the openssl target: {status} {answer} {finding:?}"));
                } else {
                    joined += 1;
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {} look-alikes wrong:\n{}", wrong.len(), 17 + MORE_HIDDEN.len(), wrong.join("\n"));

    // One target for every spelling of openssl, still queued by the scope with its due date.
    let targets = all(&server, &key, "remediation-targets");
    assert_eq!(targets.len(), 1, "{targets:?}");
    let target = &targets[0];
    assert_eq!(target["id"], openssl["id"]);
    assert_eq!(target["subject"]["product"], "openssl");
    assert_eq!((target["status"].as_str(), target["scope_ids"].clone()), (Some("queued"), json!([scope_id])));
    assert_eq!(target["due_at"], openssl["due_at"]);
    assert_eq!(target["finding_ids"].as_array().unwrap().len(), 1 + joined);
    assert_eq!(joined, 3, "full-width, mathematical and circled letters are openssl");
}

#[test]
fn look_alikes_of_openssl_in_imported_records_are_refused_naming_line_and_field() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "imported");
    let endpoint = import_web_1(&server, &organization);
    let target = |product: &str| {
        json!({
            "endpoint_id": endpoint, "target_type": "os_patch", "discovery_method": "passive", "status": "identified",
            "subject": {"type": "software", "vendor": "OpenSSL Project", "product": product},
            "installed_version": "3.0.11-1",
        })
    };
    let variants: Vec<_> = LOOK_ALIKES.iter().chain(&MORE_HIDDEN).collect();
    let lines: Vec<Value> = variants.iter().map(|(_, name, _)| target(name)).collect();
    let (status, answer) = import(&server, &organization, "remediation-targets", &lines);
    assert_eq!(status, 422, "{answer}");
    let invalid = answer["invalid_lines"].as_array().unwrap();
    let mut wrong = Vec::new();
    for (index, (label, _, expected)) in variants.iter().enumerate() {
        let line = index as u64 + 1;
        let listed: Vec<&Value> = invalid.iter().filter(|error| error["line"] == line).collect();
        let right = match expected {
            Refused(reason) => {
                listed.len() == 1
                    && listed[0]["field"] == "subject.product"
                    && listed[0]["reason"].as_str().is_some_and(|said| said.contains(reason))
            }
            Openssl => listed.is_empty(),
        };
        if !right {
            wrong.push(format!("line {line} ({label}): expected {expected:?}, listed {listed:?}"));
        }
    }
    assert!(wrong.is_empty(), "{} of {} lines wrong:\n{}", wrong.len(), variants.len(), wrong.join("\n"));
    assert!(all(&server, &key, "remediation-targets").is_empty(), "nothing written");

    // The same rules in the other fields records are matched by, and in text.
    let refused = [
        (
            "endpoints",
            json!({"hostname": "web-2", "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": ["prod\u{FE0F}"]}),
            "tags[0]",
            "variation selector",
        ),
        (
            "endpoints",
            json!({"hostname": "web-2", "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": ["\u{0440}rod"]}),
            "tags[0]",
            "mixes the Cyrillic and Latin scripts",
        ),
        (
            "endpoints",
            json!({"hostname": "web-2", "operating_system": {"name": "Debian\u{200B} 12", "family": "linux"}}),
            "operating_system.name",
            "U+200B",
        ),
        (
            "endpoints",
            json!({"hostname": "web-2", "operating_system": {"name": "Debian 12", "family": "linux"}, "owner": {"name": "IT\u{2029}ops"}}),
            "owner.name",
            "U+2029",
        ),
        ("scopes", openssl_scope(&["open\u{00AD}ssl"]), "subject_filter.products[0]", "U+00AD"),
        (
            "scopes",
            json!({"name": "Vendors", "status": "active", "subject_filter": {"vendors": ["\u{041E}penSSL"]}}),
            "subject_filter.vendors[0]",
            "mixes the Cyrillic and Latin scripts",
        ),
        (
            "scopes",
            json!({"name": "Notes", "status": "active", "description": "fine\nthen hidden\u{200B}"}),
            "description",
            "U+200B",
        ),
        (
            "scopes",
            json!({"name": "Notes", "status": "active", "description": "bad \u{FFFF}"}),
            "description",
            "noncharacter U+FFFF",
        ),
    ];
    for (collection, line, field, reason) in refused {
        let (status, answer) = import(&server, &organization, collection, &[line]);
        let error = &answer["invalid_lines"][0];
        assert!(
            status == 422 && error["field"] == field && error["reason"].as_str().unwrap_or("").contains(reason),
            "{field}: {status} {answer}"
        );
    }
    // Multi-line text keeps its line and paragraph breaks, and the joiners
    // Persian spelling and emoji need.
    let description = "Patch first:\n\t- web\u{2029}- db \u{1F468}\u{200D}\u{1F4BB} \u{0645}\u{06CC}\u{200C}\u{062E}\u{0648}\u{0627}\u{0647}\u{0645}";
    let (status, answer) = import(
        &server,
        &organization,
        "scopes",
        &[json!({"name": "Notes", "status": "active", "description": description})],
    );
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn names_written_in_compatibility_forms_match_the_openssl_of_reports() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "compatibility");
    // A scope written in full-width capitals, and a target stored in
    // mathematical letters for the package the report will name.
    assert_eq!(import(&server, &organization, "scopes", &[openssl_scope(&["ＯｐｅｎＳＳＬ"])]).0, 200);
    let scope_id = all(&server, &key, "scopes")[0]["id"].clone();
    let endpoint = import_web_1(&server, &organization);
    let stored = json!({
        "endpoint_id": endpoint, "target_type": "os_patch", "discovery_method": "passive", "status": "actionable",
        "subject": {"type": "software", "vendor": null, "product": "𝐨𝐩𝐞𝐧𝐬𝐬𝐥"},
        "installed_version": "3.0.11-1", "package_manager": "apt",
    });
    let (status, answer) = import(&server, &organization, "remediation-targets", &[stored]);
    assert_eq!(status, 200, "{answer}");
    let stored_id = answer["ids"][0].clone();

    let (status, answer) = post_report(&server, &organization, &trivy_report(0, &[("CVE-2024-0001", "openssl")]));
    assert_eq!((status, answer["targets_created"].as_u64()), (200, Some(0)), "{answer}");
    let targets = all(&server, &key, "remediation-targets");
    assert_eq!(targets.len(), 1, "{targets:?}");
    let target = &targets[0];
    assert_eq!(target["id"], stored_id);
    assert_eq!((target["status"].as_str(), target["scope_ids"].clone()), (Some("queued"), json!([scope_id])));
    assert!(target["due_at"].is_string(), "{target}");
    let findings = all(&server, &key, "vulnerability-findings");
    assert_eq!(findings[0]["remediation_target_id"], stored_id);
}
