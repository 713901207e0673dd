//! `make bench`: the list and item latencies of the real server on a
//! generated organization (10,000 endpoints, 1,000,000 findings by
//! default), measured over real HTTP with the real components.
//!
//! The data set is made once with `esr seed` and kept in
//! `target/bench/data-<endpoints>x<findings per endpoint>`. Measurements
//! interleave the cases round by round so that machine noise hits them
//! alike; the report gives medians and p90s, and the cursor-depth ratio
//! from the same rounds. It is printed and written to
//! `target/bench/report.txt`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::Parser;
use esr_pg_cluster::{Cluster, Durability};
use rand::{Rng, SeedableRng};
use reqwest::blocking::Client;
use serde_json::Value;

#[derive(Parser)]
#[command(about = "Benchmarks the esr read API on a generated data set")]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    endpoints: usize,
    #[arg(long, default_value_t = 100)]
    findings_per_endpoint: usize,
    /// Rounds of measurement (each round measures every case once).
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    #[arg(long, default_value = "target/plugins")]
    plugins_dir: PathBuf,
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Findings to import through the admin listener for the import
    /// throughput case (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    import_findings: usize,
    /// Lines per import batch.
    #[arg(long, default_value_t = 10_000)]
    import_batch: usize,
    /// Seconds of load per operation and mode in the throughput
    /// comparison (wrk, 32 connections); 0 skips it.
    #[arg(long, default_value_t = 10)]
    load_seconds: u64,
    /// Only the import case (with sled's own ceiling), no read cases.
    #[arg(long)]
    import_only: bool,
    /// Endpoints (no findings) of the data set for the text sorts and the
    /// agent configuration.
    #[arg(long, default_value_t = 100_000)]
    wide_endpoints: usize,
    /// Scopes of that data set.
    #[arg(long, default_value_t = 100_000)]
    wide_scopes: usize,
    /// Only the range filters on the findings (with totals), the text
    /// sorts on the endpoints and scopes, and the agent configuration.
    #[arg(long)]
    wide_lists_only: bool,
    /// Only sled and PostgreSQL side by side (latencies, wrk, import into
    /// PostgreSQL), on a cluster kept in `<out>/postgres`.
    #[arg(long)]
    backends_only: bool,
    /// Only several hosts over PostgreSQL: two hosts against one on the
    /// cluster in `<out>/postgres` (wrk), and a host reading a streaming
    /// replica against one reading the primary (latency).
    #[arg(long)]
    hosts_only: bool,
    /// Endpoints (each with --findings-per-endpoint findings) of the
    /// replica comparison's data set, kept with its cluster and streaming
    /// replica in `<out>/postgres-replicated*` (a replica copies its whole
    /// cluster: one of `<out>/postgres` would double its disk space).
    #[arg(long, default_value_t = 1_000)]
    replica_endpoints: usize,
    /// Only the import into PostgreSQL beside that engine's own ceiling,
    /// on a cluster of its own kept in `<out>/postgres-import` (no data
    /// set to load first).
    #[arg(long)]
    postgres_import_only: bool,
    /// The real scanner reports the report import case repeats.
    #[arg(long, env = "ESR_SCANNER_REPORTS_DIR", default_value = "../shared/scanner-reports")]
    scanner_reports_dir: PathBuf,
    /// Vulnerabilities in the report of the report import case (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    report_vulnerabilities: usize,
    /// Only the report import case.
    #[arg(long)]
    report_import_only: bool,
    /// Only the summaries (counts grouped by fields) on the findings.
    #[arg(long)]
    summaries_only: bool,
}

/// The server under test; stopped on drop.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn esr_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    Ok(me.with_file_name(if cfg!(windows) { "esr.exe" } else { "esr" }))
}

fn ensure_data(args: &Args, data_dir: &Path) -> anyhow::Result<String> {
    ensure_data_of(args.endpoints, args.findings_per_endpoint, data_dir)
}

/// The data set of this size in `data_dir`, generated once; its key.
fn ensure_data_of(endpoints: usize, findings_per_endpoint: usize, data_dir: &Path) -> anyhow::Result<String> {
    ensure_data_with_scopes(endpoints, findings_per_endpoint, 0, data_dir)
}

/// The same, with `scopes` scopes beyond the organization's own.
fn ensure_data_with_scopes(
    endpoints: usize,
    findings_per_endpoint: usize,
    scopes: usize,
    data_dir: &Path,
) -> anyhow::Result<String> {
    let keys_file = data_dir.join("seed-keys.json");
    if !keys_file.exists() {
        if data_dir.exists() {
            std::fs::remove_dir_all(data_dir).with_context(|| format!("clearing {}", data_dir.display()))?;
        }
        eprintln!("generating the data set in {} (once; it is kept)", data_dir.display());
        let status = Command::new(esr_binary()?)
            .args(["seed", "--endpoints", &endpoints.to_string()])
            .args(["--findings-per-endpoint", &findings_per_endpoint.to_string()])
            .args(["--scopes", &scopes.to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .status()?;
        if !status.success() {
            bail!("esr seed failed");
        }
    }
    let keys: Value = serde_json::from_slice(&std::fs::read(&keys_file)?)?;
    keys["organizations"][0]["api_key"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no key in {}", keys_file.display()))
}

/// Reads the data set's files once, so that the operating system's cache
/// holds them and the figures do not depend on what ran before (a cold
/// cache turns record reads into disk reads).
fn warm_page_cache(data_dir: &Path) -> anyhow::Result<()> {
    use std::io::Read;
    let mut buffer = vec![0u8; 1 << 20];
    for entry in std::fs::read_dir(data_dir)? {
        let path = entry?.path();
        if path.is_file() {
            let mut file = std::fs::File::open(&path)?;
            while file.read(&mut buffer)? > 0 {}
        }
    }
    Ok(())
}

/// Starts `esr serve` on the data directory; returns it with its admin URL.
fn start_server(data_dir: &Path, plugins_dir: &Path) -> anyhow::Result<Server> {
    Ok(start_server_with_admin(data_dir, plugins_dir)?.0)
}

fn start_server_with_admin(data_dir: &Path, plugins_dir: &Path) -> anyhow::Result<(Server, String)> {
    start_server_in_mode(data_dir, plugins_dir, &[])
}

/// Starts `esr serve` with extra flags (e.g. `--native-handlers`).
fn start_server_in_mode(data_dir: &Path, plugins_dir: &Path, extra: &[&str]) -> anyhow::Result<(Server, String)> {
    let mut child = Command::new(esr_binary()?)
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(extra)
        // The benchmark measures the service, not its rate limits.
        .args(["--rate-limit-per-minute=100000000", "--rate-limit-burst=10000000"])
        .args(["--agent-config-rate-limit-per-minute=100000000", "--agent-config-rate-limit-burst=10000000"])
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--plugins-dir")
        .arg(plugins_dir)
        .env("ESR_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let (base, admin) = esr::server::read_listening_addresses(&mut lines)
        .ok_or_else(|| anyhow!("esr serve exited before listening"))?;
    std::thread::spawn(move || lines.for_each(drop));
    settle_writes(data_dir)?;
    Ok((Server { child, base }, admin))
}

/// Waits until what the server wrote while opening the store is on disk.
/// sled overwrites every free segment of its log with zeros when it opens
/// (690 MB for the million-finding set); left to the kernel, that
/// write-back would run inside the first seconds of a measurement.
fn settle_writes(data_dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(data_dir)? {
        let path = entry?.path();
        if path.is_file() {
            std::fs::File::open(&path)?.sync_data()?;
        }
    }
    Ok(())
}

/// Imports generated endpoints and then `findings` findings through the
/// admin listener of a server on a fresh data directory, in batches of
/// `batch` lines, each validated and durable before the next is sent.
/// Returns the report lines. Only time spent in requests counts: the
/// generator runs between them, while the server is idle.
fn bench_import(args: &Args) -> anyhow::Result<String> {
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
        "\nimport (validated, durable, through the admin listener; batches of {} lines):\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s of requests)\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s of requests)  target ≥ 50,000/s\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s)\n\
         import ÷ sled alone: {:.2}\n\
         wall time with generation: {:.1} s\n",
        args.import_batch,
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
struct Imported {
    organization: uuid::Uuid,
    spec: esr_demo::DemoSpec,
    endpoint_count: usize,
    endpoint_time: Duration,
    finding_count: usize,
    finding_time: Duration,
    /// The whole import, generation included.
    wall: Duration,
}

/// Creates an organization through the admin listener at `admin` (its
/// token in `data_dir`) and imports generated endpoints and then
/// `args.import_findings` findings into it, in batches of
/// `args.import_batch` lines, each validated and durable before the next
/// is sent.
fn import_generated(args: &Args, data_dir: &Path, admin: &str) -> anyhow::Result<Imported> {
    const FINDINGS_PER_ENDPOINT: usize = 100;
    let token = std::fs::read_to_string(data_dir.join("admin-token"))?;
    let client = Client::builder().timeout(Duration::from_secs(600)).build()?;
    let created: Value = client
        .post(format!("{admin}/admin/v1/organizations"))
        .bearer_auth(token.trim())
        .json(&serde_json::json!({"name": "Import benchmark"}))
        .send()?
        .json()?;
    let organization = created["organization_id"].as_str().ok_or_else(|| anyhow!("no organization: {created}"))?;
    let send = |collection: &str, lines: &[Value]| -> anyhow::Result<Duration> {
        let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
        let started = Instant::now();
        let response = client
            .post(format!("{admin}/admin/v1/organizations/{organization}/import/{collection}"))
            .bearer_auth(token.trim())
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()?;
        let elapsed = started.elapsed();
        let status = response.status();
        let summary: Value = response.json()?;
        if !status.is_success() || summary["created"].as_u64() != Some(lines.len() as u64) {
            bail!("import of {collection} refused: {status} {summary}");
        }
        Ok(elapsed)
    };
    let endpoints = args.import_findings.div_ceil(FINDINGS_PER_ENDPOINT).max(1);
    let spec = esr_demo::DemoSpec { endpoints, findings_per_endpoint: FINDINGS_PER_ENDPOINT };
    let mut generator = esr_demo::Generator::new(11, spec, esr_demo::DEMO_ANCHOR_UNIX, "bench");
    let (mut endpoint_time, mut finding_time) = (Duration::ZERO, Duration::ZERO);
    let (mut endpoint_count, mut finding_count, mut batches) = (0, 0, 0);
    let mut pending_findings: Vec<Value> = Vec::new();
    let wall = Instant::now();
    loop {
        let mut endpoint_lines = Vec::new();
        while pending_findings.len() < args.import_batch {
            let Some(mut generated) = generator.next_endpoint() else { break };
            endpoint_lines.push(generated.endpoint);
            for finding in &mut generated.findings {
                // Targets are not imported here; a finding may not name one that is not stored.
                finding["remediation_target_id"] = Value::Null;
            }
            pending_findings.extend(generated.findings);
        }
        if endpoint_lines.is_empty() && pending_findings.is_empty() {
            break;
        }
        if !endpoint_lines.is_empty() {
            endpoint_time += send("endpoints", &endpoint_lines)?;
            endpoint_count += endpoint_lines.len();
        }
        let take = pending_findings.len().min(args.import_batch);
        let batch: Vec<Value> = pending_findings.drain(..take).collect();
        if !batch.is_empty() {
            finding_time += send("vulnerability-findings", &batch)?;
            finding_count += batch.len();
            batches += 1;
        }
        if batches % 10 == 0 {
            eprint!("\rimported {finding_count} findings");
        }
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

/// The real Trivy report the report import case repeats.
const REPEATED_REPORT: &str = "trivy/defectdojo_issue-9333_debian-10.13.json";

/// A Trivy report of `vulnerabilities` vulnerabilities made from a real one
/// by repeating its vulnerabilities, each repetition on packages of their
/// own (`<package>-<n>`), so every entry is a finding of its own.
fn repeated_trivy_report(reports_dir: &Path, vulnerabilities: usize) -> anyhow::Result<Vec<u8>> {
    let path = reports_dir.join(REPEATED_REPORT);
    let mut report: Value = serde_json::from_slice(
        &std::fs::read(&path).with_context(|| format!("reading {} (--scanner-reports-dir)", path.display()))?,
    )?;
    let results = report["Results"].as_array_mut().ok_or_else(|| anyhow!("{}: no Results", path.display()))?;
    let result = results.first_mut().ok_or_else(|| anyhow!("{}: no result", path.display()))?;
    let real: Vec<Value> = result["Vulnerabilities"].as_array().cloned().unwrap_or_default();
    if real.is_empty() {
        bail!("{}: no vulnerabilities to repeat", path.display());
    }
    let repeated: Vec<Value> = (0..vulnerabilities)
        .map(|index| {
            let mut vulnerability = real[index % real.len()].clone();
            let package = format!("{}-{}", vulnerability["PkgName"].as_str().unwrap_or("package"), index / real.len());
            vulnerability["PkgID"] =
                Value::String(format!("{package}@{}", vulnerability["InstalledVersion"].as_str().unwrap_or("")));
            vulnerability["PkgName"] = Value::String(package);
            vulnerability
        })
        .collect();
    result["Vulnerabilities"] = Value::Array(repeated);
    results.truncate(1);
    Ok(serde_json::to_vec_pretty(&report)?)
}

/// A scanner report of `--report-vulnerabilities` vulnerabilities (a real
/// Trivy report repeated on distinct packages) imported end to end through
/// the admin listener of a server on a fresh data directory: detection,
/// the importer component, identities, targets, validation and the
/// durable write. Each run imports it into a new organization, then again
/// (nothing changes); the report gives the median of each.
fn bench_report_import(args: &Args) -> anyhow::Result<String> {
    const RUNS: usize = 5;
    if args.report_vulnerabilities == 0 {
        return Ok(String::new());
    }
    let body = repeated_trivy_report(&args.scanner_reports_dir, args.report_vulnerabilities)?;
    let data_dir = args.out.join("report-import-data");
    if data_dir.exists() {
        std::fs::remove_dir_all(&data_dir)?;
    }
    let (server, admin) = start_server_with_admin(&data_dir, &args.plugins_dir)?;
    let token = std::fs::read_to_string(data_dir.join("admin-token"))?;
    let client = Client::builder().timeout(Duration::from_secs(600)).build()?;
    let server_pid = server.child.id();
    // Wall time, and the server's CPU time: on this shared 2-core machine
    // the second says what the import costs when others load it too.
    let import = |organization: &str| -> anyhow::Result<(Duration, f64, Value)> {
        let cpu_before = cpu_seconds(|pid| pid == server_pid);
        let started = Instant::now();
        let response = client
            .post(format!(
                "{admin}/admin/v1/organizations/{organization}/reports?createEndpoint=true&endpoint=bench-host"
            ))
            .bearer_auth(token.trim())
            .header("content-type", "application/json")
            .body(body.clone())
            .send()?;
        let status = response.status();
        let outcome: Value = response.json()?;
        let elapsed = started.elapsed();
        let cpu = cpu_seconds(|pid| pid == server_pid) - cpu_before;
        if !status.is_success() {
            bail!("report import refused: {status} {outcome}");
        }
        Ok((elapsed, cpu, outcome))
    };
    let (mut first, mut again, mut first_cpu, mut again_cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..RUNS {
        let created: Value = client
            .post(format!("{admin}/admin/v1/organizations"))
            .bearer_auth(token.trim())
            .json(&serde_json::json!({"name": format!("Report benchmark {run}")}))
            .send()?
            .json()?;
        let organization =
            created["organization_id"].as_str().ok_or_else(|| anyhow!("no organization: {created}"))?.to_owned();
        let (elapsed, cpu, outcome) = import(&organization)?;
        if outcome["created"].as_u64() != Some(args.report_vulnerabilities as u64) {
            bail!("the first import did not create every finding: {outcome}");
        }
        first.push(elapsed);
        first_cpu.push(Duration::from_secs_f64(cpu.max(0.0)));
        let (elapsed, cpu, outcome) = import(&organization)?;
        if outcome["unchanged"].as_u64() != Some(args.report_vulnerabilities as u64) {
            bail!("the re-import changed something: {outcome}");
        }
        again.push(elapsed);
        again_cpu.push(Duration::from_secs_f64(cpu.max(0.0)));
        eprint!("\rreport import run {}/{RUNS}", run + 1);
    }
    eprintln!();
    drop(server);
    std::fs::remove_dir_all(&data_dir).with_context(|| format!("removing {}", data_dir.display()))?;
    let median = |samples: &[Duration]| percentile(samples, 0.5).as_secs_f64();
    Ok(format!(
        "\nscanner report import ({} vulnerabilities, {:.1} MiB: {REPEATED_REPORT} repeated on distinct packages; \
         through the admin listener, median of {RUNS} runs):\n\
         {:<44} {:>9.2} s  (min {:.2}, max {:.2}; server CPU {:.2} s)  target < 2 s\n\
         {:<44} {:>9.2} s  (min {:.2}, max {:.2}; server CPU {:.2} s)\n",
        args.report_vulnerabilities,
        body.len() as f64 / f64::from(1 << 20),
        "first import (all created)",
        median(&first),
        first.iter().min().copied().unwrap_or_default().as_secs_f64(),
        first.iter().max().copied().unwrap_or_default().as_secs_f64(),
        median(&first_cpu),
        "re-import (all unchanged)",
        median(&again),
        again.iter().min().copied().unwrap_or_default().as_secs_f64(),
        again.iter().max().copied().unwrap_or_default().as_secs_f64(),
        median(&again_cpu),
    ))
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
fn write_ceiling_batches(
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

/// The resident memory of a process, in MiB, from `/proc`.
fn resident_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// The median of each figure over several runs.
fn median_load(loads: &[Load]) -> Load {
    let median = |figure: fn(&Load) -> f64| {
        let mut values: Vec<f64> = loads.iter().map(figure).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or_default()
    };
    Load {
        requests_per_second: median(|l| l.requests_per_second),
        p50_ms: median(|l| l.p50_ms),
        p99_ms: median(|l| l.p99_ms),
        peak_rss_mib: loads.iter().map(|l| l.peak_rss_mib).fold(0.0, f64::max),
        failed_requests: median(|l| l.failed_requests as f64) as u64,
    }
}

/// The server's peak resident memory while a load runs, sampled every
/// 200 ms on a thread of its own.
struct PeakMemory {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<f64>,
}

impl PeakMemory {
    fn sample(pid: u32) -> PeakMemory {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = resident_mib(pid);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                peak = peak.max(resident_mib(pid));
            }
            peak
        });
        PeakMemory { stop, thread }
    }

    /// The peak in MiB.
    fn finish(self) -> anyhow::Result<f64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow!("the memory sampler panicked"))
    }
}

/// What wrk measured for one operation.
#[derive(Clone)]
struct Load {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Peak resident memory of the server while it ran.
    peak_rss_mib: f64,
    /// Requests answered other than 2xx or 3xx, or not at all (wrk's
    /// socket errors, timeouts after 2 s included).
    failed_requests: u64,
}

/// A wrk latency such as `812.00us`, `4.10ms` or `1.02s`, in milliseconds.
fn wrk_ms(text: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// Drives `url` with wrk (2 threads, 32 connections) for `seconds`,
/// sampling the server's memory meanwhile.
fn wrk(url: &str, key: &str, seconds: u64, server_pid: u32) -> anyhow::Result<Load> {
    let mut loads = wrk_at_once(&[(url.to_owned(), server_pid)], key, seconds, 2, 32, Failures::Refused)?;
    loads.pop().ok_or_else(|| anyhow!("wrk measured nothing"))
}

/// What a wrk run does with failed requests.
#[derive(Clone, Copy, PartialEq)]
enum Failures {
    /// Any failed request fails the run.
    Refused,
    /// Failed requests are counted ([`Load::failed_requests`]).
    Counted,
}

/// One wrk process per `(url, server pid)`, all started together, each
/// with `threads` threads and `connections` connections for `seconds`,
/// each sampling its server's memory; what each measured, in order.
fn wrk_at_once(
    targets: &[(String, u32)],
    key: &str,
    seconds: u64,
    threads: usize,
    connections: usize,
    failures: Failures,
) -> anyhow::Result<Vec<Load>> {
    let runs = targets
        .iter()
        .map(|(url, server_pid)| {
            let run = Command::new("wrk")
                .args([format!("-t{threads}"), format!("-c{connections}"), format!("-d{seconds}s")])
                .args(["--latency", "-H", &format!("Authorization: Bearer {key}"), url])
                .stdout(Stdio::piped())
                .spawn()
                .context("running wrk (Debian: apt-get install wrk)")?;
            Ok((run, PeakMemory::sample(*server_pid)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    runs.into_iter()
        .zip(targets)
        .map(|((run, sampler), (url, _))| {
            let output = run.wait_with_output()?;
            let peak = sampler.finish()?;
            wrk_load(url, &String::from_utf8_lossy(&output.stdout), peak, failures)
        })
        .collect()
}

/// What wrk's `--latency` report on `url` says, with the server's peak memory.
fn wrk_load(url: &str, text: &str, peak_rss_mib: f64, failures: Failures) -> anyhow::Result<Load> {
    if failures == Failures::Refused && (text.contains("Non-2xx") || text.contains("Socket errors")) {
        bail!("wrk saw failed requests on {url}:\n{text}");
    }
    let field = |prefix: &str| text.lines().find_map(|line| line.trim().strip_prefix(prefix).map(str::trim));
    // `Non-2xx or 3xx responses: N` and `Socket errors: connect N, read N, write N, timeout N`.
    let count = |text: &str| text.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or_default();
    let failed_requests = field("Non-2xx or 3xx responses:").map_or(0, count)
        + field("Socket errors:").map_or(0, |errors| errors.split(',').map(count).sum());
    let requests_per_second = field("Requests/sec:").and_then(|n| n.parse().ok());
    let (p50_ms, p99_ms) = (field("50%").and_then(wrk_ms), field("99%").and_then(wrk_ms));
    match (requests_per_second, p50_ms, p99_ms) {
        (Some(requests_per_second), Some(p50_ms), Some(p99_ms)) => {
            Ok(Load { requests_per_second, p50_ms, p99_ms, peak_rss_mib, failed_requests })
        }
        _ => bail!("cannot read wrk's report:\n{text}"),
    }
}

/// Drives `url` at a fixed `rate` (requests per second) for `seconds`
/// over 32 keep-alive connections on one thread (as light as wrk, which
/// cannot hold a rate). A request is timed from when it was due, not from
/// when it could be sent, so a stall shows in the latencies instead of
/// lowering the rate; only the timer's own granularity (it wakes up to
/// 1 ms late) is not counted.
fn paced(url: &str, key: &str, rate: f64, seconds: u64, server_pid: u32) -> anyhow::Result<Load> {
    const CONNECTIONS: u64 = 32;
    const TIMER_SLACK: Duration = Duration::from_millis(1);
    let rest = url.strip_prefix("http://").ok_or_else(|| anyhow!("not an http URL: {url}"))?;
    let (address, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let request = get_request(address, path, key);
    let total = (rate * seconds as f64) as u64;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let sampler = PeakMemory::sample(server_pid);
    let started = Instant::now();
    let latencies = runtime.block_on(async {
        let begin = tokio::time::Instant::now() + Duration::from_millis(100);
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..CONNECTIONS {
            let (address, request) = (address.to_owned(), request.clone());
            tasks.spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut connection = tokio::net::TcpStream::connect(&address).await?;
                connection.set_nodelay(true)?;
                let mut latencies = Vec::new();
                let mut buffer = vec![0u8; 1 << 16];
                for number in (worker..total).step_by(CONNECTIONS as usize) {
                    let due = begin + Duration::from_secs_f64(number as f64 / rate);
                    tokio::time::sleep_until(due).await;
                    let timed_from = tokio::time::Instant::now().min(due + TIMER_SLACK);
                    connection.write_all(request.as_bytes()).await?;
                    read_response(&mut connection, &mut buffer).await?;
                    latencies.push(timed_from.elapsed());
                }
                anyhow::Ok(latencies)
            });
        }
        let mut latencies = Vec::new();
        while let Some(done) = tasks.join_next().await {
            latencies.extend(done??);
        }
        anyhow::Ok(latencies)
    })?;
    let elapsed = started.elapsed().as_secs_f64() - 0.1;
    let peak = sampler.finish()?;
    Ok(Load {
        requests_per_second: latencies.len() as f64 / elapsed,
        p50_ms: ms(percentile(&latencies, 0.5)),
        p99_ms: ms(percentile(&latencies, 0.99)),
        peak_rss_mib: peak,
        failed_requests: 0,
    })
}

/// How long the peak measurement before a paced run lasts.
const PEAK_SECONDS: u64 = 5;

/// wrk's peak on `url`, then [`paced`] at 80 % of it.
fn peak_then_paced(url: &str, key: &str, seconds: u64, server_pid: u32) -> anyhow::Result<(Load, Load)> {
    let peak = wrk(url, key, PEAK_SECONDS, server_pid)?;
    let load = paced(url, key, peak.requests_per_second * 0.8, seconds, server_pid)?;
    Ok((peak, load))
}

/// The run with the median paced p99, with its peak.
fn median_pair(runs: &[(Load, Load)]) -> (Load, Load) {
    let mut order: Vec<&(Load, Load)> = runs.iter().collect();
    order.sort_by(|a, b| a.1.p99_ms.total_cmp(&b.1.p99_ms));
    let (peak, load) = order[order.len() / 2];
    (peak.clone(), load.clone())
}

/// About what the host spends per get-by-id in the native mode.
const REFERENCE_SERVICE_TIME: Duration = Duration::from_micros(50);

/// An HTTP/1.1 responder on a runtime of its own (two threads, like the
/// server's) that answers every request with the same small body after
/// spending `service_time` of CPU: the floor the paced measurement can
/// show on this machine with this loader.
struct ReferenceResponder {
    url: String,
    _runtime: tokio::runtime::Runtime,
}

impl ReferenceResponder {
    fn start(service_time: Duration) -> anyhow::Result<ReferenceResponder> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let url = format!("http://{}/reference", listener.local_addr()?);
        let body = "{}".repeat(700);
        let response: std::sync::Arc<[u8]> = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
        .into();
        runtime.spawn(async move {
            while let Ok((mut connection, _)) = listener.accept().await {
                let response = response.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 1 << 14];
                    let mut filled = 0;
                    while let Ok(read) = connection.read(&mut buffer[filled..]).await {
                        if read == 0 {
                            return;
                        }
                        filled += read;
                        while let Some(end) = buffer[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                            let started = Instant::now();
                            while started.elapsed() < service_time {
                                std::hint::spin_loop();
                            }
                            if connection.write_all(&response).await.is_err() {
                                return;
                            }
                            buffer.copy_within(end + 4..filled, 0);
                            filled -= end + 4;
                        }
                        if filled == buffer.len() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(ReferenceResponder { url, _runtime: runtime })
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length`; anything but a
/// `200` is an error.
async fn read_response(connection: &mut tokio::net::TcpStream, buffer: &mut [u8]) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut filled = 0;
    let (header_end, length) = loop {
        let read = connection.read(&mut buffer[filled..]).await?;
        if read == 0 {
            bail!("the server closed the connection");
        }
        filled += read;
        if let Some(head) = response_head(&buffer[..filled])? {
            break head;
        }
        if filled == buffer.len() {
            bail!("response headers larger than {} bytes", buffer.len());
        }
    };
    let mut remaining = (header_end + length).saturating_sub(filled);
    let capacity = buffer.len();
    while remaining > 0 {
        let read = connection.read(&mut buffer[..remaining.min(capacity)]).await?;
        if read == 0 {
            bail!("the server closed the connection mid-body");
        }
        remaining -= read;
    }
    Ok(())
}

/// An HTTP/1.1 `GET` of `path` with the API key, as bytes to send.
fn get_request(host: &str, path: &str, key: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n")
}

/// Where a response's head ends and how long its body is, once `received`
/// holds the whole head; a status other than `200` is an error.
fn response_head(received: &[u8]) -> anyhow::Result<Option<(usize, usize)>> {
    let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") else { return Ok(None) };
    let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        bail!("the server answered {}", head.lines().next().unwrap_or_default());
    }
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .ok_or_else(|| anyhow!("a response without Content-Length"))?;
    Ok(Some((end + 4, length)))
}

/// One keep-alive HTTP/1.1 connection, used from the calling thread. The
/// latency cases use it rather than reqwest's blocking client, which
/// hands each request and each piece of a body to a runtime thread of its
/// own: on this machine those hand-offs added about 1 ms to a get-by-id
/// the server answers in 0.2 ms (curl).
struct ApiClient {
    stream: std::net::TcpStream,
    host: String,
    key: String,
    buffer: Vec<u8>,
}

impl ApiClient {
    fn connect(base: &str, key: &str) -> anyhow::Result<ApiClient> {
        let host = base.strip_prefix("http://").ok_or_else(|| anyhow!("not an http URL: {base}"))?.to_owned();
        let stream = std::net::TcpStream::connect(&host)?;
        stream.set_nodelay(true)?;
        // A server that stops answering fails the run instead of hanging it.
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(ApiClient { stream, host, key: key.to_owned(), buffer: Vec::new() })
    }

    /// `GET` with the key: how long it took (body read and parsed) and the
    /// JSON body; anything but a `200` is an error.
    fn get(&mut self, path: &str) -> anyhow::Result<(Duration, Value)> {
        use std::io::{Read, Write};
        let started = Instant::now();
        let request = get_request(&self.host, path, &self.key);
        self.stream.write_all(request.as_bytes())?;
        self.buffer.clear();
        let mut chunk = [0u8; 1 << 16];
        let (header_end, length) = loop {
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                bail!("GET {path}: the server closed the connection");
            }
            self.buffer.extend_from_slice(&chunk[..read]);
            if let Some(head) = response_head(&self.buffer).with_context(|| format!("GET {path}"))? {
                break head;
            }
        };
        while self.buffer.len() < header_end + length {
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                bail!("GET {path}: the server closed the connection mid-body");
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
        let body: Value = serde_json::from_slice(&self.buffer[header_end..header_end + length])?;
        Ok((started.elapsed(), body))
    }
}

/// Each operation under load (wrk, 32 connections) with the components
/// and with the native baseline, in one run: req/s, p50, p99, the Wasm ÷
/// native ratio, memory at rest and under load, and start times.
fn bench_throughput(args: &Args, data_dir: &Path, key: &str, operations: &[(&str, String)]) -> anyhow::Result<String> {
    let mut report = format!(
        "\nthroughput: wrk -t2 -c32 -d{}s --latency per operation and mode, same data, same run; \
         modes alternate, medians of 3 rounds\n",
        args.load_seconds
    );
    // Start times: with an empty compiled-component cache, then with it.
    let cache = data_dir.join("component-cache");
    if cache.exists() {
        std::fs::remove_dir_all(&cache)?;
    }
    let mut starts = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        let (server, _) = start_server_in_mode(data_dir, &args.plugins_dir, &[])?;
        starts.push(started.elapsed());
        drop(server);
    }
    report.push_str(&format!(
        "start to listening: cold (compiling components) {:.0} ms, warm (cached) {:.0} ms\n\n",
        ms(starts[0]),
        ms(starts[1])
    ));
    report.push_str(&format!(
        "{:<40} {:>10} {:>9} {:>9} {:>10} {:>10} {:>9}\n",
        "operation", "mode", "req/s", "p50 ms", "p99 ms", "peak MiB", "÷ native"
    ));
    // Modes alternate round by round, so that this machine's drifts hit
    // both alike; each figure is the median of the rounds.
    const ROUNDS: usize = 3;
    let modes: [&[&str]; 2] = [&[], &["--native-handlers"]];
    let mut runs: Vec<Vec<Vec<Load>>> =
        (0..modes.len()).map(|_| operations.iter().map(|_| Vec::new()).collect()).collect();
    let mut at_rest = Vec::new();
    for round in 0..ROUNDS {
        for (mode, flags) in modes.iter().enumerate() {
            let (server, _) = start_server_in_mode(data_dir, &args.plugins_dir, flags)?;
            std::thread::sleep(Duration::from_secs(1));
            if round == 0 {
                at_rest.push(resident_mib(server.child.id()));
            }
            for (operation, (_, path)) in operations.iter().enumerate() {
                let load = wrk(&format!("{}{path}", server.base), key, args.load_seconds, server.child.id())?;
                runs[mode][operation].push(load);
            }
        }
    }
    let results: Vec<Vec<Load>> =
        runs.iter().map(|mode| mode.iter().map(|loads| median_load(loads)).collect()).collect();
    // get-by-id (the first operation) paced at 80 % of the peak wrk
    // measured just before on the same server (this machine's speed
    // drifts by minutes), modes alternating; medians of the rounds.
    let mut paced_runs: Vec<Vec<(Load, Load)>> = modes.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (mode, flags) in modes.iter().enumerate() {
            let (server, _) = start_server_in_mode(data_dir, &args.plugins_dir, flags)?;
            let url = format!("{}{}", server.base, operations[0].1);
            paced_runs[mode].push(peak_then_paced(&url, key, args.load_seconds, server.child.id())?);
        }
    }
    // The same measurement of a responder that does nothing but spend a
    // fixed CPU time per request: what this machine and this loader allow.
    let reference = ReferenceResponder::start(REFERENCE_SERVICE_TIME)?;
    let reference_runs: Vec<(Load, Load)> = (0..ROUNDS)
        .map(|_| peak_then_paced(&reference.url, key, args.load_seconds, std::process::id()))
        .collect::<anyhow::Result<_>>()?;
    let paced_loads: Vec<(Load, Load)> = paced_runs.iter().map(|runs| median_pair(runs)).collect();
    let reference_load = median_pair(&reference_runs);
    for (index, (name, _)) in operations.iter().enumerate() {
        let (wasm, native) = (&results[0][index], &results[1][index]);
        for (mode, load) in [("wasm", wasm), ("native", native)] {
            let ratio = if mode == "wasm" {
                format!("{:.2}", wasm.requests_per_second / native.requests_per_second.max(f64::EPSILON))
            } else {
                String::new()
            };
            report.push_str(&format!(
                "{:<40} {:>10} {:>9.0} {:>9.2} {:>10.2} {:>10.0} {:>9}\n",
                name, mode, load.requests_per_second, load.p50_ms, load.p99_ms, load.peak_rss_mib, ratio
            ));
        }
    }
    report.push_str(&format!(
        "\n{} paced at 80 % of the peak measured just before (wrk, {PEAK_SECONDS} s, same server), {} s, \
         32 connections, latency from when each request was due:\n",
        operations[0].0, args.load_seconds
    ));
    report.push_str(&format!(
        "{:<40} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10}\n",
        "", "mode", "peak/s", "paced/s", "p50 ms", "p99 ms", "peak MiB"
    ));
    let reference_name = format!("reference: {} µs of CPU per request", REFERENCE_SERVICE_TIME.as_micros());
    for (name, (peak, load)) in
        ["wasm", "native", "reference"].iter().zip(paced_loads.iter().chain(std::iter::once(&reference_load)))
    {
        // The reference runs inside this process: its memory is not the server's.
        let (label, memory) = if *name == "reference" {
            (reference_name.as_str(), String::new())
        } else {
            ("", format!("{:.0}", load.peak_rss_mib))
        };
        report.push_str(&format!(
            "{:<40} {:>10} {:>9.0} {:>9.0} {:>9.2} {:>10.2} {:>10}\n",
            label, name, peak.requests_per_second, load.requests_per_second, load.p50_ms, load.p99_ms, memory
        ));
    }
    let overhead = results[0][0].p50_ms - results[1][0].p50_ms;
    report.push_str(&format!(
        "\nresident memory at rest: wasm {:.0} MiB, native {:.0} MiB\n\
         per-request component cost (get-by-id p50 under load, wasm − native): {:.3} ms\n",
        at_rest[0], at_rest[1], overhead
    ));
    Ok(report)
}

/// How list latency grows with the data: the same list cases on 10,000 and
/// 100,000 findings (100 per endpoint), beside the full data set's p50s.
fn bench_growth(args: &Args, full: &[(&str, f64)]) -> anyhow::Result<String> {
    const ROUNDS: usize = 50;
    let mut columns: Vec<(usize, Vec<f64>)> = Vec::new();
    for endpoints in [100, 1000] {
        let data_dir = args.out.join(format!("data-{endpoints}x100"));
        let key = ensure_data_of(endpoints, 100, &data_dir)?;
        warm_page_cache(&data_dir)?;
        let server = start_server(&data_dir, &args.plugins_dir)?;
        let mut client = ApiClient::connect(&server.base, &key)?;
        let (_, first) = client.get("/v1/vulnerability-findings?limit=1")?;
        let endpoint = first["data"][0]["endpoint_id"].as_str().unwrap_or_default().to_owned();
        let paths = [
            format!("/v1/vulnerability-findings?endpointId={endpoint}"),
            "/v1/vulnerability-findings?severity=critical".to_owned(),
            "/v1/vulnerability-findings?severity=critical&sort=-cvss".to_owned(),
            "/v1/vulnerability-findings?status=open&severity=critical".to_owned(),
        ];
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
        for round in 0..ROUNDS + 5 {
            for (path, samples) in paths.iter().zip(samples.iter_mut()) {
                let (elapsed, _) = client.get(path)?;
                if round >= 5 {
                    samples.push(elapsed);
                }
            }
        }
        columns.push((endpoints * 100, samples.iter().map(|s| ms(percentile(s, 0.5))).collect()));
    }
    let mut report = format!(
        "\nlist latency by size (p50 ms; {ROUNDS} rounds each; 100 findings per endpoint)\n{:<44} {:>9} {:>9} {:>9}\n",
        "case", "10,000", "100,000", "1,000,000"
    );
    for (index, (name, at_full)) in full.iter().enumerate() {
        report.push_str(&format!(
            "{:<44} {:>9.3} {:>9.3} {:>9.3}\n",
            name, columns[0].1[index], columns[1].1[index], at_full
        ));
    }
    Ok(report)
}

/// Lists that once read every record of a large collection: range filters
/// with their totals on the findings of the main data set, text sorts on
/// `wide_endpoints` endpoints and `wide_scopes` scopes, and the agent
/// configuration (its active scopes) on the latter. Each must answer `200`.
fn bench_wide_lists(args: &Args, data_dir: &Path, key: &str) -> anyhow::Result<String> {
    const TARGET: &str = "p50 < 50 ms";
    let server = start_server(data_dir, &args.plugins_dir)?;
    let mut client = ApiClient::connect(&server.base, key)?;
    // A recent instant: the first-seen time of the 1,000th most recently seen finding.
    let (_, recent) = client.get("/v1/vulnerability-findings?sort=-first_seen_at&offset=1000&limit=1")?;
    let recent = recent["data"][0]["first_seen_at"].as_str().unwrap_or("2026-01-01T00:00:00Z").to_owned();
    let finding_paths = [
        "/v1/vulnerability-findings?minCvss=9.5".to_owned(),
        format!("/v1/vulnerability-findings?firstSeenAfter={recent}"),
    ];
    let mut cases: Vec<(String, Vec<Duration>, u64)> = Vec::new();
    measure_paths(&mut client, &finding_paths, args.rounds, &mut cases)?;
    drop(server);

    let wide_dir = args.out.join(format!("data-{}x0-{}-scopes", args.wide_endpoints, args.wide_scopes));
    let wide_key = ensure_data_with_scopes(args.wide_endpoints, 0, args.wide_scopes, &wide_dir)?;
    warm_page_cache(&wide_dir)?;
    let server = start_server(&wide_dir, &args.plugins_dir)?;
    let mut client = ApiClient::connect(&server.base, &wide_key)?;
    let wide_paths = [
        "/v1/endpoints?sort=hostname".to_owned(),
        "/v1/endpoints?sort=-hostname".to_owned(),
        "/v1/scopes?sort=name".to_owned(),
        "/v1/agent/config?platform=linux".to_owned(),
    ];
    measure_paths(&mut client, &wide_paths, args.rounds, &mut cases)?;
    drop(server);

    let mut report = format!(
        "
wide lists ({} findings; {} endpoints and {} more scopes; {} rounds, cases interleaved)
         {:<56} {:>9} {:>9} {:>9}  target
",
        args.endpoints * args.findings_per_endpoint,
        args.wide_endpoints,
        args.wide_scopes,
        args.rounds,
        "case",
        "total",
        "p50 ms",
        "p90 ms"
    );
    for (path, samples, total) in &cases {
        report.push_str(&latency_row(path, total, samples, TARGET));
    }
    Ok(report)
}

/// Summaries of the findings (counts grouped by one or two fields, one
/// filter), each with a different endpoint every round, interleaved.
fn bench_summaries(args: &Args, data_dir: &Path, key: &str) -> anyhow::Result<String> {
    const TARGET: &str = "p50 < 5 ms";
    let server = start_server(data_dir, &args.plugins_dir)?;
    let mut client = ApiClient::connect(&server.base, key)?;
    let (_, endpoints) = client.get("/v1/endpoints?limit=100")?;
    let endpoint_ids: Vec<String> = endpoints["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    if endpoint_ids.is_empty() {
        bail!("the data set has no endpoints");
    }
    let names = [
        "findings/summary?groupBy=severity,status&endpointId=…",
        "findings/summary?groupBy=severity&endpointId=…",
        "findings/summary?groupBy=severity&status=open",
        "findings/summary?groupBy=severity,status",
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut groups = vec![0usize; names.len()];
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for round in 0..args.rounds + 5 {
        let endpoint = &endpoint_ids[rng.gen_range(0..endpoint_ids.len())];
        let paths = [
            format!("/v1/vulnerability-findings/summary?groupBy=severity,status&endpointId={endpoint}"),
            format!("/v1/vulnerability-findings/summary?groupBy=severity&endpointId={endpoint}"),
            "/v1/vulnerability-findings/summary?groupBy=severity&status=open".to_owned(),
            "/v1/vulnerability-findings/summary?groupBy=severity,status".to_owned(),
        ];
        for (case, path) in paths.iter().enumerate() {
            let (elapsed, body) = client.get(path)?;
            let Some(answered) = body["groups"].as_array() else { bail!("{path} answered {body}") };
            groups[case] = answered.len();
            if round >= 5 {
                samples[case].push(elapsed);
            }
        }
    }
    drop(server);
    let mut report = format!(
        "\nsummaries ({} findings; {} rounds, cases interleaved, a random endpoint each round)\n{:<56} {:>9} {:>9} {:>9}  target\n",
        args.endpoints * args.findings_per_endpoint,
        args.rounds,
        "case",
        "groups",
        "p50 ms",
        "p90 ms"
    );
    for ((name, samples), groups) in names.iter().zip(&samples).zip(&groups) {
        report.push_str(&latency_row(name, groups, samples, TARGET));
    }
    Ok(report)
}

/// Measures each path `rounds` times (after 5 unmeasured), interleaved;
/// appends each with its samples and its `total` (or the agent
/// configuration's active scopes).
fn measure_paths(
    client: &mut ApiClient,
    paths: &[String],
    rounds: usize,
    cases: &mut Vec<(String, Vec<Duration>, u64)>,
) -> anyhow::Result<()> {
    let first = cases.len();
    cases.extend(paths.iter().map(|path| (path.clone(), Vec::new(), 0)));
    for round in 0..rounds + 5 {
        for (offset, path) in paths.iter().enumerate() {
            let (elapsed, body) = client.get(path)?;
            let case = &mut cases[first + offset];
            let size = body["active_scope_ids"].as_array().map(|ids| ids.len() as u64);
            case.2 = body["total"].as_u64().or(size).unwrap_or_default();
            if round >= 5 {
                case.1.push(elapsed);
            }
        }
    }
    Ok(())
}

/// One measured case: its name, its target, and its samples.
struct Case {
    name: &'static str,
    target: &'static str,
    samples: Vec<Duration>,
}

/// One case of a latency table: its name, a count, p50 and p90 in ms, the target.
fn latency_row(case: &str, count: &dyn std::fmt::Display, samples: &[Duration], target: &str) -> String {
    format!(
        "{:<56} {:>9} {:>9.3} {:>9.3}  {target}\n",
        case,
        count.to_string(),
        ms(percentile(samples, 0.5)),
        ms(percentile(samples, 0.9)),
    )
}

fn percentile(samples: &[Duration], fraction: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Prints a part's report and keeps it in `out/file`.
fn print_and_keep(out: &Path, file: &str, report: &str) -> anyhow::Result<()> {
    print!("{report}");
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join(file), report)?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.report_import_only {
        let report = bench_report_import(&args)?;
        return print_and_keep(&args.out, "report-import-report.txt", &report);
    }
    if args.postgres_import_only {
        let cluster = Cluster::persistent(&args.out.join("postgres-import"), Durability::Durable)?;
        let report = bench_import_postgres(&args, &cluster)?;
        return print_and_keep(&args.out, "postgres-import-report.txt", &report);
    }
    if args.import_only {
        let report = bench_import(&args)?;
        return print_and_keep(&args.out, "import-report.txt", &report);
    }
    if args.hosts_only {
        let report = bench_hosts(&args)?;
        return print_and_keep(&args.out, "hosts-report.txt", &report);
    }
    let data_dir = args.out.join(format!("data-{}x{}", args.endpoints, args.findings_per_endpoint));
    let key = ensure_data(&args, &data_dir)?;
    warm_page_cache(&data_dir)?;
    if args.backends_only {
        let report = bench_backends(&args, &data_dir, &key)?;
        return print_and_keep(&args.out, "backends-report.txt", &report);
    }
    if args.summaries_only {
        let report = bench_summaries(&args, &data_dir, &key)?;
        return print_and_keep(&args.out, "summaries-report.txt", &report);
    }
    if args.wide_lists_only {
        let report = bench_wide_lists(&args, &data_dir, &key)?;
        return print_and_keep(&args.out, "wide-lists-report.txt", &report);
    }
    let server = start_server(&data_dir, &args.plugins_dir)?;
    let mut client = ApiClient::connect(&server.base, &key)?;
    let mut get = |path: &str| client.get(path);

    // What to ask for: ids from the data set itself.
    let (_, findings) = get("/v1/vulnerability-findings?limit=100")?;
    let total_findings = findings["total"].as_u64().unwrap_or_default();
    let (_, endpoints) = get("/v1/endpoints?limit=100")?;
    let endpoint_ids: Vec<String> = endpoints["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    let mut finding_ids: Vec<String> = Vec::new();
    for endpoint in endpoint_ids.iter().take(20) {
        let (_, page) = get(&format!("/v1/vulnerability-findings?endpointId={endpoint}&limit=100"))?;
        finding_ids
            .extend(page["data"].as_array().into_iter().flatten().filter_map(|f| f["id"].as_str().map(str::to_owned)));
    }
    if endpoint_ids.is_empty() || finding_ids.is_empty() {
        bail!("the data set has no endpoints or findings");
    }

    // The cursor of page 1,000 (limit 50), by walking to it.
    let walk_started = Instant::now();
    let mut cursor: Option<String> = None;
    for _ in 1..1000 {
        let path = match &cursor {
            Some(c) => format!("/v1/vulnerability-findings?limit=50&cursor={c}"),
            None => "/v1/vulnerability-findings?limit=50".to_owned(),
        };
        let (_, page) = get(&path)?;
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            bail!("fewer than 1,000 pages of findings");
        }
    }
    let walk_time = walk_started.elapsed();
    let page_1000 = format!("/v1/vulnerability-findings?limit=50&cursor={}", cursor.unwrap_or_default());

    let mut cases = vec![
        Case { name: "health (HTTP floor, no component)", target: "", samples: Vec::new() },
        Case { name: "finding by id", target: "p50 < 1 ms", samples: Vec::new() },
        Case { name: "findings?endpointId=… first page", target: "p50 < 5 ms", samples: Vec::new() },
        Case { name: "findings?severity=critical (exact total)", target: "p50 < 50 ms", samples: Vec::new() },
        Case { name: "findings page 1 (limit 50)", target: "", samples: Vec::new() },
        Case { name: "findings page 1,000 by cursor", target: "≤ 1.5× page 1", samples: Vec::new() },
        Case { name: "findings?severity=critical&sort=-cvss", target: "", samples: Vec::new() },
        Case { name: "findings?status=open&severity=critical", target: "", samples: Vec::new() },
        Case { name: "findings?sort=-severity page 1", target: "", samples: Vec::new() },
        Case { name: "findings?updatedAfter=<median> (wide)", target: "", samples: Vec::new() },
    ];
    // A wide incremental sync: everything updated after the median record's time.
    let (_, newest) = get("/v1/vulnerability-findings?sort=-updated_at&limit=1")?;
    let (_, oldest) = get("/v1/vulnerability-findings?sort=updated_at&limit=1")?;
    let instant = |page: &Value| {
        page["data"][0]["updated_at"].as_str().and_then(esr_contract::time::Timestamp::parse).map_or(0, |t| t.0)
    };
    let middle = esr_contract::time::Timestamp(instant(&oldest) / 2 + instant(&newest) / 2).format();
    let wide_sync = format!("/v1/vulnerability-findings?updatedAfter={middle}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut critical_total = 0;
    for round in 0..args.rounds + 10 {
        let finding = &finding_ids[rng.gen_range(0..finding_ids.len())];
        let endpoint = &endpoint_ids[rng.gen_range(0..endpoint_ids.len())];
        let health = get("/v1/health")?.0;
        let timings = [
            health,
            get(&format!("/v1/vulnerability-findings/{finding}"))?.0,
            get(&format!("/v1/vulnerability-findings?endpointId={endpoint}"))?.0,
            {
                let (elapsed, body) = get("/v1/vulnerability-findings?severity=critical")?;
                critical_total = body["total"].as_u64().unwrap_or_default();
                elapsed
            },
            get("/v1/vulnerability-findings?limit=50")?.0,
            get(&page_1000)?.0,
            get("/v1/vulnerability-findings?severity=critical&sort=-cvss")?.0,
            get("/v1/vulnerability-findings?status=open&severity=critical")?.0,
            get("/v1/vulnerability-findings?sort=-severity")?.0,
            get(&wide_sync)?.0,
        ];
        // The first rounds warm caches and are not counted.
        if round >= 10 {
            for (case, timing) in cases.iter_mut().zip(timings) {
                case.samples.push(timing);
            }
        }
    }
    drop(server);

    let mut report = format!(
        "esr read API benchmark: {} endpoints, {} findings ({} critical); {} rounds, cases interleaved\n\
         command: make bench (target/debug/esr-bench --endpoints {} --findings-per-endpoint {} --rounds {})\n\
         walking to page 1,000 took {:.1} s ({:.1} ms per page)\n\n\
         {:<44} {:>9} {:>9}  target\n",
        args.endpoints,
        total_findings,
        critical_total,
        args.rounds,
        args.endpoints,
        args.findings_per_endpoint,
        args.rounds,
        walk_time.as_secs_f64(),
        ms(walk_time) / 999.0,
        "case",
        "p50 ms",
        "p90 ms"
    );
    for case in &cases {
        report.push_str(&format!(
            "{:<44} {:>9.3} {:>9.3}  {}\n",
            case.name,
            ms(percentile(&case.samples, 0.5)),
            ms(percentile(&case.samples, 0.9)),
            case.target
        ));
    }
    let ratio = ms(percentile(&cases[5].samples, 0.5)) / ms(percentile(&cases[4].samples, 0.5)).max(f64::EPSILON);
    report.push_str(&format!("\npage 1,000 / page 1 (p50 ratio, same rounds): {ratio:.2}\n"));
    let full: Vec<(&str, f64)> = [2usize, 3, 6, 7]
        .iter()
        .map(|&index| (cases[index].name, ms(percentile(&cases[index].samples, 0.5))))
        .collect();
    report.push_str(&bench_growth(&args, &full)?);
    report.push_str(&bench_wide_lists(&args, &data_dir, &key)?);
    report.push_str(&bench_summaries(&args, &data_dir, &key)?);
    if args.load_seconds > 0 {
        let finding = &finding_ids[0];
        let endpoint = &endpoint_ids[0];
        let operations = [
            ("finding by id", format!("/v1/vulnerability-findings/{finding}")),
            ("findings?endpointId=… first page", format!("/v1/vulnerability-findings?endpointId={endpoint}")),
            ("findings?severity=critical (with total)", "/v1/vulnerability-findings?severity=critical".to_owned()),
            ("findings page 1,000 by cursor", page_1000.clone()),
        ];
        report.push_str(&bench_throughput(&args, &data_dir, &key, &operations)?);
    }
    if args.import_findings > 0 {
        report.push_str(&bench_import(&args)?);
    }
    report.push_str(&bench_report_import(&args)?);
    report.push_str(&bench_backends(&args, &data_dir, &key)?);
    report.push_str(&bench_hosts(&args)?);
    print!("{report}");
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("report.txt"), &report)?;
    Ok(())
}

/// The latency cases of the main loop, with their targets, as the backend
/// comparison measures them (see [`latency_paths`]).
const BACKEND_CASES: [(&str, &str); 12] = [
    ("health (HTTP floor, no component)", ""),
    ("finding by id", "≤ 2× sled"),
    ("findings?endpointId=… first page", "≤ 2× sled"),
    ("findings?severity=critical (exact total)", "≤ 2× sled"),
    ("findings page 1 (limit 50)", "≤ 2× sled"),
    ("findings page 1,000 by cursor", "≤ 2× sled"),
    ("findings?severity=critical&sort=-cvss", "≤ 2× sled"),
    ("findings?status=open&severity=critical", "≤ 2× sled"),
    ("findings?sort=-severity page 1", "≤ 2× sled"),
    ("findings?updatedAfter=<median> (wide)", "≤ 2× sled"),
    ("summary groupBy=severity,status&endpointId=…", "p50 < 5 ms"),
    ("summary groupBy=severity&status=open", "p50 < 5 ms"),
];

/// One backend's server for the comparison, and what its cases ask for.
struct Backend {
    name: &'static str,
    data_dir: PathBuf,
    /// `esr serve` flags choosing the backend.
    flags: Vec<String>,
    key: String,
    /// The cursor of page 1,000 (limit 50): cursors are sealed per installation.
    page_1000: String,
    /// `updatedAfter` at the median record's update time.
    wide_sync: String,
}

impl Backend {
    fn start(&self, plugins_dir: &Path) -> anyhow::Result<(Server, String)> {
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        start_server_in_mode(&self.data_dir, plugins_dir, &flags)
    }
}

/// The benchmark's PostgreSQL cluster, in `<out>/postgres` and kept between
/// runs like the generated data sets, with PostgreSQL's defaults (`fsync`,
/// `synchronous_commit` and `full_page_writes` on: the import is measured
/// durable).
fn bench_cluster(args: &Args) -> anyhow::Result<Cluster> {
    Ok(Cluster::persistent(&args.out.join("postgres"), Durability::Durable)?)
}

/// The main data set (`esr seed`, same generator and sizes as the sled
/// one) in a database of the cluster, loaded once and kept; returns the
/// host's data directory (its key file, the compile cache) and the URL.
fn ensure_postgres_data(args: &Args, cluster: &Cluster) -> anyhow::Result<(PathBuf, String)> {
    let data_dir = args.out.join(format!("postgres-host-{}x{}", args.endpoints, args.findings_per_endpoint));
    let url = ensure_postgres_data_of(cluster, args.endpoints, args.findings_per_endpoint, &data_dir)?;
    Ok((data_dir, url))
}

/// The data set of this size in database `bench_<endpoints>x<findings per
/// endpoint>` of `cluster`, loaded once, with its host's data directory
/// (which holds the key) in `data_dir`; returns the database's URL.
fn ensure_postgres_data_of(
    cluster: &Cluster,
    endpoints: usize,
    findings_per_endpoint: usize,
    data_dir: &Path,
) -> anyhow::Result<String> {
    let name = format!("bench_{endpoints}x{findings_per_endpoint}");
    let url = cluster.url(&name);
    if !data_dir.join(esr_demo::seed::SEED_KEYS_FILE).exists() {
        eprintln!("loading the data set into PostgreSQL database {name} (once; it is kept)");
        if data_dir.exists() {
            std::fs::remove_dir_all(data_dir)?;
        }
        cluster.execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
        cluster.execute(&format!("CREATE DATABASE {name}"))?;
        // Loading the read data set need not wait for each commit's flush;
        // the setting is reset before anything is measured.
        cluster.execute(&format!("ALTER DATABASE {name} SET synchronous_commit = off"))?;
        let status = Command::new(esr_binary()?)
            .args(["seed", "--endpoints", &endpoints.to_string()])
            .args(["--findings-per-endpoint", &findings_per_endpoint.to_string()])
            .args(["--database", &url, "--data-dir"])
            .arg(data_dir)
            .status()?;
        if !status.success() {
            bail!("esr seed --database failed");
        }
        cluster.execute(&format!("ALTER DATABASE {name} RESET synchronous_commit"))?;
        // Statistics and visibility maps, as autovacuum would leave them.
        cluster.config(&name).connect(postgres::NoTls)?.batch_execute("VACUUM ANALYZE")?;
        cluster.execute("CHECKPOINT")?;
    }
    Ok(url)
}

/// [`warm_page_cache`] for every file under `dir` (a PostgreSQL cluster's
/// databases, as the sled data set's files are warmed).
fn warm_page_cache_under(dir: &Path) -> anyhow::Result<()> {
    warm_page_cache(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            warm_page_cache_under(&path)?;
        }
    }
    Ok(())
}

/// The key `esr seed` wrote into `data_dir`.
fn seeded_key(data_dir: &Path) -> anyhow::Result<String> {
    let keys_file = data_dir.join(esr_demo::seed::SEED_KEYS_FILE);
    let keys: Value = serde_json::from_slice(&std::fs::read(&keys_file)?)?;
    keys["organizations"][0]["api_key"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no key in {}", keys_file.display()))
}

/// Walks to page 1,000 (limit 50) and finds the median update time: what a
/// backend's server needs for the cases of [`latency_paths`].
fn cursor_and_median(client: &mut ApiClient) -> anyhow::Result<(String, String)> {
    let mut cursor: Option<String> = None;
    for _ in 1..1000 {
        let path = match &cursor {
            Some(c) => format!("/v1/vulnerability-findings?limit=50&cursor={c}"),
            None => "/v1/vulnerability-findings?limit=50".to_owned(),
        };
        cursor = client.get(&path)?.1["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            bail!("fewer than 1,000 pages of findings");
        }
    }
    let page_1000 = format!("/v1/vulnerability-findings?limit=50&cursor={}", cursor.unwrap_or_default());
    let (_, newest) = client.get("/v1/vulnerability-findings?sort=-updated_at&limit=1")?;
    let (_, oldest) = client.get("/v1/vulnerability-findings?sort=updated_at&limit=1")?;
    let instant = |page: &Value| {
        page["data"][0]["updated_at"].as_str().and_then(esr_contract::time::Timestamp::parse).map_or(0, |t| t.0)
    };
    let middle = esr_contract::time::Timestamp(instant(&oldest) / 2 + instant(&newest) / 2).format();
    Ok((page_1000, format!("/v1/vulnerability-findings?updatedAfter={middle}")))
}

/// The paths of [`BACKEND_CASES`] on a backend, for one finding and endpoint.
fn latency_paths(backend: &Backend, finding: &str, endpoint: &str) -> [String; 12] {
    [
        "/v1/health".to_owned(),
        format!("/v1/vulnerability-findings/{finding}"),
        format!("/v1/vulnerability-findings?endpointId={endpoint}"),
        "/v1/vulnerability-findings?severity=critical".to_owned(),
        "/v1/vulnerability-findings?limit=50".to_owned(),
        backend.page_1000.clone(),
        "/v1/vulnerability-findings?severity=critical&sort=-cvss".to_owned(),
        "/v1/vulnerability-findings?status=open&severity=critical".to_owned(),
        "/v1/vulnerability-findings?sort=-severity".to_owned(),
        backend.wide_sync.clone(),
        format!("/v1/vulnerability-findings/summary?groupBy=severity,status&endpointId={endpoint}"),
        "/v1/vulnerability-findings/summary?groupBy=severity&status=open".to_owned(),
    ]
}

/// sled and PostgreSQL on the same generated data in one run: every
/// latency case with the backends alternating round by round, every wrk
/// case with the backends alternating round by round (with the host's
/// memory), and the import into PostgreSQL beside that engine's own
/// ceiling; PostgreSQL ÷ sled for each.
fn bench_backends(args: &Args, sled_dir: &Path, sled_key: &str) -> anyhow::Result<String> {
    let cluster = bench_cluster(args)?;
    let (postgres_dir, url) = ensure_postgres_data(args, &cluster)?;
    warm_page_cache(sled_dir)?;
    warm_page_cache_under(&cluster.data_dir().join("base"))?;
    let mut backends = [
        Backend {
            name: "sled",
            data_dir: sled_dir.to_path_buf(),
            flags: Vec::new(),
            key: sled_key.to_owned(),
            page_1000: String::new(),
            wide_sync: String::new(),
        },
        Backend {
            name: "postgres",
            data_dir: postgres_dir.clone(),
            flags: vec!["--database".to_owned(), url.clone()],
            key: seeded_key(&postgres_dir)?,
            page_1000: String::new(),
            wide_sync: String::new(),
        },
    ];
    // Both servers run through the latency loop; each waits idle while the
    // other answers.
    let mut servers = Vec::new();
    let mut ids = None;
    for backend in &mut backends {
        let (server, _) = backend.start(&args.plugins_dir)?;
        let mut client = ApiClient::connect(&server.base, &backend.key)?;
        (backend.page_1000, backend.wide_sync) = cursor_and_median(&mut client)?;
        // Ids from the sled data set, the same in PostgreSQL (one generator).
        let (finding_ids, _) = ids.get_or_insert(sample_ids(&mut client)?);
        client.get(&format!("/v1/vulnerability-findings/{}", finding_ids[0])).context(
            "the PostgreSQL data set does not hold the sled data set's findings: remove target/bench/postgres-host-* to reload it",
        )?;
        servers.push(server);
    }
    let (finding_ids, endpoint_ids) = ids.ok_or_else(|| anyhow!("no backend"))?;
    // Fresh connections: the first one idled out while the other backend was set up.
    let mut servers: Vec<(Server, ApiClient)> = servers
        .into_iter()
        .zip(&backends)
        .map(|(server, backend)| {
            let client = ApiClient::connect(&server.base, &backend.key)?;
            Ok((server, client))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut samples: Vec<Vec<Vec<Duration>>> = vec![vec![Vec::new(); BACKEND_CASES.len()]; backends.len()];
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for round in 0..args.rounds + 10 {
        let finding = &finding_ids[rng.gen_range(0..finding_ids.len())];
        let endpoint = &endpoint_ids[rng.gen_range(0..endpoint_ids.len())];
        // Which backend goes first alternates too.
        for turn in 0..backends.len() {
            let index = (turn + round) % backends.len();
            for (case, path) in latency_paths(&backends[index], finding, endpoint).iter().enumerate() {
                let elapsed = servers[index].1.get(path)?.0;
                if round >= 10 {
                    samples[index][case].push(elapsed);
                }
            }
        }
    }
    drop(servers);
    let mut report = format!(
        "\nsled and PostgreSQL on the same data ({} endpoints × {} findings; PostgreSQL {} in {}, \
         fsync on); latency: {} rounds, cases interleaved, backends alternating\n\
         {:<44} {:>9} {:>9} {:>9} {:>9} {:>9}  target\n",
        args.endpoints,
        args.findings_per_endpoint,
        postgres_version(&cluster)?,
        cluster.data_dir().display(),
        args.rounds,
        "case",
        "sled p50",
        "pg p50",
        "pg÷sled",
        "sled p90",
        "pg p90"
    );
    for (case, (name, target)) in BACKEND_CASES.iter().enumerate() {
        let p50 = |backend: usize| ms(percentile(&samples[backend][case], 0.5));
        let p90 = |backend: usize| ms(percentile(&samples[backend][case], 0.9));
        report.push_str(&format!(
            "{:<44} {:>9.3} {:>9.3} {:>9.2} {:>9.3} {:>9.3}  {}\n",
            name,
            p50(0),
            p50(1),
            p50(1) / p50(0).max(f64::EPSILON),
            p90(0),
            p90(1),
            target
        ));
    }
    // Each part is shown as soon as it is measured: the whole takes long.
    eprint!("{report}");
    if args.load_seconds > 0 {
        let part = backends_under_load(args, &backends, &finding_ids[0], &endpoint_ids[0])?;
        eprint!("{part}");
        report.push_str(&part);
    }
    if args.import_findings > 0 {
        report.push_str(&bench_import_postgres(args, &cluster)?);
    }
    Ok(report)
}

/// Up to 100 endpoint ids and the ids of the findings of 20 of them.
fn sample_ids(client: &mut ApiClient) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let ids = |page: &Value| -> Vec<String> {
        page["data"].as_array().into_iter().flatten().filter_map(|r| r["id"].as_str().map(str::to_owned)).collect()
    };
    let endpoint_ids = ids(&client.get("/v1/endpoints?limit=100")?.1);
    let mut finding_ids = Vec::new();
    for endpoint in endpoint_ids.iter().take(20) {
        finding_ids.extend(ids(&client.get(&format!("/v1/vulnerability-findings?endpointId={endpoint}&limit=100"))?.1));
    }
    if endpoint_ids.is_empty() || finding_ids.is_empty() {
        bail!("the data set has no endpoints or findings");
    }
    Ok((finding_ids, endpoint_ids))
}

fn postgres_version(cluster: &Cluster) -> anyhow::Result<String> {
    let row = cluster.config("postgres").connect(postgres::NoTls)?.query_one("SHOW server_version", &[])?;
    Ok(row.get(0))
}

/// The wrk operations on each backend, backends alternating round by
/// round (a fresh server each round), medians of 3 rounds; the host's
/// memory at rest and its peak under load.
fn backends_under_load(args: &Args, backends: &[Backend], finding: &str, endpoint: &str) -> anyhow::Result<String> {
    const ROUNDS: usize = 3;
    let operations = |backend: &Backend| {
        [
            ("finding by id", format!("/v1/vulnerability-findings/{finding}")),
            ("findings?endpointId=… first page", format!("/v1/vulnerability-findings?endpointId={endpoint}")),
            ("findings?severity=critical (with total)", "/v1/vulnerability-findings?severity=critical".to_owned()),
            ("findings page 1,000 by cursor", backend.page_1000.clone()),
        ]
    };
    let mut runs: Vec<Vec<Vec<Load>>> = backends.iter().map(|_| vec![Vec::new(); 4]).collect();
    let mut at_rest = vec![0.0; backends.len()];
    for _ in 0..ROUNDS {
        for (index, backend) in backends.iter().enumerate() {
            let (server, _) = backend.start(&args.plugins_dir)?;
            std::thread::sleep(Duration::from_secs(1));
            at_rest[index] = f64::max(at_rest[index], resident_mib(server.child.id()));
            for (operation, (_, path)) in operations(backend).iter().enumerate() {
                let load = wrk(&format!("{}{path}", server.base), &backend.key, args.load_seconds, server.child.id())?;
                runs[index][operation].push(load);
            }
        }
    }
    let results: Vec<Vec<Load>> = runs.iter().map(|backend| backend.iter().map(|l| median_load(l)).collect()).collect();
    let mut report = format!(
        "\nunder load, sled and PostgreSQL: wrk -t2 -c32 -d{}s --latency per operation and backend, \
         backends alternating, medians of {ROUNDS} rounds\n{:<40} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9}\n",
        args.load_seconds, "operation", "backend", "req/s", "p50 ms", "p99 ms", "peak MiB", "pg÷sled"
    );
    for (operation, (name, _)) in operations(&backends[0]).iter().enumerate() {
        for (index, backend) in backends.iter().enumerate() {
            let load = &results[index][operation];
            let ratio = if index == 1 {
                format!("{:.2}", load.requests_per_second / results[0][operation].requests_per_second.max(f64::EPSILON))
            } else {
                String::new()
            };
            report.push_str(&format!(
                "{:<40} {:>9} {:>9.0} {:>9.2} {:>10.2} {:>10.0} {:>9}\n",
                name, backend.name, load.requests_per_second, load.p50_ms, load.p99_ms, load.peak_rss_mib, ratio
            ));
        }
    }
    let peak = |index: usize| results[index].iter().map(|l| l.peak_rss_mib).fold(0.0, f64::max);
    report.push_str(&format!(
        "host resident memory at rest: sled {:.0} MiB, PostgreSQL {:.0} MiB; under load at most: sled {:.0} MiB, \
         PostgreSQL {:.0} MiB (target on PostgreSQL < 150 MiB)\n",
        at_rest[0],
        at_rest[1],
        peak(0),
        peak(1)
    ));
    Ok(report)
}

/// The validated, durable import into PostgreSQL (a fresh database of the
/// cluster, through the admin listener, as into sled), beside what
/// PostgreSQL alone takes to store the same findings' bytes in the same
/// batches: binary `COPY` into a table with only its primary key, one
/// committed transaction per batch.
fn bench_import_postgres(args: &Args, cluster: &Cluster) -> anyhow::Result<String> {
    const IMPORT_DATABASE: &str = "bench_import";
    const CEILING_DATABASE: &str = "bench_ceiling";
    for database in [IMPORT_DATABASE, CEILING_DATABASE] {
        cluster.execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))?;
        cluster.execute(&format!("CREATE DATABASE {database}"))?;
    }
    let data_dir = args.out.join("postgres-import-host");
    if data_dir.exists() {
        std::fs::remove_dir_all(&data_dir)?;
    }
    let url = cluster.url(IMPORT_DATABASE);
    let (server, admin) = start_server_in_mode(&data_dir, &args.plugins_dir, &["--database", &url])?;
    let postmaster = postmaster_pid(cluster)?;
    let of_cluster = |pid: u32| pid == postmaster || parent_pid(pid) == Some(postmaster);
    let cpu_before = (cpu_seconds(|pid| pid == server.child.id()), cpu_seconds(of_cluster));
    let imported = import_generated(args, &data_dir, &admin)?;
    let host_cpu = cpu_seconds(|pid| pid == server.child.id()) - cpu_before.0;
    let postgres_cpu = cpu_seconds(of_cluster) - cpu_before.1;
    let host_rss = resident_mib(server.child.id());
    drop(server);
    std::fs::remove_dir_all(&data_dir)?;
    let mut database = cluster.config(IMPORT_DATABASE).connect(postgres::NoTls)?;
    let size: i64 = database.query_one("SELECT pg_database_size(current_database())", &[])?.get(0);
    let (schema_count, schema_time) =
        write_imported_rows_again(&mut database, imported.organization, args.import_batch)?;
    drop(database);

    let mut ceiling = cluster.config(CEILING_DATABASE).connect(postgres::NoTls)?;
    ceiling.batch_execute(
        "CREATE TABLE ceiling (org_id uuid NOT NULL, collection text COLLATE \"C\" NOT NULL, id uuid NOT NULL, \
         body bytea NOT NULL, PRIMARY KEY (org_id, collection, id))",
    )?;
    let organization = imported.organization;
    let (ceiling_count, ceiling_time) = write_ceiling_batches(args, imported.spec, imported.finding_count, |batch| {
        use postgres::types::Type;
        let mut transaction = ceiling.transaction()?;
        let sink = transaction.copy_in("COPY ceiling (org_id, collection, id, body) FROM STDIN BINARY")?;
        let mut writer =
            postgres::binary_copy::BinaryCopyInWriter::new(sink, &[Type::UUID, Type::TEXT, Type::UUID, Type::BYTEA]);
        for (id, body) in &batch {
            writer.write(&[&organization, &"vulnerability-findings", id, body])?;
        }
        writer.finish()?;
        transaction.commit()?;
        Ok(())
    })?;
    drop(ceiling);
    for database in [IMPORT_DATABASE, CEILING_DATABASE] {
        cluster.execute(&format!("DROP DATABASE {database} WITH (FORCE)"))?;
    }
    let rate = |count: usize, time: Duration| count as f64 / time.as_secs_f64().max(1e-9);
    let (import_rate, ceiling_rate, schema_rate) = (
        rate(imported.finding_count, imported.finding_time),
        rate(ceiling_count, ceiling_time),
        rate(schema_count, schema_time),
    );
    Ok(format!(
        "\nimport into PostgreSQL (validated, durable, through the admin listener; batches of {} lines; fsync on):\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s of requests)\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s of requests)  target ≥ 20,000/s\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s)\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s)\n\
         import ÷ PostgreSQL alone: {:.2} (pk only), {:.2} (the host's tables); database size after the import \
         {:.0} MiB; host RSS after it {:.0} MiB\n\
         CPU during the import (endpoints, findings and the generation between batches): host {:.0} s, \
         PostgreSQL's processes {:.0} s, wall {:.0} s\n",
        args.import_batch,
        "endpoints",
        rate(imported.endpoint_count, imported.endpoint_time),
        imported.endpoint_count,
        imported.endpoint_time.as_secs_f64(),
        "vulnerability findings",
        import_rate,
        imported.finding_count,
        imported.finding_time.as_secs_f64(),
        "PostgreSQL alone: the same bytes, binary COPY, pk only",
        ceiling_rate,
        ceiling_count,
        ceiling_time.as_secs_f64(),
        "PostgreSQL alone: the imported rows, the host's tables",
        schema_rate,
        schema_count,
        schema_time.as_secs_f64(),
        import_rate / ceiling_rate.max(1e-9),
        import_rate / schema_rate.max(1e-9),
        size as f64 / (1 << 20) as f64,
        host_rss,
        host_cpu,
        postgres_cpu,
        imported.wall.as_secs_f64(),
    ))
}

/// What PostgreSQL alone takes to store again the rows an import of
/// findings into `organization` wrote: its records (with every index of
/// the records table), change events and history entries, inserted into
/// tables made like the host's in the import's batches, one committed
/// transaction each. The engine's ceiling for the host's schema, with none
/// of the host's work (parsing, validation, encoding, round trips); the
/// copies are dropped afterwards. Returns the records stored and the time.
fn write_imported_rows_again(
    database: &mut postgres::Client,
    organization: uuid::Uuid,
    batch: usize,
) -> anyhow::Result<(usize, Duration)> {
    const TABLES: [&str; 3] = ["records", "changes", "history"];
    let batch = i64::try_from(batch)?;
    // Each table's rows numbered into the import's batches, in the order
    // imported, outside the time measured.
    database.execute(
        "CREATE TEMP TABLE records_source AS SELECT r.*, (row_number() OVER (ORDER BY created_position, id) - 1) / $2 \
         AS batch FROM records r WHERE org_id = $1 AND collection = 'vulnerability-findings'",
        &[&organization, &batch],
    )?;
    for table in &TABLES[1..] {
        database.batch_execute(&format!(
            "CREATE TEMP TABLE {table}_source AS SELECT t.*, s.batch FROM {table} t JOIN records_source s \
             USING (org_id, collection, id)"
        ))?;
    }
    let mut columns = Vec::new();
    for table in TABLES {
        database.batch_execute(&format!(
            "CREATE INDEX ON {table}_source (batch); ANALYZE {table}_source; \
             CREATE TABLE {table}_again (LIKE {table} INCLUDING ALL)"
        ))?;
        let listed: String = database
            .query_one(
                "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute \
                 WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped",
                &[&table],
            )?
            .get(0);
        columns.push(listed);
    }
    let batches: i64 = database.query_one("SELECT coalesce(max(batch) + 1, 0) FROM records_source", &[])?.get(0);
    let started = Instant::now();
    for number in 0..batches {
        let mut transaction = database.transaction()?;
        for (table, listed) in TABLES.iter().zip(&columns) {
            transaction.execute(
                &format!("INSERT INTO {table}_again ({listed}) SELECT {listed} FROM {table}_source WHERE batch = $1"),
                &[&number],
            )?;
        }
        transaction.commit()?;
    }
    let elapsed = started.elapsed();
    let count: i64 = database.query_one("SELECT count(*) FROM records_again", &[])?.get(0);
    for table in TABLES {
        database.batch_execute(&format!("DROP TABLE {table}_again; DROP TABLE {table}_source"))?;
    }
    Ok((usize::try_from(count)?, elapsed))
}

/// The CPU time (user and system) of the processes `pick` chooses by pid,
/// in seconds, from `/proc`.
fn cpu_seconds(pick: impl Fn(u32) -> bool) -> f64 {
    let ticks_per_second = 100.0; // USER_HZ on Linux
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if !pick(pid) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        ticks += fields.get(11).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        ticks += fields.get(12).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    }
    ticks as f64 / ticks_per_second
}

/// The cluster's server process (the parent of its backends).
fn postmaster_pid(cluster: &Cluster) -> anyhow::Result<u32> {
    let file = cluster.data_dir().join("postmaster.pid");
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    text.lines().next().and_then(|line| line.trim().parse().ok()).ok_or_else(|| anyhow!("no pid in {}", file.display()))
}

fn parent_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix("PPid:")).and_then(|ppid| ppid.trim().parse().ok())
}

/// Several hosts over PostgreSQL: two hosts against one under load on the
/// main data set, then a host reading a streaming replica against one
/// reading the primary.
fn bench_hosts(args: &Args) -> anyhow::Result<String> {
    let mut report = String::new();
    if args.load_seconds > 0 {
        let part = two_hosts_against_one(args)?;
        // Each part is shown as soon as it is measured: the whole takes long.
        eprint!("{part}");
        report.push_str(&part);
    }
    let part = replica_against_primary(args)?;
    eprint!("{part}");
    report.push_str(&part);
    Ok(report)
}

/// The load average as `/proc/loadavg` gives it (1, 5 and 15 minutes).
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The median of `values` (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// CPU seconds spent so far by the hosts, by the cluster's processes, and
/// by the whole machine (busy, and busy or idle), all cores together.
#[derive(Clone, Copy)]
struct CpuSnapshot {
    hosts: f64,
    database: f64,
    machine_busy: f64,
    machine_total: f64,
}

impl CpuSnapshot {
    fn take(host_pids: &[u32], postmaster: u32) -> CpuSnapshot {
        // /proc/stat's first line: user nice system idle iowait irq softirq steal …, in 1/100 s.
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|ticks| ticks.parse().ok())
            .collect();
        let total: f64 = ticks.iter().sum();
        let idle = ticks.get(3).copied().unwrap_or_default() + ticks.get(4).copied().unwrap_or_default();
        CpuSnapshot {
            hosts: cpu_seconds(|pid| host_pids.contains(&pid)),
            database: cpu_seconds(|pid| pid == postmaster || parent_pid(pid) == Some(postmaster)),
            machine_busy: (total - idle) / 100.0,
            machine_total: total / 100.0,
        }
    }
}

/// One load run of one operation in one shape: what each host's wrk
/// measured, and the CPU spent per request meanwhile.
struct HostsRun {
    loads: Vec<Load>,
    host_cpu_ms_per_request: f64,
    database_cpu_ms_per_request: f64,
    /// The share of the machine's CPU time that was busy (anything on it).
    machine_busy: f64,
}

/// Two `esr serve` hosts over the same PostgreSQL database, each loaded
/// by a wrk of its own with half the connections, against one host with
/// all of them: both hosts run throughout, the shapes alternate round by
/// round (which goes first too), medians of the rounds.
fn two_hosts_against_one(args: &Args) -> anyhow::Result<String> {
    const ROUNDS: usize = 5;
    let load_at_start = load_average();
    let cluster = bench_cluster(args)?;
    let (first_dir, url) = ensure_postgres_data(args, &cluster)?;
    warm_page_cache_under(&cluster.data_dir().join("base"))?;
    let key = seeded_key(&first_dir)?;
    let flags = ["--database", url.as_str()];
    let (first, _) = start_server_in_mode(&first_dir, &args.plugins_dir, &flags)?;
    // The second host's data directory holds only its compile cache and a
    // copy of the admin token: everything it serves is the database's.
    let (second, _) = start_server_in_mode(&args.out.join("postgres-second-host"), &args.plugins_dir, &flags)?;
    let mut client = ApiClient::connect(&first.base, &key)?;
    let (finding_ids, _) = sample_ids(&mut client)?;
    let operations = [
        ("finding by id", format!("/v1/vulnerability-findings/{}", finding_ids[0])),
        ("findings?severity=critical (with total)", "/v1/vulnerability-findings?severity=critical".to_owned()),
    ];
    let mut other = ApiClient::connect(&second.base, &key)?;
    for (_, path) in &operations {
        let (one, two) = (client.get(path)?.1, other.get(path)?.1);
        // Cursors are sealed afresh for each answer; the records must agree.
        if one.get("data").unwrap_or(&one) != two.get("data").unwrap_or(&two) {
            bail!("the two hosts answered {path} differently");
        }
    }
    drop((client, other));
    let hosts = [&first, &second];
    let host_pids = [first.child.id(), second.child.id()];
    let postmaster = postmaster_pid(&cluster)?;
    // runs[hosts - 1][operation]: one run a round.
    let mut runs: Vec<Vec<Vec<HostsRun>>> = (0..2).map(|_| operations.iter().map(|_| Vec::new()).collect()).collect();
    for round in 0..ROUNDS {
        for turn in 0..2 {
            let shape = 1 + (turn + round) % 2;
            for (operation, (_, path)) in operations.iter().enumerate() {
                let targets: Vec<(String, u32)> =
                    hosts[..shape].iter().map(|host| (format!("{}{path}", host.base), host.child.id())).collect();
                let before = CpuSnapshot::take(&host_pids, postmaster);
                // The same wrk threads and connections in all, split among the hosts.
                // A request this busy machine leaves unanswered for 2 s
                // is counted as failed, not the end of the run.
                let loads = wrk_at_once(&targets, &key, args.load_seconds, 2 / shape, 32 / shape, Failures::Counted)?;
                let after = CpuSnapshot::take(&host_pids, postmaster);
                let requests =
                    loads.iter().map(|load| load.requests_per_second).sum::<f64>() * args.load_seconds as f64;
                let per_request = |seconds: f64| seconds * 1000.0 / requests.max(1.0);
                runs[shape - 1][operation].push(HostsRun {
                    loads,
                    host_cpu_ms_per_request: per_request(after.hosts - before.hosts),
                    database_cpu_ms_per_request: per_request(after.database - before.database),
                    machine_busy: (after.machine_busy - before.machine_busy)
                        / (after.machine_total - before.machine_total).max(f64::EPSILON),
                });
            }
        }
    }
    drop((first, second));
    let mut report = format!(
        "\ntwo hosts against one over one PostgreSQL ({} endpoints × {} findings in {}; each host's pool 16 \
         connections): wrk --latency -d{}s, one host -t2 -c32, two hosts -t1 -c16 each at once; both hosts \
         run throughout, shapes alternating, medians of {ROUNDS} rounds; load average {load_at_start} at the \
         start, {} at the end\n\
         {:<40} {:>10} {:>9} {:>15} {:>17} {:>9} {:>9} {:>7} {:>8}\n",
        args.endpoints,
        args.findings_per_endpoint,
        cluster.data_dir().display(),
        args.load_seconds,
        load_average(),
        "operation",
        "shape",
        "req/s",
        "p50 ms",
        "p99 ms",
        "host CPU",
        "PG CPU",
        "busy",
        "failed",
    );
    // Failed: requests not answered 2xx within wrk's 2 s, over all rounds.
    report.push_str(&format!(
        "{:<40} {:>10} {:>9} {:>15} {:>17} {:>9} {:>9} {:>7} {:>8}\n",
        "", "", "", "", "", "ms/req", "ms/req", "%", "requests"
    ));
    let mut ratios = Vec::new();
    for (operation, (name, _)) in operations.iter().enumerate() {
        let mut summed = Vec::new();
        for (shape, label) in [(1, "one host"), (2, "two hosts")] {
            let shape_runs = &runs[shape - 1][operation];
            let total = median(
                shape_runs.iter().map(|run| run.loads.iter().map(|load| load.requests_per_second).sum()).collect(),
            );
            let per_host: Vec<Load> = (0..shape)
                .map(|host| median_load(&shape_runs.iter().map(|run| run.loads[host].clone()).collect::<Vec<_>>()))
                .collect();
            let joined = |figure: fn(&Load) -> f64| {
                per_host.iter().map(|load| format!("{:.2}", figure(load))).collect::<Vec<_>>().join(" / ")
            };
            report.push_str(&format!(
                "{:<40} {:>10} {:>9.0} {:>15} {:>17} {:>9.3} {:>9.3} {:>7.0} {:>8}\n",
                if shape == 1 { name } else { "" },
                label,
                total,
                joined(|load| load.p50_ms),
                joined(|load| load.p99_ms),
                median(shape_runs.iter().map(|run| run.host_cpu_ms_per_request).collect()),
                median(shape_runs.iter().map(|run| run.database_cpu_ms_per_request).collect()),
                median(shape_runs.iter().map(|run| run.machine_busy * 100.0).collect()),
                shape_runs.iter().flat_map(|run| &run.loads).map(|load| load.failed_requests).sum::<u64>(),
            ));
            summed.push((total, per_host.iter().map(|load| load.p99_ms).fold(0.0, f64::max)));
        }
        ratios.push(format!(
            "{name}: req/s {:.2}, p99 (the higher host's) {:.2}",
            summed[1].0 / summed[0].0.max(f64::EPSILON),
            summed[1].1 / summed[0].1.max(f64::EPSILON)
        ));
    }
    report.push_str(&format!("two hosts ÷ one host: {}\n", ratios.join("; ")));
    Ok(report)
}

/// A replica is a whole copy of its cluster; at least this much must stay
/// free on the disk once it is made.
const FREE_AFTER_REPLICA: u64 = 6 << 30;

/// The latency cases of the replica comparison.
const REPLICA_CASES: [&str; 6] = [
    "health (HTTP floor, no component)",
    "finding by id",
    "findings?endpointId=… first page",
    "findings?severity=critical (exact total)",
    "findings page 1 (limit 50)",
    "findings?severity=critical&sort=-cvss",
];

/// The paths of [`REPLICA_CASES`] for one finding and endpoint.
fn replica_paths(finding: &str, endpoint: &str) -> [String; 6] {
    [
        "/v1/health".to_owned(),
        format!("/v1/vulnerability-findings/{finding}"),
        format!("/v1/vulnerability-findings?endpointId={endpoint}"),
        "/v1/vulnerability-findings?severity=critical".to_owned(),
        "/v1/vulnerability-findings?limit=50".to_owned(),
        "/v1/vulnerability-findings?severity=critical&sort=-cvss".to_owned(),
    ]
}

/// A host reading a streaming replica (`--database-replica-url`) against
/// the same host reading the primary, one client each, hosts alternating
/// round by round, on a data set in a cluster of its own
/// (`<out>/postgres-replicated`, `--replica-endpoints`) and its replica
/// (`<out>/postgres-replicated-standby`), both made once and kept; the
/// replica has caught up before anything is measured.
fn replica_against_primary(args: &Args) -> anyhow::Result<String> {
    let load_at_start = load_average();
    let (endpoints, per_endpoint) = (args.replica_endpoints, args.findings_per_endpoint);
    let primary = Cluster::persistent(&args.out.join("postgres-replicated"), Durability::Durable)?;
    // This cluster is loaded once and then only read: a write-ahead log
    // kept at the default `max_wal_size` (1 GB) after the load would be
    // most of its size on the disk.
    primary.execute("ALTER SYSTEM SET max_wal_size = '128MB'")?;
    primary.execute("SELECT pg_reload_conf()")?;
    let primary_dir = args.out.join(format!("postgres-replicated-host-{endpoints}x{per_endpoint}"));
    let url = ensure_postgres_data_of(&primary, endpoints, per_endpoint, &primary_dir)?;
    let database = format!("bench_{endpoints}x{per_endpoint}");
    let standby_dir = args.out.join("postgres-replicated-standby");
    if !standby_dir.join("data").join("PG_VERSION").exists() {
        // Said in the report rather than ending a run of all the other parts.
        if let Err(error) = ensure_room_for_copy(&primary.data_dir(), &args.out) {
            return Ok(format!(
                "\na host reading a streaming replica against one reading the primary: not measured: {error:#}\n"
            ));
        }
        eprintln!("making a streaming replica in {} (once; it is kept)", standby_dir.display());
    }
    let standby = primary.replica(&standby_dir, false)?;
    wait_for_catch_up(&primary, &standby)?;
    warm_page_cache_under(&primary.data_dir().join("base"))?;
    warm_page_cache_under(&standby.data_dir().join("base"))?;
    let key = seeded_key(&primary_dir)?;
    let replica_url = standby.url(&database);
    let (on_primary, _) = start_server_in_mode(&primary_dir, &args.plugins_dir, &["--database", &url])?;
    let (on_replica, _) = start_server_in_mode(
        &args.out.join("postgres-replicated-second-host"),
        &args.plugins_dir,
        &["--database", &url, "--database-replica-url", &replica_url],
    )?;
    wait_for_replica_up(&on_replica.base, &key)?;
    let mut clients = [ApiClient::connect(&on_primary.base, &key)?, ApiClient::connect(&on_replica.base, &key)?];
    let (finding_ids, endpoint_ids) = sample_ids(&mut clients[0])?;
    let path = format!("/v1/vulnerability-findings/{}", finding_ids[0]);
    if clients[0].get(&path)?.1 != clients[1].get(&path)?.1 {
        bail!("the host reading the replica answered {path} unlike the one reading the primary");
    }
    let before = [transactions(&primary, &database)?, transactions(&standby, &database)?];
    let started = Instant::now();
    let mut samples: Vec<Vec<Vec<Duration>>> = vec![vec![Vec::new(); REPLICA_CASES.len()]; 2];
    // Reads each host answered (every case but health reads the database).
    let mut reads = [0i64; 2];
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for round in 0..args.rounds + 10 {
        let finding = &finding_ids[rng.gen_range(0..finding_ids.len())];
        let endpoint = &endpoint_ids[rng.gen_range(0..endpoint_ids.len())];
        let paths = replica_paths(finding, endpoint);
        for turn in 0..2 {
            let host = (turn + round) % 2;
            for (case, path) in paths.iter().enumerate() {
                let elapsed = clients[host].get(path)?.0;
                if round >= 10 {
                    samples[host][case].push(elapsed);
                }
            }
            reads[host] += paths.len() as i64 - 1;
        }
    }
    let elapsed = started.elapsed();
    drop(clients);
    drop((on_primary, on_replica));
    // Where the reads went, from each cluster's own counts. A backend
    // reports them when it goes idle, at most once a second: wait for
    // them (a bounded while), then take what is there.
    let counted = || -> anyhow::Result<[i64; 2]> {
        Ok([transactions(&primary, &database)? - before[0], transactions(&standby, &database)? - before[1]])
    };
    let waited = Instant::now();
    let deadline = waited + Duration::from_secs(30);
    let mut after = counted()?;
    while (after[0] < reads[0] || after[1] < reads[1]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = counted()?;
    }
    let mut report = format!(
        "\na host reading a streaming replica against one reading the primary ({endpoints} endpoints × \
         {per_endpoint} findings in {} and its replica in {} (pg_basebackup -R -X stream, caught up before \
         measuring); one client per host, {} rounds, cases interleaved, hosts alternating; load average \
         {load_at_start} at the start, {} at the end\n\
         {:<44} {:>11} {:>11} {:>9} {:>11} {:>11}\n",
        primary.data_dir().display(),
        standby.data_dir().display(),
        args.rounds,
        load_average(),
        "case",
        "primary p50",
        "replica p50",
        "rep÷prim",
        "primary p90",
        "replica p90",
    );
    for (case, name) in REPLICA_CASES.iter().enumerate() {
        let p50 = |host: usize| ms(percentile(&samples[host][case], 0.5));
        let p90 = |host: usize| ms(percentile(&samples[host][case], 0.9));
        report.push_str(&format!(
            "{:<44} {:>11.3} {:>11.3} {:>9.2} {:>11.3} {:>11.3}\n",
            name,
            p50(0),
            p50(1),
            p50(1) / p50(0).max(f64::EPSILON),
            p90(0),
            p90(1)
        ));
    }
    report.push_str(&format!(
        "database reads each host answered: {} and {}; transactions on the database over those {:.1} s and \
         the {:.1} s until the counts were in: primary {}, replica {} (the hosts' key look-ups and heartbeats, \
         and the replica monitor's checks, 4 a second, count too)\n",
        reads[0],
        reads[1],
        elapsed.as_secs_f64(),
        waited.elapsed().as_secs_f64(),
        after[0],
        after[1]
    ));
    Ok(report)
}

/// Refuses to copy the cluster in `source` onto the disk of `target` when
/// that would leave less than [`FREE_AFTER_REPLICA`] free.
fn ensure_room_for_copy(source: &Path, target: &Path) -> anyhow::Result<()> {
    let size = size_under(source)?;
    let disk = rustix::fs::statvfs(target).with_context(|| format!("statvfs {}", target.display()))?;
    let free = disk.f_bavail.saturating_mul(disk.f_frsize);
    if free < size.saturating_add(FREE_AFTER_REPLICA) {
        bail!(
            "a replica of {} ({} MiB) would leave {} MiB free on the disk of {} (at least {} MiB must stay free): \
             pass a smaller --replica-endpoints",
            source.display(),
            size >> 20,
            free.saturating_sub(size) >> 20,
            target.display(),
            FREE_AFTER_REPLICA >> 20
        );
    }
    Ok(())
}

/// The bytes of the files under `dir`; files that go while it counts
/// (a running server's temporary files) are left out.
fn size_under(dir: &Path) -> anyhow::Result<u64> {
    let mut size = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(metadata) = entry.metadata() else { continue };
        size += if metadata.is_dir() { size_under(&entry.path())? } else { metadata.len() };
    }
    Ok(size)
}

/// Waits (10 minutes at most) until `standby` has replayed everything
/// `primary` had written when this was called.
fn wait_for_catch_up(primary: &Cluster, standby: &Cluster) -> anyhow::Result<()> {
    const BOUND: Duration = Duration::from_secs(600);
    let written: i64 = primary
        .config("postgres")
        .connect(postgres::NoTls)?
        .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8", &[])?
        .get(0);
    let mut replica = standby.config("postgres").connect(postgres::NoTls)?;
    let deadline = Instant::now() + BOUND;
    loop {
        let replayed: Option<i64> =
            replica.query_one("SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8", &[])?.get(0);
        if replayed.is_some_and(|replayed| replayed >= written) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the replica in {} did not catch up within {BOUND:?}", standby.data_dir().display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (a minute at most) until the host at `base` reports its replica up.
fn wait_for_replica_up(base: &str, key: &str) -> anyhow::Result<()> {
    const BOUND: Duration = Duration::from_secs(60);
    let deadline = Instant::now() + BOUND;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        // Health may answer other than 200 while the replica is not up.
        if let Ok((_, health)) = ApiClient::connect(base, key).and_then(|mut client| client.get("/v1/health")) {
            last = health["checks"]["replicas"].clone();
            if last[0]["output"] == "up" {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("the host at {base} did not report its replica up within {BOUND:?}: {last}")
}

/// Transactions (committed and rolled back) the cluster has counted on
/// `database` so far.
fn transactions(cluster: &Cluster, database: &str) -> anyhow::Result<i64> {
    let row = cluster.config("postgres").connect(postgres::NoTls)?.query_one(
        "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname = $1",
        &[&database],
    )?;
    Ok(row.get(0))
}
