//! Nothing acknowledged is lost: import batches while the server is killed
//! with SIGKILL at random moments, restart it, and check that every
//! acknowledged batch is fully there, no batch is there in part, derived
//! counts agree with the findings, and every index agrees with the records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::{Server, plugins_dir};
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const ENDPOINTS: usize = 12;
const NEW_PER_BATCH: usize = 30;
const RESOLVED_PER_BATCH: usize = 10;
const SEVERITIES: [&str; 5] = ["critical", "high", "medium", "low", "info"];

/// One batch as sent: the findings it creates and the ones it resolves.
#[derive(Debug, Clone)]
struct SentBatch {
    created: Vec<Uuid>,
    resolved: Vec<Uuid>,
    acknowledged: bool,
}

fn finding(id: Uuid, endpoint: &str, severity: &str, status: &str, tag: &str) -> Value {
    json!({
        "id": id, "endpoint_id": endpoint, "finding_type": "vulnerability", "title": format!("finding {tag}"),
        "severity": severity, "status": status,
        "subject": {"type": "software", "vendor": "Acme", "product": "widget", "version": "1.0"},
        "source": {"scanner": "qualys", "scanner_finding_id": tag},
        "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00Z",
        "resolved_at": if status == "resolved" { json!("2026-11-21T00:00:00Z") } else { Value::Null },
    })
}

/// Sends batches until one fails: the server was killed.
fn write_until_killed(
    admin: String,
    token: String,
    organization: String,
    endpoints: Vec<String>,
    round: usize,
    seed: u64,
) -> Vec<SentBatch> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut sent: Vec<SentBatch> = Vec::new();
    // Findings already acknowledged as open, by id, with their line.
    let mut open: Vec<(Uuid, Value)> = Vec::new();
    for batch in 0.. {
        let mut lines = Vec::new();
        let mut created = Vec::new();
        for n in 0..NEW_PER_BATCH {
            let id = Uuid::now_v7();
            let endpoint = &endpoints[rng.gen_range(0..endpoints.len())];
            let severity = SEVERITIES[rng.gen_range(0..SEVERITIES.len())];
            lines.push(finding(id, endpoint, severity, "open", &format!("r{round}-b{batch}-n{n}")));
            created.push(id);
        }
        let resolving: Vec<(Uuid, Value)> = open.drain(..RESOLVED_PER_BATCH.min(open.len())).collect();
        for (_, line) in &resolving {
            let mut resolved = line.clone();
            resolved["status"] = json!("resolved");
            resolved["resolved_at"] = json!("2026-11-21T00:00:00Z");
            lines.push(resolved);
        }
        let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
        sent.push(SentBatch {
            created: created.clone(),
            resolved: resolving.iter().map(|(id, _)| *id).collect(),
            acknowledged: false,
        });
        let answer = client
            .post(format!("{admin}/admin/v1/organizations/{organization}/import/vulnerability-findings"))
            .bearer_auth(&token)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send();
        match answer {
            Ok(response) if response.status() == 200 => {
                let summary: Value = response.json().unwrap();
                assert_eq!(summary["created"], NEW_PER_BATCH, "{summary}");
                sent.last_mut().unwrap().acknowledged = true;
                open.extend(created.into_iter().zip(lines.into_iter().take(NEW_PER_BATCH)));
            }
            Ok(response) => panic!("batch refused: {} {}", response.status(), response.text().unwrap_or_default()),
            // The server is gone: this batch may or may not have landed.
            Err(_) => return sent,
        }
    }
    sent
}

/// Every finding of the organization, by id, walking cursor pages.
fn all_findings(server: &Server, key: &str) -> HashMap<Uuid, Value> {
    let mut found = HashMap::new();
    let mut path = "/v1/vulnerability-findings?limit=100".to_owned();
    loop {
        let page: Value = server.client.get(server.url(&path)).bearer_auth(key).send().unwrap().json().unwrap();
        for finding in page["data"].as_array().unwrap() {
            found.insert(Uuid::parse_str(finding["id"].as_str().unwrap()).unwrap(), finding.clone());
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/vulnerability-findings?limit=100&cursor={cursor}"),
            None => return found,
        }
    }
}

#[test]
fn acknowledged_batches_survive_sigkill_and_no_batch_lands_in_part() {
    acknowledged_batches_survive(None);
}

/// The same on PostgreSQL, with fsync on: the host is killed as on sled,
/// and every other round the database server is stopped at once too (an
/// immediate shutdown, recovered from its write-ahead log at restart).
#[test]
fn on_postgres_acknowledged_batches_survive_sigkill_and_no_batch_lands_in_part() {
    let mut cluster = esr_pg_cluster::Cluster::temporary(esr_pg_cluster::Durability::Durable).unwrap();
    cluster.execute("CREATE DATABASE durable").unwrap();
    acknowledged_batches_survive(Some(&mut cluster));
}

fn acknowledged_batches_survive(mut cluster: Option<&mut esr_pg_cluster::Cluster>) {
    let plugins = plugins_dir();
    let url = cluster.as_ref().map(|cluster| cluster.url("durable"));
    let database: Vec<&str> = url.iter().flat_map(|url| ["--database", url.as_str()]).collect();
    let mut first = Server::start_with(&plugins, &database);
    let data_dir = first.data_dir().to_path_buf();
    let token = first.admin_token();
    let created: Value = first
        .admin(Method::POST, "/admin/v1/organizations")
        .json(&json!({"name": "Durable"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let organization = created["organization_id"].as_str().unwrap().to_owned();
    let key: Value = first
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": organization, "name": "check", "scopes": ["endpoints:read", "findings:read"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let key = key["api_key"].as_str().unwrap().to_owned();
    let hosts: String = (0..ENDPOINTS)
        .map(|n| {
            format!(
                "{}\n",
                json!({"hostname": format!("node-{n}"), "operating_system": {"name": "Linux", "family": "linux"}})
            )
        })
        .collect();
    let response = first
        .admin(Method::POST, &format!("/admin/v1/organizations/{organization}/import/endpoints"))
        .header("content-type", "application/x-ndjson")
        .body(hosts)
        .send()
        .unwrap();
    let endpoints = common::imported_ids(response);

    let mut rng = rand::rngs::StdRng::seed_from_u64(20261122);
    let mut all_sent = Vec::new();
    let mut current: Option<Server> = None;
    for round in 0..6 {
        let server = current.as_ref().unwrap_or(&first);
        let (admin, token, organization, endpoints) =
            (server.admin_base.clone(), token.clone(), organization.clone(), endpoints.clone());
        let writer =
            std::thread::spawn(move || write_until_killed(admin, token, organization, endpoints, round, round as u64));
        std::thread::sleep(Duration::from_millis(rng.gen_range(300..1500)));
        server.signal("KILL");
        let sent = writer.join().unwrap();
        assert!(sent.iter().filter(|batch| batch.acknowledged).count() > 0, "round {round} acknowledged nothing");
        all_sent.extend(sent);
        if let Some(mut killed) = current.take() {
            killed.stop();
        } else {
            first.stop();
        }
        if let Some(cluster) = cluster.as_deref_mut()
            && round % 2 == 1
        {
            cluster.crash_and_restart().unwrap();
        }
        current = Some(Server::start_on_with(&plugins, &data_dir, &database));
    }

    let server = current.as_ref().unwrap();
    let findings = all_findings(server, &key);
    let mut unacknowledged_landed = 0;
    for (number, batch) in all_sent.iter().enumerate() {
        let created = batch.created.iter().filter(|id| findings.contains_key(id)).count();
        let resolved =
            batch.resolved.iter().filter(|id| findings.get(id).is_some_and(|f| f["status"] == "resolved")).count();
        if batch.acknowledged {
            assert_eq!(
                (created, resolved),
                (batch.created.len(), batch.resolved.len()),
                "acknowledged batch {number} lost"
            );
        } else {
            let landed = created == batch.created.len() && resolved == batch.resolved.len();
            assert!(
                landed || (created == 0 && resolved == 0),
                "batch {number} landed in part: {created} created, {resolved} resolved"
            );
            unacknowledged_landed += usize::from(landed);
        }
    }
    eprintln!(
        "{} batches sent over 6 kills, {} acknowledged, {unacknowledged_landed} unacknowledged ones landed whole",
        all_sent.len(),
        all_sent.iter().filter(|batch| batch.acknowledged).count()
    );

    // Derived counts agree with the findings.
    let mut open_counts: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for finding in findings.values().filter(|f| f["status"] == "open" || f["status"] == "reopened") {
        let rank = SEVERITIES.iter().position(|s| finding["severity"] == *s).unwrap();
        open_counts.entry(finding["endpoint_id"].as_str().unwrap().to_owned()).or_default()[rank] += 1;
    }
    for endpoint in &endpoints {
        let stored: Value = server
            .client
            .get(server.url(&format!("/v1/endpoints/{endpoint}")))
            .bearer_auth(&key)
            .send()
            .unwrap()
            .json()
            .unwrap();
        let want = open_counts.get(endpoint).copied().unwrap_or_default();
        let have: Vec<u64> = SEVERITIES.iter().map(|s| stored["open_findings"][*s].as_u64().unwrap()).collect();
        assert_eq!(have, want, "open_findings of {endpoint}");
    }
    // Index-backed totals agree with the records.
    let resolved = findings.values().filter(|f| f["status"] == "resolved").count();
    let page: Value = server
        .client
        .get(server.url("/v1/vulnerability-findings?status=resolved&limit=1"))
        .bearer_auth(&key)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(page["total"], resolved);

    // And the store's own check: every index entry and count matches the records.
    let mut server = current.take().unwrap();
    server.stop();
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .arg("check")
        .args(&database)
        .arg("--data-dir")
        .arg(&data_dir)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}
