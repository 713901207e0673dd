//! Webhooks: the change feed, delivered. An organization's subscriptions
//! receive its feed's events in commit order, batched, signed the
//! Standard Webhooks way, at least once, from one host at a time, to
//! destinations checked against server-side request forgery.
//!
//! `subscription` is what is stored and what operators may ask for;
//! `filters` applies list filters through the components; `delivery` is
//! the dispatcher every host runs (its requests guarded by
//! `esr-outbound`); `signing` signs them.

pub mod delivery;
pub mod filters;
pub mod signing;
pub mod subscription;

pub use delivery::{Attempt, DeliveryObserver, Dispatcher, OUTCOMES, WebhookSettings};
pub use esr_outbound::DestinationRules;
pub use subscription::{Settings, Subscription, SubscriptionState};
