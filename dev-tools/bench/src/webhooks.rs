//! Webhooks measured on each backend: the lag from an event's commit to
//! its receipt while imports commit about 1,000 findings a second, and one
//! subscription's throughput to a receiver on loopback; each beside a
//! client polling `/v1/changes` in the same run, so the two ways of
//! following the feed are compared on the same machine and data.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};

use crate::Args;
use crate::postgres::bench_cluster;
use crate::server::start_server_in_mode;
use crate::stats::{ms, percentile};

/// Findings each import batch commits, and batches a second.
const BATCH: usize = 500;
const BATCHES_PER_SECOND: u64 = 2;
/// How long imports run while the lag is measured.
const LAG_SECONDS: u64 = 20;
/// Events the throughput case delivers.
const THROUGHPUT_EVENTS: usize = 50_000;

/// An event as a follower saw it.
struct Seen {
    id: String,
    /// From the event's `changed_at` (when its write began) to its receipt.
    since_change: Duration,
    received: Instant,
}

/// What the receiver got.
#[derive(Default)]
struct Arrivals {
    events: Vec<Seen>,
}

/// A receiver on loopback answering `204` at once.
fn receiver() -> anyhow::Result<(String, Arc<Mutex<Arrivals>>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://127.0.0.1:{}/hook", listener.local_addr()?.port());
    let arrivals: Arc<Mutex<Arrivals>> = Arc::default();
    let kept = arrivals.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let kept = kept.clone();
            std::thread::spawn(move || {
                let Ok(read_half) = stream.try_clone() else { return };
                let mut reader = BufReader::new(read_half);
                let mut writer = stream;
                while let Ok(body) = read_request(&mut reader) {
                    record(&kept, &body);
                    if writer.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((url, arrivals))
}

fn read_request(reader: &mut impl BufRead) -> anyhow::Result<Vec<u8>> {
    let mut length = 0usize;
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        bail!("closed");
    }
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(body)
}

/// Each event as seen now.
fn seen(events: &[Value]) -> Vec<Seen> {
    let (now, received) = (esr_system::clock::unix_now_nanos(), Instant::now());
    events
        .iter()
        .filter_map(|event| {
            let changed = event["changed_at"].as_str().and_then(esr_contract::time::Timestamp::parse)?;
            Some(Seen {
                id: event["id"].as_str()?.to_owned(),
                since_change: Duration::from_nanos(u64::try_from(now - changed.0).unwrap_or(0)),
                received,
            })
        })
        .collect()
}

fn record(arrivals: &Mutex<Arrivals>, body: &[u8]) {
    let Ok(delivery) = serde_json::from_slice::<Value>(body) else { return };
    let events = delivery["events"].as_array().cloned().unwrap_or_default();
    arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).events.extend(seen(&events));
}

/// The admin listener, with the server's admin token.
struct Admin {
    client: reqwest::blocking::Client,
    base: String,
    token: String,
}

impl Admin {
    fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let mut request = self.client.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send()?;
        let status = response.status();
        let text = response.text()?;
        if !status.is_success() {
            bail!("{path}: {status} {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Imports `lines` into the organization's collection; the summary.
    fn import(&self, organization: &str, collection: &str, lines: &[Value]) -> anyhow::Result<Value> {
        let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
        let response = self
            .client
            .post(format!("{}/admin/v1/organizations/{organization}/import/{collection}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()?;
        if !response.status().is_success() {
            bail!("import refused: {}", response.text()?);
        }
        Ok(response.json()?)
    }
}

fn finding(endpoint: &str, label: &str) -> Value {
    json!({
        "endpoint_id": endpoint, "finding_type": "vulnerability", "title": format!("finding {label}"),
        "severity": "high", "status": "open", "cve_id": "CVE-2024-3094", "kev": false,
        "subject": {"type": "software", "vendor": "Tukaani", "product": "xz-utils", "version": "5.6.0"},
        "source": {"scanner": "trivy", "scanner_finding_id": label},
        "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00Z",
    })
}

/// A client polling `/v1/changes` every 100 ms from `after`, keeping
/// each event as it saw it, until it has caught up to `until` once that
/// is known.
fn poll(base: &str, key: &str, mut after: u64, until: impl Fn() -> Option<u64>) -> anyhow::Result<Vec<Seen>> {
    let client = reqwest::blocking::Client::new();
    let mut found = Vec::new();
    loop {
        let page: Value = client
            .get(format!("{base}/v1/changes?after={after}&limit=1000&collection=vulnerability-findings"))
            .bearer_auth(key)
            .send()?
            .json()?;
        let events = page["data"].as_array().cloned().unwrap_or_default();
        found.extend(seen(&events));
        if let Some(last) = events.last().and_then(|event| event["sequence"].as_u64()) {
            after = last;
        }
        if events.len() < 1000 {
            // Caught up: the feed stood at `target` or later when this
            // page was read (its last events may be of other collections).
            let standing = page["sequence"].as_u64().unwrap_or_default();
            if until().is_some_and(|target| standing >= target) {
                return Ok(found);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// p50 and p99 of `durations`.
fn spread(mut durations: Vec<Duration>) -> String {
    durations.sort();
    format!("p50 {:>7.1} ms  p99 {:>7.1} ms", ms(percentile(&durations, 0.5)), ms(percentile(&durations, 0.99)))
}

/// A follower's lags: from each event's `changed_at` (its write began),
/// and from the moment its import was acknowledged (committed), to when
/// the follower had it.
fn summary(name: &str, events: &[Seen], acknowledged: &HashMap<String, Instant>) -> String {
    let since_change = events.iter().map(|event| event.since_change).collect();
    let since_commit = events
        .iter()
        .filter_map(|event| Some(event.received.saturating_duration_since(*acknowledged.get(&event.id)?)))
        .collect();
    format!(
        "  {name:<34} {:>6} events; since the write began: {}; since its commit was acknowledged: {}\n",
        events.len(),
        spread(since_change),
        spread(since_commit)
    )
}

/// One backend: lag under a steady import, then throughput.
fn bench_backend(args: &Args, name: &str, data_dir: &Path, flags: &[&str]) -> anyhow::Result<String> {
    if data_dir.exists() {
        std::fs::remove_dir_all(data_dir)?;
    }
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700).create(data_dir)?;
    let mut all_flags = vec!["--webhooks-allow-http", "--webhooks-allow-private"];
    all_flags.extend_from_slice(flags);
    let (server, admin_base) = start_server_in_mode(data_dir, &args.plugins_dir, &all_flags)?;
    let token = std::fs::read_to_string(data_dir.join("admin-token")).context("the admin token")?;
    let admin = Admin { client: reqwest::blocking::Client::new(), base: admin_base, token: token.trim().to_owned() };
    let organization = admin.send(reqwest::Method::POST, "/admin/v1/organizations", Some(&json!({"name": "Hooks"})))?;
    let organization = organization["organization_id"].as_str().ok_or_else(|| anyhow!("no organization"))?.to_owned();
    let key = admin.send(
        reqwest::Method::POST,
        "/admin/v1/keys",
        Some(&json!({"organization_id": organization, "name": "poller", "scopes": ["findings:read"]})),
    )?;
    let key = key["api_key"].as_str().ok_or_else(|| anyhow!("no key"))?.to_owned();
    let endpoint = json!({"hostname": "bench-1", "operating_system": {"name": "Debian 12", "family": "linux"}});
    let imported = admin.import(&organization, "endpoints", &[endpoint])?;
    let endpoint = imported["ids"][0].as_str().ok_or_else(|| anyhow!("no endpoint"))?.to_owned();
    let latest = |admin: &Admin| -> anyhow::Result<u64> {
        let page: Value =
            admin.client.get(format!("{}/v1/changes?limit=1", server.base)).bearer_auth(&key).send()?.json()?;
        page["sequence"].as_u64().ok_or_else(|| anyhow!("no sequence"))
    };

    // Waits until the subscription's position reaches `sequence`.
    let delivered_through = |admin: &Admin, id: &str, sequence: u64, bound: Duration| -> anyhow::Result<()> {
        let until = Instant::now() + bound;
        loop {
            let path = format!("/admin/v1/organizations/{organization}/webhooks/{id}");
            let shown = admin.send(reqwest::Method::GET, &path, None)?;
            if shown["position"].as_u64().unwrap_or_default() >= sequence {
                return Ok(());
            }
            if Instant::now() > until {
                bail!("the subscription never reached sequence {sequence}: {shown}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // 1. Lag: a subscription and a poller follow imports of ~1,000/s.
    let (url, arrivals) = receiver()?;
    let created = admin.send(
        reqwest::Method::POST,
        &format!("/admin/v1/organizations/{organization}/webhooks"),
        Some(&json!({"url": url, "collections": ["vulnerability-findings"]})),
    )?;
    let id = created["id"].as_str().ok_or_else(|| anyhow!("no subscription"))?.to_owned();
    let start = created["position"].as_u64().unwrap_or_default();
    let target: Arc<Mutex<Option<u64>>> = Arc::default();
    let poller = {
        let (base, key, target) = (server.base.clone(), key.clone(), target.clone());
        std::thread::spawn(move || {
            poll(&base, &key, start, || *target.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
        })
    };
    let started = Instant::now();
    let mut batch_number = 0u64;
    let mut acknowledged: HashMap<String, Instant> = HashMap::new();
    while started.elapsed() < Duration::from_secs(LAG_SECONDS) {
        let due = started + Duration::from_millis(batch_number * 1000 / BATCHES_PER_SECOND);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let lines: Vec<Value> = (0..BATCH).map(|n| finding(&endpoint, &format!("lag-{batch_number}-{n}"))).collect();
        let imported = admin.import(&organization, "vulnerability-findings", &lines)?;
        let at = Instant::now();
        for id in imported["ids"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            acknowledged.insert(id.to_owned(), at);
        }
        batch_number += 1;
    }
    let committed = batch_number as usize * BATCH;
    let rate = committed as f64 / started.elapsed().as_secs_f64();
    let last = latest(&admin)?;
    *target.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(last);
    let polled = poller.join().map_err(|_| anyhow!("the poller panicked"))??;
    delivered_through(&admin, &id, last, Duration::from_secs(120))?;
    let delivered = std::mem::take(&mut arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).events);
    let mut report =
        format!("{name}: imports committing {rate:.0} findings/s for {LAG_SECONDS} s ({committed} findings)\n");
    report.push_str(&summary("webhook", &delivered, &acknowledged));
    report.push_str(&summary("poller (every 100 ms)", &polled, &acknowledged));

    // 2. Throughput: THROUGHPUT_EVENTS already committed, delivered from
    // a replay, beside a poller reading the same events as fast as it can.
    admin.send(
        reqwest::Method::PATCH,
        &format!("/admin/v1/organizations/{organization}/webhooks/{id}"),
        Some(&json!({"state": "paused"})),
    )?;
    let from = latest(&admin)?;
    for batch in 0..THROUGHPUT_EVENTS / 10_000 {
        let lines: Vec<Value> = (0..10_000).map(|n| finding(&endpoint, &format!("bulk-{batch}-{n}"))).collect();
        admin.import(&organization, "vulnerability-findings", &lines)?;
    }
    let through = latest(&admin)?;
    let read_started = Instant::now();
    let read = poll(&server.base, &key, from, || Some(through))?;
    let polled_rate = read.len() as f64 / read_started.elapsed().as_secs_f64();
    arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).events.clear();
    let delivery_started = Instant::now();
    admin.send(
        reqwest::Method::POST,
        &format!("/admin/v1/organizations/{organization}/webhooks/{id}/replay"),
        Some(&json!({"from_sequence": from})),
    )?;
    admin.send(
        reqwest::Method::PATCH,
        &format!("/admin/v1/organizations/{organization}/webhooks/{id}"),
        Some(&json!({"state": "active"})),
    )?;
    delivered_through(&admin, &id, through, Duration::from_secs(600))?;
    let delivered_count = arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).events.len();
    let delivered_rate = delivered_count as f64 / delivery_started.elapsed().as_secs_f64();
    report.push_str(&format!(
        "  one subscription, {delivered_count} events replayed: {delivered_rate:>9.0} events/s; a poller reading them \
         (limit=1000): {polled_rate:.0} events/s; ratio {:.2}\n",
        delivered_rate / polled_rate.max(f64::EPSILON)
    ));
    drop(server);
    Ok(report)
}

/// Both backends.
pub(crate) fn bench_webhooks(args: &Args) -> anyhow::Result<String> {
    let mut report = String::from(
        "\nwebhooks: lag from commit to receipt under a steady import, and one subscription's throughput, each beside \
         a poller of /v1/changes in the same run\ncommand: make bench (target/debug/esr-bench --webhooks-only)\n",
    );
    report.push_str(&bench_backend(args, "sled", &args.out.join("webhooks-sled"), &[])?);
    let cluster = bench_cluster(args)?;
    cluster.execute("DROP DATABASE IF EXISTS bench_webhooks WITH (FORCE)")?;
    cluster.execute("CREATE DATABASE bench_webhooks")?;
    let url = cluster.url("bench_webhooks");
    report.push_str(&bench_backend(
        args,
        "PostgreSQL",
        &args.out.join("webhooks-postgres-host"),
        &["--database", &url],
    )?);
    Ok(report)
}
