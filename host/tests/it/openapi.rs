//! The OpenAPI document: served without a key, made from the loaded
//! components, equal to the checked-in `docs/openapi.json`, accepted by an
//! independent validator, honoured by the live server under schemathesis,
//! held to the linters API teams use (Redocly's recommended rules, Spectral
//! with the OWASP API Security ruleset), and usable through a client
//! generated from it.
//!
//! The Python tools run from the virtualenv `make test` creates
//! (`target/venv`, from `host/tests/python/requirements.txt`); the linters
//! from the npm packages it installs (`target/npm`, from
//! `host/tests/lint/package-lock.json`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, plugins_dir, plugins_dir_with, python_dir, test_plugins_dir, venv_program, workspace};
use serde_json::Value;

fn lint_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("lint")
}

/// The pinned npm tools' directory (`$ESR_NPM_DIR`, set by `make test`, or
/// `target/npm`).
fn npm_dir() -> PathBuf {
    std::env::var_os("ESR_NPM_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target").join("npm"))
}

/// A command running one of the pinned npm tools, with telemetry off.
fn npm_program(name: &str) -> Command {
    let modules = npm_dir().join("node_modules");
    let program = modules.join(".bin").join(name);
    assert!(program.exists(), "{} is missing: run `make test`, which installs the linters", program.display());
    let mut command = Command::new(program);
    // The Spectral ruleset's `extends` names an npm package: found here.
    command.env("NODE_PATH", &modules);
    command.env("REDOCLY_TELEMETRY", "off").env("REDOCLY_SUPPRESS_UPDATE_NOTICE", "true").env("DO_NOT_TRACK", "1");
    command
}

/// The document the live server answers, in a file of its own.
fn served_document_file(server: &Server) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("openapi.json"), serde_json::to_vec_pretty(&served_document(server)).unwrap())
        .unwrap();
    dir
}

/// Runs a command to its end; panics with its output unless it succeeds.
fn run(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    stdout
}

fn served_document(server: &Server) -> Value {
    let response = server.client.get(server.url("/v1/openapi.json")).send().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("etag"));
    response.json().unwrap()
}

fn query_parameter<'d>(document: &'d Value, path: &str, name: &str) -> Option<&'d Value> {
    document["paths"][path]["get"]["parameters"].as_array().unwrap().iter().find(|p| p["name"] == name)
}

#[test]
fn the_served_document_is_the_checked_in_one() {
    let server = Server::start(&plugins_dir());
    let served = served_document(&server);
    let checked_in_path = workspace().join("docs").join("openapi.json");
    let checked_in: Value = serde_json::from_slice(&std::fs::read(&checked_in_path).unwrap()).unwrap();
    assert!(
        served == checked_in,
        "{} differs from what the server answers at /v1/openapi.json: run `make openapi` to rewrite it",
        checked_in_path.display()
    );
    // `esr plugins openapi` prints the same document without a server.
    let printed =
        run(Command::new(env!("CARGO_BIN_EXE_esr")).args(["plugins", "openapi", "--plugins-dir"]).arg(plugins_dir()));
    assert_eq!(serde_json::from_str::<Value>(&printed).unwrap(), served);
}

#[test]
fn the_document_covers_every_operation_and_takes_parameters_from_the_components() {
    let server = Server::start(&plugins_dir());
    let document = served_document(&server);
    assert_eq!(document["openapi"], "3.1.0");
    let operations = [
        ("/v1/endpoints", "listEndpoints"),
        ("/v1/endpoints/{endpointId}", "getEndpoint"),
        ("/v1/remediation-targets", "listRemediationTargets"),
        ("/v1/remediation-targets/{targetId}", "getRemediationTarget"),
        ("/v1/scopes", "listScopes"),
        ("/v1/scopes/{scopeId}", "getScope"),
        ("/v1/vulnerability-findings", "listVulnerabilityFindings"),
        ("/v1/vulnerability-findings/{findingId}", "getVulnerabilityFinding"),
        ("/v1/endpoints/summary", "summarizeEndpoints"),
        ("/v1/remediation-targets/summary", "summarizeRemediationTargets"),
        ("/v1/vulnerability-findings/summary", "summarizeVulnerabilityFindings"),
        ("/v1/vulnerability-findings/{findingId}/history", "getVulnerabilityFindingHistory"),
        ("/v1/remediation-targets/{targetId}/history", "getRemediationTargetHistory"),
        ("/v1/endpoints/export", "exportEndpoints"),
        ("/v1/remediation-targets/export", "exportRemediationTargets"),
        ("/v1/scopes/export", "exportScopes"),
        ("/v1/vulnerability-findings/export", "exportVulnerabilityFindings"),
        ("/v1/changes", "listChanges"),
        ("/v1/agent/config", "getAgentConfig"),
        ("/v1/health", "getHealth"),
        ("/v1/openapi.json", "getOpenApiDocument"),
    ];
    assert_eq!(document["paths"].as_object().unwrap().len(), operations.len());
    for (path, operation_id) in operations {
        assert_eq!(document["paths"][path]["get"]["operationId"], operation_id, "{path}");
    }
    assert_eq!(document["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
    assert_eq!(document["paths"]["/v1/health"]["get"]["security"], serde_json::json!([]));

    // What the findings component declares, as it declares it.
    let severity = query_parameter(&document, "/v1/vulnerability-findings", "severity").unwrap();
    let pattern = severity["schema"]["pattern"].as_str().unwrap();
    assert!(pattern.contains("critical|high|medium|low|info"), "{pattern}");
    let sort = query_parameter(&document, "/v1/vulnerability-findings", "sort").unwrap();
    assert!(sort["schema"]["enum"].as_array().unwrap().contains(&"-cvss".into()));
    let limit = query_parameter(&document, "/v1/endpoints", "limit").unwrap();
    assert_eq!(
        limit["schema"],
        serde_json::json!({"type": "integer", "format": "int32", "minimum": 1, "maximum": 100, "default": 50})
    );
    let platform = query_parameter(&document, "/v1/agent/config", "platform").unwrap();
    assert_eq!(platform["required"], true);
    let finding = &document["components"]["schemas"]["VulnerabilityFinding"];
    assert_eq!(finding["properties"]["severity"]["enum"][0], "critical");
    let list = &document["components"]["schemas"]["EndpointList"];
    assert_eq!(list["properties"]["data"]["items"]["$ref"], "#/components/schemas/Endpoint");
    // A summary's groupBy names the fields its component groups by.
    let group_by = query_parameter(&document, "/v1/vulnerability-findings/summary", "groupBy").unwrap();
    assert_eq!(group_by["required"], true);
    assert!(group_by["schema"]["pattern"].as_str().unwrap().contains("severity|status|findingType|kev|scanner"));
    assert!(query_parameter(&document, "/v1/vulnerability-findings/summary", "endpointId").is_some());
    assert!(query_parameter(&document, "/v1/vulnerability-findings/summary", "limit").is_none());
    let summary = &document["components"]["schemas"]["VulnerabilityFindingSummary"];
    assert!(summary["properties"]["groups"]["items"]["properties"]["severity"].is_object());
    let operation = &document["paths"]["/v1/endpoints/summary"]["get"];
    assert!(operation["description"].as_str().unwrap().contains("endpoints:read"));
}

#[test]
fn replacing_a_component_changes_the_document() {
    let dir = plugins_dir_with(&[], &[]);
    let server = Server::start(dir.path());
    let stock = served_document(&server);
    assert!(query_parameter(&stock, "/v1/endpoints", "osFamily").is_some());

    // The redacted endpoints component takes only the common parameters
    // and sorts by two keys.
    std::fs::copy(test_plugins_dir().join("endpoints-redacted.wasm"), dir.path().join("endpoints.wasm")).unwrap();
    let reload = server.admin(reqwest::Method::POST, "/admin/v1/plugins/reload").send().unwrap();
    assert_eq!(reload.status(), 200, "{}", reload.text().unwrap());
    let replaced = served_document(&server);
    assert!(query_parameter(&replaced, "/v1/endpoints", "osFamily").is_none());
    let sort = query_parameter(&replaced, "/v1/endpoints", "sort").unwrap();
    assert_eq!(sort["schema"]["enum"].as_array().unwrap().len(), 4, "{sort}");
    assert_eq!(replaced["paths"]["/v1/scopes"], stock["paths"]["/v1/scopes"]);
}

#[test]
fn an_independent_validator_accepts_the_document() {
    let server = Server::start(&plugins_dir());
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&served_document(&server)).unwrap()).unwrap();
    let report = run(Command::new(venv_program("openapi-spec-validator")).arg(file.path()));
    assert!(report.contains("OK"), "{report}");
}

#[test]
fn schemathesis_finds_no_failure_against_the_live_server() {
    let server = Server::start(&plugins_dir());
    let reports = tempfile::tempdir().unwrap();
    run(Command::new(venv_program("schemathesis"))
        .current_dir(reports.path())
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .env("PYTHONPATH", python_dir())
        .arg("--config-file")
        .arg(python_dir().join("schemathesis.toml"))
        .args(["--no-color", "run", &server.url("/v1/openapi.json")])
        .args(["--checks", "all", "--seed", "20261123", "--max-examples", "25", "--workers", "2"])
        .args(["--header", &format!("Authorization: Bearer {}", server.keys[0])]));
}

#[test]
fn a_generated_python_client_pages_through_and_exports_every_collection() {
    let server = Server::start(&plugins_dir());
    let work = tempfile::tempdir().unwrap();
    let document = work.path().join("openapi.json");
    std::fs::write(&document, serde_json::to_vec(&served_document(&server)).unwrap()).unwrap();
    let generated = Command::new(venv_program("openapi-python-client"))
        .current_dir(work.path())
        .args(["generate", "--meta", "none", "--path"])
        .arg(&document)
        .arg("--config")
        .arg(python_dir().join("client-config.yaml"))
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&generated.stdout), String::from_utf8_lossy(&generated.stderr));
    // The generator skips what it cannot express, with a warning.
    assert!(generated.status.success() && !said.to_lowercase().contains("warning"), "{said}");
    // A change the feed then holds: one finding resolved.
    let mut finding = server.json("/v1/vulnerability-findings?status=open&limit=1")["data"][0].clone();
    let finding_id = finding["id"].as_str().unwrap().to_owned();
    let object = finding.as_object_mut().unwrap();
    for service_field in ["created_at", "updated_at"] {
        object.remove(service_field);
    }
    object.insert("status".into(), serde_json::json!("resolved"));
    object.insert("resolved_at".into(), serde_json::json!("2026-11-21T00:00:00Z"));
    let imported = server
        .admin(
            reqwest::Method::POST,
            &format!("/admin/v1/organizations/{}/import/vulnerability-findings", server.organization_ids[0]),
        )
        .header("content-type", "application/x-ndjson")
        .body(format!("{finding}\n"))
        .send()
        .unwrap();
    assert_eq!(imported.status(), 200, "{}", imported.text().unwrap_or_default());
    let feed = server.json("/v1/changes?limit=1");
    let seen = run(Command::new(venv_program("python"))
        .env("PYTHONPATH", work.path())
        .arg(python_dir().join("use_generated_client.py"))
        .args([&server.base, &server.keys[0]]));
    let seen: Value = serde_json::from_str(&seen).unwrap();
    for collection in ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"] {
        let total = server.json(&format!("/v1/{collection}?limit=1"))["total"].as_u64().unwrap();
        assert!(total > 0, "{collection}");
        assert_eq!(seen[collection]["ids"], total, "{collection}: {seen}");
        assert_eq!(seen[collection]["total"], total, "{collection}: {seen}");
        assert_eq!(seen[collection]["exported"], total, "{collection}: {seen}");
        let first = server.json(&format!("/v1/{collection}?limit=1"))["data"][0]["id"].clone();
        assert_eq!(seen[collection]["first"], first, "{collection}");
        if collection != "scopes" {
            assert_eq!(seen[collection]["summary_total"], total, "{collection}: {seen}");
            assert_eq!(seen[collection]["summary_counted"], total, "{collection}: {seen}");
        }
    }
    // One event per record (nothing was deleted), the resolved finding's last but one (its endpoint's count moved last).
    let events = seen["changes"]["events"].as_array().unwrap();
    let records: u64 = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"]
        .iter()
        .map(|collection| seen[*collection]["total"].as_u64().unwrap())
        .sum();
    assert_eq!(events.len() as u64, records);
    assert_eq!(seen["changes"]["sequence"], feed["sequence"]);
    assert_eq!(events[events.len() - 2]["id"], finding_id.as_str());
    assert_eq!(events[events.len() - 2]["operation"], "updated");
    assert!(seen["history"].is_array(), "{seen}");
}

#[test]
fn redocly_lint_passes_without_warnings() {
    let server = Server::start(&plugins_dir());
    let dir = served_document_file(&server);
    let report = run(npm_program("redocly")
        .args(["lint", "--format", "json", "--config"])
        .arg(lint_dir().join("redocly.yaml"))
        .arg(dir.path().join("openapi.json")));
    let report: Value = serde_json::from_str(&report).unwrap_or_else(|error| panic!("{error}: {report}"));
    assert_eq!(report["totals"]["errors"], 0, "{report:#}");
    assert_eq!(report["totals"]["warnings"], 0, "{report:#}");
}

#[test]
fn spectral_owasp_reports_no_errors() {
    let server = Server::start(&plugins_dir());
    let dir = served_document_file(&server);
    // Exits non-zero on any error; each rule left out is in the ruleset
    // with its reason.
    let report = run(npm_program("spectral")
        .args(["lint", "--format", "json", "--fail-severity", "error", "--ruleset"])
        .arg(lint_dir().join("spectral.yaml"))
        .arg(dir.path().join("openapi.json")));
    assert!(errors_in_spectral_report(&report).is_empty(), "{report}");
}

/// The rules Spectral's JSON report names at severity error (0).
fn errors_in_spectral_report(report: &str) -> Vec<String> {
    let problems: Value = serde_json::from_str(report).unwrap_or_else(|error| panic!("{error}: {report}"));
    let problems = problems.as_array().unwrap_or_else(|| panic!("not a list of problems: {report}"));
    problems.iter().filter(|problem| problem["severity"] == 0).map(|problem| problem["code"].to_string()).collect()
}

#[test]
fn the_linters_fail_a_document_missing_what_they_require() {
    // Without this, a tool that never ran (or a ruleset that never loaded)
    // would pass the two tests above.
    let server = Server::start(&plugins_dir());
    let mut document = served_document(&server);
    document["tags"][0].as_object_mut().unwrap().remove("description");
    let list_ok = &mut document["paths"]["/v1/scopes"]["get"]["responses"]["200"];
    list_ok["headers"].as_object_mut().unwrap().remove("RateLimit");
    document["components"]["schemas"]["Problem"]["properties"]["title"] = serde_json::json!({"type": "string"});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&document).unwrap()).unwrap();

    let redocly = npm_program("redocly")
        .args(["lint", "--format", "json", "--config"])
        .arg(lint_dir().join("redocly.yaml"))
        .arg(&file)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&redocly.stdout).unwrap();
    assert_eq!(report["totals"]["warnings"], 1, "{report:#}");
    assert_eq!(report["problems"][0]["ruleId"], "tag-description", "{report:#}");

    let spectral = npm_program("spectral")
        .args(["lint", "--format", "json", "--fail-severity", "error", "--ruleset"])
        .arg(lint_dir().join("spectral.yaml"))
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&spectral.stdout);
    assert!(!spectral.status.success(), "{said}");
    let mut errors = errors_in_spectral_report(&said);
    errors.sort();
    assert_eq!(errors, ["\"esr-rate-limit-fields\"", "\"owasp:api4:2023-string-limit\""], "{said}");
}

#[test]
fn every_stated_query_length_is_one_the_server_keeps() {
    // A value one character past a query parameter's maxLength is refused
    // with 400 naming it, whatever the parameter.
    let server = Server::start(&plugins_dir());
    let document = served_document(&server);
    let mut checked = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        let parameters = item["get"]["parameters"].as_array().unwrap();
        for parameter in parameters.iter().filter(|p| p["in"] == "query") {
            let Some(max) = parameter["schema"]["maxLength"].as_u64() else { continue };
            // Beyond the request target's own limit the answer is 414 (tested in request_limits.rs).
            if max > 7 * 1024 {
                continue;
            }
            let name = parameter["name"].as_str().unwrap();
            let mut query = vec![(name.to_owned(), "a".repeat(max as usize + 1))];
            if path == "/v1/agent/config" && name != "platform" {
                query.push(("platform".to_owned(), "linux".to_owned()));
            }
            let response =
                server.client.get(server.url(path)).bearer_auth(&server.keys[0]).query(&query).send().unwrap();
            assert_eq!(response.status(), 400, "{path} {name}");
            let problem: Value = response.json().unwrap();
            let expected = serde_json::json!({"name": name, "reason": format!("longer than {max} characters")});
            assert!(problem["invalid_params"].as_array().unwrap().contains(&expected), "{path} {name}: {problem}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} parameters state a maxLength");
}

#[test]
fn each_list_links_to_its_item_operation_by_a_real_id() {
    let server = Server::start(&plugins_dir());
    let document = served_document(&server);
    let lists = [
        ("/v1/endpoints", "getEndpoint", "endpointId"),
        ("/v1/remediation-targets", "getRemediationTarget", "targetId"),
        ("/v1/scopes", "getScope", "scopeId"),
        ("/v1/vulnerability-findings", "getVulnerabilityFinding", "findingId"),
    ];
    for (path, operation_id, parameter) in lists {
        let links = document["paths"][path]["get"]["responses"]["200"]["links"].as_object().unwrap();
        assert_eq!(links.len(), 1, "{path}: {links:?}");
        let link = &links[operation_id];
        assert_eq!(link["operationId"], operation_id, "{path}");
        let expression = link["parameters"][parameter].as_str().unwrap();
        // Follow the link as a client would: the expression's JSON pointer
        // into the list's body gives the item operation's parameter.
        let pointer = expression.strip_prefix("$response.body#").unwrap();
        let page = server.json(&format!("{path}?limit=3"));
        let id = page.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("{path}: {expression}"));
        let (item_path, item) = document["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, item)| item["get"]["operationId"] == operation_id)
            .unwrap();
        assert!(
            item["get"]["parameters"].as_array().unwrap().iter().any(|p| p["name"] == parameter && p["in"] == "path")
        );
        let record = server.json(&item_path.replace(&format!("{{{parameter}}}"), id));
        assert_eq!(record, page["data"][0], "{path}");
    }
}
