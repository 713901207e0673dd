//! Real PostgreSQL for the tests: one throwaway cluster per test binary
//! (`esr_pg_cluster`, removed when the binary ends however it ends), a
//! template database migrated once, and a database per test made from it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use esr_pg_cluster::{Cluster, Durability};

const TEMPLATE: &str = "esr_template";

/// This test binary's cluster, started on first use, with the template
/// database.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = Cluster::temporary(Durability::Throwaway)
            .unwrap_or_else(|error| panic!("a PostgreSQL cluster for the tests: {error}"));
        cluster.execute(&format!("CREATE DATABASE {TEMPLATE}")).unwrap();
        let mut client = cluster.config(TEMPLATE).connect(postgres::NoTls).unwrap();
        esr::store::postgres::migrate(&mut client).unwrap();
        drop(client);
        cluster
    })
}

/// A database of its own for one test, with the schema in place; dropped
/// with it.
pub struct TestDatabase {
    pub name: String,
    pub url: String,
}

impl TestDatabase {
    pub fn new() -> TestDatabase {
        let cluster = cluster();
        let name = format!("test_{}", uuid::Uuid::new_v4().simple());
        cluster.execute(&format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE}")).unwrap();
        TestDatabase { url: cluster.url(&name), name }
    }

    /// An empty database, without even the schema.
    pub fn empty() -> TestDatabase {
        let cluster = cluster();
        let name = format!("test_{}", uuid::Uuid::new_v4().simple());
        cluster.execute(&format!("CREATE DATABASE {name}")).unwrap();
        TestDatabase { url: cluster.url(&name), name }
    }

    /// A direct connection (to look at or tamper with what is stored).
    pub fn client(&self) -> postgres::Client {
        cluster().config(&self.name).connect(postgres::NoTls).unwrap()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = cluster().execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

/// The same data served twice: a sled server with the demo data set, and a
/// PostgreSQL server on a copy of it (organizations, records; keys made
/// anew, since the store keeps only their hashes; its own cursor key).
pub struct Twins {
    pub sled: super::Server,
    pub postgres: super::Server,
    /// What `esr migrate` printed, for twins made by it.
    pub migration: Option<std::process::Output>,
    _loaded: super::Server,
    _database: TestDatabase,
    _postgres_dir: tempfile::TempDir,
}

/// The twins compare answers, not speed: a deadline long enough that a
/// busy machine never turns one side's answer into a `503`.
pub const TWIN_DEADLINE: &str = "--plugin-deadline-ms=30000";

/// A sled server on `sled_dir` and a PostgreSQL server on `database_url`,
/// with one public URL, which the agent configuration and links carry.
fn serve_twins(
    plugins: &std::path::Path,
    sled_dir: &std::path::Path,
    postgres_dir: &std::path::Path,
    database_url: &str,
) -> (super::Server, super::Server) {
    let public_url = "--public-url=http://esr.test";
    let sled = super::Server::start_on_with(plugins, sled_dir, &[public_url, TWIN_DEADLINE]);
    let postgres =
        super::Server::start_on_with(plugins, postgres_dir, &["--database", database_url, public_url, TWIN_DEADLINE]);
    (sled, postgres)
}

impl Twins {
    pub fn start(plugins: &std::path::Path) -> Twins {
        let mut loaded = super::Server::start(plugins);
        loaded.stop();
        let database = TestDatabase::new();
        let postgres_dir = super::private_tempdir();
        let mut keys = Vec::new();
        {
            let sled = esr::store::open(None, loaded.data_dir()).unwrap();
            let postgres = esr::store::open(Some(&database.url), postgres_dir.path()).unwrap();
            for organization in sled.organizations().unwrap() {
                let id = organization.organization_id;
                for collection in esr::store::Collection::ALL {
                    let mut reader = sled.reader(id).unwrap();
                    let mut after = None;
                    loop {
                        let page = reader
                            .scan(collection, &esr::store::RecordWalk::new(esr::store::MAX_SCAN).after(after))
                            .unwrap();
                        let Some((last, _)) = page.last() else { break };
                        after = Some(*last);
                        let records: Vec<serde_json::Value> =
                            page.iter().map(|(_, bytes)| serde_json::from_slice(bytes).unwrap()).collect();
                        postgres.bulk_insert_records(id, collection, &records).unwrap();
                    }
                }
                postgres.finish_bulk_load().unwrap();
                // Lists carry the feed's sequence: the copy goes on from sled's, as `esr migrate` does.
                postgres.continue_changes_from(id, sled.change_log(id).unwrap().latest).unwrap();
                postgres.insert_organization(&organization).unwrap();
                let key =
                    esr_auth::keys::create_key(postgres.as_ref(), id, "demo", &esr_auth::keys::ALL_READ_SCOPES, None)
                        .unwrap();
                keys.push(
                    serde_json::json!({"name": organization.name, "organization_id": id, "api_key": key.api_key}),
                );
            }
            postgres.set_marker("demo", "complete").unwrap();
            // The records, byte for byte.
            for organization in sled.organizations().unwrap() {
                let id = organization.organization_id;
                for collection in esr::store::Collection::ALL {
                    let (mut a, mut b) = (sled.reader(id).unwrap(), postgres.reader(id).unwrap());
                    assert_eq!(a.count(collection).unwrap(), b.count(collection).unwrap());
                }
            }
        }
        std::fs::write(
            postgres_dir.path().join(esr_demo::seed::DEMO_KEYS_FILE),
            serde_json::to_vec(&serde_json::json!({"organizations": keys})).unwrap(),
        )
        .unwrap();
        let (sled, postgres) = serve_twins(plugins, loaded.data_dir(), postgres_dir.path(), &database.url);
        Twins { sled, postgres, migration: None, _loaded: loaded, _database: database, _postgres_dir: postgres_dir }
    }

    /// The same data served twice by way of `esr migrate`: a sled server
    /// with the demo data set, on which `prepare` runs first, is stopped;
    /// its directory is migrated into a new database, `esr check` passes
    /// on it, and a PostgreSQL server serves it with the sled deployment's
    /// demo keys beside the sled server.
    pub fn migrated(plugins: &std::path::Path, prepare: impl FnOnce(&super::Server)) -> Twins {
        let mut loaded = super::Server::start(plugins);
        prepare(&loaded);
        loaded.stop();
        let database = TestDatabase::new();
        let postgres_dir = super::private_tempdir();
        let migration = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
            .args(["migrate", "--to", &database.url, "--from"])
            .arg(loaded.data_dir())
            .output()
            .unwrap();
        assert!(migration.status.success(), "esr migrate: {}", String::from_utf8_lossy(&migration.stderr));
        super::assert_check_passes_on(Some(&database.url), postgres_dir.path());
        std::fs::copy(
            loaded.data_dir().join(esr_demo::seed::DEMO_KEYS_FILE),
            postgres_dir.path().join(esr_demo::seed::DEMO_KEYS_FILE),
        )
        .unwrap();
        let (sled, postgres) = serve_twins(plugins, loaded.data_dir(), postgres_dir.path(), &database.url);
        Twins {
            sled,
            postgres,
            migration: Some(migration),
            _loaded: loaded,
            _database: database,
            _postgres_dir: postgres_dir,
        }
    }

    /// `GET path` as the organization with this index on both servers
    /// (`postgres_path` on the PostgreSQL one: its own cursors), with one
    /// request id; asserts that status, media type and body are the same
    /// bytes apart from cursors (and the ETag too when there is none), and
    /// returns the status and both bodies (sled's, then PostgreSQL's).
    pub fn same(&self, organization: usize, path: &str, postgres_path: &str) -> (u16, String, String) {
        let request_id = uuid::Uuid::new_v4().to_string();
        let fetch = |server: &super::Server, path: &str| {
            let response = server
                .client
                .get(server.url(path))
                .bearer_auth(&server.keys[organization])
                .header("x-request-id", &request_id)
                .send()
                .unwrap();
            let header = |name: &str| response.headers().get(name).map(|value| value.to_str().unwrap().to_owned());
            let (status, content_type, etag) = (response.status().as_u16(), header("content-type"), header("etag"));
            (status, content_type, etag, response.text().unwrap())
        };
        let (sled, postgres) = (fetch(&self.sled, path), fetch(&self.postgres, postgres_path));
        let cursor_of = |body: &str| {
            serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|page| page.get("next_cursor").and_then(|c| c.as_str()).map(str::to_owned))
        };
        let (sled_cursor, postgres_cursor) = (cursor_of(&sled.3), cursor_of(&postgres.3));
        assert_eq!(sled_cursor.is_some(), postgres_cursor.is_some(), "{path}: a next page on one backend only");
        let without = |body: &str, cursor: &Option<String>| match cursor {
            Some(cursor) => body.replace(cursor.as_str(), "CURSOR"),
            None => body.to_owned(),
        };
        assert_eq!(
            (sled.0, &sled.1, without(&sled.3, &sled_cursor)),
            (postgres.0, &postgres.1, without(&postgres.3, &postgres_cursor)),
            "{path}: sled and PostgreSQL answer differently"
        );
        if sled_cursor.is_none() {
            assert_eq!(sled.2, postgres.2, "{path}: ETag");
        }
        (postgres.0, sled.3, postgres.3)
    }

    /// [`Twins::same`] on one path.
    pub fn same_at(&self, organization: usize, path: &str) -> (u16, String) {
        let (status, body, _) = self.same(organization, path, path);
        (status, body)
    }
}

/// Asks both twins every case of the public API (items, errors, pages,
/// sorts, totals, cursor walks, filters, the agent configuration, the
/// OpenAPI document, health) and asserts they answer alike (see
/// [`Twins::same`]); returns how many requests were compared.
pub fn assert_answers_alike(twins: &Twins) -> usize {
    const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];
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
                let (sled_page, postgres_page): (serde_json::Value, serde_json::Value) = (
                    serde_json::from_str::<serde_json::Value>(&sled_body).unwrap(),
                    serde_json::from_str(&postgres_body).unwrap(),
                );
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
    // Public health alike; its details alike but for when each server
    // loaded its components and which host answered.
    let public = |server: &super::Server| -> serde_json::Value {
        server.client.get(server.url("/v1/health")).send().unwrap().json().unwrap()
    };
    assert_eq!(public(&twins.sled), public(&twins.postgres));
    let health = |server: &super::Server| -> serde_json::Value {
        // A host migrated from sled keeps no copy of the admin token: sled's is its token.
        let owner = if server.data_dir().join("admin-token").exists() { server } else { &twins.sled };
        let mut health: serde_json::Value = server
            .client
            .get(format!("{}/admin/v1/health", server.admin_base))
            .bearer_auth(owner.admin_token().trim())
            .send()
            .unwrap()
            .json()
            .unwrap();
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
    cases
}
