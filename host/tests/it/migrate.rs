//! `esr migrate`: a sled deployment with the demo data set, copied into
//! PostgreSQL, passes `esr check` and answers every request as the sled
//! server does; its API keys (revoked ones staying revoked), cursors and
//! admin token keep working. A database that holds data, a directory that
//! holds no deployment and one a running server holds are refused, and
//! nothing is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Output};
use std::sync::Mutex;

use common::postgres::{TestDatabase, Twins};
use common::{Server, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};

fn migrate(from: &std::path::Path, to: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_esr")).args(["migrate", "--to", to, "--from"]).arg(from).output().unwrap()
}

/// A key created on the running sled server: (id, key).
fn create_key(server: &Server, organization: &str, name: &str) -> (String, String) {
    let created: Value = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": organization, "name": name, "scopes": ["endpoints:read"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    (created["id"].as_str().unwrap().to_owned(), created["api_key"].as_str().unwrap().to_owned())
}

#[test]
fn a_migrated_deployment_answers_as_sled_does_with_its_keys_cursors_and_admin_token() {
    // Keys made on the sled deployment: one kept, one revoked.
    let made = Mutex::new(None);
    let resolved = Mutex::new(None);
    let client = Mutex::new(None);
    let twins = Twins::migrated(&plugins_dir(), |sled| {
        let organization = sled.organization_ids[0].clone();
        // A finding with a status history: resolved by an import.
        let mut finding = sled.json("/v1/vulnerability-findings?status=open&limit=1")["data"][0].clone();
        let object = finding.as_object_mut().unwrap();
        object.remove("created_at");
        object.remove("updated_at");
        object.insert("status".into(), json!("resolved"));
        object.insert("resolved_at".into(), json!("2026-11-21T00:00:00Z"));
        let imported = sled
            .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/vulnerability-findings"))
            .header("content-type", "application/x-ndjson")
            .body(format!("{finding}\n"))
            .send()
            .unwrap();
        assert_eq!(imported.status(), 200);
        *resolved.lock().unwrap() = Some(finding["id"].as_str().unwrap().to_owned());
        let kept = create_key(sled, &organization, "kept");
        let revoked = create_key(sled, &organization, "revoked");
        let status = sled.admin(Method::DELETE, &format!("/admin/v1/keys/{}", revoked.0)).send().unwrap().status();
        assert_eq!(status, 204);
        *made.lock().unwrap() = Some((kept.1, revoked.1));
        // A webhook subscription, paused (nothing listens).
        let subscribed = sled
            .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/webhooks"))
            .json(&json!({"url": "https://hooks.example.com/esr", "collections": ["endpoints"]}))
            .send()
            .unwrap();
        assert_eq!(subscribed.status(), 201);
        let id = subscribed.json::<serde_json::Value>().unwrap()["id"].as_str().unwrap().to_owned();
        let paused = sled
            .admin(Method::PATCH, &format!("/admin/v1/organizations/{organization}/webhooks/{id}"))
            .json(&json!({"state": "paused"}))
            .send()
            .unwrap();
        assert_eq!(paused.status(), 200);
        // An API client, made by a request the audit trail records.
        let made_client: Value = sled
            .admin(Method::POST, "/admin/v1/clients")
            .header("x-request-id", "made-before-the-migration")
            .json(&json!({"organization_id": organization, "name": "SIEM", "scopes": ["endpoints:read"]}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        *client.lock().unwrap() = Some(made_client);
        // The trail is written within a second; the harness stops sled with
        // SIGKILL. An entry shows before its batch is flushed, so the wait
        // is for a later entry too: the recorder writes one batch at a
        // time, flushed before the next, so once a read made after the
        // client's entry showed is in the trail, that entry is on disk.
        let trail_shows = |request_id: &str, read_as: &str| {
            let trail: Value = sled
                .admin(Method::GET, &format!("/admin/v1/organizations/{organization}/audit?limit=1000"))
                .header("x-request-id", read_as)
                .send()
                .unwrap()
                .json()
                .unwrap();
            trail["data"].as_array().unwrap().iter().any(|entry| entry["request_id"] == request_id)
        };
        common::wait_until(std::time::Duration::from_secs(30), "the client's creation in sled's trail", || {
            trail_shows("made-before-the-migration", "waiting-for-the-client")
        });
        common::wait_until(std::time::Duration::from_secs(30), "a later entry in sled's trail", || {
            trail_shows("read-after-the-client", "read-after-the-client")
        });
    });
    let (kept, revoked) = made.into_inner().unwrap().unwrap();
    let migration = twins.migration.as_ref().unwrap();
    let progress = String::from_utf8_lossy(&migration.stderr);
    assert!(progress.contains("vulnerability-findings:") && progress.contains("records copied"), "{progress}");

    // The demo keys printed for the sled deployment are the ones both servers use.
    assert_eq!(twins.postgres.keys, twins.sled.keys);
    let cases = common::postgres::assert_answers_alike(&twins);
    eprintln!("{cases} requests answered alike");

    // A key made on sled works on PostgreSQL; a revoked one stays refused.
    let status_with = |server: &Server, key: &str| {
        server.client.get(server.url("/v1/endpoints?limit=1")).bearer_auth(key).send().unwrap().status().as_u16()
    };
    assert_eq!((status_with(&twins.sled, &kept), status_with(&twins.postgres, &kept)), (200, 200));
    assert_eq!((status_with(&twins.sled, &revoked), status_with(&twins.postgres, &revoked)), (401, 401));

    // A cursor the sled server sealed opens on the PostgreSQL server, at the same page.
    for path in ["/v1/vulnerability-findings?limit=7&sort=-cvss", "/v1/endpoints?limit=5"] {
        let first = twins.sled.json(path);
        let cursor = first["next_cursor"].as_str().unwrap();
        let next = format!("{path}&cursor={cursor}");
        let (sled, postgres) = (twins.sled.get(&next), twins.postgres.get(&next));
        assert_eq!((sled.status().as_u16(), postgres.status().as_u16()), (200, 200), "{next}");
        // Alike apart from the next cursors: PostgreSQL's carries the WAL
        // position its page was read at.
        let without_cursor = |response: reqwest::blocking::Response| {
            let mut page: serde_json::Value = response.json().unwrap();
            let cursor = page["next_cursor"].take();
            (page, cursor.is_string())
        };
        assert_eq!(without_cursor(sled), without_cursor(postgres), "{next}");
    }

    // Histories are copied; the feed goes on from sled's sequence.
    let resolved = resolved.into_inner().unwrap().unwrap();
    let history = format!("/v1/vulnerability-findings/{resolved}/history");
    let (sled_history, postgres_history) = (twins.sled.json(&history), twins.postgres.json(&history));
    // The demo's own history first, then the resolution.
    assert_eq!(
        sled_history["data"].as_array().and_then(|entries| entries.last()).map(|e| &e["status"]),
        Some(&serde_json::json!("resolved"))
    );
    assert_eq!(postgres_history, sled_history);
    let sequence = |server: &Server| server.json("/v1/endpoints?limit=1")["sequence"].as_u64().unwrap();
    assert_eq!(sequence(&twins.postgres), sequence(&twins.sled));

    // The webhook subscription is copied with its state and position.
    let organization = &twins.sled.organization_ids[0];
    let subscriptions = |server: &Server| {
        let listed: serde_json::Value = server
            .client
            .get(format!("{}/admin/v1/organizations/{organization}/webhooks", server.admin_base))
            .bearer_auth(twins.sled.admin_token().trim())
            .send()
            .unwrap()
            .json()
            .unwrap();
        listed["data"].clone()
    };
    let copied = subscriptions(&twins.postgres);
    assert_eq!(copied, subscriptions(&twins.sled));
    assert_eq!(copied[0]["state"], "paused");

    // The API client, the signing keys and the audit trail are copied: the
    // client gets a token from PostgreSQL's host that sled's key set verifies.
    let client = client.into_inner().unwrap().unwrap();
    let jwks = |server: &Server| -> Value {
        server.client.get(server.url("/.well-known/jwks.json")).send().unwrap().json().unwrap()
    };
    assert_eq!(jwks(&twins.postgres), jwks(&twins.sled));
    let token = twins
        .postgres
        .client
        .post(twins.postgres.url("/oauth2/token"))
        .basic_auth(client["client_id"].as_str().unwrap(), client["client_secret"].as_str())
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap();
    assert_eq!(token.status(), 200);
    let trail: Value = twins
        .postgres
        .client
        .get(format!("{}/admin/v1/organizations/{organization}/audit?limit=1000", twins.postgres.admin_base))
        .bearer_auth(twins.sled.admin_token().trim())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let migrated =
        trail["data"].as_array().unwrap().iter().find(|entry| entry["request_id"] == "made-before-the-migration");
    assert!(migrated.is_some_and(|entry| entry["route"] == "/admin/v1/clients"), "{trail:#}");

    // The sled deployment's admin token is the PostgreSQL server's; the
    // database keeps only its SHA-256, so the PostgreSQL host, on a data
    // directory of its own, has no copy to write (its operator has one).
    let sled_token = twins.sled.admin_token();
    assert!(!twins.postgres.data_dir().join("admin-token").exists());
    assert!(twins.postgres.log().contains("kept only as its SHA-256"), "{}", twins.postgres.log());
    let organizations = twins
        .postgres
        .client
        .get(format!("{}/admin/v1/organizations", twins.postgres.admin_base))
        .bearer_auth(sled_token.trim())
        .send()
        .unwrap();
    assert_eq!(organizations.status(), 200);
}

/// Every row the database holds, as text, to see that nothing changed.
fn contents(database: &TestDatabase) -> Vec<String> {
    let mut client = database.client();
    let mut rows = Vec::new();
    for table in ["organizations", "api_keys", "records", "index_entries", "counts", "settings"] {
        let query = format!("SELECT t::text FROM {table} t ORDER BY t::text");
        rows.extend(
            client.query(&query, &[]).unwrap().iter().map(|row| format!("{table}: {}", row.get::<_, String>(0))),
        );
    }
    rows
}

fn seed(args: &[&str], data_dir: &std::path::Path) {
    let seeded = Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["seed", "--endpoints", "5", "--findings-per-endpoint", "3"])
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(seeded.status.success(), "esr seed: {}", String::from_utf8_lossy(&seeded.stderr));
}

#[test]
fn migrating_into_a_database_that_holds_data_is_refused_and_writes_nothing() {
    let sled = common::private_tempdir();
    seed(&[], sled.path());
    let database = TestDatabase::new();
    let other = common::private_tempdir();
    seed(&["--database", &database.url], other.path());
    let before = contents(&database);
    assert!(before.iter().any(|row| row.starts_with("records: ")));

    let refused = migrate(sled.path(), &database.url);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("already holds") && message.contains("empty database"), "{message}");
    assert_eq!(contents(&database), before);

    // Into an empty database the same directory goes whole.
    let empty = TestDatabase::new();
    let copied = migrate(sled.path(), &empty.url);
    assert!(copied.status.success(), "{}", String::from_utf8_lossy(&copied.stderr));
    assert!(String::from_utf8_lossy(&copied.stdout).contains("copied 1 organizations, 1 API keys, "));
}

#[test]
fn migrate_refuses_a_directory_without_a_deployment_and_one_a_server_holds() {
    let database = TestDatabase::new();
    let before = contents(&database);

    // No sled store in the directory: nothing is created in it either.
    let empty = common::private_tempdir();
    let refused = migrate(empty.path(), &database.url);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds no esr data"), "{refused:?}");
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
    let missing = empty.path().join("missing");
    let refused = migrate(&missing, &database.url);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds no esr data"), "{refused:?}");
    assert!(!missing.exists());

    // A directory a running server holds.
    let server = Server::start(&plugins_dir());
    let refused = migrate(server.data_dir(), &database.url);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("in use by a running esr server") && message.contains("stop it"), "{message}");

    // Not a PostgreSQL URL.
    let refused = migrate(server.data_dir(), "mysql://localhost/esr");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("PostgreSQL URL"), "{refused:?}");
    assert_eq!(contents(&database), before);
}
