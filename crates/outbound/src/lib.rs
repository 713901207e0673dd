//! Where the service may send a request a client or an operator named (a
//! webhook's destination, an identity provider's keys), so that it never
//! becomes a way into the network it runs in (server-side request
//! forgery).
//!
//! A destination is `https` (or `http` when allowed) with a host and no
//! credentials. Every address is checked on the connection actually
//! made: a name is resolved by [`GuardedResolver`], which hands the
//! connector only the addresses that pass, so nothing resolves the name
//! again between the check and the connect; an address written in the
//! URL is checked before the request. No proxy is used and no redirect
//! followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The longest destination URL accepted.
pub const MAX_URL_CHARS: usize = 2048;

/// Who the requests go to, for messages that name the flags allowing more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Peers {
    #[default]
    Webhooks,
    IdentityProviders,
}

impl Peers {
    fn noun(self) -> &'static str {
        match self {
            Peers::Webhooks => "webhooks",
            Peers::IdentityProviders => "identity providers",
        }
    }

    /// The prefix of the flags that allow `http` and private addresses.
    fn flags(self) -> &'static str {
        match self {
            Peers::Webhooks => "--webhooks",
            Peers::IdentityProviders => "--oidc",
        }
    }
}

/// What a destination may be.
#[derive(Debug, Clone, Copy, Default)]
pub struct DestinationRules {
    /// `http` as well as `https` (`--webhooks-allow-http`, `--oidc-allow-http`).
    pub allow_http: bool,
    /// Loopback, private, link-local and the other refused addresses
    /// (`--webhooks-allow-private`, `--oidc-allow-private`: tests and
    /// closed networks).
    pub allow_private: bool,
    pub peers: Peers,
}

impl DestinationRules {
    /// The URL, if a destination may be it, else why not.
    pub fn check_url(&self, url: &str) -> Result<Url, String> {
        if url.chars().count() > MAX_URL_CHARS {
            return Err(format!("longer than {MAX_URL_CHARS} characters"));
        }
        let parsed = Url::parse(url).map_err(|error| format!("not a URL: {error}"))?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => {
                return Err(format!(
                    "must be https (this server does not allow http {}; {}-allow-http does)",
                    self.peers.noun(),
                    self.peers.flags()
                ));
            }
            other => return Err(format!("must be https, not {other}")),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("must not hold credentials; the signature authenticates deliveries".into());
        }
        if parsed.fragment().is_some() {
            return Err("must not hold a fragment".into());
        }
        match parsed.host() {
            None => return Err("must name a host".into()),
            Some(url::Host::Ipv4(ip)) => self.check_address(IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.check_address(IpAddr::V6(ip))?,
            Some(url::Host::Domain(_)) => {}
        }
        Ok(parsed)
    }

    /// Whether a connection may go to `address`, else why not.
    pub fn check_address(&self, address: IpAddr) -> Result<(), String> {
        match refused_class(address) {
            Some(class) if !self.allow_private => Err(format!(
                "{address} is a {class} address; {} go only to public addresses (a closed network can allow \
                 others with {}-allow-private)",
                self.peers.noun(),
                self.peers.flags()
            )),
            _ => Ok(()),
        }
    }
}

/// The kind of address a webhook may not reach, or `None` for a public one.
pub fn refused_class(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        // 169.254.169.254 among them: the cloud metadata service.
        Some("link-local")
    } else if a == 100 && (64..128).contains(&b) {
        Some("carrier-grade NAT")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() || a >= 240 {
        Some("reserved")
    } else if a == 192 && b == 0 && ip.octets()[2] == 0 {
        Some("IETF protocol assignment")
    } else if (a == 198 && (18..20).contains(&b)) || ip.is_documentation() {
        Some("benchmarking or documentation")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and
    // NAT64 (64:ff9b::a.b.c.d) addresses reach the IPv4 address they hold.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return refused_v4(v4);
    }
    if segments[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_unspecified() && !ip.is_loopback() {
        return refused_v4(Ipv4Addr::from(ip.to_bits() as u32));
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return refused_v4(Ipv4Addr::from(ip.to_bits() as u32));
    }
    // 6to4 (2002:V4ADDR::/48) reaches the IPv4 address in its bits 16-47.
    if segments[0] == 0x2002 {
        return refused_v4(Ipv4Addr::from(((u32::from(segments[1])) << 16) | u32::from(segments[2])));
    }
    if segments[0] == 0x64 && segments[1] == 0xff9b && segments[2] == 1 {
        return Some("local-use NAT64");
    }
    if segments[0] == 0x2001 && segments[1] == 0 {
        return Some("Teredo");
    }
    if segments[0] & 0xffc0 == 0xfec0 {
        return Some("site-local");
    }
    if segments[..4] == [0x100, 0, 0, 0] {
        return Some("discard-only");
    }
    if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if segments[0] & 0xfe00 == 0xfc00 {
        Some("unique local (private)")
    } else if segments[0] & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if segments[0] == 0x2001 && segments[1] == 0x0db8 {
        Some("documentation")
    } else {
        None
    }
}

/// Resolves a destination's name and keeps only the addresses
/// [`DestinationRules::check_address`] allows; the connector connects to
/// those and no others.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    pub rules: DestinationRules,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let rules = self.rules;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|error| -> Box<dyn std::error::Error + Send + Sync> {
                    format!("{host} does not resolve: {error}").into()
                })?
                .collect();
            let mut allowed = Vec::new();
            let mut refused = Vec::new();
            for address in resolved {
                match rules.check_address(address.ip()) {
                    Ok(()) => allowed.push(address),
                    Err(_) => {
                        refused.push(format!("{} ({})", address.ip(), refused_class(address.ip()).unwrap_or("refused")))
                    }
                }
            }
            if allowed.is_empty() {
                let why = if refused.is_empty() {
                    format!("{host} resolves to no address")
                } else {
                    format!(
                        "{host} resolves only to addresses {} may not reach: {} (a closed network can allow \
                         them with {}-allow-private)",
                        rules.peers.noun(),
                        refused.join(", "),
                        rules.peers.flags()
                    )
                };
                return Err(why.into());
            }
            if !refused.is_empty() {
                tracing::warn!(%host, refused = %refused.join(", "), peers = rules.peers.noun(), "a destination resolves to refused addresses too; they are skipped");
            }
            let addresses: Addrs = Box::new(allowed.into_iter());
            Ok(addresses)
        })
    }
}

/// The client requests go through: the guarded resolver, no proxy (one
/// would connect for us, unchecked), no redirects, these timeouts.
pub fn client(
    user_agent: &str,
    rules: DestinationRules,
    connect_timeout: std::time::Duration,
    timeout: std::time::Duration,
) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .user_agent(user_agent)
        .dns_resolver(Arc::new(GuardedResolver { rules }))
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .https_only(!rules.allow_http)
        .connect_timeout(connect_timeout)
        .timeout(timeout)
        .pool_idle_timeout(std::time::Duration::from_secs(30))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refused_class_is_named() {
        for (address, class) in [
            ("127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("224.0.0.1", "multicast"),
            ("0.0.0.0", "unspecified"),
            ("255.255.255.255", "reserved"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique local (private)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::a00:1", "private"),
            ("2002:a9fe:a9fe::", "link-local"),
            ("2002:7f00:1::", "loopback"),
            ("64:ff9b:1::1", "local-use NAT64"),
            ("2001::1", "Teredo"),
            ("fec0::1", "site-local"),
            ("100::1", "discard-only"),
        ] {
            let ip: IpAddr = address.parse().expect(address);
            assert_eq!(refused_class(ip), Some(class), "{address}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:93.184.216.34", "2002:5db8:d822::1"]
        {
            let ip: IpAddr = public.parse().expect(public);
            assert_eq!(refused_class(ip), None, "{public}");
        }
    }

    #[test]
    fn urls_are_checked_before_any_connection() {
        let strict = DestinationRules::default();
        assert!(strict.check_url("https://hooks.example.com/esr").is_ok());
        for (url, why) in [
            ("http://hooks.example.com/", "must be https"),
            ("ftp://hooks.example.com/", "must be https, not ftp"),
            ("https://user:pw@hooks.example.com/", "credentials"),
            ("https://127.0.0.1/", "loopback"),
            ("https://[::ffff:192.168.0.1]/", "private"),
            ("https://169.254.169.254/latest/meta-data", "link-local"),
            ("not a url", "not a URL"),
        ] {
            let refused = strict.check_url(url).expect_err(url);
            assert!(refused.contains(why), "{url}: {refused}");
        }
        let open = DestinationRules { allow_http: true, allow_private: true, ..DestinationRules::default() };
        assert!(open.check_url("http://127.0.0.1:9/").is_ok());
    }
}
