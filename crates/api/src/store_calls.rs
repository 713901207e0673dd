//! Store calls off the async threads, within what the store can serve at once.
//!
//! Every store call blocks, so it runs on the blocking pool. A backend with
//! a bounded pool of connections (PostgreSQL) says how many calls it serves
//! at once ([`Store::concurrent_calls`]); a call takes one of that many
//! permits here, in async code, before its blocking task starts, and keeps
//! it until the task ends (even when the request is abandoned). When every
//! connection is busy, requests wait as cheap tasks until their deadline
//! and are then answered `503` with `Retry-After`, rather than parking
//! blocking threads inside the pool. Permits are handed out in arrival
//! order (tokio's semaphores are fair). The queue is bounded in length
//! too: at most [`WAITERS_PER_CONNECTION`] calls per connection wait; a
//! call beyond them is answered `503` at once, so a flood sheds instead of
//! piling up requests that would mostly wait out their deadline anyway.
//!
//! Authentication (a key's lookup) and health's storage probe take their
//! permits from a small pool of their own ([`StoreCalls::for_admission`],
//! connections the store keeps beside the others: [`Store::admission_calls`]),
//! so a flood of either cannot take the permits tenants' work needs, nor
//! tenants' work hold up the admission of a request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::ApiError;
use super::call_threads::CallThreads;
use esr_store::Store;

/// How many calls may wait for each connection (each permit) before more
/// are turned away at once.
pub const WAITERS_PER_CONNECTION: usize = 4;

/// One call counted among the waiting while it lives.
struct Waiting<'a> {
    count: &'a AtomicUsize,
    /// How many were waiting when this one came.
    ahead: usize,
}

impl<'a> Waiting<'a> {
    fn join(count: &'a AtomicUsize) -> Waiting<'a> {
        Waiting { ahead: count.fetch_add(1, Ordering::Relaxed), count }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The permits of one server's store calls, shared by both listeners.
#[derive(Clone)]
pub struct StoreCalls {
    /// One per connection; `None` when the backend does not bound its callers.
    permits: Option<Arc<Semaphore>>,
    /// How many permits there are.
    capacity: usize,
    /// How many calls may wait for a permit.
    max_waiting: usize,
    /// How many calls wait for a permit now.
    waiting: Arc<AtomicUsize>,
    /// Whether short reads run in place ([`Store::short_reads_are_local`]).
    short_reads_in_place: bool,
    /// The threads the calls run on.
    threads: CallThreads,
}

impl StoreCalls {
    /// As many permits as `store` serves calls at once.
    pub fn for_store(store: &dyn Store) -> StoreCalls {
        let capacity = store.concurrent_calls().map_or(0, |calls| calls.max(1));
        StoreCalls::with_capacity(store, capacity, capacity * WAITERS_PER_CONNECTION)
    }

    /// The permits of authentication and health's probe: as many as the
    /// store keeps connections for them. Their calls are one short read
    /// each, so a queue drains in milliseconds: any number may wait (as
    /// many as requests are in progress, `--max-concurrent-requests`),
    /// each until its deadline, rather than a burst of callers arriving
    /// together being refused.
    pub fn for_admission(store: &dyn Store) -> StoreCalls {
        let capacity = store.admission_calls().map_or(0, |calls| calls.max(1));
        StoreCalls::with_capacity(store, capacity, usize::MAX)
    }

    fn with_capacity(store: &dyn Store, capacity: usize, max_waiting: usize) -> StoreCalls {
        StoreCalls {
            permits: (capacity > 0).then(|| Arc::new(Semaphore::new(capacity))),
            capacity,
            max_waiting,
            waiting: Arc::new(AtomicUsize::new(0)),
            short_reads_in_place: store.short_reads_are_local(),
            threads: CallThreads::process_wide(),
        }
    }

    /// A permit, waited for until `until` at most, unless as many calls
    /// as may wait already do.
    async fn permit(&self, until: Instant) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        let Some(permits) = &self.permits else { return Ok(None) };
        if let Ok(permit) = permits.clone().try_acquire_owned() {
            return Ok(Some(permit));
        }
        let waiting = Waiting::join(&self.waiting);
        if waiting.ahead >= self.max_waiting {
            return Err(ApiError::unavailable(&format!(
                "every database connection of this server is busy ({} at once) and {} requests wait for one; \
                 retry shortly",
                self.capacity, waiting.ahead
            )));
        }
        match tokio::time::timeout_at(until, permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            Ok(Err(_)) => Err(ApiError::unavailable("the service is shutting down")),
            Err(_) => Err(ApiError::unavailable(&format!(
                "every database connection of this server is busy ({} at once); retry shortly",
                self.capacity
            ))),
        }
    }

    /// Whether short reads run in place ([`Store::short_reads_are_local`]).
    pub fn reads_in_place(&self) -> bool {
        self.short_reads_in_place
    }

    /// Runs a short read (an API key, an organization, the probe): in
    /// place when the store says such reads are local, else as [`run`].
    ///
    /// [`run`]: StoreCalls::run
    pub async fn run_short<T: Send + 'static>(
        &self,
        until: Instant,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        if self.short_reads_in_place {
            return Ok(work());
        }
        self.run(until, work).await
    }

    /// Runs `work` on a blocking thread ([`CallThreads`]) once a permit is
    /// held (waiting until `until` at most); the permit is given back when
    /// `work` ends.
    pub async fn run<T: Send + 'static>(
        &self,
        until: Instant,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = self.permit(until).await?;
        self.threads
            .run(move || {
                let _permit = permit;
                work()
            })
            .await
            .map_err(|_| {
                tracing::error!("a store task failed (it panicked, or no thread could start)");
                ApiError::internal()
            })
    }
}
