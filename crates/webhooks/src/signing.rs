//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256>` of
//! `{id}.{timestamp}.{body}` under each secret still valid, space-separated.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What every secret starts with; the rest is the key, in base64.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new secret: 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The key a secret holds (`None` for one that is not ours).
fn key_of(secret: &str) -> Option<Vec<u8>> {
    STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()
}

/// The `webhook-signature` header's value for a message signed with each
/// of `secrets` (the newest first).
pub fn signature_header<'s>(
    secrets: impl IntoIterator<Item = &'s str>,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    let mut signatures = Vec::new();
    for secret in secrets {
        let Some(key) = key_of(secret) else { continue };
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key) else { continue };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        signatures.push(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())));
    }
    signatures.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's test vectors.
    #[test]
    fn signs_as_the_specification_example() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature_header([secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn two_secrets_sign_twice_and_a_foreign_one_not_at_all() {
        let (a, b) = (new_secret(), new_secret());
        let both = signature_header([a.as_str(), b.as_str(), "not-ours"], "msg_1", 1, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], signature_header([a.as_str()], "msg_1", 1, b"{}"));
        assert_ne!(parts[0], parts[1]);
    }
}
