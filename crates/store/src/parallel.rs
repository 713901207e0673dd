//! Work spread over the machine's cores, for the write path: an import
//! batch holds thousands of records whose checks and encodings do not
//! depend on each other.

/// Below this many items the work stays on the calling thread.
const PARALLEL_ITEMS: usize = 256;
/// Threads at most, whatever the machine has.
const MAX_THREADS: usize = 8;

/// `f` of every item, in the items' order, computed on up to one thread
/// per core (scoped: the threads end before this returns). A panic in `f`
/// is a bug and is resumed on the calling thread.
pub fn map_in_order<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    map_owned_in_order(items.iter().collect(), f)
}

/// [`map_in_order`] for items `f` takes apart: each is moved to `f`.
pub fn map_owned_in_order<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS);
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
}
