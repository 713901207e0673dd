//! The generated data sets: made once with `esr seed` and kept, read into
//! the page cache before measuring, and ids picked from them.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::Args;
use crate::http::ApiClient;
use crate::server::esr_binary;

pub(crate) fn ensure_data(args: &Args, data_dir: &Path) -> anyhow::Result<String> {
    ensure_data_of(args.endpoints, args.findings_per_endpoint, data_dir)
}

/// The data set of this size in `data_dir`, generated once; its key.
pub(crate) fn ensure_data_of(
    endpoints: usize,
    findings_per_endpoint: usize,
    data_dir: &Path,
) -> anyhow::Result<String> {
    ensure_data_with_scopes(endpoints, findings_per_endpoint, 0, data_dir)
}

/// The same, with `scopes` scopes beyond the organization's own.
pub(crate) fn ensure_data_with_scopes(
    endpoints: usize,
    findings_per_endpoint: usize,
    scopes: usize,
    data_dir: &Path,
) -> anyhow::Result<String> {
    let keys_file = data_dir.join("seed-keys.json");
    if !keys_file.exists() {
        if data_dir.exists() {
            std::fs::remove_dir_all(data_dir).with_context(|| format!("clearing {}", data_dir.display()))?;
        }
        eprintln!("generating the data set in {} (once; it is kept)", data_dir.display());
        let status = Command::new(esr_binary()?)
            .args(["seed", "--endpoints", &endpoints.to_string()])
            .args(["--findings-per-endpoint", &findings_per_endpoint.to_string()])
            .args(["--scopes", &scopes.to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .status()?;
        if !status.success() {
            bail!("esr seed failed");
        }
    }
    let keys: Value = serde_json::from_slice(&std::fs::read(&keys_file)?)?;
    keys["organizations"][0]["api_key"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no key in {}", keys_file.display()))
}

/// Reads the data set's files once, so that the operating system's cache
/// holds them and the figures do not depend on what ran before (a cold
/// cache turns record reads into disk reads).
pub(crate) fn warm_page_cache(data_dir: &Path) -> anyhow::Result<()> {
    use std::io::Read;
    let mut buffer = vec![0u8; 1 << 20];
    for entry in std::fs::read_dir(data_dir)? {
        let path = entry?.path();
        if path.is_file() {
            let mut file = std::fs::File::open(&path)?;
            while file.read(&mut buffer)? > 0 {}
        }
    }
    Ok(())
}

/// Up to 100 endpoint ids and the ids of the findings of 20 of them.
pub(crate) fn sample_ids(client: &mut ApiClient) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let ids = |page: &Value| -> Vec<String> {
        page["data"].as_array().into_iter().flatten().filter_map(|r| r["id"].as_str().map(str::to_owned)).collect()
    };
    let endpoint_ids = ids(&client.get("/v1/endpoints?limit=100")?.1);
    let mut finding_ids = Vec::new();
    for endpoint in endpoint_ids.iter().take(20) {
        finding_ids.extend(ids(&client.get(&format!("/v1/vulnerability-findings?endpointId={endpoint}&limit=100"))?.1));
    }
    if endpoint_ids.is_empty() || finding_ids.is_empty() {
        bail!("the data set has no endpoints or findings");
    }
    Ok((finding_ids, endpoint_ids))
}

/// The ids of a list page's records.
pub(crate) fn ids_of_page(page: &serde_json::Value) -> Vec<String> {
    page["data"].as_array().into_iter().flatten().filter_map(|e| e["id"].as_str().map(str::to_owned)).collect()
}
