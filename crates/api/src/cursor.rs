//! Sealed cursors.
//!
//! A component's cursor says where a walk stands, and the host adds the
//! database position the walk reads at; the host seals both with
//! authenticated encryption (XChaCha20-Poly1305) bound to the organization,
//! the collection and the request's filters and sort, so a cursor is
//! opaque (a tenant cannot read positions that move with other tenants'
//! writes), and one that is altered, or reused by another organization or
//! with other filters, is refused before any component sees it.
//!
//! The nonce is synthetic (an HMAC of the binding and the plaintext under a
//! key of its own), so the same page's cursor is the same token, which
//! keeps ETags of list pages stable; equal tokens only say equal cursors.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

/// Parameters that move through a walk rather than define it.
const PAGING_PARAMETERS: [&str; 3] = ["cursor", "offset", "limit"];
/// The tag length of a cursor sealed by an older host (`inner.tag`, an
/// HMAC in clear text): still opened, so a walk survives an upgrade.
const LEGACY_TAG_BYTES: usize = 16;
/// The first byte of a token: its format.
const SEALED_V1: u8 = 1;
const NONCE_BYTES: usize = 24;

/// What a cursor is bound to.
pub struct CursorBinding<'a> {
    pub organization_id: Uuid,
    pub collection: &'a str,
    /// The request's query parameters, in order.
    pub query: &'a [(String, String)],
}

fn hmac(key: &[u8]) -> Option<Hmac<Sha256>> {
    <Hmac<Sha256> as Mac>::new_from_slice(key).ok()
}

/// A key of its own for each use of the host's cursor key.
fn derived_key(key: &[u8; 32], purpose: &str) -> Option<[u8; 32]> {
    let mut mac = hmac(key)?;
    mac.update(purpose.as_bytes());
    Some(mac.finalize().into_bytes().into())
}

impl CursorBinding<'_> {
    /// The organization, the collection and the defining filters in a
    /// canonical order (so `a=1&b=2` and `b=2&a=1` agree), each length-prefixed.
    fn bound_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(self.organization_id.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(self.collection.as_bytes());
        bytes.push(0);
        let mut defining: Vec<&(String, String)> =
            self.query.iter().filter(|(name, _)| !PAGING_PARAMETERS.contains(&name.as_str())).collect();
        defining.sort();
        for (name, value) in defining {
            bytes.extend_from_slice(&(name.len() as u64).to_be_bytes());
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(&(value.len() as u64).to_be_bytes());
            bytes.extend_from_slice(value.as_bytes());
        }
        bytes.push(0);
        bytes
    }

    /// The opaque token for a component's cursor.
    pub fn seal(&self, key: &[u8; 32], inner: &str) -> Option<String> {
        let bound = self.bound_bytes();
        let mut nonce_mac = hmac(&derived_key(key, "esr cursor nonce")?)?;
        nonce_mac.update(&bound);
        nonce_mac.update(inner.as_bytes());
        let nonce_bytes = nonce_mac.finalize().into_bytes();
        let nonce = XNonce::from_slice(&nonce_bytes[..NONCE_BYTES]);
        let cipher = XChaCha20Poly1305::new_from_slice(&derived_key(key, "esr cursor encryption")?).ok()?;
        let sealed = cipher.encrypt(nonce, Payload { msg: inner.as_bytes(), aad: &bound }).ok()?;
        let mut token = Vec::with_capacity(1 + NONCE_BYTES + sealed.len());
        token.push(SEALED_V1);
        token.extend_from_slice(nonce);
        token.extend_from_slice(&sealed);
        Some(URL_SAFE_NO_PAD.encode(token))
    }

    /// The token for a component's cursor read at `position` (see
    /// [`esr_store::StoreReader::position`]): the next page is read at
    /// that position or later, so a walk never goes back in time.
    pub fn seal_at(&self, key: &[u8; 32], inner: &str, position: u64) -> Option<String> {
        self.seal(key, &format!("{position:x}:{inner}"))
    }

    /// The component's cursor and its position inside a token from [`seal_at`].
    /// A token sealed by [`seal`] (by a host from before positions) carries
    /// none: it reads from position 0, so a walk survives an upgrade.
    ///
    /// [`seal_at`]: CursorBinding::seal_at
    /// [`seal`]: CursorBinding::seal
    pub fn open_at(&self, key: &[u8; 32], token: &str) -> Option<(String, u64)> {
        let opened = self.open(key, token)?;
        let positioned = opened.split_once(':').and_then(|(position, inner)| {
            let hex = !position.is_empty() && position.bytes().all(|byte| byte.is_ascii_hexdigit());
            hex.then(|| u64::from_str_radix(position, 16).ok().map(|position| (inner.to_owned(), position)))?
        });
        Some(positioned.unwrap_or((opened, 0)))
    }

    /// The component's cursor inside a token, if this binding sealed it.
    pub fn open(&self, key: &[u8; 32], token: &str) -> Option<String> {
        if token.contains('.') {
            return self.open_legacy(key, token);
        }
        let token = URL_SAFE_NO_PAD.decode(token).ok()?;
        let (&format, rest) = token.split_first()?;
        if format != SEALED_V1 || rest.len() < NONCE_BYTES {
            return None;
        }
        let (nonce, sealed) = rest.split_at(NONCE_BYTES);
        let cipher = XChaCha20Poly1305::new_from_slice(&derived_key(key, "esr cursor encryption")?).ok()?;
        let inner =
            cipher.decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad: &self.bound_bytes() }).ok()?;
        String::from_utf8(inner).ok()
    }

    /// A cursor an older host sealed: `inner.tag`, the tag an HMAC over the
    /// binding and the cursor.
    fn open_legacy(&self, key: &[u8; 32], token: &str) -> Option<String> {
        let (inner, tag) = token.split_once('.')?;
        let inner = String::from_utf8(URL_SAFE_NO_PAD.decode(inner).ok()?).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut mac = hmac(key)?;
        mac.update(&self.bound_bytes());
        mac.update(inner.as_bytes());
        // `verify_truncated_left` compares in constant time but accepts any
        // shorter tag, so the length is checked first.
        (tag.len() == LEGACY_TAG_BYTES && mac.verify_truncated_left(&tag).is_ok()).then_some(inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_cursor_opens_only_where_it_was_issued() {
        let key = [7u8; 32];
        let org = Uuid::now_v7();
        let filters = query(&[("status", "open"), ("sort", "-severity"), ("limit", "10")]);
        let binding = CursorBinding { organization_id: org, collection: "vulnerability-findings", query: &filters };
        let token = binding.seal(&key, r#"{"after":1}"#).expect("seal");
        assert_eq!(binding.open(&key, &token).as_deref(), Some(r#"{"after":1}"#));

        let reordered = query(&[("limit", "20"), ("sort", "-severity"), ("status", "open"), ("cursor", "x")]);
        let same = CursorBinding { query: &reordered, ..binding };
        assert!(same.open(&key, &token).is_some(), "paging parameters and order do not bind");

        let other_filter = query(&[("status", "resolved"), ("sort", "-severity")]);
        assert!(CursorBinding { query: &other_filter, ..binding }.open(&key, &token).is_none());
        assert!(CursorBinding { organization_id: Uuid::now_v7(), ..binding }.open(&key, &token).is_none());
        assert!(CursorBinding { collection: "endpoints", ..binding }.open(&key, &token).is_none());
        assert!(binding.open(&[8u8; 32], &token).is_none());

        let at = binding.seal_at(&key, r#"{"after":1}"#, 0x2a_0000_1234).expect("seal at");
        assert_eq!(binding.open_at(&key, &at), Some((r#"{"after":1}"#.to_owned(), 0x2a_0000_1234)));
        assert_eq!(
            binding.open_at(&key, &token),
            Some((r#"{"after":1}"#.to_owned(), 0)),
            "a cursor sealed without a position reads from position 0"
        );
        assert!(!token.contains("after"), "the cursor is opaque: {token}");
        let decoded = URL_SAFE_NO_PAD.decode(&at).expect("base64url");
        assert!(
            !decoded.windows(5).any(|window| window == b"after") && !at.contains("2a00001234"),
            "neither the cursor nor its position shows"
        );
        assert_eq!(binding.seal(&key, r#"{"after":1}"#), Some(token.clone()), "the same cursor is the same token");

        // A cursor sealed by an older host (an HMAC in clear) still opens, here only.
        let mut mac = hmac(&key).expect("a 32-byte key");
        mac.update(&binding.bound_bytes());
        mac.update(b"7:{\"after\":2}");
        let tag = mac.finalize().into_bytes();
        let legacy = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(b"7:{\"after\":2}"),
            URL_SAFE_NO_PAD.encode(&tag[..LEGACY_TAG_BYTES])
        );
        assert_eq!(binding.open_at(&key, &legacy), Some((r#"{"after":2}"#.to_owned(), 7)));
        assert!(CursorBinding { collection: "endpoints", ..binding }.open(&key, &legacy).is_none());

        for index in 0..token.len() {
            let mut altered = token.clone().into_bytes();
            altered[index] = if altered[index] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8_lossy(&altered).into_owned();
            if altered != token {
                assert!(binding.open(&key, &altered).is_none(), "byte {index} altered");
            }
        }
    }
}
