//! The Nexpose importer: Rapid7 Nexpose / InsightVM "XML Export" and "XML
//! Export 2.0" (`<NexposeReport version="1.0">`, `"2.0"`): many nodes
//! (hosts) per file, each with the tests run on it and on its services,
//! followed by the definitions of the vulnerabilities the tests name.
//!
//! What maps where is in `docs/scanner-report-mapping/nexpose.md`. In
//! short: each node address is a host; each vulnerable test an entry of
//! its host, one per vulnerability, port and key (Nexpose's own instance);
//! every other test is skipped with its status. The definitions come after
//! the nodes, so the report is streamed node by node keeping what each
//! entry needs (its proof cut short), and the definitions are joined in at
//! the end.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use esr_plugin_sdk::importing::importer_info;
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, EntryState, ImporterInfo, OperatingSystem, Package, PackageClass,
    ReportEntry, ReportError, ReportHost, ReportImporter, Severity, SkippedEntry, SuppressionReason,
};
use esr_plugin_sdk::time::Timestamp;
use esr_plugin_sdk::xml::{self, Element};

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "nodes × tests";
const ROOT: &str = "NexposeReport";
/// The package of a test run on the node itself, not on one of its services.
const HOST_LEVEL: &str = "general";
/// The most characters of the tests' own text (their proof) one entry keeps.
const MAX_PROOF_CHARS: usize = 2048;
/// The most characters of a definition's description or solution kept.
const MAX_TEXT_CHARS: usize = 4096;

pub struct Nexpose;

esr_plugin_sdk::export_report_importer!(crate::Nexpose);

impl ReportImporter for Nexpose {
    fn describe() -> ImporterInfo {
        importer_info(
            "nexpose",
            env!("CARGO_PKG_VERSION"),
            "Rapid7 Nexpose / InsightVM XML export (NexposeReport 1.0 and 2.0)",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        match xml::root(bytes) {
            Some(root) if root.name == ROOT => match root.attribute_text("version") {
                Some("1.0" | "2.0") => Confidence::Certain,
                _ => Confidence::Possible,
            },
            _ => Confidence::No,
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        if let Some(root) = xml::root(bytes)
            && root.name != ROOT
        {
            return Err(ReportError::Unsupported(format!(
                "not a Nexpose XML export: the root element is <{}>, not <{ROOT}>",
                root.name.chars().take(64).collect::<String>()
            )));
        }
        let mut reading = Reading::default();
        let mut has_nodes = false;
        xml::for_each_record(
            bytes,
            |path| is_record(path, &mut has_nodes),
            |parents, element| reading.record(parents, &element),
        )?;
        if !has_nodes {
            return Err(ReportError::Invalid(format!(
                "not a Nexpose XML export: <{ROOT}> holds no <nodes> (the assets scanned)"
            )));
        }
        Ok(reading.finish())
    }
}

/// The elements read whole, one at a time: each node and each definition,
/// and the root's other children (`scans`; the others are dropped, read
/// within the XML reader's bounds).
fn is_record(path: &[String], has_nodes: &mut bool) -> bool {
    let [root, rest @ ..] = path else { return false };
    if root != ROOT {
        return false;
    }
    match rest {
        [section] if section == "nodes" => {
            *has_nodes = true;
            false
        }
        [section] => section != "VulnerabilityDefinitions",
        [section, item] => {
            (section == "nodes" && item == "node") || (section == "VulnerabilityDefinitions" && item == "vulnerability")
        }
        _ => false,
    }
}

/// What the streamed report has given so far.
#[derive(Default)]
struct Reading {
    converted: ConvertedReport,
    hosts: Vec<HostDraft>,
    host_at: HashMap<String, usize>,
    /// Beside `converted.entries`, one each: what the definition is joined on, and the proof.
    pending: Vec<Pending>,
    /// Each instance's entry: (node address, test id, location).
    instances: HashMap<(String, String, Option<String>), usize>,
    /// The (lowercase) ids of the vulnerabilities found: only their definitions are kept.
    needed: HashSet<String>,
    definitions: HashMap<String, Definition>,
    latest_scan: Option<Timestamp>,
    nodes_read: usize,
}

struct Pending {
    test_id: String,
    proof: String,
}

/// A node's host as read so far; nodes repeating an address add to it.
struct HostDraft {
    address: String,
    names: Vec<String>,
    mac_address: Option<String>,
    /// The operating system of the most certain fingerprint, with its certainty.
    os: Option<(f64, OperatingSystem)>,
}

/// What an entry takes from a vulnerability definition.
#[derive(Debug, Default)]
struct Definition {
    title: Option<String>,
    /// The `severity` attribute as written (1–10).
    severity_given: Option<String>,
    severity: Option<f64>,
    cvss: Vec<CvssRating>,
    /// `references/reference[@source="CVE"]`, in document order.
    cves: Vec<String>,
    description: Option<String>,
    solution: Option<String>,
}

/// What a test's status makes of it.
enum Outcome {
    Found(Option<EntryState>),
    Skipped(String),
}

impl Reading {
    fn record(&mut self, parents: &[String], element: &Element) -> Result<(), ReportError> {
        match (parents.len(), element.name.as_str()) {
            (1, "scans") => {
                self.read_scans(element);
                Ok(())
            }
            (2, "node") => self.read_node(element),
            (2, "vulnerability") => {
                self.read_definition(element);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The latest scan's start: a report of several scans is as recent as its last.
    fn read_scans(&mut self, scans: &Element) {
        for start in scans.children_named("scan").filter_map(|scan| scan.attribute_text("startTime")) {
            if let Some(at) = scan_time(start) {
                self.latest_scan = Some(self.latest_scan.map_or(at, |latest| latest.max(at)));
            }
        }
    }

    fn read_node(&mut self, node: &Element) -> Result<(), ReportError> {
        self.nodes_read += 1;
        let Some(address) = node.attribute_text("address") else {
            let entry = format!("nodes/node[{}] (line {})", self.nodes_read, node.line);
            let reason = "the node has no address: it names no host".to_owned();
            return self.converted.add_skipped(SkippedEntry { entry, reason }, FAN_OUT);
        };
        self.read_host(address, node);
        for test in node.find(&["tests"]).into_iter().flat_map(|tests| tests.children_named("test")) {
            self.read_test(address, None, HOST_LEVEL, test)?;
        }
        for endpoint in node.find(&["endpoints"]).into_iter().flat_map(|endpoints| endpoints.children_named("endpoint"))
        {
            let port = match (endpoint.attribute_text("port"), endpoint.attribute_text("protocol")) {
                (Some(port), Some(protocol)) => Some(format!("{port}/{protocol}")),
                (Some(port), None) => Some(port.to_owned()),
                (None, _) => None,
            };
            for service in
                endpoint.find(&["services"]).into_iter().flat_map(|services| services.children_named("service"))
            {
                // `<unknown>` is Nexpose's placeholder for a service it could not name.
                let name = service.attribute_text("name").filter(|name| *name != "<unknown>").unwrap_or(HOST_LEVEL);
                for test in service.find(&["tests"]).into_iter().flat_map(|tests| tests.children_named("test")) {
                    self.read_test(address, port.as_deref(), name, test)?;
                }
            }
        }
        Ok(())
    }

    fn read_host(&mut self, address: &str, node: &Element) {
        let names = node
            .find(&["names"])
            .into_iter()
            .flat_map(|names| names.children_named("name"))
            .filter_map(Element::text)
            .map(|name| name.strip_suffix('.').unwrap_or(name))
            .filter(|name| is_host_name(name))
            .map(str::to_owned);
        let mac_address = node.attribute_text("hardware-address").and_then(mac_address);
        let os = most_certain_os(node);
        let draft = match self.host_at.get(address) {
            Some(&at) => &mut self.hosts[at],
            None => {
                self.host_at.insert(address.to_owned(), self.hosts.len());
                self.hosts.push(HostDraft {
                    address: address.to_owned(),
                    names: Vec::new(),
                    mac_address: None,
                    os: None,
                });
                let last = self.hosts.len() - 1;
                &mut self.hosts[last]
            }
        };
        for name in names {
            if !draft.names.iter().any(|known| known.eq_ignore_ascii_case(&name)) {
                draft.names.push(name);
            }
        }
        if draft.mac_address.is_none() {
            draft.mac_address = mac_address;
        }
        if let Some((certainty, os)) = os
            && draft.os.as_ref().is_none_or(|(known, _)| certainty > *known)
        {
            draft.os = Some((certainty, os));
        }
    }

    fn read_test(
        &mut self,
        address: &str,
        port: Option<&str>,
        service: &str,
        test: &Element,
    ) -> Result<(), ReportError> {
        let key = test.attribute_text("key");
        let location = match (port, key) {
            (Some(port), Some(key)) => Some(format!("{port} {key}")),
            (Some(port), None) => Some(port.to_owned()),
            (None, Some(key)) => Some(key.to_owned()),
            (None, None) => None,
        };
        let place = location.as_deref().map(|location| format!(" on {location}")).unwrap_or_default();
        let Some(test_id) = test.attribute_text("id").map(str::to_lowercase) else {
            let entry = format!("node {address} test at line {}{place}", test.line);
            return self.converted.add_skipped(SkippedEntry { entry, reason: "the test has no id".into() }, FAN_OUT);
        };
        let state = match outcome(test.attribute_text("status")) {
            Outcome::Found(state) => state,
            Outcome::Skipped(reason) => {
                let entry = format!("node {address} test {test_id}{place}");
                return self.converted.add_skipped(SkippedEntry { entry, reason }, FAN_OUT);
            }
        };
        let proof = plain_text(test, MAX_PROOF_CHARS);
        let instance = (address.to_owned(), test_id.clone(), location.clone());
        if let Some(&at) = self.instances.get(&instance) {
            // The same instance again (`unix-user-home-dir-mode` once per user, all with
            // an empty key): one entry, open if any of them is, with every proof that fits.
            let entry = &mut self.converted.entries[at];
            if state.is_none() {
                entry.state = None;
            }
            let known = &mut self.pending[at].proof;
            if !proof.is_empty() && !known.contains(&proof) {
                let room = MAX_PROOF_CHARS.saturating_sub(known.chars().count() + 2);
                if room > 0 {
                    known.push_str("\n\n");
                    known.extend(proof.chars().take(room));
                }
            }
            return Ok(());
        }
        let check = format!("nexpose:{}", test_id.split_whitespace().collect::<Vec<_>>().join("-"));
        self.converted.add_entry(
            ReportEntry {
                host: Some(address.to_owned()),
                vulnerability_id: check.clone(),
                check: Some(check),
                package: Package { name: service.to_owned(), ..Package::default() },
                class: PackageClass::Other,
                location,
                state,
                ..ReportEntry::default()
            },
            FAN_OUT,
        )?;
        self.instances.insert(instance, self.converted.entries.len() - 1);
        self.needed.insert(test_id.clone());
        self.pending.push(Pending { test_id, proof });
        Ok(())
    }

    fn read_definition(&mut self, vulnerability: &Element) {
        let Some(id) = vulnerability.attribute_text("id").map(str::to_lowercase) else { return };
        // Nexpose writes the definitions after the nodes: those of nothing found
        // are dropped, unless they come first.
        let before_nodes = self.nodes_read == 0;
        if !(before_nodes || self.needed.contains(&id)) || self.definitions.contains_key(&id) {
            return;
        }
        self.definitions.insert(id, Definition::read(vulnerability));
    }

    fn finish(mut self) -> ConvertedReport {
        for (entry, pending) in self.converted.entries.iter_mut().zip(&self.pending) {
            complete(entry, self.definitions.get(&pending.test_id), &pending.proof);
        }
        let mut converted = self.converted;
        converted.scanner = "rapid7".into();
        converted.scanned_at = self.latest_scan.map(Timestamp::format);
        // A network and authenticated scan covers the OS and its services.
        converted.scanned_classes = vec![PackageClass::Os, PackageClass::Other];
        converted.hosts = self.hosts.into_iter().map(HostDraft::into_host).collect();
        converted
    }
}

impl HostDraft {
    /// The best name first: an FQDN, else a short name, else the address.
    fn into_host(self) -> ReportHost {
        let fqdn = self.names.iter().find(|name| name.contains('.')).cloned();
        // Nexpose lists DNS and NetBIOS names together: beside an FQDN, a dotless
        // name other than the FQDN's first label is taken for the NetBIOS name.
        let label = fqdn.as_deref().and_then(|fqdn| fqdn.split('.').next());
        let short = self
            .names
            .iter()
            .find(|name| !name.contains('.') && label.is_none_or(|label| !label.eq_ignore_ascii_case(name)))
            .cloned();
        let hostname = fqdn.clone().or_else(|| short.clone()).unwrap_or_else(|| self.address.clone());
        let netbios_name = short.filter(|_| fqdn.is_some());
        ReportHost {
            ip: self.address.parse::<IpAddr>().is_ok().then(|| self.address.clone()),
            key: self.address,
            hostname,
            operating_system: self.os.map(|(_, os)| os),
            fqdn,
            netbios_name,
            mac_address: self.mac_address,
            agent_id: None,
        }
    }
}

impl Definition {
    fn read(vulnerability: &Element) -> Definition {
        // `cvssVector` is written in parentheses: "(AV:N/AC:L/Au:N/C:P/I:P/A:P)".
        let vector = vulnerability
            .attribute_text("cvssVector")
            .map(|vector| vector.trim_start_matches('(').trim_end_matches(')').trim());
        let score = vulnerability.attribute_text("cvssScore").and_then(|score| score.parse::<f64>().ok());
        let mut cves: Vec<String> = Vec::new();
        for reference in vulnerability
            .find(&["references"])
            .into_iter()
            .flat_map(|references| references.children_named("reference"))
        {
            let is_cve_source =
                reference.attribute_text("source").is_some_and(|source| source.eq_ignore_ascii_case("CVE"));
            if let Some(cve) =
                reference.text().map(str::to_ascii_uppercase).filter(|id| is_cve_source && report::is_cve(id))
                && !cves.contains(&cve)
            {
                cves.push(cve);
            }
        }
        let severity_given = vulnerability.attribute_text("severity").map(str::to_owned);
        Definition {
            title: vulnerability
                .attribute_text("title")
                .map(|title| title.split_whitespace().collect::<Vec<_>>().join(" ")),
            severity: severity_given.as_deref().and_then(|severity| severity.parse::<f64>().ok()),
            severity_given,
            cvss: report::cvss_rating(None, vector, score).into_iter().collect(),
            cves,
            description: vulnerability
                .child("description")
                .map(|description| plain_text(description, MAX_TEXT_CHARS))
                .filter(|text| !text.is_empty()),
            solution: vulnerability
                .child("solution")
                .map(|solution| plain_text(solution, MAX_TEXT_CHARS))
                .filter(|text| !text.is_empty()),
        }
    }

    /// The CVSS score's band when there is a score; else Nexpose's own 1–10
    /// number on the same bands (9–10 critical, 7–8 high, 4–6 medium, 1–3 low).
    fn severity(&self) -> Severity {
        self.cvss
            .iter()
            .find_map(|rating| rating.base_score)
            .or(self.severity.filter(|severity| (0.0..=10.0).contains(severity)))
            .map_or(Severity::Info, Severity::from_score)
    }
}

/// Fills in what the definition says: ids, rating, texts.
fn complete(entry: &mut ReportEntry, definition: Option<&Definition>, proof: &str) {
    let mut description = Vec::new();
    match definition {
        Some(definition) => {
            if let Some((first, others)) = definition.cves.split_first() {
                let check = std::mem::replace(&mut entry.vulnerability_id, first.clone());
                for alias in others.iter().chain(std::iter::once(&check)) {
                    report::push_alias(&mut entry.aliases, first, alias);
                }
            }
            entry.title = definition.title.clone();
            entry.severity_given = definition.severity_given.clone();
            entry.severity = definition.severity();
            entry.cvss = definition.cvss.clone();
            description.extend(definition.description.clone());
        }
        None => description.push("The report holds no definition of this vulnerability.".to_owned()),
    }
    if !proof.is_empty() {
        description.push(format!("Proof: {proof}"));
    }
    if let Some(solution) = definition.and_then(|definition| definition.solution.as_deref()) {
        description.push(format!("Solution: {solution}"));
    }
    entry.description = Some(description.join("\n\n"));
}

/// Which tests are findings: the `vulnerable-*` statuses; those Nexpose
/// holds an exception for are findings suppressed as accepted risks (an
/// exception accepts a vulnerability, it does not fix it); the others
/// (the result codes of Nexpose's reports) are skipped.
fn outcome(status: Option<&str>) -> Outcome {
    let Some(status) = status else { return Outcome::Skipped("the test has no status".into()) };
    match status {
        "vulnerable-exploited" | "vulnerable-version" | "vulnerable-potential" => Outcome::Found(None),
        "exception-vulnerable-exploited" | "exception-vulnerable-version" | "exception-vulnerable-potential" => {
            Outcome::Found(Some(EntryState::Suppressed {
                reason: SuppressionReason::AcceptedRisk,
                note: Some(format!("a Nexpose vulnerability exception (test status {status})")),
            }))
        }
        _ => {
            let meaning = match status {
                "not-vulnerable" => "the check was negative",
                "error" => "an error occurred during the check",
                "unknown" => "an internal issue kept the scanner from reporting a result",
                skipped if skipped.starts_with("skipped") => "the check was not performed",
                _ => "not a vulnerability found (vulnerable-exploited, vulnerable-version, vulnerable-potential)",
            };
            let status: String = status.chars().take(64).collect();
            Outcome::Skipped(format!("status {status}: {meaning}"))
        }
    }
}

/// The fingerprint Nexpose is most certain of (the first on a tie).
fn most_certain_os(node: &Element) -> Option<(f64, OperatingSystem)> {
    let mut best: Option<(f64, &Element)> = None;
    for os in node.find(&["fingerprints"]).into_iter().flat_map(|fingerprints| fingerprints.children_named("os")) {
        let certainty = os.attribute_text("certainty").and_then(|c| c.parse::<f64>().ok()).unwrap_or(0.0);
        if best.is_none_or(|(known, _)| certainty > known) {
            best = Some((certainty, os));
        }
    }
    let (certainty, os) = best?;
    let vendor = os.attribute_text("vendor");
    let family = os.attribute_text("family");
    let product = os.attribute_text("product").or(family);
    // "Ubuntu" + "Linux", "Cisco" + "IOS"; not "Linux Linux" nor "Microsoft Microsoft Windows".
    let name = match (vendor, product) {
        (Some(vendor), Some(product)) if product.to_lowercase().starts_with(&vendor.to_lowercase()) => {
            product.to_owned()
        }
        (Some(vendor), Some(product)) => format!("{vendor} {product}"),
        (None, Some(name)) | (Some(name), None) => name.to_owned(),
        (None, None) => return None,
    };
    let os_family = [Some(name.as_str()), family]
        .into_iter()
        .flatten()
        .map(report::os_family)
        .find(|os_family| *os_family != "other")
        .unwrap_or("other");
    Some((
        certainty,
        OperatingSystem {
            name,
            version: os.attribute_text("version").map(str::to_owned),
            family: Some(os_family.to_owned()),
            vendor: vendor.map(str::to_owned),
            architecture: os.attribute_text("arch").map(str::to_owned),
        },
    ))
}

/// A name a host can go by (RFC 1123 labels), not an address.
fn is_host_name(name: &str) -> bool {
    name.parse::<IpAddr>().is_err()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// `hardware-address` as colon-separated pairs: Nexpose writes `E4CE8F490D7C`.
fn mac_address(text: &str) -> Option<String> {
    let digits: Vec<char> = text.chars().filter(|c| !matches!(c, ':' | '-' | '.')).collect();
    if digits.len() != 12 || !digits.iter().all(char::is_ascii_hexdigit) {
        return None;
    }
    Some(digits.chunks(2).map(|pair| pair.iter().collect::<String>()).collect::<Vec<_>>().join(":"))
}

/// Nexpose's `20131127T050242739` (date, `T`, time, milliseconds; no
/// zone, read as UTC).
fn scan_time(text: &str) -> Option<Timestamp> {
    let bytes = text.as_bytes();
    let digits =
        |range: std::ops::Range<usize>| bytes.get(range).is_some_and(|part| part.iter().all(u8::is_ascii_digit));
    if bytes.len() < 15 || bytes.get(8) != Some(&b'T') || !digits(0..8) || !digits(9..15) || !digits(15..bytes.len()) {
        return None;
    }
    // Only ASCII digits and `T`: every index is a character boundary.
    let fraction = if bytes.len() > 15 { format!(".{}", &text[15..]) } else { String::new() };
    Timestamp::parse(&format!(
        "{}-{}-{}T{}:{}:{}{fraction}Z",
        &text[0..4],
        &text[4..6],
        &text[6..8],
        &text[9..11],
        &text[11..13],
        &text[13..15]
    ))
}

/// Nexpose's markup (`ContainerBlockElement`, `Paragraph`, `UnorderedList`,
/// `ListItem`, `URLLink`…) as plain text of at most `limit` characters:
/// blocks apart, list items as `- `, links as their URL, spaces collapsed
/// (but in `preformat` paragraphs).
fn plain_text(element: &Element, limit: usize) -> String {
    let mut writer = PlainText { text: String::new(), chars: 0, limit };
    writer.element(element);
    writer.text.trim().to_owned()
}

struct PlainText {
    text: String,
    chars: usize,
    limit: usize,
}

impl PlainText {
    fn element(&mut self, element: &Element) {
        if self.chars >= self.limit {
            return;
        }
        match element.name.as_str() {
            "URLLink" => {
                let url = element.attribute_text("LinkURL");
                let label = element.text().or_else(|| element.attribute_text("LinkTitle"));
                match (label, url) {
                    (Some(label), Some(url)) if label != url => self.words(&format!("{label} ({url})")),
                    (Some(text), _) | (None, Some(text)) => self.words(text),
                    (None, None) => {}
                }
                return;
            }
            "ListItem" => self.item(),
            _ => self.block(),
        }
        if element.attribute("preformat") == Some("true") {
            for line in element.text.lines().map(str::trim).filter(|line| !line.is_empty()) {
                self.words(line);
                self.push("\n");
            }
        } else {
            self.words(&element.text);
        }
        for child in &element.children {
            self.element(child);
        }
        if element.name != "ListItem" {
            self.block();
        }
    }

    fn words(&mut self, text: &str) {
        for word in text.split_whitespace() {
            if !self.text.is_empty() && !self.text.ends_with(['\n', ' ']) {
                self.push(" ");
            }
            let word: String = word.chars().filter(|c| !c.is_control()).collect();
            self.push(&word);
        }
    }

    /// A blank line, unless one is there or a list item just started.
    fn block(&mut self) {
        if self.text.is_empty() || self.text.ends_with("\n\n") || self.text.ends_with("- ") {
            return;
        }
        let kept = self.text.trim_end_matches(' ').len();
        self.chars -= self.text.len() - kept;
        self.text.truncate(kept);
        let newlines = if self.text.ends_with('\n') { "\n" } else { "\n\n" };
        self.push(newlines);
    }

    fn item(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.push("\n");
        }
        self.push("- ");
    }

    fn push(&mut self, piece: &str) {
        if self.chars >= self.limit {
            return;
        }
        let room = self.limit - self.chars;
        let count = piece.chars().count();
        if count <= room {
            self.text.push_str(piece);
            self.chars += count;
        } else {
            self.text.extend(piece.chars().take(room.saturating_sub(1)));
            self.text.push('…');
            self.chars = self.limit;
        }
    }
}

#[cfg(test)]
mod tests;
