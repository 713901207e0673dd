//! Several stateless hosts over one PostgreSQL database: two real `esr
//! serve` processes on one real database answer alike, serve each other's
//! imports at once, accept each other's cursors, ETags and admin token
//! (the database keeps only the token's digest),
//! serialize concurrent imports into one organization in the database,
//! keep `updated_at` increasing in commit order for an `updatedAfter`
//! poller, divide a key's rate limit, and each name themselves in health.
//! And the Citus-ready rule: every statement a public request makes that
//! touches a tenant table names exactly one organization, the caller's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::postgres::{TestDatabase, cluster};
use common::{Server, plugins_dir, private_tempdir, wait_until, xz_finding};
use esr_contract::time::Timestamp;
use reqwest::Method;
use serde_json::{Value, json};

const SEVERITIES: [&str; 5] = ["critical", "high", "medium", "low", "info"];

/// Two hosts on one database: `a` loaded the demo data set, `b` started
/// after it on a data directory of its own.
struct TwoHosts {
    a: Server,
    b: Server,
    database: TestDatabase,
    _b_dir: tempfile::TempDir,
}

impl TwoHosts {
    fn start(extra: &[&str]) -> TwoHosts {
        TwoHosts::start_on(TestDatabase::new(), extra)
    }

    fn start_on(database: TestDatabase, extra: &[&str]) -> TwoHosts {
        // Behind one load balancer, the hosts share one public URL.
        let shared = ["--database", database.url.as_str(), "--public-url=http://esr.test"];
        let flags: Vec<&str> = shared.into_iter().chain(extra.iter().copied()).collect();
        let a = Server::start_with(&plugins_dir(), &flags);
        // The demo keys are in the database (as hashes); the second host's
        // harness reads them from a copy of the first one's file.
        let b_dir = private_tempdir();
        std::fs::copy(a.data_dir().join("demo-keys.json"), b_dir.path().join("demo-keys.json")).unwrap();
        let b = Server::start_on_with(&plugins_dir(), b_dir.path(), &flags);
        // The database keeps only the admin token's digest, so `b` could
        // not write the token to its data directory: the operator copies
        // the first host's (for the harness's admin requests through `b`).
        std::fs::copy(a.data_dir().join("admin-token"), b_dir.path().join("admin-token")).unwrap();
        TwoHosts { a, b, database, _b_dir: b_dir }
    }

    fn both(&self) -> [&Server; 2] {
        [&self.a, &self.b]
    }
}

/// Health with its details, from the admin listener.
fn health(server: &Server) -> Value {
    server.health_details()
}

/// Waits until each host counts both in health (their heartbeats met).
fn wait_for_both(hosts: &TwoHosts) {
    wait_until(Duration::from_secs(30), "both hosts counting two hosts", || {
        hosts.both().iter().all(|server| health(server)["checks"]["hosts"][0]["observed_value"] == 2)
    });
}

fn imported(response: reqwest::blocking::Response) -> Vec<String> {
    assert_eq!(response.status(), 200, "import refused");
    let summary: Value = response.json().unwrap();
    summary["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
}

fn endpoint(hostname: &str, tag: &str) -> Value {
    json!({"hostname": hostname, "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": [tag]})
}

/// Waits (30 s at most) until the database's WAL insert position holds
/// still for half a second.
fn wait_for_still_wal(database: &TestDatabase) {
    let mut client = database.client();
    let position = |client: &mut postgres::Client| -> String {
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).unwrap().get(0)
    };
    let mut last = position(&mut client);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = position(&mut client);
        if now == last {
            return;
        }
        last = now;
    }
}

/// A record's timestamp field as Unix nanoseconds.
fn instant(field: &Value) -> i64 {
    Timestamp::parse(field.as_str().unwrap()).unwrap().0
}

/// Walks a list through its cursors, each page from the next server in turn.
fn walk(servers: &[&Server], path: &str) -> Vec<Value> {
    let mut records = Vec::new();
    let mut next = path.to_owned();
    for turn in 0.. {
        let page = servers[turn % servers.len()].json(&next);
        records.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => next = format!("{path}&cursor={cursor}"),
            None => return records,
        }
    }
    unreachable!()
}

#[test]
fn two_hosts_answer_alike_and_share_imports_cursors_etags_and_the_admin_token() {
    let hosts = TwoHosts::start(&[]);
    let (a, b) = (&hosts.a, &hosts.b);

    // The same answers, ETags included.
    let findings = a.all(0, "vulnerability-findings");
    let paths = [
        "/v1/endpoints?limit=20".to_owned(),
        "/v1/vulnerability-findings?status=open&severity=critical&limit=5".to_owned(),
        "/v1/remediation-targets?sort=-updated_at&limit=7".to_owned(),
        "/v1/scopes".to_owned(),
        "/v1/agent/config?platform=linux".to_owned(),
        format!("/v1/vulnerability-findings/{}", findings[3]["id"].as_str().unwrap()),
    ];
    let mut revalidated_count = 0;
    let etag_of = |response: &reqwest::blocking::Response| {
        response.headers().get("etag").map(|etag| etag.to_str().unwrap().to_owned())
    };
    for path in &paths {
        let (mut from_a, mut from_b) = (a.get(path), b.get(path));
        // Any WAL written between the two reads (each host's heartbeat
        // every 2 s; autovacuum after the demo's load, on a busy machine
        // for seconds) moves the database position a page's cursor
        // carries: both are read again once the position holds still.
        for _ in 0..10 {
            if etag_of(&from_a) == etag_of(&from_b) {
                break;
            }
            wait_for_still_wal(&hosts.database);
            (from_a, from_b) = (a.get(path), b.get(path));
        }
        assert_eq!((from_a.status().as_u16(), from_b.status().as_u16()), (200, 200), "{path}");
        let etag = etag_of(&from_a);
        assert_eq!(etag, etag_of(&from_b), "{path}");
        let (body_a, body_b) = (from_a.text().unwrap(), from_b.text().unwrap());
        if !body_a.contains("next_cursor\":\"") {
            assert_eq!(body_a, body_b, "{path}");
        }
        // An ETag from one host is current on the other (the agent
        // configuration has none: it is not to be cached).
        // WAL written between the read and the revalidation (a heartbeat,
        // autovacuum on a busy machine) moves the cursor's database
        // position, so the page is new: its ETag must then differ, and the
        // new one revalidate once the position holds still.
        if let Some(mut etag) = etag {
            for attempt in 1..=10 {
                let revalidated =
                    b.client.get(b.url(path)).bearer_auth(&b.keys[0]).header("if-none-match", &etag).send().unwrap();
                if revalidated.status() == 304 {
                    break;
                }
                assert_eq!(revalidated.status(), 200, "{path}");
                let fresh = etag_of(&revalidated).expect("a page has an ETag");
                assert!(fresh != etag && attempt < 10, "{path}: {etag} was not revalidated");
                etag = fresh;
                wait_for_still_wal(&hosts.database);
            }
            revalidated_count += 1;
        }
    }
    assert_eq!(revalidated_count, paths.len() - 1);

    // A cursor from one host resumes on the other: a walk alternating
    // hosts reads what a walk on one host reads.
    let path = "/v1/vulnerability-findings?sort=-updated_at&limit=9";
    let alternating: Vec<Value> = walk(&[a, b], path);
    assert_eq!(alternating, walk(&[a], path));
    assert_eq!(alternating.len(), findings.len());

    // What one imports, the other serves at once.
    let organization = &a.organization_ids[0];
    let ids = imported(a.import_lines(organization, "endpoints", &[endpoint("imported-on-a", "two-hosts")]));
    let record = b.json(&format!("/v1/endpoints/{}", ids[0]));
    assert_eq!(record["hostname"], "imported-on-a");
    assert_eq!(record, a.json(&format!("/v1/endpoints/{}", ids[0])));

    // One admin token for every host: the database keeps its digest, which
    // both compare; the second host, which cannot recover the token, said
    // at start how to get it onto its machine, and accepts it.
    let told = "created by another host and is kept only as its SHA-256";
    assert!(b.log().contains(told) && b.log().contains("ESR_ADMIN_TOKEN"), "{}", b.log());
    assert!(!a.log().contains(told));
    let listed =
        b.client.get(format!("{}/admin/v1/organizations", b.admin_base)).bearer_auth(a.admin_token()).send().unwrap();
    assert_eq!(listed.status(), 200);

    // Health names each host; each counts both.
    wait_for_both(&hosts);
    let (health_a, health_b) = (health(a), health(b));
    assert_eq!(health_a["status"], "pass");
    for (server, answer) in [(a, &health_a), (b, &health_b)] {
        let port = server.base.rsplit(':').next().unwrap();
        let host = answer["host"].as_str().unwrap();
        assert!(host.ends_with(&format!(":{port}")), "{host} is not the host on port {port}");
    }
    assert_ne!(health_a["host"], health_b["host"]);

    // Plugin reload is per host: the reloaded one and the other keep serving.
    let reloaded = b.admin(Method::POST, "/admin/v1/plugins/reload").send().unwrap();
    assert_eq!(reloaded.status(), 200, "{}", reloaded.text().unwrap());
    for server in hosts.both() {
        assert_eq!(server.get(&paths[0]).status(), 200);
        assert_eq!(health(server)["status"], "pass");
    }
}

#[test]
fn concurrent_imports_into_one_organization_through_two_hosts_lose_no_update() {
    let mut hosts = TwoHosts::start(&[]);
    let organization = hosts.a.organization_ids[0].clone();
    let endpoints = imported(hosts.a.import_lines(
        &organization,
        "endpoints",
        &(0..4).map(|n| endpoint(&format!("concurrent-{n}"), "concurrent")).collect::<Vec<_>>(),
    ));
    const BATCHES: usize = 12;
    const PER_BATCH: usize = 5;
    // Each host's writer creates findings and moves the severity of one it
    // made earlier: both move the same endpoints' `open_findings`.
    std::thread::scope(|scope| {
        for (writer, server) in hosts.both().into_iter().enumerate() {
            let (organization, endpoints) = (&organization, &endpoints);
            scope.spawn(move || {
                let mut mine: Vec<(String, Value)> = Vec::new();
                for batch in 0..BATCHES {
                    let mut lines: Vec<Value> = (0..PER_BATCH)
                        .map(|n| {
                            let label = format!("w{writer}-b{batch}-n{n}");
                            xz_finding(&endpoints[(batch + n) % endpoints.len()], SEVERITIES[(n + writer) % 5], &label)
                        })
                        .collect();
                    if let Some((id, mut line)) = mine.get(batch).cloned() {
                        line["id"] = json!(id);
                        line["severity"] = json!(SEVERITIES[(batch + 2) % 5]);
                        lines.push(line);
                    }
                    let ids = imported(server.import_lines(organization, "vulnerability-findings", &lines));
                    mine.extend(ids.into_iter().zip(lines).take(PER_BATCH));
                }
            });
        }
    });

    // Counts and derived fields agree with the findings.
    let a = &hosts.a;
    let findings: Vec<Value> = a
        .all(0, "vulnerability-findings")
        .into_iter()
        .filter(|finding| endpoints.iter().any(|id| finding["endpoint_id"] == id.as_str()))
        .collect();
    assert_eq!(findings.len(), 2 * BATCHES * PER_BATCH, "every created finding, once");
    for endpoint in &endpoints {
        let record = a.json(&format!("/v1/endpoints/{endpoint}"));
        for severity in SEVERITIES {
            let held = findings
                .iter()
                .filter(|finding| finding["endpoint_id"] == endpoint.as_str() && finding["severity"] == severity)
                .count();
            assert_eq!(record["open_findings"][severity], held, "{endpoint} {severity}");
            let listed =
                a.json(&format!("/v1/vulnerability-findings?endpointId={endpoint}&severity={severity}&limit=1"));
            assert_eq!(listed["total"], held, "the index counts of {endpoint} {severity}");
        }
    }

    // And `esr check` finds every index entry and count in agreement.
    hosts.a.stop();
    hosts.b.stop();
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["check", "--database", &hosts.database.url, "--data-dir"])
        .arg(hosts.a.data_dir())
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "esr check: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn an_updated_after_poller_misses_nothing_while_two_hosts_write() {
    let hosts = TwoHosts::start(&[]);
    let organization = hosts.a.organization_ids[0].clone();
    // Each writer owns five endpoints and rewrites them batch after batch.
    let owned: Vec<Vec<String>> = (0..2)
        .map(|writer| {
            let lines: Vec<Value> = (0..5).map(|n| endpoint(&format!("polled-{writer}-{n}"), "v0")).collect();
            imported(hosts.a.import_lines(&organization, "endpoints", &lines))
        })
        .collect();
    let start = hosts.a.all(0, "endpoints").iter().map(|e| instant(&e["updated_at"])).max().unwrap();

    let writing = std::sync::atomic::AtomicBool::new(true);
    let mut seen: Vec<(String, i64)> = Vec::new();
    std::thread::scope(|scope| {
        let writers: Vec<_> = hosts
            .both()
            .into_iter()
            .zip(&owned)
            .enumerate()
            .map(|(writer, (server, ids))| {
                let organization = &organization;
                scope.spawn(move || {
                    for round in 1..=15 {
                        let lines: Vec<Value> = ids
                            .iter()
                            .enumerate()
                            .map(|(n, id)| {
                                let mut line = endpoint(&format!("polled-{writer}-{n}"), &format!("v{round}"));
                                line["id"] = json!(id);
                                line
                            })
                            .collect();
                        imported(server.import_lines(organization, "endpoints", &lines));
                    }
                })
            })
            .collect();
        // The poller: from the latest `updated_at` it has seen, small pages,
        // each from the other host, until the writers are done and one
        // more poll after that.
        let mut after = start;
        let mut turn = 0;
        poll_while_writing(&writing, writers, || {
            let base = format!("/v1/endpoints?updatedAfter={}&sort=updated_at&limit=3", Timestamp(after).format());
            let mut path = base.clone();
            loop {
                turn += 1;
                let page = hosts.both()[turn % 2].json(&path);
                for record in page["data"].as_array().unwrap() {
                    let at = instant(&record["updated_at"]);
                    after = after.max(at);
                    seen.push((record["id"].as_str().unwrap().to_owned(), at));
                }
                match page["next_cursor"].as_str() {
                    Some(cursor) => path = format!("{base}&cursor={cursor}"),
                    None => break,
                }
            }
        });
    });

    // Nothing skipped: every record's latest version was seen.
    let versions: BTreeSet<(String, i64)> = seen.iter().cloned().collect();
    for record in hosts.b.all(0, "endpoints") {
        let at = instant(&record["updated_at"]);
        if at > start {
            let version = (record["id"].as_str().unwrap().to_owned(), at);
            assert!(versions.contains(&version), "the poller missed {version:?}");
        }
    }
    // No version twice: `updatedAfter` is strictly after what was seen, and
    // a walk sees a record again only once it has changed.
    assert_eq!(versions.len(), seen.len(), "a version seen twice");
    // Write times increase in commit order: each endpoint's versions carry
    // its rounds in order.
    let mut rounds: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (id, at) in &seen {
        rounds.entry(id.clone()).or_default().push(*at);
    }
    for (id, times) in rounds {
        assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "{id}: {times:?}");
    }
}

/// Every event of the feed after `after`, alternating hosts page by page;
/// and the sequence to poll from next.
fn follow_feed(servers: &[&Server], after: u64, turn: &mut usize) -> (Vec<Value>, u64) {
    let mut events = Vec::new();
    let mut path = format!("/v1/changes?after={after}&limit=7");
    loop {
        *turn += 1;
        let page = servers[*turn % servers.len()].json(&path);
        events.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/changes?cursor={cursor}&limit=7"),
            None => return (events, page["sequence"].as_u64().unwrap()),
        }
    }
}

/// Where a client's copy of the records stands: each by collection and id.
type Mirror = BTreeMap<(String, String), Value>;

const MIRRORED: [&str; 2] = ["endpoints", "vulnerability-findings"];

#[test]
fn listing_then_following_the_feed_ends_with_exactly_the_records_while_two_hosts_import() {
    // Lists everything, each page from the other host, keeping the first
    // page's sequence.
    mirror_while_two_hosts_import(|hosts, mirror, turn| {
        let mut from = u64::MAX;
        for collection in MIRRORED {
            let mut path = format!("/v1/{collection}?limit=100");
            loop {
                *turn += 1;
                let page = hosts[*turn % 2].json(&path);
                if !path.contains("cursor=") {
                    from = from.min(page["sequence"].as_u64().unwrap());
                }
                for record in page["data"].as_array().unwrap() {
                    mirror.insert((collection.to_owned(), record["id"].as_str().unwrap().to_owned()), record.clone());
                }
                match page["next_cursor"].as_str() {
                    Some(cursor) => path = format!("/v1/{collection}?limit=100&cursor={cursor}"),
                    None => break,
                }
            }
        }
        from
    });
}

#[test]
fn exporting_then_following_the_feed_ends_with_exactly_the_records_while_two_hosts_import() {
    // Exports each collection, cut after a few kilobytes and resumed on the
    // other host with `after` until it ends whole, keeping the first
    // piece's sequence.
    mirror_while_two_hosts_import(|hosts, mirror, turn| {
        let mut from = u64::MAX;
        for collection in MIRRORED {
            let mut after: Option<String> = None;
            loop {
                *turn += 1;
                let server = hosts[*turn % 2];
                let path = match &after {
                    Some(id) => format!("/v1/{collection}/export?after={id}"),
                    None => format!("/v1/{collection}/export"),
                };
                let response = server.client.get(server.url(&path)).bearer_auth(&server.keys[0]).send().unwrap();
                let piece = crate::export::read_piece(response, Some(4000 << (*turn).min(14)));
                from = from.min(piece.sequence);
                for record in &piece.records {
                    let id = record["id"].as_str().unwrap().to_owned();
                    after = Some(id.clone());
                    mirror.insert((collection.to_owned(), id), record.clone());
                }
                if piece.trailer.is_some() {
                    break;
                }
            }
        }
        from
    });
}

/// Two hosts' writers import while a client reads every record with
/// `read_everything` (which answers the sequence to follow the feed from)
/// and then follows the feed: the client ends with exactly the records.
fn mirror_while_two_hosts_import(read_everything: impl FnOnce(&[&Server; 2], &mut Mirror, &mut usize) -> u64) {
    let hosts = TwoHosts::start(&[]);
    let organization = hosts.a.organization_ids[0].clone();
    let endpoints = imported(hosts.a.import_lines(
        &organization,
        "endpoints",
        &(0..4).map(|n| endpoint(&format!("mirrored-{n}"), "mirror")).collect::<Vec<_>>(),
    ));
    let writing = std::sync::atomic::AtomicBool::new(true);
    let mut mirror = Mirror::new();
    std::thread::scope(|scope| {
        // Each host's writer creates findings and rewrites endpoints and
        // findings it made: creates and updates commit on both hosts.
        let writers: Vec<_> = hosts
            .both()
            .into_iter()
            .enumerate()
            .map(|(writer, server)| {
                let (organization, endpoints) = (&organization, &endpoints);
                scope.spawn(move || {
                    let mut mine: Vec<(String, Value)> = Vec::new();
                    for batch in 0..12 {
                        let mut lines: Vec<Value> = (0..4)
                            .map(|n| {
                                let label = format!("m{writer}-b{batch}-n{n}");
                                xz_finding(
                                    &endpoints[(batch + n) % endpoints.len()],
                                    SEVERITIES[(n + batch) % 5],
                                    &label,
                                )
                            })
                            .collect();
                        if let Some((id, mut line)) = mine.get(batch).cloned() {
                            line["id"] = json!(id);
                            line["severity"] = json!(SEVERITIES[(batch + 3) % 5]);
                            lines.push(line);
                        }
                        let ids = imported(server.import_lines(organization, "vulnerability-findings", &lines));
                        mine.extend(ids.into_iter().zip(lines).take(4));
                        let mut renamed = endpoint(&format!("mirrored-{writer}"), &format!("b{batch}"));
                        renamed["id"] = json!(endpoints[writer]);
                        imported(server.import_lines(organization, "endpoints", &[renamed]));
                    }
                })
            })
            .collect();
        // The client reads everything while the writers write, then follows
        // the feed from where it began until the writers are done, and once more.
        let mut turn = 0;
        let mut from = read_everything(&hosts.both(), &mut mirror, &mut turn);
        assert!(from > 0, "the endpoints imported before the list have sequences");
        poll_while_writing(&writing, writers, || {
            let (events, next) = follow_feed(&hosts.both(), from, &mut turn);
            for event in events {
                let key = (event["collection"].as_str().unwrap().to_owned(), event["id"].as_str().unwrap().to_owned());
                match event["operation"].as_str().unwrap() {
                    "deleted" => {
                        mirror.remove(&key);
                    }
                    _ => {
                        mirror.insert(key, event["record"].clone());
                    }
                }
            }
            from = next;
        });
    });
    // The mirror holds exactly the organization's records, as they are now.
    let mut now = Mirror::new();
    for collection in MIRRORED {
        for record in hosts.b.all(0, collection) {
            now.insert((collection.to_owned(), record["id"].as_str().unwrap().to_owned()), record);
        }
    }
    assert_eq!(mirror.len(), now.len(), "the mirror holds as many records as the organization");
    for (key, record) in &now {
        assert_eq!(mirror.get(key), Some(record), "{key:?} differs in the mirror");
    }
}

#[test]
fn a_keys_rate_limit_holds_across_two_hosts() {
    // One request a minute after a burst of 10: refill does not matter
    // while the test runs, unless it runs for minutes.
    let hosts = TwoHosts::start(&["--rate-limit-per-minute=1", "--rate-limit-burst=10"]);
    wait_for_both(&hosts);
    let started = Instant::now();
    let mut allowed = [0u32; 2];
    for _ in 0..12 {
        for (n, server) in hosts.both().into_iter().enumerate() {
            let response = server.get("/v1/scopes");
            match response.status().as_u16() {
                200 => allowed[n] += 1,
                429 => assert!(response.headers().contains_key("retry-after")),
                other => panic!("status {other}"),
            }
            assert_eq!(response.headers()["x-ratelimit-limit"], "1", "the key's own limit, as configured");
        }
    }
    // Each host grants its half of the burst; one more request each per
    // two minutes (half the rate).
    let refill = (started.elapsed().as_secs() / 120) as u32;
    for granted in allowed {
        assert!((5..=5 + refill).contains(&granted), "{allowed:?} granted by the two hosts");
    }
    // Health is not limited.
    for server in hosts.both() {
        assert_eq!(server.client.get(server.url("/v1/health")).send().unwrap().status(), 200);
    }
}

#[test]
fn every_host_issues_and_accepts_the_same_tokens_and_follows_a_rotation_and_a_revocation() {
    let hosts = TwoHosts::start(&[]);
    let organization = hosts.a.organization_ids[0].clone();
    let client: Value = hosts
        .a
        .admin(reqwest::Method::POST, "/admin/v1/clients")
        .json(&serde_json::json!({"organization_id": organization, "name": "SIEM", "scopes": ["findings:read"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let token_from = |server: &Server| common::access_token(server, &client, None);
    let read = |server: &Server, token: &str| {
        server.client.get(server.url("/v1/vulnerability-findings?limit=1")).bearer_auth(token).send().unwrap().status()
    };
    // One public URL, one key set: each host's tokens read on the other.
    let (from_a, from_b) = (token_from(&hosts.a), token_from(&hosts.b));
    for server in hosts.both() {
        assert_eq!(read(server, &from_a), 200);
        assert_eq!(read(server, &from_b), 200);
    }
    let jwks = |server: &Server| -> Value {
        server.client.get(server.url("/.well-known/jwks.json")).send().unwrap().json().unwrap()
    };
    assert_eq!(jwks(&hosts.a), jwks(&hosts.b));

    // A rotation on `b`: `a` accepts `b`'s new tokens (an unknown key id
    // rereads the keys, at most once a second) and signs with the new key
    // within 10 s.
    let rotated: Value =
        hosts.b.admin(reqwest::Method::POST, "/admin/v1/signing-keys/rotate").send().unwrap().json().unwrap();
    let new_kid = rotated["kid"].as_str().unwrap().to_owned();
    let after_rotation = token_from(&hosts.b);
    wait_until(Duration::from_secs(10), "host a accepting the new key's token", || {
        read(&hosts.a, &after_rotation) == 200
    });
    assert_eq!(read(&hosts.a, &from_a), 200, "the old key's tokens run on");
    wait_until(Duration::from_secs(30), "host a signing with the new key", || {
        let token = token_from(&hosts.a);
        let header = token.split('.').next().unwrap().to_owned();
        use base64::Engine;
        let header: Value =
            serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
        header["kid"] == new_kid.as_str()
    });

    // A revocation on `a` reaches `b` within the documented 10 s.
    let revoked_at = Instant::now();
    let client_id = client["client_id"].as_str().unwrap();
    assert_eq!(
        hosts.a.admin(reqwest::Method::DELETE, &format!("/admin/v1/clients/{client_id}")).send().unwrap().status(),
        200
    );
    while read(&hosts.b, &after_rotation) == 200 {
        assert!(revoked_at.elapsed() < Duration::from_secs(10), "host b still accepts a revoked client's token");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(read(&hosts.b, &after_rotation), 401);
}

/// The tenant tables: distributed by organization id under Citus.
const TENANT_TABLES: [&str; 7] =
    ["records", "index_entries", "counts", "organizations", "write_clocks", "changes", "history"];
/// Tables a public request may read without naming an organization: a
/// reference table (`api_keys`, found by the key's hash) and the hosts'
/// own (`hosts`, `settings`); `documents`, a reference table the hosts'
/// webhook dispatchers and token checks read meanwhile, and
/// `audit_entries`, which the audit recorder writes in batches of every
/// organization's entries (the log does not tell their statements from
/// the requests').
const SHARED_TABLES: [&str; 5] = ["api_keys", "hosts", "settings", "documents", "audit_entries"];

/// Two hosts on a database of their own whose every statement the
/// server logs (for this database only), and the log's file.
fn hosts_logging_statements() -> (TwoHosts, std::path::PathBuf) {
    let database = TestDatabase::new();
    cluster().execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] %d '").unwrap();
    cluster().execute("SELECT pg_reload_conf()").unwrap();
    cluster().execute(&format!("ALTER DATABASE {} SET log_statement = 'all'", database.name)).unwrap();
    let log_file = cluster().socket_dir().join("server.log");
    (TwoHosts::start_on(database, &[]), log_file)
}

/// The round trips of a list request whose key the host knows: the one
/// that begins its read snapshot (with the key's lookup) and its page,
/// whose statement also reads the count its total needs
/// (docs/performance.md, "A list's page and its total in one round trip").
#[test]
fn a_list_page_and_its_total_are_two_round_trips() {
    let (hosts, log_file) = hosts_logging_statements();
    let findings = hosts.a.all(0, "vulnerability-findings");
    let endpoint = findings[0]["endpoint_id"].as_str().unwrap().to_owned();
    let name = &hosts.database.name;
    for path in [
        "/v1/vulnerability-findings?limit=2".to_owned(),
        format!("/v1/vulnerability-findings?endpointId={endpoint}&limit=1"),
        "/v1/vulnerability-findings?severity=critical&limit=1".to_owned(),
        "/v1/vulnerability-findings?sort=-severity&limit=2".to_owned(),
        "/v1/endpoints?limit=2".to_owned(),
    ] {
        // The first request makes the key known to the host.
        assert_eq!(hosts.a.get_as(0, &path).status().as_u16(), 200, "{path}");
        let from = std::fs::metadata(&log_file).unwrap().len();
        let page = hosts.a.get_as(0, &path);
        assert_eq!(page.status().as_u16(), 200, "{path}");
        let page: Value = page.json().unwrap();
        assert!(page["total"].as_u64().unwrap() > page["data"].as_array().unwrap().len() as u64, "{path}: {page}");
        // The hosts' background work reads neither records nor counts.
        let round_trips: Vec<String> = wait_for_statements(&log_file, from, name)
            .into_iter()
            .map(|(sql, _)| sql)
            .filter(|sql| sql.starts_with("BEGIN") || sql.contains("FROM records") || sql.contains("FROM counts"))
            .collect();
        assert_eq!(round_trips.len(), 2, "{path}: {round_trips:#?}");
        assert!(round_trips[0].starts_with("BEGIN") && round_trips[0].contains("FROM api_keys"), "{path}");
        assert!(round_trips[1].contains("FROM counts"), "{path}: the page carries its count");
    }
}

#[test]
fn every_statement_of_a_public_request_names_the_callers_organization() {
    let (hosts, log_file) = hosts_logging_statements();
    let findings = hosts.a.all(0, "vulnerability-findings");
    let finding = findings[0]["id"].as_str().unwrap().to_owned();
    let endpoint = findings[0]["endpoint_id"].as_str().unwrap().to_owned();
    let since = findings[10]["updated_at"].as_str().unwrap().to_owned();
    wait_for_both(&hosts);

    let from = std::fs::metadata(&log_file).unwrap().len();
    let paths = [
        format!("/v1/endpoints/{endpoint}"),
        format!("/v1/vulnerability-findings/{finding}"),
        "/v1/endpoints?limit=5&sort=hostname".to_owned(),
        format!("/v1/vulnerability-findings?endpointId={endpoint}&status=open"),
        "/v1/vulnerability-findings?status=open&severity=critical,high&kev=true&limit=3".to_owned(),
        "/v1/vulnerability-findings?minCvss=7&sort=-cvss&limit=4".to_owned(),
        format!("/v1/vulnerability-findings?updatedAfter={since}&limit=2"),
        "/v1/remediation-targets?status=actionable&limit=3".to_owned(),
        "/v1/scopes?q=a".to_owned(),
        "/v1/agent/config?platform=linux".to_owned(),
        "/v1/health".to_owned(),
    ];
    let mut organizations_asked = BTreeSet::new();
    for (n, path) in paths.iter().enumerate() {
        let server = hosts.both()[n % 2];
        for organization in 0..2 {
            // An item of the first organization is another's 404.
            assert!(server.get_as(organization, path).status().as_u16() < 500, "{path}");
            organizations_asked.insert(server.organization_ids[organization].clone());
        }
    }
    // A walk through cursors on both hosts.
    walk(&hosts.both(), "/v1/vulnerability-findings?sort=-severity&limit=50");

    // PostgreSQL writes a statement's log line and its parameters together.
    let name = &hosts.database.name;
    let statements = wait_for_statements(&log_file, from, name);
    let mut tenant_statements = 0;
    for (sql, parameters) in &statements {
        let tables: BTreeSet<&str> = tables_of(sql);
        if tables.iter().any(|table| TENANT_TABLES.contains(table)) {
            tenant_statements += 1;
            assert!(!sql.contains("org_id = ANY") && !sql.contains("org_id IN"), "more than one organization: {sql}");
            let mut named: BTreeSet<&str> = org_parameters(sql)
                .iter()
                .map(|n| parameters.get(n).unwrap_or_else(|| panic!("no value of ${n} logged for {sql}")).as_str())
                .collect();
            // A simple query (a first read by id with its `BEGIN`) names it as a literal.
            named.extend(org_literals(sql));
            assert_eq!(named.len(), 1, "a statement must name exactly one organization: {sql} {parameters:?}");
            let organization = named.into_iter().next().unwrap();
            assert!(organizations_asked.contains(organization), "{organization} is no caller's: {sql}");
        } else {
            assert!(
                tables.iter().all(|table| SHARED_TABLES.contains(table)),
                "a public request read a table that is neither a tenant's nor shared: {sql}"
            );
        }
    }
    assert!(tenant_statements > paths.len(), "only {tenant_statements} tenant statements logged: {statements:?}");
}

/// The tables a statement names after FROM, JOIN, INTO or UPDATE.
fn tables_of(sql: &str) -> BTreeSet<&str> {
    // A word with a parenthesis is a function or a subquery, not a table.
    let words: Vec<&str> = sql.split(|c: char| c.is_whitespace() || c == ',').collect();
    words
        .windows(2)
        .filter(|pair| ["FROM", "JOIN", "INTO", "UPDATE"].contains(&pair[0].to_ascii_uppercase().as_str()))
        .map(|pair| pair[1].trim_end_matches(';'))
        .filter(|word| !word.contains('(') && !word.contains(')') && !word.eq_ignore_ascii_case("stdin"))
        // Keywords are upper case (`ON CONFLICT … DO UPDATE SET`), tables lower.
        .filter(|word| word.starts_with(|c: char| c.is_ascii_lowercase()))
        .collect()
}

/// The numbers of the parameters a statement compares an `org_id` with.
fn org_parameters(sql: &str) -> Vec<u32> {
    sql.match_indices("org_id = $")
        .filter_map(|(at, found)| {
            let digits: String = sql[at + found.len()..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// The organization ids a statement compares an `org_id` with as literals.
fn org_literals(sql: &str) -> Vec<&str> {
    sql.match_indices("org_id = '")
        .filter_map(|(at, found)| sql[at + found.len()..].split_once('\'').map(|(literal, _)| literal))
        .collect()
}

/// The statements the database logged for `database` past `from` bytes of
/// its log: (SQL, parameter values by number). Waits until the log holds
/// some (the server writes it as it goes).
fn wait_for_statements(log_file: &Path, from: u64, database: &str) -> Vec<(String, BTreeMap<u32, String>)> {
    let mut statements = Vec::new();
    wait_until(Duration::from_secs(30), "the statement log", || {
        let bytes = std::fs::read(log_file).unwrap();
        let text = String::from_utf8_lossy(&bytes[from as usize..]).into_owned();
        statements = parse_statements(&text, database);
        statements.iter().any(|(sql, _)| sql.contains("FROM records"))
    });
    statements
}

fn parse_statements(log: &str, database: &str) -> Vec<(String, BTreeMap<u32, String>)> {
    let marker = format!("] {database} ");
    let lines: Vec<&str> = log.lines().collect();
    let mut statements = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((_, rest)) = line.split_once(&marker) else { continue };
        let sql = if let Some(sql) = rest.strip_prefix("LOG:  statement: ") {
            sql
        } else if let Some(rest) = rest.strip_prefix("LOG:  execute ") {
            rest.split_once(": ").map_or(rest, |(_, sql)| sql)
        } else {
            continue;
        };
        let mut parameters = BTreeMap::new();
        if let Some(detail) = lines.get(n + 1).and_then(|next| next.split_once("DETAIL:  parameters: ")) {
            for item in detail.1.split(", $") {
                if let Some((number, value)) = item.trim_start_matches('$').split_once(" = ")
                    && let Ok(number) = number.parse()
                {
                    parameters.insert(number, value.trim_matches('\'').to_owned());
                }
            }
        }
        statements.push((sql.to_owned(), parameters));
    }
    statements
}

/// Runs `poll` until the writers are done, then once more (a poll that
/// started while they wrote may have missed their last writes), and joins
/// them.
fn poll_while_writing(
    writing: &std::sync::atomic::AtomicBool,
    writers: Vec<std::thread::ScopedJoinHandle<'_, ()>>,
    mut poll: impl FnMut(),
) {
    loop {
        let done = !writing.load(std::sync::atomic::Ordering::SeqCst);
        poll();
        if done {
            break;
        }
        if writers.iter().all(|writer| writer.is_finished()) {
            writing.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }
    for writer in writers {
        writer.join().unwrap();
    }
}
