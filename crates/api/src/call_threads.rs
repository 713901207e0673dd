//! The threads a request's store and component calls block on, the most
//! recently idle first.
//!
//! tokio's blocking pool wakes its idle threads through one condition
//! variable, whose waiters wake in the order they began to wait: each call
//! lands on the thread that has been idle longest, so a server under load
//! rotates its calls through every thread it ever started, each with its
//! stack, its allocator's caches and the wasm call state grown cold
//! (docs/performance.md, "The threads a call runs on"). Here an idle
//! thread is handed its next call directly, the last to become idle
//! first, so a steady load keeps to as many threads as it has calls at
//! once. Threads are still started on demand (no call waits behind
//! another while fewer than [`MAX_THREADS`] run) and leave after
//! [`KEEP_ALIVE`] idle, as tokio's do.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// At most this many threads at once, as tokio's blocking pool; calls
/// beyond them queue until one ends.
pub const MAX_THREADS: usize = 512;

/// How long an idle thread waits for a call before it ends.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

/// A call that gave no answer: its work panicked (caught on its thread),
/// or no thread could be started for it (logged where it happened).
#[derive(Debug)]
pub struct CallFailed;

/// The pool; clones share it.
#[derive(Clone)]
pub struct CallThreads {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    max_threads: usize,
    keep_alive: Duration,
}

#[derive(Default)]
struct State {
    /// Idle threads, the most recently idle last.
    idle: Vec<Arc<Idle>>,
    /// Calls that came while every thread was busy and no more could start.
    queue: VecDeque<Job>,
    threads: usize,
    /// Calls handed in and not yet ended, queued ones included.
    unfinished: usize,
}

/// An idle thread and the call handed to it.
struct Idle {
    thread: Thread,
    next: Mutex<Option<Job>>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for CallThreads {
    fn default() -> CallThreads {
        CallThreads::new(MAX_THREADS, KEEP_ALIVE)
    }
}

impl CallThreads {
    /// The process's pool, which every server's store calls share, so a
    /// request's key lookup and its call can land on one warm thread.
    pub fn process_wide() -> CallThreads {
        static POOL: std::sync::LazyLock<CallThreads> = std::sync::LazyLock::new(CallThreads::default);
        POOL.clone()
    }

    pub fn new(max_threads: usize, keep_alive: Duration) -> CallThreads {
        CallThreads {
            shared: Arc::new(Shared { state: Mutex::default(), max_threads: max_threads.max(1), keep_alive }),
        }
    }

    /// Runs `work` on one of the pool's threads, inside the caller's tokio
    /// runtime (as `spawn_blocking` would), and waits for its answer. If
    /// the caller stops waiting, `work` still runs to its end.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, CallFailed> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Handle::try_current().ok();
        self.spawn(Box::new(move || {
            let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(|_| CallFailed);
            // Nobody may be waiting any more (the request was abandoned).
            let _ = answer.send(outcome);
        }));
        answered.await.unwrap_or(Err(CallFailed))
    }

    /// How many threads the pool has now, busy or idle.
    pub fn threads(&self) -> usize {
        locked(&self.shared.state).threads
    }

    /// Waits until every call handed in has ended, up to `limit`; whether
    /// they all did. The server's last step before it closes its store, as
    /// a runtime's end waits for its blocking tasks: a call whose client
    /// went away may still be writing.
    pub async fn finish(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while locked(&self.shared.state).unfinished > 0 {
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    fn spawn(&self, job: Job) {
        let mut state = locked(&self.shared.state);
        state.unfinished += 1;
        if let Some(idle) = state.idle.pop() {
            // Handed over under the pool's lock, so a thread giving up at
            // its keep-alive finds either itself still idle or its call.
            *locked(&idle.next) = Some(job);
            drop(state);
            idle.thread.unpark();
        } else if state.threads < self.shared.max_threads {
            state.threads += 1;
            drop(state);
            let shared = self.shared.clone();
            let started = std::thread::Builder::new().name("esr-call".into()).spawn(move || shared.work(job));
            if let Err(error) = started {
                // The call is dropped with its answer's sender: its caller
                // is answered that it failed.
                tracing::error!(%error, "starting a thread for a blocking call");
                let mut state = locked(&self.shared.state);
                state.threads -= 1;
                state.unfinished -= 1;
            }
        } else {
            state.queue.push_back(job);
        }
    }
}

impl Shared {
    /// A thread's life: its first call, then each call handed to it or
    /// queued, until it has been idle for the keep-alive.
    fn work(self: Arc<Shared>, first: Job) {
        let idle = Arc::new(Idle { thread: std::thread::current(), next: Mutex::new(None) });
        let mut job = first;
        loop {
            job();
            let mut state = locked(&self.state);
            state.unfinished -= 1;
            if let Some(queued) = state.queue.pop_front() {
                job = queued;
                continue;
            }
            state.idle.push(idle.clone());
            drop(state);
            match self.wait_for_call(&idle) {
                Some(next) => job = next,
                None => return,
            }
        }
    }

    /// The call handed to this idle thread, or `None` once it has waited
    /// the keep-alive and left the pool.
    fn wait_for_call(&self, idle: &Arc<Idle>) -> Option<Job> {
        let until = Instant::now() + self.keep_alive;
        loop {
            if let Some(job) = locked(&idle.next).take() {
                return Some(job);
            }
            let now = Instant::now();
            if now >= until {
                let mut state = locked(&self.state);
                if let Some(job) = locked(&idle.next).take() {
                    return Some(job);
                }
                state.idle.retain(|other| !Arc::ptr_eq(other, idle));
                state.threads -= 1;
                return None;
            }
            std::thread::park_timeout(until - now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn answers_and_reports_a_panic() {
        let pool = CallThreads::default();
        assert_eq!(pool.run(|| 6 * 7).await.expect("answered"), 42);
        assert!(pool.run(|| -> u32 { panic!("a call's own bug") }).await.is_err());
        assert_eq!(pool.run(|| "still serving").await.expect("answered"), "still serving");
    }

    #[tokio::test]
    async fn a_call_sees_the_callers_runtime() {
        let pool = CallThreads::default();
        assert!(pool.run(|| tokio::runtime::Handle::try_current().is_ok()).await.expect("answered"));
    }

    #[tokio::test]
    async fn calls_one_after_another_keep_to_one_thread() {
        let pool = CallThreads::default();
        let mut names = std::collections::HashSet::new();
        for _ in 0..50 {
            names.insert(pool.run(|| format!("{:?}", std::thread::current().id())).await.expect("answered"));
            // The answer is sent just before its thread goes idle.
            while locked(&pool.shared.state).idle.is_empty() {
                std::thread::yield_now();
            }
        }
        assert_eq!(names.len(), 1, "each call went to the thread idle the shortest time: {names:?}");
        assert_eq!(pool.threads(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_call_holds_up_no_other_and_threads_leave_when_idle() {
        let pool = CallThreads::new(MAX_THREADS, Duration::from_millis(50));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (began, beginning) = tokio::sync::oneshot::channel::<()>();
        let slow = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.run(move || {
                    let _ = began.send(());
                    released.recv().is_ok()
                })
                .await
            }
        });
        beginning.await.expect("the slow call began");
        // The other calls start threads of their own while the slow one waits.
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..20 {
            let done = done.clone();
            pool.run(move || done.fetch_add(1, Ordering::SeqCst)).await.expect("answered");
        }
        assert_eq!(done.load(Ordering::SeqCst), 20);
        assert!(!pool.finish(Duration::from_millis(20)).await, "the slow call has not ended");
        release.send(()).expect("the slow call waits");
        assert!(slow.await.expect("the task ended").expect("answered"));
        assert!(pool.finish(Duration::from_secs(30)).await);
        let deadline = Instant::now() + Duration::from_secs(30);
        while pool.threads() > 0 {
            assert!(Instant::now() < deadline, "{} threads still in the pool", pool.threads());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(pool.run(|| 1).await.expect("answered"), 1, "a pool whose threads left starts one again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_beyond_the_threads_queue_and_all_run() {
        let pool = CallThreads::new(2, KEEP_ALIVE);
        let calls: Vec<_> = (0..40u64)
            .map(|n| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    pool.run(move || {
                        std::thread::sleep(Duration::from_millis(1));
                        n
                    })
                    .await
                })
            })
            .collect();
        let mut sum = 0;
        for call in calls {
            sum += call.await.expect("the task ended").expect("answered");
        }
        assert_eq!(sum, (0..40).sum::<u64>());
        assert!(pool.threads() <= 2);
        assert!(pool.finish(Duration::from_secs(5)).await);
    }
}
