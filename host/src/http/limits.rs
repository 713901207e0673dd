//! Rate limits: token buckets per API key (one for reads, a lower one for
//! the agent configuration) and per client address for requests without a
//! valid key. Every limited response carries the IETF `RateLimit-Policy`
//! and `RateLimit` fields and the `X-RateLimit-*` ones; `429` adds
//! `Retry-After`.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use uuid::Uuid;

/// The longest request target (path and query) served; longer is `414`.
pub const MAX_REQUEST_TARGET_BYTES: usize = 8 * 1024;
/// The most header bytes (names, values, separators) served; more is `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How many requests a policy allows: `per_minute` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    pub per_minute: u32,
    pub burst: u32,
}

/// The most callers one limiter tracks; beyond it, callers whose bucket
/// has refilled (and so carry no state worth keeping) are forgotten first.
const MAX_TRACKED: usize = 100_000;

/// One policy's buckets, by caller.
pub struct Limiter<K> {
    name: &'static str,
    quota: Quota,
    buckets: Mutex<HashMap<K, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The outcome of one request against a policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    pub policy: &'static str,
    pub quota: Quota,
    /// Whole requests left now.
    pub remaining: u32,
    /// Seconds until the bucket is full again.
    pub reset_seconds: u64,
    /// Seconds until one request is allowed again (when refused).
    pub retry_after_seconds: u64,
}

impl<K: Hash + Eq + Copy> Limiter<K> {
    pub fn new(name: &'static str, quota: Quota) -> Limiter<K> {
        Limiter { name, quota, buckets: Mutex::new(HashMap::new()) }
    }

    fn refill_per_second(&self) -> f64 {
        f64::from(self.quota.per_minute.max(1)) / 60.0
    }

    /// Takes one token from the caller's bucket, if there is one.
    pub fn check(&self, caller: K, now: Instant) -> Decision {
        let capacity = f64::from(self.quota.burst.max(1));
        let rate = self.refill_per_second();
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_TRACKED && !buckets.contains_key(&caller) {
            buckets.retain(|_, bucket| {
                bucket.tokens + now.saturating_duration_since(bucket.updated).as_secs_f64() * rate < capacity
            });
            if buckets.len() >= MAX_TRACKED {
                // Still full of busy callers: start over rather than grow.
                buckets.clear();
            }
        }
        let bucket = buckets.entry(caller).or_insert(Bucket { tokens: capacity, updated: now });
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.updated = now;
        let allowed = bucket.tokens >= 1.0;
        if allowed {
            bucket.tokens -= 1.0;
        }
        Decision {
            allowed,
            policy: self.name,
            quota: self.quota,
            remaining: bucket.tokens.floor() as u32,
            reset_seconds: ((capacity - bucket.tokens) / rate).ceil() as u64,
            retry_after_seconds: if allowed { 0 } else { ((1.0 - bucket.tokens) / rate).ceil().max(1.0) as u64 },
        }
    }

    /// How many callers are tracked now.
    pub fn tracked(&self) -> usize {
        self.buckets.lock().map_or(0, |buckets| buckets.len())
    }
}

/// The server's limiters.
pub struct RateLimits {
    pub per_key: Limiter<Uuid>,
    pub agent_config: Limiter<Uuid>,
    pub per_address: Limiter<IpAddr>,
}

impl RateLimits {
    pub fn new(per_key: Quota, agent_config: Quota, per_address: Quota) -> RateLimits {
        RateLimits {
            per_key: Limiter::new("per-key", per_key),
            agent_config: Limiter::new("agent-config", agent_config),
            per_address: Limiter::new("per-address", per_address),
        }
    }
}

impl Decision {
    /// The rate-limit fields of a response.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        let window = 60;
        let fields = [
            ("ratelimit-policy", format!("\"{}\";q={};w={window}", self.policy, self.quota.per_minute)),
            ("ratelimit", format!("\"{}\";r={};t={}", self.policy, self.remaining, self.reset_seconds)),
            ("x-ratelimit-limit", self.quota.per_minute.to_string()),
            ("x-ratelimit-remaining", self.remaining.to_string()),
            ("x-ratelimit-reset", self.reset_seconds.to_string()),
        ];
        for (name, value) in fields {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let limiter = Limiter::new("per-key", Quota { per_minute: 60, burst: 3 });
        let (caller, other, start) = (Uuid::now_v7(), Uuid::now_v7(), Instant::now());
        let decisions: Vec<Decision> = (0..4).map(|_| limiter.check(caller, start)).collect();
        assert_eq!(decisions.iter().map(|d| d.allowed).collect::<Vec<_>>(), [true, true, true, false]);
        assert_eq!(decisions[0].remaining, 2);
        assert_eq!(decisions[3].retry_after_seconds, 1);
        assert_eq!(decisions[3].reset_seconds, 3);
        assert!(limiter.check(other, start).allowed, "one caller's burst never throttles another");
        assert!(!limiter.check(caller, start + Duration::from_millis(500)).allowed);
        assert!(limiter.check(caller, start + Duration::from_millis(1100)).allowed, "one token a second");
    }

    #[test]
    fn memory_stays_bounded_as_callers_come_and_go() {
        let limiter = Limiter::new("per-key", Quota { per_minute: 600, burst: 10 });
        let start = Instant::now();
        for n in 0..(MAX_TRACKED * 2 + 10) {
            // Each caller comes once; a minute later its bucket is full again.
            limiter.check(Uuid::from_u128(n as u128), start + Duration::from_secs(60 * (n / MAX_TRACKED) as u64));
        }
        assert!(limiter.tracked() <= MAX_TRACKED, "{}", limiter.tracked());
    }
}
