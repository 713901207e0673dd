//! The keys this server signs its access tokens with: Ed25519, kept in the
//! database so that every host issues and accepts the same tokens.
//!
//! The newest key that is not retired signs. `rotate` adds a key and
//! retires the others; a retired key stays published (and accepted) until
//! every token it may have signed has expired: the token lifetime, plus
//! the time other hosts take to see the rotation, plus a minute of clock
//! skew. After that it is deleted.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::pkcs8::EncodePrivateKey;
use esr_contract::time::Timestamp;
use esr_store::{Store, StoreError};
use jsonwebtoken::{DecodingKey, EncodingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::stored;

/// The document kind signing keys are stored under.
pub const KIND: &str = "signing-key";
/// The algorithm every key of this server signs with.
pub const ALGORITHM: jsonwebtoken::Algorithm = jsonwebtoken::Algorithm::EdDSA;
/// How often each host rereads the keys, so a rotation on one host is
/// followed by every other within this time.
pub const REREAD_EVERY: Duration = Duration::from_secs(10);
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// A stored key. The private half is as secret as the cursor-sealing key
/// the database also holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredKey {
    /// The key id, as tokens' headers and the JWKS name it.
    pub kid: String,
    pub created_at: String,
    /// When a newer key took over signing.
    pub retired_at: Option<String>,
    /// Until when a retired key is published and accepted.
    pub published_until: Option<String>,
    /// The Ed25519 public key, 32 bytes, base64url.
    pub public_x: String,
    /// The private key as PKCS #8 DER, base64.
    private_pkcs8: String,
}

impl StoredKey {
    fn generate() -> Result<StoredKey, StoreError> {
        let signing = ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng);
        let der =
            signing.to_pkcs8_der().map_err(|error| StoreError::Backend(format!("encoding a signing key: {error}")))?;
        let public = signing.verifying_key().to_bytes();
        Ok(StoredKey {
            kid: uuid::Uuid::now_v7().to_string(),
            created_at: Timestamp(esr_system::clock::unix_now_nanos()).format(),
            retired_at: None,
            published_until: None,
            public_x: URL_SAFE_NO_PAD.encode(public),
            private_pkcs8: STANDARD.encode(der.as_bytes()),
        })
    }

    fn is_published(&self, now: i64) -> bool {
        self.published_until.as_deref().is_none_or(|until| Timestamp::parse(until).is_some_and(|until| until.0 > now))
    }

    /// The key as `GET /.well-known/jwks.json` publishes it.
    pub fn jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "x": self.public_x, "kid": self.kid, "alg": "EdDSA", "use": "sig"})
    }
}

/// The keys as one host holds them: the one that signs, and every one
/// that verifies.
pub struct KeyRing {
    pub signing: Option<(String, EncodingKey)>,
    pub verifying: Vec<(String, DecodingKey)>,
    pub published: Vec<StoredKey>,
}

impl KeyRing {
    pub fn empty() -> KeyRing {
        KeyRing { signing: None, verifying: Vec::new(), published: Vec::new() }
    }

    pub fn verifying_key(&self, kid: &str) -> Option<&DecodingKey> {
        self.verifying.iter().find(|(id, _)| id == kid).map(|(_, key)| key)
    }
}

/// Every stored key, oldest first.
pub fn list(db: &dyn Store) -> Result<Vec<StoredKey>, StoreError> {
    let mut keys: Vec<StoredKey> = stored::load_all(db, KIND)?;
    keys.sort_by(|a, b| a.kid.cmp(&b.kid));
    Ok(keys)
}

/// The published keys, with a signing key made when there is none (the
/// first start, on any host: two hosts racing each make one, and both are
/// published; the newer signs).
pub fn load(db: &dyn Store) -> Result<KeyRing, StoreError> {
    let now = esr_system::clock::unix_now_nanos();
    let mut keys = list(db)?;
    if !keys.iter().any(|key| key.retired_at.is_none()) {
        let key = StoredKey::generate()?;
        stored::create(db, KIND, &key.kid, &key)?;
        keys.push(key);
    }
    let mut ring = KeyRing::empty();
    for key in keys {
        if !key.is_published(now) {
            continue;
        }
        let Ok(x) = URL_SAFE_NO_PAD.decode(&key.public_x) else { continue };
        ring.verifying.push((key.kid.clone(), DecodingKey::from_ed_der(&x)));
        if key.retired_at.is_none() {
            let Ok(der) = STANDARD.decode(&key.private_pkcs8) else { continue };
            // Kids are UUIDv7, so the last unretired key is the newest.
            ring.signing = Some((key.kid.clone(), EncodingKey::from_ed_der(&der)));
        }
        ring.published.push(key);
    }
    Ok(ring)
}

/// Adds a key that signs from now on and retires the others, each
/// published for `token_ttl` more (and the time hosts take to notice);
/// deletes keys no longer published. The new key's id.
pub fn rotate(db: &dyn Store, token_ttl: Duration) -> Result<String, StoreError> {
    let now = esr_system::clock::unix_now_nanos();
    let key = StoredKey::generate()?;
    stored::create(db, KIND, &key.kid, &key)?;
    let keep = token_ttl + REREAD_EVERY + CLOCK_SKEW;
    let until = Timestamp(now.saturating_add(i64::try_from(keep.as_nanos()).unwrap_or(i64::MAX))).format();
    for old in list(db)? {
        if old.kid == key.kid {
            continue;
        }
        if !old.is_published(now) {
            db.delete_document(KIND, &old.kid)?;
            continue;
        }
        stored::modify(db, KIND, &old.kid, |stored: &mut StoredKey| {
            if stored.retired_at.is_some() {
                return false;
            }
            stored.retired_at = Some(Timestamp(now).format());
            stored.published_until = Some(until.clone());
            true
        })?;
    }
    Ok(key.kid)
}
