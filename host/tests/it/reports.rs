//! Scanner reports in, end to end: the real host, the real importer
//! components and the real reports under `../shared/scanner-reports/`
//! (`ESR_SCANNER_REPORTS_DIR`, set by `make test`), read from there at test
//! time. Each report is also read here, independently of the importers,
//! to check what came out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{Server, memory_figure, plugins_dir, read_json, reports_dir, reset_peak_memory, trivy_report_of};
use reqwest::Method;
use serde_json::{Value, json};

pub(crate) fn report_files(format: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(reports_dir().join(format)).unwrap().map(|entry| entry.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no {format} reports");
    files
}

/// Creates an organization and a key reading everything; (id, key).
pub(crate) fn new_organization(server: &Server, name: &str) -> (String, String) {
    server.organization_with_key(name, &["endpoints:read", "targets:read", "scopes:read", "findings:read"])
}

/// `POST …/reports` with the query; (status, body).
pub(crate) fn post_report(server: &Server, organization: &str, query: &str, body: Vec<u8>) -> (u16, Value) {
    let response = server
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/reports?{query}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

pub(crate) fn import_ok(server: &Server, organization: &str, query: &str, body: Vec<u8>) -> Value {
    let (status, answer) = post_report(server, organization, query, body);
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Every record of a collection the key reads.
pub(crate) fn all(server: &Server, key: &str, collection: &str, filter: &str) -> Vec<Value> {
    let mut records = Vec::new();
    loop {
        let url = server.url(&format!("/v1/{collection}?limit=100&offset={}{filter}", records.len()));
        let page: Value = server.client.get(url).bearer_auth(key).send().unwrap().json().unwrap();
        let data = page["data"].as_array().unwrap_or_else(|| panic!("{page}"));
        records.extend(data.iter().cloned());
        if data.is_empty() || records.len() as u64 >= page["total"].as_u64().unwrap() {
            return records;
        }
    }
}

/// A Trivy report's vulnerabilities as this test reads them: identity
/// (class, id, package, location) → the severity the mapping table gives
/// (`None` where it depends on CVSS: UNKNOWN with scores).
fn trivy_expected(report: &Value) -> BTreeMap<(String, String, String, String), Option<&'static str>> {
    let results: Vec<&Value> = match report {
        Value::Array(results) => results.iter().collect(),
        _ => report["Results"].as_array().map(|r| r.iter().collect()).unwrap_or_default(),
    };
    let mut expected = BTreeMap::new();
    for result in results {
        let class = match result["Class"].as_str() {
            None | Some("os-pkgs") => "os",
            Some("lang-pkgs") => "language",
            Some(_) => continue,
        };
        for vulnerability in result["Vulnerabilities"].as_array().into_iter().flatten() {
            let location = match class {
                "os" => String::new(),
                _ => vulnerability["PkgPath"]
                    .as_str()
                    .filter(|p| !p.is_empty())
                    .unwrap_or(result["Target"].as_str().unwrap())
                    .to_owned(),
            };
            let severity = match vulnerability["Severity"].as_str().unwrap_or("UNKNOWN") {
                "CRITICAL" => Some("critical"),
                "HIGH" => Some("high"),
                "MEDIUM" => Some("medium"),
                "LOW" => Some("low"),
                _ if vulnerability.get("CVSS").is_none() => Some("info"),
                _ => None,
            };
            let key = (
                class.to_owned(),
                vulnerability["VulnerabilityID"].as_str().unwrap().to_owned(),
                vulnerability["PkgName"].as_str().unwrap().to_owned(),
                location,
            );
            expected.entry(key).or_insert(severity);
        }
    }
    expected
}

/// What came out: identity → severity, from each finding's
/// `source.scanner_finding_id` (`<class> <id> <package>[ <location>]`).
fn findings_by_identity(findings: &[Value]) -> BTreeMap<(String, String, String, String), String> {
    findings
        .iter()
        .map(|finding| {
            let identity = finding["source"]["scanner_finding_id"].as_str().unwrap();
            let mut parts = identity.splitn(4, ' ');
            let mut next = || parts.next().unwrap_or("").to_owned();
            let key = (next(), next(), next(), next());
            assert_eq!(finding["subject"]["product"], key.2.as_str(), "{finding}");
            if key.1.starts_with("CVE-") {
                assert_eq!(finding["cve_id"], key.1.as_str(), "{finding}");
            }
            (key, finding["severity"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn every_trivy_report_imports_with_its_ids_severities_and_packages_and_again_quietly() {
    let server = Server::start(&plugins_dir());
    for (index, file) in report_files("trivy").iter().enumerate() {
        let (organization, key) = new_organization(&server, &format!("trivy-{index}"));
        let bytes = std::fs::read(file).unwrap();
        let answer = import_ok(&server, &organization, "createEndpoint=true&endpoint=scanned-host", bytes.clone());
        let name = file.display();
        assert_eq!(answer["format"], "trivy", "{name}: {answer}");
        let expected = trivy_expected(&read_json(file));
        let findings = all(&server, &key, "vulnerability-findings", "");
        assert_eq!(answer["created"], expected.len(), "{name}: {answer}");
        let found = findings_by_identity(&findings);
        assert_eq!(found.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "{name}");
        for (identity, severity) in &expected {
            match severity {
                Some(severity) => assert_eq!(&found[identity], severity, "{name}: {identity:?}"),
                None => assert!(
                    ["critical", "high", "medium", "low", "info"].contains(&found[identity].as_str()),
                    "{name}: {identity:?}"
                ),
            }
        }
        assert!(findings.iter().all(|f| f["source"]["scanner"] == "trivy"), "{name}");
        // Trivy's `not_affected` is a suppression; every other status is open.
        let not_affected = std::fs::read_to_string(file).unwrap().matches(r#""Status": "not_affected""#).count();
        let suppressed: Vec<&Value> = findings.iter().filter(|f| f["status"] == "suppressed").collect();
        assert_eq!(suppressed.len(), not_affected, "{name}");
        assert!(suppressed.iter().all(|f| f["suppression"]["reason"] == "false_positive"), "{name}");
        assert_eq!(findings.iter().filter(|f| f["status"] == "open").count(), findings.len() - not_affected, "{name}");
        let endpoints = all(&server, &key, "endpoints", "");
        assert_eq!(endpoints.len(), 1, "{name}");
        assert_eq!(endpoints[0]["hostname"], "scanned-host");

        // Again: nothing changes, no `updated_at` moves.
        let again = import_ok(&server, &organization, "createEndpoint=true&endpoint=scanned-host", bytes);
        assert_eq!(
            (again["created"].as_u64(), again["updated"].as_u64(), again["resolved"].as_u64()),
            (Some(0), Some(0), Some(0)),
            "{name}: {again}"
        );
        assert_eq!(again["unchanged"], expected.len(), "{name}: {again}");
        assert_eq!(all(&server, &key, "vulnerability-findings", ""), findings, "{name}: nothing moved");
        assert_eq!(all(&server, &key, "endpoints", ""), endpoints, "{name}: nothing moved");
    }
}

/// A copy of a real report, later, without the entries of some packages
/// and with one added (the first entry's vulnerability on another package).
fn later_report(report: &Value, created_at: &str, remove: &[&str], add_package: Option<&str>) -> Value {
    let mut report = report.clone();
    report["CreatedAt"] = json!(created_at);
    let vulnerabilities = report["Results"][0]["Vulnerabilities"].as_array_mut().unwrap();
    if let Some(package) = add_package {
        let mut added = vulnerabilities[0].clone();
        added["PkgName"] = json!(package);
        vulnerabilities.push(added);
    }
    vulnerabilities.retain(|v| !remove.contains(&v["PkgName"].as_str().unwrap()));
    report
}

fn status_by_id(findings: &[Value]) -> BTreeMap<String, String> {
    findings
        .iter()
        .map(|f| {
            let identity = f["source"]["scanner_finding_id"].as_str().unwrap();
            (identity.to_owned(), f["status"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn a_later_report_resolves_what_it_no_longer_lists_and_reopens_what_it_lists_again() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "later");
    let original = read_json(&reports_dir().join("trivy/trivy-repo_debian-stretch.json"));
    let first =
        import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", serde_json::to_vec(&original).unwrap());
    assert_eq!(first["created"], 5);

    // The stretch fixture: bash, then four packages of one CVE.
    let removed = ["bash", "e2fslibs"];
    let second = later_report(&original, "2021-09-01T00:00:00Z", &removed, Some("bash-static"));
    let answer =
        import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", serde_json::to_vec(&second).unwrap());
    assert_eq!((answer["resolved"].as_u64(), answer["created"].as_u64()), (Some(2), Some(1)), "{answer}");
    let findings = all(&server, &key, "vulnerability-findings", "");
    let statuses = status_by_id(&findings);
    for finding in &findings {
        if removed.contains(&finding["subject"]["product"].as_str().unwrap()) {
            assert_eq!(finding["status"], "resolved", "{finding}");
            assert_eq!(finding["resolved_at"], "2021-09-01T00:00:00Z");
        } else {
            assert_eq!(finding["status"], "open", "{finding}");
        }
    }
    assert_eq!(statuses.len(), 6);

    // The original again, later still: the two come back, the added one goes.
    let third = later_report(&original, "2021-10-01T00:00:00Z", &[], None);
    let answer =
        import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", serde_json::to_vec(&third).unwrap());
    assert_eq!((answer["reopened"].as_u64(), answer["resolved"].as_u64()), (Some(2), Some(1)), "{answer}");
    let findings = all(&server, &key, "vulnerability-findings", "");
    let reopened: Vec<&Value> = findings.iter().filter(|f| f["status"] == "reopened").collect();
    assert_eq!(reopened.len(), 2);
    assert!(reopened.iter().all(|f| f["resolved_at"].is_null() && f["last_seen_at"] == "2021-10-01T00:00:00Z"));
    let added = findings.iter().find(|f| f["subject"]["product"] == "bash-static").unwrap();
    assert_eq!(added["status"], "resolved");

    // An older report changes nothing, and says so.
    let answer =
        import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", serde_json::to_vec(&second).unwrap());
    assert_eq!(answer["older_than_last"].as_array().unwrap().len(), 1, "{answer}");
    assert_eq!(all(&server, &key, "vulnerability-findings", ""), findings);
}

#[test]
fn the_clean_trivy_report_resolves_everything_its_endpoint_had_from_trivy() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "clean");
    let dir = reports_dir().join("trivy");
    let before = import_ok(
        &server,
        &organization,
        "createEndpoint=true&endpoint=shop-1",
        std::fs::read(dir.join("defectdojo_issue-9333_debian-10.13.json")).unwrap(),
    );
    let created = before["created"].as_u64().unwrap();
    assert!(created > 0);
    let endpoint = &all(&server, &key, "endpoints", "")[0];
    assert!(endpoint["open_findings"].as_object().unwrap().values().any(|count| count.as_u64() > Some(0)));

    let clean_file = dir.join("steadybit_checkout-go_clean.json");
    let clean = read_json(&clean_file);
    let answer =
        import_ok(&server, &organization, "createEndpoint=true&endpoint=shop-1", std::fs::read(&clean_file).unwrap());
    assert_eq!(answer["resolved"], created, "{answer}");
    let findings = all(&server, &key, "vulnerability-findings", "");
    assert!(
        findings.iter().all(|f| f["status"] == "resolved" && f["resolved_at"] == clean["CreatedAt"]),
        "{findings:?}"
    );
    let endpoint = &all(&server, &key, "endpoints", "")[0];
    assert!(endpoint["open_findings"].as_object().unwrap().values().all(|count| count == 0), "{endpoint}");
}

#[test]
fn a_report_naming_its_host_creates_that_endpoint_with_the_os_it_states() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "hosts");
    let mut report = read_json(&reports_dir().join("trivy/trivy-repo_debian-stretch.json"));
    report["ArtifactType"] = json!("vm");
    report["ArtifactName"] = json!("build-host-7");
    let answer = import_ok(&server, &organization, "", serde_json::to_vec(&report).unwrap());
    assert_eq!(answer["endpoints_created"], 1, "{answer}");
    let endpoints = all(&server, &key, "endpoints", "");
    assert_eq!(endpoints[0]["hostname"], "build-host-7");
    assert_eq!(endpoints[0]["operating_system"]["name"], "debian");
    assert_eq!(endpoints[0]["operating_system"]["version"], "9.9");
    assert_eq!(endpoints[0]["operating_system"]["family"], "linux");
    // The same host again is the same endpoint.
    let again = import_ok(&server, &organization, "", serde_json::to_vec(&report).unwrap());
    assert_eq!(again["endpoints_created"], 0);
    assert_eq!(again["unchanged"], 5, "{again}");
}

#[test]
fn bad_reports_are_refused_clearly_and_write_nothing() {
    let server = Server::start_with(&plugins_dir(), &["--import-max-mib", "1"]);
    let (organization, key) = new_organization(&server, "bad");
    let real = std::fs::read(reports_dir().join("trivy/trivy-repo_centos-7.json")).unwrap();

    // No host and no endpoint: says what to add.
    let (status, body) = post_report(&server, &organization, "", real.clone());
    assert_eq!(status, 422, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("--endpoint"), "{body}");

    // Not a known format: 415 naming the formats tried.
    let (status, body) =
        post_report(&server, &organization, "createEndpoint=true&endpoint=x", br#"{"hello": "world"}"#.to_vec());
    assert_eq!(status, 415, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("trivy"), "{body}");
    assert_eq!(body["type"].as_str().map(|t| t.ends_with("unsupported-report-format")), Some(true), "{body}");

    // Malformed JSON: 422 with line and column.
    let (status, body) = post_report(
        &server,
        &organization,
        "createEndpoint=true&endpoint=x",
        b"{\n  \"SchemaVersion\": 2,\n  \"Results\": [}".to_vec(),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!((body["line"].as_u64(), body["column"].as_u64()), (Some(3), Some(15)), "{body}");

    // Over the size limit: 413, and the body sent whole is drained, so the
    // client reads the answer (not a broken pipe) and its connection lives on.
    let mut big = b"{\"SchemaVersion\":2,\"Results\":[],\"pad\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 2 << 20));
    big.extend(b"\"}");
    let (status, _) = post_report(&server, &organization, "createEndpoint=true&endpoint=x", big);
    assert_eq!(status, 413);

    // Neither JSON nor any other format taken: 415.
    let (status, body) = post_report(&server, &organization, "createEndpoint=true&endpoint=x", b"hello".to_vec());
    assert_eq!(status, 415, "{body}");

    // Deeply nested: a clear 422, and the server carries on.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes();
    let (status, body) = post_report(&server, &organization, "createEndpoint=true&endpoint=x", deep);
    assert_eq!(status, 422, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("nests deeper"), "{body}");

    // A format asked for that the report is not in: 415.
    let (status, body) = post_report(
        &server,
        &organization,
        "createEndpoint=true&endpoint=x&format=trivy",
        br#"{"matches": []}"#.to_vec(),
    );
    assert_eq!(status, 415, "{body}");
    // An unknown format name or parameter: 400.
    assert_eq!(
        post_report(&server, &organization, "createEndpoint=true&endpoint=x&format=no-such-format", real.clone()).0,
        400
    );
    assert_eq!(post_report(&server, &organization, "createEndpoint=true&endpoint=x&verbose=1", real.clone()).0, 400);
    // Another organization's endpoint does not exist here.
    let (other, _) = new_organization(&server, "other");
    let made = import_ok(&server, &other, "createEndpoint=true&endpoint=theirs", real.clone());
    let theirs = made["endpoint_ids"][0].as_str().unwrap();
    let (status, body) =
        post_report(&server, &organization, &format!("createEndpoint=true&endpoint={theirs}"), real.clone());
    assert_eq!(status, 422, "{body}");

    // A dry run answers what would change and writes nothing.
    let dry = import_ok(&server, &organization, "createEndpoint=true&endpoint=x&dryRun=true", real);
    assert_eq!((dry["created"].as_u64(), dry["dry_run"].as_bool()), (Some(3), Some(true)), "{dry}");
    assert!(all(&server, &key, "vulnerability-findings", "").is_empty());
    assert!(all(&server, &key, "endpoints", "").is_empty());
    assert_eq!(server.get("/v1/health").status(), 200);
}

#[test]
fn the_command_line_imports_a_report_and_prints_what_changed() {
    let server = Server::start(&plugins_dir());
    let (organization, _key) = new_organization(&server, "cli");
    let file = reports_dir().join("trivy/trivy-repo_ubuntu-1804.json");
    let file = file.to_str().unwrap();
    let import = |extra: &[&str]| {
        let mut args = vec!["import", "--report", file, "--organization", &organization];
        args.extend_from_slice(extra);
        server.cli(&args)
    };
    // A host name no endpoint has is most often a typo: refused unless the
    // import is told to create it.
    let typo = import(&["--endpoint", "db-1", "--dry-run"]);
    assert!(!typo.status.success());
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(
        stderr.contains("no endpoint has the host name \"db-1\"") && stderr.contains("--create-endpoint"),
        "{stderr}"
    );
    let dry = import(&["--endpoint", "db-1", "--create-endpoint", "--dry-run"]);
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{stdout} {}", String::from_utf8_lossy(&dry.stderr));
    assert!(stdout.contains("dry run") && stdout.contains("5 created"), "{stdout}");
    let done = import(&["--endpoint", "db-1", "--create-endpoint", "--json"]);
    let answer: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!((answer["created"].as_u64(), answer["dry_run"].as_bool()), (Some(5), Some(false)), "{answer}");
    // Found now, by any case of its name.
    let again = import(&["--endpoint", "DB-1"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("5 unchanged"), "{again:?}");
    assert!(!import(&["--create-endpoint", "--json"]).status.success(), "--create-endpoint needs --endpoint");
    let refused = server.cli(&["import", "--report", file, "--organization", &organization]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--endpoint"));

    // `--scanner` declares whose findings a report is compared with; the
    // answer says it was declared, not read from the file.
    let bom = reports_dir().join("cyclonedx/grype-repo_image-snapshot.cdx.json");
    let import_bom = |extra: &[&str]| {
        let mut args = vec!["import", "--report", bom.to_str().unwrap(), "--organization", &organization];
        args.extend_from_slice(&["--endpoint", "db-2"]);
        args.extend_from_slice(extra);
        server.cli(&args)
    };
    let declared = import_bom(&["--create-endpoint", "--scanner", "grype", "--json"]);
    assert!(declared.status.success(), "{}", String::from_utf8_lossy(&declared.stderr));
    let answer: Value = serde_json::from_slice(&declared.stdout).unwrap();
    let said = (answer["format"].as_str(), answer["scanner"].as_str(), answer["scanner_declared"].as_bool());
    assert_eq!(said, (Some("cyclonedx"), Some("grype"), Some(true)), "{answer}");
    let not_a_name = import_bom(&["--scanner", "Not A Name", "--dry-run"]);
    assert!(!not_a_name.status.success());
    let stderr = String::from_utf8_lossy(&not_a_name.stderr);
    assert!(stderr.contains("declared scanner"), "{stderr}");
}

#[test]
fn findings_on_one_installed_package_become_one_target_queued_by_matching_scopes() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "targets");
    let scope = json!({
        "name": "Linux servers", "status": "active",
        "endpoint_filter": {"os_families": ["linux"]},
        "finding_filter": {"min_severity": "low"},
        "sla_days": {"critical": 7, "high": 30, "medium": 90, "low": 180},
    });
    let paused = json!({"name": "Paused", "status": "paused", "sla_days": {"medium": 1}});
    let response = server
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/scopes"))
        .header("content-type", "application/x-ndjson")
        .body(format!("{scope}\n{paused}\n"))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let scope_id =
        all(&server, &key, "scopes", "").iter().find(|s| s["name"] == "Linux servers").unwrap()["id"].clone();

    let file = reports_dir().join("trivy/trivy-repo_debian-stretch.json");
    let report = read_json(&file);
    let mut vm = report.clone();
    vm["ArtifactType"] = json!("vm");
    vm["ArtifactName"] = json!("stretch-1");
    let answer = import_ok(&server, &organization, "", serde_json::to_vec(&vm).unwrap());
    assert_eq!(answer["targets_created"], 5, "{answer}");
    let findings = all(&server, &key, "vulnerability-findings", "");
    let targets = all(&server, &key, "remediation-targets", "");
    for target in &targets {
        let product = target["subject"]["product"].as_str().unwrap();
        let entry = report["Results"][0]["Vulnerabilities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["PkgName"] == product)
            .unwrap();
        assert_eq!(target["installed_version"], entry["InstalledVersion"], "{target}");
        assert_eq!(
            (target["package_manager"].as_str(), target["target_type"].as_str()),
            (Some("apt"), Some("os_patch"))
        );
        assert_eq!(target["scope_ids"], json!([scope_id]), "{target}");
        assert!(target["due_at"].is_string(), "{target}");
        let fixable = entry.get("FixedVersion").is_some_and(|f| f.as_str() != Some(""));
        assert_eq!(target["status"], if fixable { "queued" } else { "identified" }, "{target}");
        let ids = target["finding_ids"].as_array().unwrap();
        assert_eq!(ids.len(), 1);
        let finding = findings.iter().find(|f| f["id"] == ids[0]).unwrap();
        assert_eq!(finding["remediation_target_id"], target["id"]);
    }
    // Again: nothing moves.
    let again = import_ok(&server, &organization, "", serde_json::to_vec(&vm).unwrap());
    assert_eq!((again["targets_created"].as_u64(), again["targets_updated"].as_u64()), (Some(0), Some(0)), "{again}");
    assert_eq!(all(&server, &key, "remediation-targets", ""), targets);

    // A fix appears for what had none: those targets go through actionable to queued.
    let identified: Vec<&Value> = targets.iter().filter(|t| t["status"] == "identified").collect();
    assert!(!identified.is_empty(), "the report has entries without a fix");
    let mut fixed = vm.clone();
    for vulnerability in fixed["Results"][0]["Vulnerabilities"].as_array_mut().unwrap() {
        if vulnerability.get("FixedVersion").is_none_or(|f| f.as_str() == Some("")) {
            vulnerability["FixedVersion"] = json!("99.0");
        }
    }
    let answer = import_ok(&server, &organization, "", serde_json::to_vec(&fixed).unwrap());
    assert_eq!(
        (answer["targets_created"].as_u64(), answer["targets_updated"].as_u64()),
        (Some(0), Some(identified.len() as u64)),
        "{answer}"
    );
    let targets = all(&server, &key, "remediation-targets", "");
    assert!(targets.iter().all(|t| t["status"] == "queued"), "{targets:?}");
    let id = identified[0]["id"].as_str().unwrap();
    let history: Value = server
        .client
        .get(server.url(&format!("/v1/remediation-targets/{id}/history")))
        .bearer_auth(&key)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let steps: Vec<&str> = history["data"].as_array().unwrap().iter().filter_map(|e| e["status"].as_str()).collect();
    assert_eq!(steps, ["identified", "actionable", "queued"], "{history}");

    // Everything resolved: the targets are obsolete.
    let mut clean = read_json(&reports_dir().join("trivy/steadybit_checkout-go_clean.json"));
    clean["ArtifactType"] = json!("vm");
    clean["ArtifactName"] = json!("stretch-1");
    let answer = import_ok(&server, &organization, "", serde_json::to_vec(&clean).unwrap());
    assert_eq!((answer["resolved"].as_u64(), answer["targets_updated"].as_u64()), (Some(5), Some(5)), "{answer}");
    assert!(all(&server, &key, "remediation-targets", "").iter().all(|t| t["status"] == "obsolete"));
}

#[test]
fn a_partial_report_resolves_nothing_a_complete_one_does() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "partial");
    // One page (10 of 125 hits) of a Wazuh indexer search: partial.
    let mut page = read_json(&reports_dir().join("wazuh/defectdojo_wazuh-4.8-indexer.json"));
    let first = import_ok(&server, &organization, "format=wazuh", serde_json::to_vec(&page).unwrap());
    assert_eq!(first["created"], 10, "{first}");

    // The page without its last hit (agent 002 keeps two of its three).
    page["hits"]["hits"].as_array_mut().unwrap().pop();
    let answer = import_ok(&server, &organization, "format=wazuh", serde_json::to_vec(&page).unwrap());
    assert_eq!(answer["resolved"], 0, "{answer}");
    assert!(all(&server, &key, "vulnerability-findings", "").iter().all(|f| f["status"] == "open"));

    // The same hits as a complete response: the missing one is resolved.
    page["hits"]["total"] = json!({"value": 9, "relation": "eq"});
    let answer = import_ok(&server, &organization, "format=wazuh", serde_json::to_vec(&page).unwrap());
    assert_eq!(answer["resolved"], 1, "{answer}");
}

/// A body with what depends on the backend or the clock made comparable:
/// each id becomes `id-<n>` (numbered in order of appearance, one
/// numbering per server) and each time at or after `since` (the service's
/// own: `created_at`, `updated_at`, due dates, the import time of a
/// report without one) becomes `now`.
fn comparable(value: &Value, since: &str, ids: &mut BTreeMap<String, usize>) -> Value {
    match value {
        Value::String(text) if uuid::Uuid::parse_str(text).is_ok() && text.len() == 36 => {
            let next = ids.len();
            json!(format!("id-{}", ids.entry(text.clone()).or_insert(next)))
        }
        Value::String(text) if text.len() >= 20 && text.as_bytes()[4] == b'-' && text.as_str() >= since => {
            json!("now")
        }
        Value::Array(items) => Value::Array(items.iter().map(|item| comparable(item, since, ids)).collect()),
        Value::Object(fields) => {
            Value::Object(fields.iter().map(|(name, item)| (name.clone(), comparable(item, since, ids))).collect())
        }
        other => other.clone(),
    }
}

/// The same reports, in the same order, through a server on sled and one
/// on PostgreSQL: the same answers (created, updated, unchanged, resolved,
/// reopened, skipped, endpoints and targets), and then the same endpoints,
/// findings and targets, byte for byte once ids and the service's times are
/// numbered and masked alike.
#[test]
fn reports_on_postgres_give_the_answers_they_give_on_sled() {
    let since = esr_contract::time::Timestamp(esr_system::clock::unix_now_nanos() / 1000 * 1000).format();
    let database = common::postgres::TestDatabase::new();
    let sled = Server::start_with(&plugins_dir(), &[common::postgres::TWIN_DEADLINE]);
    let postgres = Server::start_with(&plugins_dir(), &["--database", &database.url, common::postgres::TWIN_DEADLINE]);
    let scope = json!({
        "name": "Everything low and up", "status": "active",
        "finding_filter": {"min_severity": "low"},
        "sla_days": {"critical": 7, "high": 30, "medium": 90, "low": 180},
    });
    let twins: Vec<(&Server, String, String)> = [&sled, &postgres]
        .into_iter()
        .map(|server| {
            let (organization, key) = new_organization(server, "twin");
            let response = server
                .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/scopes"))
                .header("content-type", "application/x-ndjson")
                .body(format!("{scope}\n"))
                .send()
                .unwrap();
            assert_eq!(response.status(), 200);
            (server, organization, key)
        })
        .collect();

    // Every real report, then a later one that resolves, creates and
    // reopens, an older one, and the clean report on the same endpoint.
    let stretch = read_json(&reports_dir().join("trivy/trivy-repo_debian-stretch.json"));
    let mut imports: Vec<(String, Vec<u8>)> = Vec::new();
    for format in ["trivy", "grype", "osv-scanner", "sarif", "cyclonedx", "wazuh"] {
        for (index, file) in report_files(format).iter().enumerate() {
            // Wazuh names the hosts it scanned.
            let query = if format == "wazuh" {
                String::new()
            } else {
                format!("createEndpoint=true&endpoint={format}-{index}")
            };
            imports.push((query, std::fs::read(file).unwrap()));
        }
    }
    let second = later_report(&stretch, "2021-09-01T00:00:00Z", &["bash", "e2fslibs"], Some("bash-static"));
    let third = later_report(&stretch, "2021-10-01T00:00:00Z", &[], None);
    for report in [&second, &third, &second] {
        imports.push(("createEndpoint=true&endpoint=trivy-5".into(), serde_json::to_vec(report).unwrap()));
    }
    let clean = std::fs::read(reports_dir().join("trivy/steadybit_checkout-go_clean.json")).unwrap();
    imports.push(("createEndpoint=true&endpoint=trivy-1".into(), clean));

    let mut numbering: Vec<BTreeMap<String, usize>> = vec![BTreeMap::new(), BTreeMap::new()];
    for (query, body) in &imports {
        let answers: Vec<Value> = twins
            .iter()
            .zip(&mut numbering)
            .map(|((server, organization, _), ids)| {
                comparable(&import_ok(server, organization, query, body.clone()), &since, ids)
            })
            .collect();
        assert_eq!(answers[0], answers[1], "{query}: sled, then PostgreSQL");
    }
    let statuses: Vec<&str> = ["resolved", "reopened", "suppressed", "open"].to_vec();
    for collection in ["endpoints", "vulnerability-findings", "remediation-targets"] {
        let lists: Vec<String> = twins
            .iter()
            .zip(&mut numbering)
            .map(|((server, _, key), ids)| {
                let records = all(server, key, collection, "&sort=created_at");
                serde_json::to_string(&comparable(&json!(records), &since, ids)).unwrap()
            })
            .collect();
        assert_eq!(lists[0], lists[1], "{collection}: sled, then PostgreSQL");
        if collection == "vulnerability-findings" {
            for status in &statuses {
                assert!(lists[0].contains(&format!("\"status\":\"{status}\"")), "no {status} finding to compare");
            }
        }
    }
}

#[test]
fn a_report_with_one_record_the_import_rules_refuse_writes_nothing() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "atomic");
    let mut report = read_json(&reports_dir().join("trivy/trivy-repo_debian-stretch.json"));
    // A title that would reverse the text around it where it is shown.
    report["Results"][0]["Vulnerabilities"][4]["Title"] = json!("harmless \u{202e}txt.exe");
    let (status, body) =
        post_report(&server, &organization, "createEndpoint=true&endpoint=web-1", serde_json::to_vec(&report).unwrap());
    assert_eq!(status, 422, "{body}");
    let invalid = body["invalid_entries"].as_array().unwrap();
    assert_eq!(invalid.len(), 1, "{body}");
    assert_eq!(invalid[0]["field"], "title", "{body}");
    assert!(invalid[0]["entry"].as_str().unwrap().starts_with("entries[4]"), "{body}");
    assert!(body["detail"].as_str().unwrap().contains("nothing was written"), "{body}");
    for collection in ["endpoints", "vulnerability-findings", "remediation-targets"] {
        assert!(all(&server, &key, collection, "").is_empty(), "{collection}");
    }
}

/// A real Trivy report made about `megabytes` MiB large by repeating its
/// vulnerabilities on packages of their own.
fn large_trivy_report(megabytes: usize) -> Vec<u8> {
    let mut report = read_json(&reports_dir().join("trivy/defectdojo_issue-9333_debian-10.13.json"));
    let real = report["Results"][0]["Vulnerabilities"].as_array().unwrap().clone();
    let mut repeated = Vec::new();
    let mut size = 0;
    while size < megabytes << 20 {
        let mut vulnerability = real[repeated.len() % real.len()].clone();
        vulnerability["PkgName"] = json!(format!("{}-{}", vulnerability["PkgName"].as_str().unwrap(), repeated.len()));
        size += vulnerability.to_string().len();
        repeated.push(vulnerability);
    }
    report["Results"][0]["Vulnerabilities"] = json!(repeated);
    serde_json::to_vec(&report).unwrap()
}

/// Each host a report names may become an endpoint: a report naming more
/// hosts than `--import-max-findings` is refused, however few findings it
/// makes, before any is planned.
#[test]
fn a_report_naming_more_hosts_than_the_findings_limit_is_refused() {
    const LIMIT: usize = 1_000;
    let server = Server::start_with(&plugins_dir(), &["--import-max-findings", &LIMIT.to_string()]);
    let (organization, key) = new_organization(&server, "many-hosts");
    let report = std::fs::read_to_string(reports_dir().join("nessus/python-libnessus_3-hosts-ip-only.nessus")).unwrap();
    let empty: String = (0..=LIMIT)
        .map(|n| {
            format!("<ReportHost name=\"10.9.{}.{}\"><HostProperties></HostProperties></ReportHost>", n / 256, n % 256)
        })
        .collect();
    let padded = report.replacen("<ReportHost ", &format!("{empty}<ReportHost "), 1);
    let (status, problem) = post_report(&server, &organization, "format=nessus&dryRun=true", padded.into_bytes());
    assert_eq!(status, 413, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("names {} hosts", LIMIT + 4)) && detail.contains("--import-max-findings"),
        "{detail}"
    );
    assert_eq!(
        (problem["hosts"].as_u64(), problem["max_findings"].as_u64()),
        (Some(LIMIT as u64 + 4), Some(LIMIT as u64))
    );
    assert!(all(&server, &key, "endpoints", "").is_empty(), "nothing was written");
    // The report itself, its three hosts, is within the limit.
    let answer = import_ok(&server, &organization, "format=nessus", report.into_bytes());
    assert!(answer["created"].as_u64().unwrap() > 0, "{answer}");
    assert_eq!(all(&server, &key, "endpoints", "").len(), 3);
}

/// One report cannot take the server's memory: a report making more
/// findings than `--import-max-findings` is refused before anything is
/// planned, and one at the limit is written within a bound per finding,
/// all or nothing, and gives its memory back.
#[test]
fn a_report_at_the_findings_limit_takes_bounded_memory_and_one_beyond_is_refused() {
    const LIMIT: usize = 10_000;
    let server = Server::start_with(&plugins_dir(), &["--import-max-findings", &LIMIT.to_string()]);
    let (organization, key) = new_organization(&server, "large");
    let pid = server.pid();
    let beyond = trivy_report_of(LIMIT + 1);
    let at_limit = trivy_report_of(LIMIT);
    let baseline = memory_figure(pid, "VmRSS");
    reset_peak_memory(pid);

    let (status, problem) = post_report(&server, &organization, "createEndpoint=true&endpoint=big-1", beyond);
    assert_eq!(status, 413, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("--import-max-findings"), "{problem}");
    assert_eq!(
        (problem["findings"].as_u64(), problem["max_findings"].as_u64()),
        (Some(LIMIT as u64 + 1), Some(LIMIT as u64))
    );
    assert!(all(&server, &key, "endpoints", "").is_empty(), "nothing was written");
    let refused_peak = memory_figure(pid, "VmHWM").saturating_sub(baseline);

    reset_peak_memory(pid);
    let dry = import_ok(&server, &organization, "createEndpoint=true&endpoint=big-1&dryRun=true", at_limit.clone());
    assert_eq!(dry["created"], LIMIT, "{dry}");
    let dry_peak = memory_figure(pid, "VmHWM").saturating_sub(baseline);
    eprintln!("dry run: {} MiB above the baseline", dry_peak >> 20);

    reset_peak_memory(pid);
    // The write is applied in bounded transactions (staged first, so it is
    // all or nothing), while the organization's readers wait: a reader
    // sees none of the report's findings or all of them.
    let importing = std::sync::atomic::AtomicBool::new(true);
    let (answer, totals) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut totals = std::collections::BTreeSet::new();
            while importing.load(std::sync::atomic::Ordering::Relaxed) {
                let url = server.url("/v1/vulnerability-findings?limit=1");
                let response = server.client.get(url).bearer_auth(&key).send().unwrap();
                // A reader that waited past its deadline for the write is
                // told to retry (`503`): it saw nothing, which is no breach.
                if response.status() == 503 {
                    continue;
                }
                let page: Value = response.json().unwrap();
                totals.insert(page["total"].as_u64().unwrap_or_else(|| panic!("{page}")));
            }
            totals
        });
        let answer = import_ok(&server, &organization, "createEndpoint=true&endpoint=big-1", at_limit);
        importing.store(false, std::sync::atomic::Ordering::Relaxed);
        (answer, reader.join().unwrap())
    });
    assert_eq!(answer["created"], LIMIT, "{answer}");
    assert!(totals.iter().all(|total| [0, LIMIT as u64].contains(total)), "totals seen while writing: {totals:?}");
    let peak = memory_figure(pid, "VmHWM").saturating_sub(baseline);
    eprintln!(
        "peak above the baseline: refused {} MiB, {LIMIT} findings written {} MiB",
        refused_peak >> 20,
        peak >> 20
    );
    // Measured 499 MiB with six importers (a dry run: 300, the refusal:
    // 152), 678 to 684 MiB with eleven (each one's `detect` runs on the
    // report in an instance of its own); in one sled transaction it was
    // 724 to 864 MiB. Without the limit, 100,000 entries took 6 GiB and more.
    assert!(peak <= 768 << 20, "{} MiB above the baseline for {LIMIT} findings", peak >> 20);
    assert!(refused_peak <= 256 << 20, "{} MiB above the baseline to refuse a report", refused_peak >> 20);
    // And gives it back: what stays is mostly the store's cache (256 MiB);
    // measured 466 MiB above the baseline 3 s after.
    let settled = baseline + (768 << 20);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while memory_figure(pid, "VmRSS") > settled {
        assert!(
            std::time::Instant::now() < deadline,
            "{} MiB resident after the report",
            memory_figure(pid, "VmRSS") >> 20
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_report_beyond_the_importers_limits_is_refused_clearly_and_the_server_carries_on() {
    let large = large_trivy_report(12);
    let small = std::fs::read(reports_dir().join("trivy/trivy-repo_debian-stretch.json")).unwrap();
    let server = Server::start_with(&plugins_dir(), &["--importer-memory-mib", "16"]);
    let (organization, key) = new_organization(&server, "memory");
    // Detected, or named: either way the answer names the limit.
    for query in ["createEndpoint=true&endpoint=x&format=trivy", "createEndpoint=true&endpoint=x"] {
        let (status, body) = post_report(&server, &organization, query, large.clone());
        assert_eq!(status, 422, "{query}: {body}");
        assert!(body["detail"].as_str().unwrap().contains("--importer-memory-mib"), "{query}: {body}");
    }
    assert!(all(&server, &key, "vulnerability-findings", "").is_empty());
    assert_eq!(import_ok(&server, &organization, "createEndpoint=true&endpoint=x", small.clone())["created"], 5);

    // The least deadline allowed bounds conversions, not the loading of the importers.
    let server = Server::start_with(&plugins_dir(), &["--importer-deadline-ms", "10"]);
    let (organization, key) = new_organization(&server, "deadline");
    let (status, body) = post_report(&server, &organization, "createEndpoint=true&endpoint=x&format=trivy", large);
    assert_eq!(status, 422, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("--importer-deadline-ms"), "{body}");
    assert!(all(&server, &key, "vulnerability-findings", "").is_empty());
    assert_eq!(server.get("/v1/health").status(), 200);
}

/// A vulnerability's identity as the contract names it: the CVE where the
/// report gives one, as the id or among its aliases, else the id itself.
pub(crate) fn cve_or<'a>(id: &'a str, aliases: impl IntoIterator<Item = &'a str>) -> String {
    std::iter::once(id).chain(aliases).find(|candidate| candidate.starts_with("CVE-")).unwrap_or(id).to_owned()
}

pub(crate) fn texts(values: &Value, field: &str) -> Vec<String> {
    values.as_array().into_iter().flatten().filter_map(|value| value[field].as_str().map(str::to_owned)).collect()
}

/// A severity word as the mapping tables state it; `None` where the
/// report gives none the table maps by itself (the band of a score).
pub(crate) fn severity_word(word: &str) -> Option<&'static str> {
    match word.to_ascii_lowercase().as_str() {
        "critical" => Some("critical"),
        "high" | "important" => Some("high"),
        "medium" | "moderate" => Some("medium"),
        "low" => Some("low"),
        "negligible" | "info" => Some("info"),
        _ => None,
    }
}

/// What a report holds, read without the importers: each (vulnerability,
/// package) pair with the severity its words give, and the entries that
/// cannot become findings.
#[derive(Default)]
pub(crate) struct Reading {
    /// (host, vulnerability, package): the host the report names, else
    /// the one the import names.
    pub(crate) pairs: BTreeMap<(String, String, String), Option<&'static str>>,
    pub(crate) skipped: usize,
}

/// The endpoint the test names when a report names none.
pub(crate) const NAMED_HOST: &str = "scanned-host";

impl Reading {
    pub(crate) fn add(&mut self, id: String, package: &str, severity: Option<&'static str>) {
        self.add_on(NAMED_HOST, id, package, severity);
    }

    pub(crate) fn add_on(&mut self, host: &str, id: String, package: &str, severity: Option<&'static str>) {
        let slot = self.pairs.entry((host.to_owned(), id, package.to_owned())).or_insert(severity);
        if slot.is_none() {
            *slot = severity;
        }
    }
}

fn grype_reading(report: &Value) -> Reading {
    let mut reading = Reading::default();
    for entry in report["matches"].as_array().into_iter().flatten() {
        let vulnerability = &entry["vulnerability"];
        let id = vulnerability["id"].as_str().unwrap();
        let mut aliases = texts(&entry["relatedVulnerabilities"], "id");
        aliases.extend(texts(&vulnerability["advisories"], "id"));
        let severity = vulnerability["severity"].as_str().and_then(severity_word);
        reading.add(
            cve_or(id, aliases.iter().map(String::as_str)),
            entry["artifact"]["name"].as_str().unwrap(),
            severity,
        );
    }
    reading.skipped = report["ignoredMatches"].as_array().map_or(0, Vec::len);
    reading
}

fn osv_reading(report: &Value) -> Reading {
    let mut reading = Reading::default();
    for result in report["results"].as_array().into_iter().flatten() {
        for package in result["packages"].as_array().into_iter().flatten() {
            // A repository scanned by commit names no package: the repository is the package.
            let name = match package["package"]["name"].as_str().filter(|name| !name.is_empty()) {
                Some(name) => name,
                None if result["source"]["type"] == "git" => {
                    result["source"]["path"].as_str().unwrap().split('/').rfind(|part| !part.is_empty()).unwrap()
                }
                None => {
                    reading.skipped += 1;
                    continue;
                }
            };
            let records = package["vulnerabilities"].as_array().cloned().unwrap_or_default();
            let record_aliases = |id: &str| -> Vec<String> {
                records
                    .iter()
                    .filter(|record| record["id"] == id)
                    .flat_map(|record| texts_of(&record["aliases"]))
                    .collect()
            };
            let mut grouped = Vec::new();
            for group in package["groups"].as_array().into_iter().flatten() {
                let ids = texts_of(&group["ids"]);
                let mut aliases: Vec<String> = ids[1..].to_vec();
                aliases.extend(texts_of(&group["aliases"]));
                aliases.extend(ids.iter().flat_map(|id| record_aliases(id)));
                reading.add(cve_or(&ids[0], aliases.iter().map(String::as_str)), name, None);
                grouped.extend(ids);
            }
            for record in &records {
                let id = record["id"].as_str().unwrap();
                if !grouped.iter().any(|grouped| grouped == id) {
                    let aliases = record_aliases(id);
                    reading.add(cve_or(id, aliases.iter().map(String::as_str)), name, None);
                }
            }
        }
    }
    reading
}

pub(crate) fn texts_of(values: &Value) -> Vec<String> {
    values.as_array().into_iter().flatten().filter_map(|value| value.as_str().map(str::to_owned)).collect()
}

fn cyclonedx_reading(report: &Value) -> Reading {
    let mut reading = Reading::default();
    // Components at any depth, and the product a VEX speaks of.
    let mut pending: Vec<&Value> = report["components"].as_array().into_iter().flatten().collect();
    pending.push(&report["metadata"]["component"]);
    let mut components: BTreeMap<&str, String> = BTreeMap::new();
    while let Some(component) = pending.pop() {
        pending.extend(component["components"].as_array().into_iter().flatten());
        let (Some(reference), Some(name)) = (component["bom-ref"].as_str(), component["name"].as_str()) else {
            continue;
        };
        let package = match (component["group"].as_str().filter(|g| !g.is_empty()), component["purl"].as_str()) {
            (Some(group), Some(purl)) if purl.starts_with("pkg:maven/") => format!("{group}:{name}"),
            (Some(group), _) => format!("{group}/{name}"),
            (None, _) => name.to_owned(),
        };
        components.insert(reference, package);
    }
    for vulnerability in report["vulnerabilities"].as_array().into_iter().flatten() {
        let id = vulnerability["id"].as_str().unwrap();
        let aliases = texts(&vulnerability["references"], "id");
        let severity = vulnerability["ratings"][0]["severity"].as_str().and_then(severity_word);
        for affected in vulnerability["affects"].as_array().into_iter().flatten() {
            match components.get(affected["ref"].as_str().unwrap_or_default()) {
                Some(package) => reading.add(cve_or(id, aliases.iter().map(String::as_str)), package, severity),
                None => reading.skipped += 1,
            }
        }
    }
    reading
}

/// A SARIF result's package and advisory, where its tool writes them: a
/// purl among the logical locations (dependency-check), else the
/// `Package:` and `Vulnerability` lines of the message or the rule's help
/// (Trivy, Grype); else an advisory `ruleId`.
fn sarif_reading(report: &Value) -> Reading {
    let mut reading = Reading::default();
    for run in report["runs"].as_array().into_iter().flatten() {
        let rules = run["tool"]["driver"]["rules"].as_array().cloned().unwrap_or_default();
        for result in run["results"].as_array().into_iter().flatten() {
            let rule_id = result["ruleId"].as_str().unwrap_or_default();
            let rule = result["ruleIndex"]
                .as_u64()
                .and_then(|index| rules.get(index as usize))
                .or_else(|| rules.iter().find(|rule| rule["id"] == rule_id))
                .cloned()
                .unwrap_or(Value::Null);
            let texts = [result["message"]["text"].as_str(), rule["help"]["text"].as_str()];
            let line = |prefix: &str| {
                texts.iter().flatten().find_map(|text| text.lines().find_map(|line| line.strip_prefix(prefix)))
            };
            let purl = result["locations"][0]["logicalLocations"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|location| location["fullyQualifiedName"].as_str())
                .find_map(|name| name.strip_prefix("pkg:"));
            let package = match purl {
                Some(purl) => {
                    let (kind, path) = purl.split_once('/').unwrap();
                    let path = path.split('@').next().unwrap();
                    Some(if kind == "maven" { path.replacen('/', ":", 1) } else { path.to_owned() })
                }
                None => line("Package: ").map(|name| name.trim().to_owned()),
            };
            let advisory = rule_id
                .split_once('-')
                .is_some_and(|(prefix, _)| !prefix.is_empty() && prefix.chars().all(|c| c.is_ascii_uppercase()));
            let id = line("Vulnerability ").map(str::trim).or(advisory.then_some(rule_id));
            match (id, package) {
                (Some(id), Some(package)) => {
                    reading.add(id.to_owned(), &package, line("Severity: ").and_then(|word| severity_word(word.trim())))
                }
                _ => reading.skipped += 1,
            }
        }
    }
    reading
}

fn wazuh_reading(report: &Value) -> Reading {
    let mut reading = Reading::default();
    for hit in report["hits"]["hits"].as_array().into_iter().flatten() {
        let source = &hit["_source"];
        let vulnerability = &source["vulnerability"];
        reading.add_on(
            source["agent"]["name"].as_str().unwrap(),
            vulnerability["id"].as_str().unwrap().to_owned(),
            source["package"]["name"].as_str().unwrap(),
            vulnerability["severity"].as_str().and_then(severity_word),
        );
    }
    // One page of a larger search: the hits not in the file are one skipped entry.
    let listed = report["hits"]["hits"].as_array().map_or(0, Vec::len);
    if report["hits"]["total"]["value"].as_u64().is_some_and(|total| total > listed as u64) {
        reading.skipped += 1;
    }
    reading
}

/// How the test reads one format's report.
type ReadReport = fn(&Value) -> Reading;

/// Grype, OSV-Scanner, CycloneDX, SARIF and Wazuh reports through the real
/// host: the hosts, vulnerabilities and packages that come out are the ones the test
/// reads from each report itself, with the severities its words give; the
/// entries it cannot represent are skipped with a reason; and importing it
/// again changes nothing.
#[test]
fn every_other_report_comes_out_as_a_reading_of_it_says_and_again_quietly() {
    let server = Server::start(&plugins_dir());
    let named = format!("createEndpoint=true&endpoint={NAMED_HOST}");
    // Wazuh names the hosts it scanned; the others are imported for one.
    let readers: [(&str, &str, &str, ReadReport); 5] = [
        ("grype", "grype", &named, grype_reading),
        ("osv-scanner", "osv", &named, osv_reading),
        ("cyclonedx", "cyclonedx", &named, cyclonedx_reading),
        ("sarif", "sarif", &named, sarif_reading),
        ("wazuh", "wazuh", "", wazuh_reading),
    ];
    for (directory, format, query, read) in readers {
        for (index, file) in report_files(directory).iter().enumerate() {
            let name = file.display();
            let (organization, key) = new_organization(&server, &format!("{format}-{index}"));
            let bytes = std::fs::read(file).unwrap();
            let answer = import_ok(&server, &organization, query, bytes.clone());
            assert_eq!(answer["format"], format, "{name}: {answer}");
            let expected = read(&read_json(file));
            let findings = all(&server, &key, "vulnerability-findings", "");
            let hosts: BTreeMap<String, String> = all(&server, &key, "endpoints", "")
                .iter()
                .map(|endpoint| {
                    (endpoint["id"].as_str().unwrap().to_owned(), endpoint["hostname"].as_str().unwrap().to_owned())
                })
                .collect();
            let found: BTreeMap<(String, String, String), String> = findings
                .iter()
                .map(|finding| {
                    let identity = finding["source"]["scanner_finding_id"].as_str().unwrap();
                    let id = identity.split(' ').nth(1).unwrap().to_owned();
                    let package = finding["subject"]["product"].as_str().unwrap().to_owned();
                    let host = hosts[finding["endpoint_id"].as_str().unwrap()].clone();
                    ((host, id, package), finding["severity"].as_str().unwrap().to_owned())
                })
                .collect();
            assert_eq!(
                found.keys().collect::<Vec<_>>(),
                expected.pairs.keys().collect::<Vec<_>>(),
                "{name}: the (host, vulnerability, package) triples"
            );
            for (pair, severity) in &expected.pairs {
                if let Some(severity) = severity {
                    assert_eq!(&found[pair], severity, "{name}: {pair:?}");
                }
            }
            let skipped = answer["skipped"].as_array().unwrap();
            assert_eq!(skipped.len(), expected.skipped, "{name}: {answer}");
            assert!(
                skipped.iter().all(|entry| !entry["reason"].as_str().unwrap_or_default().is_empty()),
                "{name}: every skipped entry says why: {answer}"
            );

            let again = import_ok(&server, &organization, query, bytes);
            assert_eq!(
                (again["created"].as_u64(), again["updated"].as_u64(), again["resolved"].as_u64()),
                (Some(0), Some(0), Some(0)),
                "{name}: {again}"
            );
            assert_eq!(all(&server, &key, "vulnerability-findings", ""), findings, "{name}: nothing moved");
        }
    }
}

/// A report's own time is not trusted beyond the server's clock: one from
/// the far future is refused (else every genuine report after it would be
/// "older than the last"), one from long ago is imported and flagged.
#[test]
fn a_report_from_the_future_is_refused_and_one_from_long_ago_is_flagged() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "clock");
    let original = read_json(&reports_dir().join("trivy/trivy-repo_debian-stretch.json"));
    for future in ["9999-12-31T23:59:59Z", "2262-04-11T23:47:16Z", "2100-01-01T00:00:00Z"] {
        let forged = later_report(&original, future, &[], None);
        let (status, problem) = post_report(
            &server,
            &organization,
            "createEndpoint=true&endpoint=web-1",
            serde_json::to_vec(&forged).unwrap(),
        );
        assert_eq!(status, 422, "{future}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("later than the server's clock") && detail.contains("nothing was written"),
            "{problem}"
        );
    }
    assert!(all(&server, &key, "vulnerability-findings", "").is_empty());
    assert!(all(&server, &key, "endpoints", "").is_empty(), "a refused report creates no endpoint");

    // The genuine report of 2021 is imported, with a warning about its age.
    let answer =
        import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", serde_json::to_vec(&original).unwrap());
    assert_eq!(answer["created"], 5, "{answer}");
    let warnings = answer["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("more than 90 days")), "{answer}");
    // A report from a minute ago (within the clocks' skew) is not flagged.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let recent = later_report(&original, &esr_system::clock::format_timestamp(now + 60), &[], None);
    let answer =
        import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", serde_json::to_vec(&recent).unwrap());
    assert_eq!(answer["warnings"], json!([]), "{answer}");
    assert_eq!(answer["unchanged"].as_u64().unwrap() + answer["updated"].as_u64().unwrap(), 5, "{answer}");
}

/// A CycloneDX document with one vulnerability on an OS package, whose
/// `metadata.tools` claims `tool` wrote it.
fn cyclonedx_claiming(tool: &str, created_at: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
        "metadata": {"timestamp": created_at, "tools": {"components": [{"type": "application", "name": tool, "version": "0.50.0"}]}},
        "components": [{"bom-ref": "pkg:deb/debian/zlib1g@1.2.11?distro=debian-9", "type": "library", "name": "zlib1g",
                        "version": "1.2.11", "purl": "pkg:deb/debian/zlib1g@1.2.11?distro=debian-9"}],
        "vulnerabilities": [{"id": "CVE-2022-37434", "ratings": [{"severity": "critical"}],
                             "affects": [{"ref": "pkg:deb/debian/zlib1g@1.2.11?distro=debian-9"}]}],
    }))
    .unwrap()
}

/// Whose findings a report is compared with is the importer's to say (or
/// the uploader's, recorded), never the document's: a CycloneDX file
/// claiming Trivy wrote it does not resolve Trivy's findings.
#[test]
fn a_document_naming_another_scanner_cannot_resolve_that_scanners_findings() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "forged");
    let trivy = std::fs::read(reports_dir().join("trivy/trivy-repo_debian-stretch.json")).unwrap();
    assert_eq!(import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", trivy)["created"], 5);

    let forged = cyclonedx_claiming("trivy", "2021-09-01T00:00:00Z");
    let answer = import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1", forged.clone());
    assert_eq!(
        (
            answer["format"].as_str(),
            answer["scanner"].as_str(),
            answer["tool"].as_str(),
            answer["scanner_declared"].as_bool()
        ),
        (Some("cyclonedx"), Some("cyclonedx"), Some("trivy"), Some(false)),
        "{answer}"
    );
    assert_eq!((answer["created"].as_u64(), answer["resolved"].as_u64()), (Some(1), Some(0)), "{answer}");
    let findings = all(&server, &key, "vulnerability-findings", "");
    let trivy_open = |findings: &[Value]| {
        findings.iter().filter(|f| f["source"]["scanner"] == "trivy" && f["status"] == "open").count()
    };
    assert_eq!(trivy_open(&findings), 5, "Trivy's findings stay as Trivy left them");
    assert_eq!(findings.iter().filter(|f| f["source"]["scanner"] == "cyclonedx").count(), 1);

    // The uploader may say the file is Trivy's: then it is compared with
    // Trivy's findings, and the history records who said so.
    let request_id = "declared-scanner-0001";
    let response = server
        .admin(
            Method::POST,
            &format!("/admin/v1/organizations/{organization}/reports?createEndpoint=true&endpoint=web-1&scanner=trivy"),
        )
        .header("content-type", "application/json")
        .header("x-request-id", request_id)
        .body(forged)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().unwrap();
    assert_eq!((answer["scanner"].as_str(), answer["scanner_declared"].as_bool()), (Some("trivy"), Some(true)));
    assert_eq!((answer["resolved"].as_u64(), answer["created"].as_u64()), (Some(5), Some(1)), "{answer}");
    let findings = all(&server, &key, "vulnerability-findings", "");
    assert_eq!(trivy_open(&findings), 1, "only the one finding the declared report lists is open");
    let resolved = findings.iter().find(|f| f["source"]["scanner"] == "trivy" && f["status"] == "resolved").unwrap();
    let history: Value = server
        .client
        .get(server.url(&format!("/v1/vulnerability-findings/{}/history", resolved["id"].as_str().unwrap())))
        .bearer_auth(&key)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let cause = &history["data"].as_array().unwrap().last().unwrap()["cause"];
    assert_eq!(cause["kind"], "report", "{history}");
    assert_eq!(cause["scanner"], "trivy", "{history}");
    assert_eq!(cause["scanner_declared"], true, "{history}");
    assert_eq!(cause["format"], "cyclonedx", "{history}");
    assert_eq!(cause["tool"], "trivy", "{history}");
    assert_eq!(cause["request_id"], request_id, "{history}");
    assert!(!cause["importer_version"].as_str().unwrap().is_empty(), "{history}");
    let first_cause = &history["data"][0]["cause"];
    assert_eq!(
        (first_cause["format"].as_str(), first_cause["scanner_declared"].as_bool()),
        (Some("trivy"), Some(false))
    );

    // A declared scanner must be a scanner's name.
    let (status, problem) = post_report(
        &server,
        &organization,
        "createEndpoint=true&endpoint=web-1&scanner=Not%20A%20Name",
        cyclonedx_claiming("x", "2021-09-02T00:00:00Z"),
    );
    assert_eq!(status, 422, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("declared scanner"), "{problem}");
}

/// A file valid in two formats is not imported under whichever sorts
/// first: the caller is asked to say which.
#[test]
fn a_report_two_importers_are_certain_of_needs_its_format_named() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "both");
    let mut both = read_json(&reports_dir().join("trivy/trivy-repo_debian-stretch.json"));
    both["bomFormat"] = json!("CycloneDX");
    both["specVersion"] = json!("1.5");
    both["vulnerabilities"] = json!([]);
    let bytes = serde_json::to_vec(&both).unwrap();
    let (status, problem) = post_report(&server, &organization, "createEndpoint=true&endpoint=web-1", bytes.clone());
    assert_eq!(status, 415, "{problem}");
    assert_eq!(problem["formats_detected"], json!(["cyclonedx", "trivy"]), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("`format`"), "{problem}");
    assert!(all(&server, &key, "vulnerability-findings", "").is_empty());
    let answer = import_ok(&server, &organization, "createEndpoint=true&endpoint=web-1&format=trivy", bytes);
    assert_eq!((answer["format"].as_str(), answer["created"].as_u64()), (Some("trivy"), Some(5)), "{answer}");
}

/// `endpoint` names the one endpoint a report is about: a report naming
/// several hosts is refused with it, not written to them all.
#[test]
fn endpoint_confines_a_report_to_one_host_or_refuses_it() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "confined");
    let wazuh = std::fs::read(reports_dir().join("wazuh/defectdojo_wazuh-4.8-indexer.json")).unwrap();
    let (status, problem) = post_report(&server, &organization, "createEndpoint=true&endpoint=myhost0", wazuh.clone());
    assert_eq!(status, 422, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("names 2 hosts (myhost0, myhost1)") && detail.contains("nothing was written"), "{problem}");
    assert!(all(&server, &key, "endpoints", "").is_empty());
    assert!(all(&server, &key, "vulnerability-findings", "").is_empty());
    // Without it, each host's entries go to that host's endpoint.
    import_ok(&server, &organization, "", wazuh.clone());
    assert_eq!(all(&server, &key, "endpoints", "").len(), 2);

    // Two hosts of the report under one name are that one host: with
    // `endpoint`, their entries go to it, and no endpoint of that name is
    // matched or made, nor another's findings resolved.
    let (organization, key) = new_organization(&server, "confined-one-name");
    let mut one_name: Value = serde_json::from_slice(&wazuh).unwrap();
    for hit in one_name["hits"]["hits"].as_array_mut().unwrap() {
        hit["_source"]["agent"]["name"] = json!("myhost0");
    }
    let one_name = serde_json::to_vec(&one_name).unwrap();
    let answer = import_ok(&server, &organization, "createEndpoint=true&endpoint=elsewhere", one_name.clone());
    let endpoints = all(&server, &key, "endpoints", "");
    assert_eq!(endpoints.len(), 1, "only the endpoint named by `endpoint`: {endpoints:?}");
    let elsewhere = endpoints[0]["id"].as_str().unwrap().to_owned();
    let findings = all(&server, &key, "vulnerability-findings", "");
    assert!(!findings.is_empty() && answer["created"].as_u64() == Some(findings.len() as u64), "{answer}");
    assert!(findings.iter().all(|finding| finding["endpoint_id"] == elsewhere.as_str()), "{findings:?}");
    // Imported again the same way, nothing of it is resolved.
    let again = import_ok(&server, &organization, &format!("endpoint={elsewhere}"), one_name);
    assert_eq!(again["resolved"].as_u64(), Some(0), "{again}");
    assert_eq!(all(&server, &key, "endpoints", "").len(), 1);
}

/// Host names match without regard to case, so two endpoints whose names
/// differ only in case make a name ambiguous: refused with both, never one
/// picked silently.
#[test]
fn an_ambiguous_endpoint_name_is_refused_naming_the_candidates() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "ambiguous");
    // With ids of their own: without, the second line would name the first
    // endpoint by its host name.
    let endpoints: Vec<Value> =
        [("019a0000-0000-7000-8000-0000000000d1", "dup-1"), ("019a0000-0000-7000-8000-0000000000d2", "DUP-1")]
            .iter()
            .map(|(id, hostname)| {
                json!({"id": id, "hostname": hostname,
                   "operating_system": {"family": "linux", "name": "Debian", "version": "12"}})
            })
            .collect();
    assert_eq!(server.import_lines(&organization, "endpoints", &endpoints).status(), 200);
    let ids: Vec<String> = all(&server, &key, "endpoints", "")
        .iter()
        .map(|endpoint| endpoint["id"].as_str().unwrap().to_owned())
        .collect();
    let report = std::fs::read(reports_dir().join("trivy/trivy-repo_ubuntu-1804.json")).unwrap();
    for query in ["endpoint=dup-1", "endpoint=Dup-1&createEndpoint=true"] {
        let (status, problem) = post_report(&server, &organization, query, report.clone());
        assert_eq!(status, 422, "{query}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("2 endpoints have the host name"), "{detail}");
        assert!(ids.iter().all(|id| detail.contains(id.as_str())), "{detail} names {ids:?}");
    }
    assert!(all(&server, &key, "vulnerability-findings", "").is_empty(), "nothing was written");
    // By id, it is not ambiguous.
    let answer = import_ok(&server, &organization, &format!("endpoint={}", ids[0]), report);
    assert_eq!(answer["created"], 5, "{answer}");
}

/// A newer version of a package moves its findings to the new
/// installation's target; the old target stops listing them and, with none
/// left open, becomes obsolete. Findings and targets agree throughout, as
/// `esr check` verifies.
#[test]
fn a_finding_that_moves_to_a_new_version_leaves_its_old_target() {
    let mut server = Server::start(&plugins_dir());
    let (organization, key) = new_organization(&server, "upgrade");
    let file = reports_dir().join("trivy/trivy-repo_debian-stretch.json");
    let mut report = read_json(&file);
    let first = import_ok(
        &server,
        &organization,
        "createEndpoint=true&endpoint=stretch-1",
        serde_json::to_vec(&report).unwrap(),
    );
    let moved_package = report["Results"][0]["Vulnerabilities"][0]["PkgName"].as_str().unwrap().to_owned();
    let old_target = all(&server, &key, "remediation-targets", "")
        .into_iter()
        .find(|target| target["subject"]["product"] == moved_package.as_str())
        .unwrap();
    assert!(first["targets_created"].as_u64().unwrap() >= 1, "{first}");

    // A day later the package is at a new version, still vulnerable.
    report["CreatedAt"] = json!("2026-11-02T00:00:00Z");
    for vulnerability in report["Results"][0]["Vulnerabilities"].as_array_mut().unwrap() {
        if vulnerability["PkgName"] == moved_package.as_str() {
            vulnerability["InstalledVersion"] = json!("9.9.9-1");
        }
    }
    let second = import_ok(&server, &organization, "endpoint=stretch-1", serde_json::to_vec(&report).unwrap());
    assert_eq!(second["created"], 0, "the same findings: {second}");
    let targets = all(&server, &key, "remediation-targets", "");
    let old = targets.iter().find(|target| target["id"] == old_target["id"]).unwrap();
    let new = targets
        .iter()
        .find(|target| target["subject"]["product"] == moved_package.as_str() && target["id"] != old_target["id"])
        .unwrap_or_else(|| panic!("a target for the new version: {targets:?}"));
    assert_eq!(new["installed_version"], "9.9.9-1");
    assert_eq!(old["finding_ids"], json!([]), "{old}");
    assert_eq!(old["status"], "obsolete", "{old}");
    for finding_id in new["finding_ids"].as_array().unwrap() {
        let finding = all(&server, &key, "vulnerability-findings", "")
            .into_iter()
            .find(|finding| &finding["id"] == finding_id)
            .unwrap();
        assert_eq!(finding["remediation_target_id"], new["id"]);
    }

    server.stop();
    common::assert_check_passes(server.data_dir());
}
