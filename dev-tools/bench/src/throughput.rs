//! Throughput under load: each operation with the components against the
//! native baseline (wrk, then paced runs beside a reference responder).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::Args;
use crate::load::{Load, PEAK_SECONDS, median_load, median_pair, peak_then_paced, wrk};
use crate::server::start_server_in_mode;
use crate::stats::ms;
use crate::system::resident_mib;

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

/// Each operation under load (wrk, 32 connections) with the components
/// and with the native baseline, in one run: req/s, p50, p99, the Wasm ÷
/// native ratio, memory at rest and under load, and start times.
pub(crate) fn bench_throughput(
    args: &Args,
    data_dir: &Path,
    key: &str,
    operations: &[(&str, String)],
) -> anyhow::Result<String> {
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
