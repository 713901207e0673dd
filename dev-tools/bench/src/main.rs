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

mod backends;
mod boundary;
mod credentials;
mod data;
mod export;
mod host_report_import;
mod hosts;
mod http;
mod import;
mod instance_floor;
mod latency;
mod load;
mod postgres;
mod postgres_import;
mod replica;
mod report;
mod report_import;
mod server;
mod stats;
mod system;
mod throughput;
mod webhooks;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use esr_pg_cluster::{Cluster, Durability};
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::backends::bench_backends;
use crate::boundary::bench_boundary;
use crate::credentials::bench_credentials;
use crate::data::{ensure_data, warm_page_cache};
use crate::export::bench_exports;
use crate::host_report_import::bench_host_report_import;
use crate::hosts::bench_hosts;
use crate::http::ApiClient;
use crate::import::bench_import;
use crate::latency::{bench_growth, bench_summaries, bench_wide_lists};
use crate::postgres_import::bench_import_postgres;
use crate::report::print_and_keep;
use crate::report_import::bench_report_import;
use crate::server::start_server;
use crate::stats::{ms, percentile};
use crate::throughput::bench_throughput;
use crate::webhooks::bench_webhooks;

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
    /// Import requests in flight at once: a client sending its next batch
    /// while the server writes the last one.
    #[arg(long, default_value_t = 2)]
    import_in_flight: usize,
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
    /// Hosts (of 50 findings each) in the large host scanner report (0
    /// skips it).
    #[arg(long, default_value_t = 1_000)]
    host_report_hosts: usize,
    /// Only the large host scanner report, on sled and PostgreSQL.
    #[arg(long)]
    host_report_only: bool,
    /// Only the summaries (counts grouped by fields) on the findings.
    #[arg(long)]
    summaries_only: bool,
    /// Only the read cases on the data set and the throughput comparison
    /// (components against the native baseline): what comparing two builds
    /// on the same data needs.
    #[arg(long)]
    reads_only: bool,
    /// Only the webhook cases: delivery lag under a steady import and one
    /// subscription's throughput, beside a poller, on sled and PostgreSQL.
    #[arg(long)]
    webhooks_only: bool,
    /// Only what authentication and the audit trail cost: get-by-id with
    /// the audit trail on and off, with an API key and an access token.
    #[arg(long)]
    credentials_only: bool,
    /// Only exports: every finding exported against the list walked, on
    /// sled and PostgreSQL, with the host's memory.
    #[arg(long)]
    exports_only: bool,
    /// Only the component boundary without HTTP: the server's calls in a
    /// loop, components against the native baseline (sled data set).
    #[arg(long)]
    boundary_only: bool,
    /// With `--boundary-only`: only the operations whose name contains this.
    #[arg(long)]
    boundary_case: Option<String>,
}

/// One measured case: its name, its target, and its samples.
struct Case {
    name: &'static str,
    target: &'static str,
    samples: Vec<Duration>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Made before anything inside it: `esr seed` would make it private to
    // this user, and a PostgreSQL cluster under it runs as its own user.
    std::fs::create_dir_all(&args.out)?;
    std::fs::set_permissions(&args.out, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    if args.host_report_only {
        let report = bench_host_report_import(&args)?;
        return print_and_keep(&args.out, "host-report-report.txt", &report);
    }
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
    if args.webhooks_only {
        let report = bench_webhooks(&args)?;
        return print_and_keep(&args.out, "webhooks-report.txt", &report);
    }
    if args.hosts_only {
        let report = bench_hosts(&args)?;
        return print_and_keep(&args.out, "hosts-report.txt", &report);
    }
    let data_dir = args.out.join(format!("data-{}x{}", args.endpoints, args.findings_per_endpoint));
    let key = ensure_data(&args, &data_dir)?;
    warm_page_cache(&data_dir)?;
    if args.boundary_only {
        let report = bench_boundary(&args, &data_dir)?;
        return print_and_keep(&args.out, "boundary-report.txt", &report);
    }
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
    if args.credentials_only {
        let report = bench_credentials(&args, &data_dir, &key)?;
        return print_and_keep(&args.out, "credentials-report.txt", &report);
    }
    if args.exports_only {
        let report = bench_exports(&args, &data_dir, &key)?;
        return print_and_keep(&args.out, "exports-report.txt", &report);
    }
    let server = start_server(&data_dir, &args.plugins_dir)?;
    let mut client = ApiClient::connect(&server.base, &key)?;
    let mut get = |path: &str| client.get(path);

    // What to ask for: ids from the data set itself.
    let (_, findings) = get("/v1/vulnerability-findings?limit=100")?;
    let total_findings = findings["total"].as_u64().unwrap_or_default();
    let (_, endpoints) = get("/v1/endpoints?limit=100")?;
    let endpoint_ids = data::ids_of_page(&endpoints);
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
    if !args.reads_only {
        report.push_str(&bench_growth(&args, &full)?);
        report.push_str(&bench_wide_lists(&args, &data_dir, &key)?);
        report.push_str(&bench_summaries(&args, &data_dir, &key)?);
    }
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
        report.push_str(&bench_credentials(&args, &data_dir, &key)?);
    }
    if !args.reads_only {
        if args.import_findings > 0 {
            report.push_str(&bench_import(&args)?);
        }
        report.push_str(&bench_report_import(&args)?);
        if args.host_report_hosts > 0 {
            report.push_str(&bench_host_report_import(&args)?);
        }
        report.push_str(&bench_backends(&args, &data_dir, &key)?);
        report.push_str(&bench_exports(&args, &data_dir, &key)?);
        report.push_str(&bench_hosts(&args)?);
        report.push_str(&bench_webhooks(&args)?);
    }
    print!("{report}");
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("report.txt"), &report)?;
    Ok(())
}
