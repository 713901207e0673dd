//! Slots for component calls, shared fairly between organizations.
//!
//! The instance pool and the blocking threads bound how many calls run at
//! once. Each organization may hold at most its share of those slots, so a
//! tenant that floods the API with expensive requests waits on its own
//! share while others keep theirs; and no request waits for a slot longer
//! than a short bound: past it, the answer is `503` with `Retry-After`
//! rather than a wait that eats the call's deadline. Both waits queue in
//! arrival order (tokio's semaphores are fair).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use super::ApiError;

/// The call slots of a server.
pub struct CallSlots {
    total: Arc<Semaphore>,
    per_organization: usize,
    /// Each organization's share, made on its first call. Organizations
    /// are created by the operator, so this holds at most one small entry
    /// per organization in the store.
    shares: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
    wait: Duration,
}

/// A call's slot: its organization's and the server's, given back on drop.
pub struct CallSlot {
    _share: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
}

impl CallSlots {
    /// `total` slots, at most `per_organization` of them (capped at
    /// `total`) held by one organization, each waited for at most `wait`.
    pub fn new(total: usize, per_organization: usize, wait: Duration) -> CallSlots {
        CallSlots {
            total: Arc::new(Semaphore::new(total)),
            per_organization: per_organization.clamp(1, total.max(1)),
            shares: Mutex::default(),
            wait,
        }
    }

    /// Twice the cores, at least 4 and at most 32 of 64: calls are CPU
    /// work, so more at once than the cores can run only adds waiting,
    /// while one organization can never take the whole pool.
    pub fn default_per_organization() -> usize {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        (2 * cores).clamp(4, 32)
    }

    /// A slot for a call of `organization`: first one of its share, then one
    /// of the server's, within the wait bound.
    pub async fn acquire(&self, organization: Uuid) -> Result<CallSlot, ApiError> {
        let until = tokio::time::Instant::now() + self.wait;
        let share = self.share(organization);
        let share = match tokio::time::timeout_at(until, share.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(ApiError::unavailable("the service is shutting down")),
            Err(_) => {
                return Err(ApiError::unavailable(&format!(
                    "all of this organization's component calls are busy ({} at once); retry shortly",
                    self.per_organization
                )));
            }
        };
        let total = match tokio::time::timeout_at(until, self.total.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(ApiError::unavailable("the service is shutting down")),
            Err(_) => {
                return Err(ApiError::unavailable("all of the service's component calls are busy; retry shortly"));
            }
        };
        Ok(CallSlot { _share: share, _total: total })
    }

    fn share(&self, organization: Uuid) -> Arc<Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        shares.entry(organization).or_insert_with(|| Arc::new(Semaphore::new(self.per_organization))).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_organization_waits_on_its_own_share_only() {
        let slots = CallSlots::new(3, 2, Duration::from_millis(50));
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let held = [slots.acquire(a).await.ok(), slots.acquire(a).await.ok()];
        assert!(held.iter().all(Option::is_some));
        let refused = slots.acquire(a).await.err().map(|error| error.status.as_u16());
        assert_eq!(refused, Some(503), "a third call of A waits out the bound");
        assert!(slots.acquire(b).await.is_ok(), "B still gets the last slot");
        drop(held);
        assert!(slots.acquire(a).await.is_ok(), "A's share comes back");
    }
}
