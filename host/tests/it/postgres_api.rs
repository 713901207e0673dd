//! The whole public API on PostgreSQL: for one data set loaded into sled and
//! into PostgreSQL, every item, list, filter, sort, cursor walk, total,
//! ETag, error, the agent configuration, the OpenAPI document and health
//! answer byte for byte alike (apart from cursors); the admin routes work
//! on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::postgres::Twins;
use common::{assert_check_passes_on, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

#[test]
fn postgres_answers_the_api_cases_as_sled_does() {
    let cases = common::postgres::assert_answers_alike(&Twins::start(&plugins_dir()));
    eprintln!("{cases} requests answered alike");
}

#[test]
fn admin_routes_and_the_command_line_work_on_postgres() {
    let database = common::postgres::TestDatabase::new();
    let server = common::Server::start_with(&plugins_dir(), &["--database", &database.url]);
    // The database keeps only the admin token's SHA-256; the token itself
    // is in the first host's data directory (and was shown once).
    let token = server.admin_token();
    let settings: Vec<(String, Vec<u8>)> = database
        .client()
        .query("SELECT name, value FROM settings", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let digest = settings.iter().find(|(name, _)| name == "secret/admin-token-sha256").map(|(_, value)| value);
    assert_eq!(digest.map(Vec::as_slice), Some(Sha256::digest(token.as_bytes()).as_slice()));
    for (name, value) in &settings {
        assert!(!name.starts_with("secret/admin-token-text") && name != "secret/admin-token", "{name} is stored");
        assert!(!value.windows(token.len()).any(|window| window == token.as_bytes()), "{name} holds the token");
    }
    // Shown once: by the host that made it, when it made it; not by a later
    // host of the database, nor by the first one when it starts again.
    assert_eq!(server.stdout().matches(token.as_str()).count(), 1, "{}", server.stdout());
    let later_dir = common::private_tempdir();
    std::fs::copy(server.data_dir().join("demo-keys.json"), later_dir.path().join("demo-keys.json")).unwrap();
    let mut later = common::Server::start_on_with(&plugins_dir(), later_dir.path(), &["--database", &database.url]);
    later.stop();
    let mut server = server;
    server.stop();
    let again = common::Server::start_on_with(&plugins_dir(), server.data_dir(), &["--database", &database.url]);
    for (host, stdout) in [("a later host", later.stdout()), ("the first host again", again.stdout())] {
        assert!(!stdout.contains(&token) && !stdout.contains("admin token"), "{host} showed a token:\n{stdout}");
    }
    let server = again;
    let created: Value = server
        .admin(Method::POST, "/admin/v1/organizations")
        .json(&json!({"name": "Initech"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let organization = created["organization_id"].as_str().unwrap().to_owned();
    let key = server.create_key(&organization, "ci", &["endpoints:read"]);
    let api_key = key["api_key"].as_str().unwrap().to_owned();
    let response = server
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/endpoints"))
        .header("content-type", "application/x-ndjson")
        .body(format!("{}\n", json!({"hostname": "node-1", "operating_system": {"name": "Linux", "family": "linux"}})))
        .send()
        .unwrap();
    let ids = common::imported_ids(response);
    let page: Value =
        server.client.get(server.url("/v1/endpoints")).bearer_auth(&api_key).send().unwrap().json().unwrap();
    assert_eq!(page["total"], 1);
    assert_eq!(page["data"][0]["id"], ids[0].as_str());
    // Refused and revoked keys.
    let key_id = key["id"].as_str().unwrap();
    assert_eq!(server.admin(Method::DELETE, &format!("/admin/v1/keys/{key_id}")).send().unwrap().status(), 204);
    common::wait_until(std::time::Duration::from_secs(10), "the revoked key to be refused", || {
        server.client.get(server.url("/v1/endpoints")).bearer_auth(&api_key).send().unwrap().status() == 401
    });
    let organizations = server.cli(&["organizations", "list"]);
    assert!(organizations.status.success(), "{}", String::from_utf8_lossy(&organizations.stderr));
    assert!(String::from_utf8_lossy(&organizations.stdout).contains("Initech"));
    let reload = server.admin(Method::POST, "/admin/v1/plugins/reload").send().unwrap();
    assert_eq!(reload.status(), 200);
    let metrics = server.admin(Method::GET, "/metrics").send().unwrap().text().unwrap();
    assert!(metrics.contains("esr_"), "{metrics}");

    // `esr check` on the database.
    let mut server = server;
    server.stop();
    assert_check_passes_on(Some(&database.url), server.data_dir());
}

#[test]
fn a_database_holding_the_admin_token_keeps_only_its_digest_after_the_upgrade_and_the_hosts_copy_keeps_working() {
    let database = common::postgres::TestDatabase::new();
    // What schema 5 held: the token's 32 bytes in `settings`; each host
    // wrote `esradm_` and their hex to its data directory.
    let bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
    let token = format!("esradm_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let mut client = database.client();
    client.execute("UPDATE schema_version SET version = 5", &[]).unwrap();
    client.execute("INSERT INTO settings (name, value) VALUES ('secret/admin-token', $1)", &[&bytes]).unwrap();
    let data_dir = common::private_tempdir();
    std::fs::write(data_dir.path().join("admin-token"), &token).unwrap();

    let server = common::Server::start_on_with(&plugins_dir(), data_dir.path(), &["--database", &database.url]);
    assert_eq!(server.admin_token(), token, "the host's copy is left as it was");
    assert_eq!(server.admin(Method::GET, "/admin/v1/organizations").send().unwrap().status(), 200);
    let stored: Vec<(String, Vec<u8>)> = client
        .query("SELECT name, value FROM settings WHERE name LIKE 'secret/admin-token%'", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(stored, [("secret/admin-token-sha256".to_owned(), Sha256::digest(token.as_bytes()).to_vec())]);
    let version: i32 = client.query_one("SELECT version FROM schema_version", &[]).unwrap().get(0);
    assert_eq!(version, esr::store::postgres::SCHEMA_VERSION);
}

#[test]
fn esr_seed_writes_an_organization_into_postgres() {
    let database = common::postgres::TestDatabase::new();
    let dir = common::private_tempdir();
    let seeded = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["seed", "--endpoints", "20", "--findings-per-endpoint", "5", "--database", &database.url, "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(seeded.status.success(), "{}", String::from_utf8_lossy(&seeded.stderr));
    let findings: i64 = database
        .client()
        .query_one("SELECT count(*) FROM records WHERE collection = 'vulnerability-findings'", &[])
        .unwrap()
        .get(0);
    assert_eq!(findings, 100);
    assert_check_passes_on(Some(&database.url), dir.path());
}

#[test]
fn an_exhausted_pool_makes_requests_wait_their_deadline_then_answer_503() {
    // Endpoint lists are served by a component that waits until its
    // deadline, holding the pool's only connection all along.
    let database = common::postgres::TestDatabase::new();
    let sleeper = common::test_plugins_dir().join("sleeper.wasm");
    let dir = common::plugins_dir_with(&["endpoints.wasm"], &[("sleeper.wasm", &sleeper)]);
    let server = common::Server::start_with(
        dir.path(),
        &["--database", &database.url, "--database-pool-size", "1", "--plugin-deadline-ms", "1000"],
    );
    let answers: Vec<(u16, Option<String>, String, String)> = std::thread::scope(|scope| {
        let requests: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let response = server.get("/v1/endpoints?wait=sleep");
                    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
                    let (retry_after, content_type) = (header("retry-after"), header("content-type").unwrap());
                    (response.status().as_u16(), retry_after, content_type, response.text().unwrap())
                })
            })
            .collect();
        requests.into_iter().map(|request| request.join().unwrap()).collect()
    });
    // The call that holds the connection runs into its deadline; the others
    // wait for the connection, as tasks, until theirs.
    for (status, retry_after, content_type, body) in &answers {
        assert_eq!(*status, 503, "{body}");
        assert_eq!(content_type, "application/problem+json", "{body}");
        assert!(retry_after.is_some(), "{body}");
    }
    let waited_out = answers.iter().filter(|answer| answer.3.contains("every database connection")).count();
    assert!(waited_out >= 1, "no request waited out its deadline for the connection: {answers:?}");
    // Every permit came back: the pool serves again.
    let findings = server.get("/v1/vulnerability-findings?limit=1");
    assert_eq!(findings.status(), 200);
    assert_eq!(server.get("/v1/health").status(), 200);
}

/// On PostgreSQL a request with a key this host found valid before runs
/// before the key's lookup, which its component call (or, without one, the
/// host before the answer leaves) makes first: a key revoked since fails
/// its very next request of every kind with `401`, never an answer or a
/// refusal of another kind, and the trail holds the refusal as a key's.
#[test]
fn a_key_revoked_after_it_was_known_valid_fails_its_next_request_of_every_kind() {
    let database = common::postgres::TestDatabase::new();
    let server = common::Server::start_with(&plugins_dir(), &["--database", &database.url]);
    let organization = &server.organization_ids[0];
    let page = server.json("/v1/endpoints?limit=1");
    let endpoint = page["data"][0]["id"].as_str().unwrap().to_owned();
    let hostname = page["data"][0]["hostname"].as_str().unwrap().to_owned();
    let item = format!("/v1/endpoints/{endpoint}");
    // An item (read with the key), a list, a list refused for its
    // parameter, a group the key may not read, and an item by HEAD.
    let cases = [
        (Method::GET, item.clone()),
        (Method::GET, "/v1/endpoints?limit=1".to_owned()),
        (Method::GET, "/v1/endpoints?limit=none".to_owned()),
        (Method::GET, "/v1/vulnerability-findings?limit=1".to_owned()),
        (Method::HEAD, item.clone()),
    ];
    for (method, path) in cases {
        let key = server.create_key(organization, "revoked", &["endpoints:read"]);
        let (api_key, key_id) = (key["api_key"].as_str().unwrap(), key["id"].as_str().unwrap());
        // Found valid, so known to this host.
        for known in ["/v1/endpoints?limit=1", item.as_str()] {
            let answer = server.client.get(server.url(known)).bearer_auth(api_key).send().unwrap();
            assert_eq!(answer.status(), 200, "{known}");
        }
        assert_eq!(server.admin(Method::DELETE, &format!("/admin/v1/keys/{key_id}")).send().unwrap().status(), 204);
        let refused = server.client.request(method.clone(), server.url(&path)).bearer_auth(api_key).send().unwrap();
        assert_eq!(refused.status(), 401, "{method} {path}");
        let body = refused.text().unwrap();
        assert!(!body.contains(&hostname) && !body.contains("\"hostname\""), "{method} {path}: {body}");
        if method == Method::GET {
            let problem: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(problem["detail"], "the API key is not valid", "{method} {path}");
        }
    }
    // Each refusal is in the trail as a key's that is not named.
    common::wait_until(std::time::Duration::from_secs(30), "the refusals in the trail", || {
        let path = format!("/admin/v1/organizations/{organization}/audit?limit=100");
        let trail: Value = server.admin(Method::GET, &path).send().unwrap().json().unwrap();
        let refusals: Vec<&Value> =
            trail["data"].as_array().unwrap().iter().filter(|entry| entry["status"] == 401).collect();
        assert!(refusals.iter().all(|entry| entry["principal"]["id"].is_null()), "{refusals:#?}");
        refusals.len() == 5
    });
}
