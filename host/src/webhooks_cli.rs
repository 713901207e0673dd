//! `esr serve`'s webhook flags and `esr webhooks …`: subscriptions
//! through a running server's admin listener.

use std::time::Duration;

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::{AdminArgs, admin_client, text};
use esr_webhooks::{DestinationRules, WebhookSettings};

/// How webhooks are delivered (`esr serve`).
#[derive(clap::Args)]
pub struct WebhookArgs {
    /// Seconds a delivery may take in all before it counts as failed.
    #[arg(long, env = "ESR_WEBHOOK_TIMEOUT_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=300))]
    webhook_timeout_secs: u64,
    /// Seconds a delivery may take to connect.
    #[arg(long, env = "ESR_WEBHOOK_CONNECT_TIMEOUT_SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    webhook_connect_timeout_secs: u64,
    /// Hours a batch is retried (with exponential backoff and jitter, up
    /// to an hour apart) before its subscription is `failing`; fractions
    /// allowed.
    #[arg(long, env = "ESR_WEBHOOK_RETRY_HOURS", default_value_t = 24.0)]
    webhook_retry_hours: f64,
    /// Hours a replaced signing secret keeps signing beside the new one.
    #[arg(long, env = "ESR_WEBHOOK_SECRET_OVERLAP_HOURS", default_value_t = 24.0)]
    webhook_secret_overlap_hours: f64,
    /// Allow `http` destinations (else `https` only).
    #[arg(long, env = "ESR_WEBHOOKS_ALLOW_HTTP")]
    webhooks_allow_http: bool,
    /// Allow loopback, private, link-local and other non-public
    /// destinations: for tests and closed networks only.
    #[arg(long, env = "ESR_WEBHOOKS_ALLOW_PRIVATE")]
    webhooks_allow_private: bool,
    /// Seconds a host holds a subscription's delivery unless it renews the
    /// hold (PostgreSQL, several hosts): when a host dies, another takes
    /// its subscriptions over within this time. At least
    /// --webhook-timeout-secs + 5.
    #[arg(long, env = "ESR_WEBHOOK_LEASE_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(2..=3600))]
    webhook_lease_secs: u64,
    /// Deliveries in progress at once on this host.
    #[arg(long, env = "ESR_WEBHOOK_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    webhook_concurrency: u32,
    /// Deliveries in progress at once for one organization on this host.
    #[arg(long, env = "ESR_WEBHOOK_CONCURRENCY_PER_ORGANIZATION", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    webhook_concurrency_per_organization: u32,
}

fn hours(hours: f64, flag: &str) -> anyhow::Result<Duration> {
    if !(hours.is_finite() && hours > 0.0 && hours <= 24.0 * 365.0) {
        anyhow::bail!("--{flag} must be more than 0 and at most a year of hours, not {hours}");
    }
    Ok(Duration::from_secs_f64(hours * 3600.0))
}

impl WebhookArgs {
    pub fn settings(&self) -> anyhow::Result<WebhookSettings> {
        if self.webhook_lease_secs < self.webhook_timeout_secs + 5 {
            anyhow::bail!(
                "--webhook-lease-secs ({}) must be at least 5 more than --webhook-timeout-secs ({}): a host must still \
                 hold a subscription when its delivery ends",
                self.webhook_lease_secs,
                self.webhook_timeout_secs
            );
        }
        Ok(WebhookSettings {
            destinations: DestinationRules {
                allow_http: self.webhooks_allow_http,
                allow_private: self.webhooks_allow_private,
                peers: esr_outbound::Peers::Webhooks,
            },
            connect_timeout: Duration::from_secs(self.webhook_connect_timeout_secs),
            timeout: Duration::from_secs(self.webhook_timeout_secs),
            retry_for: hours(self.webhook_retry_hours, "webhook-retry-hours")?,
            secret_overlap: hours(self.webhook_secret_overlap_hours, "webhook-secret-overlap-hours")?,
            concurrency: self.webhook_concurrency as usize,
            concurrency_per_organization: self.webhook_concurrency_per_organization as usize,
            lease: Duration::from_secs(self.webhook_lease_secs),
            ..WebhookSettings::default()
        })
    }
}

/// What a subscription receives, for `create` and `update`.
#[derive(clap::Args)]
pub struct SubscriptionArgs {
    /// The destination (https unless the server allows http).
    #[arg(long)]
    url: Option<String>,
    /// A collection to receive; repeat for several.
    #[arg(long = "collection", value_parser = clap::builder::PossibleValuesParser::new(esr_store::Collection::NAMES))]
    collections: Vec<String>,
    /// An operation to receive (default: all); repeat for several.
    #[arg(long = "operation", value_parser = clap::builder::PossibleValuesParser::new(esr_webhooks::subscription::OPERATIONS))]
    operations: Vec<String>,
    /// A list filter of one collection, `COLLECTION:QUERY`, e.g.
    /// `vulnerability-findings:severity=critical&kev=true`; repeat for several.
    #[arg(long = "filter")]
    filters: Vec<String>,
    /// What the subscription is for.
    #[arg(long)]
    description: Option<String>,
}

impl SubscriptionArgs {
    fn body(&self) -> anyhow::Result<Map<String, Value>> {
        let mut body = Map::new();
        if let Some(url) = &self.url {
            body.insert("url".into(), json!(url));
        }
        if !self.collections.is_empty() {
            body.insert("collections".into(), json!(self.collections));
        }
        if !self.operations.is_empty() {
            body.insert("operations".into(), json!(self.operations));
        }
        if !self.filters.is_empty() {
            let mut filters = Map::new();
            for filter in &self.filters {
                let Some((collection, query)) = filter.split_once(':') else {
                    anyhow::bail!(
                        "--filter {filter:?}: give COLLECTION:QUERY, e.g. vulnerability-findings:severity=critical"
                    );
                };
                filters.insert(collection.to_owned(), json!(query));
            }
            body.insert("filters".into(), Value::Object(filters));
        }
        if let Some(description) = &self.description {
            body.insert("description".into(), json!(description));
        }
        Ok(body)
    }
}

/// The organization whose subscriptions a command works on.
#[derive(clap::Args)]
pub struct OrganizationArg {
    /// The organization's id.
    #[arg(long)]
    organization: String,
}

/// One subscription of an organization.
#[derive(clap::Args)]
pub struct SubscriptionId {
    /// The organization's id.
    #[arg(long)]
    organization: String,
    /// The subscription's id (`esr webhooks list`).
    id: String,
}

impl SubscriptionId {
    fn path(&self, rest: &str) -> String {
        format!("/admin/v1/organizations/{}/webhooks/{}{rest}", self.organization, self.id)
    }
}

#[derive(Subcommand)]
pub enum WebhooksCommand {
    /// Subscribe a destination to an organization's changes; the signing
    /// secret is printed this once.
    Create {
        #[command(flatten)]
        organization: OrganizationArg,
        #[command(flatten)]
        subscription: SubscriptionArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List an organization's subscriptions with their state.
    List {
        #[command(flatten)]
        organization: OrganizationArg,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// One subscription, as JSON.
    Show {
        #[command(flatten)]
        target: SubscriptionId,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Change a subscription; `--state active` resumes a paused, failing
    /// or disabled one where it stopped.
    Update {
        #[command(flatten)]
        target: SubscriptionId,
        #[command(flatten)]
        subscription: SubscriptionArgs,
        /// `active` (deliver; resumes where it stopped) or `paused`.
        #[arg(long, value_parser = ["active", "paused"])]
        state: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Delete a subscription.
    Delete {
        #[command(flatten)]
        target: SubscriptionId,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Deliver again every event after a sequence of the change feed.
    Replay {
        #[command(flatten)]
        target: SubscriptionId,
        /// The sequence after which events are delivered again (a list's
        /// `sequence` after a re-sync, or an event's).
        #[arg(long = "from")]
        from_sequence: u64,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// A new signing secret (printed this once); the old one keeps signing
    /// for --webhook-secret-overlap-hours.
    RotateSecret {
        #[command(flatten)]
        target: SubscriptionId,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// The last delivery attempts, the newest first.
    Deliveries {
        #[command(flatten)]
        target: SubscriptionId,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

fn line(subscription: &Value) -> String {
    let collections: Vec<&str> =
        subscription["collections"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    format!(
        "{}  {:<8}  {:>10}  {}  {}{}",
        text(&subscription["id"]),
        text(&subscription["state"]),
        subscription["position"],
        text(&subscription["url"]),
        collections.join(","),
        subscription["reason"].as_str().map(|reason| format!("  ({reason})")).unwrap_or_default(),
    )
}

pub fn run(command: WebhooksCommand) -> anyhow::Result<()> {
    let base =
        |organization: &OrganizationArg| format!("/admin/v1/organizations/{}/webhooks", organization.organization);
    match command {
        WebhooksCommand::Create { organization, subscription, admin } => {
            let created =
                admin_client(&admin)?.post_json(&base(&organization), &Value::Object(subscription.body()?))?;
            println!("{}", text(&created["secret"]));
            eprintln!(
                "subscription {} to {}; its signing secret (above) is shown this once, store it now",
                text(&created["id"]),
                text(&created["url"])
            );
        }
        WebhooksCommand::List { organization, admin } => {
            for subscription in
                admin_client(&admin)?.get(&base(&organization))?["data"].as_array().into_iter().flatten()
            {
                println!("{}", line(subscription));
            }
        }
        WebhooksCommand::Show { target, admin } => {
            let found = admin_client(&admin)?.get(&target.path(""))?;
            println!("{}", serde_json::to_string_pretty(&found)?);
        }
        WebhooksCommand::Update { target, subscription, state, admin } => {
            let mut body = subscription.body()?;
            if let Some(state) = state {
                body.insert("state".into(), json!(state));
            }
            let updated = admin_client(&admin)?.patch_json(&target.path(""), &Value::Object(body))?;
            println!("{}", line(&updated));
        }
        WebhooksCommand::Delete { target, admin } => {
            admin_client(&admin)?.delete(&target.path(""))?;
            println!("deleted {}", target.id);
        }
        WebhooksCommand::Replay { target, from_sequence, admin } => {
            let body = json!({"from_sequence": from_sequence});
            let replayed = admin_client(&admin)?.post_json(&target.path("/replay"), &body)?;
            println!("{}", line(&replayed));
        }
        WebhooksCommand::RotateSecret { target, admin } => {
            let rotated = admin_client(&admin)?.post_json(&target.path("/rotate-secret"), &json!({}))?;
            println!("{}", text(&rotated["secret"]));
            eprintln!(
                "new signing secret for {} (shown this once); the previous one signs too until {}",
                target.id,
                text(&rotated["previous_secret_expires_at"])
            );
        }
        WebhooksCommand::Deliveries { target, admin } => {
            let found = admin_client(&admin)?.get(&target.path("/deliveries"))?;
            for attempt in found["data"].as_array().into_iter().flatten() {
                println!(
                    "{}  {}  {}..{}  {:>3} events  {}  {} ms  {}",
                    text(&attempt["at"]),
                    text(&attempt["webhook_id"]),
                    attempt["first_sequence"],
                    attempt["last_sequence"],
                    attempt["events"],
                    attempt["status"],
                    attempt["latency_ms"],
                    text(&attempt["error"]),
                );
            }
        }
    }
    Ok(())
}
