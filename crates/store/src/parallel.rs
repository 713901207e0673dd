//! Work spread over the machine's cores, for the write path: an import
//! batch holds thousands of records whose checks and encodings do not
//! depend on each other.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Below this many items the work stays on the calling thread.
const PARALLEL_ITEMS: usize = 256;
/// Threads at most, whatever the machine has.
const MAX_THREADS: usize = 8;

/// Cores left to other work on this machine ([`leave_cores`]).
static CORES_LEFT: AtomicUsize = AtomicUsize::new(0);

/// Leaves `cores` of the machine's cores to other work from now on: a
/// database on the same machine, whose one backend is an import's
/// slowest step there, and which a thread of the host's on every core
/// took CPU from (docs/performance.md, "The write path's threads beside a
/// database on the same machine").
pub fn leave_cores(cores: usize) {
    CORES_LEFT.store(cores, Ordering::Relaxed);
}

/// The threads one piece of work is spread over: one per core not left
/// to other work, at least one.
fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(CORES_LEFT.load(Ordering::Relaxed)).clamp(1, MAX_THREADS)
}

/// `f` of every item, in the items' order, computed on up to one thread
/// per core (scoped: the threads end before this returns). A panic in `f`
/// is a bug and is resumed on the calling thread.
pub fn map_in_order<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    map_owned_in_order(items.iter().collect(), f)
}

/// [`map_in_order`] for items `f` takes apart: each is moved to `f`.
pub fn map_owned_in_order<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = threads();
    if threads < 2 || items.len() < PARALLEL_ITEMS {
        return items.into_iter().map(f).collect();
    }
    let count = items.len();
    let chunk_size = count.div_ceil(threads);
    let mut chunks = Vec::with_capacity(threads);
    let mut rest = items;
    while rest.len() > chunk_size {
        let tail = rest.split_off(chunk_size);
        chunks.push(std::mem::replace(&mut rest, tail));
    }
    chunks.push(rest);
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> =
            chunks.into_iter().map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<R>>())).collect();
        let mut results = Vec::with_capacity(count);
        for worker in workers {
            match worker.join() {
                Ok(part) => results.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        results
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_keep_the_order_of_the_items() {
        for size in [0, 1, 255, 256, 1_000, 4_097] {
            let items: Vec<u64> = (0..size).collect();
            let squares = super::map_in_order(&items, |n| n * n);
            assert_eq!(squares, items.iter().map(|n| n * n).collect::<Vec<_>>());
            let owned = super::map_owned_in_order(items.iter().map(|n| vec![*n]).collect(), |mut v| v.pop());
            assert_eq!(owned, items.iter().map(|n| Some(*n)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn at_least_one_thread_works_whatever_is_left_to_others() {
        super::leave_cores(usize::MAX);
        assert_eq!(super::threads(), 1);
        let items: Vec<u64> = (0..1_000).collect();
        assert_eq!(super::map_in_order(&items, |n| n + 1), (1..1_001).collect::<Vec<_>>());
        super::leave_cores(0);
        assert!(super::threads() >= 1);
    }
}
