//! Which endpoint a host a scanner report names is: the same rules
//! whichever scanner named it, so one machine scanned by Nessus and by
//! Wazuh is one endpoint (`docs/scanner-reports.md`, "Hosts are
//! endpoints").
//!
//! In order, the first rule that picks exactly one endpoint wins:
//!
//! 1. **esr agent id**: the endpoint whose `agent_id` is the host's.
//! 2. **Name**: the endpoint whose `hostname` is one of the host's names
//!    (host name, FQDN, NetBIOS name), without regard to case. Two
//!    endpoints with that name: the report is refused naming them.
//! 3. **Short name**: one side unqualified (`qa3app01` and
//!    `qa3app01.corp.example`), the first labels equal.
//! 4. **IP address**: the one endpoint with the host's IP, only when the
//!    host has no name, or that endpoint was itself named by its IP:
//!    addresses move (DHCP, NAT), and a named host at a known address is
//!    more likely another machine than a renamed one.
//!
//! Otherwise a new endpoint, named by the first name that is a valid host
//! name (else its IP), with the IP, MAC address and OS the report states.

use std::collections::HashMap;
use std::net::IpAddr;

use esr_contract::report::ReportHost;
use serde_json::Value;
use uuid::Uuid;

use crate::ingest::{is_hostname, mac_address};
use esr_store::{MAX_SCAN, RecordWalk, StoreError, StoreReader};

const ENDPOINTS: esr_contract::Collection = esr_contract::Collection::Endpoints;

/// An endpoint as matching sees it: its id and its host name as stored.
type Known = (Uuid, String);

/// The organization's endpoints by what hosts are matched on.
#[derive(Default)]
pub(crate) struct EndpointDirectory {
    by_agent: HashMap<Uuid, Vec<Known>>,
    by_name: HashMap<String, Vec<Known>>,
    by_short_name: HashMap<String, Vec<Known>>,
    by_ip: HashMap<IpAddr, Vec<Known>>,
}

/// What matching a host found.
pub(crate) enum HostMatch {
    Endpoint(Uuid),
    /// Several endpoints have the host's name: (name, candidates).
    Ambiguous(String, Vec<Known>),
    None,
}

impl EndpointDirectory {
    /// Every endpoint of the organization, read in id order.
    pub(crate) fn read(reader: &mut dyn StoreReader) -> Result<Self, StoreError> {
        let mut directory = EndpointDirectory::default();
        let mut after = None;
        loop {
            let page = reader.scan(ENDPOINTS, &RecordWalk::new(MAX_SCAN).after(after))?;
            for (id, bytes) in &page {
                let record: Value = serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                directory.add(*id, &record);
            }
            match page.last() {
                Some((id, _)) if page.len() == MAX_SCAN => after = Some(*id),
                _ => return Ok(directory),
            }
        }
    }

    /// Adds an endpoint record (stored, or about to be written).
    pub(crate) fn add(&mut self, id: Uuid, record: &Value) {
        let Some(hostname) = record.get("hostname").and_then(Value::as_str) else { return };
        let known = (id, hostname.to_owned());
        if let Some(agent) = record.get("agent_id").and_then(Value::as_str).and_then(|a| Uuid::parse_str(a).ok()) {
            self.by_agent.entry(agent).or_default().push(known.clone());
        }
        let lower = hostname.to_ascii_lowercase();
        self.by_short_name.entry(short_name(&lower).to_owned()).or_default().push(known.clone());
        self.by_name.entry(lower).or_default().push(known.clone());
        if let Some(ip) = record.get("ip").and_then(Value::as_str).and_then(|ip| ip.parse::<IpAddr>().ok()) {
            self.by_ip.entry(ip).or_default().push(known);
        }
    }

    /// The endpoints with exactly this host name (any case).
    pub(crate) fn named(&self, name: &str) -> &[Known] {
        self.by_name.get(&name.trim().to_ascii_lowercase()).map_or(&[], Vec::as_slice)
    }

    /// The endpoint `host` is, by the rules above.
    pub(crate) fn find(&self, host: &ReportHost) -> HostMatch {
        if let Some(agent) = host.agent_id.as_deref().and_then(|agent| Uuid::parse_str(agent.trim()).ok())
            && let Some([(id, _)]) = self.by_agent.get(&agent).map(Vec::as_slice)
        {
            return HostMatch::Endpoint(*id);
        }
        let names = host.names();
        for name in &names {
            match self.named(name) {
                [(id, _)] => return HostMatch::Endpoint(*id),
                [] => {}
                several => return HostMatch::Ambiguous((*name).to_owned(), several.to_vec()),
            }
        }
        // A host with a qualified name is on that domain, whatever its other
        // names: its NetBIOS `WEB-1` does not make `web-1.b` the stored
        // `web-1.a`.
        let host_qualified = names.iter().any(|name| name.contains('.') && name.parse::<IpAddr>().is_err());
        for name in &names {
            let lower = name.to_ascii_lowercase();
            let qualified = host_qualified || lower.contains('.');
            let candidates: Vec<&Known> = self
                .by_short_name
                .get(short_name(&lower))
                .into_iter()
                .flatten()
                // One side unqualified: `web-1.a` and `web-1.b` are not one machine.
                .filter(|(_, stored)| !qualified || !stored.contains('.'))
                .collect();
            if let [(id, _)] = candidates.as_slice() {
                return HostMatch::Endpoint(*id);
            }
        }
        if let Some(ip) = host_ip(host)
            && let Some([(id, stored)]) = self.by_ip.get(&ip).map(Vec::as_slice)
            && (names.is_empty() || stored.parse::<IpAddr>().is_ok_and(|named| named == ip))
        {
            return HostMatch::Endpoint(*id);
        }
        HostMatch::None
    }
}

fn short_name(lower: &str) -> &str {
    lower.split('.').next().unwrap_or(lower)
}

/// The host's IP address, when it is one.
fn host_ip(host: &ReportHost) -> Option<IpAddr> {
    host.ip.as_deref().and_then(|ip| ip.trim().parse().ok())
}

/// The host name a new endpoint for `host` gets: its first name that is a
/// valid host name, else its IP address; `None` when it has neither.
pub(crate) fn new_hostname(host: &ReportHost) -> Option<String> {
    host.names()
        .into_iter()
        .find(|name| is_hostname(name))
        .map(str::to_owned)
        // An IPv6 address names an endpoint with dashes for its colons.
        .or_else(|| host_ip(host).map(|ip| ip.to_string().replace(':', "-")).filter(|name| is_hostname(name)))
}

/// The fields a new endpoint takes from the host beyond its name and OS:
/// IP, MAC address and esr agent id, each only when valid (a report's
/// `192.168.1.1001` is no address, and the endpoint is made without it).
pub(crate) fn host_fields(host: &ReportHost) -> (Option<String>, Option<String>, Option<String>) {
    let ip = host_ip(host).map(|ip| ip.to_string());
    let mac = host.mac_address.as_deref().and_then(|mac| mac_address(mac.trim()));
    let agent = host.agent_id.as_deref().and_then(|agent| Uuid::parse_str(agent.trim()).ok()).map(|a| a.to_string());
    (ip, mac, agent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(hostname: &str, fqdn: Option<&str>, ip: Option<&str>) -> ReportHost {
        ReportHost {
            key: "k".into(),
            hostname: hostname.into(),
            fqdn: fqdn.map(str::to_owned),
            ip: ip.map(str::to_owned),
            ..ReportHost::default()
        }
    }

    fn directory(endpoints: &[(u128, Value)]) -> EndpointDirectory {
        let mut directory = EndpointDirectory::default();
        for (id, record) in endpoints {
            directory.add(Uuid::from_u128(*id), record);
        }
        directory
    }

    fn found(directory: &EndpointDirectory, host: &ReportHost) -> Option<u128> {
        match directory.find(host) {
            HostMatch::Endpoint(id) => Some(id.as_u128()),
            HostMatch::Ambiguous(..) => Some(u128::MAX),
            HostMatch::None => None,
        }
    }

    #[test]
    fn hosts_match_by_agent_then_name_then_short_name_then_ip() {
        let agent = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let endpoints = directory(&[
            (1, json!({"hostname": "web-1.corp.example", "ip": "10.0.0.1"})),
            (2, json!({"hostname": "QA3APP01", "ip": "10.0.0.2", "agent_id": agent})),
            (3, json!({"hostname": "10.0.0.3", "ip": "10.0.0.3"})),
            (4, json!({"hostname": "db.a.example"})),
            (5, json!({"hostname": "db.b.example"})),
        ]);
        let mut by_agent = host("other-name", None, None);
        by_agent.agent_id = Some(agent.to_uppercase());
        assert_eq!(found(&endpoints, &by_agent), Some(2));
        assert_eq!(found(&endpoints, &host("WEB-1.corp.example", None, None)), Some(1));
        assert_eq!(found(&endpoints, &host("10.0.0.9", Some("qa3app01"), None)), Some(2));
        assert_eq!(found(&endpoints, &host("web-1", None, None)), Some(1), "short against qualified");
        assert_eq!(found(&endpoints, &host("qa3app01.corp.example", None, None)), Some(2), "qualified against short");
        assert_eq!(found(&endpoints, &host("web-1.other.example", None, None)), None, "two qualified names differ");
        let mut with_netbios = host("web-1.other.example", None, None);
        with_netbios.netbios_name = Some("WEB-1".into());
        assert_eq!(found(&endpoints, &with_netbios), None, "a qualified host's NetBIOS name is not its short name");
        let mut netbios_only = host("", None, None);
        netbios_only.netbios_name = Some("WEB-1".into());
        assert_eq!(found(&endpoints, &netbios_only), Some(1), "a NetBIOS name alone is a short name");
        assert_eq!(found(&endpoints, &host("db", None, None)), None, "two candidates: none");
        assert_eq!(found(&endpoints, &host("", None, Some("10.0.0.1"))), Some(1), "an unnamed host by its IP");
        assert_eq!(found(&endpoints, &host("laptop-7", None, Some("10.0.0.1"))), None, "a named host at a known IP");
        assert_eq!(found(&endpoints, &host("laptop-7", None, Some("10.0.0.3"))), Some(3), "an endpoint named by IP");
    }

    #[test]
    fn a_new_endpoint_takes_the_first_valid_name_and_valid_fields() {
        let mut named = host("No registered hostname", Some("METASPLOITABLE "), Some("192.168.1.1001"));
        named.mac_address = Some("00:50:56:A3:00:11\n".into());
        assert_eq!(new_hostname(&named).as_deref(), Some("METASPLOITABLE"));
        assert_eq!(host_fields(&named), (None, Some("00:50:56:a3:00:11".into()), None));
        assert_eq!(new_hostname(&host("", None, Some("192.168.2.5"))).as_deref(), Some("192.168.2.5"));
        assert_eq!(new_hostname(&host(" ", None, None)), None);
    }
}
