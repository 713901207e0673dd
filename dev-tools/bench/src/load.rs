//! The load generators: wrk runs and the paced (fixed-rate) client, what
//! they measured, and the server's peak memory meanwhile.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use crate::http::{get_request, read_response};
use crate::stats::{ms, percentile};
use crate::system::resident_mib;

/// The median of each figure over several runs.
pub(crate) fn median_load(loads: &[Load]) -> Load {
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
pub(crate) struct Load {
    pub(crate) requests_per_second: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// Peak resident memory of the server while it ran.
    pub(crate) peak_rss_mib: f64,
    /// Requests answered other than 2xx or 3xx, or not at all (wrk's
    /// socket errors, timeouts after 2 s included).
    pub(crate) failed_requests: u64,
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
pub(crate) fn wrk(url: &str, key: &str, seconds: u64, server_pid: u32) -> anyhow::Result<Load> {
    let mut loads = wrk_at_once(&[(url.to_owned(), server_pid)], key, seconds, 2, 32, Failures::Refused)?;
    loads.pop().ok_or_else(|| anyhow!("wrk measured nothing"))
}

/// What a wrk run does with failed requests.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Failures {
    /// Any failed request fails the run.
    Refused,
    /// Failed requests are counted ([`Load::failed_requests`]).
    Counted,
}

/// One wrk process per `(url, server pid)`, all started together, each
/// with `threads` threads and `connections` connections for `seconds`,
/// each sampling its server's memory; what each measured, in order.
pub(crate) fn wrk_at_once(
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
pub(crate) const PEAK_SECONDS: u64 = 5;

/// wrk's peak on `url`, then [`paced`] at 80 % of it.
pub(crate) fn peak_then_paced(url: &str, key: &str, seconds: u64, server_pid: u32) -> anyhow::Result<(Load, Load)> {
    let peak = wrk(url, key, PEAK_SECONDS, server_pid)?;
    let load = paced(url, key, peak.requests_per_second * 0.8, seconds, server_pid)?;
    Ok((peak, load))
}

/// The run with the median paced p99, with its peak.
pub(crate) fn median_pair(runs: &[(Load, Load)]) -> (Load, Load) {
    let mut order: Vec<&(Load, Load)> = runs.iter().collect();
    order.sort_by(|a, b| a.1.p99_ms.total_cmp(&b.1.p99_ms));
    let (peak, load) = order[order.len() / 2];
    (peak.clone(), load.clone())
}
