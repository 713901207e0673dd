//! API clients: an organization's machine identities for the OAuth 2.0
//! client-credentials grant. A client has read scopes and may expire; its
//! secret is shown once and kept only as an Argon2id hash.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use esr_contract::time::Timestamp;
use esr_store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::stored;

/// The document kind clients are stored under.
pub const KIND: &str = "oauth-client";
/// The prefix every client secret starts with, so secret scanners can
/// recognise a leaked one.
pub const SECRET_PREFIX: &str = "esrcs_";
const SECRET_CHARS: usize = 43;
/// The longest client name.
pub const MAX_NAME_CHARS: usize = 200;

/// A stored client, its secret's hash included (never answered).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Client {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    pub secret_rotated_at: Option<String>,
    /// The Argon2id hash of the secret, as a PHC string.
    secret_hash: String,
}

/// A client just made (or whose secret was just rotated) and its secret,
/// shown this once.
pub struct WithSecret {
    pub client: Client,
    pub secret: String,
}

impl Client {
    /// Neither revoked nor past its expiry at `now` (Unix nanoseconds).
    pub fn is_usable(&self, now: i64) -> bool {
        let expired = self.expires_at.as_deref().is_some_and(|at| Timestamp::parse(at).is_none_or(|at| at.0 <= now));
        self.revoked_at.is_none() && !expired
    }

    /// `active`, `revoked` or `expired`.
    pub fn state(&self, now: i64) -> &'static str {
        match (self.revoked_at.is_some(), self.is_usable(now)) {
            (true, _) => "revoked",
            (false, true) => "active",
            (false, false) => "expired",
        }
    }
}

/// Argon2id with the parameters OWASP recommends (19 MiB, 2 passes): a
/// leaked hash costs a guesser as much per try; a secret of 256 random
/// bits makes the try hopeless anyway.
fn hasher() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).unwrap_or_default();
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

fn hash_secret(secret: &str) -> Result<String, StoreError> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    hasher()
        .hash_password(secret.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| StoreError::Backend(format!("hashing a client secret: {error}")))
}

fn new_secret() -> String {
    format!("{SECRET_PREFIX}{}", esr_auth::keys::random_base62(SECRET_CHARS))
}

/// A hash no secret matches, verified when the client is unknown so that
/// an unknown client costs the same time as a wrong secret.
fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash_secret(&new_secret()).unwrap_or_default())
}

/// Whether `secret` is the client's: Argon2 verification, whose final
/// comparison is constant-time. An unknown client verifies a decoy.
pub fn secret_matches(client: Option<&Client>, secret: &str) -> bool {
    let hash: &str = match client {
        Some(client) => &client.secret_hash,
        None => decoy_hash(),
    };
    let Ok(parsed) = PasswordHash::new(hash) else { return false };
    let matches = hasher().verify_password(secret.as_bytes(), &parsed).is_ok();
    matches && client.is_some()
}

/// Creates and stores a client of the organization.
pub fn create(
    db: &dyn Store,
    organization_id: Uuid,
    name: &str,
    scopes: &[&str],
    expires_at: Option<String>,
) -> Result<WithSecret, StoreError> {
    let secret = new_secret();
    let client = Client {
        id: Uuid::now_v7(),
        organization_id,
        name: name.to_owned(),
        scopes: scopes.iter().map(|scope| (*scope).to_owned()).collect(),
        created_at: esr_system::clock::now_rfc3339(),
        expires_at,
        revoked_at: None,
        secret_rotated_at: None,
        secret_hash: hash_secret(&secret)?,
    };
    stored::create(db, KIND, &client.id.to_string(), &client)?;
    Ok(WithSecret { client, secret })
}

/// The client named `id`.
pub fn get(db: &dyn Store, id: Uuid) -> Result<Option<Client>, StoreError> {
    Ok(stored::load(db, KIND, &id.to_string())?.map(|(client, _)| client))
}

/// Every client, or the organization's, oldest first.
pub fn list(db: &dyn Store, organization: Option<Uuid>) -> Result<Vec<Client>, StoreError> {
    let mut clients: Vec<Client> = stored::load_all(db, KIND)?;
    clients.retain(|client| organization.is_none_or(|id| client.organization_id == id));
    Ok(clients)
}

/// Revokes the client (its secret and every token it holds); `None` when
/// there is no such client.
pub fn revoke(db: &dyn Store, id: Uuid) -> Result<Option<Client>, StoreError> {
    let now = esr_system::clock::now_rfc3339();
    stored::modify(db, KIND, &id.to_string(), |client: &mut Client| {
        if client.revoked_at.is_some() {
            return false;
        }
        client.revoked_at = Some(now.clone());
        true
    })
}

/// Gives the client a new secret; the old one stops working at once
/// (tokens already issued stay valid until they expire). `None` when there
/// is no such client, or it is revoked.
pub fn rotate_secret(db: &dyn Store, id: Uuid) -> Result<Option<WithSecret>, StoreError> {
    let secret = new_secret();
    let hash = hash_secret(&secret)?;
    let now = esr_system::clock::now_rfc3339();
    let mut revoked = false;
    let client = stored::modify(db, KIND, &id.to_string(), |client: &mut Client| {
        revoked = client.revoked_at.is_some();
        if revoked {
            return false;
        }
        client.secret_hash.clone_from(&hash);
        client.secret_rotated_at = Some(now.clone());
        true
    })?;
    Ok(client.filter(|_| !revoked).map(|client| WithSecret { client, secret }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_checked_against_its_hash_only() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let db = esr_store_sled::SledStore::open(dir.path())?;
        let organization = Uuid::now_v7();
        let made = create(&db, organization, "siem", &["findings:read"], None)?;
        let stored = get(&db, made.client.id)?;
        assert!(stored.as_ref().is_some_and(|client| !client.secret_hash.contains(&made.secret)));
        assert!(secret_matches(stored.as_ref(), &made.secret));
        assert!(!secret_matches(stored.as_ref(), &new_secret()));
        assert!(!secret_matches(None, &made.secret), "an unknown client never matches");

        let rotated = rotate_secret(&db, made.client.id)?.ok_or(StoreError::Corrupt("gone".into()))?;
        let stored = get(&db, made.client.id)?;
        assert!(!secret_matches(stored.as_ref(), &made.secret), "the old secret stops at once");
        assert!(secret_matches(stored.as_ref(), &rotated.secret));

        let now = esr_system::clock::unix_now_nanos();
        assert!(stored.as_ref().is_some_and(|client| client.is_usable(now)));
        let revoked = revoke(&db, made.client.id)?;
        assert!(revoked.is_some_and(|client| client.state(now) == "revoked"));
        assert!(rotate_secret(&db, made.client.id)?.is_none(), "a revoked client gets no new secret");
        assert_eq!(list(&db, Some(organization))?.len(), 1);
        assert_eq!(list(&db, Some(Uuid::now_v7()))?.len(), 0);
        Ok(())
    }
}
