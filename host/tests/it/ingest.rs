//! The admin listener's write path, end to end: organizations, keys,
//! NDJSON imports (validation, all-or-nothing, quiet re-imports, derived
//! counts) and the command line that drives them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{Server, memory_figure, plugins_dir, reset_peak_memory, wait_until};
use reqwest::Method;
use serde_json::{Value, json};

const NDJSON: &str = "application/x-ndjson";

fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

fn endpoint(hostname: &str) -> Value {
    json!({"hostname": hostname, "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": ["imported"]})
}

fn finding(endpoint: &str, severity: &str) -> Value {
    json!({
        "endpoint_id": endpoint, "finding_type": "vulnerability", "title": "xz backdoor",
        "severity": severity, "status": "open", "cve_id": "CVE-2024-3094", "kev": true,
        "subject": {"type": "software", "vendor": "Tukaani", "product": "xz-utils", "version": "5.6.0"},
        "source": {"scanner": "trivy", "scanner_finding_id": format!("xz-{severity}")},
        "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00Z",
    })
}

fn import(server: &Server, organization: &str, collection: &str, body: String) -> reqwest::blocking::Response {
    server
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/{collection}"))
        .header("content-type", NDJSON)
        .body(body)
        .send()
        .unwrap()
}

/// Sends raw bytes to `base` (`http://host:port`) and reads the answer until the server closes.
fn raw_request(base: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(read) = stream.read(&mut buffer) {
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..read]);
        if String::from_utf8_lossy(&answer).contains("}") {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

fn get(server: &Server, key: &str, path: &str) -> reqwest::blocking::Response {
    server.client.get(server.url(path)).bearer_auth(key).send().unwrap()
}

#[test]
fn every_admin_route_needs_the_admin_token() {
    let server = Server::start(&plugins_dir());
    let organization = &server.organization_ids[0];
    let routes = [
        (Method::POST, "/admin/v1/organizations".to_owned()),
        (Method::GET, "/admin/v1/organizations".to_owned()),
        (Method::POST, "/admin/v1/keys".to_owned()),
        (Method::GET, "/admin/v1/keys".to_owned()),
        (Method::DELETE, format!("/admin/v1/keys/{organization}")),
        (Method::POST, format!("/admin/v1/organizations/{organization}/import/endpoints")),
        (Method::POST, "/admin/v1/plugins/reload".to_owned()),
    ];
    // Each route's failures from an address of their own: past 5, an
    // address's failures are answered 429 (`admin_token.rs`).
    for (route, (method, path)) in routes.into_iter().enumerate() {
        let client = reqwest::blocking::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, 10 + route as u8]))
            .build()
            .unwrap();
        for token in [None, Some("wrong-token-of-some-length"), Some(server.keys[0].as_str())] {
            let mut request = client.request(method.clone(), format!("{}{path}", server.admin_base));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with {token:?}");
            assert_eq!(response.headers()["content-type"], "application/problem+json");
        }
    }
    assert_eq!(server.admin(Method::GET, "/admin/v1/keys").send().unwrap().status(), 200);
}

#[test]
fn keys_are_created_listed_without_the_secret_and_revoked_at_once() {
    // Everything logged, to show that no key reaches the log.
    let server = Server::start_with(&plugins_dir(), &["ESR_LOG=debug"]);
    let (organization, key) = server.organization_with_key("Initech", &["endpoints:read"]);
    assert_eq!(get(&server, &key, "/v1/endpoints").status(), 200);
    let forbidden = get(&server, &key, "/v1/scopes");
    assert_eq!(forbidden.status(), 403, "a scope the key lacks");

    let listing = server.admin(Method::GET, &format!("/admin/v1/keys?organizationId={organization}")).send().unwrap();
    let listing_text = listing.text().unwrap();
    assert!(!listing_text.contains(&key), "the key itself is never listed");
    let listed: Value = serde_json::from_str(&listing_text).unwrap();
    let keys = listed["data"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0]["scopes"], json!(["endpoints:read"]));
    assert!(key.starts_with(keys[0]["prefix"].as_str().unwrap()));
    let key_id = keys[0]["id"].as_str().unwrap();

    let unknown_key = get(&server, "esr_0000000000000000000000000000000000000000", "/v1/endpoints");
    assert_eq!(unknown_key.status(), 401);
    let unknown_body: Value = unknown_key.json().unwrap();
    assert_eq!(server.admin(Method::DELETE, &format!("/admin/v1/keys/{key_id}")).send().unwrap().status(), 204);
    let revoked = get(&server, &key, "/v1/endpoints");
    assert_eq!(revoked.status(), 401, "revoked on the very next request");
    assert_eq!(revoked.headers()["www-authenticate"], "Bearer");
    let revoked_body: Value = revoked.json().unwrap();
    for member in ["type", "title", "status", "detail", "error"] {
        assert_eq!(revoked_body[member], unknown_body[member], "a revoked key looks like an unknown one: {member}");
    }
    let again = server.admin(Method::DELETE, &format!("/admin/v1/keys/{key_id}")).send().unwrap();
    assert_eq!(again.status(), 204, "revoking twice is harmless");
    let missing = server.admin(Method::DELETE, &format!("/admin/v1/keys/{organization}")).send().unwrap();
    assert_eq!(missing.status(), 404);

    // Bad requests name what is wrong.
    let bad = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": "nope", "name": "", "scopes": ["admin:write"], "expires_at": "2001-01-01T00:00:00Z", "colour": 1}))
        .send()
        .unwrap();
    assert_eq!(bad.status(), 400);
    let problem: Value = bad.json().unwrap();
    assert_eq!(problem["invalid_params"].as_array().unwrap().len(), 1, "unknown members first: {problem}");
    let bad = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": "nope", "name": "", "scopes": ["admin:write"], "expires_at": "2001-01-01T00:00:00Z"}))
        .send()
        .unwrap();
    let problem: Value = bad.json().unwrap();
    let named: Vec<&str> =
        problem["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(named, ["organization_id", "name", "scopes", "expires_at"], "{problem}");
    let no_org = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": key_id, "name": "x", "scopes": ["scopes:read"]}))
        .send()
        .unwrap();
    assert_eq!(no_org.status(), 404, "an organization that does not exist");
    let not_json = server.admin(Method::POST, "/admin/v1/organizations").body("{").send().unwrap();
    assert_eq!(not_json.status(), 400);

    // An expiring key works until it expires, then looks like any unknown key.
    let expires_at = esr_contract::time::Timestamp(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64 + 5_000_000_000,
    )
    .format();
    let soon = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": organization, "name": "short", "scopes": ["endpoints:read"],
                      "expires_at": expires_at}))
        .send()
        .unwrap();
    let soon: Value = soon.json().unwrap();
    let short_key = soon["api_key"].as_str().unwrap();
    assert_eq!(get(&server, short_key, "/v1/endpoints").status(), 200);
    let mut expired = None;
    wait_until(Duration::from_secs(60), "the key to expire", || {
        let response = get(&server, short_key, "/v1/endpoints");
        match response.status().as_u16() {
            200 => false,
            _ => {
                expired = Some(response);
                true
            }
        }
    });
    let expired = expired.unwrap();
    assert_eq!(expired.status(), 401);
    let expired_body: Value = expired.json().unwrap();
    let malformed: Value = get(&server, "esr_short", "/v1/endpoints").json().unwrap();
    for member in ["type", "title", "status", "detail", "error"] {
        assert_eq!(expired_body[member], unknown_body[member], "expired like unknown: {member}");
        assert_eq!(malformed[member], unknown_body[member], "malformed like unknown: {member}");
    }

    // No key the server saw is in its log, though every request is.
    let log = server.log();
    assert!(log.contains("request") && log.contains("API key created"), "the log is on");
    for secret in [key.as_str(), short_key] {
        assert!(!log.contains(secret), "a key reached the log");
    }

    // Nor any file of the data directory, however deep: the store holds
    // their hashes (the search finds those, so it reads what was written).
    let files = crate::common::data_dir_files(server.data_dir());
    let on_disk = |needle: &[u8]| crate::common::any_holds(&files, needle);
    for secret in [key.as_str(), short_key] {
        assert!(on_disk(&esr_auth::keys::hash_key(secret)), "a created key's hash is in the store");
        assert!(!on_disk(secret.as_bytes()), "a key reached the disk");
    }
}

#[test]
fn imports_are_validated_all_or_nothing_and_quiet_when_nothing_changed() {
    let server = Server::start_with(&plugins_dir(), &["--import-max-mib", "1"]);
    let (organization, key) = server.organization_with_key("Umbrella", &["endpoints:read", "findings:read"]);

    // A batch with one bad line writes nothing and names the line and field.
    let mut bad = endpoint("bad");
    bad["operating_system"]["family"] = json!("plan9");
    let refused = import(&server, &organization, "endpoints", ndjson(&[endpoint("good"), bad]));
    assert_eq!(refused.status(), 422);
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
    let problem: Value = refused.json().unwrap();
    assert_eq!(
        problem["invalid_lines"],
        json!([{"line": 2, "field": "operating_system.family", "reason": "must be one of macos, windows, linux, other"}])
    );
    assert_eq!(get(&server, &key, "/v1/endpoints").json::<Value>().unwrap()["total"], 0, "nothing written");

    // Clear refusals for the wrong media type, an oversized body, an unknown collection.
    let wrong_type = server
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/endpoints"))
        .header("content-type", "application/json")
        .body(ndjson(&[endpoint("x")]))
        .send()
        .unwrap();
    assert_eq!(wrong_type.status(), 415);
    // Announced as 2 MiB against a 1 MiB limit by a client that waits for
    // `100 Continue` (as curl does): refused before the body is sent.
    let answer = raw_request(
        &server.admin_base,
        &format!(
            "POST /admin/v1/organizations/{organization}/import/endpoints HTTP/1.1\r\nHost: x\r\n\
             Authorization: Bearer {}\r\nContent-Type: {NDJSON}\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            server.admin_token(),
            2 << 20
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("application/problem+json") && answer.contains("at most 1048576 bytes"), "{answer}");
    assert_eq!(import(&server, &organization, "widgets", ndjson(&[endpoint("x")])).status(), 404);
    let nobody = "0190b0b0-0000-7000-8000-000000000000";
    assert_eq!(import(&server, nobody, "endpoints", ndjson(&[endpoint("x")])).status(), 404);

    // A valid batch: created, then visible through the public API.
    let accepted = import(&server, &organization, "endpoints", ndjson(&[endpoint("web-1"), endpoint("web-2")]));
    assert_eq!(accepted.status(), 200);
    let summary: Value = accepted.json().unwrap();
    assert_eq!(
        (summary["created"].clone(), summary["updated"].clone(), summary["unchanged"].clone()),
        (json!(2), json!(0), json!(0))
    );
    let host = summary["ids"][0].as_str().unwrap().to_owned();
    let stored: Value = get(&server, &key, &format!("/v1/endpoints/{host}")).json().unwrap();
    assert_eq!(stored["hostname"], "web-1");
    assert_eq!(stored["open_findings"], json!({"critical": 0, "high": 0, "medium": 0, "low": 0, "info": 0}));

    // Findings move the endpoint's open counts; the demo organizations see none of it.
    let findings = import(
        &server,
        &organization,
        "vulnerability-findings",
        ndjson(&[finding(&host, "critical"), finding(&host, "high")]),
    );
    assert_eq!(findings.status(), 200);
    let finding_ids = common::imported_ids(findings);
    let counted: Value = get(&server, &key, &format!("/v1/endpoints/{host}")).json().unwrap();
    assert_eq!(counted["open_findings"], json!({"critical": 1, "high": 1, "medium": 0, "low": 0, "info": 0}));
    let listed: Value =
        get(&server, &key, &format!("/v1/vulnerability-findings?endpointId={host}&severity=critical")).json().unwrap();
    assert_eq!(listed["total"], 1, "indexes see the import at once");
    assert_eq!(server.get(&format!("/v1/endpoints/{host}")).status(), 404, "another organization");

    // Re-importing the same content is quiet: nothing moves, updated_at included.
    let mut same = finding(&host, "critical");
    same["id"] = json!(finding_ids[0]);
    let before: Value = get(&server, &key, &format!("/v1/vulnerability-findings/{}", finding_ids[0])).json().unwrap();
    let quiet: Value =
        import(&server, &organization, "vulnerability-findings", ndjson(&[same.clone()])).json().unwrap();
    assert_eq!(
        (quiet["created"].clone(), quiet["updated"].clone(), quiet["unchanged"].clone()),
        (json!(0), json!(0), json!(1))
    );
    let after: Value = get(&server, &key, &format!("/v1/vulnerability-findings/{}", finding_ids[0])).json().unwrap();
    assert_eq!(after, before);

    // A change moves updated_at (and only then), and is what updatedAfter finds.
    same["status"] = json!("resolved");
    same["resolved_at"] = json!("2026-11-21T08:00:00Z");
    let changed: Value =
        import(&server, &organization, "vulnerability-findings", ndjson(&[same.clone()])).json().unwrap();
    assert_eq!(changed["updated"], 1);
    let resolved: Value = get(&server, &key, &format!("/v1/vulnerability-findings/{}", finding_ids[0])).json().unwrap();
    assert!(resolved["updated_at"].as_str() > before["updated_at"].as_str());
    assert_eq!(resolved["created_at"], before["created_at"]);
    let since = before["updated_at"].as_str().unwrap();
    let synced: Value = get(&server, &key, &format!("/v1/vulnerability-findings?updatedAfter={since}")).json().unwrap();
    let synced_ids: Vec<&str> = synced["data"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert!(synced_ids.contains(&finding_ids[0].as_str()), "{synced_ids:?}");
    let recounted: Value = get(&server, &key, &format!("/v1/endpoints/{host}")).json().unwrap();
    assert_eq!(recounted["open_findings"]["critical"], 0, "a resolved finding is no longer open");

    // A resolved finding cannot go back to open; it can be reopened.
    same["status"] = json!("open");
    let refused: Value =
        import(&server, &organization, "vulnerability-findings", ndjson(&[same.clone()])).json().unwrap();
    assert_eq!(refused["invalid_lines"][0]["field"], "status");
    same["status"] = json!("reopened");
    assert_eq!(import(&server, &organization, "vulnerability-findings", ndjson(&[same])).status(), 200);
}

#[test]
fn the_command_line_manages_keys_and_imports_files_through_the_server() {
    let server = Server::start(&plugins_dir());
    let run = |args: &[&str]| {
        let output = server.cli(args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        );
        (output.status.success(), stdout, stderr)
    };
    let (ok, stdout, stderr) = run(&["organizations", "create", "Hooli"]);
    assert!(ok, "{stderr}");
    // The id alone on standard output, as `ORG=$(esr organizations create …)` wants it.
    let organization = stdout.trim().to_owned();
    assert!(uuid::Uuid::try_parse(&organization).is_ok() && stderr.contains("Hooli"), "{stdout:?} {stderr:?}");
    let (ok, key, stderr) = run(&["keys", "create", "--organization", &organization, "--name", "cli"]);
    assert!(ok, "{stderr}");
    let key = key.trim().to_owned();
    assert!(key.starts_with("esr_") && stderr.contains("shown this once"), "{key} {stderr}");
    let (ok, listing, _) = run(&["keys", "list", "--organization", &organization]);
    assert!(ok && listing.contains("cli") && listing.contains("active") && !listing.contains(&key), "{listing}");

    // A file of five endpoints in batches of two, the fifth line bad: the
    // first two batches go in, the error names the file's line 5.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("endpoints.ndjson");
    let mut lines: Vec<Value> = (1..=5).map(|n| endpoint(&format!("host-{n}"))).collect();
    lines[4]["mac_address"] = json!("not-a-mac");
    std::fs::write(&file, ndjson(&lines)).unwrap();
    let file_arg = file.to_str().unwrap();
    let import_args =
        ["import", "--organization", &organization, "--collection", "endpoints", "--batch-lines", "2", file_arg];
    let (ok, _, stderr) = run(&import_args);
    assert!(!ok);
    assert!(stderr.contains("line 5: mac_address: not a MAC address"), "{stderr}");
    assert!(stderr.contains("nothing from line 5 on was imported; lines before it were (4 created"), "{stderr}");
    assert_eq!(get(&server, &key, "/v1/endpoints").json::<Value>().unwrap()["total"], 4);

    lines[4]["mac_address"] = json!("00:1A:2b:3c:4d:5e");
    std::fs::write(&file, ndjson(&lines)).unwrap();
    let (ok, stdout, stderr) = run(&import_args);
    assert!(ok, "{stderr}");
    // Run again after the half-run: lines without ids are found by their
    // natural key (here the host name), so nothing is made twice.
    assert!(stdout.contains("5 records") && stdout.contains("1 created") && stdout.contains("4 unchanged"), "{stdout}");
    assert_eq!(get(&server, &key, "/v1/endpoints").json::<Value>().unwrap()["total"], 5);
    let stored: Value = get(&server, &key, "/v1/endpoints?hostname=host-5").json().unwrap();
    assert_eq!(stored["data"][0]["mac_address"], "00:1a:2b:3c:4d:5e", "normalized");

    let key_id = {
        let (_, listing, _) = run(&["keys", "list", "--organization", &organization]);
        listing.split_whitespace().next().unwrap().to_owned()
    };
    let (ok, _, stderr) = run(&["keys", "revoke", &key_id]);
    assert!(ok, "{stderr}");
    assert_eq!(get(&server, &key, "/v1/endpoints").status(), 401);

    // A second server on the same data directory says what is wrong.
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--plugins-dir"])
        .arg(plugins_dir())
        .arg("--data-dir")
        .arg(server.data_dir())
        .output()
        .unwrap();
    assert!(!second.status.success());
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(message.contains("in use by another esr process"), "{message}");
}

#[test]
fn the_command_line_says_when_no_server_is_running() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("admin-token"), "esradm_token-of-a-stopped-server").unwrap();
    let file = dir.path().join("x.ndjson");
    std::fs::write(&file, ndjson(&[endpoint("x")])).unwrap();
    let free_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for args in [
        vec![
            "import",
            "--organization",
            "0190b0b0-0000-7000-8000-000000000000",
            "--collection",
            "endpoints",
            file.to_str().unwrap(),
        ],
        vec!["keys", "list"],
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
            .args(&args)
            .env("ESR_ADMIN_URL", format!("http://127.0.0.1:{free_port}"))
            .env("ESR_DATA_DIR", dir.path())
            .output()
            .unwrap();
        assert!(!output.status.success());
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(
            message.contains("no esr server answers") && message.contains("start one with `esr serve"),
            "{message}"
        );
    }
}

#[test]
fn hostile_text_is_refused_naming_the_line_and_field() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = server.organization_with_key("Cyberdyne", &["endpoints:read", "scopes:read"]);
    let with = |pointer: &str, value: Value| {
        let mut line = endpoint("web-1");
        line["owner"] = json!({"name": "IT", "email": null});
        line["agent_version"] = Value::Null;
        line["operating_system"]["vendor"] = Value::Null;
        line["operating_system"]["architecture"] = Value::Null;
        *line.pointer_mut(pointer).unwrap() = value;
        line.to_string()
    };
    let os = r#""operating_system": {"name": "Debian 12", "family": "linux"}"#;
    let lines = [
        // 1-3: a repeated key, at the top, nested, and inside an array (the last would silently win).
        format!(r#"{{"hostname": "web-1", "hostname": "web-2", {os}}}"#),
        r#"{"hostname": "web-1", "operating_system": {"name": "Debian 12", "family": "linux", "family": "other"}}"#
            .to_owned(),
        format!(r#"{{"hostname": "web-1", {os}, "extra": [{{"a": 1}}, {{"a": 1, "a": 2}}]}}"#),
        // 4-8: control characters (C0, C1, an ANSI escape, a line feed in one-line text) and a bidi override.
        with("/operating_system/name", json!("Debian\u{7} 12")),
        with("/agent_version", json!("1.2\u{9b}31m")),
        with("/tags", json!(["\u{1b}[31mred"])),
        with("/operating_system/vendor", json!("Debian\nProject")),
        with("/operating_system/architecture", json!("x86\u{202e}46")),
        // 9-11: host names and e-mail addresses that are not.
        with("/hostname", json!("web 1<script>alert(1)</script>")),
        with("/hostname", json!("-web-.example")),
        with("/owner/email", json!("not-an-email")),
        // 12: two problems on one line.
        {
            let mut line: Value = serde_json::from_str(&with("/hostname", json!("web 12"))).unwrap();
            line["owner"]["email"] = json!("nobody");
            line.to_string()
        },
    ];
    let refused = import(&server, &organization, "endpoints", lines.join("\n"));
    assert_eq!(refused.status(), 422);
    let problem: Value = refused.json().unwrap();
    // Problems and lines are counted apart: line 12 has two.
    assert_eq!((problem["problem_count"].as_u64(), problem["invalid_line_count"].as_u64()), (Some(13), Some(12)));
    assert!(problem["detail"].as_str().unwrap().starts_with("13 problem(s) on 12 line(s)"), "{problem}");
    let listed: Vec<(u64, String, String)> = problem["invalid_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (e["line"].as_u64().unwrap(), e["field"].as_str().unwrap().into(), e["reason"].as_str().unwrap().into())
        })
        .collect();
    let expected = [
        (1, "hostname", "a key may appear only once"),
        (2, "operating_system.family", "a key may appear only once"),
        (3, "extra[1].a", "a key may appear only once"),
        (4, "operating_system.name", "control character U+0007"),
        (5, "agent_version", "control character U+009B"),
        (6, "tags[0]", "control character U+001B"),
        (7, "operating_system.vendor", "control character U+000A; line breaks and tabs only in multi-line text"),
        (8, "operating_system.architecture", "bidirectional formatting character U+202E"),
        (9, "hostname", "not a host name (RFC 1123"),
        (10, "hostname", "not a host name (RFC 1123"),
        (11, "owner.email", "not an e-mail address"),
    ];
    for (line, field, reason) in expected {
        assert!(
            listed.iter().any(|(l, f, r)| *l == line && f == field && r.contains(reason)),
            "line {line} {field} {reason}: {listed:?}"
        );
    }
    assert_eq!(get(&server, &key, "/v1/endpoints").json::<Value>().unwrap()["total"], 0, "nothing written");

    // Names and addresses that are well formed go in; multi-line free text keeps its line breaks and tabs.
    let good = [
        with("/owner/email", json!("jane.o'neil+it@mail.acme.example")),
        with("/hostname", json!("WEB-01.eu-west.acme.example")),
    ];
    assert_eq!(import(&server, &organization, "endpoints", good.join("\n")).status(), 200);
    let scope = |description: &str| json!({"name": "Servers", "status": "active", "description": description});
    let accepted = import(&server, &organization, "scopes", ndjson(&[scope("Servers:\n\t- web\r\n\t- db")]));
    assert_eq!(accepted.status(), 200);
    let refused: Value =
        import(&server, &organization, "scopes", ndjson(&[scope("Servers \u{2066}hidden\u{2069}")])).json().unwrap();
    assert_eq!(refused["invalid_lines"][0]["field"], "description");
    assert!(refused["invalid_lines"][0]["reason"].as_str().unwrap().contains("U+2066"), "{refused}");
}

#[test]
fn an_import_at_the_size_limit_takes_bounded_memory_and_gives_it_back() {
    const BATCH: usize = 8 << 20;
    let server = Server::start_with(&plugins_dir(), &["--import-max-mib", "8"]);
    let (organization, _) = server.organization_with_key("Tyrell", &["scopes:read"]);
    let pid = server.pid();
    let baseline = memory_figure(pid, "VmRSS");
    // Peaks from here on: VmHWM restarts at the current resident size.
    reset_peak_memory(pid);
    // Measured: 15 times the batch (120 MiB), written in bounded
    // transactions; as one sled transaction it was 16 to 30 times (30 on
    // a fresh build of the whole suite on a loaded machine).
    let peak_allowed = baseline + 24 * BATCH as u64;
    let scope = |n: usize, description: &str| {
        json!({"name": format!("scope {n}"), "status": "active", "description": description}).to_string() + "\n"
    };

    // 8 MiB of the smallest lines: far more lines than a batch may hold, refused at once.
    let mut tiny = String::new();
    while tiny.len() + 64 < BATCH {
        tiny.push_str(&json!({"name": format!("s{}", tiny.len()), "status": "active"}).to_string());
        tiny.push('\n');
    }
    let refused = import(&server, &organization, "scopes", tiny);
    assert_eq!(refused.status(), 413);
    let problem: Value = refused.json().unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("at most 10000 lines"), "{problem}");
    let peak = memory_figure(pid, "VmHWM");
    assert!(peak <= peak_allowed, "peak {peak} bytes over a baseline of {baseline} for an 8 MiB batch");

    // 8 MiB in as many lines as a batch may hold: accepted, within a small multiple of its size.
    let padding = "x".repeat(BATCH / 10_000 - scope(9_999, "").len());
    let body: String = (0..10_000).map(|n| scope(n, &padding)).collect();
    assert!(body.len() <= BATCH, "{}", body.len());
    let accepted = import(&server, &organization, "scopes", body);
    assert_eq!(accepted.status(), 200);
    let peak = memory_figure(pid, "VmHWM");
    eprintln!("an 8 MiB batch of 10,000 lines: {} MiB above the baseline at its peak", (peak - baseline) >> 20);
    assert!(peak <= peak_allowed, "peak {peak} bytes over a baseline of {baseline} for an 8 MiB batch");

    // And the memory goes back once the batch is written. What stays is
    // the store's cache of it: measured 5 to 9 times the batch after the
    // first (its records, indexes and change events), growing by about as
    // much per further batch up to the store's cache capacity.
    let settled = baseline + 12 * BATCH as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while memory_figure(pid, "VmRSS") > settled {
        assert!(std::time::Instant::now() < deadline, "{} bytes resident after the batch", memory_figure(pid, "VmRSS"));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A dry run checks everything and writes nothing, over HTTP and from the
/// command line; a parameter a route does not take is `400` naming it.
#[test]
fn a_dry_run_writes_nothing_and_unknown_parameters_are_refused() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = server.organization_with_key("dry", &["endpoints:read"]);
    let path = format!("/admin/v1/organizations/{organization}/import/endpoints");
    let send = |query: &str, lines: &[Value]| {
        server
            .admin(Method::POST, &format!("{path}{query}"))
            .header("content-type", NDJSON)
            .body(ndjson(lines))
            .send()
            .unwrap()
    };
    let total = || get(&server, &key, "/v1/endpoints").json::<Value>().unwrap()["total"].as_u64().unwrap();

    let dry: Value = send("?dryRun=true", &[endpoint("dry-1")]).json().unwrap();
    assert_eq!((dry["created"].as_u64(), dry["dry_run"].as_bool()), (Some(1), Some(true)), "{dry}");
    assert!(dry["batch_id"].is_null(), "{dry}");
    assert_eq!(total(), 0, "a dry run wrote");
    // What a dry run finds wrong is what the write would refuse.
    let mut bad = endpoint("dry-2");
    bad["mac_address"] = json!("not-a-mac");
    let refused = send("?dryRun=true", &[bad]);
    assert_eq!(refused.status(), 422);

    let written: Value = send("?dryRun=false", &[endpoint("dry-1")]).json().unwrap();
    assert_eq!((written["created"].as_u64(), written["dry_run"].as_bool()), (Some(1), Some(false)), "{written}");
    let id = written["ids"][0].as_str().unwrap().to_owned();
    let mut again = endpoint("dry-1");
    again["id"] = json!(id);
    again["tags"] = json!(["changed"]);
    let dry: Value = send("?dryRun=true", &[again]).json().unwrap();
    assert_eq!(dry["updated"], 1, "{dry}");
    assert_eq!(
        get(&server, &key, &format!("/v1/endpoints/{id}")).json::<Value>().unwrap()["tags"],
        json!(["imported"])
    );

    // Parameters a route does not take, named; a bad flag value too.
    for (method, route, name) in [
        (Method::POST, format!("{path}?dryrun=true"), "dryrun"),
        (Method::POST, format!("{path}?dryRun=yes"), "dryRun"),
        (Method::GET, "/admin/v1/health?verbose=1".to_owned(), "verbose"),
        (Method::GET, "/admin/v1/organizations?limit=5".to_owned(), "limit"),
        (Method::POST, format!("/admin/v1/organizations/{organization}/reports?dry=1"), "dry"),
    ] {
        let response = server.admin(method, &route).header("content-type", NDJSON).body("").send().unwrap();
        assert_eq!(response.status(), 400, "{route}");
        let problem: Value = response.json().unwrap();
        assert_eq!(problem["invalid_params"][0]["name"], name, "{route}: {problem}");
    }

    // The command line: `--dry-run` for NDJSON, and no empty batches.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("endpoints.ndjson");
    std::fs::write(&file, ndjson(&[endpoint("cli-1"), endpoint("cli-2")])).unwrap();
    let file = file.to_str().unwrap();
    let output =
        server.cli(&["import", "--organization", &organization, "--collection", "endpoints", "--dry-run", file]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with("dry run: nothing written; 2 records") && stdout.contains("2 created"), "{stdout}");
    assert_eq!(total(), 1);
    let output = server.cli(&[
        "import",
        "--organization",
        &organization,
        "--collection",
        "endpoints",
        "--batch-lines",
        "0",
        file,
    ]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--batch-lines"), "{output:?}");
}

/// `esr check` on a directory that holds no store says so and fails,
/// creating nothing there.
#[test]
fn checking_a_directory_without_a_store_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-here");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["check", "--data-dir"])
        .arg(&missing)
        .env_remove("ESR_DATABASE_URL")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("holds no esr data"), "{output:?}");
    assert!(!missing.exists(), "check created {}", missing.display());
}

/// Re-running a file whose lines carry no ids changes nothing: each
/// collection's natural key finds the record the first run made.
#[test]
fn lines_without_ids_are_found_again_by_their_natural_keys() {
    let server = Server::start(&plugins_dir());
    let (organization, key) =
        server.organization_with_key("Initech", &["endpoints:read", "findings:read", "scopes:read", "targets:read"]);
    let ids = |collection: &str| -> Vec<String> {
        let page: Value = get(&server, &key, &format!("/v1/{collection}?limit=100")).json().unwrap();
        page["data"].as_array().unwrap().iter().map(|record| record["id"].as_str().unwrap().to_owned()).collect()
    };
    let run = |collection: &str, lines: &[Value]| -> Value {
        let response = import(&server, &organization, collection, ndjson(lines));
        assert_eq!(response.status(), 200, "{collection}");
        response.json().unwrap()
    };
    let counts =
        |summary: &Value| (summary["created"].as_u64(), summary["updated"].as_u64(), summary["unchanged"].as_u64());

    let endpoints = [endpoint("web-1"), endpoint("db-1")];
    assert_eq!(counts(&run("endpoints", &endpoints)), (Some(2), Some(0), Some(0)));
    // The host name matches without regard to case.
    assert_eq!(counts(&run("endpoints", &endpoints)), (Some(0), Some(0), Some(2)));
    let web = get(&server, &key, "/v1/endpoints?hostname=web-1").json::<Value>().unwrap()["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut shouted = endpoints.clone();
    shouted[0]["hostname"] = json!("WEB-1");
    assert_eq!(counts(&run("endpoints", &shouted)), (Some(0), Some(1), Some(1)));
    assert_eq!(ids("endpoints").len(), 2);

    let findings = [finding(&web, "critical"), finding(&web, "high")];
    assert_eq!(counts(&run("vulnerability-findings", &findings)), (Some(2), Some(0), Some(0)));
    let mut changed = findings.clone();
    changed[1]["title"] = json!("xz backdoor (confirmed)");
    assert_eq!(counts(&run("vulnerability-findings", &changed)), (Some(0), Some(1), Some(1)));
    assert_eq!(ids("vulnerability-findings").len(), 2);

    let scope = json!({"name": "Patch OpenSSL", "status": "active", "description": "keep it current",
                       "subject_filter": {"products": ["openssl"]}});
    assert_eq!(counts(&run("scopes", std::slice::from_ref(&scope))), (Some(1), Some(0), Some(0)));
    let mut renamed = scope.clone();
    renamed["name"] = json!("patch openssl");
    assert_eq!(
        counts(&run("scopes", &[renamed])),
        (Some(0), Some(1), Some(0)),
        "the name matches without regard to case"
    );
    assert_eq!(ids("scopes").len(), 1);

    let target = json!({"endpoint_id": web, "target_type": "software", "discovery_method": "passive",
                        "status": "identified",
                        "subject": {"type": "software", "vendor": "Tukaani", "product": "xz-utils"}});
    assert_eq!(counts(&run("remediation-targets", std::slice::from_ref(&target))), (Some(1), Some(0), Some(0)));
    assert_eq!(counts(&run("remediation-targets", &[target])), (Some(0), Some(0), Some(1)));
    assert_eq!(ids("remediation-targets").len(), 1);

    // Two stored records with one natural key (made by ids of their own):
    // a line without an id naming it is refused, listing both.
    let twin = |id: &str| {
        let mut line = endpoint("twin");
        line["id"] = json!(id);
        line
    };
    let twins = ["019a0000-0000-7000-8000-000000000001", "019a0000-0000-7000-8000-000000000002"];
    run("endpoints", &[twin(twins[0]), twin(twins[1])]);
    let refused = import(&server, &organization, "endpoints", ndjson(&[endpoint("Twin")]));
    assert_eq!(refused.status(), 422);
    let problem: Value = refused.json().unwrap();
    let reason = problem["invalid_lines"][0]["reason"].as_str().unwrap();
    assert!(twins.iter().all(|id| reason.contains(id)) && reason.contains("give the id"), "{problem}");
}

/// A finding belongs to at most one target and both sides say so: an
/// import that links them on one side writes the other, a move leaves the
/// old target, and two targets of one batch cannot both list a finding.
/// `esr check` verifies the result.
#[test]
fn findings_and_targets_stay_paired_whichever_side_an_import_writes() {
    let mut server = Server::start(&plugins_dir());
    let (organization, key) =
        server.organization_with_key("Soylent", &["endpoints:read", "findings:read", "targets:read"]);
    let run = |collection: &str, lines: &[Value]| -> reqwest::blocking::Response {
        import(&server, &organization, collection, ndjson(lines))
    };
    assert_eq!(run("endpoints", &[endpoint("web-1")]).status(), 200);
    let web =
        get(&server, &key, "/v1/endpoints").json::<Value>().unwrap()["data"][0]["id"].as_str().unwrap().to_owned();
    let mut findings = vec![finding(&web, "critical"), finding(&web, "high")];
    findings[0]["id"] = json!("019a0000-0000-7000-8000-00000000f001");
    findings[1]["id"] = json!("019a0000-0000-7000-8000-00000000f002");
    assert_eq!(run("vulnerability-findings", &findings).status(), 200);
    let (f1, f2) = ("019a0000-0000-7000-8000-00000000f001", "019a0000-0000-7000-8000-00000000f002");
    let (t1, t2) = ("019a0000-0000-7000-8000-0000000000a1", "019a0000-0000-7000-8000-0000000000a2");
    let target = |id: &str, product: &str, listed: &[&str]| {
        json!({"id": id, "endpoint_id": web, "target_type": "software", "discovery_method": "passive",
               "status": "identified", "finding_ids": listed,
               "subject": {"type": "software", "vendor": "Tukaani", "product": product}})
    };
    let named = |finding: &str| -> Value {
        get(&server, &key, &format!("/v1/vulnerability-findings/{finding}")).json::<Value>().unwrap()["remediation_target_id"]
            .clone()
    };
    let status_of = |collection: &str, id: &str| -> String {
        get(&server, &key, &format!("/v1/{collection}/{id}")).json::<Value>().unwrap()["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let listed = |target: &str| -> Value {
        get(&server, &key, &format!("/v1/remediation-targets/{target}")).json::<Value>().unwrap()["finding_ids"].clone()
    };

    // The target lists the finding: the finding names the target.
    assert_eq!(run("remediation-targets", &[target(t1, "xz-utils", &[f1])]).status(), 200);
    assert_eq!((named(f1), named(f2)), (json!(t1), Value::Null));
    // Another target lists it: it moves, and the first stops listing it;
    // with nothing left, the first becomes obsolete (its history says so).
    assert_eq!(run("remediation-targets", &[target(t2, "liblzma", &[f1])]).status(), 200);
    assert_eq!((named(f1), listed(t1), listed(t2)), (json!(t2), json!([]), json!([f1])));
    assert_eq!(status_of("remediation-targets", t1), "obsolete");
    let history: Value = get(&server, &key, &format!("/v1/remediation-targets/{t1}/history")).json().unwrap();
    assert_eq!(
        history["data"].as_array().and_then(|entries| entries.last()).map(|e| &e["status"]),
        Some(&json!("obsolete"))
    );
    // A finding names a target: that target lists it too.
    let mut named_t2 = findings[1].clone();
    named_t2["remediation_target_id"] = json!(t2);
    assert_eq!(run("vulnerability-findings", &[named_t2.clone()]).status(), 200);
    assert_eq!((named(f2), listed(t2)), (json!(t2), json!([f1, f2])));
    // A target no longer listing a finding: the finding names none.
    assert_eq!(run("remediation-targets", &[target(t2, "liblzma", &[f2])]).status(), 200);
    assert_eq!((named(f1), named(f2)), (Value::Null, json!(t2)));
    // Its last open finding resolved: the target becomes obsolete.
    let mut resolved = named_t2;
    resolved["status"] = json!("resolved");
    resolved["resolved_at"] = json!("2026-11-21T00:00:00Z");
    assert_eq!(run("vulnerability-findings", &[resolved]).status(), 200);
    assert_eq!(status_of("remediation-targets", t2), "obsolete");

    // Two targets of one batch listing one finding: refused, naming both lines.
    let (t3, t4) = ("019a0000-0000-7000-8000-0000000000a3", "019a0000-0000-7000-8000-0000000000a4");
    let refused = run("remediation-targets", &[target(t3, "zlib", &[f1]), target(t4, "bzip2", &[f1])]);
    assert_eq!(refused.status(), 422);
    let problem: Value = refused.json().unwrap();
    assert_eq!(problem["invalid_lines"][0]["line"], 2, "{problem}");
    assert!(problem["invalid_lines"][0]["reason"].as_str().unwrap().contains("line 1 too"), "{problem}");
    assert_eq!(named(f1), Value::Null, "nothing was written");

    server.stop();
    common::assert_check_passes(server.data_dir());
}

/// An id on several lines of one batch, among enough other lines that the
/// batch is prepared on every core: each line is compared with the one
/// before it, the summary and the history keep line order, and the
/// endpoint's open counts end where the last line leaves them.
#[test]
fn an_id_on_several_lines_of_one_batch_is_taken_line_after_line() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = server.organization_with_key("Repeats", &["endpoints:read", "findings:read"]);
    let endpoints = common::imported_ids(import(&server, &organization, "endpoints", ndjson(&[endpoint("web-1")])));
    let host = &endpoints[0];
    let repeated = "0190b0b0-1111-7000-8000-000000000001";
    let mut open = finding(host, "critical");
    open["id"] = json!(repeated);
    let mut resolved = open.clone();
    resolved["status"] = json!("resolved");
    resolved["resolved_at"] = json!("2026-11-21T08:00:00Z");
    let mut reopened = resolved.clone();
    reopened["status"] = json!("reopened");
    reopened["severity"] = json!("high");
    let others: Vec<Value> = (0..600)
        .map(|n| {
            let mut other = finding(host, "low");
            other["source"]["scanner_finding_id"] = json!(format!("other-{n}"));
            other
        })
        .collect();
    // open, the same again (unchanged), resolved, reopened as high: spread among the others.
    let mut lines = Vec::new();
    let mut rest = others.iter();
    for (at, line) in [(0, &open), (150, &open), (300, &resolved), (450, &reopened)] {
        lines.extend(rest.by_ref().take(at - lines.len()).cloned());
        lines.push(line.clone());
    }
    lines.extend(rest.cloned());
    let answer = import(&server, &organization, "vulnerability-findings", ndjson(&lines));
    assert_eq!(answer.status(), 200);
    let summary: Value = answer.json().unwrap();
    assert_eq!(
        (summary["created"].clone(), summary["updated"].clone(), summary["unchanged"].clone()),
        (json!(601), json!(2), json!(1)),
        "the first line creates, the repeat is unchanged, the two changes update"
    );
    let ids: Vec<&str> = summary["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap()).collect();
    assert_eq!(ids.len(), lines.len());
    let places: Vec<usize> = ids.iter().enumerate().filter(|(_, id)| **id == repeated).map(|(at, _)| at).collect();
    let expected: Vec<usize> =
        lines.iter().enumerate().filter(|(_, line)| line["id"] == repeated).map(|(at, _)| at).collect();
    assert_eq!(places, expected, "the summary's ids are in line order");

    let history: Value = get(&server, &key, &format!("/v1/vulnerability-findings/{repeated}/history")).json().unwrap();
    let statuses: Vec<&str> =
        history["data"].as_array().unwrap().iter().map(|entry| entry["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["open", "resolved", "reopened"]);
    let stored: Value = get(&server, &key, &format!("/v1/vulnerability-findings/{repeated}")).json().unwrap();
    assert_eq!((stored["status"].as_str(), stored["severity"].as_str()), (Some("reopened"), Some("high")));
    let counted: Value = get(&server, &key, &format!("/v1/endpoints/{host}")).json().unwrap();
    assert_eq!(counted["open_findings"], json!({"critical": 0, "high": 1, "medium": 0, "low": 600, "info": 0}));
}
