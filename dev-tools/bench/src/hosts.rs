//! Several hosts over PostgreSQL: that part's run order, and two hosts
//! against one under load.

use anyhow::bail;

use crate::Args;
use crate::data::sample_ids;
use crate::http::ApiClient;
use crate::load::{Failures, Load, median_load, wrk_at_once};
use crate::postgres::{bench_cluster, ensure_postgres_data, postmaster_pid, seeded_key, warm_page_cache_under};
use crate::replica::replica_against_primary;
use crate::server::start_server_in_mode;
use crate::stats::median;
use crate::system::{cpu_seconds, load_average, parent_pid};

/// Several hosts over PostgreSQL: two hosts against one under load on the
/// main data set, then a host reading a streaming replica against one
/// reading the primary.
pub(crate) fn bench_hosts(args: &Args) -> anyhow::Result<String> {
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
