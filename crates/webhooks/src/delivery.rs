//! Delivering subscriptions: the feed, in order, at least once.
//!
//! Every host runs a [`Dispatcher`]. Each round it reads the
//! subscriptions and, for each active one whose organization's feed has
//! moved past its position, takes the subscription's lease (a host and an
//! expiry in the subscription's document, written by compare-and-swap),
//! so one host at a time delivers it. The host then builds the next batch
//! from the feed (events after the position, records shaped by their
//! groups' components, the subscription's operations and filters
//! applied), stores it as the batch in flight, and sends it. Only a `2xx`
//! moves the position past it; a failure leaves the batch to be sent
//! again, byte for byte with the same `webhook-id`, after a backoff. A
//! host that dies mid-delivery leaves the lease to expire and the batch
//! in flight to whichever host takes the lease next.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};
use uuid::Uuid;

use crate::signing;
use crate::subscription::{self, ATTEMPTS, BATCHES, LastDelivery, LastError, Lease, Subscription, SubscriptionState};
use esr_outbound::DestinationRules;
use esr_runtime::feed::{self, FeedPage};
use esr_runtime::{CallError, ComponentRegistry, ComponentSet, Tenant};
use esr_store::{ChangeOperation, Collection, Store, StoreError};

/// Events per delivery at most.
pub const MAX_BATCH_EVENTS: usize = 100;
/// Bytes of a delivery's body at most (one larger event goes alone).
pub const MAX_BATCH_BYTES: usize = 256 << 10;
/// Bytes of a receiver's answer read at most.
pub const MAX_ANSWER_BYTES: usize = 64 << 10;
/// Delivery attempts kept per subscription.
pub const ATTEMPTS_KEPT: usize = 100;
/// The longest wait between two attempts of one batch.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Batches one delivery task sends before it gives its places back.
const BATCHES_PER_TURN: usize = 10;
/// The first retry waits between half of this and this.
const FIRST_BACKOFF: Duration = Duration::from_secs(2);

/// How deliveries are made (the `--webhook…` flags).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub destinations: DestinationRules,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    /// How long a batch is retried before the subscription is `failing`.
    pub retry_for: Duration,
    /// How long a replaced secret keeps signing.
    pub secret_overlap: Duration,
    /// Deliveries in progress at most, overall and per organization.
    pub concurrency: usize,
    pub concurrency_per_organization: usize,
    /// How often the subscriptions are looked at.
    pub poll_every: Duration,
    /// How long a host's hold on a subscription lasts unless renewed.
    pub lease: Duration,
    /// Whether this host is the only one the store can have (sled): a
    /// lease left by an earlier process of it is void.
    pub single_host: bool,
}

impl Default for WebhookSettings {
    fn default() -> WebhookSettings {
        WebhookSettings {
            destinations: DestinationRules::default(),
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(15),
            retry_for: Duration::from_secs(24 * 3600),
            secret_overlap: Duration::from_secs(24 * 3600),
            concurrency: 32,
            concurrency_per_organization: 4,
            poll_every: Duration::from_millis(200),
            lease: Duration::from_secs(30),
            single_host: false,
        }
    }
}

/// Where delivery outcomes are counted (the metrics).
pub trait DeliveryObserver: Send + Sync {
    /// One attempt's outcome ([`OUTCOMES`]) and, for a delivered batch, how
    /// long its newest event waited since its commit.
    fn attempted(&self, outcome: &'static str, lag: Option<Duration>);
}

/// How an attempt can end, as the metrics label it.
pub const OUTCOMES: [&str; 7] =
    ["delivered", "http_error", "gone", "timeout", "connection_error", "refused_destination", "preparation_error"];

/// A batch as stored while in flight: sent again as it is until a `2xx`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Batch {
    webhook_id: String,
    /// The subscription's generation it was built under: a change of
    /// settings, a replay or a resumption makes it stale.
    #[serde(default)]
    generation: u64,
    /// The position it follows: it is the subscription's next only while
    /// the subscription's position is still this.
    after: u64,
    first_sequence: u64,
    /// Where the position moves once it is acknowledged.
    last_sequence: u64,
    events: usize,
    /// The newest event's commit time (Unix nanoseconds), for the lag.
    newest_change: i64,
    body: String,
}

/// One delivery attempt, as `GET …/deliveries` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub at: String,
    pub webhook_id: String,
    pub first_sequence: u64,
    pub last_sequence: u64,
    pub events: usize,
    pub status: Option<u16>,
    pub latency_ms: u64,
    pub error: Option<String>,
    pub host: String,
}

/// What comes next for a subscription.
enum Next {
    /// Nothing after its position.
    Nothing,
    /// Events were read, none wanted: the position moves to here.
    PassOver(u64),
    Send(Batch),
    /// The feed no longer holds the position.
    Gone {
        pruned_through: u64,
    },
}

/// How an attempt ended.
enum Answer {
    Status(u16),
    Failed { outcome: &'static str, error: String },
}

/// Delivers every host's share of the subscriptions.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    plugins: Arc<ComponentRegistry>,
    settings: WebhookSettings,
    /// This host's name (the attempt log shows it).
    host: String,
    /// What this process's leases carry: the host's name and a random
    /// part, so that two processes never take each other's for their own.
    holder: String,
    /// Where the next round starts in the subscriptions, so that those
    /// late in the order get their turn when deliveries are at their cap.
    next_start: std::sync::atomic::AtomicUsize,
    /// The public API's base URL (the records' links).
    base_url: String,
    client: reqwest::Client,
    overall: Arc<Semaphore>,
    per_organization: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
    /// Subscriptions this host is delivering now.
    running: Mutex<HashSet<Uuid>>,
    observer: Arc<dyn DeliveryObserver>,
    wake: Notify,
    /// The store's connections for host jobs (PostgreSQL), if bounded.
    store_permits: Option<Arc<Semaphore>>,
    /// When a failure to deliver was last logged: while the database is
    /// down every round fails, and one line per [`WARN_EVERY`] says so.
    last_warning: Mutex<Option<std::time::Instant>>,
}

/// The least time between two warnings of failed rounds or deliveries.
const WARN_EVERY: Duration = Duration::from_secs(30);

fn now() -> i64 {
    esr_system::clock::unix_now_nanos()
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// A failure of the store or of a component while preparing a delivery.
fn call_failure(error: CallError) -> StoreError {
    match error {
        CallError::Unavailable(why) => StoreError::Unavailable(why),
        other => StoreError::Backend(format!("{other:?}")),
    }
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        plugins: Arc<ComponentRegistry>,
        settings: WebhookSettings,
        host: String,
        base_url: String,
        observer: Arc<dyn DeliveryObserver>,
    ) -> reqwest::Result<Arc<Dispatcher>> {
        let client = esr_outbound::client(
            concat!("esr-webhooks/", env!("CARGO_PKG_VERSION")),
            settings.destinations,
            settings.connect_timeout,
            settings.timeout,
        )?;
        let store_permits = store.background_calls().map(|calls| Arc::new(Semaphore::new(calls.max(1))));
        Ok(Arc::new(Dispatcher {
            last_warning: Mutex::default(),
            store_permits,
            store,
            plugins,
            overall: Arc::new(Semaphore::new(settings.concurrency.max(1))),
            settings,
            holder: format!("{host}/{}", Uuid::new_v4().simple()),
            host,
            next_start: std::sync::atomic::AtomicUsize::new(0),
            base_url,
            client,
            per_organization: Mutex::default(),
            running: Mutex::default(),
            observer,
            wake: Notify::new(),
        }))
    }

    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// Looks at the subscriptions at once (after an operator's change).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Delivers until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        loop {
            if let Err(error) = self.round().await
                && self.may_warn()
            {
                tracing::warn!(error = %error, "webhook deliveries could not read the subscriptions; trying again");
            }
            tokio::select! {
                () = tokio::time::sleep(self.settings.poll_every) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// Starts a delivery for each subscription that has something to
    /// deliver and room to do it in.
    async fn round(self: &Arc<Self>) -> Result<(), StoreError> {
        let store = self.store.clone();
        let mut subscriptions = self.blocking(move || subscription::all(store.as_ref(), None)).await?;
        if !subscriptions.is_empty() {
            let start = self.next_start.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % subscriptions.len();
            subscriptions.rotate_left(start);
        }
        let at = now();
        let mut latest: HashMap<Uuid, u64> = HashMap::new();
        for subscription in subscriptions {
            let due = subscription.state == SubscriptionState::Active
                && subscription.next_attempt_at.is_none_or(|next| next <= at)
                && subscription.lease.as_ref().is_none_or(|lease| self.may_take(lease, at));
            if !due || self.running.lock().unwrap_or_else(PoisonError::into_inner).contains(&subscription.id) {
                continue;
            }
            let organization = subscription.organization_id;
            let standing = match latest.get(&organization) {
                Some(latest) => *latest,
                None => {
                    let store = self.store.clone();
                    let read = self.blocking(move || store.change_log(organization)).await?.latest;
                    latest.insert(organization, read);
                    read
                }
            };
            if standing <= subscription.position {
                continue;
            }
            let Ok(overall) = self.overall.clone().try_acquire_owned() else { break };
            let share = self
                .per_organization
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(organization)
                .or_insert_with(|| Arc::new(Semaphore::new(self.settings.concurrency_per_organization.max(1))))
                .clone();
            let Ok(share) = share.try_acquire_owned() else { continue };
            self.running.lock().unwrap_or_else(PoisonError::into_inner).insert(subscription.id);
            let dispatcher = self.clone();
            tokio::spawn(async move {
                let id = subscription.id;
                let more = dispatcher.deliver(id).await;
                dispatcher.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
                drop((overall, share));
                // Its turn ended with batches waiting: the next round need
                // not wait for the poll.
                if more {
                    dispatcher.wake();
                }
            });
        }
        Ok(())
    }

    /// Delivers up to [`BATCHES_PER_TURN`] of one subscription's batches
    /// while there are any and its receiver takes them, then gives its
    /// places back; whether more may be waiting.
    async fn deliver(self: &Arc<Self>, id: Uuid) -> bool {
        let mut more = false;
        for turn in 1..=BATCHES_PER_TURN {
            match self.step(id).await {
                Ok(true) if turn == BATCHES_PER_TURN => more = true,
                Ok(true) => continue,
                Ok(false) => break,
                Err(error) => {
                    if self.may_warn() {
                        tracing::warn!(subscription = %id, error = %error, "a webhook delivery stopped; it is tried again");
                    }
                    break;
                }
            }
        }
        let (store, holder) = (self.store.clone(), self.holder.clone());
        let released = self
            .blocking(move || {
                let found = subscription::modify(store.as_ref(), id, |subscription| {
                    let ours = subscription.lease.as_ref().is_some_and(|lease| lease.host == holder);
                    if ours {
                        subscription.lease = None;
                    }
                    ours
                })?;
                // Deleted meanwhile: what this delivery wrote goes too.
                if found.is_none() {
                    subscription::remove(store.as_ref(), id)?;
                }
                Ok(())
            })
            .await;
        if let Err(error) = released {
            tracing::warn!(subscription = %id, error = %error, "a webhook lease was not released; it expires");
        }
        more
    }

    /// One batch: claimed, built or found, sent, and its outcome stored.
    /// `true` when another may follow at once.
    async fn step(self: &Arc<Self>, id: Uuid) -> Result<bool, StoreError> {
        let Some(subscription) = self.claim(id).await? else { return Ok(false) };
        let this = self.clone();
        let prepared = subscription.clone();
        let next = match self.blocking(move || this.next_batch(&prepared)).await {
            Ok(next) => next,
            Err(error) => {
                // A batch that cannot be made (a component's failure) is a
                // failed attempt like any other: backed off, and shown.
                self.failed(&subscription, subscription.position, "preparation_error", format!("{error}")).await?;
                return Ok(false);
            }
        };
        let (after, generation) = (subscription.position, subscription.generation);
        let batch = match next {
            Next::Nothing => return Ok(false),
            Next::PassOver(through) => {
                let holder = self.holder.clone();
                let single = self.settings.single_host;
                let moved = self
                    .update(id, move |subscription| {
                        let moves = holds(subscription, &holder, single, after, generation);
                        if moves {
                            subscription.position = through;
                        }
                        moves
                    })
                    .await?;
                return Ok(moved);
            }
            Next::Gone { pruned_through } => {
                let reason = format!(
                    "the change feed no longer holds position {after} (deletions are kept only after sequence \
                     {pruned_through}, --change-retention-days): re-sync by listing the collections, then replay \
                     from the list's sequence"
                );
                let (holder, single) = (self.holder.clone(), self.settings.single_host);
                self.update(id, move |subscription| {
                    if !holds(subscription, &holder, single, after, generation) {
                        return false;
                    }
                    subscription.state = SubscriptionState::Failing;
                    subscription.reason = Some(reason.clone());
                    subscription.lease = None;
                    true
                })
                .await?;
                return Ok(false);
            }
            Next::Send(batch) => batch,
        };
        // The hold must outlast the request: renewed now, or given up.
        if !self.renew(id, after, generation).await? {
            return Ok(false);
        }
        let started = std::time::Instant::now();
        let answer = self.send(&subscription, &batch).await;
        let latency = started.elapsed();
        let attempt = Attempt {
            at: esr_system::clock::now_rfc3339(),
            webhook_id: batch.webhook_id.clone(),
            first_sequence: batch.first_sequence,
            last_sequence: batch.last_sequence,
            events: batch.events,
            status: match &answer {
                Answer::Status(status) => Some(*status),
                Answer::Failed { .. } => None,
            },
            latency_ms: u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
            error: match &answer {
                Answer::Status(status) if !(200..300).contains(status) => {
                    Some(format!("the receiver answered {status}"))
                }
                Answer::Status(_) => None,
                Answer::Failed { error, .. } => Some(error.clone()),
            },
            host: self.host.clone(),
        };
        let store = self.store.clone();
        self.blocking(move || record_attempt(store.as_ref(), id, attempt)).await?;
        let at = now();
        let (holder, single) = (self.holder.clone(), self.settings.single_host);
        match answer {
            Answer::Status(status) if (200..300).contains(&status) => {
                let lag = Duration::from_nanos(u64::try_from(at.saturating_sub(batch.newest_change)).unwrap_or(0));
                self.observer.attempted("delivered", Some(lag));
                let delivered =
                    LastDelivery { at, webhook_id: batch.webhook_id, status, last_sequence: batch.last_sequence };
                // Acknowledged: the position moves past the batch unless a
                // replay or a change of settings came meanwhile (then the
                // batch was stale anyway, and the next is built afresh).
                let moved = self
                    .update(id, move |subscription| {
                        if subscription.position != after || subscription.generation != generation {
                            return false;
                        }
                        subscription.position = delivered.last_sequence;
                        subscription.last_delivery = Some(delivered.clone());
                        subscription.failing_since = None;
                        subscription.failed_attempts = 0;
                        subscription.next_attempt_at = None;
                        true
                    })
                    .await?;
                // Only a host still holding the lease goes straight on.
                Ok(moved && self.claim(id).await?.is_some())
            }
            Answer::Status(410) => {
                self.observer.attempted("gone", None);
                self.update(id, move |subscription| {
                    if !holds(subscription, &holder, single, after, generation) {
                        return false;
                    }
                    subscription.state = SubscriptionState::Disabled;
                    subscription.reason = Some("the receiver answered 410 Gone".into());
                    subscription.last_error = Some(LastError { at, error: "the receiver answered 410 Gone".into() });
                    subscription.lease = None;
                    true
                })
                .await?;
                Ok(false)
            }
            answer => {
                let (outcome, error) = match answer {
                    Answer::Status(status) => ("http_error", format!("the receiver answered {status}")),
                    Answer::Failed { outcome, error } => (outcome, error),
                };
                self.failed(&subscription, after, outcome, error).await?;
                Ok(false)
            }
        }
    }

    /// Counts a failed attempt of the batch after `after`: backed off, or
    /// `failing` once the retry window has passed; the lease is given up.
    async fn failed(
        self: &Arc<Self>,
        subscription: &Subscription,
        after: u64,
        outcome: &'static str,
        error: String,
    ) -> Result<(), StoreError> {
        self.observer.attempted(outcome, None);
        let retry_for = nanos(self.settings.retry_for);
        let (holder, single, generation) = (self.holder.clone(), self.settings.single_host, subscription.generation);
        let at = now();
        self.update(subscription.id, move |subscription| {
            if !holds(subscription, &holder, single, after, generation) {
                return false;
            }
            let since = *subscription.failing_since.get_or_insert(at);
            subscription.failed_attempts = subscription.failed_attempts.saturating_add(1);
            subscription.last_error = Some(LastError { at, error: error.clone() });
            subscription.lease = None;
            if at.saturating_sub(since) >= retry_for {
                subscription.state = SubscriptionState::Failing;
                subscription.reason = Some(format!(
                    "no delivery succeeded for {}; the last attempt: {error}; resume it with state active once the \
                     receiver is back",
                    describe(Duration::from_nanos(retry_for as u64))
                ));
                subscription.next_attempt_at = None;
            } else {
                subscription.next_attempt_at = Some(at + nanos(backoff(subscription.failed_attempts)));
            }
            true
        })
        .await
        .map(|_| ())
    }

    /// Makes sure this host's lease outlasts a whole request, if it still
    /// holds it at this position and generation (renewed only when it
    /// would not: a read, not a write, for most batches); whether it does.
    async fn renew(self: &Arc<Self>, id: Uuid, after: u64, generation: u64) -> Result<bool, StoreError> {
        let (store, holder, single) = (self.store.clone(), self.holder.clone(), self.settings.single_host);
        let lease = nanos(self.settings.lease);
        let needed = nanos(self.settings.timeout + Duration::from_secs(2));
        self.blocking(move || {
            let mut held = false;
            subscription::modify(store.as_ref(), id, |subscription| {
                held = holds(subscription, &holder, single, after, generation);
                let at = now();
                let lasts = subscription.lease.as_ref().is_some_and(|lease| lease.until - at > needed);
                if !held || lasts {
                    return false;
                }
                subscription.lease = Some(Lease { host: holder.clone(), until: at + lease });
                true
            })?;
            Ok(held)
        })
        .await
    }

    /// Takes (or renews) this host's lease on the subscription if it is
    /// active, due and not held by another host; the subscription as
    /// claimed, or `None`.
    async fn claim(self: &Arc<Self>, id: Uuid) -> Result<Option<Subscription>, StoreError> {
        let (store, host, lease) = (self.store.clone(), self.holder.clone(), nanos(self.settings.lease));
        // A hold is renewed unless it outlasts a whole delivery with room
        // to spare, so that it never ends while a request is in flight.
        let needed = (lease / 2).max(nanos(self.settings.timeout + Duration::from_secs(2)));
        let this = self.clone();
        self.blocking(move || {
            let at = now();
            let mut claimed = false;
            let found = subscription::modify(store.as_ref(), id, |subscription| {
                claimed = false;
                let due = subscription.state == SubscriptionState::Active
                    && subscription.next_attempt_at.is_none_or(|next| next <= at);
                let held = subscription.lease.as_ref();
                let free = held.is_none_or(|held| this.may_take(held, at));
                if !due || !free {
                    return false;
                }
                claimed = true;
                if held.is_some_and(|held| held.host == host && held.until - at > needed) {
                    return false;
                }
                subscription.lease = Some(Lease { host: host.clone(), until: at + lease });
                true
            })?;
            Ok(found.filter(|_| claimed).map(|(subscription, _)| subscription))
        })
        .await
    }

    /// Whether a warning may be logged now (at most one per [`WARN_EVERY`]).
    fn may_warn(&self) -> bool {
        let mut last = self.last_warning.lock().unwrap_or_else(PoisonError::into_inner);
        let now = std::time::Instant::now();
        let due = last.is_none_or(|at| now.duration_since(at) >= WARN_EVERY);
        if due {
            *last = Some(now);
        }
        due
    }

    /// Whether this host may deliver a subscription another lease holds.
    fn may_take(&self, lease: &Lease, at: i64) -> bool {
        lease.host == self.holder || lease.until <= at || self.settings.single_host
    }

    /// Applies `change` to the stored subscription; whether it wrote.
    async fn update(
        self: &Arc<Self>,
        id: Uuid,
        change: impl FnMut(&mut Subscription) -> bool + Send + 'static,
    ) -> Result<bool, StoreError> {
        let store = self.store.clone();
        self.blocking(move || {
            subscription::modify(store.as_ref(), id, change).map(|found| found.is_some_and(|(_, written)| written))
        })
        .await
    }

    /// The batch in flight if it still follows the position, else the next
    /// one from the feed (stored as in flight before it is sent).
    fn next_batch(&self, subscription: &Subscription) -> Result<Next, StoreError> {
        let id = subscription.id.to_string();
        let in_flight = self.store.document(BATCHES, &id)?;
        if let Some(document) = &in_flight
            && let Ok(batch) = serde_json::from_slice::<Batch>(&document.body)
            && batch.after == subscription.position
            && batch.generation == subscription.generation
        {
            return Ok(Next::Send(batch));
        }
        let next = self.build_batch(subscription)?;
        if let Next::Send(batch) = &next {
            let body = serde_json::to_vec(batch).map_err(|error| StoreError::Corrupt(error.to_string()))?;
            let version = in_flight.map(|document| document.version);
            if self.store.swap_document(BATCHES, &id, version, &body)?.is_none() {
                return Err(StoreError::Backend("another host stored this subscription's batch meanwhile".into()));
            }
        }
        Ok(next)
    }

    /// Reads the feed after the position and makes the next batch of the
    /// events the subscription wants.
    fn build_batch(&self, subscription: &Subscription) -> Result<Next, StoreError> {
        let Some(tenant) = crate::filters::tenant_of(&self.store, subscription.organization_id)? else {
            return Ok(Next::Nothing);
        };
        let plugins = self.plugins.current();
        let request_id = format!("webhook-{}", subscription.id);
        let page = feed::read_page(
            &plugins,
            &tenant,
            &self.base_url,
            subscription.position,
            &subscription.collections,
            (MAX_BATCH_EVENTS, &subscription.format),
            &request_id,
        )
        .map_err(call_failure)?;
        let (events, last_read) = match page {
            FeedPage::Gone { pruned_through } => return Ok(Next::Gone { pruned_through }),
            FeedPage::Events { events, last_read, latest, .. } => (events, last_read.unwrap_or(latest)),
        };
        // No event of its collections through the organization's latest:
        // the position passes over the others' events.
        if last_read <= subscription.position {
            return Ok(Next::Nothing);
        }
        let passing = filtered(&plugins, &tenant, subscription, &events, &request_id)?;
        let head = format!("{{\"subscription_id\":\"{}\",\"events\":[", subscription.id);
        let mut body = head.clone().into_bytes();
        let (mut first, mut last, mut count, mut newest) = (None, last_read, 0usize, 0i64);
        for (event, record) in &events {
            if !subscription.wants(event.collection, event.operation)
                || !passing(event.collection, event.id, event.operation)
            {
                continue;
            }
            let mut encoded = Vec::new();
            feed::write_event(&mut encoded, event, record.as_deref());
            if count > 0 && body.len() + encoded.len() + 3 > MAX_BATCH_BYTES {
                // The rest waits for the next batch: the position stops
                // before the first event left out.
                last = event.sequence - 1;
                break;
            }
            if count > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&encoded);
            first.get_or_insert(event.sequence);
            newest = newest.max(event.changed_at);
            count += 1;
        }
        if count == 0 {
            return Ok(Next::PassOver(last_read));
        }
        body.extend_from_slice(b"]}");
        let body = String::from_utf8(body).map_err(|_| StoreError::Corrupt("a delivery is not UTF-8".into()))?;
        Ok(Next::Send(Batch {
            webhook_id: format!("msg_{}", Uuid::now_v7().simple()),
            generation: subscription.generation,
            after: subscription.position,
            first_sequence: first.unwrap_or(last),
            last_sequence: last,
            events: count,
            newest_change: newest,
            body,
        }))
    }

    /// Sends a batch, signed now; what the receiver answered.
    async fn send(&self, subscription: &Subscription, batch: &Batch) -> Answer {
        let url = match self.settings.destinations.check_url(&subscription.url) {
            Ok(url) => url,
            Err(why) => {
                return Answer::Failed { outcome: "refused_destination", error: format!("the destination {why}") };
            }
        };
        let timestamp = esr_system::clock::unix_now();
        let signature = signing::signature_header(
            subscription.signing_secrets(now()),
            &batch.webhook_id,
            timestamp,
            batch.body.as_bytes(),
        );
        let request = self
            .client
            .post(url)
            .header("webhook-id", &batch.webhook_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(batch.body.clone());
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(error) => return failure(&error),
        };
        let status = response.status().as_u16();
        // The answer is read (to keep the connection) up to a bound, and
        // otherwise ignored.
        let mut read = 0usize;
        while read < MAX_ANSWER_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        Answer::Status(status)
    }
}

/// Whether `holder` (or the only host) holds the subscription's lease at
/// this position and generation: what every change of a delivery's
/// outcome requires, so that a host whose lease lapsed, or a batch a
/// replay or a change of settings made stale, changes nothing.
fn holds(subscription: &Subscription, holder: &str, single_host: bool, after: u64, generation: u64) -> bool {
    subscription.position == after
        && subscription.generation == generation
        && subscription.lease.as_ref().is_some_and(|lease| single_host || lease.host == holder)
}

/// A request that got no answer, by kind, with its causes.
fn failure(error: &reqwest::Error) -> Answer {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    let outcome = if error.is_timeout() {
        "timeout"
    } else if text.contains("webhooks may not reach") {
        "refused_destination"
    } else {
        "connection_error"
    };
    Answer::Failed { outcome, error: text }
}

/// The wait before attempt `failed + 1`: doubling from [`FIRST_BACKOFF`]
/// up to [`MAX_BACKOFF`], a random part of it (jitter) so that receivers
/// coming back are not hit by every sender at once.
fn backoff(failed: u32) -> Duration {
    let full = FIRST_BACKOFF.saturating_mul(1u32 << failed.saturating_sub(1).min(20)).min(MAX_BACKOFF);
    full.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
}

/// "24 hours", "90 s".
fn describe(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds >= 3600 && seconds.is_multiple_of(3600) {
        format!("{} hours", seconds / 3600)
    } else {
        format!("{seconds} s")
    }
}

/// Which events pass the subscription's filters: a created or updated
/// record of a filtered collection passes when the collection's list,
/// with the filter and the ids of the batch's records, names it (so the
/// group's component decides, as it does for the list); deletions and
/// unfiltered collections always pass.
fn filtered(
    plugins: &ComponentSet,
    tenant: &Tenant,
    subscription: &Subscription,
    events: &[(esr_store::ChangeEvent, Option<Vec<u8>>)],
    request_id: &str,
) -> Result<impl Fn(Collection, Uuid, ChangeOperation) -> bool + use<>, StoreError> {
    let mut matching: HashMap<Collection, HashSet<Uuid>> = HashMap::new();
    for (collection, query) in &subscription.filters {
        let ids: Vec<Uuid> = events
            .iter()
            .filter(|(event, record)| event.collection == *collection && record.is_some())
            .map(|(event, _)| event.id)
            .collect();
        let found = crate::filters::matching(plugins, tenant, *collection, query, &ids, request_id)?;
        matching.insert(*collection, found);
    }
    Ok(move |collection: Collection, id: Uuid, operation: ChangeOperation| {
        operation == ChangeOperation::Deleted || matching.get(&collection).is_none_or(|matched| matched.contains(&id))
    })
}

/// Adds an attempt to the subscription's log, keeping the last
/// [`ATTEMPTS_KEPT`].
fn record_attempt(store: &dyn Store, id: Uuid, attempt: Attempt) -> Result<(), StoreError> {
    let key = id.to_string();
    loop {
        let stored = store.document(ATTEMPTS, &key)?;
        let mut attempts: Vec<Attempt> =
            stored.as_ref().and_then(|document| serde_json::from_slice(&document.body).ok()).unwrap_or_default();
        attempts.insert(0, attempt.clone());
        attempts.truncate(ATTEMPTS_KEPT);
        let body = serde_json::to_vec(&attempts).map_err(|error| StoreError::Corrupt(error.to_string()))?;
        if store.swap_document(ATTEMPTS, &key, stored.map(|document| document.version), &body)?.is_some() {
            return Ok(());
        }
    }
}

/// The subscription's last attempts, the newest first.
pub fn attempts(store: &dyn Store, id: Uuid) -> Result<Vec<Attempt>, StoreError> {
    Ok(store
        .document(ATTEMPTS, &id.to_string())?
        .and_then(|document| serde_json::from_slice(&document.body).ok())
        .unwrap_or_default())
}

/// Drops the batch in flight, so that the next is built from the position
/// (a replay, or a subscription resumed).
pub fn forget_batch(store: &dyn Store, id: Uuid) -> Result<(), StoreError> {
    store.delete_document(BATCHES, &id.to_string()).map(|_| ())
}

impl Dispatcher {
    /// Runs store work (and the component calls that read the store) off
    /// the async threads, with one of the store's connections for host
    /// jobs, never one of the requests'.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let _permit = match &self.store_permits {
            Some(permits) => Some(
                permits.clone().acquire_owned().await.map_err(|_| StoreError::Unavailable("shutting down".into()))?,
            ),
            None => None,
        };
        tokio::task::spawn_blocking(work)
            .await
            .unwrap_or_else(|error| Err(StoreError::Backend(format!("a webhook task failed: {error}"))))
    }
}
