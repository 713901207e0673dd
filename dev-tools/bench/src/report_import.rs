//! The scanner report import case: a real Trivy report, repeated to size,
//! imported end to end through the admin listener.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use reqwest::blocking::Client;
use serde_json::Value;

use crate::Args;
use crate::server::start_server_with_admin;
use crate::stats::percentile;
use crate::system::cpu_seconds;

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
pub(crate) fn bench_report_import(args: &Args) -> anyhow::Result<String> {
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
