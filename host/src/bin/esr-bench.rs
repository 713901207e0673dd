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
    let keys_file = data_dir.join("seed-keys.json");
    if !keys_file.exists() {
        if data_dir.exists() {
            std::fs::remove_dir_all(data_dir).with_context(|| format!("clearing {}", data_dir.display()))?;
        }
        eprintln!("generating the data set in {} (once; it is kept)", data_dir.display());
        let status = Command::new(esr_binary()?)
            .args(["seed", "--endpoints", &args.endpoints.to_string()])
            .args(["--findings-per-endpoint", &args.findings_per_endpoint.to_string()])
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

/// Starts `esr serve` on the data directory; returns it with its admin URL.
fn start_server(data_dir: &Path, plugins_dir: &Path) -> anyhow::Result<Server> {
    Ok(start_server_with_admin(data_dir, plugins_dir)?.0)
}

fn start_server_with_admin(data_dir: &Path, plugins_dir: &Path) -> anyhow::Result<(Server, String)> {
    let mut child = Command::new(esr_binary()?)
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        // The benchmark measures the service, not its rate limits.
        .args(["--rate-limit-per-minute=100000000", "--rate-limit-burst=10000000"])
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
    Ok((Server { child, base }, admin))
}

/// Imports generated endpoints and then `findings` findings through the
/// admin listener of a server on a fresh data directory, in batches of
/// `batch` lines, each validated and durable before the next is sent.
/// Returns the report lines. Only time spent in requests counts: the
/// generator runs between them, while the server is idle.
fn bench_import(args: &Args) -> anyhow::Result<String> {
    const FINDINGS_PER_ENDPOINT: usize = 100;
    let data_dir = args.out.join("import-data");
    if data_dir.exists() {
        std::fs::remove_dir_all(&data_dir)?;
    }
    let (server, admin) = start_server_with_admin(&data_dir, &args.plugins_dir)?;
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
    let spec = esr::demo::DemoSpec { endpoints, findings_per_endpoint: FINDINGS_PER_ENDPOINT };
    let mut generator = esr::demo::Generator::new(11, spec, esr::demo::DEMO_ANCHOR_UNIX, "bench");
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
    drop(server);
    // Gigabytes at a million findings, and made afresh by every run.
    std::fs::remove_dir_all(&data_dir).with_context(|| format!("removing {}", data_dir.display()))?;
    let rate = |count: usize, time: Duration| count as f64 / time.as_secs_f64().max(1e-9);
    Ok(format!(
        "\nimport (validated, durable, through the admin listener; batches of {} lines):\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s of requests)\n\
         {:<44} {:>9.0} records/s  ({} in {:.1} s of requests)  target ≥ 50,000/s\n\
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
        wall.elapsed().as_secs_f64(),
    ))
}

/// One measured case: its name, its target, and its samples.
struct Case {
    name: &'static str,
    target: &'static str,
    samples: Vec<Duration>,
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

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let data_dir = args.out.join(format!("data-{}x{}", args.endpoints, args.findings_per_endpoint));
    let key = ensure_data(&args, &data_dir)?;
    let server = start_server(&data_dir, &args.plugins_dir)?;
    let client = Client::builder().timeout(Duration::from_secs(120)).build()?;
    let get = |path: &str| -> anyhow::Result<(Duration, Value)> {
        let started = Instant::now();
        let response = client.get(format!("{}{path}", server.base)).bearer_auth(&key).send()?;
        let status = response.status();
        let body: Value = response.json()?;
        let elapsed = started.elapsed();
        if !status.is_success() {
            bail!("GET {path}: {status} {body}");
        }
        Ok((elapsed, body))
    };

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
        page["data"][0]["updated_at"].as_str().and_then(esr_plugin_sdk::time::Timestamp::parse).map_or(0, |t| t.0)
    };
    let middle = esr_plugin_sdk::time::Timestamp(instant(&oldest) / 2 + instant(&newest) / 2).format();
    let wide_sync = format!("/v1/vulnerability-findings?updatedAfter={middle}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut critical_total = 0;
    for round in 0..args.rounds + 10 {
        let finding = &finding_ids[rng.gen_range(0..finding_ids.len())];
        let endpoint = &endpoint_ids[rng.gen_range(0..endpoint_ids.len())];
        let started = Instant::now();
        client.get(format!("{}/v1/health", server.base)).send()?.bytes()?;
        let health = started.elapsed();
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
    if args.import_findings > 0 {
        report.push_str(&bench_import(&args)?);
    }
    print!("{report}");
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("report.txt"), &report)?;
    Ok(())
}
