//! Identity providers the operator trusts (`--oidc-issuer`): their access
//! tokens are accepted like this server's, the organization and scopes
//! read from configured claims.
//!
//! Discovery (`/.well-known/openid-configuration`) and the key set are
//! fetched through the same guard as webhooks (`https` and public
//! addresses unless allowed), bounded in size and time, and cached; a
//! token naming a key id the cache lacks refetches them, at most once per
//! [`REFETCH_AT_MOST_EVERY`].

use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use esr_outbound::DestinationRules;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Header, Validation};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::tokens::{LEEWAY_SECS, Refusal, Verified, describe, is_access_token_type, known_scopes};

/// The soonest a provider's keys are fetched again for an unknown key id.
pub const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(10);
/// How long fetched keys are used before they are fetched again.
pub const KEYS_KEPT_FOR: Duration = Duration::from_secs(3600);
/// The largest discovery document or key set read.
const MAX_DOCUMENT_BYTES: usize = 512 * 1024;
/// The most keys one set may hold.
const MAX_KEYS: usize = 100;

/// One trusted issuer, as configured.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// `--oidc-issuer`: the `iss` its tokens carry, exactly.
    pub issuer: String,
    /// `--oidc-audience`: the `aud` its tokens must carry.
    pub audience: String,
    /// `--oidc-organization-claim`.
    pub organization_claim: String,
    /// `--oidc-scopes-claim`.
    pub scopes_claim: String,
    /// `--oidc-organizations`: the organizations its tokens may name
    /// (`None`: any).
    pub organizations: Option<Vec<Uuid>>,
}

struct FetchedKeys {
    keys: Vec<(String, Algorithm, DecodingKey)>,
    fetched_at: Instant,
}

/// A trusted issuer and the keys last fetched from it.
pub struct IdentityProvider {
    pub settings: ProviderSettings,
    client: reqwest::Client,
    rules: DestinationRules,
    keys: RwLock<Option<FetchedKeys>>,
    last_attempt: Mutex<Option<Instant>>,
    fetching: tokio::sync::Mutex<()>,
}

impl IdentityProvider {
    pub fn new(settings: ProviderSettings, rules: DestinationRules) -> anyhow::Result<IdentityProvider> {
        rules.check_url(&settings.issuer).map_err(|why| anyhow::anyhow!("--oidc-issuer {}: {why}", settings.issuer))?;
        let client = esr_outbound::client(
            concat!("esr/", env!("CARGO_PKG_VERSION")),
            rules,
            Duration::from_secs(5),
            Duration::from_secs(10),
        )?;
        Ok(IdentityProvider {
            settings,
            client,
            rules,
            keys: RwLock::new(None),
            last_attempt: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// Whether the keys are missing or old enough to fetch again.
    pub fn keys_are_stale(&self) -> bool {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_none_or(|keys| keys.fetched_at.elapsed() >= KEYS_KEPT_FOR)
    }

    /// Fetches discovery and the key set again, unless another fetch is
    /// running or one was tried within [`REFETCH_AT_MOST_EVERY`]; whether
    /// it fetched.
    pub async fn refetch(&self) -> bool {
        let Ok(_running) = self.fetching.try_lock() else { return false };
        {
            let mut last = self.last_attempt.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < REFETCH_AT_MOST_EVERY) {
                return false;
            }
            *last = Some(Instant::now());
        }
        match self.fetch_keys().await {
            Ok(keys) => {
                tracing::info!(issuer = %self.settings.issuer, keys = keys.len(), "identity provider keys fetched");
                *self.keys.write().unwrap_or_else(PoisonError::into_inner) =
                    Some(FetchedKeys { keys, fetched_at: Instant::now() });
                true
            }
            Err(why) => {
                tracing::warn!(issuer = %self.settings.issuer, error = %why, "identity provider keys not fetched");
                false
            }
        }
    }

    async fn fetch_keys(&self) -> Result<Vec<(String, Algorithm, DecodingKey)>, String> {
        let discovery_url = format!("{}/.well-known/openid-configuration", self.settings.issuer.trim_end_matches('/'));
        let discovery: Value = serde_json::from_slice(&self.get(&discovery_url).await?)
            .map_err(|error| format!("{discovery_url}: not JSON: {error}"))?;
        // OpenID Connect Discovery §4.3: the document must name the issuer
        // it was fetched for.
        if discovery.get("issuer").and_then(Value::as_str) != Some(self.settings.issuer.as_str()) {
            return Err(format!("{discovery_url}: its issuer is not {}", self.settings.issuer));
        }
        let jwks_uri = discovery
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{discovery_url}: names no jwks_uri"))?
            .to_owned();
        let set: JwkSet = serde_json::from_slice(&self.get(&jwks_uri).await?)
            .map_err(|error| format!("{jwks_uri}: not a JSON Web Key Set: {error}"))?;
        let mut keys = Vec::new();
        for jwk in set.keys.iter().take(MAX_KEYS) {
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                continue;
            }
            let (Some(kid), Some(algorithm)) = (jwk.common.key_id.clone(), algorithm_of(jwk)) else { continue };
            if let AlgorithmParameters::OctetKeyPair(okp) = &jwk.algorithm {
                // The verifier reads 32 bytes of it: anything else is refused here.
                let x = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &okp.x);
                if x.map_or(true, |x| x.len() != 32) {
                    continue;
                }
            }
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                keys.push((kid, algorithm, key));
            }
        }
        if keys.is_empty() {
            return Err(format!("{jwks_uri}: holds no signing key this server can use"));
        }
        Ok(keys)
    }

    /// A bounded `GET` through the guard.
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let checked = self.rules.check_url(url).map_err(|why| format!("{url}: {why}"))?;
        let mut response = self.client.get(checked).send().await.map_err(|error| format!("{url}: {error}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| format!("{url}: {error}"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!("{url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Checks a token that names this provider as its issuer.
    pub(crate) fn verify(&self, token: &str, header: &Header, index: usize) -> Result<Verified, Refusal> {
        // Providers that predate RFC 9068 type access tokens `JWT`.
        let typ = header.typ.as_deref().unwrap_or("JWT");
        if !is_access_token_type(typ) && !typ.eq_ignore_ascii_case("JWT") {
            let shown: String = typ.chars().take(40).collect();
            return Err(Refusal::invalid(format!("its type (typ) {shown} is not an access token's")));
        }
        let kid = header.kid.as_deref().ok_or_else(|| Refusal::invalid("it names no key (kid)"))?;
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        let (_, algorithm, key) = keys
            .as_ref()
            .and_then(|keys| keys.keys.iter().find(|(id, _, _)| id == kid))
            .ok_or(Refusal::UnknownKey { provider: Some(index) })?;
        if header.alg != *algorithm {
            return Err(Refusal::invalid("signed with an algorithm its key does not allow"));
        }
        let mut validation = Validation::new(*algorithm);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation)
            .map_err(|error| Refusal::invalid(describe(&error)))?
            .claims;
        let subject = claims.get("sub").and_then(Value::as_str).unwrap_or_default().to_owned();
        let claim = &self.settings.organization_claim;
        let organization_id = claims
            .get(claim)
            .and_then(Value::as_str)
            .and_then(|id| Uuid::try_parse(id).ok())
            .ok_or_else(|| Refusal::invalid(format!("its {claim} claim names no organization")))?;
        if self.settings.organizations.as_ref().is_some_and(|allowed| !allowed.contains(&organization_id)) {
            return Err(Refusal::invalid(format!("its issuer may not speak for organization {organization_id}")));
        }
        let scopes = match claims.get(&self.settings.scopes_claim) {
            Some(Value::String(scopes)) => known_scopes(scopes.split(' ')),
            Some(Value::Array(scopes)) => known_scopes(scopes.iter().filter_map(Value::as_str)),
            _ => Vec::new(),
        };
        // `exp` is required and was checked as a number.
        let expires_at = claims.get("exp").and_then(Value::as_f64).map_or(0, |exp| exp as i64);
        Ok(Verified {
            issuer: self.settings.issuer.clone(),
            subject,
            client_id: None,
            organization_id,
            scopes,
            expires_at,
        })
    }
}

/// The algorithm a key verifies: the one it states, else the one its type
/// implies. Never a symmetric one: a provider's key set is public.
fn algorithm_of(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Algorithm> {
    let stated = jwk.common.key_algorithm.and_then(|algorithm| match algorithm {
        KeyAlgorithm::RS256 => Some(Algorithm::RS256),
        KeyAlgorithm::RS384 => Some(Algorithm::RS384),
        KeyAlgorithm::RS512 => Some(Algorithm::RS512),
        KeyAlgorithm::PS256 => Some(Algorithm::PS256),
        KeyAlgorithm::PS384 => Some(Algorithm::PS384),
        KeyAlgorithm::PS512 => Some(Algorithm::PS512),
        KeyAlgorithm::ES256 => Some(Algorithm::ES256),
        KeyAlgorithm::ES384 => Some(Algorithm::ES384),
        KeyAlgorithm::EdDSA => Some(Algorithm::EdDSA),
        _ => None,
    });
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Some(Algorithm::ES256),
            EllipticCurve::P384 => Some(Algorithm::ES384),
            _ => None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Some(Algorithm::EdDSA),
        AlgorithmParameters::OctetKey(_) => None,
    };
    match (stated, implied) {
        (Some(stated), Some(implied)) if stated.family() == implied.family() => Some(stated),
        (None, implied) => implied,
        _ => None,
    }
}
