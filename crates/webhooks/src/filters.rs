//! A subscription's filters are list filters, checked and applied by the
//! collection's component as its list endpoint does: a filter is checked
//! by listing with it (`id` and `limit=1`), and applied to a batch by listing with
//! it and the batch's record ids (`id=…`), so what a subscription
//! receives is what the list with the same filter answers.

use std::collections::HashSet;
use std::sync::Arc;

use uuid::Uuid;

use esr_runtime::feed::component_request;
use esr_runtime::{CallError, ComponentSet, PluginError, Tenant};
use esr_store::{Collection, Store, StoreError};

/// The list parameters a filter may not set: the host sets them.
const RESERVED: [&str; 5] = ["id", "limit", "offset", "cursor", "sort"];

/// The query pairs of a filter, and the host's own.
fn pairs(query: &str, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.as_bytes()).map(|(name, value)| (name.into_owned(), value.into_owned())).collect();
    pairs.extend(extra.iter().map(|(name, value)| ((*name).to_owned(), value.clone())));
    pairs
}

/// Whether the collection's list takes `query`; the problems, by
/// parameter, when it does not.
pub fn check(
    plugins: &ComponentSet,
    tenant: Tenant,
    collection: Collection,
    query: &str,
    request_id: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let field = |name: &str| format!("filters.{collection}.{name}");
    let mut problems: Vec<(String, String)> = pairs(query, &[])
        .into_iter()
        .filter(|(name, _)| RESERVED.contains(&name.as_str()))
        .map(|(name, _)| (field(&name), "set by the delivery, not by a filter".to_owned()))
        .collect();
    if !problems.is_empty() {
        return Ok(problems);
    }
    // With `id` too, as deliveries ask: a component whose list does not
    // take it (an older SDK's) is refused here, not at the first delivery.
    let request = component_request(
        &format!("/v1/{collection}"),
        "",
        &pairs(query, &[("id", Uuid::nil().to_string()), ("limit", "1".into())]),
    );
    match plugins.list(collection.name(), tenant, &request, request_id) {
        Ok(_) => {}
        Err(CallError::Plugin(PluginError::InvalidParameters(invalid))) => {
            problems.extend(invalid.into_iter().map(|param| (field(&param.name), param.reason)));
        }
        Err(error) => return Err(failure(error)),
    }
    Ok(problems)
}

/// Of `ids`, those whose records the collection's list with `query` answers.
pub fn matching(
    plugins: &ComponentSet,
    tenant: &Tenant,
    collection: Collection,
    query: &str,
    ids: &[Uuid],
    request_id: &str,
) -> Result<HashSet<Uuid>, StoreError> {
    let mut found = HashSet::new();
    for chunk in ids.chunks(esr_contract::limits::MAX_LIMIT as usize) {
        let joined = chunk.iter().map(Uuid::to_string).collect::<Vec<_>>().join(",");
        let request = component_request(
            &format!("/v1/{collection}"),
            "",
            &pairs(query, &[("id", joined), ("limit", chunk.len().to_string())]),
        );
        let (page, _) = plugins.list(collection.name(), tenant.clone(), &request, request_id).map_err(failure)?;
        let records: Vec<serde_json::Value> = serde_json::from_slice(&page.data).map_err(|error| {
            StoreError::Backend(format!("{collection}'s component answered a list that is not JSON: {error}"))
        })?;
        found.extend(
            records
                .iter()
                .filter_map(|record| record.get("id").and_then(serde_json::Value::as_str))
                .filter_map(|id| Uuid::try_parse(id).ok()),
        );
    }
    Ok(found)
}

/// The organization's read session settings for the host's own component
/// calls (deliveries and filter checks); `None` when it no longer exists.
pub fn tenant_of(store: &Arc<dyn Store>, organization: Uuid) -> Result<Option<Tenant>, StoreError> {
    let Some(found) = store.organization(organization)? else { return Ok(None) };
    let json = serde_json::json!({
        "organization_id": found.organization_id,
        "name": found.name,
        "enrollment_token": found.enrollment_token,
    });
    Ok(Some(Tenant {
        store: store.clone(),
        organization_id: organization,
        organization_json: Arc::new(json.to_string().into_bytes()),
        reads: Arc::default(),
        call_time: Some(CALL_TIME),
    }))
}

/// How long one of the host's component calls may run.
const CALL_TIME: std::time::Duration = std::time::Duration::from_secs(10);

fn failure(error: CallError) -> StoreError {
    match error {
        CallError::Unavailable(why) => StoreError::Unavailable(why),
        other => StoreError::Backend(format!("a filter's list call failed: {other:?}")),
    }
}
