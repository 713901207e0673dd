//! Real PostgreSQL for the tests: one throwaway cluster per test binary
//! (`esr::pg_cluster`, removed when the binary ends however it ends), a
//! template database migrated once, and a database per test made from it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use esr::pg_cluster::{Cluster, Durability};

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
    _loaded: super::Server,
    _database: TestDatabase,
    _postgres_dir: tempfile::TempDir,
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
                for collection in esr::store::COLLECTIONS {
                    let mut reader = sled.reader(id).unwrap();
                    let mut after = None;
                    loop {
                        let page = reader.scan(collection, after, esr::store::MAX_SCAN, false).unwrap();
                        let Some((last, _)) = page.last() else { break };
                        after = Some(*last);
                        let records: Vec<serde_json::Value> =
                            page.iter().map(|(_, bytes)| serde_json::from_slice(bytes).unwrap()).collect();
                        postgres.bulk_insert_records(id, collection, &records).unwrap();
                    }
                }
                postgres.finish_bulk_load().unwrap();
                postgres.insert_organization(&organization).unwrap();
                let key =
                    esr::auth::create_key(postgres.as_ref(), id, "demo", &esr::auth::ALL_READ_SCOPES, None).unwrap();
                keys.push(
                    serde_json::json!({"name": organization.name, "organization_id": id, "api_key": key.api_key}),
                );
            }
            postgres.set_marker("demo", "complete").unwrap();
            // The records, byte for byte.
            for organization in sled.organizations().unwrap() {
                let id = organization.organization_id;
                for collection in esr::store::COLLECTIONS {
                    let (mut a, mut b) = (sled.reader(id).unwrap(), postgres.reader(id).unwrap());
                    assert_eq!(a.count(collection).unwrap(), b.count(collection).unwrap());
                }
            }
        }
        std::fs::write(
            postgres_dir.path().join(esr::seed::DEMO_KEYS_FILE),
            serde_json::to_vec(&serde_json::json!({"organizations": keys})).unwrap(),
        )
        .unwrap();
        // One public URL, which the agent configuration and links carry.
        let public_url = "--public-url=http://esr.test";
        let sled = super::Server::start_on_with(plugins, loaded.data_dir(), &[public_url]);
        let postgres =
            super::Server::start_on_with(plugins, postgres_dir.path(), &["--database", &database.url, public_url]);
        Twins { sled, postgres, _loaded: loaded, _database: database, _postgres_dir: postgres_dir }
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
