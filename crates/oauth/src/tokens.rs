//! The access tokens this server issues (RFC 9068 JWTs, signed with the
//! newest signing key) and the checks every token passes before a request
//! may use it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use esr_store::{Store, StoreError};
use jsonwebtoken::{Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::clients::{self, Client};
use crate::identity_providers::IdentityProvider;
use crate::signing_keys::{self, KeyRing};

/// The media type RFC 9068 gives access tokens, in the `typ` header.
pub const TOKEN_TYPE: &str = "at+jwt";
/// How long a host trusts what it read of a client: a revoked or expired
/// client's tokens are refused on every host within this time.
pub const CLIENT_RECHECK: Duration = Duration::from_secs(5);
/// The soonest a host rereads the signing keys for a token whose key it
/// does not know (a key another host just made).
const KEY_REREAD_AT_MOST_EVERY: Duration = Duration::from_secs(1);
/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const LEEWAY_SECS: u64 = 30;
/// The longest token looked at.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// What tokens this server issues say and how long they live.
#[derive(Debug, Clone)]
pub struct TokenSettings {
    /// `iss`: the server's public URL.
    pub issuer: String,
    /// `aud`: `--oauth-audience`, by default the public URL and `/v1`.
    pub audience: String,
    /// `--oauth-token-ttl-secs`.
    pub ttl: Duration,
}

/// The claims of a token this server issues.
#[derive(Debug, Serialize, Deserialize)]
pub struct AccessClaims {
    pub iss: String,
    pub sub: String,
    pub aud: String,
    pub client_id: String,
    pub scope: String,
    pub org: Uuid,
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
}

/// A token that passed every check that needs no database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub issuer: String,
    pub subject: String,
    /// The API client, for a token this server issued.
    pub client_id: Option<Uuid>,
    pub organization_id: Uuid,
    pub scopes: Vec<String>,
    /// `exp`, in Unix seconds.
    pub expires_at: i64,
}

/// The most verified tokens a host remembers (see [`Authority::verify`]).
const MAX_REMEMBERED: usize = 10_000;

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Signed with a key id the issuer's keys (as this host has them) do
    /// not hold: worth one reread of the keys.
    UnknownKey { provider: Option<usize> },
    /// Anything else, in words for the `401`.
    Invalid(String),
}

impl Refusal {
    pub(crate) fn invalid(why: impl Into<String>) -> Refusal {
        Refusal::Invalid(why.into())
    }
}

/// Issues this server's tokens and checks every token: its own and those
/// of the identity providers it trusts.
pub struct Authority {
    pub settings: TokenSettings,
    db: Arc<dyn Store>,
    ring: RwLock<Arc<KeyRing>>,
    ring_read_at: Mutex<Option<Instant>>,
    pub providers: Vec<IdentityProvider>,
    /// Clients as last read, and when.
    clients: Mutex<HashMap<Uuid, (Option<Client>, Instant)>>,
    /// Tokens that verified, by their SHA-256, until they expire.
    remembered: Mutex<HashMap<[u8; 32], Verified>>,
}

impl Authority {
    /// Reads the signing keys (making the first when there is none).
    pub fn new(
        db: Arc<dyn Store>,
        settings: TokenSettings,
        providers: Vec<IdentityProvider>,
    ) -> Result<Authority, StoreError> {
        let authority = Authority {
            settings,
            db,
            ring: RwLock::new(Arc::new(KeyRing::empty())),
            ring_read_at: Mutex::new(None),
            providers,
            clients: Mutex::new(HashMap::new()),
            remembered: Mutex::new(HashMap::new()),
        };
        authority.reread_keys()?;
        Ok(authority)
    }

    pub fn keys(&self) -> Arc<KeyRing> {
        self.ring.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Reads the signing keys again (blocking).
    pub fn reread_keys(&self) -> Result<(), StoreError> {
        *self.ring_read_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let ring = Arc::new(signing_keys::load(self.db.as_ref())?);
        *self.ring.write().unwrap_or_else(PoisonError::into_inner) = ring;
        Ok(())
    }

    /// Whether the keys may be reread for an unknown key id now.
    pub fn may_reread_keys(&self) -> bool {
        self.ring_read_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none_or(|at| at.elapsed() >= KEY_REREAD_AT_MOST_EVERY)
    }

    /// A token for the client with `scopes` (already narrowed to the
    /// client's), and its lifetime in seconds.
    pub fn issue(&self, client: &Client, scopes: &[String]) -> Result<(String, u64), Refusal> {
        let ring = self.keys();
        let Some((kid, key)) = ring.signing.as_ref() else {
            return Err(Refusal::invalid("this server has no signing key"));
        };
        let now = esr_system::clock::unix_now();
        let ttl = self.settings.ttl.as_secs();
        let claims = AccessClaims {
            iss: self.settings.issuer.clone(),
            sub: client.id.to_string(),
            aud: self.settings.audience.clone(),
            client_id: client.id.to_string(),
            scope: scopes.join(" "),
            org: client.organization_id,
            iat: now,
            exp: now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX)),
            jti: Uuid::new_v4().to_string(),
        };
        let mut header = Header::new(signing_keys::ALGORITHM);
        header.typ = Some(TOKEN_TYPE.to_owned());
        header.kid = Some(kid.clone());
        let token = jsonwebtoken::encode(&header, &claims, key)
            .map_err(|error| Refusal::invalid(format!("signing the token: {error}")))?;
        Ok((token, ttl))
    }

    /// Checks a token's form, signature, type, issuer, audience and times,
    /// against this server's keys or the identity provider its `iss`
    /// names. Needs no database. A client sends one token for many
    /// requests: one that verified is remembered (by its digest, until it
    /// expires, [`MAX_REMEMBERED`] at most) and not checked again. Only
    /// tokens with a valid signature are remembered, so a caller cannot
    /// fill the memory with made-up ones; whether its client is still
    /// usable is checked on every request all the same.
    pub fn verify(&self, token: &str) -> Result<Verified, Refusal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = esr_system::clock::unix_now();
        let remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner).get(&digest).cloned();
        if let Some(verified) = remembered.filter(|verified| verified.expires_at > now) {
            return Ok(verified);
        }
        let verified = self.verify_signed(token)?;
        let mut remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner);
        if remembered.len() >= MAX_REMEMBERED {
            remembered.retain(|_, verified| verified.expires_at > now);
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
        }
        remembered.insert(digest, verified.clone());
        Ok(verified)
    }

    fn verify_signed(&self, token: &str) -> Result<Verified, Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::invalid(format!("longer than {MAX_TOKEN_BYTES} bytes")));
        }
        let header =
            jsonwebtoken::decode_header(token).map_err(|error| Refusal::invalid(format!("not a JWT: {error}")))?;
        let issuer = unverified_issuer(token)?;
        if issuer == self.settings.issuer {
            return self.verify_own(token, &header);
        }
        match self.providers.iter().position(|provider| provider.settings.issuer == issuer) {
            Some(index) => self.providers[index].verify(token, &header, index),
            None => Err(Refusal::invalid("issued by an issuer this server does not trust")),
        }
    }

    fn verify_own(&self, token: &str, header: &Header) -> Result<Verified, Refusal> {
        if !header.typ.as_deref().is_some_and(is_access_token_type) {
            return Err(Refusal::invalid(format!("its type (typ) must be {TOKEN_TYPE}")));
        }
        if header.alg != signing_keys::ALGORITHM {
            return Err(Refusal::invalid("signed with an algorithm this server does not use"));
        }
        let kid = header.kid.as_deref().ok_or_else(|| Refusal::invalid("it names no key (kid)"))?;
        let ring = self.keys();
        let key = ring.verifying_key(kid).ok_or(Refusal::UnknownKey { provider: None })?;
        let mut validation = Validation::new(signing_keys::ALGORITHM);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        let claims = jsonwebtoken::decode::<AccessClaims>(token, key, &validation)
            .map_err(|error| Refusal::invalid(describe(&error)))?
            .claims;
        let client_id =
            Uuid::try_parse(&claims.client_id).map_err(|_| Refusal::invalid("client_id is not a client"))?;
        if claims.sub != claims.client_id {
            return Err(Refusal::invalid("sub is not its client"));
        }
        Ok(Verified {
            issuer: claims.iss,
            subject: claims.sub,
            client_id: Some(client_id),
            organization_id: claims.org,
            scopes: known_scopes(claims.scope.split(' ')),
            expires_at: claims.exp,
        })
    }

    /// The client as read at most [`CLIENT_RECHECK`] ago (blocking when it
    /// must be read again).
    pub fn client(&self, id: Uuid) -> Result<Option<Client>, StoreError> {
        if let Some((client, read_at)) = self.clients.lock().unwrap_or_else(PoisonError::into_inner).get(&id)
            && read_at.elapsed() < CLIENT_RECHECK
        {
            return Ok(client.clone());
        }
        let client = clients::get(self.db.as_ref(), id)?;
        let mut cache = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        // Only tokens with a valid signature reach here, so the clients
        // cached are real ones; forgetting the stale ones keeps it small.
        cache.retain(|_, (_, read_at)| read_at.elapsed() < CLIENT_RECHECK);
        cache.insert(id, (client.clone(), Instant::now()));
        Ok(client)
    }
}

/// `at+jwt` or `application/at+jwt` (RFC 9068 §2.1), in any case.
pub(crate) fn is_access_token_type(typ: &str) -> bool {
    let typ = typ.to_ascii_lowercase();
    typ == TOKEN_TYPE || typ == "application/at+jwt"
}

/// The scopes of a token this server knows, in its order, each once.
pub(crate) fn known_scopes<'a>(scopes: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut known: Vec<String> = Vec::new();
    for scope in scopes {
        if esr_auth::keys::ALL_READ_SCOPES.contains(&scope) && !known.iter().any(|seen| seen == scope) {
            known.push(scope.to_owned());
        }
    }
    known
}

/// The `iss` a token claims, read before its signature is checked only to
/// choose the keys to check it with.
fn unverified_issuer(token: &str) -> Result<String, Refusal> {
    #[derive(Deserialize)]
    struct Issuer {
        iss: Option<String>,
    }
    let payload = token.split('.').nth(1).ok_or_else(|| Refusal::invalid("not a JWT"))?;
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
        .map_err(|_| Refusal::invalid("its payload is not base64url"))?;
    let claims: Issuer =
        serde_json::from_slice(&bytes).map_err(|_| Refusal::invalid("its payload is not JSON claims"))?;
    claims.iss.ok_or_else(|| Refusal::invalid("it names no issuer (iss)"))
}

/// A validation failure in words a client can act on.
pub(crate) fn describe(error: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "it has expired".into(),
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "it is not for this API (aud)".into(),
        ErrorKind::InvalidIssuer => "its issuer (iss) is not trusted".into(),
        ErrorKind::InvalidSignature => "its signature does not verify".into(),
        ErrorKind::InvalidAlgorithm => "signed with an algorithm its key does not allow".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it lacks the {claim} claim"),
        ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Json(_) | ErrorKind::Utf8(_) => {
            "it is not a well-formed JWT".into()
        }
        _ => "it does not verify".into(),
    }
}
