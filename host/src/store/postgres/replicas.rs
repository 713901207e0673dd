//! Streaming replicas that serve public reads.
//!
//! A monitor thread asks each replica every [`CHECK_EVERY`] how far it has
//! replayed and how far behind it is, off the request path; a read session
//! skips a replica that is down or lags more than the allowed lag. Whether
//! a replica has the caller's data is decided by WAL positions: the host
//! remembers, per organization, the primary's position after its last
//! write, and a session may read a replica only once that replica's replay
//! has passed it (and any position a cursor carries), else the primary.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use postgres::NoTls;
use uuid::Uuid;

use super::{Manager, config_of};
use crate::store::{ReplicaHealth, StoreError};

/// How often the monitor checks each replica.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// A replica's lag beyond which it is skipped, when none is given.
pub const DEFAULT_MAX_LAG: Duration = Duration::from_millis(1000);

/// How long a read waits for a replica connection before it reads the
/// primary instead: a replica that cannot be reached must not hold a
/// request up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The replicas asked for (`--database-replica-url`, `--replica-max-lag-ms`).
#[derive(Debug, Clone)]
pub struct Replicas {
    pub urls: Vec<String>,
    pub max_lag: Duration,
}

impl Default for Replicas {
    fn default() -> Replicas {
        Replicas { urls: Vec::new(), max_lag: DEFAULT_MAX_LAG }
    }
}

/// One replica: its pool and what the monitor last saw.
pub struct Replica {
    pub name: String,
    pub pool: r2d2::Pool<Manager>,
    config: postgres::Config,
    up: AtomicBool,
    /// Lag in milliseconds; `u64::MAX` when unknown.
    lag_ms: AtomicU64,
}

/// Everything about reading from replicas one store keeps.
pub struct ReplicaSet {
    pub replicas: Vec<Replica>,
    max_lag_ms: u64,
    /// Per organization, the primary's WAL position after this host's last
    /// write to it.
    written: Mutex<HashMap<Uuid, u64>>,
    /// Spreads sessions over the replicas.
    next: AtomicUsize,
}

impl ReplicaSet {
    /// The replicas at `wanted.urls`, each with a pool of at most
    /// `pool_size` connections opened as needed, and their monitor thread
    /// (which ends when the set is dropped).
    pub fn start(wanted: &Replicas, pool_size: u32) -> Result<Option<Arc<ReplicaSet>>, StoreError> {
        if wanted.urls.is_empty() {
            return Ok(None);
        }
        let mut replicas = Vec::with_capacity(wanted.urls.len());
        for url in &wanted.urls {
            let mut config = config_of(url)?;
            config.connect_timeout(CONNECT_TIMEOUT);
            let pool = r2d2::Pool::builder()
                .max_size(pool_size.max(1))
                .min_idle(Some(0))
                .test_on_check_out(false)
                .connection_timeout(CONNECT_TIMEOUT)
                .build_unchecked(Manager::new(config.clone(), Arc::default()));
            replicas.push(Replica {
                name: name_of(&config),
                pool,
                config,
                up: AtomicBool::new(false),
                lag_ms: AtomicU64::new(u64::MAX),
            });
        }
        let set = Arc::new(ReplicaSet {
            replicas,
            max_lag_ms: u64::try_from(wanted.max_lag.as_millis()).unwrap_or(u64::MAX),
            written: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
        });
        let weak = Arc::downgrade(&set);
        std::thread::Builder::new()
            .name("esr-replica-monitor".into())
            .spawn(move || monitor(weak))
            .map_err(|error| StoreError::Backend(format!("starting the replica monitor: {error}")))?;
        Ok(Some(set))
    }

    /// Notes that `organization` was written up to `position` on the primary.
    pub fn wrote(&self, organization: Uuid, position: u64) {
        let mut written = self.written.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = written.entry(organization).or_insert(0);
        *entry = (*entry).max(position);
    }

    /// The position a read of `organization` must see for this host's
    /// writes to it to be there.
    pub fn written(&self, organization: Uuid) -> u64 {
        let written = self.written.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        written.get(&organization).copied().unwrap_or(0)
    }

    /// The replicas a session may try now, the next in turn first.
    pub fn usable(&self) -> impl Iterator<Item = &Replica> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let count = self.replicas.len();
        (0..count).map(move |step| &self.replicas[(start + step) % count]).filter(|replica| self.serves(replica))
    }

    /// Up, and no further behind than `--replica-max-lag-ms`.
    fn serves(&self, replica: &Replica) -> bool {
        replica.up.load(Ordering::Relaxed) && replica.lag_ms.load(Ordering::Relaxed) <= self.max_lag_ms
    }

    /// Whether any replica may serve a session now.
    pub fn any_usable(&self) -> bool {
        self.replicas.iter().any(|replica| self.serves(replica))
    }

    pub fn health(&self) -> Vec<ReplicaHealth> {
        self.replicas
            .iter()
            .map(|replica| {
                let lag = replica.lag_ms.load(Ordering::Relaxed);
                let state = match (replica.up.load(Ordering::Relaxed), lag <= self.max_lag_ms) {
                    (false, _) => "down",
                    (true, false) => "lagging",
                    (true, true) => "up",
                };
                ReplicaHealth {
                    name: replica.name.clone(),
                    state,
                    lag_ms: (replica.up.load(Ordering::Relaxed) && lag != u64::MAX).then_some(lag),
                }
            })
            .collect()
    }
}

impl Replica {
    /// Marks the replica down until the monitor reaches it again.
    pub fn failed(&self) {
        self.up.store(false, Ordering::Relaxed);
    }

    pub fn connection(&self) -> Option<r2d2::PooledConnection<Manager>> {
        self.pool.get().ok()
    }
}

/// The replica's host and database, for health and logs (no credentials).
fn name_of(config: &postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or_default())
}

/// Replay position and lag; lag is 0 when everything received is replayed.
const STANDING: &str = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8, \
     CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0::int8 \
     ELSE (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::int8 END";

fn monitor(set: Weak<ReplicaSet>) {
    let mut clients: Vec<Option<postgres::Client>> = Vec::new();
    while let Some(set) = set.upgrade() {
        clients.resize_with(set.replicas.len(), || None);
        for (replica, client) in set.replicas.iter().zip(clients.iter_mut()) {
            let standing = check(replica, client);
            if standing.is_none() {
                *client = None;
            }
            let (replayed, lag) = standing.unwrap_or((None, None));
            let was_up = replica.up.swap(replayed.is_some(), Ordering::Relaxed);
            if was_up && replayed.is_none() {
                tracing::warn!(replica = %replica.name, "a read replica is down or not a standby; reads skip it");
            }
            replica.lag_ms.store(lag.unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        drop(set);
        std::thread::sleep(CHECK_EVERY);
    }
}

/// The replica's replayed position and lag (`None` each when it is not a
/// standby or the lag is unknown), or `None` when it cannot be reached.
fn check(replica: &Replica, client: &mut Option<postgres::Client>) -> Option<(Option<u64>, Option<u64>)> {
    if client.is_none() {
        *client = replica.config.connect(NoTls).ok();
    }
    let row = client.as_mut()?.query_one(STANDING, &[]).ok()?;
    let replayed = row.get::<_, Option<i64>>(0).and_then(|position| u64::try_from(position).ok());
    let lag = row.get::<_, Option<i64>>(1).map(|lag| u64::try_from(lag).unwrap_or(0));
    Some((replayed, lag))
}

/// Reads a position from a simple-query answer's rows.
pub fn positions(messages: &[postgres::SimpleQueryMessage]) -> Vec<Option<u64>> {
    messages
        .iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).and_then(|text| text.parse::<u64>().ok())),
            _ => None,
        })
        .collect()
}
