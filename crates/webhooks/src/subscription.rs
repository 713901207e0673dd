//! A subscription as stored, as the admin API shows it, and the checks on
//! what an operator asks for. A subscription is one document (kind
//! [`SUBSCRIPTIONS`]) holding its settings, its secrets, its position in
//! its organization's feed and its delivery state; every change to it is a
//! compare-and-swap, so an operator's change and a host's delivery never
//! overwrite each other.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use esr_contract::time::Timestamp;
use esr_outbound::DestinationRules;
use esr_store::{ChangeOperation, Collection, Document, Store, StoreError};

/// The document kind of subscriptions.
pub const SUBSCRIPTIONS: &str = "webhook";
/// The document kind of each subscription's batch in flight.
pub const BATCHES: &str = "webhook-batch";
/// The document kind of each subscription's last delivery attempts.
pub const ATTEMPTS: &str = "webhook-attempts";
/// Every kind of document webhooks keep (what a copy of a deployment copies).
pub const DOCUMENT_KINDS: [&str; 3] = [SUBSCRIPTIONS, BATCHES, ATTEMPTS];

/// The longest description kept.
const MAX_DESCRIPTION_CHARS: usize = 500;
/// The longest filter of one collection.
pub const MAX_FILTER_CHARS: usize = 2048;
/// Subscriptions one organization may hold.
pub const MAX_SUBSCRIPTIONS_PER_ORGANIZATION: usize = 100;

/// Where a subscription stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionState {
    /// Delivering (or waiting to retry a failed batch).
    Active,
    /// Stopped by an operator; resumes where it stopped.
    Paused,
    /// Retried for `--webhook-retry-hours` without success, or its feed
    /// position is gone; stopped until an operator resumes or replays it.
    Failing,
    /// The receiver answered `410 Gone`; stopped until an operator resumes it.
    Disabled,
}

impl SubscriptionState {
    pub const ALL: [SubscriptionState; 4] = [Self::Active, Self::Paused, Self::Failing, Self::Disabled];

    pub fn name(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Paused => "paused",
            Self::Failing => "failing",
            Self::Disabled => "disabled",
        }
    }
}

/// A signing secret, and when it stops being used (set when a newer one
/// replaced it; the two sign every delivery until then).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Secret {
    pub value: String,
    pub created_at: i64,
    #[serde(default)]
    pub expires_at: Option<i64>,
}

/// The host holding a subscription's delivery, until when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lease {
    pub host: String,
    pub until: i64,
}

/// The last delivery a receiver acknowledged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LastDelivery {
    pub at: i64,
    pub webhook_id: String,
    pub status: u16,
    pub last_sequence: u64,
}

/// The last failure, and the retries of the batch in flight.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LastError {
    pub at: i64,
    pub error: String,
}

/// A subscription as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Subscription {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub url: String,
    pub collections: Vec<Collection>,
    pub operations: Vec<String>,
    /// A list filter per collection, as the list endpoint takes it.
    #[serde(default)]
    pub filters: BTreeMap<Collection, String>,
    pub format: String,
    #[serde(default)]
    pub description: String,
    pub state: SubscriptionState,
    /// Why it is failing or disabled.
    #[serde(default)]
    pub reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The feed's sequence through which events were delivered (or
    /// passed over as not wanted).
    pub position: u64,
    pub secrets: Vec<Secret>,
    #[serde(default)]
    pub lease: Option<Lease>,
    #[serde(default)]
    pub last_delivery: Option<LastDelivery>,
    #[serde(default)]
    pub last_error: Option<LastError>,
    /// The first failed attempt of the batch in flight.
    #[serde(default)]
    pub failing_since: Option<i64>,
    /// Failed attempts of the batch in flight.
    #[serde(default)]
    pub failed_attempts: u32,
    /// No attempt before this time (a retry's backoff).
    #[serde(default)]
    pub next_attempt_at: Option<i64>,
    /// Moves with every change of settings, replay and resumption: a
    /// batch built under an earlier one is never sent or acknowledged.
    #[serde(default)]
    pub generation: u64,
}

/// A stored subscription with the version it was read at.
#[derive(Debug, Clone)]
pub struct Stored {
    pub subscription: Subscription,
    pub version: u64,
}

fn time_text(nanos: i64) -> String {
    Timestamp(nanos).format()
}

impl Subscription {
    /// Whether it receives this collection's events of this operation.
    pub fn wants(&self, collection: Collection, operation: ChangeOperation) -> bool {
        self.collections.contains(&collection) && self.operations.iter().any(|wanted| wanted == operation.as_str())
    }

    /// The secrets that sign a delivery at `now`, the newest first.
    pub fn signing_secrets(&self, now: i64) -> impl Iterator<Item = &str> {
        self.secrets.iter().filter(move |secret| secret.expires_at.is_none_or(|at| at > now)).map(|s| s.value.as_str())
    }

    /// What the admin API shows: everything but the secrets.
    pub fn view(&self) -> Value {
        let rotation = self.secrets.iter().filter_map(|secret| secret.expires_at).max();
        json!({
            "id": self.id,
            "organization_id": self.organization_id,
            "url": self.url,
            "collections": self.collections,
            "operations": self.operations,
            "filters": self.filters,
            "format": self.format,
            "description": self.description,
            "state": self.state.name(),
            "reason": self.reason,
            "position": self.position,
            "created_at": time_text(self.created_at),
            "updated_at": time_text(self.updated_at),
            "last_delivery": self.last_delivery.as_ref().map(|last| json!({
                "at": time_text(last.at),
                "webhook_id": last.webhook_id,
                "status": last.status,
                "last_sequence": last.last_sequence,
            })),
            "last_error": self.last_error.as_ref().map(|last| json!({"at": time_text(last.at), "error": last.error})),
            "failed_attempts": self.failed_attempts,
            "next_attempt_at": self.next_attempt_at.map(time_text),
            "previous_secret_expires_at": rotation.map(time_text),
        })
    }
}

/// What an operator asks for, checked: a problem per member otherwise.
#[derive(Debug, Default)]
pub struct Settings {
    pub url: Option<String>,
    pub collections: Option<Vec<Collection>>,
    pub operations: Option<Vec<String>>,
    pub filters: Option<BTreeMap<Collection, String>>,
    pub format: Option<String>,
    pub description: Option<String>,
    pub state: Option<SubscriptionState>,
}

/// The members a creation takes, and those an update takes.
pub const CREATE_MEMBERS: [&str; 6] = ["url", "collections", "operations", "filters", "format", "description"];
pub const UPDATE_MEMBERS: [&str; 6] = ["url", "collections", "operations", "filters", "description", "state"];

/// The operations a subscription may want.
pub const OPERATIONS: [&str; 3] = ["created", "updated", "deleted"];

impl Settings {
    /// Reads and checks the members of `object` (unknown members are the
    /// caller's to refuse); `problems` gets one entry per bad member.
    pub fn parse(
        object: &Map<String, Value>,
        rules: &DestinationRules,
        problems: &mut Vec<(String, String)>,
    ) -> Settings {
        let mut settings = Settings::default();
        if let Some(url) = object.get("url") {
            match url.as_str().map(|url| rules.check_url(url)) {
                Some(Ok(url)) => settings.url = Some(url.to_string()),
                Some(Err(why)) => problems.push(("url".into(), why)),
                None => problems.push(("url".into(), "must be a string".into())),
            }
        }
        if let Some(collections) = object.get("collections") {
            match names_of(collections) {
                Some(names) if !names.is_empty() => {
                    let mut parsed = Vec::new();
                    for name in names {
                        match Collection::named(name) {
                            Some(collection) if !parsed.contains(&collection) => parsed.push(collection),
                            Some(_) => {}
                            None => problems.push((
                                "collections".into(),
                                format!("no collection {name:?}; give one or more of {}", Collection::names()),
                            )),
                        }
                    }
                    settings.collections = Some(parsed);
                }
                _ => {
                    problems.push(("collections".into(), format!("an array of one or more of {}", Collection::names())))
                }
            }
        }
        if let Some(operations) = object.get("operations") {
            match names_of(operations) {
                Some(names) if !names.is_empty() && names.iter().all(|name| OPERATIONS.contains(name)) => {
                    let mut parsed: Vec<String> = Vec::new();
                    for name in OPERATIONS {
                        if names.contains(&name) {
                            parsed.push(name.to_owned());
                        }
                    }
                    settings.operations = Some(parsed);
                }
                _ => problems
                    .push(("operations".into(), format!("an array of one or more of {}", OPERATIONS.join(", ")))),
            }
        }
        if let Some(filters) = object.get("filters") {
            match filters.as_object() {
                Some(filters) => {
                    let mut parsed = BTreeMap::new();
                    for (name, query) in filters {
                        let field = format!("filters.{name}");
                        match (Collection::named(name), query.as_str()) {
                            (None, _) => problems.push((field, format!("no collection {name:?}"))),
                            (Some(_), None) => {
                                problems.push((field, "a query string, e.g. severity=critical&kev=true".into()))
                            }
                            (Some(_), Some(query)) if query.chars().count() > MAX_FILTER_CHARS => {
                                problems.push((field, format!("longer than {MAX_FILTER_CHARS} characters")))
                            }
                            (Some(collection), Some(query)) => {
                                let query = query.trim_start_matches('?');
                                if !query.is_empty() {
                                    parsed.insert(collection, query.to_owned());
                                }
                            }
                        }
                    }
                    settings.filters = Some(parsed);
                }
                None => problems.push((
                    "filters".into(),
                    "an object of list filters by collection, e.g. {\"vulnerability-findings\": \"severity=critical\"}"
                        .into(),
                )),
            }
        }
        if let Some(format) = object.get("format") {
            match format.as_str() {
                Some(format) if esr_runtime::feed::FORMATS.contains(&format) => settings.format = Some(format.into()),
                _ => problems.push((
                    "format".into(),
                    "esr (each event exactly as /v1/changes shows it) or ocsf (findings as OCSF Vulnerability Findings)"
                        .into(),
                )),
            }
        }
        if let Some(description) = object.get("description") {
            match description.as_str() {
                Some(text) if text.chars().count() <= MAX_DESCRIPTION_CHARS => {
                    settings.description = Some(text.to_owned())
                }
                _ => problems
                    .push(("description".into(), format!("a string of at most {MAX_DESCRIPTION_CHARS} characters"))),
            }
        }
        if let Some(state) = object.get("state") {
            match state.as_str() {
                Some("active") => settings.state = Some(SubscriptionState::Active),
                Some("paused") => settings.state = Some(SubscriptionState::Paused),
                _ => problems.push(("state".into(), "active or paused".into())),
            }
        }
        settings
    }

    /// The filters' collections must be among those wanted.
    pub fn check_filters(
        collections: &[Collection],
        filters: &BTreeMap<Collection, String>,
        problems: &mut Vec<(String, String)>,
    ) {
        for collection in filters.keys() {
            if !collections.contains(collection) {
                problems.push((
                    format!("filters.{collection}"),
                    "a filter of a collection the subscription does not receive".into(),
                ));
            }
        }
    }
}

fn names_of(value: &Value) -> Option<Vec<&str>> {
    value.as_array()?.iter().map(Value::as_str).collect()
}

/// A subscription's document, parsed.
pub fn parse(document: &Document) -> Result<Stored, StoreError> {
    let subscription = serde_json::from_slice(&document.body)
        .map_err(|error| StoreError::Corrupt(format!("webhook subscription {}: {error}", document.id)))?;
    Ok(Stored { subscription, version: document.version })
}

/// The subscription `id`, if there is one.
pub fn load(store: &dyn Store, id: Uuid) -> Result<Option<Stored>, StoreError> {
    store.document(SUBSCRIPTIONS, &id.to_string())?.as_ref().map(parse).transpose()
}

/// Every subscription, or an organization's.
pub fn all(store: &dyn Store, organization: Option<Uuid>) -> Result<Vec<Subscription>, StoreError> {
    let mut found = Vec::new();
    for document in store.documents(SUBSCRIPTIONS)? {
        let stored = parse(&document)?;
        if organization.is_none_or(|organization| stored.subscription.organization_id == organization) {
            found.push(stored.subscription);
        }
    }
    Ok(found)
}

/// Stores a new subscription.
pub fn insert(store: &dyn Store, subscription: &Subscription) -> Result<(), StoreError> {
    let body = serde_json::to_vec(subscription).map_err(|error| StoreError::Corrupt(error.to_string()))?;
    match store.swap_document(SUBSCRIPTIONS, &subscription.id.to_string(), None, &body)? {
        Some(_) => Ok(()),
        None => Err(StoreError::Corrupt(format!("webhook subscription {} exists already", subscription.id))),
    }
}

/// Applies `change` to the stored subscription until it lands (another
/// writer's change in between is read and `change` applied again). `change`
/// returns `false` to leave it as it is. `None` when there is no such
/// subscription; else the subscription as it stands, and whether `change`
/// was written.
pub fn modify(
    store: &dyn Store,
    id: Uuid,
    mut change: impl FnMut(&mut Subscription) -> bool,
) -> Result<Option<(Subscription, bool)>, StoreError> {
    loop {
        let Some(Stored { mut subscription, version }) = load(store, id)? else { return Ok(None) };
        if !change(&mut subscription) {
            return Ok(Some((subscription, false)));
        }
        let body = serde_json::to_vec(&subscription).map_err(|error| StoreError::Corrupt(error.to_string()))?;
        if store.swap_document(SUBSCRIPTIONS, &id.to_string(), Some(version), &body)?.is_some() {
            return Ok(Some((subscription, true)));
        }
    }
}

/// Removes a subscription and what its delivery kept; whether it was there.
pub fn remove(store: &dyn Store, id: Uuid) -> Result<bool, StoreError> {
    let id = id.to_string();
    let removed = store.delete_document(SUBSCRIPTIONS, &id)?;
    store.delete_document(BATCHES, &id)?;
    store.delete_document(ATTEMPTS, &id)?;
    Ok(removed)
}
