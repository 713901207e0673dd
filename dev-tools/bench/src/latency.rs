//! Latency measurements beyond the main table: list latency by data size,
//! wide lists, and summaries.

use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use rand::{Rng, SeedableRng};

use crate::Args;
use crate::data::{ensure_data_of, ensure_data_with_scopes, warm_page_cache};
use crate::http::ApiClient;
use crate::report::latency_row;
use crate::server::start_server;
use crate::stats::{ms, percentile};

/// How list latency grows with the data: the same list cases on 10,000 and
/// 100,000 findings (100 per endpoint), beside the full data set's p50s.
pub(crate) fn bench_growth(args: &Args, full: &[(&str, f64)]) -> anyhow::Result<String> {
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
pub(crate) fn bench_wide_lists(args: &Args, data_dir: &Path, key: &str) -> anyhow::Result<String> {
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
pub(crate) fn bench_summaries(args: &Args, data_dir: &Path, key: &str) -> anyhow::Result<String> {
    const TARGET: &str = "p50 < 5 ms";
    let server = start_server(data_dir, &args.plugins_dir)?;
    let mut client = ApiClient::connect(&server.base, key)?;
    let (_, endpoints) = client.get("/v1/endpoints?limit=100")?;
    let endpoint_ids = crate::data::ids_of_page(&endpoints);
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
