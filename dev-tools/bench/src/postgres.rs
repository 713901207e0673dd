//! The benchmark's PostgreSQL clusters and the data sets loaded into them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};
use esr_pg_cluster::{Cluster, Durability};
use serde_json::Value;

use crate::Args;
use crate::data::warm_page_cache;
use crate::server::esr_binary;

/// The benchmark's PostgreSQL cluster, in `<out>/postgres` and kept between
/// runs like the generated data sets, with PostgreSQL's defaults (`fsync`,
/// `synchronous_commit` and `full_page_writes` on: the import is measured
/// durable) but for its shared buffers, which are as large as sled's page
/// cache: both backends compared with the same memory for their caches.
pub(crate) fn bench_cluster(args: &Args) -> anyhow::Result<Cluster> {
    Ok(Cluster::persistent_with(&args.out.join("postgres"), Durability::Durable, &[shared_buffers_as_sled()])?)
}

/// `shared_buffers` of the size of sled's page cache.
fn shared_buffers_as_sled() -> String {
    format!("shared_buffers={}kB", esr_store_sled::CACHE_CAPACITY / 1024)
}

/// The main data set (`esr seed`, same generator and sizes as the sled
/// one) in a database of the cluster, loaded once and kept; returns the
/// host's data directory (its key file, the compile cache) and the URL.
pub(crate) fn ensure_postgres_data(args: &Args, cluster: &Cluster) -> anyhow::Result<(PathBuf, String)> {
    let data_dir = args.out.join(format!("postgres-host-{}x{}", args.endpoints, args.findings_per_endpoint));
    let url = ensure_postgres_data_of(cluster, args.endpoints, args.findings_per_endpoint, &data_dir)?;
    Ok((data_dir, url))
}

/// The data set of this size in database `bench_<endpoints>x<findings per
/// endpoint>` of `cluster`, loaded once, with its host's data directory
/// (which holds the key) in `data_dir`; returns the database's URL.
pub(crate) fn ensure_postgres_data_of(
    cluster: &Cluster,
    endpoints: usize,
    findings_per_endpoint: usize,
    data_dir: &Path,
) -> anyhow::Result<String> {
    let name = format!("bench_{endpoints}x{findings_per_endpoint}");
    let url = cluster.url(&name);
    if !data_dir.join(esr_demo::seed::SEED_KEYS_FILE).exists() {
        eprintln!("loading the data set into PostgreSQL database {name} (once; it is kept)");
        if data_dir.exists() {
            std::fs::remove_dir_all(data_dir)?;
        }
        cluster.execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
        cluster.execute(&format!("CREATE DATABASE {name}"))?;
        // Loading the read data set need not wait for each commit's flush;
        // the setting is reset before anything is measured.
        cluster.execute(&format!("ALTER DATABASE {name} SET synchronous_commit = off"))?;
        let status = Command::new(esr_binary()?)
            .args(["seed", "--endpoints", &endpoints.to_string()])
            .args(["--findings-per-endpoint", &findings_per_endpoint.to_string()])
            .args(["--database", &url, "--data-dir"])
            .arg(data_dir)
            .status()?;
        if !status.success() {
            bail!("esr seed --database failed");
        }
        cluster.execute(&format!("ALTER DATABASE {name} RESET synchronous_commit"))?;
        // Statistics and visibility maps, as autovacuum would leave them.
        cluster.config(&name).connect(postgres::NoTls)?.batch_execute("VACUUM ANALYZE")?;
        cluster.execute("CHECKPOINT")?;
    }
    Ok(url)
}

/// [`warm_page_cache`] for every file under `dir` (a PostgreSQL cluster's
/// databases, as the sled data set's files are warmed).
pub(crate) fn warm_page_cache_under(dir: &Path) -> anyhow::Result<()> {
    warm_page_cache(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            warm_page_cache_under(&path)?;
        }
    }
    Ok(())
}

/// The key `esr seed` wrote into `data_dir`.
pub(crate) fn seeded_key(data_dir: &Path) -> anyhow::Result<String> {
    let keys_file = data_dir.join(esr_demo::seed::SEED_KEYS_FILE);
    let keys: Value = serde_json::from_slice(&std::fs::read(&keys_file)?)?;
    keys["organizations"][0]["api_key"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no key in {}", keys_file.display()))
}

pub(crate) fn postgres_version(cluster: &Cluster) -> anyhow::Result<String> {
    let row = cluster.config("postgres").connect(postgres::NoTls)?.query_one("SHOW server_version", &[])?;
    Ok(row.get(0))
}

/// The cluster's server process (the parent of its backends).
pub(crate) fn postmaster_pid(cluster: &Cluster) -> anyhow::Result<u32> {
    let file = cluster.data_dir().join("postmaster.pid");
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    text.lines().next().and_then(|line| line.trim().parse().ok()).ok_or_else(|| anyhow!("no pid in {}", file.display()))
}
