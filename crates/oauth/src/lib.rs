//! OAuth 2.0 for machines: API clients and the client-credentials grant,
//! the signing keys of the tokens this server issues (RFC 9068 JWTs), and
//! the identity providers whose tokens it trusts.
//!
//! `clients` are what operators make; `signing_keys` live in the database
//! so every host issues and accepts the same tokens; `tokens` issues them
//! and checks every token; `identity_providers` fetches a trusted
//! provider's keys through the outbound guard.

pub mod clients;
pub mod identity_providers;
pub mod signing_keys;
mod stored;
pub mod tokens;

pub use identity_providers::{IdentityProvider, ProviderSettings};
pub use tokens::{Authority, Refusal, TokenSettings, Verified};

/// How this server issues tokens and whose it trusts (`esr serve`'s
/// `--oauth-*` and `--oidc-*` flags).
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// `--oauth-token-ttl-secs`.
    pub token_ttl: std::time::Duration,
    /// `--oauth-audience` (default: the public URL and `/v1`).
    pub audience: Option<String>,
    /// The trusted identity providers.
    pub providers: Vec<ProviderSettings>,
    /// Where providers may be fetched from.
    pub provider_rules: esr_outbound::DestinationRules,
}

impl Default for OAuthSettings {
    fn default() -> OAuthSettings {
        OAuthSettings {
            token_ttl: std::time::Duration::from_secs(900),
            audience: None,
            providers: Vec::new(),
            provider_rules: esr_outbound::DestinationRules {
                peers: esr_outbound::Peers::IdentityProviders,
                ..Default::default()
            },
        }
    }
}
