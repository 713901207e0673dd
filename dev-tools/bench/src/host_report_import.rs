//! A large host scanner report: a real Nessus report's host repeated as
//! `--host-report-hosts` distinct hosts of 50 findings each, imported
//! through the admin listener on sled and on PostgreSQL; time, the server's
//! CPU and its peak resident memory against its memory at rest.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use reqwest::blocking::Client;
use serde_json::Value;

use crate::Args;
use crate::postgres::bench_cluster;
use crate::server::start_server_in_mode;
use crate::system::{PeakMemory, cpu_seconds, resident_mib};

/// The real report repeated: a credentialed scan, so its findings are OS
/// packages as well as services.
const REPEATED_REPORT: &str = "nessus/python-libnessus_centos63-credentialed-pci.nessus";
/// Findings per host.
const FINDINGS_PER_HOST: usize = 50;

/// The report's one host, its properties renamed per copy, holding
/// items that make 50 findings (severity above 0, one per package named), repeated as
/// `hosts` hosts (`bench-host-<n>.lab.example`, 10.x.y.z).
fn repeated_nessus_report(reports_dir: &Path, hosts: usize) -> anyhow::Result<Vec<u8>> {
    let path = reports_dir.join(REPEATED_REPORT);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let host_start = text.find("<ReportHost ").ok_or_else(|| anyhow!("{}: no ReportHost", path.display()))?;
    let host_end = text.rfind("</ReportHost>").ok_or_else(|| anyhow!("{}: no </ReportHost>", path.display()))?
        + "</ReportHost>".len();
    let host = &text[host_start..host_end];
    let properties_end =
        host.find("</HostProperties>").ok_or_else(|| anyhow!("no HostProperties"))? + "</HostProperties>".len();
    // A local check makes one finding per package it names: items are taken
    // while they fit, so that each host makes exactly 50 findings.
    let mut items: Vec<&str> = Vec::new();
    let mut findings = 0;
    for item in host[properties_end..].split("<ReportItem ").skip(1) {
        let item = item.trim_end().trim_end_matches("</ReportHost>");
        let makes = item.matches("Remote package installed : ").count().max(1);
        if !item.contains("severity=\"0\"") && findings + makes <= FINDINGS_PER_HOST {
            items.push(item);
            findings += makes;
        }
    }
    if findings < FINDINGS_PER_HOST {
        bail!("{}: {findings} findings, fewer than {FINDINGS_PER_HOST}", path.display());
    }
    let properties = &host[..properties_end];
    let mut body =
        String::with_capacity(hosts * (properties.len() + items.iter().map(|i| i.len() + 12).sum::<usize>()));
    body.push_str(&text[..host_start]);
    for index in 0..hosts {
        let ip = format!("10.{}.{}.{}", index / 65_536 % 256, index / 256 % 256, index % 256);
        let name = format!("bench-host-{index}.lab.example");
        let renamed = properties
            .replace("name=\"127.0.0.1\"", &format!("name=\"{ip}\""))
            .replace(">127.0.0.1<", &format!(">{ip}<"))
            .replace(">python-dev<", &format!(">{name}<"));
        body.push_str(&renamed);
        for item in &items {
            body.push_str("<ReportItem ");
            body.push_str(item);
            body.push('\n');
        }
        body.push_str("</ReportHost>\n");
    }
    body.push_str(&text[host_end..]);
    Ok(body.into_bytes())
}

/// One import measured: wall time, server CPU, peak RSS − rest, and the
/// answer.
struct Measured {
    seconds: f64,
    cpu: f64,
    growth_mib: f64,
    outcome: Value,
}

fn import_measured(admin: &str, token: &str, organization: &str, body: &[u8], pid: u32) -> anyhow::Result<Measured> {
    let client = Client::builder().timeout(Duration::from_secs(1800)).build()?;
    let at_rest = resident_mib(pid);
    let memory = PeakMemory::start(pid);
    let cpu_before = cpu_seconds(|p| p == pid);
    let started = Instant::now();
    let response = client
        .post(format!("{admin}/admin/v1/organizations/{organization}/reports?format=nessus"))
        .bearer_auth(token)
        .body(body.to_vec())
        .send()?;
    let status = response.status();
    let outcome: Value = response.json()?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(|p| p == pid) - cpu_before;
    let peak = memory.stop()?;
    if !status.is_success() {
        bail!("the host report was refused: {status} {outcome}");
    }
    Ok(Measured { seconds, cpu, growth_mib: peak - at_rest, outcome })
}

/// The large Nessus report on sled and on PostgreSQL: imported into a new
/// organization, then again (nothing changes).
pub(crate) fn bench_host_report_import(args: &Args) -> anyhow::Result<String> {
    let hosts = args.host_report_hosts;
    let findings = hosts * FINDINGS_PER_HOST;
    let body = repeated_nessus_report(&args.scanner_reports_dir, hosts)?;
    let cluster = bench_cluster(args)?;
    const DATABASE: &str = "bench_host_report";
    cluster.execute(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))?;
    cluster.execute(&format!("CREATE DATABASE {DATABASE}"))?;
    let url = cluster.url(DATABASE);
    let mebibytes = (body.len() >> 20) + 16;
    let limits = [
        format!("--import-max-findings={findings}"),
        format!("--import-max-mib={mebibytes}"),
        // One call converts the whole report.
        "--importer-deadline-ms=300000".to_owned(),
    ];
    let mut report = format!(
        "\nhost scanner report import: {REPEATED_REPORT}'s host as {hosts} hosts × {FINDINGS_PER_HOST} findings \
         ({findings} findings, {:.1} MiB), through the admin listener\n\
         {:<10} {:<12} {:>10} {:>14} {:>12} {:>22}\n",
        body.len() as f64 / f64::from(1 << 20),
        "backend",
        "import",
        "seconds",
        "findings/s",
        "server CPU s",
        "peak RSS − rest (MiB)"
    );
    for (backend, database) in [("sled", None), ("postgres", Some(url.as_str()))] {
        let data_dir = args.out.join(format!("host-report-{backend}"));
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir)?;
        }
        let mut flags: Vec<&str> = limits.iter().map(String::as_str).collect();
        if let Some(url) = database {
            flags.extend(["--database", url]);
        }
        let (server, admin) = start_server_in_mode(&data_dir, &args.plugins_dir, &flags)?;
        let token = std::fs::read_to_string(data_dir.join("admin-token"))?;
        let created: Value = Client::new()
            .post(format!("{admin}/admin/v1/organizations"))
            .bearer_auth(token.trim())
            .json(&serde_json::json!({"name": "Host report benchmark"}))
            .send()?
            .json()?;
        let organization =
            created["organization_id"].as_str().ok_or_else(|| anyhow!("no organization: {created}"))?.to_owned();
        let pid = server.child.id();
        let first = import_measured(&admin, token.trim(), &organization, &body, pid)?;
        if first.outcome["created"].as_u64() != Some(findings as u64)
            || first.outcome["endpoints_created"].as_u64() != Some(hosts as u64)
        {
            bail!("the first import did not create every finding and endpoint: {}", first.outcome);
        }
        let again = import_measured(&admin, token.trim(), &organization, &body, pid)?;
        if again.outcome["unchanged"].as_u64() != Some(findings as u64) {
            bail!("the re-import changed something: {}", again.outcome);
        }
        for (name, measured) in [("first", &first), ("re-import", &again)] {
            report.push_str(&format!(
                "{:<10} {:<12} {:>10.1} {:>14.0} {:>12.1} {:>22.1}\n",
                backend,
                name,
                measured.seconds,
                findings as f64 / measured.seconds.max(1e-9),
                measured.cpu,
                measured.growth_mib
            ));
        }
        drop(server);
        std::fs::remove_dir_all(&data_dir)?;
    }
    cluster.execute(&format!("DROP DATABASE {DATABASE} WITH (FORCE)"))?;
    report.push_str(
        "bound: the import's memory is the --import-max-findings plan (about 50 KiB a finding, docs/scanner-reports.md) \
         plus the importer's cap (--importer-memory-mib, 512 MiB)\n",
    );
    Ok(report)
}
