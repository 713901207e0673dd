//! Scanner reports in: a converted report (what an importer component
//! returned, `esr_contract::report::ConvertedReport`) becomes endpoints,
//! findings and remediation targets.
//!
//! The host, not the importer, decides everything that touches the store,
//! so every format behaves alike:
//!
//! - **Endpoints**: the one the caller names (id or host name), else the
//!   hosts the report names, found by host name and created when new.
//! - **Identity**: a finding is its endpoint, scanner, vulnerability (the
//!   first CVE of the id and its aliases, else the scanner's id), package
//!   name and location. The identity is kept as the finding's
//!   `source.scanner_finding_id` (`<class> <vulnerability> <package>
//!   [<location>]`), so a re-import finds it again; scanners' own ids
//!   (Trivy's `Fingerprint`) change with the package version and are not.
//! - **Re-imports**: seen again, a finding keeps its status (`resolved`
//!   becomes `reopened`) and takes the report's severity, scores, fixed
//!   version and texts; `last_seen_at` is the report's time. A finding of
//!   the endpoint and scanner the report no longer lists, of a package
//!   class the report scanned, is `resolved` (unless the report is
//!   `partial`: it resolves nothing). A report older than the last
//!   one imported for an endpoint and scanner changes nothing there.
//! - **Targets**: one per endpoint and installed package (name, version,
//!   location), listing its findings; `actionable` when a fix exists, else
//!   `identified`; matched against active scopes; `obsolete` when all its
//!   findings are resolved.
//!
//! Every record then goes through the import path's checks
//! (`ingest::write_records_checked`): a report cannot write what an import
//! line could not, and the write is one atomic batch.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use esr_contract::Collection;
use esr_contract::report::{ConvertedReport, EntryState, ReportEntry, ReportHost, SkippedEntry, SuppressionReason};
use esr_contract::report::{MAX_DESCRIPTION_CHARS, MAX_TITLE_CHARS};
use esr_contract::text::{Form as TextForm, cut_chars, nfkc};
use esr_contract::time::Timestamp;
use serde::Serialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::host_matching::{self, EndpointDirectory, HostMatch};
use crate::ingest::client_fields;
use crate::ingest::{KnownRecords, RecordError};
use esr_store::{CollectionWrite, Store, StoreError, StoreReader, read_record, records_by_index};

/// What the caller asks of an import.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// The endpoint the report is about: an id or a host name.
    pub endpoint: Option<String>,
    /// Create `endpoint` when no endpoint has that host name (else a
    /// name that matches none is refused: most often a typo).
    pub create_endpoint: bool,
    /// The scanner the uploader declares (`scanner=`): its findings are
    /// the ones the report is compared with, instead of the importer's.
    pub scanner: Option<String>,
    /// Work everything out, write nothing.
    pub dry_run: bool,
    /// The request that carried the report, recorded in the history.
    pub request_id: String,
}

/// The importer that read a report.
#[derive(Debug, Clone, Copy)]
pub struct Importer<'a> {
    pub format: &'a str,
    /// The component's own version.
    pub version: &'a str,
}

/// How far past the server's clock a report's time may be (scanners'
/// clocks drift): later than that, the report is refused, because it
/// would make every genuine report after it look older than the last.
pub const MAX_CLOCK_SKEW_SECS: i64 = 5 * 60;

/// The most findings one report may make unless `esr serve
/// --import-max-findings` says otherwise: a report is planned whole (it
/// is all or nothing), so its memory grows with its findings.
pub const DEFAULT_MAX_FINDINGS: u32 = 10_000;

/// A report older than this is imported but flagged in the answer.
pub const STALE_AFTER_DAYS: i64 = 90;

/// What an import did (or, dry, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReportOutcome {
    pub format: String,
    /// The importer's version.
    pub importer_version: String,
    /// Whose findings the report was compared with: the importer's
    /// scanner, or the one the uploader declared.
    pub scanner: String,
    /// Whether the uploader declared `scanner`.
    pub scanner_declared: bool,
    /// The tool the document says wrote it (never matched on).
    pub tool: Option<String>,
    /// The report's time, or the import's when it has none.
    pub scanned_at: String,
    pub dry_run: bool,
    /// Findings, by what happened to them.
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub resolved: usize,
    pub reopened: usize,
    /// Entries the report holds that esr cannot represent, with why.
    pub skipped: Vec<SkippedEntry>,
    /// Entries that named a finding an earlier entry already named.
    pub duplicates: usize,
    pub endpoints_created: usize,
    /// The endpoints the report was attached to.
    pub endpoint_ids: Vec<Uuid>,
    pub targets_created: usize,
    pub targets_updated: usize,
    /// Endpoints where the report is older than the last one imported from
    /// its scanner: nothing changed there.
    pub older_than_last: Vec<OlderReport>,
    /// The import's id, which the history entries it wrote name (`null`
    /// for a dry run, which writes none).
    pub batch_id: Option<Uuid>,
    /// What a person should check, e.g. a report far older than the import.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OlderReport {
    pub endpoint_id: Uuid,
    pub last_imported_at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The caller must say which endpoint the report is about.
    #[error("{0}")]
    NoEndpoint(String),
    /// What the importer returned cannot be used (names why).
    #[error("{0}")]
    Unusable(String),
    /// Records built from the report break the import rules.
    #[error("{} record(s) built from the report are invalid", .0.len())]
    Invalid(Vec<InvalidEntry>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A record built from the report that the import rules refuse.
#[derive(Debug, Clone, Serialize)]
pub struct InvalidEntry {
    /// Which entry of the converted report, or which record.
    pub entry: String,
    pub field: String,
    pub reason: String,
}

const FINDINGS: Collection = Collection::VulnerabilityFindings;
const TARGETS: Collection = Collection::RemediationTargets;
const ENDPOINTS: Collection = Collection::Endpoints;

/// Imports a converted report into the organization. What the import
/// reads (endpoints, the stored findings of the endpoint and scanner,
/// targets, scopes) is read inside the write, under the organization's
/// write lock: it is what the write replaces, on every backend.
pub fn import(
    db: &dyn Store,
    organization: Uuid,
    importer: Importer<'_>,
    report: ConvertedReport,
    options: &ReportOptions,
) -> Result<ReportOutcome, ReportError> {
    let format = importer.format;
    let declared = options.scanner.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let scanner = match declared {
        Some(declared) => scanner_name(declared)
            .ok_or_else(|| ReportError::Unusable(format!("the declared scanner {declared:?} {NOT_A_SCANNER_NAME}")))?,
        None => scanner_name(report.scanner.trim()).ok_or_else(|| {
            ReportError::Unusable(format!(
                "the {format} importer names the scanner {:?}, which {NOT_A_SCANNER_NAME}",
                report.scanner
            ))
        })?,
    };
    let scanned_at = match report.scanned_at.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        Some(text) => match Timestamp::parse_saturating(text) {
            Some(at) => Some(at),
            None => return Err(ReportError::Unusable(format!("the report's time {text:?} is not an RFC 3339 time"))),
        },
        None => None,
    };
    let refused = refused_names(&report);
    if !refused.is_empty() {
        return Err(ReportError::Invalid(refused));
    }
    let mut warnings = Vec::new();
    if let Some(at) = scanned_at {
        let now = Timestamp(esr_system::clock::unix_now_nanos());
        if at.0 > now.0.saturating_add(MAX_CLOCK_SKEW_SECS * NANOS_PER_SEC) {
            return Err(ReportError::Unusable(format!(
                "the report's time {} is later than the server's clock ({}) by more than {MAX_CLOCK_SKEW_SECS} s: check the scanner's clock; nothing was written",
                at.format(),
                now.format()
            )));
        }
        if at.0 < now.0.saturating_sub(STALE_AFTER_DAYS * 86_400 * NANOS_PER_SEC) {
            warnings.push(format!(
                "the report's time {} is more than {STALE_AFTER_DAYS} days before the import: is it the report you meant?",
                at.format()
            ));
        }
    }
    let cause = crate::ingest::HistoryCause::report(crate::ingest::ReportProvenance {
        scanner: scanner.clone(),
        scanner_declared: declared.is_some(),
        format: format.to_owned(),
        importer_version: importer.version.to_owned(),
        tool: report.tool.clone(),
        request_id: options.request_id.clone(),
    });
    let mut result = None;
    db.write_batch(organization, &mut |reader, now| {
        // Worked out afresh on each call (a backend may retry the write).
        let moment = Moment { now, scanned_at: scanned_at.unwrap_or(now), timeless: scanned_at.is_none() };
        let planned = plan(reader, format, &scanner, &report, options, moment, &cause);
        match planned {
            Ok((mut outcome, writes)) => {
                outcome.batch_id = cause.batch_id.filter(|_| !options.dry_run);
                outcome.importer_version = importer.version.to_owned();
                outcome.scanner_declared = declared.is_some();
                outcome.tool = report.tool.clone();
                outcome.warnings = warnings.clone();
                result = Some(Ok(outcome));
                Ok(if options.dry_run { Vec::new() } else { writes })
            }
            Err(ReportError::Store(error)) => Err(error),
            Err(error) => {
                result = Some(Err(error));
                Ok(Vec::new())
            }
        }
    })?;
    result.unwrap_or_else(|| Err(StoreError::Backend("the write ended without planning the report".into()).into()))
}

const NANOS_PER_SEC: i64 = 1_000_000_000;

const NOT_A_SCANNER_NAME: &str = "is not a token of at most 64 lowercase letters, digits, dashes and underscores";

/// A scanner's name as findings' `source.scanner` holds it, if `text` is one.
fn scanner_name(text: &str) -> Option<String> {
    let fits = !text.is_empty()
        && text.len() <= 64
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    fits.then(|| text.to_owned())
}

/// When an import runs and when its report was made.
#[derive(Clone, Copy)]
struct Moment {
    now: Timestamp,
    /// The report's time, or `now` when it has none (`timeless`).
    scanned_at: Timestamp,
    timeless: bool,
}

/// The import's outcome and the records it writes, read from `reader`.
fn plan(
    reader: &mut dyn StoreReader,
    format: &str,
    scanner: &str,
    report: &ConvertedReport,
    options: &ReportOptions,
    moment: Moment,
    cause: &crate::ingest::HistoryCause,
) -> Result<(ReportOutcome, Vec<CollectionWrite>), ReportError> {
    let Moment { now, scanned_at, timeless } = moment;
    let scanned_at_text = scanned_at.format();
    let mut outcome = ReportOutcome {
        format: format.to_owned(),
        scanner: scanner.to_owned(),
        scanned_at: scanned_at_text.clone(),
        dry_run: options.dry_run,
        skipped: report.skipped.clone(),
        ..ReportOutcome::default()
    };

    let mut records = Records::default();
    // What this import read, for the checks of what it writes.
    let mut known = KnownRecords::new();
    let endpoints = resolve_endpoints(reader, report, options, &scanned_at_text, &mut records, &mut outcome)?;

    // Entries by endpoint, then by identity (the first entry of an identity wins).
    let mut by_endpoint: BTreeMap<Uuid, BTreeMap<String, (usize, &ReportEntry)>> = BTreeMap::new();
    for (index, entry) in report.entries.iter().enumerate() {
        let Some(endpoint) = endpoints.for_entry(entry) else {
            outcome.skipped.push(SkippedEntry {
                entry: format!("entries[{index}] ({})", entry.vulnerability_id),
                reason: format!("its host {:?} is none of the report's hosts", entry.host.as_deref().unwrap_or("")),
            });
            continue;
        };
        let Some(identity) = identity(entry) else {
            outcome.skipped.push(SkippedEntry {
                entry: format!("entries[{index}] ({})", entry.vulnerability_id),
                reason: "no vulnerability id or no package name".into(),
            });
            continue;
        };
        match by_endpoint.entry(endpoint).or_default().entry(identity) {
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert((index, entry));
            }
            std::collections::btree_map::Entry::Occupied(_) => outcome.duplicates += 1,
        }
    }
    let scanned_classes: BTreeSet<&'static str> = if report.scanned_classes.is_empty() {
        report.entries.iter().map(|entry| entry.class.as_str()).collect()
    } else {
        report.scanned_classes.iter().map(|class| class.as_str()).collect()
    };
    for endpoint in endpoints.all() {
        outcome.endpoint_ids.push(endpoint);
        let listed = by_endpoint.remove(&endpoint).unwrap_or_default();
        let existing = stored_findings(reader, endpoint, scanner, &mut known)?;
        let last_imported = existing.values().filter_map(last_report_time).max();
        if let Some(last) = last_imported.filter(|last| *last > scanned_at) {
            outcome.older_than_last.push(OlderReport { endpoint_id: endpoint, last_imported_at: last.format() });
            continue;
        }
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for (identity, (index, entry)) in listed {
            seen.insert(identity.clone());
            let stored = existing.get(&identity);
            let finding = finding_record(FindingInput {
                endpoint,
                scanner,
                identity: &identity,
                entry,
                stored,
                scanned_at: &scanned_at_text,
                timeless,
            });
            match stored.map(|stored| stored.get("status").and_then(Value::as_str)) {
                Some(Some("resolved")) if finding["status"] == "reopened" => outcome.reopened += 1,
                _ => {}
            }
            records.finding_labels.push(format!("entries[{index}] ({})", entry.vulnerability_id));
            records.finding_packages.push(Some(InstalledPackage::of(endpoint, entry)));
            records.findings.push(finding);
        }
        for (identity, stored) in &existing {
            // A partial report does not list all that is still there.
            if report.partial || seen.contains(identity) {
                continue;
            }
            let class = identity.split(' ').next().unwrap_or("");
            let open = matches!(stored.get("status").and_then(Value::as_str), Some("open" | "reopened"));
            if !open || !scanned_classes.contains(class) {
                continue;
            }
            let mut resolved = client_fields(stored);
            resolved.insert("status".into(), json!("resolved"));
            resolved.insert("resolved_at".into(), json!(scanned_at_text));
            outcome.resolved += 1;
            records.finding_labels.push(format!("stored finding {}", stored["id"].as_str().unwrap_or("")));
            records.finding_packages.push(None);
            records.findings.push(Value::Object(resolved));
        }
    }
    plan_targets(reader, &mut records, &mut known, &now.format())?;
    // Findings and targets this import makes are not stored yet.
    for (collection, made) in [(FINDINGS, &records.findings), (TARGETS, &records.targets)] {
        let known = known.entry(collection).or_default();
        for id in made.iter().filter_map(|record| record["id"].as_str()?.parse::<Uuid>().ok()) {
            known.entry(id).or_insert(None);
        }
    }

    let target_count = records.targets.len() - records.target_steps;
    let target_steps = records.target_steps;
    let sets = vec![
        (ENDPOINTS, std::mem::take(&mut records.endpoints)),
        (TARGETS, std::mem::take(&mut records.targets)),
        (FINDINGS, std::mem::take(&mut records.findings)),
    ];
    match crate::ingest::write_records_checked(reader, now, &sets, &known, cause) {
        Ok((summaries, writes)) => {
            for (collection, summary) in summaries {
                match collection {
                    FINDINGS => {
                        outcome.created = summary.created;
                        // Resolutions and reopenings are updates too; they
                        // are counted apart.
                        outcome.updated = summary.updated.saturating_sub(outcome.resolved + outcome.reopened);
                        outcome.unchanged = summary.unchanged;
                    }
                    TARGETS => {
                        outcome.targets_created = summary.created;
                        outcome.targets_updated = summary.updated.saturating_sub(target_steps);
                    }
                    _ => {}
                }
            }
            debug_assert!(target_count >= outcome.targets_created);
            Ok((outcome, writes))
        }
        Err(Ok(errors)) => Err(ReportError::Invalid(
            errors.into_iter().map(|error| invalid_entry(error, &records.finding_labels)).collect(),
        )),
        Err(Err(error)) => Err(error.into()),
    }
}

fn invalid_entry(error: RecordError, finding_labels: &[String]) -> InvalidEntry {
    let entry = match error.collection {
        FINDINGS => finding_labels.get(error.index).cloned().unwrap_or_default(),
        collection => format!("{collection}[{}]", error.index),
    };
    InvalidEntry { entry, field: error.field, reason: error.reason }
}

/// The records an import writes, as import lines (client-owned fields).
#[derive(Default)]
struct Records {
    endpoints: Vec<Value>,
    targets: Vec<Value>,
    /// Of `targets`, the lines that are a step on a target's way (an
    /// `identified` target made `actionable` before it is `queued`): the
    /// state machine moves one step a line, and the history keeps each.
    target_steps: usize,
    findings: Vec<Value>,
    /// Where each finding came from, for error messages.
    finding_labels: Vec<String>,
    /// The installed package of each finding the report lists (`None`:
    /// one it no longer lists).
    finding_packages: Vec<Option<InstalledPackage>>,
}

/// One installation of one package on one endpoint: what a remediation
/// target fixes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct InstalledPackage {
    endpoint: Uuid,
    product: String,
    version: Option<String>,
    location: Option<String>,
    vendor: Option<String>,
    package_manager: Option<String>,
    os_package: bool,
}

impl InstalledPackage {
    fn of(endpoint: Uuid, entry: &ReportEntry) -> InstalledPackage {
        InstalledPackage {
            endpoint,
            // One package, one target, however the report spelled it.
            product: nfkc(entry.package.name.trim()).into_owned(),
            version: entry.package.version.clone(),
            location: entry.location.clone(),
            vendor: entry.package.vendor.clone(),
            package_manager: entry.package.package_manager.clone(),
            os_package: entry.class == esr_contract::report::PackageClass::Os,
        }
    }

    /// What tells this installation's target apart.
    fn key(&self) -> InstallationKey<'_> {
        (self.endpoint.to_string(), nfkc(&self.product), self.version.as_deref(), self.location.as_deref())
    }
}

/// An installation as a target names it: endpoint, product (in NFKC),
/// installed version and location.
type InstallationKey<'a> = (String, Cow<'a, str>, Option<&'a str>, Option<&'a str>);

/// The installation a stored target is for.
fn installation_of(target: &Value) -> InstallationKey<'_> {
    (
        target["endpoint_id"].as_str().unwrap_or_default().to_owned(),
        nfkc(target["subject"]["product"].as_str().unwrap_or_default()),
        target["installed_version"].as_str(),
        target["install_path"].as_str(),
    )
}

/// Which endpoint each entry goes to.
struct Endpoints {
    /// The caller's endpoint, or the report's only host.
    default: Option<Uuid>,
    by_host_key: HashMap<String, Uuid>,
}

impl Endpoints {
    fn for_entry(&self, entry: &ReportEntry) -> Option<Uuid> {
        match &entry.host {
            Some(key) => self.by_host_key.get(key).copied().or(self.default),
            None => self.default,
        }
    }

    fn all(&self) -> Vec<Uuid> {
        let mut all: BTreeSet<Uuid> = self.by_host_key.values().copied().collect();
        all.extend(self.default);
        all.into_iter().collect()
    }
}

fn resolve_endpoints(
    reader: &mut dyn StoreReader,
    report: &ConvertedReport,
    options: &ReportOptions,
    now: &str,
    records: &mut Records,
    outcome: &mut ReportOutcome,
) -> Result<Endpoints, ReportError> {
    // Read once, when a name is to be matched; the endpoints this import
    // creates join it, so two hosts of one name are one endpoint.
    let mut directory: Option<EndpointDirectory> = None;
    let default = match options.endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty()) {
        Some(named) => match Uuid::parse_str(named) {
            Ok(id) => {
                if reader.get(ENDPOINTS, id)?.is_none() {
                    return Err(ReportError::NoEndpoint(format!("no endpoint {id} in this organization")));
                }
                Some(id)
            }
            Err(_) => {
                let directory = loaded(&mut directory, reader)?;
                match directory.named(named) {
                    [(id, _)] => Some(*id),
                    [] if !options.create_endpoint => {
                        return Err(ReportError::NoEndpoint(format!(
                            "no endpoint has the host name {named:?}: check the name, give an endpoint id, or let the \
                             import create it (`esr import --create-endpoint`, the admin route's `createEndpoint=true`); \
                             nothing was written"
                        )));
                    }
                    [] => {
                        let host = ReportHost { hostname: named.to_owned(), ..ReportHost::default() };
                        Some(create_endpoint(
                            directory,
                            &host,
                            report.operating_system.as_ref(),
                            now,
                            records,
                            outcome,
                        )?)
                    }
                    several => return Err(ambiguous(named, several)),
                }
            }
        },
        None => None,
    };
    // Host names as endpoints are found by them: case-insensitively.
    let hostnames: BTreeSet<String> =
        report.hosts.iter().map(|host| host.hostname.trim().to_ascii_lowercase()).collect();
    if default.is_some() && hostnames.len() > 1 {
        // `endpoint` says what one endpoint the report is about: the other
        // hosts' entries must not be written anywhere.
        let names: Vec<&str> = hostnames.iter().map(String::as_str).take(10).collect();
        return Err(ReportError::Unusable(format!(
            "the report names {} hosts ({}{}), and `endpoint` confines a report to one: import it without `endpoint`, so each host's entries go to its endpoint, or split it per host; nothing was written",
            hostnames.len(),
            names.join(", "),
            if hostnames.len() > names.len() { ", …" } else { "" }
        )));
    }
    let mut by_host_key = HashMap::new();
    for host in &report.hosts {
        if let Some(default) = default {
            // The caller's endpoint is the report's one host, however many
            // entries the report gives it: a second entry of the same name
            // must not be matched, or made, elsewhere.
            by_host_key.insert(host.key.clone(), default);
            continue;
        }
        // The hosts a report names are the devices it scanned: new ones are
        // endpoints to create.
        let directory = loaded(&mut directory, reader)?;
        let id = match directory.find(host) {
            HostMatch::Endpoint(id) => id,
            HostMatch::Ambiguous(name, several) => return Err(ambiguous(&name, &several)),
            HostMatch::None => create_endpoint(directory, host, host.operating_system.as_ref(), now, records, outcome)?,
        };
        by_host_key.insert(host.key.clone(), id);
    }
    let default = default.or_else(|| match report.hosts.as_slice() {
        [only] => by_host_key.get(&only.key).copied(),
        _ => None,
    });
    let needs_default = report.entries.iter().any(|entry| entry.host.is_none());
    if default.is_none() && (needs_default || report.hosts.is_empty()) {
        return Err(ReportError::NoEndpoint(
            "the report names no host: say which endpoint it is about with `--endpoint ID|HOSTNAME` (the admin route's `endpoint` parameter)".into(),
        ));
    }
    Ok(Endpoints { default, by_host_key })
}

/// The organization's endpoints, read on first use.
fn loaded<'d>(
    directory: &'d mut Option<EndpointDirectory>,
    reader: &mut dyn StoreReader,
) -> Result<&'d mut EndpointDirectory, StoreError> {
    if directory.is_none() {
        *directory = Some(EndpointDirectory::read(reader)?);
    }
    Ok(directory.get_or_insert_with(EndpointDirectory::default))
}

fn ambiguous(name: &str, several: &[(Uuid, String)]) -> ReportError {
    let candidates: Vec<String> = several.iter().take(10).map(|(id, name)| format!("{id} ({name})")).collect();
    ReportError::NoEndpoint(format!(
        "{} endpoints have the host name {name:?} (host names match without regard to case): {}; \
         give the endpoint's id instead; nothing was written",
        several.len(),
        candidates.join(", ")
    ))
}

/// A new endpoint for `host`, written with the import and added to the
/// directory.
fn create_endpoint(
    directory: &mut EndpointDirectory,
    host: &ReportHost,
    os: Option<&esr_contract::report::OperatingSystem>,
    now: &str,
    records: &mut Records,
    outcome: &mut ReportOutcome,
) -> Result<Uuid, ReportError> {
    let Some(hostname) = host_matching::new_hostname(host) else {
        return Err(ReportError::Unusable(format!(
            "the report's host {:?} has no name and no IP address an endpoint could be known by; nothing was written",
            host.key
        )));
    };
    let id = Uuid::now_v7();
    let mut record = new_endpoint(id, &hostname, os, now);
    let (ip, mac_address, agent_id) = host_matching::host_fields(host);
    record["ip"] = json!(ip);
    record["mac_address"] = json!(mac_address);
    record["agent_id"] = json!(agent_id);
    directory.add(id, &record);
    records.endpoints.push(record);
    outcome.endpoints_created += 1;
    Ok(id)
}

fn new_endpoint(id: Uuid, hostname: &str, os: Option<&esr_contract::report::OperatingSystem>, now: &str) -> Value {
    let (name, version, family, vendor, architecture) = match os {
        Some(os) => (
            if os.name.trim().is_empty() { "unknown".to_owned() } else { os.name.clone() },
            os.version.clone(),
            os.family.clone().unwrap_or_else(|| esr_contract::report::os_family(&os.name).to_owned()),
            os.vendor.clone(),
            os.architecture.clone(),
        ),
        None => ("unknown".to_owned(), None, "other".to_owned(), None, None),
    };
    json!({
        "id": id,
        "hostname": hostname,
        "ip": null,
        "mac_address": null,
        "operating_system": {"name": name, "version": version, "family": family, "vendor": vendor, "architecture": architecture},
        "agent_id": null,
        "agent_version": null,
        "tags": [],
        "owner": null,
        "last_seen_at": now,
    })
}

/// A finding's identity within its endpoint and scanner; `None` when the
/// entry lacks a vulnerability id or a package. In NFKC, so that a package
/// spelled in full-width or mathematical letters is the same package.
fn identity(entry: &ReportEntry) -> Option<String> {
    let id = entry.vulnerability_id.trim();
    let package = nfkc(entry.package.name.trim());
    if id.is_empty() || package.is_empty() {
        return None;
    }
    // A check naming many CVEs is its own identity (`ReportEntry::check`).
    let check = entry.check.as_deref().map(str::trim).filter(|check| !check.is_empty());
    let vulnerability = nfkc(check.or(cve_of(entry)).unwrap_or(id));
    let mut identity = format!("{} {} {}", entry.class.as_str(), vulnerability, package.replace(' ', "_"));
    if let Some(location) = entry.location.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
        identity.push(' ');
        identity.push_str(&nfkc(location));
    }
    // `scanner_finding_id` holds at most 256 characters: a long identity
    // keeps its start and a hash of the whole.
    if identity.chars().count() > 256 {
        use sha2::Digest;
        let digest = hex::encode(sha2::Sha256::digest(identity.as_bytes()));
        let kept: String = identity.chars().take(256 - 1 - 32).collect();
        identity = format!("{kept}#{}", &digest[..32]);
    }
    Some(identity)
}

/// The entries whose package name or vendor a record's name may not hold
/// (`text::Form::Name`: invisible characters, words mixing Latin with
/// look-alike letters): such a name could pass for another package and
/// escape the scopes written for it. The report is refused naming them,
/// as it is for any record made from it that the import rules refuse.
fn refused_names(report: &ConvertedReport) -> Vec<InvalidEntry> {
    let mut refused = Vec::new();
    for (index, entry) in report.entries.iter().enumerate() {
        // As given: a separator or control character around a name would
        // reach the title the finding is given when the report has none.
        let names =
            [("package.name", Some(entry.package.name.as_str())), ("package.vendor", entry.package.vendor.as_deref())];
        for (field, name) in names {
            if let Some(reason) = name.and_then(|name| esr_contract::text::refusal(name, TextForm::Name)) {
                refused.push(InvalidEntry {
                    entry: format!("entries[{index}] ({})", entry.vulnerability_id),
                    field: field.to_owned(),
                    reason,
                });
            }
        }
    }
    refused
}

/// The first CVE among the entry's id and aliases.
fn cve_of(entry: &ReportEntry) -> Option<&str> {
    std::iter::once(entry.vulnerability_id.trim())
        .chain(entry.aliases.iter().map(|alias| alias.trim()))
        .find(|id| esr_contract::report::is_cve(id))
}

/// The endpoint's findings from this scanner, by identity.
/// The endpoint's findings from this scanner, by identity; every finding
/// of the endpoint goes into `known`.
fn stored_findings(
    reader: &mut dyn StoreReader,
    endpoint: Uuid,
    scanner: &str,
    known: &mut KnownRecords,
) -> Result<BTreeMap<String, Value>, StoreError> {
    let mut found = BTreeMap::new();
    let known = known.entry(FINDINGS).or_default();
    for record in records_by_index(reader, FINDINGS, "endpoint_id", &endpoint.to_string())? {
        if let Some(id) = record["id"].as_str().and_then(|id| id.parse::<Uuid>().ok()) {
            known.insert(id, Some(record.clone()));
        }
        if record["source"]["scanner"] != scanner {
            continue;
        }
        if let Some(identity) = record["source"]["scanner_finding_id"].as_str() {
            // Identities stored before they were kept in NFKC.
            found.insert(nfkc(identity).into_owned(), record);
        }
    }
    Ok(found)
}

/// When the report that last touched a finding was made.
fn last_report_time(finding: &Value) -> Option<Timestamp> {
    ["last_seen_at", "resolved_at"]
        .iter()
        .filter_map(|field| finding.get(*field).and_then(Value::as_str).and_then(Timestamp::parse_saturating))
        .max()
}

struct FindingInput<'a> {
    endpoint: Uuid,
    scanner: &'a str,
    identity: &'a str,
    entry: &'a ReportEntry,
    stored: Option<&'a Value>,
    scanned_at: &'a str,
    /// The report has no time of its own (`scanned_at` is the import's).
    timeless: bool,
}

fn finding_record(input: FindingInput<'_>) -> Value {
    let FindingInput { endpoint, scanner, identity, entry, stored, scanned_at, timeless } = input;
    let stored_status = stored.and_then(|s| s.get("status")).and_then(Value::as_str);
    let (status, suppression) = match (&entry.state, stored_status) {
        (Some(EntryState::Resolved), _) => ("resolved", Value::Null),
        (Some(EntryState::Suppressed { reason, note }), _) => {
            let reason = match reason {
                SuppressionReason::AcceptedRisk => "accepted_risk",
                SuppressionReason::FalsePositive => "false_positive",
                SuppressionReason::CompensatingControl => "compensating_control",
            };
            ("suppressed", json!({"reason": reason, "note": note, "expires_at": null}))
        }
        // Found again: a resolved finding is reopened, a suppressed one
        // stays suppressed (someone decided so), the rest stay as they are.
        (_, Some("resolved")) => ("reopened", Value::Null),
        (None, Some("suppressed")) => {
            ("suppressed", stored.and_then(|s| s.get("suppression")).cloned().unwrap_or(Value::Null))
        }
        (_, Some("reopened")) => ("reopened", Value::Null),
        _ => ("open", Value::Null),
    };
    // What the contract's state machine does not allow (a resolved finding
    // a VEX statement now suppresses, a suppressed one it calls resolved)
    // keeps the stored state.
    let (status, suppression) = match stored_status {
        Some(from) if !esr_contract::contract::transition_allowed(FINDINGS, from, status) => {
            (from, stored.and_then(|s| s.get("suppression")).cloned().unwrap_or(Value::Null))
        }
        _ => (status, suppression),
    };
    let cvss = entry
        .cvss
        .iter()
        .find(|rating| rating.base_score.is_some() && rating.vector.is_some() && !rating.version.is_empty())
        .map(|rating| json!({"version": rating.version, "base_score": rating.base_score, "vector": rating.vector}))
        .unwrap_or(Value::Null);
    let epss = entry
        .epss
        .as_ref()
        // The contract's EPSS has both numbers; a score alone is not
        // completed with an invented percentile.
        .and_then(|epss| epss.percentile.map(|percentile| json!({"score": epss.score, "percentile": percentile})))
        .unwrap_or(Value::Null);
    let title = entry.title.clone().unwrap_or_else(|| {
        format!(
            "{} in {} {}",
            entry.vulnerability_id.trim(),
            entry.package.name,
            entry.package.version.as_deref().unwrap_or("")
        )
        .trim_end()
        .to_owned()
    });
    let first_seen = stored.and_then(|s| s.get("first_seen_at")).cloned().unwrap_or_else(|| json!(scanned_at));
    let resolved_at = if status == "resolved" {
        stored
            .filter(|_| stored_status == Some("resolved"))
            .and_then(|s| s.get("resolved_at"))
            .cloned()
            .unwrap_or_else(|| json!(scanned_at))
    } else {
        Value::Null
    };
    let id = stored.and_then(|s| s.get("id")).cloned().unwrap_or_else(|| json!(Uuid::now_v7()));
    let mut record = json!({
        "id": id,
        "endpoint_id": endpoint,
        "finding_type": "vulnerability",
        "title": cut_chars(&title, MAX_TITLE_CHARS),
        "description": entry.description.as_deref().map(|d| cut_chars(d, MAX_DESCRIPTION_CHARS)),
        "severity": entry.severity.as_str(),
        "status": status,
        "cve_id": cve_of(entry),
        "cvss": cvss,
        "epss": epss,
        "kev": entry.kev.unwrap_or(false),
        "subject": {
            "type": "software",
            "vendor": entry.package.vendor,
            "product": entry.package.name.trim(),
            "version": entry.package.version,
            "cpe": entry.package.cpe,
            "purl": entry.package.purl,
        },
        "fixed_version": entry.fixed_version,
        "source": {"scanner": scanner, "scanner_finding_id": identity},
        "remediation_target_id": stored.and_then(|s| s.get("remediation_target_id")).cloned().unwrap_or(Value::Null),
        "suppression": suppression,
        "first_seen_at": first_seen,
        "last_seen_at": scanned_at,
        "resolved_at": resolved_at,
    });
    // A report without a time of its own says nothing new by being
    // imported again: the finding keeps its `last_seen_at` unless
    // something else changed.
    if timeless && let Some(stored) = stored {
        let mut same = record.clone();
        same["last_seen_at"] = stored["last_seen_at"].clone();
        let stored_fields = Value::Object(client_fields(stored));
        if normalized(&same) == normalized(&stored_fields) {
            record["last_seen_at"] = stored["last_seen_at"].clone();
        }
    }
    record
}

/// A record as the import path normalizes it (null fields present), for
/// comparing before the write.
fn normalized(record: &Value) -> Value {
    let mut record = record.clone();
    if let Some(object) = record.as_object_mut() {
        object.retain(|_, value| !value.is_null());
    }
    record
}

/// Remediation targets for the findings this import writes: one per
/// endpoint and installed package, holding every finding of it.
///
/// A new target is `actionable` when one of its open findings has a fixed
/// version, else `identified`; an `identified` one becomes `actionable`
/// when a fix appears. Every active scope matching it adds its id; an
/// `actionable` target is then `queued` and gets the earliest `due_at`
/// their SLAs give for its most severe open finding (an `identified` one
/// keeps its state: the state machine queues only actionable work, but
/// gets the scopes and the due date). A stored `identified` target that
/// becomes actionable and is in scope goes through `actionable` to
/// `queued`: two lines, so the history keeps both steps. When none of its findings is open
/// any more, a target not yet being worked on (`identified`, `actionable`,
/// `queued`, `pending_approval`, `blocked`, `failed`) becomes `obsolete`:
/// `remediated` is reached only through `verifying`, which an import does
/// not do. A target in a terminal state is left alone, and a package found
/// vulnerable again gets a new target.
fn plan_targets(
    reader: &mut dyn StoreReader,
    records: &mut Records,
    known: &mut KnownRecords,
    now: &str,
) -> Result<(), StoreError> {
    // The findings of each installation this import lists.
    let mut groups: BTreeMap<InstalledPackage, Vec<usize>> = BTreeMap::new();
    for (index, package) in records.finding_packages.iter().enumerate() {
        if let Some(package) = package {
            groups.entry(package.clone()).or_default().push(index);
        }
    }
    // The endpoints of every finding written, listed or resolved.
    let endpoints: BTreeSet<Uuid> =
        records.findings.iter().filter_map(|finding| finding["endpoint_id"].as_str()?.parse::<Uuid>().ok()).collect();
    let mut stored_targets: Vec<Value> = Vec::new();
    for endpoint in &endpoints {
        stored_targets.extend(records_by_index(reader, TARGETS, "endpoint_id", &endpoint.to_string())?);
    }
    let known_targets = known.entry(TARGETS).or_default();
    for target in &stored_targets {
        if let Some(id) = target["id"].as_str().and_then(|id| id.parse::<Uuid>().ok()) {
            known_targets.insert(id, Some(target.clone()));
        }
    }
    // The target each installation has, not yet closed (the first stored).
    let mut open_targets: HashMap<InstallationKey<'_>, &Value> = HashMap::new();
    for target in &stored_targets {
        if !matches!(target["status"].as_str(), Some("remediated" | "rejected" | "obsolete")) {
            open_targets.entry(installation_of(target)).or_insert(target);
        }
    }
    let scopes = records_by_index(reader, Collection::Scopes, "status", "active")?;
    let mut endpoint_records: HashMap<Uuid, Value> = HashMap::new();
    let new_endpoints: HashMap<Uuid, &Value> = records
        .endpoints
        .iter()
        .filter_map(|record| Some((record["id"].as_str()?.parse::<Uuid>().ok()?, record)))
        .collect();
    for endpoint in groups.keys().map(|package| package.endpoint).collect::<BTreeSet<Uuid>>().iter() {
        let record = match new_endpoints.get(endpoint) {
            Some(record) => (*record).clone(),
            None => {
                let stored = read_record(reader, ENDPOINTS, *endpoint)?;
                known.entry(ENDPOINTS).or_default().insert(*endpoint, stored.clone());
                stored.unwrap_or(Value::Null)
            }
        };
        endpoint_records.insert(*endpoint, record);
    }
    let mut targets: BTreeMap<String, Value> = BTreeMap::new();
    let mut steps: Vec<Value> = Vec::new();
    // Findings that move to another target (a new version of their package
    // installed), by the target they leave: it must stop listing them.
    let mut moved: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (package, indexes) in &groups {
        let existing = open_targets.get(&package.key()).copied();
        let mut target = match existing {
            Some(stored) => client_fields(stored),
            None => new_target(package, now),
        };
        let target_id = target.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
        let mut finding_ids: Vec<String> = target
            .get("finding_ids")
            .and_then(Value::as_array)
            .map(|ids| ids.iter().filter_map(|id| id.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        for index in indexes {
            let finding = &mut records.findings[*index];
            if let (Some(previous), Some(id)) = (finding["remediation_target_id"].as_str(), finding["id"].as_str())
                && previous != target_id
            {
                moved.entry(previous.to_owned()).or_default().insert(id.to_owned());
            }
            finding["remediation_target_id"] = json!(target_id);
            if let Some(id) = finding["id"].as_str()
                && !finding_ids.iter().any(|known| known == id)
            {
                finding_ids.push(id.to_owned());
            }
        }
        let open: Vec<&Value> = indexes
            .iter()
            .map(|index| &records.findings[*index])
            .filter(|finding| matches!(finding["status"].as_str(), Some("open" | "reopened")))
            .collect();
        target.insert("finding_ids".into(), json!(finding_ids));
        let status = target.get("status").and_then(Value::as_str).unwrap_or("identified").to_owned();
        let fixable = open.iter().any(|finding| !finding["fixed_version"].is_null());
        let mut next = status.clone();
        if open.is_empty() {
            if esr_contract::contract::transition_allowed(TARGETS, &status, "obsolete") {
                next = "obsolete".into();
            }
        } else {
            if next == "identified" && fixable {
                next = "actionable".into();
            }
            let endpoint = &endpoint_records[&package.endpoint];
            let matching: Vec<&Value> =
                scopes.iter().filter(|scope| scope_matches(scope, package, endpoint, &open)).collect();
            if !matching.is_empty() {
                let mut scope_ids: Vec<Value> =
                    target.get("scope_ids").and_then(Value::as_array).cloned().unwrap_or_default();
                for scope in &matching {
                    if !scope_ids.contains(&scope["id"]) {
                        scope_ids.push(scope["id"].clone());
                    }
                }
                target.insert("scope_ids".into(), json!(scope_ids));
                if next == "actionable" {
                    next = "queued".into();
                }
                if target.get("due_at").is_none_or(Value::is_null)
                    && let Some(due) = due_at(&matching, &open, now)
                {
                    target.insert("due_at".into(), json!(due));
                }
            }
        }
        if !esr_contract::contract::transition_allowed(TARGETS, &status, &next) {
            // Identified, then actionable and queued at once: the first step on its own line.
            let mut step = target.clone();
            step.insert("status".into(), json!("actionable"));
            steps.push(Value::Object(step));
        }
        target.insert("status".into(), json!(next));
        targets.insert(target_id, Value::Object(target));
    }
    // A target this import also writes drops what left it here.
    for (target_id, left) in &moved {
        if let Some(target) = targets.get_mut(target_id) {
            drop_findings(target, left);
        }
    }
    // Targets of findings this report resolved, or that findings left,
    // whose findings are now all resolved or gone.
    let resolved_targets: BTreeSet<String> = records
        .findings
        .iter()
        .zip(&records.finding_packages)
        .filter(|(_, package)| package.is_none())
        .filter_map(|(finding, _)| finding["remediation_target_id"].as_str().map(str::to_owned))
        .chain(moved.keys().cloned())
        .filter(|id| !targets.contains_key(id))
        .collect();
    let in_batch: HashMap<&str, &Value> =
        records.findings.iter().filter_map(|finding| Some((finding["id"].as_str()?, finding))).collect();
    let stored_by_id: HashMap<&str, &Value> =
        stored_targets.iter().filter_map(|target| Some((target["id"].as_str()?, target))).collect();
    for target_id in resolved_targets {
        let Ok(id) = Uuid::parse_str(&target_id) else { continue };
        let stored = match stored_by_id.get(target_id.as_str()) {
            Some(stored) => (*stored).clone(),
            None => match read_record(reader, TARGETS, id)? {
                Some(stored) => stored,
                None => continue,
            },
        };
        let mut stored = stored;
        let left = moved.get(&target_id);
        if let Some(left) = left {
            drop_findings(&mut stored, left);
        }
        let status = stored["status"].as_str().unwrap_or_default();
        if !esr_contract::contract::transition_allowed(TARGETS, status, "obsolete") || status == "obsolete" {
            if left.is_some() {
                targets.insert(target_id, Value::Object(client_fields(&stored)));
            }
            continue;
        }
        let mut any_open = false;
        for finding_id in stored["finding_ids"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            let status = match in_batch.get(finding_id) {
                Some(finding) => finding["status"].as_str().map(str::to_owned),
                None => match Uuid::parse_str(finding_id) {
                    Ok(id) => match known.get(&FINDINGS).and_then(|findings| findings.get(&id)) {
                        Some(stored) => stored.as_ref().and_then(|f| f["status"].as_str().map(str::to_owned)),
                        None => {
                            read_record(reader, FINDINGS, id)?.and_then(|f| f["status"].as_str().map(str::to_owned))
                        }
                    },
                    Err(_) => None,
                },
            };
            any_open |= matches!(status.as_deref(), Some("open" | "reopened"));
        }
        if !any_open {
            let mut target = client_fields(&stored);
            target.insert("status".into(), json!("obsolete"));
            targets.insert(target_id, Value::Object(target));
        } else if left.is_some() {
            targets.insert(target_id, Value::Object(client_fields(&stored)));
        }
    }
    records.target_steps = steps.len();
    records.targets = steps.into_iter().chain(targets.into_values()).collect();
    Ok(())
}

/// Takes findings that moved to another target out of a target's list.
fn drop_findings(target: &mut Value, left: &BTreeSet<String>) {
    if let Some(ids) = target.get_mut("finding_ids").and_then(Value::as_array_mut) {
        ids.retain(|id| id.as_str().is_none_or(|id| !left.contains(id)));
    }
}

fn new_target(package: &InstalledPackage, now: &str) -> Map<String, Value> {
    let _ = now;
    let target = json!({
        "id": Uuid::now_v7(),
        "endpoint_id": package.endpoint,
        // OS packages are fixed by the OS's updates; language packages by
        // upgrading the software that bundles them.
        "target_type": if package.os_package { "os_patch" } else { "software" },
        "subject": {"type": "software", "vendor": package.vendor, "product": package.product},
        "installed_version": package.version,
        "install_path": package.location,
        "package_manager": package.package_manager,
        "discovery_method": "passive",
        "status": "identified",
        "finding_ids": [],
        "scope_ids": [],
        "last_execution": null,
        "due_at": null,
        "remediated_at": null,
    });
    target.as_object().cloned().unwrap_or_default()
}

/// Whether an active scope's three filters (each empty one matching
/// everything) hold for a target of this package with these open findings.
/// Vendors and products match by confusable skeleton (`text::skeleton_key`:
/// NFKC, lowercase, look-alike letters as the letters they pass for), tags
/// in NFKC and lowercase (`text::match_key`).
fn scope_matches(scope: &Value, package: &InstalledPackage, endpoint: &Value, open: &[&Value]) -> bool {
    use esr_contract::text::{match_key, skeleton_key};
    let strings = |value: &Value| -> Vec<String> {
        value.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_ascii_lowercase).collect()
    };
    let names = |value: &Value, key: fn(&str) -> String| -> Vec<String> {
        value.as_array().into_iter().flatten().filter_map(Value::as_str).map(key).collect()
    };
    let subject = &scope["subject_filter"];
    let types = strings(&subject["subject_types"]);
    let vendors = names(&subject["vendors"], skeleton_key);
    let products = names(&subject["products"], skeleton_key);
    let cpes = strings(&subject["cpe_patterns"]);
    let subject_ok = (types.is_empty() || types.iter().any(|t| t == "software"))
        && (vendors.is_empty() || vendors.contains(&skeleton_key(package.vendor.as_deref().unwrap_or(""))))
        && (products.is_empty() || products.contains(&skeleton_key(&package.product)))
        && (cpes.is_empty()
            || open.iter().any(|finding| {
                let cpe = finding["subject"]["cpe"].as_str().unwrap_or("").to_ascii_lowercase();
                !cpe.is_empty() && cpes.iter().any(|pattern| cpe.starts_with(pattern.trim_end_matches('*')))
            }));
    let filter = &scope["endpoint_filter"];
    let families = strings(&filter["os_families"]);
    let ids = strings(&filter["endpoint_ids"]);
    let tags = names(&filter["tags"], match_key);
    let endpoint_tags = names(&endpoint["tags"], match_key);
    let family = endpoint["operating_system"]["family"].as_str().unwrap_or("").to_owned();
    let has_agent = !endpoint["agent_id"].is_null();
    let endpoint_ok = (families.is_empty() || families.contains(&family))
        && (ids.is_empty() || ids.contains(&package.endpoint.to_string()))
        && filter["has_agent"].as_bool().is_none_or(|wanted| wanted == has_agent)
        && (tags.is_empty() || tags.iter().any(|tag| endpoint_tags.contains(tag)));
    let findings = &scope["finding_filter"];
    let finding_types = strings(&findings["finding_types"]);
    let min_rank = findings["min_severity"].as_str().map(severity_rank);
    let min_cvss = findings["min_cvss_score"].as_f64();
    let kev_only = findings["kev_only"].as_bool().unwrap_or(false);
    let finding_ok = open.iter().any(|finding| {
        (finding_types.is_empty() || finding_types.iter().any(|t| t == "vulnerability"))
            && min_rank.is_none_or(|min| severity_rank(finding["severity"].as_str().unwrap_or("info")) >= min)
            && min_cvss.is_none_or(|min| finding["cvss"]["base_score"].as_f64().is_some_and(|score| score >= min))
            && (!kev_only || finding["kev"] == true)
    });
    subject_ok && endpoint_ok && finding_ok
}

fn severity_rank(severity: &str) -> usize {
    esr_contract::contract::SEVERITY_RANK.iter().position(|s| *s == severity).unwrap_or(0)
}

/// The earliest due date the matching scopes' SLAs give for the most
/// severe open finding, from `now`.
fn due_at(scopes: &[&Value], open: &[&Value], now: &str) -> Option<String> {
    let worst = open.iter().map(|f| f["severity"].as_str().unwrap_or("info")).max_by_key(|s| severity_rank(s))?;
    let days = scopes.iter().filter_map(|scope| scope["sla_days"][worst].as_i64()).min()?;
    let start = Timestamp::parse_saturating(now)?;
    Some(Timestamp(start.0.saturating_add(days.saturating_mul(86_400 * 1_000_000_000))).format())
}

#[cfg(test)]
mod tests {
    use super::*;
    use esr_contract::report::{Package, PackageClass};

    fn entry(id: &str, aliases: &[&str], package: &str, location: Option<&str>) -> ReportEntry {
        ReportEntry {
            check: None,
            vulnerability_id: id.into(),
            aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
            package: Package { name: package.into(), ..Package::default() },
            class: if location.is_some() { PackageClass::Language } else { PackageClass::Os },
            location: location.map(str::to_owned),
            ..ReportEntry::default()
        }
    }

    #[test]
    fn identity_prefers_the_cve_and_keeps_the_location() {
        assert_eq!(
            identity(&entry("GHSA-x", &["CVE-2024-1234"], "requests", Some("/app/Pipfile.lock"))).as_deref(),
            Some("language CVE-2024-1234 requests /app/Pipfile.lock")
        );
        assert_eq!(
            identity(&entry("TEMP-0841856-B18BAF", &[], "bash", None)).as_deref(),
            Some("os TEMP-0841856-B18BAF bash")
        );
        assert_eq!(identity(&entry("CVE-2024-1", &[], "", None)), None);
        let long = identity(&entry("CVE-2024-1234", &[], "x", Some(&"/deep".repeat(100)))).unwrap_or_default();
        assert_eq!(long.chars().count(), 256);
    }

    #[test]
    fn a_check_naming_many_cves_is_the_identity_whatever_its_first_cve() {
        let mut checked = entry("CVE-2012-0053", &["CVE-2011-3192", "nessus:58987"], "www", Some("80/tcp"));
        checked.check = Some(" nessus:58987 ".into());
        checked.class = PackageClass::Other;
        assert_eq!(identity(&checked).as_deref(), Some("other nessus:58987 www 80/tcp"));
        // The plugin names one more CVE, before the others: the same finding.
        checked.vulnerability_id = "CVE-2010-0001".into();
        assert_eq!(identity(&checked).as_deref(), Some("other nessus:58987 www 80/tcp"));
        assert_eq!(cve_of(&checked), Some("CVE-2010-0001"));
    }
}
