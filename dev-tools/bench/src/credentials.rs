//! What authentication and the audit trail cost: get-by-id under load
//! (wrk) with an API key and the audit trail on, with it off, and with an
//! access token, the three alternating round by round on the same data.

use std::path::Path;

use anyhow::{Context, anyhow};
use serde_json::{Value, json};

use crate::Args;
use crate::load::{Load, median_load, wrk};
use crate::server::start_server_in_mode;

const ROUNDS: usize = 3;

/// An access token for the organization of `key`, from a client made
/// through the admin listener.
fn access_token(base: &str, admin: &str, data_dir: &Path, key: &str) -> anyhow::Result<String> {
    let client = reqwest::blocking::Client::new();
    let admin_token = std::fs::read_to_string(data_dir.join("admin-token")).context("the admin token")?;
    let organization = client
        .get(format!("{base}/v1/agent/config?platform=linux"))
        .bearer_auth(key)
        .send()?
        .json::<Value>()?["organization_id"]
        .as_str()
        .ok_or_else(|| anyhow!("no organization for the key"))?
        .to_owned();
    let made: Value = client
        .post(format!("{admin}/admin/v1/clients"))
        .bearer_auth(admin_token.trim())
        .json(&json!({"organization_id": organization, "name": "bench", "scopes": ["findings:read"]}))
        .send()?
        .error_for_status()?
        .json()?;
    let issued: Value = client
        .post(format!("{base}/oauth2/token"))
        .basic_auth(made["client_id"].as_str().unwrap_or_default(), made["client_secret"].as_str())
        .form(&[("grant_type", "client_credentials")])
        .send()?
        .error_for_status()?
        .json()?;
    issued["access_token"].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no access token"))
}

/// get-by-id: audit on with a key, audit off with a key, audit on with a
/// token; req/s medians and the two ratios the issue sets targets for.
pub(crate) fn bench_credentials(args: &Args, data_dir: &Path, key: &str) -> anyhow::Result<String> {
    let finding_path = {
        let (server, _) = start_server_in_mode(data_dir, &args.plugins_dir, &[])?;
        let page: Value = reqwest::blocking::Client::new()
            .get(format!("{}/v1/vulnerability-findings?limit=1", server.base))
            .bearer_auth(key)
            .send()?
            .json()?;
        let id = page["data"][0]["id"].as_str().ok_or_else(|| anyhow!("the data set has no findings"))?;
        format!("/v1/vulnerability-findings/{id}")
    };
    let modes: [(&str, &[&str], bool); 3] = [
        ("API key, audit trail on", &[], false),
        ("API key, audit trail off", &["--no-audit-trail"], false),
        ("access token, audit trail on", &[], true),
    ];
    let mut runs: Vec<Vec<Load>> = modes.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (mode, (_, flags, with_token)) in modes.iter().enumerate() {
            let (server, admin) = start_server_in_mode(data_dir, &args.plugins_dir, flags)?;
            std::thread::sleep(std::time::Duration::from_secs(1));
            let credential =
                if *with_token { access_token(&server.base, &admin, data_dir, key)? } else { key.to_owned() };
            let url = format!("{}{finding_path}", server.base);
            runs[mode].push(wrk(&url, &credential, args.load_seconds, server.child.id())?);
        }
    }
    let loads: Vec<Load> = runs.iter().map(|loads| median_load(loads)).collect();
    let mut report = format!(
        "\ncredentials and the audit trail: finding by id, wrk -t2 -c32 -d{}s, the three modes alternating, \
         medians of {ROUNDS} rounds\n{:<32} {:>9} {:>9} {:>9}\n",
        args.load_seconds, "mode", "req/s", "p50 ms", "p99 ms"
    );
    for ((name, _, _), load) in modes.iter().zip(&loads) {
        report.push_str(&format!(
            "{:<32} {:>9.0} {:>9.2} {:>9.2}\n",
            name, load.requests_per_second, load.p50_ms, load.p99_ms
        ));
    }
    let ratio = |a: &Load, b: &Load| a.requests_per_second / b.requests_per_second.max(f64::EPSILON);
    report.push_str(&format!(
        "audit trail on ÷ off: {:.3} (target ≥ 0.9); access token ÷ API key: {:.3} (target ≥ 0.95)\n",
        ratio(&loads[0], &loads[1]),
        ratio(&loads[2], &loads[0])
    ));
    Ok(report)
}
