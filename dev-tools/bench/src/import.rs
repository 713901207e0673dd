//! Import throughput into sled: generated endpoints and findings through
//! the admin listener, beside what sled alone takes to write them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use reqwest::blocking::Client;
use serde_json::Value;

use crate::Args;
use crate::server::start_server_with_admin;

/// Imports generated endpoints and then `findings` findings through the
/// admin listener of a server on a fresh data directory, in batches of
/// `batch` lines, each validated and durable before the next is sent.
/// Returns the report lines. Only time spent in requests counts: the
/// generator runs between them, while the server is idle.
pub(crate) fn bench_import(args: &Args) -> anyhow::Result<String> {
    let data_dir = args.out.join("import-data");
    if data_dir.exists() {
        std::fs::remove_dir_all(&data_dir)?;
    }
    let (server, admin) = start_server_with_admin(&data_dir, &args.plugins_dir)?;
    let imported = import_generated(args, &data_dir, &admin)?;
    drop(server);
    // Gigabytes at a million findings, and made afresh by every run.
    std::fs::remove_dir_all(&data_dir).with_context(|| format!("removing {}", data_dir.display()))?;
    let Imported { organization, spec, endpoint_count, endpoint_time, finding_count, finding_time, wall } = imported;
    let (ceiling_count, ceiling_time) = store_ceiling(args, organization, spec, finding_count)?;
    let rate = |count: usize, time: Duration| count as f64 / time.as_secs_f64().max(1e-9);
    Ok(format!(
        "\nimport (validated, durable, through the admin listener; batches of {} lines, {} in flight):\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s of sending)\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s of sending)  target ≥ 50,000/s\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s)\n\
         import ÷ sled alone: {:.2}\n\
         wall time with generation: {:.1} s\n",
        args.import_batch,
        args.import_in_flight,
        "endpoints",
        rate(endpoint_count, endpoint_time),
        endpoint_count,
        endpoint_time.as_secs_f64(),
        "vulnerability findings",
        rate(finding_count, finding_time),
        finding_count,
        finding_time.as_secs_f64(),
        "sled alone: the same findings' bytes, no index",
        rate(ceiling_count, ceiling_time),
        ceiling_count,
        ceiling_time.as_secs_f64(),
        rate(finding_count, finding_time) / rate(ceiling_count, ceiling_time).max(1e-9),
        wall.as_secs_f64(),
    ))
}

/// What [`import_generated`] imported, and the time its requests took.
pub(crate) struct Imported {
    pub(crate) organization: uuid::Uuid,
    pub(crate) spec: esr_demo::DemoSpec,
    pub(crate) endpoint_count: usize,
    pub(crate) endpoint_time: Duration,
    pub(crate) finding_count: usize,
    pub(crate) finding_time: Duration,
    /// The whole import, generation included.
    pub(crate) wall: Duration,
}

/// Creates an organization through the admin listener at `admin` (its
/// token in `data_dir`) and imports generated endpoints and then
/// `args.import_findings` findings into it, in batches of
/// `args.import_batch` lines, each validated and durable when answered.
/// The batches are generated a window at a time, their request bodies
/// written then; a window's endpoints go first, then its findings with
/// `args.import_in_flight` requests at once (a client sending its next
/// batch while the last is written). Only the time spent sending counts:
/// the generator runs between windows, while the server is idle, so the
/// client takes no core from the server and PostgreSQL while it sends.
pub(crate) fn import_generated(args: &Args, data_dir: &Path, admin: &str) -> anyhow::Result<Imported> {
    const FINDINGS_PER_ENDPOINT: usize = 100;
    // Each window starts the server's pipeline again (its first batch is
    // built with nothing written beside it): a client sending a large
    // report sends its batches back to back.
    const WINDOW_BATCHES: usize = 32;
    let token = std::fs::read_to_string(data_dir.join("admin-token"))?;
    let client = Client::builder().timeout(Duration::from_secs(600)).build()?;
    let created: Value = client
        .post(format!("{admin}/admin/v1/organizations"))
        .bearer_auth(token.trim())
        .json(&serde_json::json!({"name": "Import benchmark"}))
        .send()?
        .json()?;
    let organization = created["organization_id"].as_str().ok_or_else(|| anyhow!("no organization: {created}"))?;
    // A batch's request body and its line count, written while the
    // generator runs (untimed), as a client sending a file has it.
    let body_of = |lines: &[Value]| -> (String, usize) {
        let mut body = String::new();
        for line in lines {
            body.push_str(&line.to_string());
            body.push('\n');
        }
        (body, lines.len())
    };
    let send = |collection: &str, (body, lines): (String, usize)| -> anyhow::Result<()> {
        let response = client
            .post(format!("{admin}/admin/v1/organizations/{organization}/import/{collection}"))
            .bearer_auth(token.trim())
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()?;
        let status = response.status();
        let summary: Value = response.json()?;
        if !status.is_success() || summary["created"].as_u64() != Some(lines as u64) {
            bail!("import of {collection} refused: {status} {summary}");
        }
        Ok(())
    };
    let endpoints = args.import_findings.div_ceil(FINDINGS_PER_ENDPOINT).max(1);
    let spec = esr_demo::DemoSpec { endpoints, findings_per_endpoint: FINDINGS_PER_ENDPOINT };
    let mut generator = esr_demo::Generator::new(11, spec, esr_demo::DEMO_ANCHOR_UNIX, "bench");
    let (mut endpoint_time, mut finding_time) = (Duration::ZERO, Duration::ZERO);
    let (mut endpoint_count, mut finding_count) = (0, 0);
    let mut pending_findings: Vec<Value> = Vec::new();
    let wall = Instant::now();
    loop {
        let mut endpoint_lines = Vec::new();
        let mut batches: Vec<(String, usize)> = Vec::new();
        while batches.len() < WINDOW_BATCHES {
            while pending_findings.len() < args.import_batch {
                let Some(mut generated) = generator.next_endpoint() else { break };
                endpoint_lines.push(generated.endpoint);
                for finding in &mut generated.findings {
                    // Targets are not imported here; a finding may not name one that is not stored.
                    finding["remediation_target_id"] = Value::Null;
                }
                pending_findings.extend(generated.findings);
            }
            let take = pending_findings.len().min(args.import_batch);
            if take == 0 {
                break;
            }
            batches.push(body_of(&pending_findings[..take]));
            pending_findings.drain(..take);
        }
        if endpoint_lines.is_empty() && batches.is_empty() {
            break;
        }
        let endpoint_bodies: Vec<(String, usize)> = endpoint_lines.chunks(args.import_batch).map(body_of).collect();
        let started = Instant::now();
        for body in endpoint_bodies {
            send("endpoints", body)?;
        }
        endpoint_time += started.elapsed();
        endpoint_count += endpoint_lines.len();
        let window_findings: usize = batches.iter().map(|(_, lines)| lines).sum();
        let queue = std::sync::Mutex::new(batches.into_iter());
        let started = Instant::now();
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let senders: Vec<_> = (0..args.import_in_flight.max(1))
                .map(|_| {
                    scope.spawn(|| -> anyhow::Result<()> {
                        loop {
                            let next = queue.lock().map_err(|_| anyhow!("a sender panicked"))?.next();
                            let Some(batch) = next else { return Ok(()) };
                            send("vulnerability-findings", batch)?;
                        }
                    })
                })
                .collect();
            for sender in senders {
                sender.join().map_err(|_| anyhow!("an import request's thread panicked"))??;
            }
            Ok(())
        })?;
        finding_time += started.elapsed();
        finding_count += window_findings;
        eprint!("\rimported {finding_count} findings");
    }
    eprintln!();
    Ok(Imported {
        organization: organization.parse()?,
        spec,
        endpoint_count,
        endpoint_time,
        finding_count,
        finding_time,
        wall: wall.elapsed(),
    })
}

/// What sled alone takes to write the same findings: the generator's
/// lines again, each with the two timestamps the service adds, under the
/// keys the store uses, into a fresh sled opened as the store opens it, in
/// the same batches, each flushed. No parsing, validation, index or HTTP:
/// the ceiling of any import into this store. Returns the records written
/// and the time the writes and flushes took.
fn store_ceiling(
    args: &Args,
    organization: uuid::Uuid,
    spec: esr_demo::DemoSpec,
    findings: usize,
) -> anyhow::Result<(usize, Duration)> {
    let data_dir = args.out.join("import-ceiling");
    if data_dir.exists() {
        std::fs::remove_dir_all(&data_dir)?;
    }
    // sled opened as the store opens it, its records under the store's
    // keys (`organization ‖ record id`), each batch flushed.
    let db = sled::Config::new().path(&data_dir).cache_capacity(esr::store::sled::CACHE_CAPACITY).open()?;
    let records = db.open_tree("records/vulnerability-findings")?;
    let outcome = write_ceiling_batches(args, spec, findings, |batch| {
        let mut writes = sled::Batch::default();
        for (id, bytes) in batch {
            writes.insert(&[organization.as_bytes().as_slice(), id.as_bytes()].concat()[..], bytes);
        }
        records.apply_batch(writes)?;
        db.flush()?;
        Ok(())
    })?;
    drop((records, db));
    std::fs::remove_dir_all(&data_dir).with_context(|| format!("removing {}", data_dir.display()))?;
    Ok(outcome)
}

/// Hands `write` the bytes of the findings an import of `spec` sends (the
/// generator's lines again, each with the two timestamps the service adds)
/// in the import's batches; returns the records written and the time
/// `write` took.
pub(crate) fn write_ceiling_batches(
    args: &Args,
    spec: esr_demo::DemoSpec,
    findings: usize,
    mut write: impl FnMut(Vec<(uuid::Uuid, Vec<u8>)>) -> anyhow::Result<()>,
) -> anyhow::Result<(usize, Duration)> {
    let mut generator = esr_demo::Generator::new(11, spec, esr_demo::DEMO_ANCHOR_UNIX, "bench");
    let (mut written, mut time) = (0, Duration::ZERO);
    let mut pending: Vec<Value> = Vec::new();
    while written < findings {
        while pending.len() < args.import_batch {
            let Some(generated) = generator.next_endpoint() else { break };
            pending.extend(generated.findings);
        }
        let take = pending.len().min(args.import_batch).min(findings - written);
        if take == 0 {
            break;
        }
        let mut batch = Vec::with_capacity(take);
        for mut finding in pending.drain(..take) {
            let id: uuid::Uuid = finding["id"].as_str().unwrap_or_default().parse()?;
            finding["remediation_target_id"] = Value::Null;
            finding["created_at"] = Value::from("2026-11-23T12:00:00.000000Z");
            finding["updated_at"] = Value::from("2026-11-23T12:00:00.000000Z");
            batch.push((id, serde_json::to_vec(&finding)?));
        }
        let started = Instant::now();
        write(batch)?;
        time += started.elapsed();
        written += take;
    }
    Ok((written, time))
}
