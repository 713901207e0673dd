//! API keys: creation, hashing and lookup.
//!
//! A key is `esr_` followed by 32 base62 characters of randomness (190
//! bits) and a 6-character base62 CRC-32 of them, so a mistyped or
//! truncated key is rejected without a storage lookup and secret scanners
//! can recognise leaked keys. Only the SHA-256 of the key is stored.

use esr_contract::time::Timestamp;
use rand::Rng;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use esr_store::{ApiKeyRecord, Organization, Store, StoreError};

/// The prefix every API key starts with.
pub const KEY_PREFIX: &str = "esr_";
const RANDOM_CHARS: usize = 32;
const CHECKSUM_CHARS: usize = 6;
const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Read scopes, as the contract names them.
pub const SCOPE_ENDPOINTS: &str = "endpoints:read";
pub const SCOPE_TARGETS: &str = "targets:read";
pub const SCOPE_SCOPES: &str = "scopes:read";
pub const SCOPE_FINDINGS: &str = "findings:read";
pub const SCOPE_AGENT_CONFIG: &str = "agent:config:read";
pub const ALL_READ_SCOPES: [&str; 5] =
    [SCOPE_ENDPOINTS, SCOPE_TARGETS, SCOPE_SCOPES, SCOPE_FINDINGS, SCOPE_AGENT_CONFIG];

/// What a caller presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    ApiKey,
    /// An access token this server issued to an API client.
    Client,
    /// An access token of a trusted identity provider.
    Token {
        issuer: String,
        subject: String,
    },
}

/// Who is calling: the organization a valid credential speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The API key's or the client's id; for a provider's token, one
    /// derived from its issuer and subject. Its rate limit is charged here.
    pub id: Uuid,
    pub credential: Credential,
    pub organization_id: Uuid,
    pub scopes: Vec<String>,
}

impl Principal {
    /// Whether it presented an access token (not an API key).
    pub fn is_token(&self) -> bool {
        self.credential != Credential::ApiKey
    }

    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    Missing,
    Invalid,
    /// An access token refused, and why (RFC 6750 `invalid_token`).
    InvalidToken(String),
}

/// What an `Authorization: Bearer` header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bearer<'a> {
    /// A well-formed API key.
    Key(&'a str),
    /// Anything shaped as a JWT (three dot-separated parts).
    Token(&'a str),
}

/// A newly created key: shown once, then only its hash exists.
pub struct CreatedKey {
    pub api_key: String,
    pub record: ApiKeyRecord,
}

/// A new organization (not yet stored) with a fresh id and enrollment secret.
pub fn new_organization(name: &str, created_at: String) -> Organization {
    Organization {
        organization_id: Uuid::now_v7(),
        name: name.to_owned(),
        enrollment_token: format!("enroll_{}", random_base62(32)),
        created_at,
    }
}

/// Creates and stores a key for the organization, valid until
/// `expires_at` (RFC 3339) when given.
pub fn create_key(
    db: &dyn Store,
    organization_id: Uuid,
    name: &str,
    scopes: &[&str],
    expires_at: Option<String>,
) -> Result<CreatedKey, StoreError> {
    let api_key = generate_key();
    let record = ApiKeyRecord {
        id: Uuid::now_v7(),
        organization_id,
        name: name.to_owned(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        prefix: api_key.chars().take(KEY_PREFIX.len() + 6).collect(),
        created_at: esr_system::clock::now_rfc3339(),
        expires_at,
        revoked_at: None,
        last_used_at: None,
    };
    db.insert_api_key(&hash_key(&api_key), &record)?;
    Ok(CreatedKey { api_key, record })
}

/// Why a key was not rotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRotated {
    /// No key has this id.
    Unknown,
    /// The key was revoked, at this time.
    Revoked(String),
    /// The key expired, at this time.
    Expired(String),
}

/// A rotation's outcome: the new key (shown once) and the replaced key's
/// record as it now stands (its expiry the overlap's end, or its own when
/// sooner).
pub struct Rotation {
    pub created: CreatedKey,
    pub replaced: ApiKeyRecord,
}

/// Rotates the key with this id without downtime: issues a new key of the
/// same organization, name, scopes and expiry, then has the old key expire
/// `overlap` from now unless it expires sooner, so both work meanwhile. A
/// revoked or expired key is not rotated.
pub fn rotate_key(
    db: &dyn Store,
    id: Uuid,
    overlap: std::time::Duration,
) -> Result<Result<Rotation, NotRotated>, StoreError> {
    let Some(old) = db.api_keys(None)?.into_iter().find(|key| key.id == id) else {
        return Ok(Err(NotRotated::Unknown));
    };
    if let Some(at) = &old.revoked_at {
        return Ok(Err(NotRotated::Revoked(at.clone())));
    }
    if !is_usable(&old) {
        return Ok(Err(NotRotated::Expired(old.expires_at.unwrap_or_default())));
    }
    let scopes: Vec<&str> = old.scopes.iter().map(String::as_str).collect();
    let created = create_key(db, old.organization_id, &old.name, &scopes, old.expires_at.clone())?;
    // In whole seconds, rounded up: the overlap is never cut short.
    let overlap_seconds = i64::try_from(overlap.as_secs() + u64::from(overlap.subsec_nanos() > 0)).unwrap_or(i64::MAX);
    let overlap_ends = esr_system::clock::unix_now().saturating_add(overlap_seconds);
    let sooner = old
        .expires_at
        .as_deref()
        .and_then(Timestamp::parse)
        .is_some_and(|at| at.0 <= overlap_ends.saturating_mul(1_000_000_000));
    let replaced = if sooner {
        old
    } else {
        let expires_at = esr_system::clock::format_timestamp(overlap_ends);
        // A key is never deleted, only revoked: it is still there.
        db.set_api_key_expiry(id, &expires_at)?.unwrap_or(ApiKeyRecord { expires_at: Some(expires_at), ..old })
    };
    Ok(Ok(Rotation { created, replaced }))
}

/// The principal for an `Authorization` header value.
pub fn authenticate(db: &dyn Store, authorization: Option<&str>) -> Result<Result<Principal, AuthFailure>, StoreError> {
    match bearer_key(authorization) {
        Ok(key) => principal_of_key(db, key),
        Err(failure) => Ok(Err(failure)),
    }
}

/// The well-formed API key an `Authorization` header value carries, found
/// without the store.
pub fn bearer_key(authorization: Option<&str>) -> Result<&str, AuthFailure> {
    match bearer(authorization)? {
        Bearer::Key(key) => Ok(key),
        Bearer::Token(_) => Err(AuthFailure::Invalid),
    }
}

/// The API key or access token an `Authorization` header value carries.
pub fn bearer(authorization: Option<&str>) -> Result<Bearer<'_>, AuthFailure> {
    let header = authorization.ok_or(AuthFailure::Missing)?;
    let (scheme, credential) = header.trim().split_once(' ').ok_or(AuthFailure::Invalid)?;
    let credential = credential.trim();
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthFailure::Invalid);
    }
    if is_well_formed(credential) {
        Ok(Bearer::Key(credential))
    } else if credential.split('.').count() == 3 {
        Ok(Bearer::Token(credential))
    } else {
        Err(AuthFailure::Invalid)
    }
}

/// The principal of a well-formed key: its stored record, when the key is
/// neither revoked nor expired.
pub fn principal_of_key(db: &dyn Store, key: &str) -> Result<Result<Principal, AuthFailure>, StoreError> {
    principal_of_hash(db, &hash_key(key))
}

/// [`principal_of_key`] by the key's hash.
pub fn principal_of_hash(db: &dyn Store, hash: &[u8; 32]) -> Result<Result<Principal, AuthFailure>, StoreError> {
    Ok(principal_of_record(db.api_key(hash)?))
}

/// The principal of the key record a lookup found.
pub fn principal_of_record(record: Option<ApiKeyRecord>) -> Result<Principal, AuthFailure> {
    match record {
        Some(record) if is_usable(&record) => Ok(Principal {
            id: record.id,
            credential: Credential::ApiKey,
            organization_id: record.organization_id,
            scopes: record.scopes,
        }),
        // Unknown, revoked and expired keys look the same to the caller.
        _ => Err(AuthFailure::Invalid),
    }
}

/// Not revoked, and not past its expiry.
fn is_usable(record: &ApiKeyRecord) -> bool {
    let expired = record
        .expires_at
        .as_deref()
        .is_some_and(|at| Timestamp::parse(at).is_none_or(|at| at.0 <= esr_system::clock::unix_now_nanos()));
    record.revoked_at.is_none() && !expired
}

/// A new key: random, with its checksum.
pub fn generate_key() -> String {
    let random = random_base62(RANDOM_CHARS);
    format!("{KEY_PREFIX}{random}{}", checksum(&random))
}

/// `chars` characters of base62 from the operating system's CSPRNG.
pub fn random_base62(chars: usize) -> String {
    let mut rng = OsRng;
    (0..chars).map(|_| char::from(BASE62[rng.gen_range(0..BASE62.len())])).collect()
}

fn checksum(random: &str) -> String {
    let mut value = u64::from(crc32fast::hash(random.as_bytes()));
    let mut digits = [b'0'; CHECKSUM_CHARS];
    for digit in digits.iter_mut().rev() {
        *digit = BASE62[(value % 62) as usize];
        value /= 62;
    }
    String::from_utf8_lossy(&digits).into_owned()
}

/// Whether `key` has the shape and checksum of a key this service issues.
fn is_well_formed(key: &str) -> bool {
    let Some(body) = key.strip_prefix(KEY_PREFIX) else { return false };
    if body.len() != RANDOM_CHARS + CHECKSUM_CHARS || !body.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return false;
    }
    let (random, check) = body.split_at(RANDOM_CHARS);
    checksum(random) == check
}

/// SHA-256 of the key: a key of 190 random bits needs no slow hash.
pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefixed_random_and_checksummed() {
        let (a, b) = (generate_key(), generate_key());
        assert_ne!(a, b);
        assert!(a.starts_with(KEY_PREFIX));
        assert!(is_well_formed(&a));
        let mut typo = a.clone().into_bytes();
        typo[10] = if typo[10] == b'a' { b'b' } else { b'a' };
        assert!(!is_well_formed(&String::from_utf8_lossy(&typo)));
        assert!(!is_well_formed(&a[..a.len() - 1]));
    }

    #[test]
    fn a_created_key_authenticates_and_nothing_else_does() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let db = esr_store_sled::SledStore::open(dir.path())?;
        let db = &db;
        let organization = Uuid::now_v7();
        let created = create_key(db, organization, "test", &[SCOPE_SCOPES], None)?;
        // That only its hash reaches the disk is checked on the running
        // server's whole data directory (`tests/it/ingest.rs`).
        let principal = authenticate(db, Some(&format!("Bearer {}", created.api_key)))?;
        assert_eq!(principal.map(|p| p.organization_id), Ok(organization));
        assert_eq!(authenticate(db, None)?, Err(AuthFailure::Missing));
        assert_eq!(authenticate(db, Some("Bearer nope"))?, Err(AuthFailure::Invalid));
        assert_eq!(authenticate(db, Some(&format!("Basic {}", created.api_key)))?, Err(AuthFailure::Invalid));

        // Expired and revoked keys stop authenticating at once.
        let bearer = |key: &CreatedKey| format!("Bearer {}", key.api_key);
        let expired = create_key(db, organization, "old", &[SCOPE_SCOPES], Some("2020-01-01T00:00:00Z".into()))?;
        assert_eq!(authenticate(db, Some(&bearer(&expired)))?, Err(AuthFailure::Invalid));
        let future = create_key(db, organization, "new", &[SCOPE_SCOPES], Some("2100-01-01T00:00:00Z".into()))?;
        assert_eq!(authenticate(db, Some(&bearer(&future)))?.map(|p| p.id), Ok(future.record.id));
        db.revoke_api_key(future.record.id, "2026-11-22T00:00:00Z")?;
        assert_eq!(authenticate(db, Some(&bearer(&future)))?, Err(AuthFailure::Invalid));
        assert_eq!(
            authenticate(db, Some(&bearer(&created)))?.map(|p| p.id),
            Ok(created.record.id),
            "others unaffected"
        );
        Ok(())
    }

    #[test]
    fn a_rotated_key_keeps_working_for_the_overlap_beside_its_successor() -> Result<(), StoreError> {
        let dir = tempfile::tempdir()?;
        let db = esr_store_sled::SledStore::open(dir.path())?;
        let db = &db;
        let bearer = |key: &str| format!("Bearer {key}");
        let organization = Uuid::now_v7();
        let old = create_key(db, organization, "siem", &[SCOPE_SCOPES, SCOPE_FINDINGS], None)?;
        let hour = std::time::Duration::from_secs(3600);
        let Ok(rotation) = rotate_key(db, old.record.id, hour)? else { panic!("an active key rotates") };
        let new = &rotation.created.record;
        assert_ne!(new.id, old.record.id);
        assert_eq!(
            (new.organization_id, new.name.as_str(), &new.scopes, &new.expires_at),
            (organization, "siem", &old.record.scopes, &None)
        );
        let ends = rotation.replaced.expires_at.as_deref().and_then(Timestamp::parse).expect("an expiry").0;
        let in_an_hour = esr_system::clock::unix_now_nanos() + 3_600_000_000_000;
        assert!((in_an_hour - 2_000_000_000..=in_an_hour + 2_000_000_000).contains(&ends), "{ends}");
        for key in [&old.api_key, &rotation.created.api_key] {
            assert!(authenticate(db, Some(&bearer(key)))?.is_ok(), "both work during the overlap");
        }

        // A key that expires sooner than the overlap keeps its expiry, and
        // its successor has the same.
        let soon = esr_system::clock::format_timestamp(esr_system::clock::unix_now() + 60);
        let short = create_key(db, organization, "short", &[SCOPE_SCOPES], Some(soon.clone()))?;
        let Ok(rotation) = rotate_key(db, short.record.id, hour)? else { panic!("an active key rotates") };
        assert_eq!(rotation.replaced.expires_at.as_deref(), Some(soon.as_str()));
        assert_eq!(rotation.created.record.expires_at.as_deref(), Some(soon.as_str()));

        // Revoked, expired and unknown keys are not rotated.
        db.revoke_api_key(short.record.id, "2026-11-22T00:00:00Z")?;
        assert_eq!(
            rotate_key(db, short.record.id, hour)?.err(),
            Some(NotRotated::Revoked("2026-11-22T00:00:00Z".into()))
        );
        let expired = create_key(db, organization, "old", &[SCOPE_SCOPES], Some("2020-01-01T00:00:00Z".into()))?;
        assert_eq!(
            rotate_key(db, expired.record.id, hour)?.err(),
            Some(NotRotated::Expired("2020-01-01T00:00:00Z".into()))
        );
        assert_eq!(rotate_key(db, Uuid::now_v7(), hour)?.err(), Some(NotRotated::Unknown));
        Ok(())
    }
}
