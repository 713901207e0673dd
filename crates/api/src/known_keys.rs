//! What this host recently learnt of API keys, by hash, so that admitting
//! a request costs no database lookup that an address's rate limit has
//! not paid for first.
//!
//! - A key recently found **valid** is known: its requests are charged to
//!   its own bucket before its lookup (on PostgreSQL, admitted as its
//!   principal and looked up in their component calls). The lookup itself
//!   is never skipped: a revoked key fails its next request on every host.
//! - A key recently found **unknown** (or revoked, or expired) is refused
//!   without a lookup for at most [`UNKNOWN_FOR`]. A key is random (190
//!   bits), so one cannot be asked for before it is created unless someone
//!   guessed it; even so, a key created just after such a miss works within
//!   [`UNKNOWN_FOR`].
//!
//! - A key's use is noted in the store (its `last_used_at`) at most once
//!   per [`NOTE_USE_EVERY`] by this host ([`note_use`]), off the request
//!   path: several hosts each note it at most that often.
//!
//! All are bounded: entries live in two generations, the older dropped
//! whole when the newer is full or old enough, so a caller varying keys
//! costs at most [`MAX_ENTRIES`] entries each, however long it goes on.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use esr_auth::keys::Principal;
use esr_store::Organization;
use uuid::Uuid;

/// The longest an unknown key is refused without a lookup.
pub const UNKNOWN_FOR: Duration = Duration::from_secs(5);
/// How long a valid key stays known without being used.
pub const VALID_FOR: Duration = Duration::from_secs(600);
/// The most entries each of the three lists keeps.
pub const MAX_ENTRIES: usize = 100_000;
/// How often this host notes a key's use in the store at most.
pub const NOTE_USE_EVERY: Duration = Duration::from_secs(60);
/// How long noting a use may wait for a database connection (beside the
/// requests' authentication) before it is given up until the next use.
const NOTE_USE_WAIT: Duration = Duration::from_secs(10);
/// How often a failure to note a use is logged at most.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A key's hash.
pub type KeyHash = [u8; 32];

/// A key recently found valid: whom it authenticates and its
/// organization, neither of which a key ever changes (a key is revoked or
/// expires, never edited; an organization is never edited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownKey {
    pub principal: Arc<Principal>,
    pub organization: Arc<Organization>,
}

impl KnownKey {
    pub fn id(&self) -> Uuid {
        self.principal.id
    }

    pub fn organization_id(&self) -> Uuid {
        self.principal.organization_id
    }
}

/// Keys recently found valid (with their key id) and recently found
/// unknown; when this host last noted each key's use.
pub struct KnownKeys {
    valid: Mutex<Generations<KeyHash, KnownKey>>,
    unknown: Mutex<Generations<KeyHash, ()>>,
    /// When this host last noted a key's use, by key id.
    used: Mutex<Generations<Uuid, Instant>>,
    /// Failures to note a use: when one was last logged, and how many
    /// were not logged since.
    failures: Mutex<(Option<Instant>, u64)>,
}

impl Default for KnownKeys {
    fn default() -> KnownKeys {
        KnownKeys::with_bounds(MAX_ENTRIES, VALID_FOR, UNKNOWN_FOR)
    }
}

/// Notes that the key with this id authenticated a request, in the store,
/// unless this host did within [`NOTE_USE_EVERY`]: on a task of its own,
/// with an admission permit (the request never waits for it). A failure
/// is logged at `warn`, once per [`WARN_EVERY`] at most.
pub(crate) fn note_use(state: &crate::AppState, key_id: Uuid) {
    if !state.known_keys.use_is_due(key_id, Instant::now()) {
        return;
    }
    let (db, calls, shared) = (state.db.clone(), state.admission_calls.clone(), state.clone());
    let at = esr_system::clock::now_rfc3339();
    let until = tokio::time::Instant::now() + NOTE_USE_WAIT;
    tokio::spawn(async move {
        let failure = match calls.run(until, move || db.touch_api_key(key_id, &at)).await {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error.to_string(),
            Err(problem) => problem.detail,
        };
        if let Some(unlogged) = shared.known_keys.failure_to_log(Instant::now()) {
            tracing::warn!(%key_id, error = %failure, unlogged, "could not note an API key's use");
        }
    });
}

impl KnownKeys {
    fn with_bounds(entries: usize, valid_for: Duration, unknown_for: Duration) -> KnownKeys {
        KnownKeys {
            valid: Mutex::new(Generations::new(entries, valid_for)),
            unknown: Mutex::new(Generations::new(entries, unknown_for)),
            // Kept twice the interval: each lives at least the interval.
            used: Mutex::new(Generations::new(entries, NOTE_USE_EVERY * 2)),
            failures: Mutex::new((None, 0)),
        }
    }

    /// Whether the key's use is to be noted now: this host has not noted
    /// it within [`NOTE_USE_EVERY`] (or forgot, its list being full). When
    /// it is, it counts as noted from `now`.
    pub fn use_is_due(&self, key_id: Uuid, now: Instant) -> bool {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        if used.get(&key_id, now).is_some_and(|noted| now.saturating_duration_since(*noted) < NOTE_USE_EVERY) {
            return false;
        }
        used.insert(key_id, now, now);
        true
    }

    /// Counts a failure to note a use; `Some(failures not logged before
    /// it)` when it is to be logged (the first in [`WARN_EVERY`]).
    fn failure_to_log(&self, now: Instant) -> Option<u64> {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let (logged, unlogged) = &mut *failures;
        if logged.is_some_and(|at| now.saturating_duration_since(at) < WARN_EVERY) {
            *unlogged += 1;
            return None;
        }
        *logged = Some(now);
        Some(std::mem::take(unlogged))
    }

    /// A key recently found valid.
    pub fn valid(&self, hash: &KeyHash) -> Option<KnownKey> {
        self.valid.lock().unwrap_or_else(PoisonError::into_inner).get(hash, Instant::now()).cloned()
    }

    /// Whether the key was recently found unknown, revoked or expired.
    pub fn is_unknown(&self, hash: &KeyHash) -> bool {
        self.unknown.lock().unwrap_or_else(PoisonError::into_inner).get(hash, Instant::now()).is_some()
    }

    /// Notes what a lookup found: the key when it is valid.
    pub fn found(&self, hash: KeyHash, key: Option<KnownKey>) {
        let now = Instant::now();
        match key {
            Some(key) => self.valid.lock().unwrap_or_else(PoisonError::into_inner).insert(hash, key, now),
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
struct Generations<K, V> {
    current: HashMap<K, V>,
    previous: HashMap<K, V>,
    /// When `current` began.
    began: Instant,
    capacity: usize,
    /// How long one generation is the current one (half the lifetime).
    span: Duration,
}

impl<K: Hash + Eq, V> Generations<K, V> {
    fn new(capacity: usize, lifetime: Duration) -> Generations<K, V> {
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

    fn get(&mut self, hash: &K, now: Instant) -> Option<&V> {
        self.age(now);
        self.current.get(hash).or_else(|| self.previous.get(hash))
    }

    fn insert(&mut self, hash: K, value: V, now: Instant) {
        self.age(now);
        if self.current.len() >= self.capacity {
            // Full before its time: the older generation goes early.
            self.previous = std::mem::take(&mut self.current);
            self.began = now;
        }
        self.previous.remove(&hash);
        self.current.insert(hash, value);
    }

    fn remove(&mut self, hash: &K) {
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
    fn a_use_is_noted_once_a_minute_per_key_and_the_list_stays_bounded() {
        let known = KnownKeys::with_bounds(1_000, VALID_FOR, UNKNOWN_FOR);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let start = Instant::now();
        assert!(known.use_is_due(a, start));
        assert!(!known.use_is_due(a, start + Duration::from_secs(59)), "not again within the minute");
        assert!(known.use_is_due(b, start + Duration::from_secs(1)), "each key its own");
        assert!(known.use_is_due(a, start + NOTE_USE_EVERY), "again once the minute is over");
        assert!(!known.use_is_due(a, start + NOTE_USE_EVERY + Duration::from_secs(30)));
        for _ in 0..5_000 {
            known.use_is_due(Uuid::now_v7(), start);
            assert!(known.used.lock().unwrap_or_else(PoisonError::into_inner).len() <= 2_000);
        }
    }

    #[test]
    fn failures_to_note_a_use_are_logged_once_a_minute() {
        let known = KnownKeys::default();
        let start = Instant::now();
        assert_eq!(known.failure_to_log(start), Some(0));
        assert_eq!(known.failure_to_log(start + Duration::from_secs(1)), None);
        assert_eq!(known.failure_to_log(start + Duration::from_secs(2)), None);
        assert_eq!(known.failure_to_log(start + WARN_EVERY), Some(2), "with how many were not logged");
    }

    #[test]
    fn a_key_found_invalid_is_no_longer_known_valid() {
        let known = KnownKeys::default();
        let organization = Organization {
            organization_id: Uuid::now_v7(),
            name: "Initech".to_owned(),
            enrollment_token: "enroll".to_owned(),
            created_at: "2026-12-01T00:00:00Z".to_owned(),
        };
        let principal = Principal {
            id: Uuid::now_v7(),
            credential: esr_auth::keys::Credential::ApiKey,
            organization_id: organization.organization_id,
            scopes: vec!["endpoints:read".to_owned()],
        };
        let key = KnownKey { principal: Arc::new(principal), organization: Arc::new(organization) };
        known.found(hash(7), Some(key.clone()));
        assert_eq!(known.valid(&hash(7)), Some(key));
        assert!(!known.is_unknown(&hash(7)));
        known.found(hash(7), None);
        assert_eq!(known.valid(&hash(7)), None);
        assert!(known.is_unknown(&hash(7)));
    }
}
