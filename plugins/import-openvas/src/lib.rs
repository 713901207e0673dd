//! The Greenbone / OpenVAS importer: the XML report (`<report>`, from the
//! OpenVAS 6 OMP layout to GMP 22) and the "CSV Results" export of it.
//!
//! What maps where is in `docs/scanner-report-mapping/openvas.md`. In
//! short: each result is one entry of its host (the IP), NVT and port; the
//! NVT is the check (`nvt:<oid>`), its first CVE the vulnerability id;
//! a result that is a scanner note (threat Log, the open ports of NVT `0`)
//! is skipped with why. The XML is walked record by record: results are
//! converted as they come, and the few host details the entries need
//! (name, OS, MAC), which may come after the results, are kept per IP.

use std::collections::BTreeMap;

use esr_plugin_sdk::importing::{self, importer_info};
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, EntryState, Epss, ImporterInfo, OperatingSystem, Package,
    PackageClass, ReportEntry, ReportError, ReportHost, ReportImporter, Severity, SkippedEntry, SuppressionReason,
};
use esr_plugin_sdk::time::Timestamp;
use esr_plugin_sdk::xml::{self, Element};

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "results, and the packages a local security check names";

/// How far `detect` looks into a report.
const DETECT_WINDOW: usize = 64 << 10;

/// The root elements of a Greenbone report: the report itself, or GMP's
/// answer to `get_reports` holding it.
const ROOTS: &[&str] = &["report", "get_reports_response"];

/// The CSV export's columns the importer cannot do without (the export's
/// header row names them; their order changed between versions).
const CSV_REQUIRED: &[&str] = &["IP", "Port", "Severity", "NVT Name", "NVT OID"];

pub struct OpenVas;

esr_plugin_sdk::export_report_importer!(crate::OpenVas);

impl ReportImporter for OpenVas {
    fn describe() -> ImporterInfo {
        importer_info(
            "openvas",
            env!("CARGO_PKG_VERSION"),
            "Greenbone / OpenVAS XML report (OMP 6 to GMP 22) and its CSV export",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        if looks_like_xml(bytes) { detect_xml(bytes) } else { detect_csv(bytes) }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        if looks_like_xml(bytes) {
            convert_xml(bytes)
        } else if csv_header(bytes).is_some() {
            convert_csv(bytes)
        } else {
            Err(ReportError::Unsupported(
                "neither a Greenbone XML report (root <report>) nor its CSV export (a header row IP,Hostname,Port,…,NVT OID,…)"
                    .into(),
            ))
        }
    }
}

/// Whether the report starts (after a byte-order mark and blanks) with `<`.
fn looks_like_xml(bytes: &[u8]) -> bool {
    without_bom(bytes).iter().find(|byte| !byte.is_ascii_whitespace()) == Some(&b'<')
}

fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes)
}

/// `Certain` for a `<report>` (or `<get_reports_response>`) that carries
/// Greenbone's marks: the report format attributes gvmd writes on the root,
/// or a GMP / OMP element near the start.
fn detect_xml(bytes: &[u8]) -> Confidence {
    let Some(root) = xml::root(bytes) else { return Confidence::No };
    match root.name.as_str() {
        "get_reports_response" => Confidence::Certain,
        "report" if root.attribute("format_id").is_some() || root.attribute("content_type").is_some() => {
            Confidence::Certain
        }
        "report" => {
            let window = &bytes[..bytes.len().min(DETECT_WINDOW)];
            let marked = [&b"<scan_run_status>"[..], b"<gmp>", b"<omp>"]
                .iter()
                .any(|mark| window.windows(mark.len()).any(|part| part == *mark));
            if marked { Confidence::Certain } else { Confidence::No }
        }
        _ => Confidence::No,
    }
}

fn detect_csv(bytes: &[u8]) -> Confidence {
    if csv_header(bytes).is_some() { Confidence::Certain } else { Confidence::No }
}

/// The CSV export's header row, when the first line is one: it names every
/// column of [`CSV_REQUIRED`].
fn csv_header(bytes: &[u8]) -> Option<csv::StringRecord> {
    let bytes = without_bom(bytes);
    let window = &bytes[..bytes.len().min(DETECT_WINDOW)];
    let line = &window[..window.iter().position(|byte| *byte == b'\n')?];
    let header = csv::ReaderBuilder::new().has_headers(false).from_reader(line).records().next()?.ok()?;
    CSV_REQUIRED.iter().all(|name| header.iter().any(|column| column.trim() == *name)).then_some(header)
}

/// One result as the XML or a CSV row gives it, before the mapping.
#[derive(Debug, Default)]
struct Observation {
    /// Where it is in the report, for skipped entries.
    at: String,
    /// The result's host: its IP as written.
    host: String,
    /// The host name the result itself gives (GMP 9+, the CSV).
    hostname: Option<String>,
    /// `http (80/tcp)`, `80/tcp`, `general/tcp`; empty for the CSV's
    /// host-level results.
    port: String,
    oid: String,
    name: Option<String>,
    family: Option<String>,
    threat: Option<String>,
    /// The result's severity number as written (GMP `severity`, the CSV's
    /// `CVSS`).
    severity: Option<String>,
    original_threat: Option<String>,
    original_severity: Option<String>,
    /// CVE ids in document order, without repeats.
    cves: Vec<String>,
    cvss: Vec<CvssRating>,
    epss: Option<Epss>,
    summary: Option<String>,
    /// What the check found on this host (`description`, the CSV's
    /// `Specific Result`).
    result_text: Option<String>,
    solution: Option<String>,
    /// A delta report's state of the result (`new`, `same`, `changed`, `gone`).
    delta: Option<String>,
}

/// What a result's threat and severity make of it.
enum Rating {
    Finding(Severity),
    /// An override marked it a false positive: the rating it had before.
    FalsePositive(Severity),
    Informational(String),
}

/// What the report says of one host, kept per IP while the report is
/// walked (host details may come after the results).
#[derive(Debug, Default)]
struct HostFacts {
    /// The `hostname` host detail.
    detail_hostname: Option<String>,
    /// The first host name a result gives.
    result_hostname: Option<String>,
    os_text: Option<String>,
    os_cpe: Option<String>,
    mac: Option<String>,
}

#[derive(Default)]
struct Conversion {
    report: ConvertedReport,
    hosts: BTreeMap<String, HostFacts>,
}

impl Conversion {
    fn new() -> Conversion {
        Conversion {
            report: ConvertedReport {
                scanner: "greenbone".into(),
                // A host scan covers the OS's packages (local security
                // checks) and the services it reaches.
                scanned_classes: vec![PackageClass::Os, PackageClass::Other],
                ..ConvertedReport::default()
            },
            hosts: BTreeMap::new(),
        }
    }

    fn skip(&mut self, entry: String, reason: String) -> Result<(), ReportError> {
        self.report.add_skipped(SkippedEntry { entry, reason }, FAN_OUT)
    }

    fn add(&mut self, observation: Observation) -> Result<(), ReportError> {
        let at = observation.at.clone();
        if observation.host.is_empty() {
            return self.skip(at, "the result names no host".into());
        }
        let facts = self.hosts.entry(observation.host.clone()).or_default();
        if facts.result_hostname.is_none() {
            facts.result_hostname = observation.hostname.clone();
        }
        if observation.oid.is_empty() {
            return self.skip(at, "the result names no NVT (no oid): there is no check to identify it by".into());
        }
        if observation.oid == "0" {
            return self
                .skip(at, "NVT oid 0: an open port the scan found, informational (no vulnerability check)".into());
        }
        if observation.delta.as_deref().is_some_and(|delta| delta.eq_ignore_ascii_case("gone")) {
            return self.skip(at, "delta state gone: an earlier scan found it, this one did not".into());
        }
        let (severity, state) = match rating(&observation) {
            Rating::Informational(reason) => return self.skip(at, reason),
            Rating::Finding(severity) => (severity, None),
            Rating::FalsePositive(severity) => {
                let was = [observation.original_threat.as_deref(), observation.original_severity.as_deref()]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" ");
                let note = if was.is_empty() {
                    "a Greenbone override rates it False Positive".to_owned()
                } else {
                    format!("a Greenbone override rates it False Positive (originally {was})")
                };
                (severity, Some(EntryState::Suppressed { reason: SuppressionReason::FalsePositive, note: Some(note) }))
            }
        };
        let check = format!("nvt:{}", observation.oid);
        let vulnerability_id = observation.cves.first().cloned().unwrap_or_else(|| check.clone());
        let mut aliases = Vec::new();
        for cve in observation.cves.iter().skip(1) {
            report::push_alias(&mut aliases, &vulnerability_id, cve);
        }
        report::push_alias(&mut aliases, &vulnerability_id, &check);
        let severity_given = match (observation.severity.as_deref(), observation.threat.as_deref()) {
            (Some(score), Some(threat)) => Some(format!("{score} ({threat})")),
            (Some(score), None) => Some(score.to_owned()),
            (None, threat) => threat.map(str::to_owned),
        };
        let template = ReportEntry {
            host: Some(observation.host.clone()),
            vulnerability_id,
            aliases,
            check: Some(check),
            severity_given,
            severity,
            cvss: report::order_cvss(observation.cvss.clone(), None),
            epss: observation.epss.clone(),
            state,
            title: observation.name.clone(),
            description: description(&observation),
            ..ReportEntry::default()
        };
        let packages = observation.result_text.as_deref().map(named_packages).unwrap_or_default();
        if packages.is_empty() {
            let (service, location) = service_and_location(&observation.port);
            let entry = ReportEntry {
                package: Package { name: service, ..Package::default() },
                class: PackageClass::Other,
                location: Some(location),
                fixed_version: observation.result_text.as_deref().and_then(remote_fixed_versions),
                ..template
            };
            return self.report.add_entry(entry, FAN_OUT);
        }
        // A local security check: one entry per package it names.
        let distribution = observation.family.as_deref().and_then(distribution);
        for named in packages {
            let entry = ReportEntry {
                package: Package {
                    version: named.installed.as_deref().map(|version| without_name(&named.name, version)),
                    ecosystem: distribution.map(|(ecosystem, _)| ecosystem.to_owned()),
                    package_manager: distribution.map(|(_, manager)| manager.to_owned()),
                    name: named.name.clone(),
                    ..Package::default()
                },
                class: PackageClass::Os,
                location: None,
                fixed_version: named.fixed.as_deref().map(|version| without_name(&named.name, version)),
                ..template.clone()
            };
            self.report.add_entry(entry, FAN_OUT)?;
        }
        Ok(())
    }

    /// Keeps what the entries need of a `report/host` element.
    fn host_details(&mut self, host: &Element) {
        let Some(ip) = host.child_text("ip") else { return };
        let facts = self.hosts.entry(ip.to_owned()).or_default();
        for detail in host.children_named("detail") {
            let (Some(name), Some(value)) = (detail.child_text("name"), detail.child_text("value")) else { continue };
            let slot = match name {
                "hostname" => &mut facts.detail_hostname,
                "best_os_txt" => &mut facts.os_text,
                "best_os_cpe" => &mut facts.os_cpe,
                "MAC" => &mut facts.mac,
                "scanned_with_scanner" => &mut self.report.scanner_version,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value.to_owned());
            }
        }
    }

    fn finish(mut self, scanned_at: Option<&str>) -> ConvertedReport {
        self.report.scanned_at = scanned_at.and_then(rfc3339);
        // The package manager of a local check's packages, when its NVT
        // family did not say: the host's OS (its details may come last).
        for entry in self.report.entries.iter_mut() {
            if entry.class != PackageClass::Os || entry.package.package_manager.is_some() {
                continue;
            }
            let facts = entry.host.as_ref().and_then(|key| self.hosts.get(key));
            let os = facts.and_then(|facts| {
                facts
                    .os_text
                    .as_deref()
                    .and_then(distribution)
                    .or_else(|| facts.os_cpe.as_deref().and_then(distribution))
            });
            if let Some((ecosystem, manager)) = os {
                entry.package.ecosystem = Some(ecosystem.to_owned());
                entry.package.package_manager = Some(manager.to_owned());
            }
        }
        for (key, facts) in &self.hosts {
            let operating_system = operating_system(facts);
            let hostname = [facts.detail_hostname.as_deref(), facts.result_hostname.as_deref()]
                .into_iter()
                .flatten()
                .map(str::trim)
                .find(|name| !name.is_empty())
                .unwrap_or(key)
                .to_owned();
            self.report.hosts.push(ReportHost {
                key: key.clone(),
                hostname,
                operating_system,
                // The host keeps it only when it is an address.
                ip: Some(key.clone()),
                mac_address: facts.mac.clone(),
                ..ReportHost::default()
            });
        }
        self.report
    }
}

/// The severity of a result: its severity number by the CVSS bands, else
/// its threat word; what is informational says why.
fn rating(observation: &Observation) -> Rating {
    let threat = observation.threat.as_deref().unwrap_or_default();
    let score = observation.severity.as_deref().and_then(number);
    match threat.to_ascii_lowercase().as_str() {
        "log" => return Rating::Informational("threat Log: informational (a detection or scan note)".into()),
        "debug" => return Rating::Informational("threat Debug: a scanner debug message".into()),
        "error" => {
            return Rating::Informational(
                "threat Error: the check failed on this host, which says nothing of a vulnerability".into(),
            );
        }
        "false positive" => return Rating::FalsePositive(original_severity(observation)),
        _ => {}
    }
    match score {
        // gvmd's special severities: -1 false positive, -2 debug, -3 error.
        Some(-1.0) => Rating::FalsePositive(original_severity(observation)),
        Some(score) if score < 0.0 => {
            Rating::Informational(format!("severity {score}: a scanner message (debug or error), not a rating"))
        }
        Some(0.0) => Rating::Informational("severity 0.0: informational (Log)".into()),
        Some(score) => Rating::Finding(Severity::from_score(score)),
        None => match report::map_severity(threat) {
            Some(Severity::Info) => Rating::Informational(format!("threat {threat}: informational")),
            Some(severity) => Rating::Finding(severity),
            None if threat.is_empty() => Rating::Informational("neither a threat nor a severity: unrated".into()),
            None => Rating::Informational(format!("threat {threat:?} is not a rating Greenbone defines")),
        },
    }
}

/// The rating a result had before an override (`original_severity`, else
/// `original_threat`); `info` when it says neither.
fn original_severity(observation: &Observation) -> Severity {
    observation
        .original_severity
        .as_deref()
        .and_then(number)
        .filter(|score| *score > 0.0)
        .map(Severity::from_score)
        .or_else(|| observation.original_threat.as_deref().and_then(report::map_severity))
        .unwrap_or(Severity::Info)
}

fn number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|number| number.is_finite())
}

/// The service a port names and the port as `<port>/<protocol>`:
/// `http (80/tcp)` → (`http`, `80/tcp`); `general/tcp` → (`general`,
/// `general/tcp`); `80/tcp` → (`80/tcp`, `80/tcp`): GMP names no service.
/// The CSV export writes host-level results without a port; those are
/// `general/tcp`, as nearly all of them are in the XML.
fn service_and_location(port: &str) -> (String, String) {
    let port = port.trim();
    if port.is_empty() {
        return ("general".into(), "general/tcp".into());
    }
    let (service, location) = match port.split_once('(') {
        Some((service, rest)) if rest.ends_with(')') => {
            (Some(service.trim()).filter(|service| !service.is_empty()), rest[..rest.len() - 1].trim())
        }
        _ => (None, port),
    };
    let service = match service {
        Some(service) => service,
        None if location.starts_with("general/") => "general",
        None => location,
    };
    (service.to_owned(), location.to_owned())
}

/// A package a local security check names in its result:
/// `Vulnerable package: openssl` / `Installed version: …` / `Fixed version: …`.
#[derive(Debug, Default, PartialEq)]
struct NamedPackage {
    name: String,
    installed: Option<String>,
    fixed: Option<String>,
}

fn named_packages(text: &str) -> Vec<NamedPackage> {
    let mut packages: Vec<NamedPackage> = Vec::new();
    for line in text.lines().map(str::trim) {
        let value = |label: &str| {
            line.get(..label.len())
                .filter(|start| start.eq_ignore_ascii_case(label))
                .map(|_| line[label.len()..].trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        if let Some(name) = value("Vulnerable package:") {
            packages.push(NamedPackage { name, ..NamedPackage::default() });
        } else if let Some(installed) = value("Installed version:") {
            if let Some(package) = packages.last_mut().filter(|package| package.installed.is_none()) {
                package.installed = Some(installed);
            }
        } else if let Some(fixed) = value(FIXED_LABEL)
            && let Some(package) = packages.last_mut().filter(|package| package.fixed.is_none())
        {
            package.fixed = Some(fixed);
        }
    }
    packages.retain(|package| !package.name.contains(char::is_whitespace));
    packages
}

/// The versions a remote check says fix what it found (`Installed
/// version: 1.3.2` / `Fixed version: 1.9.0`), joined; `None` when it names
/// none (`Fixed version: None`).
fn remote_fixed_versions(text: &str) -> Option<String> {
    let mut versions: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim) {
        let Some(start) = line.get(..FIXED_LABEL.len()).filter(|start| start.eq_ignore_ascii_case(FIXED_LABEL)) else {
            continue;
        };
        let version = line[start.len()..].trim();
        let none = ["none", "n/a", "willnotfix", "-"].iter().any(|none| version.eq_ignore_ascii_case(none));
        if !none && !versions.contains(&version) {
            versions.push(version);
        }
    }
    importing::fixed_versions(versions)
}

const FIXED_LABEL: &str = "Fixed version:";

/// A version as the RPM checks write it, `openssl-1.0.1e-30.el6`, without
/// the package's name.
fn without_name(name: &str, version: &str) -> String {
    version
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('-'))
        .filter(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or(version)
        .to_owned()
}

/// The distributions local security checks are written for, by the name
/// that is their ecosystem.
const DISTRIBUTIONS: &[&str] = &[
    "debian",
    "ubuntu",
    "kali",
    "raspbian",
    "alpine",
    "redhat",
    "rhel",
    "centos",
    "rocky",
    "almalinux",
    "fedora",
    "oracle",
    "amazon",
    "amazonlinux",
    "mariner",
    "azurelinux",
    "suse",
    "opensuse",
    "sles",
    "windows",
];

/// The distribution (as an ecosystem) and its package manager named in a
/// text: an NVT family (`Debian Local Security Checks`), an OS name or CPE.
fn distribution(text: &str) -> Option<(&'static str, &'static str)> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("red hat") {
        return Some(("redhat", "dnf"));
    }
    lower.split(|c: char| !c.is_ascii_alphanumeric()).find_map(|word| {
        let name = DISTRIBUTIONS.iter().find(|name| **name == word)?;
        Some((*name, report::package_manager(name)?))
    })
}

fn operating_system(facts: &HostFacts) -> Option<OperatingSystem> {
    let text = facts.os_text.as_deref().map(str::trim).filter(|text| !text.is_empty());
    // `cpe:/o:canonical:ubuntu_linux:10.04`: vendor, product, version.
    let cpe: Vec<&str> = facts
        .os_cpe
        .as_deref()
        .and_then(|cpe| cpe.trim().strip_prefix("cpe:/o:"))
        .map(|rest| rest.split(':').collect())
        .unwrap_or_default();
    let part = |index: usize| cpe.get(index).map(|part| part.trim()).filter(|part| !part.is_empty());
    let name = text.map(str::to_owned).or_else(|| part(1).map(|product| product.replace('_', " ")))?;
    let family = [Some(name.as_str()), part(1), facts.os_cpe.as_deref()]
        .into_iter()
        .flatten()
        .map(report::os_family)
        .find(|family| *family != "other")
        .unwrap_or("other");
    Some(OperatingSystem {
        name,
        version: part(2).map(str::to_owned),
        family: Some(family.to_owned()),
        vendor: part(0).map(str::to_owned),
        architecture: None,
    })
}

/// The NVT's summary, what it found on this host and its solution.
fn description(observation: &Observation) -> Option<String> {
    let solution = observation.solution.as_deref().map(|solution| format!("Solution: {solution}"));
    let parts: Vec<&str> = [observation.summary.as_deref(), observation.result_text.as_deref(), solution.as_deref()]
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect();
    if parts.is_empty() {
        return None;
    }
    let text = parts.join("\n\n");
    Some(esr_plugin_sdk::text::cut_chars(&text, esr_plugin_sdk::report::MAX_DESCRIPTION_CHARS))
}

/// Text on one line: runs of white space (GMP 9 reports wrap names) are one space.
fn one_line(text: &str) -> Option<String> {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!line.is_empty()).then_some(line)
}

/// The CVE ids of a text: `CVE-2014-0351, CVE-2007-1858`; `NOCVE` has none.
fn push_cves(cves: &mut Vec<String>, text: &str) {
    for id in text.split(|c: char| c == ',' || c.is_whitespace()).map(str::trim) {
        if report::is_cve(id) && !cves.iter().any(|known| known == id) {
            cves.push(id.to_owned());
        }
    }
}

/// The value of `name=` in an NVT's tags (`cvss_base_vector=AV:N/…|summary=…`).
fn tag<'a>(tags: &'a str, name: &str) -> Option<&'a str> {
    tags.split('|')
        .find_map(|pair| pair.trim_start().strip_prefix(name)?.strip_prefix('='))
        .map(str::trim)
        .filter(|value| !value.is_empty())
}

/// A time as RFC 3339 in UTC: RFC 3339 as given, a zone-less ISO time
/// read as UTC, or the ctime form older OpenVAS managers wrote
/// (`Sun Apr 13 02:19:34 2014`, UTC); `None` for anything else.
fn rfc3339(text: &str) -> Option<String> {
    let text = text.trim();
    if let Some(at) = Timestamp::parse(text) {
        return Some(at.format());
    }
    if let Some(at) = Timestamp::parse(&format!("{text}Z")) {
        return Some(at.format());
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let [_, month, day, time, year] = words.as_slice() else { return None };
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|name| name == month)? + 1;
    let day: u32 = day.parse().ok()?;
    Timestamp::parse(&format!("{year}-{month:02}-{day:02}T{time}Z")).map(Timestamp::format)
}

// ---- The XML report -------------------------------------------------------

fn convert_xml(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
    if let Some(root) = xml::root(bytes)
        && !ROOTS.contains(&root.name.as_str())
    {
        return Err(not_a_report(&root.name));
    }
    let mut conversion = Conversion::new();
    let mut root_name: Option<String> = None;
    let mut scan_start: Option<String> = None;
    let mut timestamp: Option<String> = None;
    let mut results = 0usize;
    xml::for_each_record(
        bytes,
        |path| {
            if path.len() == 1 {
                root_name = path.first().cloned();
            }
            root_name.as_deref().is_some_and(|root| ROOTS.contains(&root)) && is_record(path)
        },
        |parents, element| {
            match (parents.last().map(String::as_str), element.name.as_str()) {
                (Some("results"), "result") => {
                    results += 1;
                    conversion.add(xml_observation(&element, results))?;
                }
                (Some("report"), "host") => conversion.host_details(&element),
                (Some("report"), "scan_start") if scan_start.is_none() => {
                    scan_start = element.text().map(str::to_owned);
                }
                (Some("report"), "timestamp") if timestamp.is_none() => {
                    timestamp = element.text().map(str::to_owned);
                }
                _ => {}
            }
            Ok(())
        },
    )?;
    match root_name.as_deref() {
        Some(root) if ROOTS.contains(&root) => {}
        Some(root) => return Err(not_a_report(root)),
        None => return Err(ReportError::Invalid("the XML document has no root element".into())),
    }
    Ok(conversion.finish(scan_start.as_deref().or(timestamp.as_deref())))
}

fn not_a_report(root: &str) -> ReportError {
    ReportError::Unsupported(format!("not a Greenbone report: the root element is <{root}>, not <report>"))
}

/// Which elements are built and handed over: everything but the report
/// elements, their `results` and `ports` lists, which are walked into. So
/// results come one at a time, and any other element is bounded on its
/// own (none is skipped unread).
fn is_record(path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else { return false };
    let container = match last.as_str() {
        _ if parents.is_empty() => true,
        "report" => parents.iter().all(|parent| ROOTS.contains(&parent.as_str())),
        "results" | "ports" => parents.last().is_some_and(|parent| parent == "report"),
        _ => false,
    };
    !container
}

fn xml_observation(result: &Element, index: usize) -> Observation {
    let host = result.child("host");
    let nvt = result.child("nvt");
    let oid = nvt.and_then(|nvt| nvt.attribute_text("oid")).unwrap_or_default().to_owned();
    let host_ip = host.and_then(Element::text).unwrap_or_default().to_owned();
    let port = result.child_text("port").unwrap_or_default().to_owned();
    let mut observation = Observation {
        at: format!("result {index} at line {} (NVT {oid} on {host_ip} {port})", result.line),
        host: host_ip,
        hostname: host.and_then(|host| host.child_text("hostname")).map(str::to_owned),
        port,
        oid,
        threat: result.child_text("threat").map(str::to_owned),
        severity: result.child_text("severity").map(str::to_owned),
        original_threat: result.child_text("original_threat").map(str::to_owned),
        original_severity: result.child_text("original_severity").map(str::to_owned),
        result_text: result.child_text("description").map(str::to_owned),
        delta: result.child_text("delta").map(str::to_owned),
        ..Observation::default()
    };
    let Some(nvt) = nvt else { return observation };
    observation.name = nvt.child_text("name").and_then(one_line);
    observation.family = nvt.child_text("family").map(str::to_owned);
    for reference in nvt.child("refs").into_iter().flat_map(|refs| refs.children_named("ref")) {
        if reference.attribute_text("type").is_some_and(|kind| kind.eq_ignore_ascii_case("cve"))
            && let Some(id) = reference.attribute_text("id")
        {
            push_cves(&mut observation.cves, id);
        }
    }
    // OpenVAS 6: one comma-separated string, `NOCVE` for none.
    if let Some(cves) = nvt.child_text("cve") {
        push_cves(&mut observation.cves, cves);
    }
    let tags = nvt.child_text("tags").unwrap_or_default();
    observation.summary = tag(tags, "summary").map(str::to_owned);
    observation.solution = nvt.child_text("solution").or_else(|| tag(tags, "solution")).map(str::to_owned);
    // GMP 22: every rating with its origin; older: the base score and the
    // vector among the tags.
    let mut ratings: Vec<CvssRating> = Vec::new();
    for severity in nvt.child("severities").into_iter().flat_map(|severities| severities.children_named("severity")) {
        let score = severity.child_text("score").and_then(number);
        if let Some(rating) = report::cvss_rating(severity.child_text("origin"), severity.child_text("value"), score) {
            push_rating(&mut ratings, rating);
        }
    }
    let base_score = nvt.child_text("cvss_base").and_then(number);
    if let Some(rating) = report::cvss_rating(None, tag(tags, "cvss_base_vector"), base_score) {
        push_rating(&mut ratings, rating);
    }
    observation.cvss = ratings;
    observation.epss = ["max_epss", "max_severity"].iter().find_map(|which| {
        let epss = nvt.find(&["epss", which])?;
        let score = epss.child_text("score").and_then(number).filter(|score| (0.0..=1.0).contains(score))?;
        let percentile =
            epss.child_text("percentile").and_then(number).filter(|percentile| (0.0..=1.0).contains(percentile));
        Some(Epss { score, percentile })
    });
    observation
}

/// Adds a rating of a known CVSS version (a score alone says none) unless
/// the same vector is there already.
fn push_rating(ratings: &mut Vec<CvssRating>, rating: CvssRating) {
    if rating.version.is_empty() || ratings.iter().any(|known| known.vector == rating.vector) {
        return;
    }
    ratings.push(rating);
}

// ---- The CSV export ---------------------------------------------------------

fn convert_csv(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(without_bom(bytes));
    let header = reader.headers().map_err(csv_error)?.clone();
    let column = |name: &str| header.iter().position(|column| column.trim() == name);
    let missing: Vec<&str> = CSV_REQUIRED.iter().copied().filter(|name| column(name).is_none()).collect();
    if !missing.is_empty() {
        return Err(ReportError::Unsupported(format!(
            "not a Greenbone CSV export: the header row lacks {}",
            missing.join(", ")
        )));
    }
    let columns = CsvColumns {
        ip: column("IP"),
        hostname: column("Hostname"),
        port: column("Port"),
        protocol: column("Port Protocol"),
        cvss: column("CVSS"),
        severity: column("Severity"),
        name: column("NVT Name"),
        summary: column("Summary"),
        result: column("Specific Result"),
        oid: column("NVT OID"),
        cves: column("CVEs"),
        timestamp: column("Timestamp"),
        solution: column("Solution"),
    };
    let mut conversion = Conversion::new();
    let mut earliest: Option<(Timestamp, String)> = None;
    for (index, row) in reader.records().enumerate() {
        let row = row.map_err(csv_error)?;
        let line = row.position().map_or(0, csv::Position::line);
        let observation = columns.observation(&row, index + 1, line);
        if let Some(time) = columns.cell(&row, columns.timestamp).and_then(rfc3339)
            && let Some(at) = Timestamp::parse(&time)
            && earliest.as_ref().is_none_or(|(known, _)| at < *known)
        {
            earliest = Some((at, time));
        }
        conversion.add(observation)?;
    }
    Ok(conversion.finish(earliest.map(|(_, time)| time).as_deref()))
}

fn csv_error(error: csv::Error) -> ReportError {
    let what = match error.kind() {
        csv::ErrorKind::Utf8 { .. } => "not UTF-8".to_owned(),
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("a row of {len} cells where the header row has {expected_len}")
        }
        _ => error.to_string(),
    };
    match error.position() {
        Some(position) => {
            ReportError::Invalid(format!("the CSV export is not well-formed at line {}: {what}", position.line()))
        }
        None => ReportError::Invalid(format!("the CSV export is not well-formed: {what}")),
    }
}

/// Where the export's columns are.
struct CsvColumns {
    ip: Option<usize>,
    hostname: Option<usize>,
    port: Option<usize>,
    protocol: Option<usize>,
    cvss: Option<usize>,
    severity: Option<usize>,
    name: Option<usize>,
    summary: Option<usize>,
    result: Option<usize>,
    oid: Option<usize>,
    cves: Option<usize>,
    timestamp: Option<usize>,
    solution: Option<usize>,
}

impl CsvColumns {
    fn cell<'a>(&self, row: &'a csv::StringRecord, column: Option<usize>) -> Option<&'a str> {
        column.and_then(|column| row.get(column)).map(str::trim).filter(|cell| !cell.is_empty())
    }

    fn observation(&self, row: &csv::StringRecord, index: usize, line: u64) -> Observation {
        let text = |column| self.cell(row, column).map(str::to_owned);
        // `Port` and `Port Protocol` as the XML writes them: `80/tcp`.
        let port = match (self.cell(row, self.port), self.cell(row, self.protocol)) {
            (Some(port), Some(protocol)) => format!("{port}/{protocol}"),
            (Some(port), None) => port.to_owned(),
            (None, _) => String::new(),
        };
        let host = text(self.ip).unwrap_or_default();
        let oid = text(self.oid).unwrap_or_default();
        let mut cves = Vec::new();
        if let Some(list) = self.cell(row, self.cves) {
            push_cves(&mut cves, list);
        }
        Observation {
            at: format!("row {index} at line {line} (NVT {oid} on {host} {port})"),
            hostname: text(self.hostname),
            host,
            port,
            oid,
            name: self.cell(row, self.name).and_then(one_line),
            threat: text(self.severity),
            severity: text(self.cvss),
            cves,
            summary: text(self.summary),
            result_text: text(self.result),
            solution: text(self.solution),
            ..Observation::default()
        }
    }
}

#[cfg(test)]
mod tests;
