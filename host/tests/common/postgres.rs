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
