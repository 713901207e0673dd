//! Prometheus metrics, served in the text format on the admin listener's
//! `GET /metrics`: requests by route and status with latency histograms,
//! component calls by group with their latency and failures, rate-limited
//! and shed requests, and the store's size.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Latency buckets, in seconds.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

#[derive(Default, Clone)]
struct Histogram {
    /// Observations at or below each bucket's bound.
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (bound, count) in BUCKETS.iter().zip(self.counts.iter_mut()) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        for (bound, count) in BUCKETS.iter().zip(self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Default)]
struct State {
    /// (route template, status) → count.
    requests: BTreeMap<(String, u16), u64>,
    /// route template → latency.
    request_latency: BTreeMap<String, Histogram>,
    /// group → latency of component calls.
    call_latency: BTreeMap<String, Histogram>,
    /// (group, kind) → failed calls (`timeout`, `trap`).
    call_failures: BTreeMap<(String, &'static str), u64>,
    /// policy → requests refused with 429.
    rate_limited: BTreeMap<&'static str, u64>,
    shed: u64,
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    state: Mutex<State>,
}

/// Escapes a label value.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    fn with<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        change(&mut self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    pub fn request(&self, route: &str, status: u16, elapsed: Duration) {
        self.with(|state| {
            *state.requests.entry((route.to_owned(), status)).or_default() += 1;
            state.request_latency.entry(route.to_owned()).or_default().observe(elapsed.as_secs_f64());
        });
    }

    pub fn component_call(&self, group: &str, elapsed: Duration, failure: Option<&'static str>) {
        self.with(|state| {
            state.call_latency.entry(group.to_owned()).or_default().observe(elapsed.as_secs_f64());
            if let Some(kind) = failure {
                *state.call_failures.entry((group.to_owned(), kind)).or_default() += 1;
            }
        });
    }

    pub fn rate_limited(&self, policy: &'static str) {
        self.with(|state| *state.rate_limited.entry(policy).or_default() += 1);
    }

    pub fn shed(&self) {
        self.with(|state| state.shed += 1);
    }

    /// The text exposition format; `store_bytes` is the store's size on disk.
    pub fn render(&self, store_bytes: u64) -> String {
        let mut out = String::new();
        self.with(|state| {
            out.push_str("# HELP esr_http_requests_total Requests answered, by route template and status.\n");
            out.push_str("# TYPE esr_http_requests_total counter\n");
            for ((route, status), count) in &state.requests {
                let _ =
                    writeln!(out, "esr_http_requests_total{{route=\"{}\",status=\"{status}\"}} {count}", label(route));
            }
            out.push_str("# HELP esr_http_request_duration_seconds Time to answer, by route template.\n");
            out.push_str("# TYPE esr_http_request_duration_seconds histogram\n");
            for (route, histogram) in &state.request_latency {
                histogram.render(&mut out, "esr_http_request_duration_seconds", &format!("route=\"{}\"", label(route)));
            }
            out.push_str("# HELP esr_component_call_duration_seconds Component calls, by group.\n");
            out.push_str("# TYPE esr_component_call_duration_seconds histogram\n");
            for (group, histogram) in &state.call_latency {
                histogram.render(
                    &mut out,
                    "esr_component_call_duration_seconds",
                    &format!("group=\"{}\"", label(group)),
                );
            }
            out.push_str(
                "# HELP esr_component_call_failures_total Component calls that trapped or overran their deadline.\n",
            );
            out.push_str("# TYPE esr_component_call_failures_total counter\n");
            for ((group, kind), count) in &state.call_failures {
                let _ = writeln!(
                    out,
                    "esr_component_call_failures_total{{group=\"{}\",kind=\"{kind}\"}} {count}",
                    label(group)
                );
            }
            out.push_str("# HELP esr_rate_limited_total Requests refused with 429, by policy.\n");
            out.push_str("# TYPE esr_rate_limited_total counter\n");
            for (policy, count) in &state.rate_limited {
                let _ = writeln!(out, "esr_rate_limited_total{{policy=\"{policy}\"}} {count}");
            }
            out.push_str("# HELP esr_shed_requests_total Requests shed with 503 at the concurrency limit.\n");
            out.push_str("# TYPE esr_shed_requests_total counter\n");
            let _ = writeln!(out, "esr_shed_requests_total {}", state.shed);
        });
        out.push_str("# HELP esr_store_size_bytes The store's size on disk.\n");
        out.push_str("# TYPE esr_store_size_bytes gauge\n");
        let _ = writeln!(out, "esr_store_size_bytes {store_bytes}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_labels_escaped() {
        let metrics = Metrics::default();
        metrics.request("/v1/{collection}", 200, Duration::from_millis(3));
        metrics.request("/v1/{collection}", 200, Duration::from_millis(30));
        metrics.component_call("en\"d", Duration::from_millis(1), Some("trap"));
        let text = metrics.render(42);
        assert!(text.contains("esr_http_requests_total{route=\"/v1/{collection}\",status=\"200\"} 2"));
        assert!(text.contains("esr_http_request_duration_seconds_bucket{route=\"/v1/{collection}\",le=\"0.005\"} 1"));
        assert!(text.contains("esr_http_request_duration_seconds_bucket{route=\"/v1/{collection}\",le=\"0.05\"} 2"));
        assert!(text.contains("esr_http_request_duration_seconds_bucket{route=\"/v1/{collection}\",le=\"+Inf\"} 2"));
        assert!(text.contains("esr_component_call_failures_total{group=\"en\\\"d\",kind=\"trap\"} 1"));
        assert!(text.contains("esr_store_size_bytes 42"));
    }
}
