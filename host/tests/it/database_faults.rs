//! Database faults with real PostgreSQL and two real `esr serve` hosts:
//! the primary stopped (a fast shutdown, then an immediate one) and
//! started again while readers and importers run through both hosts. While
//! it is down every answer is `503` problem+json with `Retry-After`, naming
//! no internals, within the request deadline; afterwards both hosts serve
//! again without a restart; every acknowledged import is there, and the
//! imports sent again after a failure leave what one clean import leaves.
//! And an exhausted connection pool sheds a flood with `503` at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Answer, Server, plugins_dir, private_tempdir, wait_until};
use esr_pg_cluster::{Cluster, Durability, Shutdown};
use reqwest::Method;
use serde_json::{Value, json};

/// Each request's deadline on the hosts.
const DEADLINE_MS: u64 = 2000;
/// Far beyond the deadline: an answer slower than this hung. Not a
/// performance figure.
const HUNG: Duration = Duration::from_secs(30);
/// Records per import batch.
const BATCH: usize = 20;

/// Text an answer must never show a client: the database's own words,
/// where it lives, what the host runs.
const INTERNALS: [&str; 9] =
    ["PostgreSQL", "postgres", "SQLSTATE", "storage", "socket", "/tmp", "r2d2", "error communicating", "db error"];

fn problem_without_internals(answer: &Answer, what: &str) {
    assert_eq!(answer.status, 503, "{what}: {answer:?}");
    assert_eq!(answer.content_type, "application/problem+json", "{what}: {answer:?}");
    assert!(answer.retry_after.is_some(), "{what} without Retry-After: {answer:?}");
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["status"], 503, "{what}: {answer:?}");
    for internal in INTERNALS {
        assert!(!answer.body.contains(internal), "{what} names {internal:?}: {}", answer.body);
    }
    assert!(answer.took < HUNG, "{what} hung for {:?}", answer.took);
}

fn send(request: reqwest::blocking::RequestBuilder) -> Answer {
    let started = Instant::now();
    let response = request.send().expect("the host answers, whatever the database does");
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let (status, content_type, retry_after) =
        (response.status().as_u16(), header("content-type").unwrap_or_default(), header("retry-after"));
    let body = response.text().unwrap();
    Answer { status, content_type, retry_after, body, took: started.elapsed() }
}

/// Two hosts over one database on a durable cluster of the test's own
/// (the test stops it; a throwaway cluster's unflushed commits would not
/// survive an immediate shutdown, and no production database runs so).
struct Deployment {
    cluster: Cluster,
    url: String,
    hosts: [Server; 2],
    _b_dir: tempfile::TempDir,
}

impl Deployment {
    fn start(extra: &[&str]) -> Deployment {
        let cluster = Cluster::temporary(Durability::Durable).unwrap();
        cluster.execute("CREATE DATABASE esr").unwrap();
        let url = cluster.url("esr");
        let deadline = format!("--plugin-deadline-ms={DEADLINE_MS}");
        let flags: Vec<&str> =
            ["--database", url.as_str(), deadline.as_str()].into_iter().chain(extra.iter().copied()).collect();
        let a = Server::start_with(&plugins_dir(), &flags);
        let b_dir = private_tempdir();
        std::fs::copy(a.data_dir().join("demo-keys.json"), b_dir.path().join("demo-keys.json")).unwrap();
        // The database keeps only the admin token's digest: the operator
        // copies the first host's token to the other hosts' machines.
        std::fs::copy(a.data_dir().join("admin-token"), b_dir.path().join("admin-token")).unwrap();
        let b = Server::start_on_with(&plugins_dir(), b_dir.path(), &flags);
        Deployment { cluster, url, hosts: [a, b], _b_dir: b_dir }
    }
}

/// What the workers saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Every answer that was not `200`, with what was asked.
    failures: Mutex<Vec<(String, Answer)>>,
    /// Per host, whether its last public answer was `200`.
    serving: [AtomicBool; 2],
    /// Per host, whether it has answered `503` since the last reset.
    refused: [AtomicBool; 2],
    /// The import batches acknowledged (`200`), each with its summary.
    acknowledged: Mutex<Vec<(usize, Value)>>,
    /// How many import attempts got no `200`.
    import_failures: Mutex<usize>,
}

impl Seen {
    fn note(&self, host: usize, what: String, answer: Answer) {
        self.serving[host].store(answer.status == 200, Ordering::Relaxed);
        if answer.status != 200 {
            self.refused[host].store(answer.status == 503, Ordering::Relaxed);
            self.failures.lock().unwrap().push((what, answer));
        }
    }
}

/// A batch sent: its collection and its lines.
type Batch = (&'static str, Vec<Value>);

/// Endpoint lines with ids of their own: the identity that makes a batch
/// safe to send again.
fn endpoint_batch(batch: usize) -> Vec<Value> {
    (0..BATCH)
        .map(|n| {
            json!({
                "id": uuid::Uuid::new_v4().to_string(), "hostname": format!("fault-{batch}-{n}"),
                "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": [format!("batch-{batch}")],
            })
        })
        .collect()
}

fn finding_batch(batch: usize, endpoint: &str) -> Vec<Value> {
    (0..BATCH)
        .map(|n| {
            let label = format!("{batch}-{n}");
            let severity = ["critical", "high", "medium", "low"][n % 4];
            json!({
                "id": uuid::Uuid::new_v4().to_string(), "endpoint_id": endpoint, "finding_type": "vulnerability",
                "title": format!("finding {label}"), "severity": severity,
                "status": "open", "cve_id": "CVE-2024-3094", "kev": false,
                "subject": {"type": "software", "vendor": "Tukaani", "product": "xz-utils", "version": "5.6.0"},
                "source": {"scanner": "trivy", "scanner_finding_id": label},
                "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00Z",
            })
        })
        .collect()
}

fn import_request(
    server: &Server,
    organization: &str,
    collection: &str,
    lines: &[Value],
) -> reqwest::blocking::RequestBuilder {
    let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
    server
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/{collection}"))
        .header("content-type", "application/x-ndjson")
        .body(body)
}

/// Every record of a collection as the organization's key reads it, by
/// id, without the fields the service sets at write time.
fn contents(server: &Server, key: &str, collection: &str) -> std::collections::BTreeMap<String, Value> {
    let mut records = std::collections::BTreeMap::new();
    let mut path = format!("/v1/{collection}?limit=100");
    loop {
        let page: Value = server.client.get(server.url(&path)).bearer_auth(key).send().unwrap().json().unwrap();
        for record in page["data"].as_array().unwrap() {
            let mut record = record.clone();
            let object = record.as_object_mut().unwrap();
            object.remove("created_at");
            object.remove("updated_at");
            records.insert(object["id"].as_str().unwrap().to_owned(), record);
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/{collection}?limit=100&cursor={cursor}"),
            None => return records,
        }
    }
}

#[test]
fn the_primary_stopped_and_started_again_answers_503_then_serves_and_loses_no_acknowledged_import() {
    let mut deployment = Deployment::start(&[]);
    let scopes = ["endpoints:read", "findings:read"];
    let (organization, key) = deployment.hosts[0].organization_with_key("faults", &scopes);
    // The findings' endpoint, imported before any fault.
    let anchor = endpoint_batch(usize::MAX)[..1].to_vec();
    let answer = send(import_request(&deployment.hosts[0], &organization, "endpoints", &anchor));
    assert_eq!(answer.status, 200, "{answer:?}");
    let anchor_id = anchor[0]["id"].as_str().unwrap().to_owned();

    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    // Every batch sent, in order, for the clean import at the end.
    let sent: Arc<Mutex<Vec<Batch>>> = Arc::default();
    let outcome = std::thread::scope(|scope| {
        for reader in 0..4 {
            let (hosts, seen, stop) = (&deployment.hosts, seen.clone(), stop.clone());
            scope.spawn(move || {
                let demo_key = &hosts[0].keys[0];
                let paths = ["/v1/endpoints?limit=5", "/v1/vulnerability-findings?limit=5&severity=high"];
                let mut turn = reader;
                while !stop.load(Ordering::Relaxed) {
                    let host = turn % 2;
                    let path = paths[turn / 2 % 2];
                    turn += 1;
                    let server = &hosts[host];
                    let answer = send(server.client.get(server.url(path)).bearer_auth(demo_key));
                    seen.note(host, format!("GET {path} on host {host}"), answer);
                }
            });
        }
        for importer in 0..2 {
            let (hosts, seen, stop, sent) = (&deployment.hosts, seen.clone(), stop.clone(), sent.clone());
            let (organization, anchor_id) = (&organization, &anchor_id);
            scope.spawn(move || {
                let mut batch = importer;
                while !stop.load(Ordering::Relaxed) {
                    let (collection, lines) = if batch % 2 == 0 {
                        ("endpoints", endpoint_batch(batch))
                    } else {
                        ("vulnerability-findings", finding_batch(batch, anchor_id))
                    };
                    sent.lock().unwrap().push((collection, lines.clone()));
                    // Sent until acknowledged, to either host, as a client
                    // honouring Retry-After does.
                    let first_sent = Instant::now();
                    for attempt in 0.. {
                        assert!(first_sent.elapsed() < 4 * HUNG, "an import was never acknowledged");
                        let host = (batch + attempt) % 2;
                        let answer = send(import_request(&hosts[host], organization, collection, &lines));
                        if answer.status == 200 {
                            let summary: Value = serde_json::from_str(&answer.body).unwrap();
                            seen.acknowledged.lock().unwrap().push((batch, summary));
                            break;
                        }
                        *seen.import_failures.lock().unwrap() += 1;
                        seen.failures.lock().unwrap().push((format!("import of {collection} on host {host}"), answer));
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    batch += 2;
                    // Paced, to keep the batches (and the clean import at the end) few.
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for mode in [Shutdown::Fast, Shutdown::Immediate] {
                wait_until(HUNG, "both hosts serving", || seen.serving.iter().all(|s| s.load(Ordering::Relaxed)));
                let acknowledged_before = seen.acknowledged.lock().unwrap().len();
                wait_until(HUNG, "an import acknowledged", || {
                    seen.acknowledged.lock().unwrap().len() > acknowledged_before
                });
                seen.refused.iter().for_each(|r| r.store(false, Ordering::Relaxed));
                deployment.cluster.shut_down(mode).unwrap();
                wait_until(HUNG, "both hosts answering 503 with the primary down", || {
                    seen.refused.iter().all(|r| r.load(Ordering::Relaxed))
                });
                deployment.cluster.start_again().unwrap();
                // The same processes serve again: no host was restarted.
                wait_until(HUNG, "both hosts serving after the restart", || {
                    seen.serving.iter().all(|s| s.load(Ordering::Relaxed))
                });
            }
            let acknowledged_before = seen.acknowledged.lock().unwrap().len();
            wait_until(HUNG, "imports acknowledged after the restarts", || {
                seen.acknowledged.lock().unwrap().len() >= acknowledged_before + 2
            });
        }));
        stop.store(true, Ordering::Relaxed);
        outcome
    });
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }

    // Every answer but 200 was a 503 a client can act on, in time.
    let failures = seen.failures.lock().unwrap();
    assert!(!failures.is_empty());
    for (what, answer) in failures.iter() {
        problem_without_internals(answer, what);
    }
    assert!(*seen.import_failures.lock().unwrap() > 0, "no import met the fault");
    for host in &deployment.hosts {
        assert_eq!(host.get("/v1/health").status(), 200);
    }

    // Nothing acknowledged is lost, nothing sent again counts twice.
    let sent = sent.lock().unwrap();
    let acknowledged = seen.acknowledged.lock().unwrap();
    assert_eq!(acknowledged.len(), sent.len(), "every batch was sent until acknowledged");
    for (_, summary) in acknowledged.iter() {
        let done = ["created", "updated", "unchanged"].map(|n| summary[n].as_u64().unwrap());
        assert_eq!(done[0] + done[2], BATCH as u64, "a batch sent again only creates what is missing: {summary}");
        assert_eq!(done[1], 0, "{summary}");
    }
    let server = &deployment.hosts[1];
    let endpoints = contents(server, &key, "endpoints");
    let findings = contents(server, &key, "vulnerability-findings");
    for (collection, lines) in sent.iter() {
        let stored = if *collection == "endpoints" { &endpoints } else { &findings };
        for line in lines {
            assert!(stored.contains_key(line["id"].as_str().unwrap()), "an acknowledged {collection} record is lost");
        }
    }
    let sent_of = |collection: &str| sent.iter().filter(|(c, _)| *c == collection).count() * BATCH;
    assert_eq!(endpoints.len(), 1 + sent_of("endpoints"));
    assert_eq!(findings.len(), sent_of("vulnerability-findings"));

    // The same batches imported once, cleanly, into another organization
    // leave the same records.
    let (clean, clean_key) = deployment.hosts[0].organization_with_key("clean", &scopes);
    let answer = send(import_request(&deployment.hosts[0], &clean, "endpoints", &anchor));
    assert_eq!(answer.status, 200, "{answer:?}");
    for (collection, lines) in sent.iter() {
        let answer = send(import_request(&deployment.hosts[0], &clean, collection, lines));
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    assert_eq!(contents(server, &clean_key, "endpoints"), endpoints);
    assert_eq!(contents(server, &clean_key, "vulnerability-findings"), findings);

    let check = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["check", "--database", &deployment.url, "--data-dir"])
        .arg(deployment.hosts[0].data_dir())
        .output()
        .unwrap();
    assert!(check.status.success(), "esr check: {}", String::from_utf8_lossy(&check.stderr));
}

/// Shed at once because as many requests as may wait for a connection
/// already do (the answer says how many), not after waiting out a deadline.
fn shed_at_once(answer: &Answer) -> bool {
    answer.status == 503 && answer.body.contains("requests wait for one")
}

#[test]
fn an_exhausted_pool_sheds_a_flood_with_503_at_once_and_carries_on() {
    // Endpoint lists are served by a component that waits until its
    // deadline, holding a connection all along: with one connection, a
    // few of them hold it and fill the queue of those waiting for it.
    let database = common::postgres::TestDatabase::new();
    let sleeper = common::test_plugins_dir().join("sleeper.wasm");
    let dir = common::plugins_dir_with(&["endpoints.wasm"], &[("sleeper.wasm", &sleeper)]);
    let deadline = format!("--plugin-deadline-ms={DEADLINE_MS}");
    // Every holder in a slot, so that those waiting for the connection
    // fill its queue (authentication does not wait there: it has
    // connections of its own).
    let server = Server::start_with(
        dir.path(),
        &["--database", &database.url, "--database-pool-size", "1", "--plugin-slots-per-organization", "16", &deadline],
    );
    let get = |path: &str| send(server.client.get(server.url(path)).bearer_auth(&server.keys[0]));
    let stop = AtomicBool::new(false);
    let (holders, flood) = std::thread::scope(|scope| {
        let holders: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| {
                    let mut answers = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        answers.push(get("/v1/endpoints?wait=sleep"));
                    }
                    answers
                })
            })
            .collect();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_until(HUNG, "a request shed at once while the pool is held", || {
                shed_at_once(&get("/v1/vulnerability-findings?limit=1"))
            });
            std::thread::scope(|flood| {
                let requests: Vec<_> =
                    (0..40).map(|_| flood.spawn(|| get("/v1/vulnerability-findings?limit=1"))).collect();
                requests.into_iter().map(|request| request.join().unwrap()).collect::<Vec<Answer>>()
            })
        }));
        stop.store(true, Ordering::Relaxed);
        let holders: Vec<Answer> = holders.into_iter().flat_map(|holder| holder.join().unwrap()).collect();
        (holders, outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    });
    for answer in holders.iter().chain(&flood) {
        assert!(answer.took < HUNG, "a request hung for {:?}", answer.took);
        if answer.status != 200 {
            problem_without_internals(answer, "a request while the pool is exhausted");
        }
    }
    let shed = flood.iter().filter(|answer| shed_at_once(answer)).count();
    assert!(shed > 0, "no request of the flood was shed at once: {flood:?}");
    // Every permit came back, every waiter left: the server carries on.
    let findings = get("/v1/vulnerability-findings?limit=1");
    assert_eq!(findings.status, 200, "{findings:?}");
    assert_eq!(get("/v1/health").status, 200);
}
