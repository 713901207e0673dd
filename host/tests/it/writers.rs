//! One organization's write does not stall everyone's: while one
//! organization imports a report at the findings limit, and then deletes
//! the endpoint it made (10,000 findings and their targets), Globex goes on
//! importing one endpoint at a time and reading its scopes; on sled and on
//! PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::postgres::TestDatabase;
use common::{Server, plugins_dir, trivy_report_of};
use reqwest::Method;
use serde_json::{Value, json};

const FINDINGS: usize = 10_000;

/// Globex's latencies, one import and one read at a time.
#[derive(Default)]
struct Latencies {
    imports: Vec<Duration>,
    reads: Vec<Duration>,
}

impl Latencies {
    fn describe(&self) -> String {
        format!(
            "{} imports (median {:?}, max {:?}), {} reads (median {:?}, p99 {:?})",
            self.imports.len(),
            median(&self.imports),
            max(&self.imports),
            self.reads.len(),
            median(&self.reads),
            p99(&self.reads)
        )
    }
}

fn sorted(latencies: &[Duration]) -> Vec<Duration> {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    sorted
}

fn median(latencies: &[Duration]) -> Duration {
    sorted(latencies)[latencies.len() / 2]
}

fn max(latencies: &[Duration]) -> Duration {
    latencies.iter().copied().max().unwrap_or_default()
}

fn p99(latencies: &[Duration]) -> Duration {
    sorted(latencies)[(latencies.len() * 99).div_ceil(100) - 1]
}

/// Globex imports an endpoint, then reads its scopes, again and again,
/// with a client of its own, until `done` (at least three rounds).
fn globex_until(server: &Server, done: &AtomicBool) -> Latencies {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let token = server.admin_token();
    let import =
        format!("{}/admin/v1/organizations/{}/import/endpoints", server.admin_base, server.organization_ids[1]);
    let mut seen = Latencies::default();
    let mut round = 0;
    while round < 3 || !done.load(Ordering::Relaxed) {
        round += 1;
        let line = json!({"hostname": format!("globex-{round}-{}", seen.imports.len()), "operating_system": {"name": "Debian 12", "family": "linux"}});
        let started = Instant::now();
        let response = client
            .post(&import)
            .bearer_auth(&token)
            .header("content-type", "application/x-ndjson")
            .body(format!("{line}\n"))
            .send()
            .unwrap();
        seen.imports.push(started.elapsed());
        assert_eq!(response.status(), 200, "Globex's import failed: {}", response.text().unwrap_or_default());
        let started = Instant::now();
        let response = client.get(server.url("/v1/scopes?limit=10")).bearer_auth(&server.keys[1]).send().unwrap();
        seen.reads.push(started.elapsed());
        assert_eq!(response.status(), 200, "Globex's read failed: {}", response.text().unwrap_or_default());
    }
    seen
}

/// Runs `work` (another organization's) on a thread of its own while
/// Globex imports and reads; how long `work` took and what Globex saw.
fn while_busy<T: Send>(server: &Server, work: impl FnOnce() -> T + Send) -> (T, Duration, Latencies) {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let busy = scope.spawn(|| {
            let started = Instant::now();
            let outcome = work();
            let took = started.elapsed();
            done.store(true, Ordering::Relaxed);
            (outcome, took)
        });
        let seen = globex_until(server, &done);
        let (outcome, took) = busy.join().unwrap();
        (outcome, took, seen)
    })
}

fn large_report_and_deletion_leave_globex_alone(server: &Server, backend: &str) {
    let (organization, key) = server.organization_with_key("large", &["endpoints:read", "findings:read"]);
    let report = trivy_report_of(FINDINGS);
    // The other organization's client: a blocking client serves one request at a time.
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(600)).build().unwrap();
    let token = server.admin_token();
    let admin = |method: Method, path: String| {
        client
            .request(method, format!("{}/admin/v1/organizations/{organization}{path}", server.admin_base))
            .bearer_auth(&token)
    };

    let quiet_until = AtomicBool::new(false);
    let quiet = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_secs(3));
            quiet_until.store(true, Ordering::Relaxed);
        });
        globex_until(server, &quiet_until)
    });

    let (answer, report_took, during_report) = while_busy(server, || {
        let response = admin(Method::POST, "/reports?createEndpoint=true&endpoint=big-1".into())
            .header("content-type", "application/json")
            .body(report)
            .send()
            .unwrap();
        (response.status().as_u16(), response.json::<Value>().unwrap_or(Value::Null))
    });
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert_eq!(answer.1["created"], FINDINGS, "{}", answer.1);

    let endpoints: Value =
        server.client.get(server.url("/v1/endpoints?limit=10")).bearer_auth(&key).send().unwrap().json().unwrap();
    let endpoint = endpoints["data"][0]["id"].as_str().unwrap().to_owned();
    let (status, deletion_took, during_deletion) = while_busy(server, || {
        admin(Method::DELETE, format!("/endpoints/{endpoint}")).send().unwrap().status().as_u16()
    });
    assert_eq!(status, 204);
    let left: Value = server
        .client
        .get(server.url(&format!("/v1/vulnerability-findings?limit=1&endpointId={endpoint}")))
        .bearer_auth(&key)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(left["total"], 0, "the endpoint's findings went with it: {left}");

    let report = format!(
        "{backend}: quiet: {}\n  during the report ({report_took:?}): {}\n  during the deletion ({deletion_took:?}): {}",
        quiet.describe(),
        during_report.describe(),
        during_deletion.describe()
    );
    eprintln!("{report}");
    // A write of Globex waits for one bounded batch of the other
    // organization at most (on sled, sled's commit of it; on PostgreSQL,
    // nothing): well under the whole of a report or a deletion.
    let slack = max(&quiet.imports) + Duration::from_millis(500);
    assert!(max(&during_report.imports) <= report_took / 2 + slack, "Globex's import waited for the report:\n{report}");
    assert!(
        max(&during_deletion.imports) <= deletion_took / 4 + slack,
        "Globex's import waited for the deletion:\n{report}"
    );
    // Reads take no write lock; the bound is for a loaded machine.
    for (what, seen) in [("report", &during_report), ("deletion", &during_deletion)] {
        assert!(
            p99(&seen.reads) <= p99(&quiet.reads) * 4 + Duration::from_secs(1),
            "Globex's reads slowed during the {what}:\n{report}"
        );
    }
}

#[test]
fn a_large_report_or_deletion_leaves_another_organizations_writes_and_reads_alone_on_sled() {
    let server = Server::start(&plugins_dir());
    large_report_and_deletion_leave_globex_alone(&server, "sled");
}

#[test]
fn a_large_report_or_deletion_leaves_another_organizations_writes_and_reads_alone_on_postgres() {
    let database = TestDatabase::new();
    let server = Server::start_with(&plugins_dir(), &["--database", &database.url]);
    large_report_and_deletion_leave_globex_alone(&server, "postgres");
}
