//! Admin authentication on the admin listener: the token compared by its
//! digest (`esr_auth::admin_token`), and the count of failed authentications
//! that throttles them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Failed authentications an address may make at once.
const FAILURES_ALLOWED: f64 = 5.0;
/// One more failure is allowed every this long.
const FAILURE_ALLOWANCE_EVERY: Duration = Duration::from_secs(12);
/// The most addresses tracked; beyond it, addresses whose allowance is
/// whole again are forgotten, and if none is, new ones share one entry.
const MAX_ADDRESSES_TRACKED: usize = 4096;

/// Failed admin authentications per client address (an IPv6 client by its
/// /64): [`FAILURES_ALLOWED`] at once, then one every
/// [`FAILURE_ALLOWANCE_EVERY`]; the failures of an address past its
/// allowance are answered `429` until it has one again.
pub struct FailedAuthentications {
    /// `None`: the entry shared by addresses first seen while the table is full.
    allowances: Mutex<HashMap<Option<IpAddr>, Allowance>>,
    capacity: usize,
}

/// The failures an address may still make, as of `at`.
#[derive(Clone, Copy)]
struct Allowance {
    left: f64,
    at: Instant,
}

impl Allowance {
    fn now(self, now: Instant) -> f64 {
        let regained = now.saturating_duration_since(self.at).as_secs_f64() / FAILURE_ALLOWANCE_EVERY.as_secs_f64();
        (self.left + regained).min(FAILURES_ALLOWED)
    }
}

impl Default for FailedAuthentications {
    fn default() -> Self {
        FailedAuthentications::with_capacity(MAX_ADDRESSES_TRACKED)
    }
}

impl FailedAuthentications {
    fn with_capacity(capacity: usize) -> Self {
        FailedAuthentications { allowances: Mutex::default(), capacity }
    }

    /// How long `address` must wait before it may try again, when it is
    /// past its allowance.
    pub fn retry_after(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let allowances = self.allowances.lock().unwrap_or_else(PoisonError::into_inner);
        let key = Some(super::limits::address_key(address));
        let allowance = match allowances.get(&key) {
            Some(allowance) => allowance,
            // An address the table has no room for shares the overflow entry.
            None if tracked_addresses(&allowances) >= self.capacity => allowances.get(&None)?,
            None => return None,
        };
        let left = allowance.now(now);
        (left < 1.0).then(|| FAILURE_ALLOWANCE_EVERY.mul_f64(1.0 - left))
    }

    /// Counts a failed authentication from `address`.
    pub fn record(&self, address: IpAddr, now: Instant) {
        let mut allowances = self.allowances.lock().unwrap_or_else(PoisonError::into_inner);
        let mut key = Some(super::limits::address_key(address));
        if !allowances.contains_key(&key) && tracked_addresses(&allowances) >= self.capacity {
            allowances.retain(|_, allowance| allowance.now(now) < FAILURES_ALLOWED);
            if tracked_addresses(&allowances) >= self.capacity {
                key = None;
            }
        }
        let allowance = allowances.entry(key).or_insert(Allowance { left: FAILURES_ALLOWED, at: now });
        *allowance = Allowance { left: (allowance.now(now) - 1.0).max(0.0), at: now };
    }
}

/// The addresses with an entry of their own.
fn tracked_addresses(allowances: &HashMap<Option<IpAddr>, Allowance>) -> usize {
    allowances.len() - usize::from(allowances.contains_key(&None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_past_its_failures_waits_and_the_table_stays_bounded() {
        let failures = FailedAuthentications::with_capacity(3);
        let start = Instant::now();
        let (a, b) = (IpAddr::from([192, 0, 2, 1]), IpAddr::from([192, 0, 2, 2]));
        for _ in 0..5 {
            assert_eq!(failures.retry_after(a, start), None);
            failures.record(a, start);
        }
        let wait = failures.retry_after(a, start).expect("throttled after 5 failures");
        assert_eq!(wait, FAILURE_ALLOWANCE_EVERY);
        assert_eq!(failures.retry_after(b, start), None, "another address is not");
        assert_eq!(failures.retry_after(a, start + FAILURE_ALLOWANCE_EVERY), None, "one more try after the wait");
        // A flood of new addresses never resets a throttled one, and the table stays bounded.
        for last in 0..=255u8 {
            failures.record(IpAddr::from([198, 51, 100, last]), start);
        }
        assert!(failures.retry_after(a, start).is_some(), "still throttled");
        assert!(failures.allowances.lock().unwrap_or_else(PoisonError::into_inner).len() <= 4);
    }
}
