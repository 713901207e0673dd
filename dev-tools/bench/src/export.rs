//! Exports against walking the list: every finding of the data set read
//! once by `GET /v1/vulnerability-findings/export` and once by following
//! the list's cursors at its largest page, on sled and on PostgreSQL, the
//! two ways and the two backends alternating round by round; records per
//! second, and the host's resident memory at rest and at its peak while
//! the export streams.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::Args;
use crate::postgres::{bench_cluster, ensure_postgres_data, seeded_key};
use crate::server::start_server_in_mode;
use crate::stats::median;
use crate::system::{PeakMemory, resident_mib};

const ROUNDS: usize = 2;
/// The list's largest page.
const LIST_LIMIT: usize = 100;

/// One way of reading everything, measured once.
struct Reading {
    records: u64,
    seconds: f64,
    peak_mib: f64,
}

/// Reads the whole export, sampling the server's resident memory meanwhile.
fn export_all(base: &str, key: &str, server_pid: u32) -> anyhow::Result<Reading> {
    let memory = PeakMemory::start(server_pid);
    let client = reqwest::blocking::Client::builder().timeout(None).build()?;
    let started = Instant::now();
    let mut response =
        client.get(format!("{base}/v1/vulnerability-findings/export")).bearer_auth(key).send()?.error_for_status()?;
    let mut buffer = vec![0u8; 1 << 20];
    let (mut lines, mut tail) = (0u64, Vec::new());
    loop {
        let read = response.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        lines += buffer[..read].iter().filter(|byte| **byte == b'\n').count() as u64;
        // The last line, to check the stream ended whole.
        tail.extend_from_slice(&buffer[..read]);
        if tail.len() > 4096 {
            tail.drain(..tail.len() - 4096);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let peak_mib = memory.stop()?;
    let text = String::from_utf8_lossy(&tail);
    let last: Value = serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap_or_default())
        .context("the export's last line")?;
    let records = last["count"].as_u64().ok_or_else(|| anyhow!("the export did not end whole"))?;
    if records + 1 != lines {
        bail!("the export counted {records} records in {lines} lines");
    }
    Ok(Reading { records, seconds, peak_mib })
}

/// Reads every finding by following the list's cursors.
fn list_all(base: &str, key: &str) -> anyhow::Result<Reading> {
    let client = reqwest::blocking::Client::new();
    let started = Instant::now();
    let mut records = 0u64;
    let mut path = format!("/v1/vulnerability-findings?limit={LIST_LIMIT}");
    loop {
        let page: Value = client.get(format!("{base}{path}")).bearer_auth(key).send()?.error_for_status()?.json()?;
        records += page["data"].as_array().map_or(0, Vec::len) as u64;
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/vulnerability-findings?limit={LIST_LIMIT}&cursor={cursor}"),
            None => break,
        }
    }
    Ok(Reading { records, seconds: started.elapsed().as_secs_f64(), peak_mib: 0.0 })
}

/// The export against the list walk on both backends.
pub(crate) fn bench_exports(args: &Args, sled_dir: &Path, sled_key: &str) -> anyhow::Result<String> {
    let cluster = bench_cluster(args)?;
    let (postgres_dir, url) = ensure_postgres_data(args, &cluster)?;
    let backends: [(&str, PathBuf, Vec<String>, String); 2] = [
        ("sled", sled_dir.to_path_buf(), Vec::new(), sled_key.to_owned()),
        ("postgres", postgres_dir.clone(), vec!["--database".to_owned(), url], seeded_key(&postgres_dir)?),
    ];
    // Per backend: export rates, list rates, memory at rest, peak memory.
    let mut exports: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut lists: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut growth: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut cold_growth: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut counted = [0u64; 2];
    for _ in 0..ROUNDS {
        for (index, (_, data_dir, flags, key)) in backends.iter().enumerate() {
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let (server, _) = start_server_in_mode(data_dir, &args.plugins_dir, &flags)?;
            std::thread::sleep(Duration::from_secs(1));
            let at_start = resident_mib(server.child.id());
            // The first export fills the store's own page cache (sled's is
            // 256 MiB), which then stays at its size whatever is read: rest
            // is measured after it, so the growth is the export's own.
            let first = export_all(&server.base, key, server.child.id())?;
            cold_growth[index].push(first.peak_mib - at_start);
            std::thread::sleep(Duration::from_secs(1));
            let at_rest = resident_mib(server.child.id());
            let export = export_all(&server.base, key, server.child.id())?;
            let list = list_all(&server.base, key)?;
            if export.records != list.records {
                bail!("the export gave {} findings, the list {}", export.records, list.records);
            }
            counted[index] = export.records;
            exports[index].push(export.records as f64 / export.seconds);
            lists[index].push(list.records as f64 / list.seconds);
            growth[index].push(export.peak_mib - at_rest);
        }
    }
    let mut report = format!(
        "\nexports: every finding by GET /v1/vulnerability-findings/export against walking the list \
         (limit={LIST_LIMIT}, cursors), backends alternating, medians of {ROUNDS} rounds\n\
         {:<10} {:>10} {:>14} {:>14} {:>14} {:>22} {:>28}\n",
        "backend",
        "findings",
        "export rec/s",
        "list rec/s",
        "export÷list",
        "peak RSS − rest (MiB)",
        "first export: peak − start"
    );
    for (index, (name, _, _, _)) in backends.iter().enumerate() {
        let (export, list) = (median(exports[index].clone()), median(lists[index].clone()));
        report.push_str(&format!(
            "{:<10} {:>10} {:>14.0} {:>14.0} {:>14.2} {:>22.1} {:>28.1}\n",
            name,
            counted[index],
            export,
            list,
            export / list.max(f64::EPSILON),
            growth[index].iter().copied().fold(0.0, f64::max),
            cold_growth[index].iter().copied().fold(0.0, f64::max)
        ));
    }
    report.push_str(
        "targets: export ≥ 50,000 records/s on each backend; peak RSS within 64 MiB of rest \
         (rest: after a first export has filled the store's page cache, sled's 256 MiB; the last column \
         is that first export's growth from a fresh start)\n",
    );
    Ok(report)
}
