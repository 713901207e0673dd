//! The admin token: where a host finds it, what is stored of it (only its
//! SHA-256 on a shared database: a replica user, a backup or a Citus worker
//! must not yield it) and the entropy an operator's own token must carry.
//! The server checks it (`http::admin_auth`); the command line reads it.

use std::path::Path;

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::keys;
use esr_store::Store;

/// The file the admin token is kept in, in the data directory: the copy
/// the `esr` command line on this machine reads.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// The secret a shared store keeps the admin token's SHA-256 under: the
/// first host's token, whose digest every host of the database compares.
pub const ADMIN_TOKEN_DIGEST_SECRET: &str = "admin-token-sha256";

/// The environment variable an operator sets the admin token with.
pub const ADMIN_TOKEN_VARIABLE: &str = "ESR_ADMIN_TOKEN";

/// The least entropy, in bits, an operator's own admin token must carry.
pub const MIN_TOKEN_BITS: f64 = 128.0;

/// Fewer distinct characters than this is a pattern, not a secret.
const MIN_DISTINCT_CHARACTERS: usize = 8;

/// The SHA-256 hosts compare a presented token against.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.trim().as_bytes()).into()
}

/// A rough estimate of a token's entropy: its length (base64 padding
/// aside) times the bits per character of the smallest usual alphabet
/// holding all its characters (digits, hex, one case and digits, letters
/// and digits, base64, visible ASCII). It catches short or patterned
/// values; it cannot prove a value random.
fn entropy_estimate(token: &str) -> (f64, &'static str) {
    let is_hex_lower = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    let is_hex_upper = |c: char| c.is_ascii_digit() || ('A'..='F').contains(&c);
    let (size, alphabet): (u32, &str) = if token.chars().all(|c| c.is_ascii_digit()) {
        (10, "digits")
    } else if token.chars().all(is_hex_lower) || token.chars().all(is_hex_upper) {
        (16, "hex")
    } else if token.chars().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        || token.chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
    {
        (36, "one-case letters and digits")
    } else if token.chars().all(|c| c.is_ascii_alphanumeric()) {
        (62, "letters and digits")
    } else if token.chars().all(|c| c.is_ascii_alphanumeric() || "-_+/".contains(c)) {
        (64, "base64")
    } else {
        (94, "visible ASCII")
    };
    (token.chars().count() as f64 * f64::from(size).log2(), alphabet)
}

/// Whether an operator's admin token is strong enough: visible ASCII, at
/// least [`MIN_DISTINCT_CHARACTERS`] distinct ones, and an
/// [`entropy_estimate`] of at least [`MIN_TOKEN_BITS`] (32 hex characters,
/// 22 base64 ones). The error says what is wrong and how to make one.
pub fn check_token_strength(token: &str) -> Result<(), String> {
    const HOW: &str = "at least 128 bits are needed, e.g. 32 hex or 22 base64 characters (`openssl rand -hex 16` \
                       makes 32); or unset it and let esr generate one";
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "{ADMIN_TOKEN_VARIABLE} must be visible ASCII characters only (no spaces or control characters); {HOW}"
        ));
    }
    let unpadded = token.trim_end_matches('=');
    let distinct = unpadded.chars().collect::<std::collections::BTreeSet<_>>().len();
    let (bits, alphabet) = entropy_estimate(unpadded);
    if distinct < MIN_DISTINCT_CHARACTERS || bits < MIN_TOKEN_BITS {
        return Err(format!(
            "{ADMIN_TOKEN_VARIABLE} is too weak: {} characters ({distinct} distinct) of {alphabet} carry about {bits:.0} \
             bits of entropy at most; {HOW}",
            unpadded.chars().count()
        ));
    }
    Ok(())
}

/// `ESR_ADMIN_TOKEN`, when set, once it passes [`check_token_strength`].
pub fn environment_token() -> anyhow::Result<Option<String>> {
    match std::env::var(ADMIN_TOKEN_VARIABLE) {
        Ok(token) => {
            let token = token.trim().to_owned();
            check_token_strength(&token).map_err(anyhow::Error::msg)?;
            Ok(Some(token))
        }
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{ADMIN_TOKEN_VARIABLE} is not valid UTF-8; it must be visible ASCII characters")
        }
    }
}

/// The token in `<data-dir>/admin-token`, if there is one.
fn token_on_file(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(token) if !token.trim().is_empty() => Ok(Some(token.trim().to_owned())),
        Ok(_) => Ok(None),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
    }
}

/// A new admin token.
fn new_token() -> String {
    format!("esradm_{}", keys::random_base62(40))
}

/// Writes a new token owner-only to `path`, for the command line on this
/// machine, and shows it once on standard output.
fn keep_and_show(data_dir: &Path, path: &Path, token: &str, note: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(data_dir)?;
    esr_system::private_files::write_private(path, token.as_bytes())?;
    println!(
        "admin token (shown once; the esr command line on this machine reads it from {}, mode 0600; {note}): {token}",
        path.display()
    );
    Ok(())
}

/// The SHA-256 of the admin token this host accepts.
///
/// `ESR_ADMIN_TOKEN` when set (it must carry 128 bits: [`check_token_strength`]).
/// Else, on sled, the token in `<data-dir>/admin-token`, generated on first
/// start. Else, with a `shared` store (a database several hosts serve), the
/// digest the database keeps: the first host stores its token's digest
/// (`<data-dir>/admin-token`'s, or a new one's, shown once and written
/// there) and every later host compares against it. The token itself is
/// never stored in the database, so a later host cannot recover it: the
/// command line on its machine needs `ESR_ADMIN_TOKEN` or a copy of the
/// first host's file, and the host says so at start.
pub fn admin_token_digest(data_dir: &Path, shared: Option<&dyn Store>) -> anyhow::Result<[u8; 32]> {
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    if let Some(token) = environment_token()? {
        let digest = token_digest(&token);
        if let Some(store) = shared
            && store.secret_if_absent(ADMIN_TOKEN_DIGEST_SECRET, digest)? != digest
        {
            tracing::warn!(
                "{ADMIN_TOKEN_VARIABLE} is not the admin token this database's other hosts accept: this host accepts \
                 {ADMIN_TOKEN_VARIABLE} alone; set the same token on every host"
            );
        }
        return Ok(digest);
    }
    let on_file = token_on_file(&path)?;
    let Some(store) = shared else {
        let token = match on_file {
            Some(token) => token,
            None => {
                let token = new_token();
                keep_and_show(data_dir, &path, &token, "keep it safe")?;
                token
            }
        };
        return Ok(token_digest(&token));
    };
    let stored = store.secrets()?.into_iter().find(|(name, _)| name == ADMIN_TOKEN_DIGEST_SECRET);
    let stored = match stored {
        Some((_, digest)) => Some(<[u8; 32]>::try_from(digest.as_slice()).map_err(|_| {
            anyhow::anyhow!("the database's {ADMIN_TOKEN_DIGEST_SECRET} setting is not a SHA-256 digest")
        })?),
        None => None,
    };
    let (digest, file_token) = match (stored, on_file) {
        (Some(stored), on_file) => (stored, on_file),
        // The first host: its file's token (a host that kept one) or a new one.
        (None, Some(token)) => (store.secret_if_absent(ADMIN_TOKEN_DIGEST_SECRET, token_digest(&token))?, Some(token)),
        (None, None) => {
            // Shown and written only once stored: another host may store first.
            let fresh = new_token();
            let candidate = token_digest(&fresh);
            let digest = store.secret_if_absent(ADMIN_TOKEN_DIGEST_SECRET, candidate)?;
            if digest == candidate {
                let note = format!(
                    "the database keeps only its SHA-256, so the other hosts' machines need it as \
                     {ADMIN_TOKEN_VARIABLE} or a copy of that file"
                );
                keep_and_show(data_dir, &path, &fresh, &note)?;
                return Ok(digest);
            }
            (digest, None)
        }
    };
    match file_token {
        Some(token) if token_digest(&token) == digest => {}
        Some(_) => tracing::warn!(
            file = %path.display(),
            "this file holds an admin token the database does not accept (the hosts accept the token whose SHA-256 \
             the database keeps); the esr command line on this machine needs that token: set {ADMIN_TOKEN_VARIABLE}, \
             or replace the file with the first host's copy (mode 0600)"
        ),
        None => tracing::warn!(
            file = %path.display(),
            "this database's admin token was created by another host and is kept only as its SHA-256, so this host \
             cannot show it; this host accepts it. For the esr command line on this machine set {ADMIN_TOKEN_VARIABLE}, \
             or copy the first host's <data-dir>/admin-token to this file (mode 0600)"
        ),
    }
    Ok(digest)
}

/// The token a CLI subcommand uses to reach a running server:
/// `ESR_ADMIN_TOKEN`, else `<data-dir>/admin-token`.
pub fn read_admin_token(data_dir: &Path) -> anyhow::Result<String> {
    if let Ok(token) = std::env::var(ADMIN_TOKEN_VARIABLE) {
        return Ok(token.trim().to_owned());
    }
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    std::fs::read_to_string(&path).map(|t| t.trim().to_owned()).with_context(|| {
        format!(
            "no admin token in {} (set {ADMIN_TOKEN_VARIABLE}, or --data-dir to the server's; a host that shares a \
             database with others has it only if it created it or the operator copied it there)",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_under_128_bits_are_refused_and_usual_random_ones_accepted() {
        for weak in [
            "",
            "esradm_short",
            "0123456789abcdef",                             // 16 hex: 64 bits
            "0123456789abcdef0123456789abcde",              // 31 hex: 124 bits
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", // one character
            "correct horse battery staple",                 // spaces
            "1234567890123456789012345678901234567",        // 37 digits: 123 bits
        ] {
            assert!(check_token_strength(weak).is_err(), "{weak:?} accepted");
        }
        let Err(message) = check_token_strength("0123456789abcdef") else { panic!("64 bits accepted") };
        assert!(message.contains("about 64 bits") && message.contains("32 hex"), "{message}");
        for strong in [
            "0123456789abcdef0123456789abcdef",                // 32 hex, `openssl rand -hex 16`
            "Zm9vYmFyYmF6cXV4cXV1eA==",                        // 22 base64 characters and padding
            "esradm_0123456789abcdefghijABCDEFGHIJ0123456789", // what esr generates
            "f3a9c1e07b2d48e6a5c9d0b1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1",
        ] {
            assert_eq!(check_token_strength(strong), Ok(()), "{strong:?}");
        }
    }
}
