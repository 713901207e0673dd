//! What this host recently learnt of API keys, by hash, so that admitting
//! a request costs no database lookup that an address's rate limit has
//! not paid for first.
//!
//! - A key recently found **valid** is known: its requests are charged to
//!   its own bucket before its lookup. The lookup itself is never skipped:
//!   a revoked key fails its next request on every host.
//! - A key recently found **unknown** (or revoked, or expired) is refused
//!   without a lookup for at most [`UNKNOWN_FOR`]. A key is random (190
//!   bits), so one cannot be asked for before it is created unless someone
//!   guessed it; even so, a key created just after such a miss works within
//!   [`UNKNOWN_FOR`].
//!
//! Both are bounded: entries live in two generations, the older dropped
//! whole when the newer is full or old enough, so a caller varying keys
//! costs at most [`MAX_ENTRIES`] entries each, however long it goes on.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use uuid::Uuid;

/// The longest an unknown key is refused without a lookup.
pub const UNKNOWN_FOR: Duration = Duration::from_secs(5);
/// How long a valid key stays known without being used.
pub const VALID_FOR: Duration = Duration::from_secs(600);
/// The most entries each of the two lists keeps.
pub const MAX_ENTRIES: usize = 100_000;

/// A key's hash.
pub type KeyHash = [u8; 32];

/// Keys recently found valid (with their key id) and recently found unknown.
pub struct KnownKeys {
    valid: Mutex<Generations<Uuid>>,
    unknown: Mutex<Generations<()>>,
}

impl Default for KnownKeys {
    fn default() -> KnownKeys {
        KnownKeys::with_bounds(MAX_ENTRIES, VALID_FOR, UNKNOWN_FOR)
    }
}

impl KnownKeys {
    fn with_bounds(entries: usize, valid_for: Duration, unknown_for: Duration) -> KnownKeys {
        KnownKeys {
            valid: Mutex::new(Generations::new(entries, valid_for)),
            unknown: Mutex::new(Generations::new(entries, unknown_for)),
        }
    }

    /// The key id of a key recently found valid.
    pub fn valid(&self, hash: &KeyHash) -> Option<Uuid> {
        self.valid.lock().unwrap_or_else(PoisonError::into_inner).get(hash, Instant::now()).copied()
    }

    /// Whether the key was recently found unknown, revoked or expired.
    pub fn is_unknown(&self, hash: &KeyHash) -> bool {
        self.unknown.lock().unwrap_or_else(PoisonError::into_inner).get(hash, Instant::now()).is_some()
    }

    /// Notes what a lookup found: the key's id when it is valid.
    pub fn found(&self, hash: KeyHash, key_id: Option<Uuid>) {
        let now = Instant::now();
        match key_id {
            Some(id) => self.valid.lock().unwrap_or_else(PoisonError::into_inner).insert(hash, id, now),
            None => {
                self.valid.lock().unwrap_or_else(PoisonError::into_inner).remove(&hash);
                self.unknown.lock().unwrap_or_else(PoisonError::into_inner).insert(hash, (), now);
            }
        }
    }
}

/// Entries in two generations: each lives from half its lifetime to its
/// whole lifetime after it was last inserted, and at most `2 × capacity`
/// are kept.
struct Generations<V> {
    current: HashMap<KeyHash, V>,
    previous: HashMap<KeyHash, V>,
    /// When `current` began.
    began: Instant,
    capacity: usize,
    /// How long one generation is the current one (half the lifetime).
    span: Duration,
}

impl<V> Generations<V> {
    fn new(capacity: usize, lifetime: Duration) -> Generations<V> {
        Generations {
            current: HashMap::new(),
            previous: HashMap::new(),
            began: Instant::now(),
            capacity: capacity.max(1),
            span: lifetime / 2,
        }
    }

    /// Drops what is past its lifetime.
    fn age(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.began);
        if elapsed >= self.span * 2 {
            self.current.clear();
            self.previous.clear();
            self.began = now;
        } else if elapsed >= self.span {
            self.previous = std::mem::take(&mut self.current);
            self.began = now;
        }
    }

    fn get(&mut self, hash: &KeyHash, now: Instant) -> Option<&V> {
        self.age(now);
        self.current.get(hash).or_else(|| self.previous.get(hash))
    }

    fn insert(&mut self, hash: KeyHash, value: V, now: Instant) {
        self.age(now);
        if self.current.len() >= self.capacity {
            // Full before its time: the older generation goes early.
            self.previous = std::mem::take(&mut self.current);
            self.began = now;
        }
        self.previous.remove(&hash);
        self.current.insert(hash, value);
    }

    fn remove(&mut self, hash: &KeyHash) {
        self.current.remove(hash);
        self.previous.remove(hash);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(n: u32) -> KeyHash {
        let mut hash = [0; 32];
        hash[..4].copy_from_slice(&n.to_be_bytes());
        hash
    }

    #[test]
    fn unknown_keys_are_forgotten_within_their_lifetime_and_stay_bounded() {
        let known = KnownKeys::with_bounds(1_000, Duration::from_secs(600), Duration::from_millis(200));
        known.found(hash(1), None);
        assert!(known.is_unknown(&hash(1)));
        assert!(!known.is_unknown(&hash(2)));
        std::thread::sleep(Duration::from_millis(250));
        assert!(!known.is_unknown(&hash(1)), "an unknown key is looked up again after its lifetime");

        // A caller varying keys fills two generations at most.
        for n in 0..50_000 {
            known.found(hash(n), None);
            assert!(known.unknown.lock().unwrap_or_else(PoisonError::into_inner).len() <= 2_000);
        }
        assert!(known.is_unknown(&hash(49_999)), "the latest are kept");
    }

    #[test]
    fn a_key_found_invalid_is_no_longer_known_valid() {
        let known = KnownKeys::default();
        let id = Uuid::now_v7();
        known.found(hash(7), Some(id));
        assert_eq!(known.valid(&hash(7)), Some(id));
        assert!(!known.is_unknown(&hash(7)));
        known.found(hash(7), None);
        assert_eq!(known.valid(&hash(7)), None);
        assert!(known.is_unknown(&hash(7)));
    }
}
