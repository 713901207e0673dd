//! `esr serve`'s OAuth 2.0 flags, `esr clients …` and `esr signing-keys …`
//! (through a running server's admin listener).

use std::time::Duration;

use clap::Subcommand;
use esr_oauth::{OAuthSettings, ProviderSettings};
use esr_outbound::{DestinationRules, Peers};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{AdminArgs, admin_client, text};

/// How access tokens are issued and whose are trusted (`esr serve`).
#[derive(clap::Args)]
pub struct OAuthArgs {
    /// Seconds an access token issued at /oauth2/token is valid.
    #[arg(long, env = "ESR_OAUTH_TOKEN_TTL_SECS", default_value_t = 900, value_parser = clap::value_parser!(u64).range(60..=86_400))]
    oauth_token_ttl_secs: u64,
    /// The audience (aud) of the tokens this server issues and accepts
    /// (default: the public URL and /v1).
    #[arg(long, env = "ESR_OAUTH_AUDIENCE")]
    oauth_audience: Option<String>,
    /// An identity provider whose access tokens are accepted (its issuer
    /// URL, exactly as its tokens' iss); repeat for several, each with its
    /// --oidc-audience.
    #[arg(long = "oidc-issuer", env = "ESR_OIDC_ISSUER", value_delimiter = ' ')]
    oidc_issuers: Vec<String>,
    /// The audience (aud) the tokens of the --oidc-issuer at the same
    /// position must carry.
    #[arg(long = "oidc-audience", env = "ESR_OIDC_AUDIENCE", value_delimiter = ' ')]
    oidc_audiences: Vec<String>,
    /// The organizations the --oidc-issuer at the same position may speak
    /// for, comma-separated, or `*` for any (when the flag is not given at
    /// all, every issuer may speak for any organization).
    #[arg(long = "oidc-organizations", env = "ESR_OIDC_ORGANIZATIONS", value_delimiter = ' ')]
    oidc_organizations: Vec<String>,
    /// The claim naming a provider's token's organization (its id).
    #[arg(long, env = "ESR_OIDC_ORGANIZATION_CLAIM", default_value = "esr_org")]
    oidc_organization_claim: String,
    /// The claim holding a provider's token's scopes (a space-separated
    /// string or an array).
    #[arg(long, env = "ESR_OIDC_SCOPES_CLAIM", default_value = "scope")]
    oidc_scopes_claim: String,
    /// Allow an identity provider at an `http` URL (else `https` only).
    #[arg(long, env = "ESR_OIDC_ALLOW_HTTP")]
    oidc_allow_http: bool,
    /// Allow an identity provider at a loopback, private or other
    /// non-public address: for tests and closed networks.
    #[arg(long, env = "ESR_OIDC_ALLOW_PRIVATE")]
    oidc_allow_private: bool,
}

impl OAuthArgs {
    pub fn settings(&self) -> anyhow::Result<OAuthSettings> {
        if self.oidc_issuers.len() != self.oidc_audiences.len() {
            anyhow::bail!(
                "each --oidc-issuer needs its --oidc-audience ({} issuers, {} audiences)",
                self.oidc_issuers.len(),
                self.oidc_audiences.len()
            );
        }
        if !self.oidc_organizations.is_empty() && self.oidc_organizations.len() != self.oidc_issuers.len() {
            anyhow::bail!(
                "--oidc-organizations, when given, is given once per --oidc-issuer ({} issuers, {} lists)",
                self.oidc_issuers.len(),
                self.oidc_organizations.len()
            );
        }
        let mut providers = Vec::new();
        for (index, (issuer, audience)) in self.oidc_issuers.iter().zip(&self.oidc_audiences).enumerate() {
            let organizations = match self.oidc_organizations.get(index).map(String::as_str) {
                None | Some("*") => None,
                Some(list) => Some(
                    list.split(',')
                        .map(|id| {
                            Uuid::try_parse(id.trim())
                                .map_err(|_| anyhow::anyhow!("--oidc-organizations: {id} is not an organization id"))
                        })
                        .collect::<anyhow::Result<Vec<Uuid>>>()?,
                ),
            };
            providers.push(ProviderSettings {
                issuer: issuer.clone(),
                audience: audience.clone(),
                organization_claim: self.oidc_organization_claim.clone(),
                scopes_claim: self.oidc_scopes_claim.clone(),
                organizations,
            });
        }
        Ok(OAuthSettings {
            token_ttl: Duration::from_secs(self.oauth_token_ttl_secs),
            audience: self.oauth_audience.clone(),
            providers,
            provider_rules: DestinationRules {
                allow_http: self.oidc_allow_http,
                allow_private: self.oidc_allow_private,
                peers: Peers::IdentityProviders,
            },
        })
    }
}

/// `90d`, `12h`, `30m` or `3600s` from now, as RFC 3339.
pub fn expires_in(text: &str) -> anyhow::Result<String> {
    let (number, unit) = text.split_at(text.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len());
    let number: u64 = number.parse().map_err(|_| anyhow::anyhow!("--expires-in {text}: not like 90d, 12h or 30m"))?;
    let seconds = match unit {
        "d" => number.checked_mul(86_400),
        "h" => number.checked_mul(3_600),
        "m" => number.checked_mul(60),
        "s" | "" => Some(number),
        _ => None,
    }
    .filter(|seconds| (1..=100 * 365 * 86_400).contains(seconds))
    .ok_or_else(|| anyhow::anyhow!("--expires-in {text}: not like 90d, 12h or 30m (at most 100 years)"))?;
    Ok(esr_system::clock::format_timestamp(esr_system::clock::unix_now().saturating_add(seconds as i64)))
}

/// `esr clients …`.
#[derive(Subcommand)]
pub enum ClientsCommand {
    /// Create an API client for the client-credentials grant; its secret
    /// is printed this once.
    Create {
        /// The id of the organization whose records the client reads.
        #[arg(long)]
        organization: String,
        /// A name to tell the client by (e.g. the integration using it).
        #[arg(long)]
        name: String,
        /// A read scope; repeat for several (default: every read scope).
        #[arg(long = "scope", value_parser = clap::builder::PossibleValuesParser::new(esr_auth::keys::ALL_READ_SCOPES))]
        scopes: Vec<String>,
        /// How long until the client stops working: 90d, 12h, 30m.
        #[arg(long)]
        expires_in: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List clients (never their secrets).
    List {
        /// Only this organization's clients.
        #[arg(long)]
        organization: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Revoke a client: its secret at once, its tokens within seconds.
    Revoke {
        /// The client's id.
        client_id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Give a client a new secret (printed this once); the old one stops.
    RotateSecret {
        /// The client's id.
        client_id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// `esr signing-keys …`.
#[derive(Subcommand)]
pub enum SigningKeysCommand {
    /// List the keys tokens are signed with (never a private key).
    List(AdminArgs),
    /// Sign with a new key from now on; the old ones stay published until
    /// the tokens they signed have expired.
    Rotate(AdminArgs),
}

fn print_client(client: &Value) {
    let scopes: Vec<&str> = client["scopes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let state = match (client["state"].as_str(), client["expires_at"].as_str()) {
        (Some("active"), Some(at)) => format!("active until {at}"),
        (state, _) => state.unwrap_or_default().to_owned(),
    };
    println!(
        "{}  {}  {:<20}  {}  {}",
        text(&client["client_id"]),
        text(&client["organization_id"]),
        text(&client["name"]),
        state,
        scopes.join(",")
    );
}

pub fn clients(command: ClientsCommand) -> anyhow::Result<()> {
    match command {
        ClientsCommand::Create { organization, name, scopes, expires_in: lifetime, admin } => {
            let scopes: Vec<String> = if scopes.is_empty() {
                esr_auth::keys::ALL_READ_SCOPES.iter().map(|scope| (*scope).to_owned()).collect()
            } else {
                scopes
            };
            let expires_at = lifetime.as_deref().map(expires_in).transpose()?;
            let body =
                json!({"organization_id": organization, "name": name, "scopes": scopes, "expires_at": expires_at});
            let created = admin_client(&admin)?.post_json("/admin/v1/clients", &body)?;
            println!("client_id={}", text(&created["client_id"]));
            println!("client_secret={}", text(&created["client_secret"]));
            eprintln!(
                "client for organization {} ({}); the secret is shown this once, store it now",
                text(&created["organization_id"]),
                scopes.join(" ")
            );
        }
        ClientsCommand::List { organization, admin } => {
            let path = match organization {
                Some(organization) => format!("/admin/v1/clients?organizationId={organization}"),
                None => "/admin/v1/clients".to_owned(),
            };
            for client in admin_client(&admin)?.get(&path)?["data"].as_array().into_iter().flatten() {
                print_client(client);
            }
        }
        ClientsCommand::Revoke { client_id, admin } => {
            admin_client(&admin)?.delete(&format!("/admin/v1/clients/{client_id}"))?;
            println!("revoked {client_id}");
        }
        ClientsCommand::RotateSecret { client_id, admin } => {
            let rotated =
                admin_client(&admin)?.post_json(&format!("/admin/v1/clients/{client_id}/rotate-secret"), &json!({}))?;
            println!("client_secret={}", text(&rotated["client_secret"]));
            eprintln!("the old secret no longer works; tokens already issued run until they expire");
        }
    }
    Ok(())
}

pub fn signing_keys(command: SigningKeysCommand) -> anyhow::Result<()> {
    match command {
        SigningKeysCommand::List(admin) => {
            for key in admin_client(&admin)?.get("/admin/v1/signing-keys")?["data"].as_array().into_iter().flatten() {
                let state = match (key["retired_at"].as_str(), key["published_until"].as_str()) {
                    (Some(_), Some(until)) => format!("retired, published until {until}"),
                    _ => "signing".to_owned(),
                };
                println!("{}  {}  {}  {}", text(&key["kid"]), text(&key["algorithm"]), text(&key["created_at"]), state);
            }
        }
        SigningKeysCommand::Rotate(admin) => {
            let rotated = admin_client(&admin)?.post_json("/admin/v1/signing-keys/rotate", &json!({}))?;
            println!("signing with {}", text(&rotated["kid"]));
        }
    }
    Ok(())
}
