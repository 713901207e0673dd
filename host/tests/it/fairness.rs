//! One organization cannot starve another of component calls: each holds
//! at most its share of the call slots, and a request that cannot get a
//! slot soon is answered `503` with `Retry-After` instead of queueing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Server, plugins_dir_with, test_plugins_dir};

/// Globex's latencies of a cheap list, one request at a time, at least
/// `requests` of them and until `done` holds. Globex has a client of its
/// own: a blocking client hands every request to one thread of its own,
/// where Globex's requests would queue behind Acme's.
fn latencies(server: &Server, requests: usize, done: impl Fn() -> bool) -> Vec<Duration> {
    let client = reqwest::blocking::Client::new();
    let url = server.url("/v1/scopes?limit=10");
    let bound = Instant::now() + Duration::from_secs(120);
    let mut latencies = Vec::new();
    while latencies.len() < requests || !done() {
        assert!(Instant::now() < bound, "the measurement never ended");
        let started = Instant::now();
        let response = client.get(&url).bearer_auth(&server.keys[1]).send().unwrap();
        latencies.push(started.elapsed());
        assert_eq!(response.status(), 200, "Globex's request failed while Acme saturated its share");
    }
    latencies.sort();
    latencies
}

fn p99(sorted: &[Duration]) -> Duration {
    sorted[(sorted.len() * 99).div_ceil(100) - 1]
}

#[test]
fn an_organization_saturating_its_share_leaves_another_unaffected() {
    // Acme's endpoints are served by a component that waits until its
    // deadline: the most expensive request the deadline allows, held as
    // long as possible, without burning the CPU Globex needs.
    let sleeper = test_plugins_dir().join("sleeper.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("sleeper.wasm", &sleeper)]);
    let server = Server::start_with(
        dir.path(),
        &["--plugin-deadline-ms", "1000", "--plugin-slots-per-organization", "4", "--plugin-slot-wait-ms", "500"],
    );
    let baseline = latencies(&server, 2000, || true);

    // More of Acme's requests at once than there are slots in the whole
    // pool (64).
    let acme_clients = 80;
    let (answered, from_slot_wait) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let stop = AtomicBool::new(false);
    let loaded = std::thread::scope(|scope| {
        for _ in 0..acme_clients {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let response = server.get_as(0, "/v1/endpoints");
                    let elapsed = started.elapsed();
                    assert_eq!(response.status(), 503);
                    assert_eq!(response.headers()["retry-after"], "1");
                    let problem: serde_json::Value = response.json().unwrap();
                    if problem["detail"].as_str().unwrap().contains("component calls are busy") {
                        // Refused after the slot wait, long before the deadline.
                        assert!(elapsed < Duration::from_secs(5), "a slot wait took {elapsed:?}");
                        from_slot_wait.fetch_add(1, Ordering::Relaxed);
                    }
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // The load is on once every client has had an answer.
        let bound = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::Relaxed) < acme_clients {
            assert!(Instant::now() < bound, "Acme's requests never came back");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Measured until Acme has had twice as many answers as it has
        // clients, so its load lasts the whole measurement.
        let before = answered.load(Ordering::Relaxed);
        let loaded = latencies(&server, 2000, || answered.load(Ordering::Relaxed) >= before + 2 * acme_clients);
        stop.store(true, Ordering::Relaxed);
        loaded
    });
    assert!(from_slot_wait.into_inner() > 0, "requests beyond Acme's share were refused after the slot wait");

    let (before, during) = (p99(&baseline), p99(&loaded));
    eprintln!("Globex's p99: {before:?} alone, {during:?} beside Acme's load ({} requests)", loaded.len());
    // The bound: p99 within 1.5 times, with a small floor for noise.
    let allowed = (before * 3 / 2).max(before + Duration::from_millis(20));
    assert!(during <= allowed, "Globex's p99 went from {before:?} to {during:?} (allowed {allowed:?})");
}

fn p50(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

/// A client that abandons its expensive requests does not get more than
/// its share by doing so: the call slot is held until the work stops, and
/// the work stops soon after the client goes away (at the component's next
/// epoch check). Abandoned requests are logged (`499`) and counted.
#[test]
fn abandoning_requests_frees_no_slot_before_the_work_stops() {
    // Acme's endpoints are served by a component that spins until its
    // deadline: every abandoned call would burn a core for 5 s.
    let endless = test_plugins_dir().join("endless-loop.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("endless-loop.wasm", &endless)]);
    let server = Server::start_with(
        dir.path(),
        &[
            "ESR_LOG=warn,esr_api=info",
            "--plugin-deadline-ms",
            "5000",
            "--plugin-slots-per-organization",
            "1",
            "--plugin-slot-wait-ms",
            "200",
        ],
    );
    let quiet = latencies(&server, 1000, || true);

    let acme_clients = 6;
    let (abandoned, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    let loaded = std::thread::scope(|scope| {
        for _ in 0..acme_clients {
            scope.spawn(|| {
                // Gives up on each request after 0.3 s, and closes its connection.
                let client = reqwest::blocking::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
                let url = server.url("/v1/endpoints");
                while !stop.load(Ordering::Relaxed) {
                    match client.get(&url).bearer_auth(&server.keys[0]).send() {
                        Err(error) if error.is_timeout() => {
                            abandoned.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => panic!("{error}"),
                        // Refused: another of Acme's calls holds its one slot.
                        Ok(response) => assert_eq!(response.status(), 503),
                    }
                }
            });
        }
        let bound = Instant::now() + Duration::from_secs(60);
        while abandoned.load(Ordering::Relaxed) < 2 * acme_clients {
            assert!(Instant::now() < bound, "Acme's requests were never abandoned");
            std::thread::sleep(Duration::from_millis(10));
        }
        let loaded = latencies(&server, 1000, || true);
        stop.store(true, Ordering::Relaxed);
        loaded
    });
    let (before, during) = (p50(&quiet), p50(&loaded));
    eprintln!(
        "Globex's p50: {before:?} quiet, {during:?} while Acme abandoned {} requests",
        abandoned.load(Ordering::Relaxed)
    );
    // Within 2× of quiet, with a floor of 2 ms for a timer's grain on a busy machine.
    let allowed = (before * 2).max(before + Duration::from_millis(2));
    assert!(during <= allowed, "Globex's p50 went from {before:?} to {during:?} (allowed {allowed:?})");

    // Each abandoned request is a log line with 499, and counted.
    server.wait_for_log(10, |log| log.contains("request abandoned by the client") && log.contains("499"));
    let counted = server.metric_sum("esr_http_requests_abandoned_total{route=\"/v1/{collection}\"}");
    assert!(counted >= 2.0 * acme_clients as f64, "{counted} abandoned requests counted");
}
