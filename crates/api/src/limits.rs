//! Rate limits: token buckets per API key (one for reads, a lower one for
//! the agent configuration) and per client address for requests without a
//! valid key. Every limited response carries the IETF `RateLimit-Policy`
//! and `RateLimit` fields and the `X-RateLimit-*` ones; `429` adds
//! `Retry-After`.
//!
//! Several hosts sharing one database divide every quota among them: with
//! `N` hosts serving (as the store counts them) each host's bucket refills
//! `N` times slower and holds `1/N` of the burst (at least one request), so
//! a caller's requests spread over the hosts by a load balancer get the
//! sustained rate once, not once per host, however many hosts there are.

use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use governor::RateLimiter;
use governor::clock::{Clock, DefaultClock, Reference};
use governor::middleware::StateInformationMiddleware;
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
use uuid::Uuid;

/// The longest request target (path and query) served; longer is `414`.
pub const MAX_REQUEST_TARGET_BYTES: usize = 8 * 1024;
/// The most header fields served; more is `431`.
pub const MAX_HEADER_FIELDS: usize = 100;
/// The most header bytes (names, values, separators) served; more is `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How many requests a policy allows: `per_minute` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    pub per_minute: u32,
    pub burst: u32,
}

impl Quota {
    /// One host's part of the quota when `hosts` share it: the period
    /// between requests times `hosts`, the burst divided by `hosts` (at
    /// least one request), so the hosts together never sustain more than
    /// the policy.
    fn governor_for(self, hosts: u32) -> governor::Quota {
        let hosts = hosts.max(1);
        let period = Duration::from_secs(60) / self.per_minute.max(1) * hosts;
        let burst = NonZeroU32::new(self.burst / hosts).unwrap_or(NonZeroU32::MIN);
        governor::Quota::with_period(period)
            .unwrap_or_else(|| governor::Quota::per_second(NonZeroU32::MAX))
            .allow_burst(burst)
    }
}

/// The most callers one limiter tracks. Beyond it, callers whose bucket is
/// full again (no state worth keeping) are forgotten; if every tracked
/// caller is still active, new callers share one overflow bucket: no
/// caller's state is ever reset to make room.
pub const MAX_TRACKED: usize = 100_000;

/// Full buckets are forgotten at least this often, so memory follows the
/// callers that are active.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// At most one sweep a second when the limiter is full: a sweep walks
/// every bucket, and a flood of new callers must not make every request pay it.
const SWEEP_WHEN_FULL_EVERY: Duration = Duration::from_secs(1);

/// Whose bucket a request is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot<K> {
    Caller(K),
    /// Shared by callers first seen while the limiter is full of active ones.
    Overflow,
}

/// Every caller's bucket of one policy (the time its next request is due,
/// as `governor` keeps it), at most `bound` of them, shared by the
/// limiters the policy has had as the number of hosts changed.
struct Buckets<K: Hash + Eq + Clone> {
    map: DashMapStateStore<Slot<K>>,
    bound: usize,
}

/// The buckets as one limiter sees them: `governor` counts time from when
/// a limiter was made, so a limiter made later (for another number of
/// hosts) reads and writes them shifted by `offset`, the time between the
/// first limiter's start and its own. An unknown caller arriving when the
/// map is full is charged to [`Slot::Overflow`].
struct BoundedStore<K: Hash + Eq + Clone> {
    buckets: Arc<Buckets<K>>,
    offset: Nanos,
}

impl<K: Hash + Eq + Clone> StateStore for BoundedStore<K> {
    type Key = Slot<K>;

    fn measure_and_replace<T, F, E>(&self, slot: &Slot<K>, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let map = &self.buckets.map;
        // A known caller (the common case) is found without counting every shard.
        let slot = if map.contains_key(slot) || map.len() < self.buckets.bound { slot } else { &Slot::Overflow };
        let offset = self.offset;
        map.measure_and_replace(slot, |stored| {
            let (outcome, next) = f(stored.map(|at| at.saturating_sub(offset)))?;
            Ok((outcome, next + offset))
        })
    }
}

impl<K: Hash + Eq + Clone> ShrinkableKeyedStateStore<Slot<K>> for BoundedStore<K> {
    fn retain_recent(&self, drop_below: Nanos) {
        ShrinkableKeyedStateStore::retain_recent(&self.buckets.map, drop_below + self.offset);
    }

    fn shrink_to_fit(&self) {
        self.buckets.map.shrink_to_fit();
    }

    fn len(&self) -> usize {
        self.buckets.map.len()
    }

    fn is_empty(&self) -> bool {
        self.buckets.map.is_empty()
    }
}

/// A policy's limiter for one number of hosts sharing it.
struct Share<K: Hash + Eq + Clone, C: Clock> {
    hosts: u32,
    /// What one request costs: a bucket gains one request per `period`.
    period: Duration,
    burst: u32,
    limiter: RateLimiter<Slot<K>, BoundedStore<K>, C, StateInformationMiddleware>,
}

/// One policy's buckets, by caller (GCRA, as `governor` keeps them).
pub struct Limiter<K: Hash + Eq + Clone, C: Clock + Clone = DefaultClock> {
    name: &'static str,
    quota: Quota,
    /// The most buckets kept (see [`BoundedStore`]).
    bound: usize,
    buckets: Arc<Buckets<K>>,
    clock: C,
    /// When the limiter was made, for [`Self::last_sweep`] and the offsets of [`BoundedStore`].
    start: C::Instant,
    /// Nanoseconds from `start` to the last sweep of full buckets.
    last_sweep: AtomicU64,
    /// The limiter for the number of hosts sharing the quota now (see the module's documentation).
    share: RwLock<Arc<Share<K, C>>>,
}
/// The outcome of one request against a policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    pub policy: &'static str,
    pub quota: Quota,
    /// Whole requests left now.
    pub remaining: u32,
    /// Seconds until the bucket is full again (rounded up to a whole request's refill).
    pub reset_seconds: u64,
    /// Seconds until one request is allowed again (when refused).
    pub retry_after_seconds: u64,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    pub fn new(name: &'static str, quota: Quota) -> Limiter<K> {
        Limiter::with_clock(name, quota, DefaultClock::default(), MAX_TRACKED)
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Limiter<K, C> {
    /// A limiter on the given clock that tracks at most `bound` callers.
    fn with_clock(name: &'static str, quota: Quota, clock: C, bound: usize) -> Limiter<K, C> {
        let start = clock.now();
        let buckets = Arc::new(Buckets { map: DashMapStateStore::default(), bound });
        let share = Share::new(quota, 1, &buckets, &clock, Nanos::new(0));
        Limiter {
            name,
            quota,
            bound,
            buckets,
            clock,
            start,
            last_sweep: AtomicU64::new(0),
            share: RwLock::new(Arc::new(share)),
        }
    }

    fn share(&self) -> Arc<Share<K, C>> {
        self.share.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Takes one request from the caller's bucket, if it has one left.
    pub fn check(&self, caller: K) -> Decision {
        self.sweep_if_due();
        let share = self.share();
        let (period, burst) = (share.period, share.burst);
        let seconds = |duration: Duration| duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
        let refused = |wait: Duration| Decision {
            allowed: false,
            policy: self.name,
            quota: self.quota,
            remaining: 0,
            // The bucket is full once the next request's wait and the rest of the burst have passed.
            reset_seconds: seconds(wait + period * (burst - 1)),
            retry_after_seconds: seconds(wait).max(1),
        };
        match share.limiter.check_key(&Slot::Caller(caller)) {
            Ok(state) => {
                let left = state.remaining_burst_capacity();
                Decision {
                    allowed: true,
                    policy: self.name,
                    quota: self.quota,
                    remaining: left,
                    reset_seconds: seconds(period * (burst - left)),
                    retry_after_seconds: 0,
                }
            }
            Err(not_until) => refused(not_until.wait_time_from(self.clock.now())),
        }
    }

    /// Sets how many hosts share this quota (at least one): callers keep
    /// their buckets, now refilled at this host's part of the rate.
    pub fn set_hosts(&self, hosts: u32) {
        let hosts = hosts.max(1);
        if self.share().hosts == hosts {
            return;
        }
        let mut current = self.share.write().unwrap_or_else(PoisonError::into_inner);
        if current.hosts != hosts {
            let offset = self.clock.now().duration_since(self.start);
            *current = Arc::new(Share::new(self.quota, hosts, &self.buckets, &self.clock, offset));
        }
    }

    /// How many hosts share the quota.
    pub fn hosts(&self) -> u32 {
        self.share().hosts
    }

    /// Forgets callers whose bucket is full (a new bucket would be the
    /// same): every [`SWEEP_EVERY`], or every [`SWEEP_WHEN_FULL_EVERY`]
    /// while the limiter is full. One caller sweeps; the others go on.
    fn sweep_if_due(&self) {
        let now = u64::from(self.clock.now().duration_since(self.start));
        let last = self.last_sweep.load(Ordering::Relaxed);
        let since = Duration::from_nanos(now.saturating_sub(last));
        let due = since >= SWEEP_EVERY || (since >= SWEEP_WHEN_FULL_EVERY && self.buckets.map.len() >= self.bound);
        if due && self.last_sweep.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            let share = self.share();
            share.limiter.retain_recent();
            share.limiter.shrink_to_fit();
        }
    }

    /// How many buckets are kept now (callers, and the overflow bucket if in use).
    pub fn tracked(&self) -> usize {
        self.buckets.map.len()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Share<K, C> {
    /// The limiter of `hosts`' part of `quota` over `buckets`, made
    /// `offset` after the policy's first.
    fn new(quota: Quota, hosts: u32, buckets: &Arc<Buckets<K>>, clock: &C, offset: Nanos) -> Share<K, C> {
        let governed = quota.governor_for(hosts);
        let store = BoundedStore { buckets: buckets.clone(), offset };
        Share {
            hosts,
            period: governed.replenish_interval(),
            burst: governed.burst_size().get(),
            limiter: RateLimiter::new(governed, store, clock.clone()),
        }
    }
}

/// The key an address is limited by: an IPv6 client by its /64 (one host
/// commonly holds a whole /64), an IPv4-mapped IPv6 address as IPv4.
pub fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

/// The policies' names, as responses and metrics give them.
pub const POLICIES: [&str; 5] = ["per-key", "agent-config", "per-address", "health", "token-per-client"];

/// Token requests one API client may make from one address (an IPv6
/// client per /64): a client needs one token per lifetime (15 minutes by
/// default), so this leaves room for many workers sharing a client while
/// bounding guesses at its secret, and guesses from one address do not
/// lock the client out from the others.
pub const TOKEN_PER_CLIENT: Quota = Quota { per_minute: 60, burst: 20 };

/// The server's limiters.
pub struct RateLimits {
    pub per_key: Limiter<Uuid>,
    pub agent_config: Limiter<Uuid>,
    /// By [`address_key`]: requests without a valid key, and every
    /// request whose key is not known valid yet, before its lookup.
    pub per_address: Limiter<IpAddr>,
    /// `/v1/health`, by [`address_key`], with the per-address quota in
    /// buckets of its own (a monitor's probes and a client's requests
    /// from one address do not throttle each other).
    pub health: Limiter<IpAddr>,
    /// `POST /oauth2/token`, by client id and [`address_key`], after the
    /// address's bucket.
    pub token_per_client: Limiter<(Uuid, IpAddr)>,
}

impl RateLimits {
    pub fn new(per_key: Quota, agent_config: Quota, per_address: Quota) -> RateLimits {
        RateLimits {
            per_key: Limiter::new(POLICIES[0], per_key),
            agent_config: Limiter::new(POLICIES[1], agent_config),
            per_address: Limiter::new(POLICIES[2], per_address),
            health: Limiter::new(POLICIES[3], per_address),
            token_per_client: Limiter::new(POLICIES[4], TOKEN_PER_CLIENT),
        }
    }

    /// Divides every policy's quota among this many hosts.
    pub fn set_hosts(&self, hosts: u32) {
        self.per_key.set_hosts(hosts);
        self.agent_config.set_hosts(hosts);
        self.per_address.set_hosts(hosts);
        self.health.set_hosts(hosts);
        self.token_per_client.set_hosts(hosts);
    }

    /// How many hosts the quotas are divided among.
    pub fn hosts(&self) -> u32 {
        self.per_key.hosts()
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
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn limiter<K: Hash + Eq + Clone>(quota: Quota, bound: usize) -> (Limiter<K, FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (Limiter::with_clock("per-key", quota, clock.clone(), bound), clock)
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let (limiter, clock) = limiter(Quota { per_minute: 60, burst: 3 }, MAX_TRACKED);
        let (caller, other) = (Uuid::now_v7(), Uuid::now_v7());
        let decisions: Vec<Decision> = (0..4).map(|_| limiter.check(caller)).collect();
        assert_eq!(decisions.iter().map(|d| d.allowed).collect::<Vec<_>>(), [true, true, true, false]);
        assert_eq!(decisions.iter().map(|d| d.remaining).collect::<Vec<_>>(), [2, 1, 0, 0]);
        assert_eq!(decisions[0].reset_seconds, 1);
        assert_eq!(decisions[2].reset_seconds, 3);
        assert_eq!(decisions[3].retry_after_seconds, 1);
        assert_eq!(decisions[3].reset_seconds, 3);
        assert!(limiter.check(other).allowed, "one caller's burst never throttles another");
        clock.advance(Duration::from_millis(500));
        let refused = limiter.check(caller);
        assert!(!refused.allowed);
        assert_eq!((refused.retry_after_seconds, refused.reset_seconds), (1, 3), "0.5 s and 2.5 s, rounded up");
        clock.advance(Duration::from_millis(500));
        assert!(limiter.check(caller).allowed, "one request a second");
        assert!(!limiter.check(caller).allowed);
    }

    #[test]
    fn a_flood_of_new_callers_never_resets_a_throttled_one_and_memory_stays_bounded() {
        // One request a minute: nothing the flood does refills a bucket by itself.
        let (limiter, clock) = limiter(Quota { per_minute: 1, burst: 2 }, MAX_TRACKED);
        let throttled = IpAddr::from([203, 0, 113, 7]);
        assert!(limiter.check(throttled).allowed && limiter.check(throttled).allowed);
        assert!(!limiter.check(throttled).allowed);

        let flood = 200_000u32;
        let mut refused_late_arrivals = 0;
        for n in 0..flood {
            // The flood lasts 2 s of the limiter's clock, so the limiter sweeps during it.
            if n % 10_000 == 0 {
                clock.advance(Duration::from_millis(100));
            }
            let decision = limiter.check(IpAddr::from(n.to_be_bytes()));
            if !decision.allowed {
                refused_late_arrivals += 1;
            }
            assert!(limiter.tracked() <= MAX_TRACKED + 1, "{} buckets after {n} callers", limiter.tracked());
        }
        assert!(!limiter.check(throttled).allowed, "the flood reset a throttled caller");
        assert!(limiter.tracked() <= MAX_TRACKED + 1, "{}", limiter.tracked());
        // The throttled caller and the first MAX_TRACKED - 1 of the flood have
        // their own buckets; the rest share one bucket of two requests.
        assert_eq!(refused_late_arrivals, flood as usize - (MAX_TRACKED - 1) - 2);

        // Once their buckets are full again, the flood's callers are forgotten.
        clock.advance(Duration::from_secs(121));
        assert!(limiter.check(throttled).allowed, "refilled after two minutes");
        assert!(limiter.tracked() <= 2, "{} buckets kept after the flood", limiter.tracked());
    }

    #[test]
    fn hosts_sharing_a_quota_each_allow_their_share() {
        let (limiter, clock) = limiter(Quota { per_minute: 60, burst: 6 }, MAX_TRACKED);
        limiter.set_hosts(3);
        let caller = Uuid::now_v7();
        let decisions: Vec<Decision> = (0..3).map(|_| limiter.check(caller)).collect();
        assert_eq!(decisions.iter().map(|d| d.allowed).collect::<Vec<_>>(), [true, true, false], "6 / 3 hosts");
        assert_eq!(decisions.iter().map(|d| d.remaining).collect::<Vec<_>>(), [1, 0, 0]);
        assert_eq!(decisions[2].retry_after_seconds, 3, "a third of the rate: one request per 3 s");
        clock.advance(Duration::from_secs(3));
        assert!(limiter.check(caller).allowed);
        assert!(!limiter.check(caller).allowed);
    }

    #[test]
    fn more_hosts_than_the_burst_never_allow_more_than_the_policy_together() {
        // Four hosts, a burst of two: each host refills four times slower
        // with a burst of one, so the four allow about the policy's rate, not
        // twice it (a cost clamped to the burst would).
        let quota = Quota { per_minute: 60, burst: 2 };
        let clock = FakeRelativeClock::default();
        let hosts: Vec<Limiter<Uuid, FakeRelativeClock>> =
            (0..4).map(|_| Limiter::with_clock("per-key", quota, clock.clone(), MAX_TRACKED)).collect();
        let caller = Uuid::now_v7();
        // The caller's bucket is in use before the hosts are counted: it keeps its state.
        assert!(hosts[0].check(caller).allowed);
        for host in &hosts {
            host.set_hosts(4);
        }
        let mut allowed = 0;
        for tick in 0..600 {
            if tick > 0 {
                clock.advance(Duration::from_millis(100));
            }
            for host in &hosts {
                allowed += u32::from(host.check(caller).allowed);
            }
        }
        // A minute (less a tick) at one request a second, and one burst per host.
        assert!(allowed <= quota.per_minute + 4, "{allowed} requests allowed in a minute by 4 hosts");
        assert!(allowed >= quota.per_minute - 4, "{allowed} requests allowed in a minute by 4 hosts");
        let refused = hosts[0].check(caller);
        assert!(!refused.allowed);
        assert!(refused.retry_after_seconds <= 4, "one request per 4 s per host: {refused:?}");

        // Back to one host, the full quota again.
        hosts[0].set_hosts(1);
        clock.advance(Duration::from_secs(2));
        assert!(hosts[0].check(caller).allowed && hosts[0].check(caller).allowed);
        assert!(!hosts[0].check(caller).allowed, "a burst of two");
    }

    #[test]
    fn ipv6_clients_are_limited_by_their_64_and_mapped_ipv4_as_ipv4() {
        let key = |text: &str| address_key(text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])));
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:bbbb:cccc:dddd:eeee"));
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::".parse::<IpAddr>().unwrap_or(key("::")));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"), "IPv4 clients each have their own bucket");

        let (limiter, _clock) = limiter(Quota { per_minute: 60, burst: 1 }, MAX_TRACKED);
        assert!(limiter.check(key("2001:db8::1")).allowed);
        assert!(!limiter.check(key("2001:db8::ffff:2")).allowed, "another address of the same /64");
        assert!(limiter.check(key("2001:db8:0:1::1")).allowed, "the next /64");
    }
}
