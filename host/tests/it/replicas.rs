//! Read replicas: real `esr serve` hosts over a real PostgreSQL primary and
//! a real streaming replica of it. Public reads go to the replica; a host
//! reads its own writes; a replica that lags beyond `--replica-max-lag-ms`
//! or is stopped is skipped and health says so; a cursor walk never goes
//! back in time when its pages come from different hosts and copies; a
//! read a replay conflict cancels is read again on the primary.
//!
//! Replay on the replica is paused (`pg_wal_replay_pause()`) to hold it
//! behind the primary for as long as a test needs, without timing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::postgres::{TestDatabase, cluster};
use common::{Server, plugins_dir, private_tempdir, wait_until};
use esr_pg_cluster::Cluster;
use reqwest::Method;
use serde_json::{Value, json};

const BOUND: Duration = Duration::from_secs(60);

/// Host `a` reads through the replica, host `b` reads the primary only;
/// both over one database.
struct Setup {
    a: Server,
    b: Server,
    replica: Cluster,
    database: TestDatabase,
    _b_dir: tempfile::TempDir,
}

impl Setup {
    fn start(max_lag_ms: u64) -> Setup {
        let database = TestDatabase::new();
        let replica_dir = std::env::temp_dir().join(format!("esr-replica-{}", uuid::Uuid::new_v4().simple()));
        let replica = cluster().replica(&replica_dir, true).unwrap();
        let replica_url = replica.url(&database.name);
        let max_lag = max_lag_ms.to_string();
        let a = Server::start_with(
            &plugins_dir(),
            &["--database", &database.url, "--database-replica-url", &replica_url, "--replica-max-lag-ms", &max_lag],
        );
        let b_dir = private_tempdir();
        std::fs::copy(a.data_dir().join("demo-keys.json"), b_dir.path().join("demo-keys.json")).unwrap();
        // The database keeps only the admin token's digest: the operator
        // copies the first host's token to the other hosts' machines.
        std::fs::copy(a.data_dir().join("admin-token"), b_dir.path().join("admin-token")).unwrap();
        let b = Server::start_on_with(&plugins_dir(), b_dir.path(), &["--database", &database.url]);
        let setup = Setup { a, b, replica, database, _b_dir: b_dir };
        setup.wait_for_replica("up");
        setup
    }

    fn replica_client(&self) -> postgres::Client {
        self.replica.config(&self.database.name).connect(postgres::NoTls).unwrap()
    }

    /// Waits until the replica has replayed everything the primary had
    /// when this was called.
    fn wait_for_catch_up(&self) {
        let mut primary = self.database.client();
        // The insert position, not the write one: the test cluster commits
        // asynchronously, so a commit answered may not be written out yet.
        let written: i64 =
            primary.query_one("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8", &[]).unwrap().get(0);
        let mut replica = self.replica_client();
        wait_until(BOUND, "the replica to catch up", || {
            let replayed: i64 =
                replica.query_one("SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8", &[]).unwrap().get(0);
            replayed >= written
        });
    }

    /// Holds the replica where it is until [`Setup::resume`].
    fn pause(&self) {
        let mut replica = self.replica_client();
        replica.execute("SELECT pg_wal_replay_pause()", &[]).unwrap();
        wait_until(BOUND, "replay to pause", || {
            let state: String = replica.query_one("SELECT pg_get_wal_replay_pause_state()", &[]).unwrap().get(0);
            state == "paused"
        });
    }

    fn resume(&self) {
        self.replica_client().execute("SELECT pg_wal_replay_resume()", &[]).unwrap();
    }

    fn replica_health(&self) -> Value {
        self.a.health_details()["checks"]["replicas"][0].clone()
    }

    fn wait_for_replica(&self, state: &str) {
        wait_until(BOUND, &format!("health to show the replica {state}"), || self.replica_health()["output"] == state);
    }

    fn organization(&self) -> &str {
        &self.a.organization_ids[0]
    }
}

fn import_endpoints(server: &Server, organization: &str, lines: &[Value]) -> Vec<String> {
    let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let response = server
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/endpoints"))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "import refused");
    let summary: Value = response.json().unwrap();
    summary["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
}

fn endpoint(hostname: &str) -> Value {
    json!({"hostname": hostname, "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": ["replica-test"]})
}

fn status_of(server: &Server, path: &str) -> u16 {
    server.get(path).status().as_u16()
}

#[test]
fn reads_come_from_the_replica_and_a_host_reads_its_own_writes() {
    // No lag bound to speak of: the paused replica keeps serving.
    let setup = Setup::start(3_600_000);
    let organization = setup.organization().to_owned();
    setup.wait_for_catch_up();
    setup.pause();

    // Written through the other host: `a` reads the replica, which does
    // not have it yet.
    let elsewhere = import_endpoints(&setup.b, &organization, &[endpoint("written-elsewhere")]);
    let path = format!("/v1/endpoints/{}", elsewhere[0]);
    assert_eq!(status_of(&setup.b, &path), 200, "the primary has it");
    assert_eq!(status_of(&setup.a, &path), 404, "host a reads the paused replica");
    assert_eq!(setup.replica_health()["output"], "up");

    // Written through `a`: `a` sees its write at once (from the primary,
    // since the replica has not replayed it), and with it everything before.
    let own = import_endpoints(&setup.a, &organization, &[endpoint("written-here")]);
    assert_eq!(status_of(&setup.a, &format!("/v1/endpoints/{}", own[0])), 200, "a host reads its own write");
    assert_eq!(status_of(&setup.a, &path), 200);
    let listed = setup.a.json("/v1/endpoints?tag=replica-test&limit=10");
    assert_eq!(listed["total"], 2, "{listed}");

    // Once the replica has replayed the write, it serves the host again.
    setup.resume();
    setup.wait_for_catch_up();
    let later = import_endpoints(&setup.b, &organization, &[endpoint("written-after")]);
    setup.pause();
    let later_path = format!("/v1/endpoints/{}", later[0]);
    // `b`'s write may or may not have reached the replica before the
    // pause; `a` serves what the replica has, which is at least `a`'s own.
    let from_replica = status_of(&setup.a, &later_path);
    assert!(from_replica == 200 || from_replica == 404, "{from_replica}");
    assert_eq!(status_of(&setup.a, &format!("/v1/endpoints/{}", own[0])), 200);
    setup.resume();
    wait_until(BOUND, "the replica to replay the other host's write", || status_of(&setup.a, &later_path) == 200);
}

#[test]
fn a_lagging_or_stopped_replica_is_skipped_and_health_shows_it() {
    let mut setup = Setup::start(300);
    let organization = setup.organization().to_owned();
    setup.wait_for_catch_up();
    setup.pause();
    let elsewhere = import_endpoints(&setup.b, &organization, &[endpoint("while-lagging")]);
    let path = format!("/v1/endpoints/{}", elsewhere[0]);

    // The hosts' heartbeats keep writing, so the paused replica falls
    // behind the bound: skipped, reads come from the primary.
    setup.wait_for_replica("lagging");
    let health = setup.replica_health();
    assert_eq!(health["status"], "warn", "{health}");
    assert!(health["observed_value"].as_u64().unwrap() > 300, "{health}");
    assert_eq!(status_of(&setup.a, &path), 200, "a lagging replica is skipped");
    let whole: Value = setup.a.client.get(setup.a.url("/v1/health")).send().unwrap().json().unwrap();
    assert_eq!(whole["status"], "pass", "a lagging replica does not fail the host: {whole}");
    // Public health says a replica warns, not where it is.
    assert_eq!(whole["checks"]["replicas"][0], serde_json::json!({"status": "warn", "component_type": "datastore"}));

    setup.resume();
    setup.wait_for_replica("up");
    assert_eq!(status_of(&setup.a, &path), 200);

    // Stopped: every read is answered meanwhile (from the primary), and
    // health says the replica is down.
    setup.replica.stop();
    for round in 0..40 {
        assert_eq!(status_of(&setup.a, &path), 200, "round {round}");
        let page = setup.a.get("/v1/endpoints?limit=5");
        assert_eq!(page.status(), 200, "round {round}");
    }
    setup.wait_for_replica("down");
    assert_eq!(setup.replica_health()["status"], "warn");
    assert_eq!(status_of(&setup.a, &path), 200);
}

/// Walks `path` through its cursors, the first page from `first`, the
/// rest from `rest`.
fn walk(first: &Server, rest: &Server, path: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut next = path.to_owned();
    let mut server = first;
    loop {
        let page = server.json(&next);
        ids.extend(page["data"].as_array().unwrap().iter().map(|record| record["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(cursor) => next = format!("{path}&cursor={cursor}"),
            None => return ids,
        }
        server = rest;
    }
}

#[test]
fn a_cursor_walk_neither_skips_nor_repeats_while_the_replica_catches_up() {
    let setup = Setup::start(3_600_000);
    let organization = setup.organization().to_owned();
    let names: Vec<String> = (0..12).map(|n| format!("walked-{n:02}")).collect();
    let ids = import_endpoints(&setup.b, &organization, &names.iter().map(|name| endpoint(name)).collect::<Vec<_>>());
    // One at a time, so each has its own `updated_at`.
    for (id, name) in ids.iter().zip(&names) {
        let mut again = endpoint(name);
        again["id"] = json!(id);
        import_endpoints(&setup.b, &organization, &[again]);
    }
    setup.wait_for_catch_up();
    setup.pause();

    // On the primary the first record moves to the end of the walk; the
    // paused replica still has it first.
    let mut moved = endpoint(&names[0]);
    moved["id"] = json!(ids[0]);
    moved["tags"] = json!(["replica-test", "moved"]);
    import_endpoints(&setup.b, &organization, &[moved]);

    // The first page from the primary (host b), the rest through host a,
    // whose replica is behind that page: the cursor keeps them from going
    // back in time, where the moved record would be behind the walk.
    let path = "/v1/endpoints?tag=replica-test&sort=updated_at&limit=3";
    let walked = walk(&setup.b, &setup.a, path);
    let distinct: BTreeSet<&String> = walked.iter().collect();
    assert_eq!(distinct.len(), walked.len(), "no record twice: {walked:?}");
    assert_eq!(distinct, ids.iter().collect::<BTreeSet<_>>(), "every record once");
    assert_eq!(walked.last(), Some(&ids[0]), "the moved record comes last");

    // A walk all through host a, on the replica, is consistent too (the
    // replica's view).
    let on_replica = walk(&setup.a, &setup.a, path);
    assert_eq!(on_replica.iter().collect::<BTreeSet<_>>(), ids.iter().collect::<BTreeSet<_>>());
    setup.resume();
}

#[test]
fn a_read_cancelled_by_a_replay_conflict_is_answered_from_the_primary() {
    let setup = Setup::start(3_600_000);
    // The replica cancels a read in the way of replay at once, rather than
    // holding replay back for up to 30 s.
    let mut replica = setup.replica_client();
    replica.batch_execute("ALTER SYSTEM SET max_standby_streaming_delay = 0").unwrap();
    replica.batch_execute("SELECT pg_reload_conf()").unwrap();
    let conflicts = |replica: &mut postgres::Client| -> i64 {
        let query = "SELECT confl_lock FROM pg_stat_database_conflicts WHERE datname = current_database()";
        replica.query_one(query, &[]).unwrap().get(0)
    };
    let before = conflicts(&mut replica);

    // Readers through host `a` (the replica) while the primary takes the
    // records table's exclusive lock again and again: its replay cancels
    // the replica's reads of that table, until some were cancelled mid-call
    // and read again (the host logs each; a conflict may also end an idle
    // session only).
    let stop = std::sync::atomic::AtomicBool::new(false);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut statuses = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        statuses.push(status_of(&setup.a, "/v1/endpoints?limit=50&sort=-updated_at"));
                    }
                    statuses
                })
            })
            .collect();
        let mut primary = setup.database.client();
        wait_until(
            BOUND,
            "the replica to cancel reads in conflict with replay, and the host to read them again",
            || {
                primary.batch_execute("BEGIN; LOCK TABLE records IN ACCESS EXCLUSIVE MODE; COMMIT").unwrap();
                conflicts(&mut replica) >= before + 3
                    && setup.a.log().contains("a read failed on a replica; reading the primary")
            },
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        readers.into_iter().flat_map(|reader| reader.join().unwrap()).collect()
    });
    eprintln!("{} reads, {} replay conflicts on the replica", statuses.len(), conflicts(&mut replica) - before);
    let refused: Vec<&u16> = statuses.iter().filter(|status| **status != 200).collect();
    assert!(refused.is_empty(), "{} of {} reads were not answered: {refused:?}", refused.len(), statuses.len());
}
