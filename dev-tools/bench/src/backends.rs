//! sled and PostgreSQL side by side on the same data: latencies with the
//! backends alternating, and wrk runs on each.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::Args;
use crate::data::{sample_ids, warm_page_cache};
use crate::http::ApiClient;
use crate::load::{Load, median_load, wrk};
use crate::postgres::{bench_cluster, ensure_postgres_data, postgres_version, seeded_key, warm_page_cache_under};
use crate::postgres_import::bench_import_postgres;
use crate::server::{Server, start_server_in_mode};
use crate::stats::{ms, percentile};
use crate::system::resident_mib;

/// The latency cases of the main loop, with their targets, as the backend
/// comparison measures them (see [`latency_paths`]).
const BACKEND_CASES: [(&str, &str); 14] = [
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
    ("summary groupBy=severity, minCvss=9 & first seen in its last week", "p50 < 50 ms"),
    ("finding by id after 35 ms idle", ""),
];

/// The case asked after a pause, in which both servers and the database
/// idle: what a request costs that wakes them.
const AFTER_IDLE: usize = BACKEND_CASES.len() - 1;

/// The pause before [`AFTER_IDLE`]: longer than the others' requests.
const IDLE_PAUSE: Duration = Duration::from_millis(35);

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
    /// A summary of two ranges: critical and new in the data's last week.
    critical_and_new: String,
}

impl Backend {
    fn start(&self, plugins_dir: &Path) -> anyhow::Result<(Server, String)> {
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        start_server_in_mode(&self.data_dir, plugins_dir, &flags)
    }
}

/// A dashboard's summary of two ranges, critical and new this week: from
/// the data's newest first sighting.
fn critical_and_new(client: &mut ApiClient) -> anyhow::Result<String> {
    let (_, newest) = client.get("/v1/vulnerability-findings?sort=-first_seen_at&limit=1")?;
    let instant = |page: &Value| {
        page["data"][0]["first_seen_at"].as_str().and_then(esr_contract::time::Timestamp::parse).map_or(0, |t| t.0)
    };
    let newest = instant(&newest);
    let week_before = esr_contract::time::Timestamp(newest - 7 * 86_400 * 1_000_000_000).format();
    Ok(format!("/v1/vulnerability-findings/summary?groupBy=severity&minCvss=9&firstSeenAfter={week_before}"))
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
fn latency_paths(backend: &Backend, finding: &str, endpoint: &str) -> [String; BACKEND_CASES.len()] {
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
        backend.critical_and_new.clone(),
        format!("/v1/vulnerability-findings/{finding}"),
    ]
}

/// sled and PostgreSQL on the same generated data in one run: every
/// latency case with the backends alternating round by round, every wrk
/// case with the backends alternating round by round (with the host's
/// memory), and the import into PostgreSQL beside that engine's own
/// ceiling; PostgreSQL ÷ sled for each.
pub(crate) fn bench_backends(args: &Args, sled_dir: &Path, sled_key: &str) -> anyhow::Result<String> {
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
            critical_and_new: String::new(),
        },
        Backend {
            name: "postgres",
            data_dir: postgres_dir.clone(),
            flags: vec!["--database".to_owned(), url.clone()],
            key: seeded_key(&postgres_dir)?,
            page_1000: String::new(),
            wide_sync: String::new(),
            critical_and_new: String::new(),
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
        backend.critical_and_new = critical_and_new(&mut client)?;
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
        let paths: Vec<[String; BACKEND_CASES.len()]> =
            backends.iter().map(|backend| latency_paths(backend, finding, endpoint)).collect();
        // An untimed read first: `health` reads no store, so a finding by
        // id, the case after it, followed the previous round's idle case,
        // the database idle through its pause, which no other case does.
        let warm = &finding_ids[rng.gen_range(0..finding_ids.len())];
        for turn in 0..backends.len() {
            let index = (turn + round) % backends.len();
            servers[index].1.get(&format!("/v1/vulnerability-findings/{warm}"))?;
        }
        // Case by case, the backends in turn (which goes first alternates),
        // so each request follows the other backend's request of the same
        // case: both idle alike before every case. Asked as one backend's
        // run of all cases, its first statement followed the other's whole
        // run, which its database idled through and sled's in-process reads
        // do not notice (docs/performance.md).
        for case in 0..BACKEND_CASES.len() {
            for turn in 0..backends.len() {
                let index = (turn + round + case) % backends.len();
                if case == AFTER_IDLE {
                    std::thread::sleep(IDLE_PAUSE);
                }
                let elapsed = servers[index].1.get(&paths[index][case])?.0;
                if round >= 10 {
                    samples[index][case].push(elapsed);
                }
            }
        }
    }
    drop(servers);
    let mut report = format!(
        "\nsled and PostgreSQL on the same data ({} endpoints × {} findings; PostgreSQL {} in {}, \
         fsync on, shared buffers as large as sled's page cache: {} MiB); latency: {} rounds, cases \
         interleaved, backends alternating request by request\n\
         {:<44} {:>9} {:>9} {:>9} {:>9} {:>9}  target\n",
        args.endpoints,
        args.findings_per_endpoint,
        postgres_version(&cluster)?,
        cluster.data_dir().display(),
        esr_store_sled::CACHE_CAPACITY >> 20,
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
