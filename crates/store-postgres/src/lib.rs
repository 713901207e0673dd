//! The PostgreSQL backend: the same records, index entries and counts as
//! the sled layout, as rows.
//!
//! Records are `(org_id, collection, id) → body` (the stored bytes, so
//! ETags are byte-exact). An index entry `(index, value, position, id)` is
//! two columns of its record's row when the index holds at most one value
//! per record, and a row of `index_entries` otherwise ([`columns`]); a walk
//! is a keyset page on either's key. Counts (of index values, counted pairs
//! and update hours) are rows kept in the write transaction, so a total
//! never counts rows. A batch is one transaction that locks the
//! organization's row first (which serializes the writers of one
//! organization across hosts).
//!
//! Every call is blocking: callers run it on a blocking thread. Each pooled
//! connection prepares a statement once and keeps it.

mod ahead;
mod audit;
mod changes;
mod columns;
mod counts_read;
mod grouped;
mod migrations;
mod replicas;
mod statistics;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use esr_contract::indexes::{self, CREATED_AT, UPDATED_AT};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::{GenericClient, NoTls, Statement};
use r2d2_postgres::PostgresConnectionManager;
use serde_json::Value;
use uuid::Uuid;

pub use migrations::{SCHEMA_VERSION, migrate};
pub use replicas::{DEFAULT_MAX_LAG, Replicas};

use changes::BatchChanges;
use counts_read::{CountRows, CountsRead, MAX_COUNT_ROWS_READ, few_valued};
use replicas::ReplicaSet;
use std::sync::Arc;

use esr_store::{
    ApiKeyRecord, AuditEntry, AuditPage, BuildBatch, ChangeEvent, ChangeLog, ChangeOperation, Collection,
    CollectionWrite, Document, GroupCount, IndexCondition, IndexPosition, IndexRange, IndexWalk, KeyWithReader,
    MAX_SCAN, Matching, Organization, ReadAhead, ReadFrom, RecordWalk, ReplicaHealth, Store, StoreError, StoreReader,
    StoredRecord, WriteTime, ordered_by_creation, restricting_conditions, sort_index,
};

/// PostgreSQL's error as the store reports it.
fn store_error(error: postgres::Error) -> StoreError {
    if error.code().is_some_and(|code| code.code() == "57014")
        && error.as_db_error().is_some_and(|db| db.message().contains("statement timeout"))
    {
        return StoreError::DeadlineReached;
    }
    let text = described(&error);
    if is_unavailable(&error) { StoreError::Unavailable(text) } else { StoreError::Backend(text) }
}

/// The server's own words: a `db error` alone says only that there is one.
fn described(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("PostgreSQL: {}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code()),
        None => match std::error::Error::source(error) {
            Some(source) => format!("PostgreSQL: {error}: {source}"),
            None => format!("PostgreSQL: {error}"),
        },
    }
}

/// Whether `error` says the database cannot serve now but may soon, so the
/// operation may be retried: the connection was lost, refused or timed out
/// (no server error, or class 08), the server is shutting down, crashing or
/// starting up (57P01–57P03), it has no connection left (53300), or the
/// statement was cancelled or lost a conflict (57014; 40001, which is also
/// what a replica's replay conflict raises; 40P01). Anything else — a
/// statement the server refused, a value that does not convert — is a bug
/// or bad data, not a fault to wait out.
fn is_unavailable(error: &postgres::Error) -> bool {
    if let Some(code) = error.code() {
        let code = code.code();
        return code.starts_with("08")
            || matches!(code, "57P01" | "57P02" | "57P03" | "53300" | "57014" | "40001" | "40P01");
    }
    error.is_closed()
        || std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>())
        // A connection attempt past `connect_timeout` (tokio-postgres's `Kind::Timeout`).
        || error.to_string() == "timeout waiting for server"
}

/// The columns [`api_key_of`] reads, in its order (a macro, for `concat!`).
macro_rules! api_key_columns {
    () => {
        "id, org_id, name, scopes, prefix, created_at, expires_at, revoked_at, last_used_at"
    };
}

/// How many columns [`api_key_columns`] names.
const API_KEY_COLUMNS: usize = 9;

/// The pool size when none is given: the blocking calls one host makes at
/// once are bounded by its component call slots (64), but a few hosts must
/// stay under PostgreSQL's default `max_connections` (100).
pub const DEFAULT_POOL_SIZE: u32 = 16;

/// Connections the pool keeps beside its size for admitting requests (API
/// keys' lookups) and health's probe ([`Store::admission_calls`]).
pub const ADMISSION_CONNECTIONS: u32 = 2;

/// Connections the pool keeps beside those for host jobs that must not
/// take the requests' (webhook deliveries, [`Store::background_calls`]).
pub const BACKGROUND_CONNECTIONS: u32 = 2;

/// How long a store call waits for a pooled connection (or a new one) when
/// none is given: a server gives its request deadline instead.
pub const DEFAULT_CONNECTION_WAIT: Duration = Duration::from_secs(10);

/// A PostgreSQL database holding the product's tables, through a pool of
/// connections.
pub struct PgStore {
    /// Always there until the store is dropped.
    pool: Option<Pool>,
    /// The read replicas, when there are any.
    replicas: Option<Arc<ReplicaSet>>,
    /// The organizations found so far. A row is never changed once written
    /// (only [`Store::clear_data`], offline, removes them), so a request
    /// after the first of its organization is one round trip shorter; an
    /// organization not found is asked for again each time.
    organizations: Mutex<HashMap<Uuid, Organization>>,
    /// What this host wrote since the planner's statistics were refreshed.
    statistics: Arc<statistics::Statistics>,
    /// How each organization's batches built ahead of its lock fared.
    ahead: ahead::AheadOutcomes,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Closing a connection blocks, which panics on an async runtime's
        // thread (the server drops its store at the end of `serve`).
        if let Some(pool) = self.pool.take()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            let replicas = self.replicas.take();
            std::thread::spawn(move || drop((pool, replicas)));
        }
    }
}

/// A pooled connection with the statements it has prepared.
pub struct Connection {
    client: postgres::Client,
    statements: HashMap<String, Statement>,
    /// Set when the connection is left in a state no caller may inherit.
    broken: bool,
    /// [`Faults::lost`] when this connection was last known to work.
    checked_at: u64,
}

/// What a pool's connections have met, shared by its manager and its
/// connections.
#[derive(Default)]
pub struct Faults {
    /// How many connections the server has closed under the pool so far:
    /// after one is lost, every idle connection older than the loss is
    /// checked before it is handed out (the server may have restarted and
    /// closed them all, which an idle connection does not notice).
    lost: AtomicU64,
    /// Why the last attempt to open a connection failed, if it did: while
    /// it did, a call that finds no idle connection fails at once instead
    /// of waiting for a database that is not there (the pool keeps trying
    /// in the background, and clears this when it gets through).
    refused: Mutex<Option<String>>,
}

/// Opens connections for the pool (`r2d2_postgres`), each with an empty
/// statement cache, and notes what goes wrong in [`Faults`].
pub struct Manager {
    connections: PostgresConnectionManager<NoTls>,
    faults: Arc<Faults>,
}

impl Manager {
    pub fn new(config: postgres::Config, faults: Arc<Faults>) -> Manager {
        Manager { connections: PostgresConnectionManager::new(config, NoTls), faults }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Connection, postgres::Error> {
        let client = self.connections.connect();
        *self.faults.refused.lock().unwrap_or_else(PoisonError::into_inner) = client.as_ref().err().map(described);
        Ok(Connection {
            client: client?,
            statements: HashMap::new(),
            broken: false,
            checked_at: self.faults.lost.load(Ordering::Relaxed),
        })
    }

    fn is_valid(&self, connection: &mut Connection) -> Result<(), postgres::Error> {
        self.connections.is_valid(&mut connection.client)
    }

    fn has_broken(&self, connection: &mut Connection) -> bool {
        let closed = self.connections.has_broken(&mut connection.client);
        if closed {
            self.faults.lost.fetch_add(1, Ordering::Relaxed);
        }
        connection.broken || closed
    }
}

/// The pool of connections to one database, and what it has met.
#[derive(Clone)]
pub struct Pool {
    connections: r2d2::Pool<Manager>,
    faults: Arc<Faults>,
}

impl Pool {
    /// At most `size` connections to `config`, opened as needed; a call
    /// waits at most `wait` for one.
    pub fn new(config: postgres::Config, size: u32, wait: Duration) -> Pool {
        let mut config = config;
        // A server that does not answer at all must not hold a call past its wait.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(wait);
        }
        let faults = Arc::new(Faults::default());
        let connections = r2d2::Pool::builder()
            .max_size(size.max(1))
            .min_idle(Some(1))
            // A validity query per checkout halves the throughput of short
            // calls; a broken connection is found by `has_broken`, and the
            // idle ones a fault may have broken are checked in `get`.
            .test_on_check_out(false)
            .connection_timeout(wait.max(Duration::from_millis(1)))
            // Each failed attempt is logged where the call fails.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(Manager::new(config, faults.clone()));
        Pool { connections, faults }
    }

    pub fn max_size(&self) -> u32 {
        self.connections.max_size()
    }

    /// A connection that works as far as is known, or
    /// [`StoreError::Unavailable`] at once when the database refused the
    /// last attempt and no connection is idle, or after the pool's wait.
    pub fn get(&self) -> Result<r2d2::PooledConnection<Manager>, StoreError> {
        // Each connection the pool holds is checked at most once per loss.
        for _ in 0..=self.max_size() {
            let mut connection = match self.connections.try_get() {
                Some(connection) => connection,
                None => {
                    if let Some(reason) = self.faults.refused.lock().unwrap_or_else(PoisonError::into_inner).clone() {
                        return Err(StoreError::Unavailable(format!("no PostgreSQL connection: {reason}")));
                    }
                    self.connections.get().map_err(|error| {
                        StoreError::Unavailable(format!("no PostgreSQL connection in time: {error}"))
                    })?
                }
            };
            let lost = self.faults.lost.load(Ordering::Relaxed);
            if connection.checked_at == lost {
                return Ok(connection);
            }
            match connection.client.is_valid(CHECK_TIMEOUT) {
                Ok(()) => {
                    connection.checked_at = lost;
                    return Ok(connection);
                }
                // Closed, so dropped rather than pooled again.
                Err(_) => connection.broken = true,
            }
        }
        Err(StoreError::Unavailable("every pooled PostgreSQL connection was lost".into()))
    }
}

/// How long checking an idle connection after a fault may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// The most statements a connection keeps prepared. Past it they are all
/// let go (PostgreSQL frees each as its last handle is dropped) and
/// prepared again as they are used: a walk's text holds its limit, so a
/// caller that varies limits must not grow them without bound.
const MAX_PREPARED: usize = 1024;

/// The statement `sql`, prepared on this connection the first time.
fn prepared(
    statements: &mut HashMap<String, Statement>,
    client: &mut impl GenericClient,
    sql: &str,
) -> Result<Statement, StoreError> {
    if let Some(statement) = statements.get(sql) {
        return Ok(statement.clone());
    }
    if statements.len() >= MAX_PREPARED {
        statements.clear();
    }
    let statement = client.prepare(sql).map_err(store_error)?;
    statements.insert(sql.to_owned(), statement.clone());
    Ok(statement)
}

impl Connection {
    fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        prepared(&mut self.statements, &mut self.client, sql)
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query(&statement, params).map_err(store_error)
    }

    fn query_opt(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query_opt(&statement, params).map_err(store_error)
    }

    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        self.client.execute(&statement, params).map_err(store_error)
    }
}

impl PgStore {
    /// A read session on the organization's records (see [`Store::reader_from`]).
    fn pg_reader(&self, organization: Uuid, from: ReadFrom) -> Result<PgReader, StoreError> {
        let pool = self.pool.clone().ok_or_else(|| StoreError::Backend("the PostgreSQL store is closed".into()))?;
        let needed = match &self.replicas {
            Some(replicas) => from.position.max(replicas.written(organization)),
            None => from.position,
        };
        Ok(PgReader {
            pool,
            replicas: if from.primary_only { None } else { self.replicas.clone() },
            needed,
            open: None,
            in_snapshot: false,
            position: None,
            failed_on_replica: false,
            organization,
            deadline: from.deadline,
            timeout_set_at: None,
            counted: None,
            opening_reads_change_log: false,
            opened_change_log: None,
            counts_read: CountsRead::default(),
        })
    }

    /// The settings whose name starts with `prefix` (a fixed word and a
    /// slash), by the rest of their name.
    fn settings_named(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let pattern = format!("{prefix}%");
        let rows = self
            .connection()?
            .query("SELECT name, value FROM settings WHERE name LIKE $1 ORDER BY name", &[&pattern])?;
        Ok(rows
            .iter()
            .map(|row| {
                let name: &str = row.get(0);
                (name.get(prefix.len()..).unwrap_or_default().to_owned(), row.get::<_, Vec<u8>>(1))
            })
            .collect())
    }

    /// Connects to `url` (a pool of at most `pool_size` connections and
    /// [`ADMISSION_CONNECTIONS`] and [`BACKGROUND_CONNECTIONS`] more, opened as needed) and creates or migrates the schema; refuses a database
    /// whose schema is newer than this binary knows.
    pub fn open(url: &str, pool_size: u32) -> Result<PgStore, StoreError> {
        PgStore::open_with_replicas(url, pool_size, DEFAULT_CONNECTION_WAIT, &Replicas::default())
    }

    /// [`PgStore::open`], waiting at most `connection_wait` for a
    /// connection in a call, with public reads sent to the streaming
    /// replicas at `replicas.urls` (each with a pool of `pool_size` at most).
    pub fn open_with_replicas(
        url: &str,
        pool_size: u32,
        connection_wait: Duration,
        replicas: &Replicas,
    ) -> Result<PgStore, StoreError> {
        let config = config_of(url)?;
        let replicas = ReplicaSet::start(replicas, &config, pool_size)?;
        let pool =
            Pool::new(config, pool_size.max(1) + ADMISSION_CONNECTIONS + BACKGROUND_CONNECTIONS, connection_wait);
        // The first connection is made directly, so that an unreachable
        // database is reported with PostgreSQL's own words.
        let mut client = config_of(url)?.connect(NoTls).map_err(store_error)?;
        migrate(&mut client)?;
        Ok(PgStore {
            pool: Some(pool),
            replicas,
            organizations: Mutex::default(),
            statistics: Arc::default(),
            ahead: ahead::AheadOutcomes::default(),
        })
    }

    /// A connection from the pool.
    pub fn connection(&self) -> Result<r2d2::PooledConnection<Manager>, StoreError> {
        let pool = self.pool.as_ref().ok_or_else(|| StoreError::Backend("the PostgreSQL store is closed".into()))?;
        pool.get()
    }

    /// Writes a batch in one transaction that first locks the
    /// organization (see [`Store::write_batch`]), its changes in the feed
    /// or not; committed, so durable, when this returns.
    fn write(&self, organization: Uuid, build: &mut BuildBatch<'_>, feed: Feed, when: Build) -> Result<(), StoreError> {
        let mut connection = self.connection()?;
        let Connection { client, statements, .. } = &mut *connection;
        let mut transaction = client.transaction().map_err(store_error)?;
        // A batch's statements take arrays of thousands of ids: a plan
        // cached for other sizes (a scan testing each row against the whole
        // array, chosen while the table was small) costs seconds per batch;
        // a plan for the values given costs a millisecond.
        transaction.batch_execute("SET LOCAL plan_cache_mode = force_custom_plan").map_err(store_error)?;
        let built_ahead = match when {
            Build::Ahead if self.ahead.worth_trying(organization) => {
                ahead::build_ahead(&mut transaction, statements, organization, build)?
            }
            _ => ahead::Ahead::NothingToBuildOn,
        };
        lock_organization(&mut transaction, statements, organization)?;
        let confirmed = match built_ahead {
            ahead::Ahead::NothingToBuildOn => None,
            ahead::Ahead::Unusable => {
                self.ahead.record(organization, false);
                None
            }
            ahead::Ahead::Built(built) => {
                let confirmed = built.confirm(&mut transaction, statements, organization)?;
                self.ahead.record(organization, confirmed.is_some());
                confirmed
            }
        };
        let (now, latest_change, writes, read_by_id, encoded) = match confirmed {
            Some((now, latest_change, writes, read_by_id, encoded)) => {
                (now, latest_change, writes, read_by_id, Some(encoded))
            }
            None => {
                let (now, latest_change) = next_write_time(&mut transaction, statements, organization)?;
                let mut reader = Session::new(&mut transaction, statements, organization, Some(ReadById::new()));
                let writes = build(&mut reader, now)?;
                let read_by_id = reader.read_by_id.take().unwrap_or_default();
                (now, latest_change, writes, read_by_id, None)
            }
        };
        let changes = match feed {
            Feed::Recorded => Some(BatchChanges::after(latest_change, now.0)),
            Feed::Unrecorded => None,
        };
        write_in(&mut transaction, statements, organization, &writes, &read_by_id, changes, encoded)?;
        if let Some(latest) = esr_store::latest_update(&writes).filter(|latest| *latest > now.0) {
            let keep_past = prepared(
                statements,
                &mut transaction,
                "UPDATE write_clocks SET last_write = greatest(last_write, $2) WHERE org_id = $1",
            )?;
            transaction.execute(&keep_past, &[&organization, &latest]).map_err(store_error)?;
        }
        transaction.commit().map_err(store_error)?;
        if let Some(pool) = &self.pool {
            let records = writes.iter().map(|write| write.records.len() as u64).sum();
            self.statistics.wrote(records, pool);
        }
        // A batch's records are thousands of JSON trees: freeing them takes
        // a tenth of an import's time in the host, which the answer need
        // not wait for.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn_blocking(move || drop(writes)));
        }
        self.note_written(&mut connection, organization)
    }

    /// Runs `change` in a transaction holding the organization's write
    /// lock, and commits it.
    fn locked<T>(
        &self,
        organization: Uuid,
        change: impl FnOnce(&mut postgres::Transaction<'_>, &mut HashMap<String, Statement>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection()?;
        let Connection { client, statements, .. } = &mut *connection;
        let mut transaction = client.transaction().map_err(store_error)?;
        lock_organization(&mut transaction, statements, organization)?;
        let outcome = change(&mut transaction, statements)?;
        transaction.commit().map_err(store_error)?;
        self.note_written(&mut connection, organization)?;
        Ok(outcome)
    }

    /// After a commit to the organization: this host's next reads of it go
    /// to a replica only once it has replayed the commit.
    fn note_written(&self, connection: &mut Connection, organization: Uuid) -> Result<(), StoreError> {
        if let Some(replicas) = &self.replicas {
            // After the commit: its record is before this position.
            let row = connection.query_opt(CURRENT_POSITION, &[])?;
            if let Some(position) = row.and_then(|row| u64::try_from(row.get::<_, i64>(0)).ok()) {
                replicas.wrote(organization, position);
            }
        }
        Ok(())
    }
}

/// When a write's batch is built.
#[derive(Clone, Copy)]
enum Build {
    UnderTheLock,
    /// First before the lock, kept if it still holds under it.
    Ahead,
}

/// Whether a write is recorded in the change feed.
#[derive(Clone, Copy)]
enum Feed {
    Recorded,
    /// A bulk load: records as they are, not changes.
    Unrecorded,
}

impl Store for PgStore {
    /// Whether any organization exists yet.
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.connection()?.query_opt("SELECT 1 FROM organizations LIMIT 1", &[])?.is_none())
    }

    /// A small marker (e.g. how far demo seeding got).
    fn marker(&self, name: &str) -> Result<Option<String>, StoreError> {
        let row = self.connection()?.query_opt("SELECT value FROM settings WHERE name = $1", &[&marker_name(name)])?;
        Ok(row.map(|row| String::from_utf8_lossy(row.get::<_, &[u8]>(0)).into_owned()))
    }

    fn set_marker(&self, name: &str, value: &str) -> Result<(), StoreError> {
        self.connection()?.execute(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            &[&marker_name(name), &value.as_bytes()],
        )?;
        Ok(())
    }

    /// Every marker by name.
    fn markers(&self) -> Result<Vec<(String, String)>, StoreError> {
        let markers = self.settings_named("marker/")?;
        Ok(markers.into_iter().map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned())).collect())
    }

    /// Every stored secret by name.
    fn secrets(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.settings_named("secret/")
    }

    fn set_secret(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        self.connection()?.execute(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            &[&format!("secret/{name}"), &value],
        )?;
        Ok(())
    }

    fn document(&self, kind: &str, id: &str) -> Result<Option<Document>, StoreError> {
        let row = self
            .connection()?
            .query_opt("SELECT version, body FROM documents WHERE kind = $1 AND id = $2", &[&kind, &id])?;
        Ok(row.map(|row| Document { id: id.to_owned(), version: row.get::<_, i64>(0) as u64, body: row.get(1) }))
    }

    fn documents(&self, kind: &str) -> Result<Vec<Document>, StoreError> {
        let rows = self
            .connection()?
            .query("SELECT id, version, body FROM documents WHERE kind = $1 ORDER BY id", &[&kind])?;
        Ok(rows
            .into_iter()
            .map(|row| Document { id: row.get(0), version: row.get::<_, i64>(1) as u64, body: row.get(2) })
            .collect())
    }

    /// One statement: an insert that yields to a row already there, or an
    /// update of the version read.
    fn swap_document(&self, kind: &str, id: &str, seen: Option<u64>, body: &[u8]) -> Result<Option<u64>, StoreError> {
        let mut connection = self.connection()?;
        let row = match seen {
            None => connection.query_opt(
                "INSERT INTO documents (kind, id, version, body) VALUES ($1, $2, 1, $3) ON CONFLICT (kind, id) DO NOTHING \
                 RETURNING version",
                &[&kind, &id, &body],
            )?,
            Some(version) => connection.query_opt(
                "UPDATE documents SET version = version + 1, body = $4 WHERE kind = $1 AND id = $2 AND version = $3 \
                 RETURNING version",
                &[&kind, &id, &(version as i64), &body],
            )?,
        };
        Ok(row.map(|row| row.get::<_, i64>(0) as u64))
    }

    fn delete_document(&self, kind: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self.connection()?.execute("DELETE FROM documents WHERE kind = $1 AND id = $2", &[&kind, &id])? > 0)
    }

    /// One statement for the batch (`audit.rs`).
    fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        self.append_audit_entries(entries)
    }

    /// Read from the primary, like the admin's other reads.
    fn audit_page(
        &self,
        organization: Uuid,
        after: Option<u64>,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        self.read_audit_page(organization, after, principal, limit)
    }

    fn expire_audit(&self, before: i64) -> Result<u64, StoreError> {
        self.expire_audit_entries(before)
    }

    /// Removes every organization, key and record (secrets stay).
    fn clear_data(&self) -> Result<(), StoreError> {
        self.connection()?
            .client
            .batch_execute(
                "TRUNCATE organizations, api_keys, records, index_entries, counts, changes, history, documents, \
                 audit_entries",
            )
            .map_err(store_error)?;
        self.organizations.lock().unwrap_or_else(PoisonError::into_inner).clear();
        Ok(())
    }

    /// Health probe: one round trip to the database.
    fn probe(&self) -> Result<(), StoreError> {
        self.connection()?.query("SELECT 1", &[])?;
        Ok(())
    }

    /// The pool's size, less the connections kept for admission: each
    /// blocking call holds one connection at most.
    fn concurrent_calls(&self) -> Option<usize> {
        self.pool
            .as_ref()
            .map(|pool| pool.max_size().saturating_sub(ADMISSION_CONNECTIONS + BACKGROUND_CONNECTIONS).max(1) as usize)
    }

    fn admission_calls(&self) -> Option<usize> {
        self.pool.as_ref().map(|_| ADMISSION_CONNECTIONS as usize)
    }

    fn background_calls(&self) -> Option<usize> {
        self.pool.as_ref().map(|_| BACKGROUND_CONNECTIONS as usize)
    }

    /// The database's size on disk, in bytes.
    fn size_on_disk(&self) -> Result<u64, StoreError> {
        let row = self.connection()?.query_opt("SELECT pg_database_size(current_database())", &[])?;
        Ok(row.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64))
    }

    /// A 32-byte secret shared by every host of this database, created on
    /// first use (the first writer wins).
    fn secret(&self, name: &str) -> Result<[u8; 32], StoreError> {
        let mut fresh = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut fresh);
        self.secret_if_absent(name, fresh)
    }

    /// Stores `value` unless the secret is there (the first writer wins).
    fn secret_if_absent(&self, name: &str, value: [u8; 32]) -> Result<[u8; 32], StoreError> {
        let mut connection = self.connection()?;
        let key = format!("secret/{name}");
        connection.execute(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&key, &&value[..]],
        )?;
        let row = connection
            .query_opt("SELECT value FROM settings WHERE name = $1", &[&key])?
            .ok_or_else(|| StoreError::Corrupt(format!("{key} vanished")))?;
        <[u8; 32]>::try_from(row.get::<_, &[u8]>(0)).map_err(|_| StoreError::Corrupt(format!("{key} is not 32 bytes")))
    }

    fn insert_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        self.connection()?.execute(
            "INSERT INTO organizations (org_id, name, enrollment_token, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (org_id) DO UPDATE SET name = excluded.name, enrollment_token = excluded.enrollment_token, \
             created_at = excluded.created_at",
            &[
                &organization.organization_id,
                &organization.name,
                &organization.enrollment_token,
                &organization.created_at,
            ],
        )?;
        Ok(())
    }

    fn organization(&self, id: Uuid) -> Result<Option<Organization>, StoreError> {
        let known = self.organizations.lock().unwrap_or_else(PoisonError::into_inner).get(&id).cloned();
        if known.is_some() {
            return Ok(known);
        }
        let row = self.connection()?.query_opt(
            "SELECT org_id, name, enrollment_token, created_at FROM organizations WHERE org_id = $1",
            &[&id],
        )?;
        let found = row.map(|row| organization_of(&row));
        if let Some(organization) = &found {
            self.organizations.lock().unwrap_or_else(PoisonError::into_inner).insert(id, organization.clone());
        }
        Ok(found)
    }

    /// Every organization, in id (creation) order.
    fn organizations(&self) -> Result<Vec<Organization>, StoreError> {
        let rows = self
            .connection()?
            .query("SELECT org_id, name, enrollment_token, created_at FROM organizations ORDER BY org_id", &[])?;
        Ok(rows.iter().map(organization_of).collect())
    }

    /// Stores an API key's record under the hash of the key.
    fn insert_api_key(&self, key_hash: &[u8; 32], record: &ApiKeyRecord) -> Result<(), StoreError> {
        self.connection()?.execute(
            "INSERT INTO api_keys (key_hash, id, org_id, name, scopes, prefix, created_at, expires_at, revoked_at, \
             last_used_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (key_hash) DO UPDATE SET \
             id = excluded.id, org_id = excluded.org_id, name = excluded.name, scopes = excluded.scopes, \
             prefix = excluded.prefix, created_at = excluded.created_at, expires_at = excluded.expires_at, \
             revoked_at = excluded.revoked_at, last_used_at = excluded.last_used_at",
            &[
                &&key_hash[..],
                &record.id,
                &record.organization_id,
                &record.name,
                &record.scopes,
                &record.prefix,
                &record.created_at,
                &record.expires_at,
                &record.revoked_at,
                &record.last_used_at,
            ],
        )?;
        Ok(())
    }

    fn api_key(&self, key_hash: &[u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = self.connection()?.query_opt(
            concat!("SELECT ", api_key_columns!(), " FROM api_keys WHERE key_hash = $1"),
            &[&&key_hash[..]],
        )?;
        Ok(row.map(|row| api_key_of(&row)))
    }

    /// One statement: the key, the record in `organization` and the write
    /// position, as [`PgReader::get`] reads them (the statement names its
    /// organization, as every statement of a request does). Read from the
    /// primary, so not done when replicas serve reads.
    fn api_key_reading_ahead(
        &self,
        key_hash: &[u8; 32],
        organization: Uuid,
        collection: Collection,
        id: Uuid,
    ) -> Result<(Option<ApiKeyRecord>, Option<ReadAhead>), StoreError> {
        if self.replicas.is_some() {
            return Ok((self.api_key(key_hash)?, None));
        }
        let row = self.connection()?.query_opt(
            concat!(
                "SELECT k.*, (SELECT body FROM records WHERE org_id = $2 AND collection = $3 AND id = $4), \
                 (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8 FROM (SELECT ",
                api_key_columns!(),
                " FROM api_keys WHERE key_hash = $1) k"
            ),
            &[&&key_hash[..], &organization, &collection.name(), &id],
        )?;
        let Some(row) = row else { return Ok((None, None)) };
        let key = api_key_of(&row);
        // A key never changes its organization; should it, nothing was read.
        let read_ahead = (key.organization_id == organization).then(|| ReadAhead {
            organization,
            collection,
            id,
            body: row.get(API_KEY_COLUMNS),
            position: row.get::<_, Option<i64>>(API_KEY_COLUMNS + 1).map(|position| position as u64),
        });
        Ok((Some(key), read_ahead))
    }

    /// The key, and the list's read session begun in the same round trip:
    /// the snapshot's opening statements (its `BEGIN`, timeout, write
    /// position and change log) and the key's lookup are one simple query.
    /// Read from the primary, so not done when replicas serve reads.
    fn api_key_opening_reader(
        &self,
        key_hash: &[u8; 32],
        organization: Uuid,
        from: ReadFrom,
    ) -> Result<KeyWithReader, StoreError> {
        if self.replicas.is_some() {
            return Ok((self.api_key(key_hash)?, None));
        }
        let mut reader = self.pg_reader(organization, from)?;
        let key = reader.open_with_key(key_hash)?;
        // A key never changes its organization; should it, the session
        // is not handed out.
        let reader = key.as_ref().filter(|key| key.organization_id == organization).map(|_| reader);
        Ok((key, reader.map(|reader| Box::new(reader) as Box<dyn StoreReader>)))
    }

    /// The stored records of every key (of one organization when given), oldest first.
    fn api_keys(&self, organization: Option<Uuid>) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = self.connection()?.query(
            concat!("SELECT ", api_key_columns!(), " FROM api_keys WHERE $1::uuid IS NULL OR org_id = $1 ORDER BY id"),
            &[&organization],
        )?;
        Ok(rows.iter().map(api_key_of).collect())
    }

    fn api_keys_with_hashes(&self) -> Result<Vec<([u8; 32], ApiKeyRecord)>, StoreError> {
        let rows = self
            .connection()?
            .query(concat!("SELECT ", api_key_columns!(), ", key_hash FROM api_keys ORDER BY id"), &[])?;
        rows.iter()
            .map(|row| {
                let hash = <[u8; 32]>::try_from(row.get::<_, &[u8]>(9)).map_err(|_| {
                    StoreError::Corrupt("an API key is stored under a hash that is not 32 bytes".into())
                })?;
                Ok((hash, api_key_of(row)))
            })
            .collect()
    }

    /// Marks the key with this id revoked; `None` when there is no such
    /// key. Revoking a revoked key keeps its first revocation time.
    fn revoke_api_key(&self, id: Uuid, revoked_at: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = self.connection()?.query_opt(
            concat!(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 RETURNING ",
                api_key_columns!()
            ),
            &[&id, &revoked_at],
        )?;
        Ok(row.map(|row| api_key_of(&row)))
    }

    /// Notes the key's use at `at`, unless a later one is noted already:
    /// one statement, which changes no other column (a revocation at the
    /// same time stays).
    fn touch_api_key(&self, id: Uuid, at: &str) -> Result<(), StoreError> {
        self.connection()?.execute(
            "UPDATE api_keys SET last_used_at = $2 WHERE id = $1 \
             AND (last_used_at IS NULL OR last_used_at::timestamptz < $2::text::timestamptz)",
            &[&id, &at],
        )?;
        Ok(())
    }

    /// Sets when the key stops authenticating.
    fn set_api_key_expiry(&self, id: Uuid, expires_at: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = self.connection()?.query_opt(
            concat!("UPDATE api_keys SET expires_at = $2 WHERE id = $1 RETURNING ", api_key_columns!()),
            &[&id, &expires_at],
        )?;
        Ok(row.map(|row| api_key_of(&row)))
    }

    /// A read session on the organization's records: one pooled
    /// connection, in one read-only snapshot from its first read on.
    fn reader(&self, organization: Uuid) -> Result<Box<dyn StoreReader>, StoreError> {
        self.reader_from(organization, ReadFrom::default())
    }

    /// A read session on a replica that has replayed this host's last
    /// write to the organization and `from.position`, else on the primary
    /// (see `replicas.rs`). The choice is made at the first read.
    fn reader_from(&self, organization: Uuid, from: ReadFrom) -> Result<Box<dyn StoreReader>, StoreError> {
        Ok(Box::new(self.pg_reader(organization, from)?))
    }

    fn replicas(&self) -> Vec<ReplicaHealth> {
        self.replicas.as_ref().map(|replicas| replicas.health()).unwrap_or_default()
    }

    /// Writes a batch in one transaction that first locks the
    /// organization (see [`Store::write_batch`]); committed, so durable,
    /// when this returns.
    fn write_batch(&self, organization: Uuid, build: &mut BuildBatch<'_>) -> Result<(), StoreError> {
        self.write(organization, build, Feed::Recorded, Build::UnderTheLock)
    }

    /// [`PgStore::write_batch`], the batch built ahead of the lock when
    /// that holds (`ahead.rs`).
    fn write_batch_ahead(&self, organization: Uuid, build: &mut BuildBatch<'_>) -> Result<(), StoreError> {
        self.write(organization, build, Feed::Recorded, Build::Ahead)
    }

    /// Records this host in `hosts` (the database's clock) and counts the
    /// hosts seen within `within`; rows of hosts gone for a day are removed.
    fn host_heartbeat(&self, host: &str, within: Duration) -> Result<u32, StoreError> {
        let mut connection = self.connection()?;
        connection.execute(
            "INSERT INTO hosts (name, last_seen) VALUES ($1, now()) ON CONFLICT (name) DO UPDATE SET last_seen = now()",
            &[&host],
        )?;
        connection.execute("DELETE FROM hosts WHERE last_seen < now() - interval '1 day'", &[])?;
        let row = connection.query_opt(
            "SELECT count(*) FROM hosts WHERE last_seen > now() - make_interval(secs => $1)",
            &[&within.as_secs_f64()],
        )?;
        Ok(row.map_or(1, |row| row.get::<_, i64>(0).clamp(1, i64::from(u32::MAX)) as u32))
    }

    fn host_leaving(&self, host: &str) -> Result<(), StoreError> {
        self.connection()?.execute("DELETE FROM hosts WHERE name = $1", &[&host])?;
        Ok(())
    }

    /// Removes old deletion events under the organization's lock.
    fn prune_changes(&self, organization: Uuid, before: i64) -> Result<u64, StoreError> {
        self.locked(organization, |transaction, statements| {
            changes::prune(transaction, statements, organization, before)
        })
    }

    fn continue_changes_from(&self, organization: Uuid, latest: u64) -> Result<(), StoreError> {
        self.locked(organization, |transaction, statements| {
            changes::continue_from(transaction, statements, organization, latest)
        })
    }

    /// Writes records for an offline bulk load (`esr seed`): one batch, its
    /// indexes and counts included. A bulk load is the records as they
    /// are, not changes of them: the change feed gets no events.
    fn bulk_insert_records(
        &self,
        organization: Uuid,
        collection: Collection,
        records: &[Value],
    ) -> Result<(), StoreError> {
        let writes = [CollectionWrite::records(collection, records.to_vec())];
        self.write(organization, &mut |_, _| Ok(writes.to_vec()), Feed::Unrecorded, Build::UnderTheLock)
    }

    /// Bulk loads write their indexes as they go: nothing is left to do.
    fn finish_bulk_load(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Every commit is durable already.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Checks that every index entry and count, change event and history
    /// agrees with the records; returns what does not (empty when all is
    /// well). Reads everything.
    fn verify_indexes(&self) -> Result<Vec<String>, StoreError> {
        let mut connection = self.connection()?;
        let mut transaction = connection.client.transaction().map_err(store_error)?;
        // The entries the records imply are written here and compared in SQL,
        // so checking a million records holds one chunk of them in memory.
        transaction.batch_execute(
            "CREATE TEMP TABLE expected_entries (index_name text COLLATE \"C\", value bytea, position bigint, id uuid) \
             ON COMMIT DROP",
        ).map_err(store_error)?;
        let mut problems = Vec::new();
        for collection in Collection::ALL {
            let organizations: BTreeSet<Uuid> = transaction
                .query(
                    "SELECT org_id FROM records WHERE collection = $1 UNION SELECT org_id FROM index_entries \
                     WHERE collection = $1 UNION SELECT org_id FROM counts WHERE collection = $1",
                    &[&collection.name()],
                )
                .map_err(store_error)?
                .iter()
                .map(|row| row.get(0))
                .collect();
            let (mut missing, mut extra, mut counts_differ) = (0, 0, false);
            for organization in organizations {
                let found = verify_organization_indexes(&mut transaction, organization, collection)?;
                missing += found.missing;
                extra += found.extra;
                counts_differ |= found.counts_differ;
            }
            if missing + extra > 0 {
                problems.push(format!("{collection}: {missing} index entries missing, {extra} pointing at nothing"));
            }
            if counts_differ {
                problems.push(format!("{collection}: index counts disagree with the records"));
            }
        }
        problems.extend(changes::verify(&mut transaction)?);
        transaction.rollback().map_err(store_error)?;
        Ok(problems)
    }
}

/// What one organization's collection holds against what its records imply.
struct IndexDisagreement {
    missing: i64,
    extra: i64,
    counts_differ: bool,
}

/// How many records [`verify_organization_indexes`] reads at a time.
const VERIFY_CHUNK: i32 = 1_000;

fn verify_organization_indexes(
    transaction: &mut postgres::Transaction<'_>,
    organization: Uuid,
    collection: Collection,
) -> Result<IndexDisagreement, StoreError> {
    transaction.batch_execute("TRUNCATE expected_entries").map_err(store_error)?;
    let mut counts: BTreeMap<(String, Vec<u8>), i64> = BTreeMap::new();
    let records = transaction
        .bind(
            "SELECT id, body FROM records WHERE org_id = $1 AND collection = $2",
            &[&organization, &collection.name()],
        )
        .map_err(store_error)?;
    loop {
        let rows = transaction.query_portal(&records, VERIFY_CHUNK).map_err(store_error)?;
        if rows.is_empty() {
            break;
        }
        let sink = transaction
            .copy_in("COPY expected_entries (index_name, value, position, id) FROM STDIN BINARY")
            .map_err(store_error)?;
        let mut writer = BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::BYTEA, Type::INT8, Type::UUID]);
        for row in &rows {
            let (id, body): (Uuid, &[u8]) = (row.get(0), row.get(1));
            let record: Value = serde_json::from_slice(body).map_err(|error| StoreError::Corrupt(error.to_string()))?;
            let found = record_entries(collection, id, &record)?;
            for (index, value, position) in found.entries {
                writer.write(&[&index, &value.as_bytes(), &position, &id]).map_err(store_error)?;
            }
            for (name, value) in found.tallies {
                *counts.entry((name, value.into_bytes())).or_default() += 1;
            }
        }
        writer.finish().map_err(store_error)?;
    }
    // Every entry stored: the index columns' and every row of `index_entries`
    // (a row of an index kept in columns is one too many).
    let mut stored: Vec<String> = indexes::indexes(collection)
        .iter()
        .filter(|index| !columns::in_rows(collection, index.name))
        .map(|index| {
            format!(
                "SELECT '{}'::text COLLATE \"C\", value, position, id FROM ({}) e",
                index.name,
                columns::entries_of(collection, index, false)
            )
        })
        .collect();
    stored.push(format!(
        "SELECT index_name, value, position, id FROM index_entries WHERE org_id = $1 AND collection = '{collection}'"
    ));
    let stored = stored.join(" UNION ALL ");
    let expected = "SELECT index_name, value, position, id FROM expected_entries";
    let missing: i64 = transaction
        .query_one(&format!("SELECT count(*) FROM ({expected} EXCEPT ({stored})) AS missing"), &[&organization])
        .map_err(store_error)?
        .get(0);
    let extra: i64 = transaction
        .query_one(&format!("SELECT count(*) FROM (({stored}) EXCEPT {expected}) AS extra"), &[&organization])
        .map_err(store_error)?
        .get(0);
    let stored_counts: BTreeMap<(String, Vec<u8>), i64> = transaction
        .query(
            "SELECT name, value, n FROM counts WHERE org_id = $1 AND collection = $2",
            &[&organization, &collection.name()],
        )
        .map_err(store_error)?
        .iter()
        .map(|row| ((row.get(0), row.get(1)), row.get(2)))
        .collect();
    Ok(IndexDisagreement { missing, extra, counts_differ: stored_counts != counts })
}

/// Reads of one organization for one request (see [`PgStore::reader_from`]).
pub struct PgReader {
    pool: Pool,
    /// The replicas this session may read; `None`: the primary only.
    replicas: Option<Arc<ReplicaSet>>,
    /// The position a replica must have replayed to serve this session.
    needed: u64,
    /// The connection from the first read on; the flag says whether it is
    /// a replica's.
    open: Option<(r2d2::PooledConnection<Manager>, bool)>,
    /// Whether `open` is in the session's read-only snapshot. A session
    /// whose first read is by id reads it alone (see [`PgReader::get`])
    /// and begins the snapshot only if it reads again.
    in_snapshot: bool,
    position: Option<u64>,
    failed_on_replica: bool,
    organization: Uuid,
    /// When the request's time is up: every statement of the snapshot runs
    /// under the time left (`statement_timeout`).
    deadline: Option<std::time::Instant>,
    /// When the snapshot's `statement_timeout` was last set.
    timeout_set_at: Option<std::time::Instant>,
    /// The session's last count, with its groups when a count of several
    /// filters together found them ([`grouped`]): a list counts the same
    /// filters twice (to choose its walk, then for its total), and a
    /// summary's groups match its total's filters. One snapshot: the same
    /// answer.
    counted: Option<(Collection, Matching, grouped::Grouped)>,
    /// Whether the round trip that begins the snapshot also reads the
    /// change log (a list's first read), and what it read.
    opening_reads_change_log: bool,
    opened_change_log: Option<ChangeLog>,
    /// The count rows the snapshot read ([`CountsRead`]).
    counts_read: CountsRead,
}

/// `value` as a literal of a statement's text.
fn fixed_bytes(value: &[u8]) -> String {
    format!("'\\x{}'::bytea", hex::encode(value))
}

/// `text` as a string literal of a statement's text (a name the contract
/// fixes, written in so that the statement's plan is made once).
fn text_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// How often a session sets its statements' timeout to the time left: a
/// statement may outlive the deadline by at most this.
const TIMEOUT_REFRESH: Duration = Duration::from_millis(100);

/// Begins the read-only snapshot a page and its total share.
const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
/// The primary's write position now: what a cursor or a write must wait for
/// a replica to have replayed.
const CURRENT_POSITION: &str = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8";

/// Sends a snapshot's opening statements. A connection whose opening
/// failed may be left inside the failed transaction, where every later
/// statement fails: it is closed, not pooled again.
fn open_snapshot(
    connection: &mut Connection,
    statements: &str,
) -> Result<Vec<postgres::SimpleQueryMessage>, StoreError> {
    connection.client.simple_query(statements).map_err(|error| {
        connection.broken = true;
        store_error(error)
    })
}

/// Where the answer of a simple query's last statement begins: after the
/// last but one statement's end.
fn last_answer_start(messages: &[postgres::SimpleQueryMessage]) -> Result<usize, StoreError> {
    let mut ends = messages
        .iter()
        .enumerate()
        .filter(|(_, message)| matches!(message, postgres::SimpleQueryMessage::CommandComplete(_)));
    match ends.nth_back(1) {
        Some((last_but_one, _)) => Ok(last_but_one + 1),
        None => Err(StoreError::Backend("the snapshot's opening statements went unanswered".to_owned())),
    }
}

impl PgReader {
    /// The session every read of this reader runs in; the snapshot begins
    /// with the first read, so a page and its total agree.
    pub fn session(&mut self) -> Result<Session<'_, postgres::Client>, StoreError> {
        if self.open.is_none() {
            let opened = match self.on_replica() {
                Some(opened) => opened,
                None => self.on_primary()?,
            };
            self.open = Some(opened);
            self.in_snapshot = true;
        }
        if !self.in_snapshot {
            // After a read by id on its own: the primary's, as that read's.
            let bound = self.timeout_statement()?;
            let Some((connection, _)) = self.open.as_mut() else {
                return Err(StoreError::Backend("the read session has no connection".into()));
            };
            let messages = open_snapshot(connection, &format!("{BEGIN_SNAPSHOT}; {bound}{CURRENT_POSITION}"))?;
            self.in_snapshot = true;
            self.position = replicas::positions(&messages).first().copied().flatten().max(self.position);
        }
        let Some((connection, _)) = self.open.as_mut() else {
            return Err(StoreError::Backend("the read session has no connection".into()));
        };
        let Connection { client, statements, .. } = &mut **connection;
        let mut session = Session::new(client, statements, self.organization, None);
        session.counts_read = Some(&mut self.counts_read);
        Ok(session)
    }

    /// A snapshot on a usable replica that has replayed `needed`, if one has.
    fn on_replica(&mut self) -> Option<(r2d2::PooledConnection<Manager>, bool)> {
        let replicas = self.replicas.clone()?;
        for replica in replicas.usable() {
            let Some(mut connection) = replica.connection() else {
                replica.failed();
                continue;
            };
            // The replay position before the snapshot is a lower bound of
            // what it holds; the one after it, an upper bound (a cursor's).
            // (Two round trips: a statement before `BEGIN` in one simple
            // query would start the transaction without its isolation level.)
            const REPLAYED: &str = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8";
            let bound = self.timeout_statement().ok()?;
            let change_log = self.change_log_statement();
            let answer = open_snapshot(&mut connection, REPLAYED).and_then(|mut messages| {
                messages.extend(open_snapshot(
                    &mut connection,
                    &format!("{BEGIN_SNAPSHOT}; {bound}{REPLAYED}{change_log}"),
                )?);
                Ok(messages)
            });
            let positions = match answer.and_then(|messages| self.opened(&messages)) {
                Ok(positions) => positions,
                Err(error) => {
                    tracing::warn!(replica = %replica.name, %error, "a read replica failed; reading the primary");
                    replica.failed();
                    continue;
                }
            };
            match positions[..] {
                [Some(before), Some(after)] if before >= self.needed => {
                    self.position = Some(after);
                    return Some((connection, true));
                }
                _ => {
                    // Behind this session's writes or cursor: the primary answers.
                    self.opened_change_log = None;
                    if connection.client.batch_execute("ROLLBACK").is_err() {
                        replica.failed();
                    }
                    return None;
                }
            }
        }
        None
    }

    fn on_primary(&mut self) -> Result<(r2d2::PooledConnection<Manager>, bool), StoreError> {
        let (connection, _) = self.on_primary_then("")?;
        Ok((connection, false))
    }

    /// Begins the snapshot on the primary, with `then` (`; ` and one more
    /// statement, or nothing) sent in the same round trip; its answer.
    fn on_primary_then(
        &mut self,
        then: &str,
    ) -> Result<(r2d2::PooledConnection<Manager>, Vec<postgres::SimpleQueryMessage>), StoreError> {
        let mut connection = self.pool.get()?;
        // Every host learns the position, with replicas or not: a cursor it
        // issues may be followed on a host that reads replicas.
        let bound = self.timeout_statement()?;
        let change_log = self.change_log_statement();
        let mut messages =
            open_snapshot(&mut connection, &format!("{BEGIN_SNAPSHOT}; {bound}{CURRENT_POSITION}{change_log}{then}"))?;
        let then_answer = match then {
            "" => Ok(Vec::new()),
            _ => last_answer_start(&messages).map(|start| messages.split_off(start)),
        };
        match then_answer.and_then(|answer| Ok((self.opened(&messages)?, answer))) {
            Ok((positions, answer)) => {
                self.position = positions.first().copied().flatten();
                Ok((connection, answer))
            }
            Err(error) => {
                // Inside a snapshot whose answer was not understood.
                connection.broken = true;
                Err(error)
            }
        }
    }

    /// Begins the snapshot on the primary, reading the change log (a
    /// list's first read) and looking up the key stored under `key_hash`
    /// in the same round trip ([`Store::api_key_opening_reader`]).
    fn open_with_key(&mut self, key_hash: &[u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        esr_store::within(self.deadline)?;
        // The columns of `api_key_columns!`, named as `ApiKeyRecord`'s fields
        // (a simple query answers in text).
        let key = format!(
            "; SELECT json_build_object('id', id, 'organization_id', org_id, 'name', name, 'scopes', scopes, \
             'prefix', prefix, 'created_at', created_at, 'expires_at', expires_at, 'revoked_at', revoked_at, \
             'last_used_at', last_used_at)::text FROM api_keys WHERE key_hash = {}",
            fixed_bytes(key_hash)
        );
        self.opening_reads_change_log = true;
        let opened = self.on_primary_then(&key);
        self.opening_reads_change_log = false;
        let (connection, key_answer) = opened?;
        self.open = Some((connection, false));
        self.in_snapshot = true;
        let key = key_answer.iter().find_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or_default().to_owned()),
            _ => None,
        });
        key.map(|text| {
            serde_json::from_str::<ApiKeyRecord>(&text)
                .map_err(|error| StoreError::Corrupt(format!("an API key's stored record: {error}")))
        })
        .transpose()
    }

    /// The session's last count, if it counted these records.
    fn counted_before(
        &self,
        collection: Collection,
        matching: &Matching,
    ) -> Option<&(Collection, Matching, grouped::Grouped)> {
        self.counted
            .as_ref()
            .filter(|(counted, counted_matching, _)| *counted == collection && counted_matching == matching)
    }

    /// The change log's statement to send after the snapshot's `BEGIN`
    /// (with its `;`), when the opening round trip is to read it.
    fn change_log_statement(&self) -> String {
        if self.opening_reads_change_log {
            format!("; {}", changes::change_log_statement(self.organization))
        } else {
            String::new()
        }
    }

    /// The positions the opening round trip's statements answered; the
    /// change log, when it read it, is kept for [`StoreReader::change_log`].
    fn opened(&mut self, messages: &[postgres::SimpleQueryMessage]) -> Result<Vec<Option<u64>>, StoreError> {
        if !self.opening_reads_change_log {
            return Ok(replicas::positions(messages));
        }
        let (opening, change_log) = messages.split_at(last_answer_start(messages)?);
        self.opened_change_log = Some(changes::change_log_of(change_log)?);
        Ok(replicas::positions(opening))
    }

    /// Runs one read, within the request's deadline, noting a failure on a
    /// replica (the caller may retry on the primary).
    fn read<T>(
        &mut self,
        read: impl FnOnce(Session<'_, postgres::Client>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        esr_store::within(self.deadline)?;
        self.session()?;
        self.bound_by_deadline()?;
        let outcome = read(self.session()?);
        if matches!(outcome, Err(ref error) if !matches!(error, StoreError::DeadlineReached))
            && self.open.as_ref().is_some_and(|(_, replica)| *replica)
        {
            self.failed_on_replica = true;
        }
        outcome
    }

    /// The statement that bounds a snapshot's statements by the time left,
    /// sent with the snapshot's `BEGIN` in one round trip (empty without a
    /// deadline); the snapshot's timeout counts as set from now.
    fn timeout_statement(&mut self) -> Result<String, StoreError> {
        let Some(deadline) = self.deadline else { return Ok(String::new()) };
        let now = std::time::Instant::now();
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            return Err(StoreError::DeadlineReached);
        }
        self.timeout_set_at = Some(now);
        Ok(format!("SET LOCAL statement_timeout = {}; ", left.as_millis().max(1)))
    }

    /// Sets the snapshot's `statement_timeout` to the time left, unless it
    /// was set less than [`TIMEOUT_REFRESH`] ago.
    fn bound_by_deadline(&mut self) -> Result<(), StoreError> {
        if self.deadline.is_none()
            || self.timeout_set_at.is_some_and(|at| at.elapsed() < TIMEOUT_REFRESH)
            || self.open.is_none()
        {
            return Ok(());
        }
        let statement = self.timeout_statement()?;
        let Some((connection, _)) = self.open.as_mut() else { return Ok(()) };
        connection.client.batch_execute(&statement).map_err(store_error)
    }
}

impl StoreReader for PgReader {
    fn position(&self) -> Option<u64> {
        self.position
    }

    fn failed_on_replica(&self) -> bool {
        self.failed_on_replica
    }

    /// As a session's first read on the primary (a read by id mostly is
    /// the only one), it is one statement outside any snapshot, in one
    /// round trip with nothing to end after it: the write position it
    /// reads with the record is an upper bound of what the read saw.
    fn get(&mut self, collection: Collection, id: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
        let replicas_may_serve = self.replicas.as_ref().is_some_and(|replicas| replicas.any_usable());
        if self.open.is_some() || replicas_may_serve {
            return self.read(|mut session| session.get(collection, id));
        }
        let mut connection = self.pool.get()?;
        let row = connection.query_opt(
            "SELECT (SELECT body FROM records WHERE org_id = $1 AND collection = $2 AND id = $3), \
             (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8",
            &[&self.organization, &collection.name(), &id],
        );
        self.open = Some((connection, false));
        let row = row?.ok_or_else(|| StoreError::Backend("PostgreSQL answered a read by id with no row".into()))?;
        self.position = row.get::<_, Option<i64>>(1).map(|position| position as u64);
        Ok(row.get(0))
    }

    fn get_many(&mut self, collection: Collection, ids: &[Uuid]) -> Result<Vec<StoredRecord>, StoreError> {
        self.read(|mut session| session.get_many(collection, ids))
    }

    fn scan(&mut self, collection: Collection, walk: &RecordWalk) -> Result<Vec<StoredRecord>, StoreError> {
        self.read(|mut session| session.scan(collection, walk))
    }

    fn count(&mut self, collection: Collection) -> Result<u64, StoreError> {
        self.read(|mut session| session.count(collection))
    }

    fn index_scan_each(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
        each: &mut esr_store::EachIndexed<'_>,
    ) -> Result<(), StoreError> {
        self.read(|mut session| session.index_scan_each(collection, walk, &mut *each))
    }

    fn index_positions(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
    ) -> Result<Vec<IndexPosition>, StoreError> {
        self.read(|mut session| session.index_positions(collection, walk))
    }

    fn ids_holding_any(
        &mut self,
        collection: Collection,
        index: &str,
        values: &[String],
    ) -> Result<std::collections::BTreeSet<Uuid>, StoreError> {
        self.read(|mut session| session.ids_holding_any(collection, index, values))
    }

    fn index_count(&mut self, collection: Collection, index: &str, value: &str) -> Result<u64, StoreError> {
        self.read(|mut session| session.index_count(collection, index, value))
    }

    fn index_values(&mut self, collection: Collection, index: &str) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|mut session| session.index_values(collection, index))
    }

    fn count_matching(&mut self, collection: Collection, matching: &Matching) -> Result<u64, StoreError> {
        if let Some((.., counted)) = self.counted_before(collection, matching) {
            return Ok(counted.total);
        }
        // The group sets only for a count that reads rows anyway.
        let sets = if grouped::reads_rows(matching) { grouped::group_sets(collection) } else { Vec::new() };
        let counted = if sets.is_empty() {
            grouped::Grouped::total_only(self.read(|mut session| session.count_matching(collection, matching))?)
        } else {
            self.read(|mut session| session.count_with_groups(collection, matching, &sets))?
        };
        let total = counted.total;
        self.counted = Some((collection, matching.clone(), counted));
        Ok(total)
    }

    /// As a session's first read (a list's), in the round trip that
    /// begins its snapshot.
    fn change_log(&mut self) -> Result<ChangeLog, StoreError> {
        // Read when the session began with its key's lookup.
        if let Some(change_log) = self.opened_change_log.take() {
            return Ok(change_log);
        }
        if self.open.is_none() {
            self.opening_reads_change_log = true;
            let opened = self.read(|_| Ok(()));
            self.opening_reads_change_log = false;
            opened?;
            if let Some(change_log) = self.opened_change_log.take() {
                return Ok(change_log);
            }
        }
        self.read(|mut session| session.change_log())
    }

    fn changes(&mut self, after: u64, wanted: &[Collection], limit: usize) -> Result<Vec<ChangeEvent>, StoreError> {
        self.read(|mut session| session.changes(after, wanted, limit))
    }

    fn history(&mut self, collection: Collection, id: Uuid) -> Result<Vec<Vec<u8>>, StoreError> {
        self.read(|mut session| session.history(collection, id))
    }

    fn count_groups_of_candidates(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        max_candidates: u64,
    ) -> Result<Option<Vec<GroupCount>>, StoreError> {
        if let Some(groups) =
            self.counted_before(collection, matching).and_then(|(.., counted)| counted.groups(group_by))
        {
            return Ok(Some(groups));
        }
        // Rows read anyway: the groups asked for and the total in one
        // statement, the total kept for the count that follows.
        if grouped::reads_rows(matching)
            && let Some(set) = grouped::group_set_of(collection, group_by)
        {
            let counted = self.read(|mut session| session.count_with_groups(collection, matching, &[set]))?;
            let groups = counted.groups(group_by);
            self.counted = Some((collection, matching.clone(), counted));
            if groups.is_some() {
                return Ok(groups);
            }
        }
        self.read(|mut session| session.count_groups_of_candidates(collection, group_by, matching, max_candidates))
    }
}

/// The write transaction's reads, for a batch's build step.
impl<C: GenericClient + Send> StoreReader for Session<'_, C> {
    /// The record with this id in the organization's collection.
    fn get(&mut self, collection: Collection, id: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
        let organization = self.organization;
        self.by_id_statements += 1;
        let row = self.query_opt(
            "SELECT body FROM records WHERE org_id = $1 AND collection = $2 AND id = $3",
            &[&organization, &collection.name(), &id],
        )?;
        let body: Option<Vec<u8>> = row.map(|row| row.get(0));
        if let Some(read) = self.read_by_id.as_mut() {
            read.entry(collection).or_default().insert(id, body.clone());
        }
        Ok(body)
    }

    /// The records with these ids that exist, each once: one statement.
    fn get_many(&mut self, collection: Collection, ids: &[Uuid]) -> Result<Vec<StoredRecord>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let organization = self.organization;
        self.by_id_statements += 1;
        let rows = self.query(
            "SELECT id, body FROM records WHERE org_id = $1 AND collection = $2 AND id = ANY($3)",
            &[&organization, &collection.name(), &ids],
        )?;
        let found: Vec<StoredRecord> = rows.into_iter().map(|row| (row.get(0), row.get(1))).collect();
        if let Some(read) = self.read_by_id.as_mut() {
            let read = read.entry(collection).or_default();
            read.extend(ids.iter().map(|id| (*id, None)));
            read.extend(found.iter().map(|(id, body)| (*id, Some(body.clone()))));
        }
        Ok(found)
    }

    /// Up to `limit` (at most [`MAX_SCAN`]) records in id order, after
    /// `after` when given; `reverse` walks from the newest.
    fn scan(&mut self, collection: Collection, walk: &RecordWalk) -> Result<Vec<StoredRecord>, StoreError> {
        let organization = self.organization;
        let RecordWalk { after, limit, reverse } = *walk;
        let limit = limit.min(MAX_SCAN) as i64;
        let (comparison, order) = if reverse { ("<", "DESC") } else { (">", "ASC") };
        let rows = match after {
            None => self.query(
                &format!(
                    "SELECT id, body FROM records WHERE org_id = $1 AND collection = $2 ORDER BY id {order} LIMIT $3"
                ),
                &[&organization, &collection.name(), &limit],
            )?,
            Some(after) => self.query(
                &format!(
                    "SELECT id, body FROM records WHERE org_id = $1 AND collection = $2 AND id {comparison} $3 \
                     ORDER BY id {order} LIMIT $4"
                ),
                &[&organization, &collection.name(), &after, &limit],
            )?,
        };
        Ok(rows.into_iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// How many records the organization holds in the collection.
    fn count(&mut self, collection: Collection) -> Result<u64, StoreError> {
        if !Collection::ALL.contains(&collection) {
            return Ok(0);
        }
        self.stored_count(collection, CREATED_AT, b"")
    }

    /// Up to `limit` (at most [`MAX_SCAN`]) records holding `value` in the
    /// index, in position, id order, strictly after `after` (before it, in
    /// reverse) when given.
    fn index_scan_each(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
        each: &mut esr_store::EachIndexed<'_>,
    ) -> Result<(), StoreError> {
        let index = walk.index;
        // The count rows a list asks for after its page, read with it when
        // the session has not read them: a condition's walked value's (its
        // total), and the collection's size (a total without filters).
        let walks_condition = known_index(collection, index)?.order == indexes::IndexOrder::CreatedAt;
        let carried: Vec<(&str, &[u8])> = match self.counts_read.as_ref() {
            Some(read) => {
                let own = (walks_condition && index != CREATED_AT).then_some((index, walk.value.as_bytes()));
                own.into_iter()
                    .chain([(CREATED_AT, &b""[..])])
                    .filter(|(name, value)| !read.knows(collection, name, value))
                    .collect()
            }
            None => Vec::new(),
        };
        let rows = self.entries(collection, walk, true, &carried)?;
        if let Some(row) = rows.first()
            && let Some(read) = self.counts_read.as_mut()
        {
            for (n, (name, value)) in carried.iter().enumerate() {
                read.keep_value(collection, name, value, row.get::<_, Option<i64>>(3 + n).unwrap_or(0).max(0) as u64);
            }
        }
        for row in rows {
            let body: Option<&[u8]> = row.get(2);
            let body = body.ok_or_else(|| {
                StoreError::Corrupt(format!("index {index} of {collection} points at a missing record"))
            })?;
            each(IndexPosition::new(row.get(0), row.get(1)), body)?;
        }
        Ok(())
    }

    /// The positions of [`Connection::index_scan`]'s records (position,
    /// id), read from the index alone.
    fn index_positions(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
    ) -> Result<Vec<IndexPosition>, StoreError> {
        let rows = self.entries(collection, walk, false, &[])?;
        Ok(rows.into_iter().map(|row| IndexPosition::new(row.get(0), row.get(1))).collect())
    }

    /// The ids of every record holding any of `values` in the index: one query.
    fn ids_holding_any(
        &mut self,
        collection: Collection,
        index: &str,
        values: &[String],
    ) -> Result<std::collections::BTreeSet<Uuid>, StoreError> {
        let organization = self.organization;
        let index = known_index(collection, index)?;
        let values: Vec<&[u8]> = values.iter().map(String::as_bytes).collect();
        let rows = self.query(
            &format!(
                "SELECT DISTINCT e.id FROM ({}) e WHERE e.value = ANY($2)",
                columns::entries_of(collection, &index, false)
            ),
            &[&organization, &values],
        )?;
        Ok(rows.into_iter().map(|row| row.get(0)).collect())
    }

    /// How many records hold `value` in the index.
    fn index_count(&mut self, collection: Collection, index: &str, value: &str) -> Result<u64, StoreError> {
        known_index(collection, index)?;
        self.stored_count(collection, index, value.as_bytes())
    }

    /// Every value the organization's records hold in the index, with its
    /// count: the index's count rows.
    fn index_values(&mut self, collection: Collection, index: &str) -> Result<Vec<(String, u64)>, StoreError> {
        known_index(collection, index)?;
        let as_text = |(value, n): (Vec<u8>, u64)| {
            let value = String::from_utf8(value)
                .map_err(|_| StoreError::Corrupt(format!("a count row of {collection}/{index} is not UTF-8")))?;
            Ok((value, n))
        };
        let kept = self.with_kept_rows(collection, index, |rows| {
            let mut held: Vec<(Vec<u8>, u64)> =
                rows.iter().filter(|(_, n)| **n > 0).map(|(value, n)| (value.clone(), *n)).collect();
            held.sort_unstable();
            held
        })?;
        if let Some(held) = kept {
            return held.into_iter().map(as_text).collect();
        }
        let organization = self.organization;
        let rows = self.query(
            "SELECT value, n FROM counts WHERE org_id = $1 AND collection = $2 AND name = $3 AND n > 0 ORDER BY value",
            &[&organization, &collection.name(), &index],
        )?;
        rows.iter().map(|row| as_text((row.get(0), row.get::<_, i64>(1).max(0) as u64))).collect()
    }

    fn count_matching(&mut self, collection: Collection, matching: &Matching) -> Result<u64, StoreError> {
        let Matching { ranges, conditions, updated_after } = matching;
        if ranges.is_empty() {
            return self.count_unranged(collection, conditions, *updated_after);
        }
        self.count_in_ranges(collection, ranges, conditions, *updated_after)
    }

    fn change_log(&mut self) -> Result<ChangeLog, StoreError> {
        Session::change_log(self)
    }

    fn changes(&mut self, after: u64, wanted: &[Collection], limit: usize) -> Result<Vec<ChangeEvent>, StoreError> {
        Session::changes(self, after, wanted, limit)
    }

    fn history(&mut self, collection: Collection, id: Uuid) -> Result<Vec<Vec<u8>>, StoreError> {
        Session::history(self, collection, id)
    }

    fn count_groups_of_candidates(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        max_candidates: u64,
    ) -> Result<Option<Vec<GroupCount>>, StoreError> {
        Session::count_groups_of_candidates(self, collection, group_by, matching, max_candidates)
    }
}

impl Drop for PgReader {
    fn drop(&mut self) {
        let Some((mut connection, _)) = self.open.take() else {
            return;
        };
        if !self.in_snapshot {
            return;
        }
        // The connection goes back to the pool outside any transaction. On
        // the server, the snapshot ends on another blocking thread, so the
        // answer read in it goes out without waiting for that round trip.
        let mut end_snapshot = move || {
            if connection.client.batch_execute("ROLLBACK").is_err() {
                // Closed, not pooled: a connection left in a transaction
                // would give its next reader an old snapshot.
                connection.broken = true;
                tracing::warn!("a database connection could not end its read snapshot");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(end_snapshot)),
            Err(_) => end_snapshot(),
        }
    }
}

/// Whether every server `url` names is on this machine (a Unix socket or a
/// loopback address): then the database and the host share its cores.
pub fn on_this_machine(url: &str) -> bool {
    let Ok(config) = config_of(url) else { return false };
    !config.get_hosts().is_empty()
        && config.get_hosts().iter().all(|host| match host {
            postgres::config::Host::Unix(_) => true,
            postgres::config::Host::Tcp(name) => {
                name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|address| address.is_loopback())
            }
        })
}

fn config_of(url: &str) -> Result<postgres::Config, StoreError> {
    url.parse().map_err(|error| StoreError::Unsupported(format!("the database URL: {error}")))
}

fn marker_name(name: &str) -> String {
    format!("marker/{name}")
}

fn organization_of(row: &postgres::Row) -> Organization {
    Organization { organization_id: row.get(0), name: row.get(1), enrollment_token: row.get(2), created_at: row.get(3) }
}

fn api_key_of(row: &postgres::Row) -> ApiKeyRecord {
    ApiKeyRecord {
        id: row.get(0),
        organization_id: row.get(1),
        name: row.get(2),
        scopes: row.get(3),
        prefix: row.get(4),
        created_at: row.get(5),
        expires_at: row.get(6),
        revoked_at: row.get(7),
        last_used_at: row.get(8),
    }
}

/// The reads of one organization's records on one client: a pooled
/// connection (in a read-only snapshot) or a write transaction.
pub struct Session<'a, C: GenericClient> {
    client: &'a mut C,
    statements: &'a mut HashMap<String, Statement>,
    organization: Uuid,
    /// What the session read by id, when it remembers it (a write's build
    /// step: the write compares its records with these without reading
    /// them again).
    read_by_id: Option<ReadById>,
    /// A read session's count rows, kept for its snapshot (none in a write).
    counts_read: Option<&'a mut CountsRead>,
    /// Statements the session ran, and those of them that read records by
    /// id: a build made ahead of the lock is kept only if they are equal.
    statements_run: usize,
    by_id_statements: usize,
}

/// Records read by id, by collection: `None` for an id not stored.
type ReadById = HashMap<Collection, HashMap<Uuid, Option<Vec<u8>>>>;

impl<'a, C: GenericClient + Send> Session<'a, C> {
    fn new(
        client: &'a mut C,
        statements: &'a mut HashMap<String, Statement>,
        organization: Uuid,
        read_by_id: Option<ReadById>,
    ) -> Session<'a, C> {
        Session {
            client,
            statements,
            organization,
            read_by_id,
            counts_read: None,
            statements_run: 0,
            by_id_statements: 0,
        }
    }

    /// Whether every statement the session ran read records by id.
    fn read_only_by_id(&self) -> bool {
        self.statements_run == self.by_id_statements
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<postgres::Row>, StoreError> {
        self.statements_run += 1;
        let statement = prepared(self.statements, self.client, sql)?;
        self.client.query(&statement, params).map_err(store_error)
    }

    fn query_opt(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<postgres::Row>, StoreError> {
        self.statements_run += 1;
        let statement = prepared(self.statements, self.client, sql)?;
        self.client.query_opt(&statement, params).map_err(store_error)
    }

    /// One keyset page of a walk's entries: (position, id) rows, with the
    /// record's body when `bodies`, and after it the count row of each of
    /// `carried` (name, value): the walked value's, or the collection's
    /// size ([`counts_read::count_column`]).
    fn entries(
        &mut self,
        collection: Collection,
        walk: &IndexWalk<'_>,
        bodies: bool,
        carried: &[(&str, &[u8])],
    ) -> Result<Vec<postgres::Row>, StoreError> {
        let limit = walk.limit.min(MAX_SCAN);
        let (comparison, order) = if walk.reverse { ("<", "DESC") } else { (">", "ASC") };
        let index = known_index(collection, walk.index)?;
        let body = if bodies { ", e.body" } else { "" };
        let mut params = SqlParams::new(self.organization);
        // A walk has one good plan, the index's scan in order, and
        // PostgreSQL uses its generic plan (planned once per connection)
        // only where it costs no more than a plan made for the parameters'
        // values: so the limit, and a value of the few an index of its kind
        // holds, are written into the text (any other value is a
        // parameter: the statements kept per connection stay few), and the
        // position a walk starts after is read through a sub-select, which
        // no plan can see into. Planning at every execution cost more than
        // running the statement (docs/performance.md).
        let value = if index.holds_only_fixed(walk.value) {
            fixed_bytes(walk.value.as_bytes())
        } else {
            params.add(walk.value.as_bytes().to_vec())
        };
        let after = match walk.after {
            None => String::new(),
            Some(IndexPosition { position, id }) => {
                let (position, id) = (params.add(position), params.add(id));
                format!(" AND (e.position, e.id) {comparison} ((SELECT {position}::int8), {id})")
            }
        };
        let mut counts = String::new();
        for (name, carried) in carried {
            let carried = if *carried == walk.value.as_bytes() { value.clone() } else { fixed_bytes(carried) };
            counts.push_str(&counts_read::count_column(collection, name, &carried));
        }
        self.query(
            &format!(
                "SELECT e.position, e.id{body}{counts} FROM ({}) e WHERE e.value = {value}{after} \
                 ORDER BY e.position {order}, e.id {order} LIMIT {limit}",
                columns::entries_of(collection, &index, bodies)
            ),
            &params.refs(),
        )
    }

    /// A count row (0 when absent), from those the session read when it
    /// read them ([`CountsRead`]).
    fn stored_count(&mut self, collection: Collection, name: &str, value: &[u8]) -> Result<u64, StoreError> {
        if let Some(count) = self.counts_read.as_ref().and_then(|read| read.value(collection, name, value)) {
            return Ok(count);
        }
        if let Some(count) = self.with_kept_rows(collection, name, |rows| rows.get(value).copied().unwrap_or(0))? {
            return Ok(count);
        }
        let organization = self.organization;
        let row = self.query_opt(
            "SELECT n FROM counts WHERE org_id = $1 AND collection = $2 AND name = $3 AND value = $4",
            &[&organization, &collection.name(), &name, &value],
        )?;
        let count = row.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64);
        if let Some(read) = self.counts_read.as_mut() {
            read.keep_value(collection, name, value, count);
        }
        Ok(count)
    }

    /// `read` of every count row of a few-valued name, read once per
    /// session at the name's first use ([`CountsRead`]); `None` for
    /// another name, one of more rows than are kept, or a write's session.
    fn with_kept_rows<T>(
        &mut self,
        collection: Collection,
        name: &str,
        read: impl FnOnce(&CountRows) -> T,
    ) -> Result<Option<T>, StoreError> {
        if !few_valued(collection, name) {
            return Ok(None);
        }
        let Some(counts_read) = self.counts_read.take() else { return Ok(None) };
        let kept = self.kept_rows(counts_read, collection, name).map(|rows| rows.map(read));
        self.counts_read = Some(counts_read);
        kept
    }

    fn kept_rows<'c>(
        &mut self,
        counts_read: &'c mut CountsRead,
        collection: Collection,
        name: &str,
    ) -> Result<Option<&'c CountRows>, StoreError> {
        if counts_read.rows(collection, name).is_none()
            && counts_read::counted_indexes(collection).contains(&name)
            && counts_read.first_read_of_counted_indexes(collection)
        {
            self.read_counted_indexes(counts_read, collection)?;
        }
        if counts_read.rows(collection, name).is_none() {
            let organization = self.organization;
            // The collection and name in the text: with them as parameters,
            // PostgreSQL planned the statement at every execution.
            let rows = self.query(
                &format!(
                    "SELECT value, n FROM counts WHERE org_id = $1 AND collection = {} AND name = {} LIMIT {}",
                    text_literal(collection.name()),
                    text_literal(name),
                    MAX_COUNT_ROWS_READ + 1
                ),
                &[&organization],
            )?;
            let all = (rows.len() <= MAX_COUNT_ROWS_READ).then(|| {
                rows.iter().map(|row| (row.get::<_, Vec<u8>>(0), row.get::<_, i64>(1).max(0) as u64)).collect()
            });
            counts_read.keep_rows(collection, name, all);
        }
        Ok(counts_read.rows(collection, name).and_then(Option::as_ref))
    }

    /// Every row of the indexes of the collection's counted pairs, in one
    /// statement ([`counts_read::counted_indexes`]). Kept only when they
    /// are no more than [`MAX_COUNT_ROWS_READ`] in all (else each name is
    /// read alone).
    fn read_counted_indexes(&mut self, counts_read: &mut CountsRead, collection: Collection) -> Result<(), StoreError> {
        let names = counts_read::counted_indexes(collection);
        let organization = self.organization;
        let listed: Vec<String> = names.iter().map(|name| text_literal(name)).collect();
        let rows = self.query(
            &format!(
                "SELECT name, value, n FROM counts WHERE org_id = $1 AND collection = {} AND name IN ({}) LIMIT {}",
                text_literal(collection.name()),
                listed.join(", "),
                MAX_COUNT_ROWS_READ + 1
            ),
            &[&organization],
        )?;
        if rows.len() > MAX_COUNT_ROWS_READ {
            return Ok(());
        }
        let mut read: HashMap<&str, CountRows> = names.iter().map(|name| (*name, CountRows::new())).collect();
        for row in &rows {
            if let Some(counted) = read.get_mut(row.get::<_, &str>(0)) {
                counted.insert(row.get::<_, Vec<u8>>(1), row.get::<_, i64>(2).max(0) as u64);
            }
        }
        for (name, rows) in read {
            counts_read.keep_rows(collection, name, Some(rows));
        }
        Ok(())
    }

    /// How many of the organization's records hold one of each
    /// condition's values in its index and, when given, were updated
    /// strictly after `updated_after` (Unix nanoseconds). Answered from
    /// counts where the sled backend answers from counts (one condition, a
    /// counted pair, `updatedAfter` alone); otherwise the conditions' index
    /// entries are intersected in the database.
    fn count_unranged(
        &mut self,
        collection: Collection,
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        if conditions.is_empty() && !Collection::ALL.contains(&collection) {
            return Ok(0);
        }
        let mut sized = Vec::with_capacity(conditions.len());
        for IndexCondition { index, values } in conditions {
            known_index(collection, index)?;
            // Each value once: a repeated value must not count its records twice.
            let values: Vec<String> = values.iter().collect::<BTreeSet<_>>().into_iter().cloned().collect();
            let everything =
                indexes::find(collection, index).is_some_and(|found| found.key == indexes::IndexKey::Everything);
            if everything && values.iter().any(String::is_empty) {
                continue;
            }
            let mut held = 0;
            for value in &values {
                held += self.stored_count(collection, index, value.as_bytes())?;
            }
            sized.push((held, index.as_str(), values));
        }
        sized.sort_by_key(|(held, ..)| *held);
        if let [(held, index, values)] = sized.as_slice()
            && updated_after.is_none()
            && (values.len() == 1 || single_valued(collection, index))
        {
            return Ok(*held);
        }
        if let [(_, a, a_values), (_, b, b_values)] = sized.as_slice()
            && updated_after.is_none()
        {
            let pairs = indexes::counted_pairs(collection);
            let ordered = if pairs.contains(&(a, b)) {
                Some(((*a, a_values), (*b, b_values)))
            } else if pairs.contains(&(b, a)) {
                Some(((*b, b_values), (*a, a_values)))
            } else {
                None
            };
            if let Some(((first, first_values), (second, second_values))) = ordered {
                let name = indexes::pair_name(first, second);
                let mut total = 0;
                for x in first_values {
                    for y in second_values {
                        total += self.stored_count(collection, &name, indexes::pair_value(x, y).as_bytes())?;
                    }
                }
                return Ok(total);
            }
        }
        if sized.is_empty() {
            return match updated_after {
                None => self.count(collection),
                Some(after) => self.count_updated_after(collection, after),
            };
        }
        if sized.first().is_some_and(|(held, ..)| *held == 0) {
            return Ok(0);
        }
        let conditions: Vec<IndexCondition> =
            sized.into_iter().map(|(_, index, values)| IndexCondition::new(index, values)).collect();
        self.count_intersection(collection, &[], &conditions, updated_after)
    }

    /// How many of the organization's records lie in every one of
    /// `ranges` (hold the sort value of its sort index at a position
    /// strictly between its ends; an absent end is open), meet every
    /// condition and, when given, were updated strictly after
    /// `updated_after`.
    fn count_in_ranges(
        &mut self,
        collection: Collection,
        ranges: &[IndexRange],
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        check_filters(collection, ranges, conditions)?;
        let conditions: Vec<IndexCondition> = conditions
            .iter()
            .map(|condition| {
                let values = condition.values.iter().collect::<BTreeSet<_>>().into_iter().cloned().collect();
                IndexCondition::new(condition.index.clone(), values)
            })
            .collect();
        self.count_intersection(collection, ranges, &conditions, updated_after)
    }

    /// [`StoreReader::count_groups_of_candidates`] in one statement: the
    /// smallest condition on an index ordered by creation gives the
    /// candidates (position, id); every other condition on such an index,
    /// and each group index's values (its count rows), are looked up at
    /// the candidate's place in the primary key (no index by id is kept);
    /// any other condition, the ranges and `updated_after` are sets of ids.
    /// Without such a condition, ranges alone are the statement's walk.
    pub fn count_groups_of_candidates(
        &mut self,
        collection: Collection,
        group_by: &[String],
        matching: &Matching,
        max_candidates: u64,
    ) -> Result<Option<Vec<GroupCount>>, StoreError> {
        let Matching { ranges, conditions, updated_after } = matching;
        let updated_after = *updated_after;
        for index in group_by {
            known_index(collection, index)?;
        }
        let mut sized = Vec::new();
        for IndexCondition { index, values } in restricting_conditions(collection, conditions) {
            known_index(collection, &index)?;
            let mut held = 0;
            for value in &values {
                held += self.stored_count(collection, &index, value.as_bytes())?;
            }
            sized.push((held, index, values));
        }
        for range in ranges {
            known_index(collection, &range.index)?;
            sort_index(collection, &range.index)?;
        }
        sized.sort_by_key(|(held, ..)| *held);
        // Ranges without such a condition: the database walks their index
        // entries in the same statement.
        match sized.iter().position(|(_, index, _)| ordered_by_creation(collection, index)) {
            Some(source) if sized[source].0 > max_candidates => return Ok(None),
            None if ranges.is_empty() => return Ok(None),
            _ => {}
        }
        let conditions: Vec<IndexCondition> =
            sized.into_iter().map(|(_, index, values)| IndexCondition::new(index, values)).collect();
        let mut params = SqlParams::new(self.organization);
        let (mut selected, mut joins, mut present) = (Vec::new(), String::new(), Vec::new());
        for (n, name) in group_by.iter().enumerate() {
            let index = known_index(collection, name)?;
            match columns::placement(&index) {
                columns::Placement::Columns { value, .. } => {
                    selected.push(format!("r.{value}"));
                    present.push(format!(" AND r.{value} IS NOT NULL"));
                }
                // A record counts in the group of each of its values.
                columns::Placement::Rows => {
                    selected.push(format!("g{n}.value"));
                    joins.push_str(&format!(
                        " JOIN index_entries g{n} ON g{n}.org_id = r.org_id AND g{n}.collection = r.collection \
                         AND g{n}.index_name = '{name}' AND g{n}.id = r.id"
                    ));
                }
            }
        }
        let matching = where_matching(collection, ranges, &conditions, updated_after, &mut params)?;
        let (selected, present) = (selected.join(", "), present.concat());
        let positions = (1..=group_by.len()).map(|n| n.to_string()).collect::<Vec<_>>().join(", ");
        let sql = format!(
            "SELECT {selected}, count(*) FROM records r{joins} WHERE {matching}{present} GROUP BY {positions} \
             ORDER BY {positions}"
        );
        let rows = self.query(&sql, &params.refs())?;
        let mut groups = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(group_by.len());
            for (n, index) in group_by.iter().enumerate() {
                let value: Vec<u8> = row.get(n);
                values.push(String::from_utf8(value).map_err(|_| {
                    StoreError::Corrupt(format!("an index entry of {collection}/{index} is not UTF-8"))
                })?);
            }
            let count = row.get::<_, i64>(group_by.len()).max(0) as u64;
            groups.push(GroupCount { values, count });
        }
        Ok(Some(groups))
    }

    /// How many records were updated strictly after `after`: the updates of
    /// the rest of its hour from the `updated_at` index, then the hourly
    /// counts of every later hour.
    fn count_updated_after(&mut self, collection: Collection, after: i64) -> Result<u64, StoreError> {
        let organization = self.organization;
        let next_hour = indexes::next_hour_start(after);
        let updated = known_index(collection, UPDATED_AT)?;
        let this_hour = self.query_opt(
            &format!(
                "SELECT count(*) FROM ({}) e WHERE e.value = '\\x'::bytea AND e.position > $2 AND e.position < $3",
                columns::entries_of(collection, &updated, false)
            ),
            &[&organization, &after, &next_hour],
        )?;
        let later = self.query_opt(
            "SELECT coalesce(sum(n), 0)::bigint FROM counts WHERE org_id = $1 AND collection = $2 AND name = $3 \
             AND value >= $4",
            &[&organization, &collection.name(), &indexes::UPDATED_HOUR, &indexes::hour_value(next_hour).as_bytes()],
        )?;
        let read = |row: Option<postgres::Row>| row.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64);
        Ok(read(this_hour) + read(later))
    }

    /// Counts the records matching every condition (and in every range, and
    /// updated after `updated_after`) in one query.
    fn count_intersection(
        &mut self,
        collection: Collection,
        ranges: &[IndexRange],
        conditions: &[IndexCondition],
        updated_after: Option<i64>,
    ) -> Result<u64, StoreError> {
        if ranges.is_empty() && conditions.is_empty() && updated_after.is_none() {
            return self.count(collection);
        }
        let mut params = SqlParams::new(self.organization);
        let matching = where_matching(collection, ranges, conditions, updated_after, &mut params)?;
        let row = self.query_opt(&format!("SELECT count(*) FROM records r WHERE {matching}"), &params.refs())?;
        Ok(row.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64))
    }
}

/// A statement's parameters, `$1` the organization.
struct SqlParams(Vec<Box<dyn ToSql + Sync>>);

impl SqlParams {
    fn new(organization: Uuid) -> SqlParams {
        SqlParams(vec![Box::new(organization)])
    }

    /// Adds a parameter; returns its placeholder.
    fn add(&mut self, value: impl ToSql + Sync + 'static) -> String {
        self.0.push(Box::new(value));
        format!("${}", self.0.len())
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0.iter().map(|param| param.as_ref()).collect()
    }
}

/// The condition on `records` rows (as `r`) of the organization's
/// collection that hold one of each condition's values, are in every range
/// of a sort index (both ends exclusive) and, when given, were updated
/// strictly after `updated_after`.
fn where_matching(
    collection: Collection,
    ranges: &[IndexRange],
    conditions: &[IndexCondition],
    updated_after: Option<i64>,
    params: &mut SqlParams,
) -> Result<String, StoreError> {
    let mut sql = format!("r.org_id = $1 AND r.collection = '{collection}'");
    for IndexCondition { index: name, values } in conditions {
        let index = known_index(collection, name)?;
        let values: Vec<Vec<u8>> = values.iter().map(|value| value.as_bytes().to_vec()).collect();
        let values = params.add(values);
        sql.push_str(&format!(" AND {}", columns::holds_one_of(collection, &index, &values)));
    }
    for range in ranges {
        sql.push_str(&between_positions(collection, &range.index, range.after, range.before, params)?);
    }
    if let Some(after) = updated_after {
        // Past every id at `after`: strictly after it.
        sql.push_str(&between_positions(
            collection,
            UPDATED_AT,
            Some(IndexPosition::new(after, Uuid::max())),
            None,
            params,
        )?);
    }
    Ok(sql)
}

/// The condition that a `records` row (as `r`) holds the sorted value
/// (`''`) of a sort index (or `created_at`, `updated_at`), at a position
/// strictly between `after` and `before` (an absent end is open).
fn between_positions(
    collection: Collection,
    name: &str,
    after: Option<IndexPosition>,
    before: Option<IndexPosition>,
    params: &mut SqlParams,
) -> Result<String, StoreError> {
    let index = known_index(collection, name)?;
    let columns::Placement::Columns { value, position } = columns::placement(&index) else {
        return Err(StoreError::MalformedCall(format!("{name} of {collection} is not a sort index")));
    };
    let mut sql = format!(" AND r.{value} = '\\x'::bytea");
    for (bound, comparison) in [(after, ">"), (before, "<")] {
        if let Some(IndexPosition { position: at, id }) = bound {
            let (at, id) = (params.add(at), params.add(id));
            sql.push_str(&format!(" AND (r.{position}, r.id) {comparison} ({at}, {id})"));
        }
    }
    Ok(sql)
}

/// Refuses a range on an index that is not a sort index, and an unknown
/// index.
fn check_filters(
    collection: Collection,
    ranges: &[IndexRange],
    conditions: &[IndexCondition],
) -> Result<(), StoreError> {
    for range in ranges {
        known_index(collection, &range.index)?;
        sort_index(collection, &range.index)?;
    }
    for condition in conditions {
        known_index(collection, &condition.index)?;
    }
    Ok(())
}

/// The index of this name in the collection, which must be one of [`Collection::ALL`].
fn known_index(collection: Collection, index: &str) -> Result<indexes::Index, StoreError> {
    if !Collection::ALL.contains(&collection) {
        return Err(StoreError::UnknownIndex(format!("no collection {collection}")));
    }
    indexes::find(collection, index)
        .ok_or_else(|| StoreError::UnknownIndex(format!("{collection} has no index {index}")))
}

/// Whether a record holds at most one value of the index.
fn single_valued(collection: Collection, index: &str) -> bool {
    indexes::find(collection, index).is_some_and(|found| !matches!(found.key, indexes::IndexKey::EachOf(_)))
}

/// What a record adds to the indexes: its entries (index, value, position)
/// and the counts it adds one to (name, value): each entry's, each counted
/// pair's and its update hour's.
struct RecordEntries {
    entries: Vec<(&'static str, String, i64)>,
    tallies: Vec<(String, String)>,
}

fn record_entries(collection: Collection, id: Uuid, record: &Value) -> Result<RecordEntries, StoreError> {
    let found = esr_store::record_indexes(collection, id, record)?;
    let mut tallies = found.counted;
    tallies.extend(found.entries.iter().map(|(index, value, _)| ((*index).to_owned(), value.clone())));
    Ok(RecordEntries { entries: found.entries, tallies })
}

/// The record's `id`, which must be a UUID.
fn record_uuid(collection: Collection, record: &Value) -> Result<Uuid, StoreError> {
    record
        .get("id")
        .and_then(Value::as_str)
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or_else(|| StoreError::InvalidRecord(format!("a {collection} record has no UUID id")))
}

/// Takes the organization's write lock for the rest of the transaction:
/// its row, locked, which serializes the writers of one organization on
/// every host; an organization without a row (records written before or
/// without one) is locked by an advisory lock on its id instead.
fn lock_organization(
    transaction: &mut postgres::Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    organization: Uuid,
) -> Result<(), StoreError> {
    let lock = prepared(statements, transaction, "SELECT 1 FROM organizations WHERE org_id = $1 FOR UPDATE")?;
    if transaction.query(&lock, &[&organization]).map_err(store_error)?.is_empty() {
        let (high, low) = organization.as_u64_pair();
        let advisory = prepared(statements, transaction, "SELECT pg_advisory_xact_lock($1)")?;
        transaction.query(&advisory, &[&((high ^ low) as i64)]).map_err(store_error)?;
    }
    Ok(())
}

/// The database's clock in Unix nanoseconds, to the microsecond that
/// PostgreSQL keeps of a time.
const DATABASE_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000";

/// The batch's write time, from the database's clock under the
/// organization's lock: strictly later than the organization's last one
/// (see [`esr_store::WriteTime`]); and the organization's latest change
/// sequence, which the batch's changes follow.
fn next_write_time(
    transaction: &mut postgres::Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    organization: Uuid,
) -> Result<(WriteTime, u64), StoreError> {
    let tick = prepared(
        statements,
        transaction,
        &format!(
            "INSERT INTO write_clocks (org_id, last_write) VALUES ($1, {DATABASE_NOW}) \
             ON CONFLICT (org_id) DO UPDATE SET last_write = greatest(excluded.last_write, write_clocks.last_write + 1000) \
             RETURNING last_write, sequence"
        ),
    )?;
    let row = transaction.query_one(&tick, &[&organization]).map_err(store_error)?;
    Ok((WriteTime(row.get(0)), row.get::<_, i64>(1).max(0) as u64))
}

/// The ids a batch writes and those it deletes, by collection: no id may be both.
#[derive(Default)]
struct WrittenAndDeleted {
    written: HashSet<(Collection, Uuid)>,
    deleted: HashSet<(Collection, Uuid)>,
}

impl WrittenAndDeleted {
    /// Notes what a write of `collection` writes and deletes; an id the
    /// batch both writes and deletes is refused.
    fn check(&mut self, collection: Collection, written: &[Uuid], deleted: &[Uuid]) -> Result<(), StoreError> {
        self.written.extend(written.iter().map(|id| (collection, *id)));
        self.deleted.extend(deleted.iter().map(|id| (collection, *id)));
        let both =
            |id: &&Uuid| self.written.contains(&(collection, **id)) && self.deleted.contains(&(collection, **id));
        match written.iter().chain(deleted).find(both) {
            Some(id) => Err(StoreError::InvalidRecord(format!(
                "{collection} record {id} is both written and deleted by one batch"
            ))),
            None => Ok(()),
        }
    }
}

/// An index entry: (index, value, position, record id).
type EntryKey = (&'static str, String, i64, Uuid);

/// Records encoded at a time while the `COPY` of the ones before streams
/// to PostgreSQL, which writes them meanwhile.
const COPY_CHUNK: usize = 1024;

/// One record's row as the `COPY` sends it: id, body, index columns, and
/// the entries of the indexes kept as rows.
pub(crate) type EncodedRow = (Uuid, Vec<u8>, Vec<Option<Vec<u8>>>, Vec<Option<i64>>, RecordEntries);

/// The rows of a batch's writes, each write's in the order of the writes,
/// encoded before the organization's lock ([`ahead`]).
pub(crate) type EncodedWrites = Vec<Vec<EncodedRow>>;

/// The record's row for the `COPY`.
fn encode_row(collection: Collection, (id, record): &(Uuid, &Value)) -> Result<EncodedRow, StoreError> {
    let id = *id;
    let bytes = serde_json::to_vec(record).map_err(|error| StoreError::InvalidRecord(error.to_string()))?;
    let mut found = record_entries(collection, id, record)?;
    let (values, positions) = columns::row_values(collection, &found.entries);
    found.entries.retain(|(index, ..)| columns::in_rows(collection, index));
    Ok((id, bytes, values, positions, found))
}

/// The records a write leaves, with their ids: an id on several lines
/// leaves what its last line holds.
fn last_lines<'r>(record_ids: &[Uuid], records: &'r [Value]) -> Vec<(Uuid, &'r Value)> {
    let last_line: HashMap<Uuid, usize> = record_ids.iter().enumerate().map(|(line, id)| (*id, line)).collect();
    record_ids
        .iter()
        .zip(records)
        .enumerate()
        .filter(|(line, (id, _))| last_line.get(*id) == Some(line))
        .map(|(_, (id, record))| (*id, record))
        .collect()
}

/// Every write's rows, encoded on every core.
pub(crate) fn encode_writes(writes: &[CollectionWrite]) -> Result<EncodedWrites, StoreError> {
    writes
        .iter()
        .map(|CollectionWrite { collection, records, .. }| {
            let ids = records.iter().map(|record| record_uuid(*collection, record)).collect::<Result<Vec<_>, _>>()?;
            esr_store::parallel::map_in_order(&last_lines(&ids, records), |line| encode_row(*collection, line))
                .into_iter()
                .collect()
        })
        .collect()
}

/// Writes the rows of `records` (each with its id) with their index
/// columns, in one `COPY`; returns each record's id and entries (those of
/// the indexes kept as rows) in order. Rows encoded before the lock are
/// sent as they are; otherwise a thread encodes the records a chunk at a
/// time (on every core) while this one sends the chunk before, so
/// PostgreSQL never waits for the encoding of the next rows.
fn copy_records(
    transaction: &mut postgres::Transaction<'_>,
    organization: Uuid,
    collection: Collection,
    records: &[(Uuid, &Value)],
    encoded: Option<Vec<EncodedRow>>,
) -> Result<Vec<(Uuid, RecordEntries)>, StoreError> {
    let mut kept = Vec::with_capacity(records.len());
    if records.is_empty() {
        return Ok(kept);
    }
    if let Some(encoded) = &encoded
        && (encoded.len() != records.len() || encoded.iter().zip(records).any(|(row, (id, _))| row.0 != *id))
    {
        return Err(StoreError::Backend("the rows encoded before the lock are not the batch's".to_owned()));
    }
    let index_columns = &*columns::INDEX_COLUMNS;
    let names: Vec<&str> = ["org_id", "collection", "id", "body"]
        .into_iter()
        .chain(index_columns.values.iter().map(String::as_str))
        .chain(index_columns.positions.iter().map(String::as_str))
        .collect();
    let types: Vec<Type> = [Type::UUID, Type::TEXT, Type::UUID, Type::BYTEA]
        .into_iter()
        .chain(index_columns.values.iter().map(|_| Type::BYTEA))
        .chain(index_columns.positions.iter().map(|_| Type::INT8))
        .collect();
    let sink =
        transaction.copy_in(&format!("COPY records ({}) FROM STDIN BINARY", names.join(", "))).map_err(store_error)?;
    let mut writer = BinaryCopyInWriter::new(sink, &types);
    let collection_name = collection.name();
    let mut send = |row: EncodedRow| -> Result<(), StoreError> {
        let (id, bytes, values, positions, found) = row;
        let mut row: Vec<&(dyn ToSql + Sync)> = vec![&organization, &collection_name, &id, &bytes];
        row.extend(values.iter().map(|value| value as &(dyn ToSql + Sync)));
        row.extend(positions.iter().map(|position| position as &(dyn ToSql + Sync)));
        writer.write(&row).map_err(store_error)?;
        kept.push((id, found));
        Ok(())
    };
    match encoded {
        Some(encoded) => encoded.into_iter().try_for_each(&mut send)?,
        None => std::thread::scope(|scope| -> Result<(), StoreError> {
            // One chunk waits while the next is encoded: two chunks in memory at most.
            let (chunks, encoded_chunks) = std::sync::mpsc::sync_channel(1);
            scope.spawn(move || {
                for chunk in records.chunks(COPY_CHUNK) {
                    // The receiver is gone only when sending failed: stop encoding.
                    let encoded = esr_store::parallel::map_in_order(chunk, |line| encode_row(collection, line));
                    if chunks.send(encoded).is_err() {
                        break;
                    }
                }
            });
            for encoded in encoded_chunks {
                for row in encoded {
                    send(row?)?;
                }
            }
            Ok(())
        })?,
    }
    writer.finish().map_err(store_error)?;
    Ok(kept)
}

/// Writes a batch inside `transaction` (see [`Store::write_batch`]), and
/// its changes when given the feed's.
fn write_in<'a>(
    transaction: &mut postgres::Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    organization: Uuid,
    writes: &'a [CollectionWrite],
    read_by_id: &ReadById,
    mut changes: Option<BatchChanges<'a>>,
    encoded: Option<EncodedWrites>,
) -> Result<(), StoreError> {
    let deletes = writes.iter().any(|write| !write.deleted.is_empty());
    let mut written_and_deleted = WrittenAndDeleted::default();
    let mut encoded = encoded.map(Vec::into_iter);
    for write in writes {
        let encoded = encoded
            .as_mut()
            .map(|rows| rows.next().ok_or_else(|| StoreError::Backend("fewer encoded writes than writes".to_owned())))
            .transpose()?;
        if write.is_empty() {
            continue;
        }
        let CollectionWrite { collection, records, deleted, history } = write;
        let collection = *collection;
        let record_ids =
            records.iter().map(|record| record_uuid(collection, record)).collect::<Result<Vec<Uuid>, _>>()?;
        // Each id once, where it first appears: the order of the feed's events.
        let mut seen = HashSet::with_capacity(record_ids.len());
        let written: Vec<Uuid> = record_ids.iter().copied().filter(|id| seen.insert(*id)).collect();
        let mut seen = HashSet::with_capacity(deleted.len());
        let deleting: Vec<Uuid> = deleted.iter().copied().filter(|id| seen.insert(*id)).collect();
        if deletes {
            written_and_deleted.check(collection, &written, &deleting)?;
        }
        let ids: Vec<Uuid> = written.iter().chain(&deleting).copied().collect();
        // What is stored under the ids: what the build step read of them
        // in this transaction, and the rest read now.
        let mut stored: HashMap<Uuid, RecordEntries> = HashMap::new();
        let mut add_stored = |id: Uuid, body: &[u8]| -> Result<(), StoreError> {
            let record: Value = serde_json::from_slice(body).map_err(|error| StoreError::Corrupt(error.to_string()))?;
            let mut found = record_entries(collection, id, &record)?;
            found.entries.retain(|(index, ..)| columns::in_rows(collection, index));
            stored.insert(id, found);
            Ok(())
        };
        let already_read = read_by_id.get(&collection);
        let mut unread = Vec::new();
        for id in &ids {
            match already_read.and_then(|read| read.get(id)) {
                Some(Some(body)) => add_stored(*id, body)?,
                Some(None) => {}
                None => unread.push(*id),
            }
        }
        if !unread.is_empty() {
            let read_stored = prepared(
                statements,
                transaction,
                "SELECT id, body FROM records WHERE org_id = $1 AND collection = $2 AND id = ANY($3)",
            )?;
            for row in
                transaction.query(&read_stored, &[&organization, &collection.name(), &unread]).map_err(store_error)?
            {
                add_stored(row.get(0), row.get(1))?;
            }
        }
        // Only stored records are deleted; an id not stored is passed over.
        let deleting: Vec<Uuid> = deleting.into_iter().filter(|id| stored.contains_key(id)).collect();
        if let Some(changes) = changes.as_mut() {
            for id in &written {
                let operation =
                    if stored.contains_key(id) { ChangeOperation::Updated } else { ChangeOperation::Created };
                changes.change(collection, *id, operation);
            }
            for id in &deleting {
                changes.change(collection, *id, ChangeOperation::Deleted);
            }
            changes.append_history(collection, history);
        }
        // The rows of replaced and deleted records go (and their entries in
        // the index columns with them); only entries kept as rows are compared.
        let replaced: Vec<Uuid> = stored.keys().copied().collect();
        if !replaced.is_empty() {
            let remove = prepared(
                statements,
                transaction,
                "DELETE FROM records WHERE org_id = $1 AND collection = $2 AND id = ANY($3)",
            )?;
            transaction.execute(&remove, &[&organization, &collection.name(), &replaced]).map_err(store_error)?;
        }
        if !deleting.is_empty() {
            changes::delete_history(transaction, statements, organization, collection, &deleting)?;
        }
        // The batch's effect on an id is its last line against what was stored.
        let latest = copy_records(transaction, organization, collection, &last_lines(&record_ids, records), encoded)?;
        let mut deltas: HashMap<(String, String), i64> = HashMap::new();
        let (mut removed, mut added): (Vec<EntryKey>, Vec<EntryKey>) = (Vec::new(), Vec::new());
        for (id, found) in latest {
            match stored.remove(&id) {
                None => {
                    added.extend(found.entries.into_iter().map(|(index, value, position)| (index, value, position, id)))
                }
                Some(previous) => {
                    let before: HashSet<&(&'static str, String, i64)> = previous.entries.iter().collect();
                    let after: HashSet<&(&'static str, String, i64)> = found.entries.iter().collect();
                    let entry_of =
                        |(index, value, position): &(&'static str, String, i64)| (*index, value.clone(), *position, id);
                    removed.extend(before.difference(&after).map(|entry| entry_of(entry)));
                    added.extend(after.difference(&before).map(|entry| entry_of(entry)));
                    for tally in previous.tallies {
                        *deltas.entry(tally).or_default() -= 1;
                    }
                }
            }
            for tally in found.tallies {
                *deltas.entry(tally).or_default() += 1;
            }
        }
        // What is left of the stored records is what the write deletes.
        for (id, previous) in stored {
            removed.extend(previous.entries.into_iter().map(|(index, value, position)| (index, value, position, id)));
            for tally in previous.tallies {
                *deltas.entry(tally).or_default() -= 1;
            }
        }
        // In key order: the index's pages fill one after another.
        added.sort_unstable();
        added.dedup();
        removed.sort_unstable();
        removed.dedup();
        if !removed.is_empty() {
            let remove = prepared(
                statements,
                transaction,
                "DELETE FROM index_entries e USING unnest($3::text[], $4::bytea[], $5::int8[], $6::uuid[]) \
                 AS gone(index_name, value, position, id) WHERE e.org_id = $1 AND e.collection = $2 \
                 AND e.index_name = gone.index_name AND e.value = gone.value AND e.position = gone.position \
                 AND e.id = gone.id",
            )?;
            let names: Vec<&str> = removed.iter().map(|entry| entry.0).collect();
            let values: Vec<&[u8]> = removed.iter().map(|entry| entry.1.as_bytes()).collect();
            let positions: Vec<i64> = removed.iter().map(|entry| entry.2).collect();
            let ids: Vec<Uuid> = removed.iter().map(|entry| entry.3).collect();
            transaction
                .execute(&remove, &[&organization, &collection.name(), &names, &values, &positions, &ids])
                .map_err(store_error)?;
        }
        if !added.is_empty() {
            let sink = transaction
                .copy_in("COPY index_entries (org_id, collection, index_name, value, position, id) FROM STDIN BINARY")
                .map_err(store_error)?;
            let mut writer = BinaryCopyInWriter::new(
                sink,
                &[Type::UUID, Type::TEXT, Type::TEXT, Type::BYTEA, Type::INT8, Type::UUID],
            );
            for (index, value, position, id) in &added {
                writer
                    .write(&[&organization, &collection.name(), index, &value.as_bytes(), position, id])
                    .map_err(store_error)?;
            }
            writer.finish().map_err(store_error)?;
        }
        let mut deltas: Vec<((String, String), i64)> = deltas.into_iter().filter(|(_, delta)| *delta != 0).collect();
        deltas.sort_unstable();
        if !deltas.is_empty() {
            // In key order, so concurrent writers never wait on each other in a cycle.
            let names: Vec<&str> = deltas.iter().map(|((name, _), _)| name.as_str()).collect();
            let values: Vec<&[u8]> = deltas.iter().map(|((_, value), _)| value.as_bytes()).collect();
            let changes: Vec<i64> = deltas.iter().map(|(_, change)| *change).collect();
            let upsert = prepared(
                statements,
                transaction,
                "INSERT INTO counts (org_id, collection, name, value, n) \
                 SELECT $1, $2, name, value, n FROM unnest($3::text[], $4::bytea[], $5::int8[]) AS change(name, value, n) \
                 ON CONFLICT (org_id, collection, name, value) DO UPDATE SET n = counts.n + excluded.n",
            )?;
            transaction
                .execute(&upsert, &[&organization, &collection.name(), &names, &values, &changes])
                .map_err(store_error)?;
            let drop_zeros = prepared(
                statements,
                transaction,
                "DELETE FROM counts c USING unnest($3::text[], $4::bytea[]) AS change(name, value) \
                 WHERE c.org_id = $1 AND c.collection = $2 AND c.name = change.name AND c.value = change.value \
                 AND c.n <= 0",
            )?;
            transaction
                .execute(&drop_zeros, &[&organization, &collection.name(), &names, &values])
                .map_err(store_error)?;
        }
    }
    match changes {
        Some(changes) => changes.write(transaction, statements, organization),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_behind_a_socket_or_a_loopback_address_is_on_this_machine() {
        for url in [
            "postgresql:///esr?host=/run/postgresql",
            "postgresql://esr@localhost/esr",
            "postgresql://127.0.0.1:5433/esr",
            "postgresql://[::1]/esr",
        ] {
            assert!(super::on_this_machine(url), "{url}");
        }
        for url in
            ["postgresql://db.internal/esr", "postgresql://10.0.0.5/esr", "postgresql://localhost,db2/esr", "no url"]
        {
            assert!(!super::on_this_machine(url), "{url}");
        }
    }
}
