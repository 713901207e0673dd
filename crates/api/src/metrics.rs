//! Prometheus metrics (`prometheus-client`), served in the OpenMetrics text
//! format on the admin listener's `GET /metrics`: requests by route and
//! status with latency histograms, component calls by group with their
//! latency and failures, rate-limited and shed requests, the checks health
//! ran, and the store's size. Recording takes no lock shared by every request: a series is
//! found under its family's read lock and counted atomically (a histogram
//! locks only itself). A family with no series yet is left out.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Latency buckets, in seconds.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    group: &'static str,
    /// `timeout` or `trap`.
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MalformedLabels {
    listener: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// Webhook delivery lag buckets, in seconds: from a busy loopback
/// receiver's to a retried batch's.
const LAG_BUCKETS: [f64; 12] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0];

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The server's metrics.
/// How a component call can fail, as `esr_component_call_failures_total` labels it.
pub const CALL_FAILURE_KINDS: [&str; 4] = ["timeout", "abandoned", "trap", "unavailable"];

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_latency: Histograms<RouteLabels>,
    call_latency: Histograms<GroupLabels>,
    call_failures: Family<FailureLabels, Counter>,
    rate_limited: Family<PolicyLabels, Counter>,
    abandoned: Family<RouteLabels, Counter>,
    shed: Counter,
    health_checks: Counter,
    malformed: Family<MalformedLabels, Counter>,
    store_bytes: Gauge<u64, AtomicU64>,
    idle_slots: Gauge<u64, AtomicU64>,
    idle_slot_resident_bytes: Gauge<u64, AtomicU64>,
    webhook_deliveries: Family<OutcomeLabels, Counter>,
    webhook_lag: Histogram,
    webhook_subscriptions: Family<StateLabels, Gauge>,
    audit_recorded: Counter,
    audit_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let metrics = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            request_latency: Family::new_with_constructor(latency_histogram),
            call_latency: Family::new_with_constructor(latency_histogram),
            call_failures: Family::default(),
            rate_limited: Family::default(),
            abandoned: Family::default(),
            shed: Counter::default(),
            health_checks: Counter::default(),
            malformed: Family::default(),
            store_bytes: Gauge::default(),
            idle_slots: Gauge::default(),
            idle_slot_resident_bytes: Gauge::default(),
            webhook_deliveries: Family::default(),
            webhook_lag: Histogram::new(LAG_BUCKETS),
            webhook_subscriptions: Family::default(),
            audit_recorded: Counter::default(),
            audit_dropped: Counter::default(),
        };
        for outcome in esr_webhooks::OUTCOMES {
            let _ = metrics.webhook_deliveries.get_or_create(&OutcomeLabels { outcome });
        }
        let mut registry = Registry::default();
        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "esr_http_requests",
            "Requests answered, by route template and status",
            metrics.requests.clone(),
        );
        registry.register(
            "esr_http_request_duration_seconds",
            "Time to answer, by route template",
            metrics.request_latency.clone(),
        );
        registry.register(
            "esr_component_call_duration_seconds",
            "Component calls, by group",
            metrics.call_latency.clone(),
        );
        registry.register(
            "esr_component_call_failures",
            "Component calls that trapped or overran their deadline",
            metrics.call_failures.clone(),
        );
        registry.register("esr_rate_limited", "Requests refused with 429, by policy", metrics.rate_limited.clone());
        registry.register(
            "esr_http_requests_abandoned",
            "Requests whose client went away before the answer (logged with status 499), by route template",
            metrics.abandoned.clone(),
        );
        registry.register("esr_shed_requests", "Requests shed with 503 at the concurrency limit", metrics.shed.clone());
        registry.register(
            "esr_http_malformed_requests",
            "Requests refused by the HTTP parser with a bare 400 or 431, by listener and kind",
            metrics.malformed.clone(),
        );
        registry.register(
            "esr_health_checks",
            "Storage and component checks health ran; health requests within a second of one share it",
            metrics.health_checks.clone(),
        );
        registry.register("esr_store_size_bytes", "The store's size on disk", metrics.store_bytes.clone());
        registry.register(
            "esr_component_idle_slots",
            "Component instance slots used before and idle now",
            metrics.idle_slots.clone(),
        );
        registry.register(
            "esr_component_idle_slot_resident_bytes",
            "Memory the idle component slots keep resident, reset again after each one's next call",
            metrics.idle_slot_resident_bytes.clone(),
        );
        registry.register(
            "esr_audit_entries_recorded",
            "Audit trail entries written to the store",
            metrics.audit_recorded.clone(),
        );
        registry.register(
            "esr_audit_entries_dropped",
            "Audit trail entries dropped (the queue was full or the store refused them); 0 in normal operation",
            metrics.audit_dropped.clone(),
        );
        registry.register(
            "esr_webhook_deliveries",
            "Webhook delivery attempts by this host, by outcome",
            metrics.webhook_deliveries.clone(),
        );
        registry.register(
            "esr_webhook_delivery_lag_seconds",
            "From the commit of a delivered batch's newest event to its receiver's 2xx",
            metrics.webhook_lag.clone(),
        );
        registry.register(
            "esr_webhook_subscriptions",
            "Webhook subscriptions of every organization, by state",
            metrics.webhook_subscriptions.clone(),
        );
        Metrics { registry, ..metrics }
    }
}

impl Metrics {
    /// Metrics whose 429 count of each rate-limit policy is there from the
    /// start, at 0, so a dashboard sees every policy before it first refuses.
    pub fn with_rate_limit_policies(policies: &[&'static str]) -> Metrics {
        let metrics = Metrics::default();
        for &policy in policies {
            drop(metrics.rate_limited.get_or_create(&PolicyLabels { policy }));
        }
        metrics
    }

    /// One answered request; `route` is its template (or `unmatched`).
    pub fn request(&self, route: &'static str, status: u16, elapsed: Duration) {
        self.requests.get_or_create(&RequestLabels { route, status }).inc();
        self.request_latency.get_or_create(&RouteLabels { route }).observe(elapsed.as_secs_f64());
    }

    /// Declares every group's count of each kind of call failure at 0, so
    /// a dashboard sees them before the first failure.
    pub fn declare_call_failures(&self, groups: &[&'static str]) {
        for &group in groups {
            for kind in CALL_FAILURE_KINDS {
                drop(self.call_failures.get_or_create(&FailureLabels { group, kind }));
            }
        }
    }

    pub fn component_call(&self, group: &'static str, elapsed: Duration, failure: Option<&'static str>) {
        self.call_latency.get_or_create(&GroupLabels { group }).observe(elapsed.as_secs_f64());
        if let Some(kind) = failure {
            self.call_failures.get_or_create(&FailureLabels { group, kind }).inc();
        }
    }

    pub fn rate_limited(&self, policy: &'static str) {
        self.rate_limited.get_or_create(&PolicyLabels { policy }).inc();
    }

    pub fn abandoned(&self, route: &'static str) {
        self.abandoned.get_or_create(&RouteLabels { route }).inc();
    }

    pub fn malformed(&self, listener: &'static str, kind: &'static str) {
        self.malformed.get_or_create(&MalformedLabels { listener, kind }).inc();
    }

    pub fn shed(&self) {
        self.shed.inc();
    }

    pub fn health_checked(&self) {
        self.health_checks.inc();
    }

    /// The OpenMetrics text ([`CONTENT_TYPE`]); `store_bytes` is the
    /// store's size on disk, `subscriptions` the webhook subscriptions by
    /// state, `idle_slots` the component pool's.
    pub fn render(
        &self,
        store_bytes: u64,
        subscriptions: &[(&'static str, i64)],
        audit: Option<&esr_audit::Recorder>,
        idle_slots: Option<esr_runtime::IdleSlots>,
    ) -> String {
        self.store_bytes.set(store_bytes);
        if let Some(idle) = idle_slots {
            self.idle_slots.set(u64::from(idle.memories));
            self.idle_slot_resident_bytes.set(idle.resident_bytes as u64);
        }
        if let Some(audit) = audit {
            // The recorder keeps the totals; the counters catch up to them.
            let catch_up = |counter: &Counter, total: u64| {
                counter.inc_by(total.saturating_sub(counter.get()));
            };
            catch_up(&self.audit_recorded, audit.recorded_total());
            catch_up(&self.audit_dropped, audit.dropped_total());
        }
        for (state, count) in subscriptions {
            self.webhook_subscriptions.get_or_create(&StateLabels { state }).set(*count);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl esr_webhooks::DeliveryObserver for Metrics {
    fn attempted(&self, outcome: &'static str, lag: Option<Duration>) {
        self.webhook_deliveries.get_or_create(&OutcomeLabels { outcome }).inc();
        if let Some(lag) = lag {
            self.webhook_lag.observe(lag.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_labels_escaped() {
        let metrics = Metrics::with_rate_limit_policies(&["per-key", "per-address"]);
        metrics.request("/v1/{collection}", 200, Duration::from_millis(3));
        metrics.request("/v1/{collection}", 200, Duration::from_millis(30));
        metrics.component_call("en\"d", Duration::from_millis(1), Some("trap"));
        metrics.shed();
        let text = metrics.render(42, &[("active", 2)], None, None);
        for expected in [
            "# TYPE esr_http_requests counter",
            "esr_http_requests_total{route=\"/v1/{collection}\",status=\"200\"} 2",
            "# TYPE esr_http_request_duration_seconds histogram",
            "esr_http_request_duration_seconds_bucket{le=\"0.005\",route=\"/v1/{collection}\"} 1",
            "esr_http_request_duration_seconds_bucket{le=\"0.05\",route=\"/v1/{collection}\"} 2",
            "esr_http_request_duration_seconds_bucket{le=\"+Inf\",route=\"/v1/{collection}\"} 2",
            "esr_http_request_duration_seconds_count{route=\"/v1/{collection}\"} 2",
            "esr_component_call_failures_total{group=\"en\\\"d\",kind=\"trap\"} 1",
            "esr_shed_requests_total 1",
            "esr_rate_limited_total{policy=\"per-address\"} 0",
            "esr_store_size_bytes 42",
            "# EOF",
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
    }
}
