//! A host reading a streaming replica against one reading the primary,
//! with the replica's making and catching up.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use esr_pg_cluster::{Cluster, Durability};
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::Args;
use crate::data::sample_ids;
use crate::http::ApiClient;
use crate::postgres::{ensure_postgres_data_of, seeded_key, warm_page_cache_under};
use crate::server::start_server_in_mode;
use crate::stats::{ms, percentile};
use crate::system::load_average;

/// A replica is a whole copy of its cluster; at least this much must stay
/// free on the disk once it is made.
const FREE_AFTER_REPLICA: u64 = 6 << 30;

/// The latency cases of the replica comparison.
const REPLICA_CASES: [&str; 6] = [
    "health (HTTP floor, no component)",
    "finding by id",
    "findings?endpointId=… first page",
    "findings?severity=critical (exact total)",
    "findings page 1 (limit 50)",
    "findings?severity=critical&sort=-cvss",
];

/// The paths of [`REPLICA_CASES`] for one finding and endpoint.
fn replica_paths(finding: &str, endpoint: &str) -> [String; 6] {
    [
        "/v1/health".to_owned(),
        format!("/v1/vulnerability-findings/{finding}"),
        format!("/v1/vulnerability-findings?endpointId={endpoint}"),
        "/v1/vulnerability-findings?severity=critical".to_owned(),
        "/v1/vulnerability-findings?limit=50".to_owned(),
        "/v1/vulnerability-findings?severity=critical&sort=-cvss".to_owned(),
    ]
}

/// A host reading a streaming replica (`--database-replica-url`) against
/// the same host reading the primary, one client each, hosts alternating
/// round by round, on a data set in a cluster of its own
/// (`<out>/postgres-replicated`, `--replica-endpoints`) and its replica
/// (`<out>/postgres-replicated-standby`), both made once and kept; the
/// replica has caught up before anything is measured.
pub(crate) fn replica_against_primary(args: &Args) -> anyhow::Result<String> {
    let load_at_start = load_average();
    let (endpoints, per_endpoint) = (args.replica_endpoints, args.findings_per_endpoint);
    let primary = Cluster::persistent(&args.out.join("postgres-replicated"), Durability::Durable)?;
    // This cluster is loaded once and then only read: a write-ahead log
    // kept at the default `max_wal_size` (1 GB) after the load would be
    // most of its size on the disk.
    primary.execute("ALTER SYSTEM SET max_wal_size = '128MB'")?;
    primary.execute("SELECT pg_reload_conf()")?;
    let primary_dir = args.out.join(format!("postgres-replicated-host-{endpoints}x{per_endpoint}"));
    let url = ensure_postgres_data_of(&primary, endpoints, per_endpoint, &primary_dir)?;
    let database = format!("bench_{endpoints}x{per_endpoint}");
    let standby_dir = args.out.join("postgres-replicated-standby");
    if !standby_dir.join("data").join("PG_VERSION").exists() {
        // Said in the report rather than ending a run of all the other parts.
        if let Err(error) = ensure_room_for_copy(&primary.data_dir(), &args.out) {
            return Ok(format!(
                "\na host reading a streaming replica against one reading the primary: not measured: {error:#}\n"
            ));
        }
        eprintln!("making a streaming replica in {} (once; it is kept)", standby_dir.display());
    }
    let standby = primary.replica(&standby_dir, false)?;
    wait_for_catch_up(&primary, &standby)?;
    warm_page_cache_under(&primary.data_dir().join("base"))?;
    warm_page_cache_under(&standby.data_dir().join("base"))?;
    let key = seeded_key(&primary_dir)?;
    let replica_url = standby.url(&database);
    let (on_primary, _) = start_server_in_mode(&primary_dir, &args.plugins_dir, &["--database", &url])?;
    let (on_replica, _) = start_server_in_mode(
        &args.out.join("postgres-replicated-second-host"),
        &args.plugins_dir,
        &["--database", &url, "--database-replica-url", &replica_url],
    )?;
    wait_for_replica_up(&on_replica.base, &key)?;
    let mut clients = [ApiClient::connect(&on_primary.base, &key)?, ApiClient::connect(&on_replica.base, &key)?];
    let (finding_ids, endpoint_ids) = sample_ids(&mut clients[0])?;
    let path = format!("/v1/vulnerability-findings/{}", finding_ids[0]);
    if clients[0].get(&path)?.1 != clients[1].get(&path)?.1 {
        bail!("the host reading the replica answered {path} unlike the one reading the primary");
    }
    let before = [transactions(&primary, &database)?, transactions(&standby, &database)?];
    let started = Instant::now();
    let mut samples: Vec<Vec<Vec<Duration>>> = vec![vec![Vec::new(); REPLICA_CASES.len()]; 2];
    // Reads each host answered (every case but health reads the database).
    let mut reads = [0i64; 2];
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for round in 0..args.rounds + 10 {
        let finding = &finding_ids[rng.gen_range(0..finding_ids.len())];
        let endpoint = &endpoint_ids[rng.gen_range(0..endpoint_ids.len())];
        let paths = replica_paths(finding, endpoint);
        for turn in 0..2 {
            let host = (turn + round) % 2;
            for (case, path) in paths.iter().enumerate() {
                let elapsed = clients[host].get(path)?.0;
                if round >= 10 {
                    samples[host][case].push(elapsed);
                }
            }
            reads[host] += paths.len() as i64 - 1;
        }
    }
    let elapsed = started.elapsed();
    drop(clients);
    drop((on_primary, on_replica));
    // Where the reads went, from each cluster's own counts. A backend
    // reports them when it goes idle, at most once a second: wait for
    // them (a bounded while), then take what is there.
    let counted = || -> anyhow::Result<[i64; 2]> {
        Ok([transactions(&primary, &database)? - before[0], transactions(&standby, &database)? - before[1]])
    };
    let waited = Instant::now();
    let deadline = waited + Duration::from_secs(30);
    let mut after = counted()?;
    while (after[0] < reads[0] || after[1] < reads[1]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = counted()?;
    }
    let mut report = format!(
        "\na host reading a streaming replica against one reading the primary ({endpoints} endpoints × \
         {per_endpoint} findings in {} and its replica in {} (pg_basebackup -R -X stream, caught up before \
         measuring); one client per host, {} rounds, cases interleaved, hosts alternating; load average \
         {load_at_start} at the start, {} at the end\n\
         {:<44} {:>11} {:>11} {:>9} {:>11} {:>11}\n",
        primary.data_dir().display(),
        standby.data_dir().display(),
        args.rounds,
        load_average(),
        "case",
        "primary p50",
        "replica p50",
        "rep÷prim",
        "primary p90",
        "replica p90",
    );
    for (case, name) in REPLICA_CASES.iter().enumerate() {
        let p50 = |host: usize| ms(percentile(&samples[host][case], 0.5));
        let p90 = |host: usize| ms(percentile(&samples[host][case], 0.9));
        report.push_str(&format!(
            "{:<44} {:>11.3} {:>11.3} {:>9.2} {:>11.3} {:>11.3}\n",
            name,
            p50(0),
            p50(1),
            p50(1) / p50(0).max(f64::EPSILON),
            p90(0),
            p90(1)
        ));
    }
    report.push_str(&format!(
        "database reads each host answered: {} and {}; transactions on the database over those {:.1} s and \
         the {:.1} s until the counts were in: primary {}, replica {} (the hosts' key look-ups and heartbeats, \
         and the replica monitor's checks, 4 a second, count too)\n",
        reads[0],
        reads[1],
        elapsed.as_secs_f64(),
        waited.elapsed().as_secs_f64(),
        after[0],
        after[1]
    ));
    Ok(report)
}

/// Refuses to copy the cluster in `source` onto the disk of `target` when
/// that would leave less than [`FREE_AFTER_REPLICA`] free.
fn ensure_room_for_copy(source: &Path, target: &Path) -> anyhow::Result<()> {
    let size = size_under(source)?;
    let disk = rustix::fs::statvfs(target).with_context(|| format!("statvfs {}", target.display()))?;
    let free = disk.f_bavail.saturating_mul(disk.f_frsize);
    if free < size.saturating_add(FREE_AFTER_REPLICA) {
        bail!(
            "a replica of {} ({} MiB) would leave {} MiB free on the disk of {} (at least {} MiB must stay free): \
             pass a smaller --replica-endpoints",
            source.display(),
            size >> 20,
            free.saturating_sub(size) >> 20,
            target.display(),
            FREE_AFTER_REPLICA >> 20
        );
    }
    Ok(())
}

/// The bytes of the files under `dir`; files that go while it counts
/// (a running server's temporary files) are left out.
fn size_under(dir: &Path) -> anyhow::Result<u64> {
    let mut size = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(metadata) = entry.metadata() else { continue };
        size += if metadata.is_dir() { size_under(&entry.path())? } else { metadata.len() };
    }
    Ok(size)
}

/// Waits (10 minutes at most) until `standby` has replayed everything
/// `primary` had written when this was called.
fn wait_for_catch_up(primary: &Cluster, standby: &Cluster) -> anyhow::Result<()> {
    const BOUND: Duration = Duration::from_secs(600);
    let written: i64 = primary
        .config("postgres")
        .connect(postgres::NoTls)?
        .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8", &[])?
        .get(0);
    let mut replica = standby.config("postgres").connect(postgres::NoTls)?;
    let deadline = Instant::now() + BOUND;
    loop {
        let replayed: Option<i64> =
            replica.query_one("SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8", &[])?.get(0);
        if replayed.is_some_and(|replayed| replayed >= written) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the replica in {} did not catch up within {BOUND:?}", standby.data_dir().display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (a minute at most) until the host at `base` reports its replica up.
fn wait_for_replica_up(base: &str, key: &str) -> anyhow::Result<()> {
    const BOUND: Duration = Duration::from_secs(60);
    let deadline = Instant::now() + BOUND;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        // Health may answer other than 200 while the replica is not up. The
        // public listener's check says only `pass` (up) or `warn` (down or
        // lagging); the state itself is on the admin listener.
        if let Ok((_, health)) = ApiClient::connect(base, key).and_then(|mut client| client.get("/v1/health")) {
            last = health["checks"]["replicas"].clone();
            if last[0]["status"] == "pass" {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("the host at {base} did not report its replica up within {BOUND:?}: {last}")
}

/// Transactions (committed and rolled back) the cluster has counted on
/// `database` so far.
fn transactions(cluster: &Cluster, database: &str) -> anyhow::Result<i64> {
    let row = cluster.config("postgres").connect(postgres::NoTls)?.query_one(
        "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname = $1",
        &[&database],
    )?;
    Ok(row.get(0))
}
