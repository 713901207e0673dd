//! The audit trail's recorder: every authenticated request, refused
//! authentication and admin action becomes an [`AuditEntry`], kept in the
//! store ([`Store::append_audit`]) and read per organization
//! ([`Store::audit_page`]).
//!
//! Recording never waits: [`Recorder::record`] puts the entry on a
//! bounded queue and returns, so a slow or unavailable database never
//! holds a request. One task ([`Recorder::run`]) drains the queue in
//! batches (up to [`BATCH_SIZE`] entries, or what came within
//! [`BATCH_INTERVAL`] of the first), writes each batch in one store call
//! off the async threads, and retries a failed write with backoff, keeping
//! the batch. While it retries the queue fills; once it is full, **the
//! newest entries are dropped**: the choice that keeps requests unblocked
//! and memory bounded, and the entries already queued (the older ones,
//! which a later one may depend on to make sense) in order. Every drop is
//! counted ([`Recorder::dropped_total`], the host's
//! `esr_audit_entries_dropped_total`, which stays 0 in normal operation)
//! and logged as a warning at most once per [`WARN_EVERY`], with the count.
//!
//! The same task removes entries older than the retention at start and
//! every [`EXPIRE_EVERY`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use esr_store::{AuditEntry, Store, StoreError, WriteTime};
use tokio::sync::{Semaphore, mpsc, oneshot};

pub use esr_store::{AuditPage, AuditPrincipal};

/// How long entries are kept when the operator says nothing
/// (`--audit-retention-days`).
pub const DEFAULT_RETENTION_DAYS: u32 = 90;

/// How many entries may wait to be written: at a few thousand requests a
/// second, some seconds of a database that does not answer.
pub const QUEUE_CAPACITY: usize = 65_536;

/// The most entries one store write takes.
pub const BATCH_SIZE: usize = 10_000;

/// How long a batch waits for more entries after its first: an entry is
/// in the store about this long after its request. Each write is made
/// durable (a flush on sled, a commit on PostgreSQL): at thousands of
/// requests a second, one a second costs the requests little, where five
/// cost them a tenth of their throughput (`make bench`).
pub const BATCH_INTERVAL: Duration = Duration::from_secs(1);

/// How often entries past the retention are removed (and once at start).
pub const EXPIRE_EVERY: Duration = Duration::from_secs(3600);

/// The least time between two warnings of one kind (dropped entries, failed
/// writes): while the database is down, one line per interval says so.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// The wait before the first retry of a failed write; it doubles up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(30);

const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;

/// Now, as an entry's `at`: RFC 3339 in UTC to the microsecond (what
/// PostgreSQL keeps of a time, so both backends store the same instant).
pub fn now() -> String {
    WriteTime(esr_system::clock::unix_now_nanos() / 1_000 * 1_000).format()
}

/// How the recorder queues, batches and expires.
#[derive(Debug, Clone)]
pub struct AuditSettings {
    /// Entries older than this many days are removed; 0 keeps them forever.
    pub retention_days: u32,
    /// Entries that may wait to be written ([`QUEUE_CAPACITY`]).
    pub queue_capacity: usize,
    /// The most entries one write takes ([`BATCH_SIZE`]).
    pub batch_size: usize,
    /// How long a batch waits for more after its first entry ([`BATCH_INTERVAL`]).
    pub batch_interval: Duration,
    /// How often expiry runs ([`EXPIRE_EVERY`]; at least a second).
    pub expire_every: Duration,
}

impl Default for AuditSettings {
    fn default() -> AuditSettings {
        AuditSettings {
            retention_days: DEFAULT_RETENTION_DAYS,
            queue_capacity: QUEUE_CAPACITY,
            batch_size: BATCH_SIZE,
            batch_interval: BATCH_INTERVAL,
            expire_every: EXPIRE_EVERY,
        }
    }
}

/// What [`Recorder::flush`] answers when the recorder's task has ended
/// (or ends before it wrote what was asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the audit recorder has stopped")
    }
}

impl std::error::Error for Stopped {}

/// What the queue carries: entries, and a flush's marker, answered once
/// everything queued before it is written (the queue keeps their order).
// Entries are nearly all the traffic: boxing them would cost an allocation
// each to save space in the rare marker.
#[allow(clippy::large_enum_variant)]
enum Message {
    Entry(AuditEntry),
    Flush(oneshot::Sender<()>),
}

/// Records audit entries. A handle: cloning it copies two pointers; every
/// clone records into the same queue.
#[derive(Clone)]
pub struct Recorder {
    sender: mpsc::Sender<Message>,
    shared: Arc<Shared>,
}

/// What every handle and the task share.
struct Shared {
    store: Arc<dyn Store>,
    settings: AuditSettings,
    /// The store's connections for host jobs (PostgreSQL), if bounded:
    /// audit writes never take the requests' connections.
    store_permits: Option<Arc<Semaphore>>,
    /// The queue's receiving end, until [`Recorder::run`] takes it.
    receiver: Mutex<Option<mpsc::Receiver<Message>>>,
    /// Entries queued, written, and dropped (a full queue, or refused by the store).
    accepted: AtomicU64,
    recorded: AtomicU64,
    dropped: AtomicU64,
    /// Of the dropped, those that had been queued (the store refused them).
    refused: AtomicU64,
    expired: AtomicU64,
    /// [`Shared::dropped`] when the last warning of drops was logged.
    reported_drops: AtomicU64,
    drop_warnings: Throttle,
    failure_warnings: Throttle,
    time_warnings: Throttle,
}

/// Lets a warning through at most once per [`WARN_EVERY`], without a
/// lock: [`Recorder::record`] runs in every request.
struct Throttle {
    started: Instant,
    /// Milliseconds after `started` before which no warning goes through.
    next: AtomicU64,
}

impl Throttle {
    fn new() -> Throttle {
        Throttle { started: Instant::now(), next: AtomicU64::new(0) }
    }

    fn allows(&self) -> bool {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Relaxed);
        let every = u64::try_from(WARN_EVERY.as_millis()).unwrap_or(u64::MAX);
        now >= next
            && self.next.compare_exchange(next, now.saturating_add(every), Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

impl Recorder {
    /// A recorder writing to `store`; nothing is written until the host
    /// spawns [`Recorder::run`].
    pub fn new(store: Arc<dyn Store>, settings: AuditSettings) -> Recorder {
        let (sender, receiver) = mpsc::channel(settings.queue_capacity.max(1));
        let store_permits = store.background_calls().map(|calls| Arc::new(Semaphore::new(calls.max(1))));
        Recorder {
            sender,
            shared: Arc::new(Shared {
                store,
                settings,
                store_permits,
                receiver: Mutex::new(Some(receiver)),
                accepted: AtomicU64::new(0),
                recorded: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                reported_drops: AtomicU64::new(0),
                drop_warnings: Throttle::new(),
                failure_warnings: Throttle::new(),
                time_warnings: Throttle::new(),
            }),
        }
    }

    /// Queues `entry` and returns at once, in async code or not; when the
    /// queue is full (or the task has ended) the entry is dropped and
    /// counted. An `at` that is not RFC 3339 (the store would refuse the
    /// whole batch) is replaced by the time it is queued, with a warning.
    pub fn record(&self, mut entry: AuditEntry) {
        if entry.at_nanos().is_none() {
            if self.shared.time_warnings.allows() {
                tracing::warn!(
                    at = %entry.at,
                    request_id = %entry.request_id,
                    "audit: an entry's time is not RFC 3339; it is recorded with the time it was queued"
                );
            }
            entry.at = now();
        }
        match self.sender.try_send(Message::Entry(entry)) {
            Ok(()) => {
                self.shared.accepted.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                self.shared.report_drops();
            }
        }
    }

    /// Waits until every entry recorded before the call is written (for
    /// tests, and at shutdown: bound it with a timeout there, since it
    /// waits as long as the store fails). While [`Recorder::run`] has not
    /// started it waits for it; once it has ended, [`Stopped`].
    pub async fn flush(&self) -> Result<(), Stopped> {
        let (done, written) = oneshot::channel();
        self.sender.send(Message::Flush(done)).await.map_err(|_| Stopped)?;
        written.await.map_err(|_| Stopped)
    }

    /// Entries written to the store since start.
    pub fn recorded_total(&self) -> u64 {
        self.shared.recorded.load(Ordering::Relaxed)
    }

    /// Entries dropped since start: the queue was full, the task had
    /// ended, or the store refused an entry as invalid.
    pub fn dropped_total(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Entries queued or being written now.
    pub fn queued(&self) -> u64 {
        self.shared.queued()
    }

    /// Entries removed for being past the retention since start.
    pub fn expired_total(&self) -> u64 {
        self.shared.expired.load(Ordering::Relaxed)
    }

    /// Writes what is recorded and expires what is past the retention,
    /// until every handle is dropped (then it writes what is left and
    /// returns). The host spawns it once; a second call returns at once.
    pub async fn run(self) {
        let Recorder { sender, shared } = self;
        // Its own handle would keep the queue open forever.
        drop(sender);
        let receiver = shared.receiver.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(receiver) = receiver else {
            tracing::warn!("audit: the recorder is running already");
            return;
        };
        tokio::select! {
            () = shared.write_all(receiver) => {}
            () = shared.expire_forever() => {}
        }
    }
}

/// Logs, when the task stops with entries not written (the runtime shut
/// down while the store failed), how many were lost.
struct Unwritten<'a>(&'a Shared);

impl Drop for Unwritten<'_> {
    fn drop(&mut self) {
        let lost = self.0.queued();
        if lost > 0 {
            tracing::warn!(entries = lost, "audit: the recorder stopped with entries not written");
        }
    }
}

impl Shared {
    fn queued(&self) -> u64 {
        let settled = self.recorded.load(Ordering::Relaxed) + self.refused.load(Ordering::Relaxed);
        self.accepted.load(Ordering::Relaxed).saturating_sub(settled)
    }

    /// Warns of entries dropped since the last warning, at most once per
    /// [`WARN_EVERY`]; called where entries are dropped and after each
    /// write, so the last of a burst is reported too.
    fn report_drops(&self) {
        let total = self.dropped.load(Ordering::Relaxed);
        if total == self.reported_drops.load(Ordering::Relaxed) || !self.drop_warnings.allows() {
            return;
        }
        let before = self.reported_drops.swap(total, Ordering::Relaxed);
        tracing::warn!(
            dropped = total.saturating_sub(before),
            dropped_total = total,
            queue_capacity = self.settings.queue_capacity,
            "audit: entries were dropped, the newest first: the recorder's queue was full (the store is slow or \
             unavailable) or the recorder had stopped; requests are never held to record them"
        );
    }

    /// Drains the queue in batches until it is closed and empty.
    async fn write_all(&self, mut receiver: mpsc::Receiver<Message>) {
        let _unwritten = Unwritten(self);
        let batch_size = self.settings.batch_size.max(1);
        let mut messages = Vec::with_capacity(batch_size);
        loop {
            if receiver.recv_many(&mut messages, batch_size).await == 0 {
                return;
            }
            let deadline = tokio::time::Instant::now() + self.settings.batch_interval;
            let (mut batch, mut waiting) = (Vec::with_capacity(batch_size), Vec::new());
            let mut open = true;
            loop {
                for message in messages.drain(..) {
                    match message {
                        Message::Entry(entry) => batch.push(entry),
                        Message::Flush(done) => waiting.push(done),
                    }
                }
                // A flush writes what is gathered now rather than wait for more.
                if batch.len() >= batch_size || !waiting.is_empty() {
                    break;
                }
                let more = receiver.recv_many(&mut messages, batch_size - batch.len());
                match tokio::time::timeout_at(deadline, more).await {
                    Ok(0) => {
                        open = false;
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            self.write(batch).await;
            for done in waiting {
                let _ = done.send(());
            }
            if !open {
                return;
            }
        }
    }

    /// Writes a batch, retrying until the store takes it; when the store
    /// refuses it as invalid, writes its entries one by one and drops
    /// (counts and logs) only those it refuses.
    async fn write(&self, batch: Vec<AuditEntry>) {
        if batch.is_empty() {
            return;
        }
        let count = batch.len() as u64;
        let batch = Arc::new(batch);
        let Err(why) = self.append(batch.clone()).await else {
            self.recorded.fetch_add(count, Ordering::Relaxed);
            self.report_drops();
            return;
        };
        tracing::warn!(entries = count, error = %why, "audit: the store refused a batch; its entries are written one by one");
        for entry in batch.iter() {
            match self.append(Arc::new(vec![entry.clone()])).await {
                Ok(()) => {
                    self.recorded.fetch_add(1, Ordering::Relaxed);
                }
                Err(why) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(request_id = %entry.request_id, error = %why, "audit: the store refused an entry; it is dropped");
                }
            }
        }
        self.report_drops();
    }

    /// One write of `entries`, tried again with backoff as long as it
    /// fails for any reason but the entries themselves
    /// ([`StoreError::InvalidRecord`], returned).
    async fn append(&self, entries: Arc<Vec<AuditEntry>>) -> Result<(), StoreError> {
        let mut wait = FIRST_RETRY;
        let mut failures = 0u32;
        loop {
            let attempt = entries.clone();
            match self.blocking(move |store| store.append_audit(&attempt)).await {
                Ok(()) => {
                    if failures > 0 {
                        tracing::info!(failures, "audit: entries are written again");
                    }
                    return Ok(());
                }
                Err(error @ StoreError::InvalidRecord(_)) => return Err(error),
                Err(error) => {
                    failures += 1;
                    if failures == 1 || self.failure_warnings.allows() {
                        tracing::warn!(
                            error = %error,
                            failures,
                            entries = entries.len(),
                            queued = self.queued(),
                            "audit: writing entries failed; retrying (new entries wait in the queue, and are \
                             dropped once it is full)"
                        );
                    }
                    self.report_drops();
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(LAST_RETRY);
                }
            }
        }
    }

    /// Removes entries past the retention at once and then every
    /// [`AuditSettings::expire_every`]; never returns.
    async fn expire_forever(&self) {
        let days = self.settings.retention_days;
        if days == 0 {
            return std::future::pending().await;
        }
        let retention = i64::from(days).saturating_mul(NANOS_PER_DAY);
        let mut ticks = tokio::time::interval(self.settings.expire_every.max(Duration::from_secs(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let before = esr_system::clock::unix_now_nanos().saturating_sub(retention);
            match self.blocking(move |store| store.expire_audit(before)).await {
                Ok(0) => {}
                Ok(removed) => {
                    self.expired.fetch_add(removed, Ordering::Relaxed);
                    tracing::info!(removed, retention_days = days, "audit: entries past the retention removed");
                }
                Err(error) => {
                    tracing::warn!(error = %error, "audit: removing entries past the retention failed; trying again later");
                }
            }
        }
    }

    /// Runs a store call off the async threads, with one of the store's
    /// connections for host jobs, never one of the requests'.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let _permit = match &self.store_permits {
            Some(permits) => Some(
                permits.clone().acquire_owned().await.map_err(|_| StoreError::Unavailable("shutting down".into()))?,
            ),
            None => None,
        };
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(&*store))
            .await
            .unwrap_or_else(|error| Err(StoreError::Backend(format!("an audit task failed: {error}"))))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use esr_store_sled::SledStore;
    use uuid::Uuid;

    fn sled() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&dir.path().join("data")).unwrap());
        (dir, store)
    }

    fn entry(organization: Option<Uuid>, request: usize, at: String) -> AuditEntry {
        AuditEntry {
            at,
            request_id: format!("request-{request}"),
            principal: AuditPrincipal {
                kind: "api_key".into(),
                id: Some(format!("key-{}", request % 3)),
                issuer: None,
            },
            organization_id: organization,
            method: "GET".into(),
            route: "/v1/endpoints".into(),
            query: Some("limit=5".into()),
            status: 200,
            records: Some(5),
        }
    }

    /// An organization's whole trail, page by page.
    fn trail(store: &dyn Store, organization: Uuid) -> Vec<AuditEntry> {
        let (mut entries, mut after) = (Vec::new(), None);
        loop {
            let page = store.audit_page(organization, after, None, 70).unwrap();
            entries.extend(page.entries.into_iter().map(|(_, entry)| entry));
            match page.next {
                Some(next) => after = Some(next),
                None => return entries,
            }
        }
    }

    fn settings() -> AuditSettings {
        AuditSettings { batch_size: 100, batch_interval: Duration::from_millis(20), ..AuditSettings::default() }
    }

    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "{what} did not happen in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batching_writes_everything_in_order() {
        let (_dir, store) = sled();
        let recorder = Recorder::new(store.clone(), settings());
        let task = tokio::spawn(recorder.clone().run());
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut expected = (Vec::new(), Vec::new());
        for n in 0..2_500 {
            let organization = match n % 5 {
                0 => None,
                1 | 2 => Some(a),
                _ => Some(b),
            };
            let recorded = entry(organization, n, now());
            match organization {
                Some(id) if id == a => expected.0.push(recorded.clone()),
                Some(_) => expected.1.push(recorded.clone()),
                None => {}
            }
            recorder.record(recorded);
            if n % 700 == 0 {
                tokio::task::yield_now().await;
            }
        }
        recorder.flush().await.unwrap();
        assert_eq!(recorder.recorded_total(), 2_500);
        assert_eq!((recorder.queued(), recorder.dropped_total()), (0, 0));
        assert_eq!(trail(&*store, a), expected.0);
        assert_eq!(trail(&*store, b), expected.1);
        assert_eq!(trail(&*store, Uuid::nil()).len(), 500, "entries of no organization are kept");

        // Without a flush, a batch is written once its interval is over.
        for n in 0..3 {
            recorder.record(entry(Some(a), 10_000 + n, now()));
        }
        eventually("writing without a flush", || recorder.recorded_total() == 2_503).await;
        assert_eq!(trail(&*store, a).len(), expected.0.len() + 3);

        // Once every handle is dropped the task writes what is left and ends.
        recorder.record(entry(Some(b), 20_000, now()));
        drop(recorder);
        tokio::time::timeout(Duration::from_secs(20), task).await.unwrap().unwrap();
        assert_eq!(trail(&*store, b).len(), expected.1.len() + 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_counts_drops_and_never_blocks() {
        let (_dir, store) = sled();
        let recorder = Recorder::new(store.clone(), AuditSettings { queue_capacity: 10, ..settings() });
        let organization = Uuid::now_v7();
        // Nothing drains the queue yet: the newest are dropped, at once.
        let started = Instant::now();
        let entries: Vec<AuditEntry> = (0..25).map(|n| entry(Some(organization), n, now())).collect();
        for recorded in &entries {
            recorder.record(recorded.clone());
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!((recorder.dropped_total(), recorder.queued(), recorder.recorded_total()), (15, 10, 0));

        tokio::spawn(recorder.clone().run());
        recorder.flush().await.unwrap();
        assert_eq!((recorder.dropped_total(), recorder.queued(), recorder.recorded_total()), (15, 0, 10));
        assert_eq!(trail(&*store, organization), entries[..10]);
        // A second task does nothing.
        tokio::time::timeout(Duration::from_secs(5), recorder.clone().run()).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn expiry_removes_old_entries_only() {
        let (_dir, store) = sled();
        let organization = Uuid::now_v7();
        let days_ago = |days: i64| WriteTime(esr_system::clock::unix_now_nanos() - days * NANOS_PER_DAY).format();
        let old = entry(Some(organization), 1, days_ago(100));
        let older_of_none = entry(None, 2, days_ago(91));
        let kept = entry(Some(organization), 3, days_ago(89));
        let new = entry(Some(organization), 4, now());
        store.append_audit(&[old, older_of_none, kept.clone(), new.clone()]).unwrap();

        let recorder = Recorder::new(store.clone(), AuditSettings { retention_days: 90, ..settings() });
        tokio::spawn(recorder.clone().run());
        eventually("the first expiry", || recorder.expired_total() == 2).await;
        assert_eq!(trail(&*store, organization), [kept, new]);
        assert_eq!(trail(&*store, Uuid::nil()), []);
        assert_eq!(store.expire_audit(esr_system::clock::unix_now_nanos() - 90 * NANOS_PER_DAY).unwrap(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_with_a_time_that_is_not_rfc_3339_gets_the_time_it_was_queued() {
        let (_dir, store) = sled();
        let recorder = Recorder::new(store.clone(), settings());
        tokio::spawn(recorder.clone().run());
        let organization = Uuid::now_v7();
        let before = esr_system::clock::unix_now_nanos() / 1_000 * 1_000;
        recorder.record(entry(Some(organization), 1, "yesterday".into()));
        recorder.flush().await.unwrap();
        let stored = trail(&*store, organization);
        assert_eq!(stored.len(), 1);
        assert!(stored[0].at_nanos().unwrap() >= before, "{}", stored[0].at);
        assert_eq!(recorder.dropped_total(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn once_the_task_is_gone_a_flush_says_so_and_entries_are_counted_dropped() {
        let (_dir, store) = sled();
        let recorder = Recorder::new(store, settings());
        let task = tokio::spawn(recorder.clone().run());
        assert_eq!(recorder.flush().await, Ok(()));
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(recorder.flush().await, Err(Stopped));
        recorder.record(entry(None, 1, now()));
        assert_eq!((recorder.dropped_total(), recorder.queued()), (1, 0));
    }
}
