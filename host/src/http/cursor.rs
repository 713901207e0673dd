//! Sealed cursors.
//!
//! A component's cursor says where a walk stands; the host seals it with an
//! HMAC over the organization, the collection and the request's filters and
//! sort, so a cursor that is altered, or reused by another organization or
//! with other filters, is refused before any component sees it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

/// Parameters that move through a walk rather than define it.
const PAGING_PARAMETERS: [&str; 3] = ["cursor", "offset", "limit"];
const TAG_BYTES: usize = 16;

/// What a cursor is bound to.
pub struct CursorBinding<'a> {
    pub organization_id: Uuid,
    pub collection: &'a str,
    /// The request's query parameters, in order.
    pub query: &'a [(String, String)],
}

impl CursorBinding<'_> {
    fn mac(&self, key: &[u8; 32], inner: &str) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
        mac.update(self.organization_id.as_bytes());
        mac.update(&[0]);
        mac.update(self.collection.as_bytes());
        mac.update(&[0]);
        // Filters in a canonical order, so `a=1&b=2` and `b=2&a=1` agree.
        let mut defining: Vec<&(String, String)> =
            self.query.iter().filter(|(name, _)| !PAGING_PARAMETERS.contains(&name.as_str())).collect();
        defining.sort();
        for (name, value) in defining {
            mac.update(&(name.len() as u64).to_be_bytes());
            mac.update(name.as_bytes());
            mac.update(&(value.len() as u64).to_be_bytes());
            mac.update(value.as_bytes());
        }
        mac.update(&[0]);
        mac.update(inner.as_bytes());
        Some(mac)
    }

    /// The opaque token for a component's cursor.
    pub fn seal(&self, key: &[u8; 32], inner: &str) -> Option<String> {
        let tag = self.mac(key, inner)?.finalize().into_bytes();
        Some(format!("{}.{}", URL_SAFE_NO_PAD.encode(inner), URL_SAFE_NO_PAD.encode(&tag[..TAG_BYTES])))
    }

    /// The token for a component's cursor read at `position` (see
    /// [`crate::store::StoreReader::position`]): the next page is read at
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
        let (inner, tag) = token.split_once('.')?;
        let inner = String::from_utf8(URL_SAFE_NO_PAD.decode(inner).ok()?).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        // `verify_truncated_left` compares in constant time but accepts any
        // shorter tag, so the length is checked first.
        (tag.len() == TAG_BYTES && self.mac(key, &inner)?.verify_truncated_left(&tag).is_ok()).then_some(inner)
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
