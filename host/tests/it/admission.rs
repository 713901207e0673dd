//! No key must not mean no service: on PostgreSQL, a flood of health
//! requests or of well-formed random keys from one address costs another
//! organization nothing it notices. Health shares one storage probe and
//! is limited per address; a key not known valid is charged to its
//! address before it is looked up, and one found unknown is remembered a
//! few seconds; authentication and health take their connections from a
//! pool of their own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Server, plugins_dir};

/// How long each flood lasts.
const FLOOD_FOR: Duration = Duration::from_secs(6);
/// The flood's concurrent loops, all from one address.
const FLOODERS: usize = 16;
/// The flood's pace, all loops together: this many requests per this long,
/// 1,500 times what the per-address limits let through (120 a minute).
const FLOOD_RATE: (u32, Duration) = (3_000, Duration::from_secs(1));
/// The victim's pace: one request at a time, one started every this often.
const VICTIM_EVERY: Duration = Duration::from_millis(10);
/// Slack on the victim's p99 over the quiet one: p99 under flood ≤
/// max(2 × quiet, quiet + this). A tenth of what a request that waited for
/// a database connection would wait (its deadline, 2 s): a loaded
/// machine's bursts (20 ms was passed by 2 ms on a machine compiling
/// beside the tests) stay under it, a wait for the pool does not.
const NOISE_FLOOR: Duration = Duration::from_millis(200);

fn client_from(local: IpAddr) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().local_address(local).timeout(Duration::from_secs(30)).build().unwrap()
}

/// What the victim saw: each answer's status and latency, and the first
/// answer that was not `200`.
struct Seen {
    statuses: Vec<u16>,
    latencies: Vec<Duration>,
    first_failure: Option<String>,
}

impl Seen {
    fn quantile(&self, percent: usize) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        sorted[(sorted.len() * percent).div_ceil(100).max(1) - 1]
    }

    fn p99(&self) -> Duration {
        self.quantile(99)
    }

    fn median(&self) -> Duration {
        self.quantile(50)
    }

    fn extend(&mut self, other: Seen) {
        self.statuses.extend(other.statuses);
        self.latencies.extend(other.latencies);
        self.first_failure = self.first_failure.take().or(other.first_failure);
    }

    fn not_ok(&self) -> usize {
        self.statuses.iter().filter(|status| **status != 200).count()
    }

    fn describe(&self) -> String {
        let mut counts = std::collections::BTreeMap::new();
        for status in &self.statuses {
            *counts.entry(*status).or_insert(0usize) += 1;
        }
        format!(
            "{} requests, {:.1} % not 200 ({counts:?}), median {:?}, p99 {:?}{}",
            self.statuses.len(),
            100.0 * self.not_ok() as f64 / self.statuses.len() as f64,
            self.median(),
            self.p99(),
            self.first_failure.as_deref().map_or(String::new(), |body| format!(", first failure: {body}"))
        )
    }
}

/// Globex's requests for three seconds with nothing else going on.
fn quietly(server: &Server) -> Seen {
    let until = Instant::now() + Duration::from_secs(3);
    victim(server, || Instant::now() >= until)
}

/// Globex lists its scopes, paced, until `done` holds.
fn victim(server: &Server, done: impl Fn() -> bool) -> Seen {
    let client = client_from(IpAddr::from([127, 0, 0, 1]));
    let url = server.url("/v1/scopes?limit=10");
    let mut seen = Seen { statuses: Vec::new(), latencies: Vec::new(), first_failure: None };
    let mut next = Instant::now();
    while !done() {
        let started = Instant::now();
        let (status, body) = client.get(&url).bearer_auth(&server.keys[1]).send().map_or_else(
            |error| (0, error.to_string()),
            |response| (response.status().as_u16(), response.text().unwrap_or_default()),
        );
        if status != 200 && seen.first_failure.is_none() {
            seen.first_failure = Some(body);
        }
        seen.latencies.push(started.elapsed());
        seen.statuses.push(status);
        next += VICTIM_EVERY;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    seen
}

/// Puts the calling thread last in line for a CPU. The flood's client
/// runs on the server's machine only because this is a test; an attacker's
/// own CPU is not the server's. What is left, and measured, is what the
/// server spends answering the flood.
#[allow(unsafe_code)]
fn lowest_cpu_priority() {
    // SAFETY: `gettid` and `setpriority` take no pointers; on Linux a
    // thread's nice value is its own.
    let changed = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
    assert_eq!(changed, 0, "setpriority: {}", std::io::Error::last_os_error());
}

/// What a flood did: the victim's view, how many flood requests were
/// answered and how many of them were refused with `429`, and the
/// `RateLimit-Policy` of a refusal.
struct Flood {
    seen: Seen,
    answered: usize,
    refused: usize,
    policy: Option<String>,
}

/// The victim's view while `FLOODERS` loops send `request` from `address`
/// at [`FLOOD_RATE`] for [`FLOOD_FOR`].
fn under_flood(
    server: &Server,
    address: IpAddr,
    request: impl Fn(&reqwest::blocking::Client) -> reqwest::Result<reqwest::blocking::Response> + Sync,
) -> Flood {
    let stop = AtomicBool::new(false);
    let answered = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    let policy = std::sync::Mutex::new(None);
    let seen = std::thread::scope(|scope| {
        for _ in 0..FLOODERS {
            scope.spawn(|| {
                lowest_cpu_priority();
                let client = client_from(address);
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(response) = request(&client) {
                        if response.status() == 429 {
                            refused.fetch_add(1, Ordering::Relaxed);
                            let named = response.headers().get("ratelimit-policy");
                            let named = named.and_then(|value| value.to_str().ok()).map(str::to_owned);
                            policy.lock().unwrap().get_or_insert_with(|| named.unwrap_or_default());
                        }
                        let _ = response.bytes();
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    next += FLOODERS as u32 * FLOOD_RATE.1 / FLOOD_RATE.0;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            });
        }
        let until = Instant::now() + FLOOD_FOR;
        let seen = victim(server, || Instant::now() >= until);
        stop.store(true, Ordering::Relaxed);
        seen
    });
    Flood { seen, answered: answered.into_inner(), refused: refused.into_inner(), policy: policy.into_inner().unwrap() }
}

#[test]
fn floods_of_health_or_random_keys_from_one_address_cost_another_organization_nothing() {
    let database = common::postgres::TestDatabase::new();
    // A small pool, so that what the flood takes from it shows; Globex's
    // own limit out of the way.
    let server = Server::start_with(
        &plugins_dir(),
        &[
            "--database",
            &database.url,
            "--database-pool-size",
            "2",
            "--rate-limit-per-minute",
            "1000000",
            "--rate-limit-burst",
            "100000",
        ],
    );
    // Quiet before and after the floods, as one sample: a machine's own
    // noise then weighs on both sides.
    let mut quiet = quietly(&server);

    // The flood's address is refused, not served: health is limited per address.
    let health =
        under_flood(&server, IpAddr::from([127, 0, 0, 2]), |client| client.get(server.url("/v1/health")).send());
    // And so is the lookup of keys not known.
    let keys = under_flood(&server, IpAddr::from([127, 0, 0, 3]), |client| {
        client.get(server.url("/v1/scopes")).bearer_auth(esr_auth::keys::generate_key()).send()
    });
    quiet.extend(quietly(&server));
    let report = format!(
        "quiet: {}\nhealth flood ({} answered, {} refused): {}\nrandom keys flood ({} answered, {} refused): {}",
        quiet.describe(),
        health.answered,
        health.refused,
        health.seen.describe(),
        keys.answered,
        keys.refused,
        keys.seen.describe()
    );
    eprintln!("{report}");
    assert_eq!(quiet.not_ok(), 0, "quiet: {}", quiet.describe());
    // Before: 67 % of Globex's requests answered `503` during a health flood,
    // 26 % during a random-key flood. Now every one is `200`, and its p99
    // within twice quiet's (or quiet's plus a tenth of a wait for the
    // pool, on a machine whose quiet tail is a few milliseconds).
    let bound = (quiet.p99() * 2).max(quiet.p99() + NOISE_FLOOR);
    let expected = (FLOOD_RATE.0 as f64 * FLOOD_FOR.as_secs_f64() / FLOOD_RATE.1.as_secs_f64()) as usize;
    for (name, flood, policy) in
        [("health", &health, "\"health\";q=120;w=60"), ("random keys", &keys, "\"per-address\";q=120;w=60")]
    {
        assert!(
            flood.answered * 2 >= expected,
            "the {name} flood sent {} of {expected}: not a flood\n{report}",
            flood.answered
        );
        // All but what the address's limit lets through are refused: a burst
        // of 120, then 120 a minute.
        let allowed = 120 + 120 * FLOOD_FOR.as_secs() as usize / 60;
        assert!(flood.answered - flood.refused <= allowed, "the {name} flood was served:\n{report}");
        assert_eq!(flood.policy.as_deref(), Some(policy), "the {name} flood was refused by another limit");
        assert_eq!(flood.seen.not_ok(), 0, "a {name} flood failed Globex's requests:\n{report}");
        assert!(flood.seen.p99() <= bound, "a {name} flood slowed Globex's p99 past {bound:?}:\n{report}");
    }
}

#[test]
fn health_requests_within_a_second_share_one_check() {
    let server = Server::start(&plugins_dir());
    let before = server.metric_sum("esr_health_checks_total");
    // Eight clients ask without pause for three seconds, on the admin
    // listener (where health has no rate limit) and on the public one.
    let asking_for = Duration::from_secs(3);
    let started = Instant::now();
    let answered = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for client in 0..8u8 {
            let answered = &answered;
            let server = &server;
            scope.spawn(move || {
                let public = client_from(IpAddr::from([127, 0, 0, 10 + client]));
                while started.elapsed() < asking_for {
                    let response = if client % 2 == 0 {
                        server.admin(reqwest::Method::GET, "/admin/v1/health").send().unwrap()
                    } else {
                        public.get(server.url("/v1/health")).send().unwrap()
                    };
                    if response.status() == 200 {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let checks = server.metric_sum("esr_health_checks_total") - before;
    let answered = answered.into_inner();
    eprintln!("{answered} health answers in {elapsed:?} from {checks} checks");
    // One check a second at most, plus the one under way when the clients stopped.
    let at_most = elapsed.as_secs_f64().ceil() + 1.0;
    assert!(checks >= 1.0 && checks <= at_most, "{checks} checks for {answered} answers in {elapsed:?}");
    assert!(answered as f64 >= 10.0 * at_most, "too few answers ({answered}) to show sharing");
}
