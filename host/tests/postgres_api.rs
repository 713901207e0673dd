//! The whole public API on PostgreSQL: for one data set loaded into sled and
//! into PostgreSQL, every item, list, filter, sort, cursor walk, total,
//! ETag, error, the agent configuration, the OpenAPI document and health
//! answer byte for byte alike (apart from cursors); the admin routes work
//! on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::plugins_dir;
use common::postgres::Twins;
use reqwest::Method;
use serde_json::{Value, json};

const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];

#[test]
fn postgres_answers_the_api_cases_as_sled_does() {
    let twins = Twins::start(&plugins_dir());
    let mut cases = 0;
    for organization in 0..2 {
        for collection in COLLECTIONS {
            let records = twins.sled.all(organization, collection);
            assert!(!records.is_empty(), "{collection}");
            // Items, with their ETags.
            for record in records.iter().take(60) {
                let path = format!("/v1/{collection}/{}", record["id"].as_str().unwrap());
                assert_eq!(twins.same_at(organization, &path).0, 200);
                cases += 1;
            }
            // Errors: another organization's record, no such record, a bad id.
            let other = twins.sled.all(1 - organization, collection);
            for path in [
                format!("/v1/{collection}/{}", other[0]["id"].as_str().unwrap()),
                format!("/v1/{collection}/01900000-0000-7000-8000-000000000000"),
                format!("/v1/{collection}/not-a-uuid"),
                format!("/v1/{collection}?limit=0"),
                format!("/v1/{collection}?sort=nonsense"),
                format!("/v1/{collection}?cursor=forged"),
                format!("/v1/{collection}?unknownParameter=1"),
            ] {
                assert_ne!(twins.same_at(organization, &path).0, 200, "{path}");
                cases += 1;
            }
            // Pages, sorts and totals.
            for query in [
                "",
                "limit=1",
                "limit=5&offset=3",
                "limit=100&offset=100000",
                "sort=-created_at",
                "sort=updated_at&limit=7",
            ] {
                assert_eq!(twins.same_at(organization, &format!("/v1/{collection}?{query}")).0, 200);
                cases += 1;
            }
            // A cursor walk, each server on its own cursors.
            let base = format!("/v1/{collection}?limit=9&sort=-updated_at");
            let (mut sled_path, mut postgres_path) = (base.clone(), base.clone());
            loop {
                let (status, sled_body, postgres_body) = twins.same(organization, &sled_path, &postgres_path);
                assert_eq!(status, 200);
                cases += 1;
                let (sled_page, postgres_page): (Value, Value) =
                    (serde_json::from_str(&sled_body).unwrap(), serde_json::from_str(&postgres_body).unwrap());
                match (sled_page["next_cursor"].as_str(), postgres_page["next_cursor"].as_str()) {
                    (Some(a), Some(b)) => {
                        sled_path = format!("{base}&cursor={a}");
                        postgres_path = format!("{base}&cursor={b}");
                    }
                    _ => break,
                }
            }
        }
    }
    // Filters whose totals come from counts, pairs, hours or intersections.
    for query in [
        "status=open",
        "status=open&severity=critical",
        "status=open,resolved&severity=high,critical&kev=true",
        "severity=critical&findingType=vulnerability",
        "updatedAfter=2020-01-01T00:00:00Z",
        "status=open&updatedAfter=2020-01-01T00:00:00Z",
        "minCvss=7.5&sort=-cvss",
        "minCvss=5&status=open&sort=severity",
        "firstSeenAfter=2025-01-01T00:00:00Z&sort=first_seen_at",
        "sort=-last_seen_at&limit=50",
    ] {
        assert_eq!(twins.same_at(0, &format!("/v1/vulnerability-findings?{query}")).0, 200, "{query}");
        cases += 1;
    }
    for query in ["osFamily=linux", "osFamily=linux&hasAgent=true", "hostname=W", "sort=hostname", "tag=production"] {
        assert_eq!(twins.same_at(0, &format!("/v1/endpoints?{query}")).0, 200, "{query}");
        cases += 1;
    }
    for query in [
        "status=actionable&targetType=software",
        "status=identified,queued&packageManager=apt",
        "dueBefore=2030-01-01T00:00:00Z&sort=due_at",
    ] {
        assert_eq!(twins.same_at(0, &format!("/v1/remediation-targets?{query}")).0, 200, "{query}");
        cases += 1;
    }
    // The agent configuration, the OpenAPI document, health.
    for path in ["/v1/agent/config?platform=linux", "/v1/agent/config?platform=windows", "/v1/openapi.json"] {
        for organization in 0..2 {
            assert_eq!(twins.same_at(organization, path).0, 200, "{path}");
            cases += 1;
        }
    }
    // Health, but for when each server loaded its components and which host answered.
    let health = |server: &common::Server| -> Value {
        let mut health: Value = server.client.get(server.url("/v1/health")).send().unwrap().json().unwrap();
        let port = server.base.rsplit(':').next().unwrap();
        assert!(health["host"].as_str().unwrap().ends_with(&format!(":{port}")), "{health}");
        health.as_object_mut().unwrap().remove("host");
        for checks in health["checks"].as_object_mut().unwrap().values_mut() {
            for check in checks.as_array_mut().unwrap() {
                check.as_object_mut().unwrap().remove("loaded_at");
            }
        }
        health
    };
    assert_eq!(health(&twins.sled), health(&twins.postgres));
    eprintln!("{cases} requests answered alike");
}

#[test]
fn admin_routes_and_the_command_line_work_on_postgres() {
    let database = common::postgres::TestDatabase::new();
    let server = common::Server::start_with(&plugins_dir(), &["--database", &database.url]);
    // The admin token is kept in the database.
    let stored: Vec<u8> = database
        .client()
        .query_one("SELECT value FROM settings WHERE name = 'secret/admin-token'", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        server.admin_token(),
        format!("esradm_{}", stored.iter().map(|b| format!("{b:02x}")).collect::<String>())
    );
    let created: Value = server
        .admin(Method::POST, "/admin/v1/organizations")
        .json(&json!({"name": "Initech"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let organization = created["organization_id"].as_str().unwrap().to_owned();
    let key: Value = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": organization, "name": "ci", "scopes": ["endpoints:read"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
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
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["check", "--database", &database.url, "--data-dir"])
        .arg(server.data_dir())
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    assert!(String::from_utf8_lossy(&check.stdout).contains("every index agrees"));
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
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["check", "--database", &database.url, "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
}
