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
use esr_store::{ReplicaHealth, StoreError};

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
    /// The primary, which the monitor asks for its position.
    primary: postgres::Config,
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
    pub fn start(
        wanted: &Replicas,
        primary: &postgres::Config,
        pool_size: u32,
    ) -> Result<Option<Arc<ReplicaSet>>, StoreError> {
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
        let mut primary = primary.clone();
        primary.connect_timeout(CONNECT_TIMEOUT);
        let set = Arc::new(ReplicaSet {
            replicas,
            primary,
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

/// The replica's replayed position.
const REPLAYED: &str = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8";
/// The primary's position: what it has flushed, which a replica can reach
/// (the insert position may lie past a page header no record ends at).
const PRIMARY_WROTE: &str = "SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::int8";
/// How long the primary's positions are remembered: a replica further
/// behind counts as at least this late.
const REMEMBERED: Duration = Duration::from_secs(60);

/// The primary's positions as the monitor saw them over time: a replica's
/// lag is how long ago the primary was where the replica has replayed to.
/// (The replica's own view, its last replayed commit's time or its received
/// position, is wrong after a pause in the primary's writes or while its
/// WAL receiver reconnects.)
#[derive(Default)]
struct PrimaryPositions(std::collections::VecDeque<(std::time::Instant, u64)>);

impl PrimaryPositions {
    fn saw(&mut self, at: std::time::Instant, position: u64) {
        self.0.push_back((at, position));
        while self.0.front().is_some_and(|(seen, _)| at.duration_since(*seen) > REMEMBERED) {
            self.0.pop_front();
        }
    }

    /// Milliseconds since the primary first passed `replayed`: 0 when it has
    /// not (the replica has everything seen), else at least since the first
    /// sighting after `replayed`. Unknown (`None`) before any sighting.
    fn lag_ms(&self, replayed: u64, now: std::time::Instant) -> Option<u64> {
        let last = self.0.back()?;
        if replayed >= last.1 {
            return Some(0);
        }
        // The first sighting the replica has not reached.
        let first_missing = self.0.iter().find(|(_, position)| *position > replayed)?;
        Some(u64::try_from(now.duration_since(first_missing.0).as_millis()).unwrap_or(u64::MAX))
    }
}

fn monitor(set: Weak<ReplicaSet>) {
    let mut clients: Vec<Option<postgres::Client>> = Vec::new();
    let mut primary_client: Option<postgres::Client> = None;
    let mut primary = PrimaryPositions::default();
    while let Some(set) = set.upgrade() {
        // The primary first: a replica checked after it and at or past its
        // position has everything written before this round.
        if let Some(position) = position_of(&set.primary, &mut primary_client, PRIMARY_WROTE) {
            primary.saw(std::time::Instant::now(), position);
        }
        clients.resize_with(set.replicas.len(), || None);
        for (replica, client) in set.replicas.iter().zip(clients.iter_mut()) {
            let replayed = position_of(&replica.config, client, REPLAYED);
            let was_up = replica.up.swap(replayed.is_some(), Ordering::Relaxed);
            if was_up && replayed.is_none() {
                tracing::warn!(replica = %replica.name, "a read replica is down or not a standby; reads skip it");
            }
            let lag = replayed.and_then(|replayed| primary.lag_ms(replayed, std::time::Instant::now()));
            replica.lag_ms.store(lag.unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        drop(set);
        std::thread::sleep(CHECK_EVERY);
    }
}

/// One position `query` answers on the server at `config` (`None` when it
/// cannot be reached, or answers none: a replica that is not a standby).
fn position_of(config: &postgres::Config, client: &mut Option<postgres::Client>, query: &str) -> Option<u64> {
    if client.is_none() {
        *client = config.connect(NoTls).ok();
    }
    let answer = client.as_mut()?.query_one(query, &[]);
    let Ok(row) = answer else {
        *client = None;
        return None;
    };
    row.get::<_, Option<i64>>(0).and_then(|position| u64::try_from(position).ok())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_lags_by_how_long_ago_the_primary_passed_its_position() {
        let start = std::time::Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut primary = PrimaryPositions::default();
        assert_eq!(primary.lag_ms(100, at(0)), None, "unknown before the primary is seen");
        primary.saw(at(0), 100);
        primary.saw(at(250), 100);
        primary.saw(at(500), 180);
        primary.saw(at(750), 260);
        assert_eq!(primary.lag_ms(260, at(800)), Some(0), "everything seen is replayed");
        assert_eq!(primary.lag_ms(300, at(800)), Some(0));
        assert_eq!(primary.lag_ms(200, at(800)), Some(50), "missing what the primary had at 750 ms");
        assert_eq!(primary.lag_ms(100, at(800)), Some(300), "missing what it had at 500 ms");
        assert_eq!(primary.lag_ms(10, at(800)), Some(800), "older than every sighting: at least since the first");
        // Sightings older than a minute are forgotten.
        primary.saw(at(61_000), 260);
        assert_eq!(primary.0.len(), 1);
        assert_eq!(primary.lag_ms(100, at(61_100)), Some(100));
    }
}
