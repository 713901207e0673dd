//! The admin routes of webhook subscriptions:
//! `/admin/v1/organizations/{organizationId}/webhooks[/{id}[/replay|/rotate-secret|/deliveries]]`.
//! A subscription's secret is answered once, when it is made (created or
//! rotated), and never logged.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use super::admin::{AdminState, json_object, organization_exists, parse_uuid, storage_failure};
use super::problem::ApiError;
use esr_store::{Collection, Store};
use esr_webhooks::delivery::{self, forget_batch};
use esr_webhooks::subscription::{
    self, CREATE_MEMBERS, MAX_SUBSCRIPTIONS_PER_ORGANIZATION, OPERATIONS, Secret, Settings, Subscription,
    SubscriptionState, UPDATE_MEMBERS,
};
use esr_webhooks::{filters, signing};

/// The organization a route's path names:
/// `/admin/v1/organizations/{organizationId}/webhooks…`.
fn organization_path(uri: &Uri) -> Result<Uuid, ApiError> {
    parse_uuid(uri.path().split('/').nth(4).unwrap_or_default(), "organizationId")
}

/// The organization and the subscription a route's path names:
/// `/admin/v1/organizations/{organizationId}/webhooks/{id}…`.
fn subscription_path(uri: &Uri) -> Result<(Uuid, Uuid), ApiError> {
    Ok((organization_path(uri)?, parse_uuid(uri.path().split('/').nth(6).unwrap_or_default(), "id")?))
}

/// The scheme and host of a destination, for the log.
fn reqwest_host(url: &str) -> String {
    url.split_once("://")
        .map(|(scheme, rest)| format!("{scheme}://{}", rest.split(['/', '?', '#']).next().unwrap_or_default()))
        .unwrap_or_default()
}

fn now() -> i64 {
    esr_system::clock::unix_now_nanos()
}

/// The subscription, if it is the organization's (another's is not found).
fn owned(db: &dyn Store, organization: Uuid, id: Uuid) -> Result<subscription::Stored, ApiError> {
    match subscription::load(db, id).map_err(storage_failure)? {
        Some(stored) if stored.subscription.organization_id == organization => Ok(stored),
        _ => Err(ApiError::not_found(format!("no webhook subscription {id} in organization {organization}"))),
    }
}

/// Checks each filter with its collection's component; `problems` gets
/// what a list would refuse.
fn check_filters(
    state: &AdminState,
    organization: Uuid,
    collections: &[Collection],
    filters: &std::collections::BTreeMap<Collection, String>,
    problems: &mut Vec<(String, String)>,
) -> Result<(), ApiError> {
    Settings::check_filters(collections, filters, problems);
    if filters.is_empty() || !problems.is_empty() {
        return Ok(());
    }
    let plugins = state.plugins.current();
    let tenant = filters::tenant_of(&state.db, organization)
        .map_err(storage_failure)?
        .ok_or_else(|| ApiError::not_found(format!("no organization {organization}")))?;
    for (collection, query) in filters {
        let refused = filters::check(&plugins, tenant.clone(), *collection, query, "webhook-filter-check")
            .map_err(storage_failure)?;
        problems.extend(refused);
    }
    Ok(())
}

/// `POST …/webhooks` → `201` with the subscription and its secret (once).
pub(super) async fn create(State(state): State<AdminState>, uri: Uri, body: Bytes) -> Result<Response, ApiError> {
    let organization = organization_path(&uri)?;
    let object = json_object(&body, &CREATE_MEMBERS)?;
    let rules = state.webhooks.settings().destinations;
    let mut problems = Vec::new();
    let settings = Settings::parse(&object, &rules, &mut problems);
    for required in ["url", "collections"] {
        if !object.contains_key(required) {
            problems.push((required.to_owned(), "required".to_owned()));
        }
    }
    if let Some(format) = &settings.format
        && let Err(reason) = esr_runtime::feed::check_format(&state.plugins.current(), format)
    {
        problems.push(("format".to_owned(), reason));
    }
    if !problems.is_empty() {
        return Err(ApiError::invalid_parameters(problems));
    }
    let worker = state.clone();
    let created = state
        .blocking(move || {
            let db = worker.db.as_ref();
            organization_exists(db, organization)?;
            let collections = settings.collections.unwrap_or_default();
            let filters = settings.filters.unwrap_or_default();
            let mut problems = Vec::new();
            check_filters(&worker, organization, &collections, &filters, &mut problems)?;
            if !problems.is_empty() {
                return Err(ApiError::invalid_parameters(problems));
            }
            if subscription::all(db, Some(organization)).map_err(storage_failure)?.len()
                >= MAX_SUBSCRIPTIONS_PER_ORGANIZATION
            {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "too-many-subscriptions",
                    "Too many subscriptions",
                    format!("an organization holds at most {MAX_SUBSCRIPTIONS_PER_ORGANIZATION} webhook subscriptions"),
                ));
            }
            let at = now();
            let secret = signing::new_secret();
            let created = Subscription {
                id: Uuid::now_v7(),
                organization_id: organization,
                url: settings.url.unwrap_or_default(),
                collections,
                operations: settings
                    .operations
                    .unwrap_or_else(|| OPERATIONS.iter().map(|operation| (*operation).to_owned()).collect()),
                filters,
                format: settings.format.unwrap_or_else(|| "esr".into()),
                description: settings.description.unwrap_or_default(),
                state: SubscriptionState::Active,
                reason: None,
                created_at: at,
                updated_at: at,
                // Events from now on; a replay reaches back.
                position: db.change_log(organization).map_err(storage_failure)?.latest,
                secrets: vec![Secret { value: secret.clone(), created_at: at, expires_at: None }],
                lease: None,
                last_delivery: None,
                last_error: None,
                failing_since: None,
                failed_attempts: 0,
                next_attempt_at: None,
                generation: 0,
            };
            subscription::insert(db, &created).map_err(storage_failure)?;
            Ok((created, secret))
        })
        .await?;
    let (created, secret) = created;
    // The destination's host only: some receivers' URLs hold a credential in their path.
    let destination = reqwest_host(&created.url);
    tracing::info!(organization_id = %organization, subscription = %created.id, %destination, "webhook subscription created");
    state.webhooks.wake();
    let mut answer = created.view();
    answer["secret"] = json!(secret);
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// `GET …/webhooks`.
pub(super) async fn list(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let organization = organization_path(&uri)?;
    let db = state.db.clone();
    let found = state
        .blocking(move || {
            organization_exists(db.as_ref(), organization)?;
            subscription::all(db.as_ref(), Some(organization)).map_err(storage_failure)
        })
        .await?;
    Ok(Json(json!({"data": found.iter().map(Subscription::view).collect::<Vec<Value>>()})).into_response())
}

/// `GET …/webhooks/{id}`.
pub(super) async fn show(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let (organization, id) = subscription_path(&uri)?;
    let db = state.db.clone();
    let found = state.blocking(move || owned(db.as_ref(), organization, id)).await?;
    Ok(Json(found.subscription.view()).into_response())
}

/// Clears what a failed delivery left, so the subscription starts again
/// from its position.
fn restart(subscription: &mut Subscription) {
    subscription.reason = None;
    subscription.failing_since = None;
    subscription.failed_attempts = 0;
    subscription.next_attempt_at = None;
}

/// `PATCH …/webhooks/{id}`.
pub(super) async fn update(State(state): State<AdminState>, uri: Uri, body: Bytes) -> Result<Response, ApiError> {
    let (organization, id) = subscription_path(&uri)?;
    let object = json_object(&body, &UPDATE_MEMBERS)?;
    let rules = state.webhooks.settings().destinations;
    let mut problems = Vec::new();
    let settings = Settings::parse(&object, &rules, &mut problems);
    if !problems.is_empty() {
        return Err(ApiError::invalid_parameters(problems));
    }
    let worker = state.clone();
    let updated = state
        .blocking(move || {
            let db = worker.db.as_ref();
            let current = owned(db, organization, id)?.subscription;
            let collections = settings.collections.clone().unwrap_or(current.collections.clone());
            let filters = settings.filters.clone().unwrap_or(current.filters.clone());
            let mut problems = Vec::new();
            check_filters(&worker, organization, &collections, &filters, &mut problems)?;
            if !problems.is_empty() {
                return Err(ApiError::invalid_parameters(problems));
            }
            let mut resumed = false;
            // A change of what is sent, where or whether: the batch built or
            // in flight is stale. A description alone keeps it and its
            // `webhook-id`, which receivers deduplicate on.
            let redelivers = settings.url.is_some()
                || settings.collections.is_some()
                || settings.filters.is_some()
                || settings.operations.is_some()
                || settings.state.is_some();
            let changed = subscription::modify(db, id, |subscription| {
                if let Some(url) = settings.url.as_ref().filter(|url| **url != subscription.url) {
                    // A new destination starts without the old one's backoff
                    // (a paused or failed one restarts when resumed).
                    subscription.url = url.clone();
                    if subscription.state == SubscriptionState::Active {
                        restart(subscription);
                    }
                }
                subscription.collections = collections.clone();
                subscription.filters = filters.clone();
                if let Some(operations) = &settings.operations {
                    subscription.operations = operations.clone();
                }
                if let Some(description) = &settings.description {
                    subscription.description = description.clone();
                }
                resumed = false;
                match settings.state {
                    Some(SubscriptionState::Active) if subscription.state != SubscriptionState::Active => {
                        subscription.state = SubscriptionState::Active;
                        restart(subscription);
                        resumed = true;
                    }
                    Some(state) => subscription.state = state,
                    None => {}
                }
                subscription.updated_at = now();
                if redelivers {
                    subscription.generation += 1;
                }
                true
            })
            .map_err(storage_failure)?;
            let (updated, _) = changed.ok_or_else(|| ApiError::not_found(format!("no webhook subscription {id}")))?;
            if resumed {
                forget_batch(db, id).map_err(storage_failure)?;
            }
            Ok(updated)
        })
        .await?;
    tracing::info!(organization_id = %organization, subscription = %id, state = updated.state.name(), "webhook subscription updated");
    state.webhooks.wake();
    Ok(Json(updated.view()).into_response())
}

/// `DELETE …/webhooks/{id}` → `204`.
pub(super) async fn remove(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let (organization, id) = subscription_path(&uri)?;
    let db = state.db.clone();
    state
        .blocking(move || {
            owned(db.as_ref(), organization, id)?;
            subscription::remove(db.as_ref(), id).map_err(storage_failure)
        })
        .await?;
    tracing::info!(organization_id = %organization, subscription = %id, "webhook subscription deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST …/webhooks/{id}/replay` `{"from_sequence": N}`: delivers again
/// every event after `N` (and resumes a failing or disabled subscription).
pub(super) async fn replay(State(state): State<AdminState>, uri: Uri, body: Bytes) -> Result<Response, ApiError> {
    let (organization, id) = subscription_path(&uri)?;
    let object = json_object(&body, &["from_sequence"])?;
    let from =
        object.get("from_sequence").and_then(Value::as_u64).filter(|from| i64::try_from(*from).is_ok()).ok_or_else(
            || {
                ApiError::invalid_parameters(vec![(
                    "from_sequence".into(),
                    "required: a sequence of the change feed, from 0".into(),
                )])
            },
        )?;
    let db = state.db.clone();
    let replayed = state
        .blocking(move || {
            let db = db.as_ref();
            owned(db, organization, id)?;
            let standing = db.change_log(organization).map_err(storage_failure)?;
            if from > standing.latest {
                return Err(ApiError::invalid_parameters(vec![(
                    "from_sequence".into(),
                    format!("past the organization's latest sequence, {}", standing.latest),
                )]));
            }
            if from < standing.pruned_through {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "changes-gone",
                    "Changes no longer kept",
                    format!(
                        "deletions after sequence {from} are no longer kept (kept after {}); list the collections and \
                         replay from the list's sequence",
                        standing.pruned_through
                    ),
                )
                .with_member("pruned_through", json!(standing.pruned_through)));
            }
            let (replayed, _) = subscription::modify(db, id, |subscription| {
                subscription.position = from;
                subscription.generation += 1;
                restart(subscription);
                if subscription.state != SubscriptionState::Paused {
                    subscription.state = SubscriptionState::Active;
                }
                subscription.updated_at = now();
                true
            })
            .map_err(storage_failure)?
            .ok_or_else(|| ApiError::not_found(format!("no webhook subscription {id}")))?;
            forget_batch(db, id).map_err(storage_failure)?;
            Ok(replayed)
        })
        .await?;
    tracing::info!(organization_id = %organization, subscription = %id, from_sequence = from, "webhook subscription replayed");
    state.webhooks.wake();
    Ok(Json(replayed.view()).into_response())
}

/// `POST …/webhooks/{id}/rotate-secret`: a new secret (answered once);
/// the ones before it keep signing for the overlap.
pub(super) async fn rotate_secret(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let (organization, id) = subscription_path(&uri)?;
    let db = state.db.clone();
    let overlap = i64::try_from(state.webhooks.settings().secret_overlap.as_nanos()).unwrap_or(i64::MAX);
    let secret = signing::new_secret();
    let kept = secret.clone();
    let rotated = state
        .blocking(move || {
            let db = db.as_ref();
            owned(db, organization, id)?;
            let (rotated, _) = subscription::modify(db, id, |subscription| {
                let at = now();
                // The new secret and the one it replaces, which signs too
                // for the overlap; any older one stops now (a header of one
                // signature per rotation would grow without bound).
                subscription.secrets.truncate(1);
                for secret in &mut subscription.secrets {
                    secret.expires_at = Some(at.saturating_add(overlap));
                }
                subscription.secrets.insert(0, Secret { value: kept.clone(), created_at: at, expires_at: None });
                subscription.updated_at = at;
                true
            })
            .map_err(storage_failure)?
            .ok_or_else(|| ApiError::not_found(format!("no webhook subscription {id}")))?;
            Ok(rotated)
        })
        .await?;
    tracing::info!(organization_id = %organization, subscription = %id, "webhook secret rotated");
    let mut answer = rotated.view();
    answer["secret"] = json!(secret);
    Ok(Json(answer).into_response())
}

/// `GET …/webhooks/{id}/deliveries`: the last attempts, the newest first.
pub(super) async fn deliveries(State(state): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let (organization, id) = subscription_path(&uri)?;
    let db = state.db.clone();
    let attempts = state
        .blocking(move || {
            owned(db.as_ref(), organization, id)?;
            delivery::attempts(db.as_ref(), id).map_err(storage_failure)
        })
        .await?;
    Ok(Json(json!({"data": attempts})).into_response())
}
