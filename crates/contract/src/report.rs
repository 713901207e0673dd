//! Scanner reports: the neutral report an importer component returns
//! ([`ConvertedReport`], the JSON `importer.convert` answers), the
//! [`ReportImporter`] trait a converter implements, and the mappings every
//! converter shares (severities, CVSS scores from vectors, package
//! managers, VEX states), so that formats agree on them.
//!
//! The shape is a contract between importers and the host: fields may be
//! added (with a default, so older importers keep working), never removed
//! or changed. `plugins/sdk/wit/README.md` documents it for authors in other languages.

use serde::{Deserialize, Serialize};

/// A report converted into what esr can import. The host does the rest:
/// finding identity, re-import diffing, endpoints, remediation targets,
/// validation and the write.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConvertedReport {
    /// The scanner findings' `source.scanner` names, and whose findings a
    /// re-import is compared with: lowercase, e.g. `trivy`, `grype`,
    /// `osv-scanner`. Fixed by the importer, never read from the document:
    /// a format many tools write (SARIF, CycloneDX) gives its own name,
    /// so a document cannot choose whose findings it resolves (the
    /// uploader may declare the scanner; the host records that).
    pub scanner: String,
    /// The tool the document says wrote it, as [`scanner_token`] makes the
    /// name fit (SARIF's `tool.driver.name`, CycloneDX's
    /// `metadata.tools`): shown and recorded, never matched on.
    pub tool: Option<String>,
    /// The tool's version, when the report gives it.
    pub scanner_version: Option<String>,
    /// When the scan ran (RFC 3339), when the report says; the host uses
    /// the import time otherwise. Orders reports of one endpoint and
    /// scanner: an older one changes no finding's status.
    pub scanned_at: Option<String>,
    /// The hosts the report itself identifies (Wazuh agents, a Trivy
    /// filesystem or VM scan); entries name theirs by [`ReportHost::key`].
    /// Empty when the report names no host (an image, a lockfile): the
    /// import must then name the endpoint.
    pub hosts: Vec<ReportHost>,
    /// The operating system of what was scanned, when the report states it
    /// but names no host (a container image's OS): it decides the package
    /// manager of OS packages.
    pub operating_system: Option<OperatingSystem>,
    /// Which classes of packages the report scanned, whether or not it
    /// found anything in them. A class not listed resolves nothing: a
    /// report of OS packages only leaves language findings alone. Empty:
    /// the classes of its entries.
    pub scanned_classes: Vec<PackageClass>,
    /// What it found, one entry per vulnerability and package (and
    /// location); repeats are fine (the host merges them by identity).
    pub entries: Vec<ReportEntry>,
    /// Entries esr cannot represent, each with why; never dropped silently.
    pub skipped: Vec<SkippedEntry>,
    /// The report holds only part of what the scan found (one page of a
    /// Wazuh indexer search): what it does not list may still be there,
    /// so it resolves nothing.
    pub partial: bool,
}

/// The most entries and skipped entries one converted report may hold.
/// A format where one item fans out (a CycloneDX vulnerability affecting
/// many components, SARIF results of many rules) can make far more findings
/// than its size suggests; past this the conversion stops with
/// [`ReportError::Invalid`] (the host's `422`) instead of filling the
/// importer's memory. The host caps what it writes lower still
/// (`esr serve --import-max-findings`).
pub const MAX_ENTRIES: usize = 100_000;

/// The most characters of a finding's description a report gives it;
/// longer ones are cut ([`crate::text::cut_chars`]).
pub const MAX_DESCRIPTION_CHARS: usize = 8192;

/// The most characters of a finding's title.
pub const MAX_TITLE_CHARS: usize = 1024;

impl ConvertedReport {
    /// Adds an entry, or says the report makes more than [`MAX_ENTRIES`];
    /// `fan_out` names what multiplies, e.g. "vulnerabilities × affected
    /// components".
    pub fn add_entry(&mut self, entry: ReportEntry, fan_out: &str) -> Result<(), ReportError> {
        self.check_room(fan_out)?;
        self.entries.push(entry);
        Ok(())
    }

    /// Adds a skipped entry, within the same bound as entries.
    pub fn add_skipped(&mut self, skipped: SkippedEntry, fan_out: &str) -> Result<(), ReportError> {
        self.check_room(fan_out)?;
        self.skipped.push(skipped);
        Ok(())
    }

    fn check_room(&self, fan_out: &str) -> Result<(), ReportError> {
        if self.entries.len() + self.skipped.len() >= MAX_ENTRIES {
            return Err(ReportError::Invalid(format!(
                "the report makes more than {MAX_ENTRIES} entries ({fan_out}): split it, e.g. per host or image"
            )));
        }
        Ok(())
    }
}

/// A host a report identifies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReportHost {
    /// How entries refer to it ([`ReportEntry::host`]): e.g. the Wazuh
    /// agent id, or the scanned artifact's name.
    pub key: String,
    /// Its host name: the endpoint with this `hostname` is used, and
    /// created when there is none.
    pub hostname: String,
    /// Its operating system, as the report states it; a new endpoint gets
    /// it.
    pub operating_system: Option<OperatingSystem>,
    /// Its fully qualified name, when the report gives one apart from
    /// `hostname` (Nessus `host-fqdn`, Qualys `DNS`); it may be a short name.
    pub fqdn: Option<String>,
    /// Its NetBIOS name (Nessus `netbios-name`, Qualys `NETBIOS`).
    pub netbios_name: Option<String>,
    /// Its IP address as the report gives it (IPv4 or IPv6).
    pub ip: Option<String>,
    /// Its MAC address as the report gives it.
    pub mac_address: Option<String>,
    /// The id of the esr agent on it, when the report knows it (a UUID);
    /// a scanner's own agent ids are not esr's and belong in `key`.
    pub agent_id: Option<String>,
}

impl ReportHost {
    /// The names the report gives the host, as given (trimmed, blank ones
    /// left out, repeats once): `hostname`, `fqdn`, `netbios_name`.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in [Some(self.hostname.as_str()), self.fqdn.as_deref(), self.netbios_name.as_deref()] {
            let Some(name) = name.map(str::trim).filter(|name| !name.is_empty()) else { continue };
            if !names.iter().any(|known| known.eq_ignore_ascii_case(name)) {
                names.push(name);
            }
        }
        names
    }
}

/// An operating system as a report states it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OperatingSystem {
    /// e.g. `debian`, `Ubuntu`, `alpine`, `Microsoft Windows 11 Pro`.
    pub name: String,
    /// e.g. `10.13`, `3.18.12`.
    pub version: Option<String>,
    /// The contract's OS family: `linux`, `windows`, `macos` or `other`
    /// ([`os_family`] works it out from a name).
    pub family: Option<String>,
    pub vendor: Option<String>,
    pub architecture: Option<String>,
}

/// A class of packages a scanner looks at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PackageClass {
    /// The operating system's packages (dpkg, rpm, apk, Windows updates).
    #[default]
    Os,
    /// Language ecosystems' packages (npm, PyPI, crates, Go modules, jars),
    /// each at a location.
    Language,
    /// Anything else a scanner reports on a host (binaries, firmware, a
    /// network service a remote check found).
    Other,
}

impl PackageClass {
    pub fn as_str(self) -> &'static str {
        match self {
            PackageClass::Os => "os",
            PackageClass::Language => "language",
            PackageClass::Other => "other",
        }
    }
}

/// One vulnerability of one package (at one location) as a report lists it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReportEntry {
    /// The [`ReportHost::key`] of the host it was found on; `None`: the
    /// endpoint the import names, or the report's only host.
    pub host: Option<String>,
    /// The id the report gives: a CVE, GHSA, ALAS, RUSTSEC, Debian
    /// `TEMP-…`, a scanner's own id.
    pub vulnerability_id: String,
    /// Other ids of the same flaw (aliases, related records, references),
    /// without repeats. The finding's `cve_id`, and its identity, is the
    /// first CVE of `vulnerability_id` then `aliases` (unless `check`).
    pub aliases: Vec<String>,
    /// The scanner's own id of the check that found it, when one check
    /// names many CVEs (a Nessus plugin, a Greenbone NVT, a Qualys QID, a
    /// Nexpose vulnerability), e.g. `nessus-plugin 58987`: the identity
    /// then uses the check, not the first CVE, so a check whose CVE list
    /// grows keeps its finding.
    pub check: Option<String>,
    /// The affected package.
    pub package: Package,
    /// Its class; decides which reports can resolve it.
    pub class: PackageClass,
    /// Where the package is, for language packages: its path (Trivy's
    /// `PkgPath`, Grype's location) or else the manifest or lockfile
    /// naming it; for what a network check found (class `other`), the port
    /// as `80/tcp`. Part of the identity: the same library vendored twice,
    /// or one check on two ports, is two findings. `None` for OS packages.
    pub location: Option<String>,
    /// The severity as the report words it (`Negligible`, `MODERATE`,
    /// `UNKNOWN`), for the record of the mapping.
    pub severity_given: Option<String>,
    /// The contract's severity, from [`map_severity`].
    pub severity: Severity,
    /// CVSS ratings, the one the report prefers first (see
    /// [`order_cvss`]); the finding keeps the first usable one.
    pub cvss: Vec<CvssRating>,
    pub epss: Option<Epss>,
    /// Whether CISA's Known Exploited Vulnerabilities catalog lists it,
    /// when the report says.
    pub kev: Option<bool>,
    /// The version that fixes it, when one exists (several, as some
    /// reports give them, joined with `, `).
    pub fixed_version: Option<String>,
    /// What the report says of its state (VEX analysis); `None`: found,
    /// so open.
    pub state: Option<EntryState>,
    /// A short title, when the report has one; the host makes one
    /// (`<id> in <package>`) otherwise.
    pub title: Option<String>,
    pub description: Option<String>,
}

/// The package (or other subject) an entry affects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Package {
    /// Its name, without version: part of the identity.
    pub name: String,
    /// The installed version.
    pub version: Option<String>,
    /// The ecosystem or package type as the report gives it (`debian`,
    /// `apk`, `npm`, `PyPI`, `crates.io`, `gobinary`, `java-archive`).
    pub ecosystem: Option<String>,
    /// The contract's package manager for remediation targets, from
    /// [`package_manager`]; `None` when none fits.
    pub package_manager: Option<String>,
    pub vendor: Option<String>,
    pub purl: Option<String>,
    pub cpe: Option<String>,
}

/// The contract's severities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }

    /// The severity of a CVSS base score, with the bands CVSS v3 and v4
    /// name (and GitHub applies to SARIF's `security-severity`): 9.0 and
    /// up critical, 7.0 high, 4.0 medium, above 0 low, 0 info.
    pub fn from_score(score: f64) -> Severity {
        if score >= 9.0 {
            Severity::Critical
        } else if score >= 7.0 {
            Severity::High
        } else if score >= 4.0 {
            Severity::Medium
        } else if score > 0.0 {
            Severity::Low
        } else {
            Severity::Info
        }
    }
}

/// One CVSS rating of an entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CvssRating {
    /// Who rated it (`nvd`, `redhat`, `ghsa`, a CycloneDX rating source).
    pub source: Option<String>,
    /// `2.0`, `3.0`, `3.1` or `4.0`; [`cvss_rating`] reads it from the
    /// vector.
    pub version: String,
    pub vector: Option<String>,
    /// The base score; [`cvss_rating`] computes it when only the vector is
    /// given.
    pub base_score: Option<f64>,
}

/// An EPSS score (the probability of exploitation in the next 30 days).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Epss {
    /// 0 to 1.
    pub score: f64,
    /// 0 to 1, when the report gives it.
    pub percentile: Option<f64>,
}

/// What a report (a VEX statement) says of an entry's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EntryState {
    /// Affected and not dealt with (exploitable, in triage).
    Open,
    /// Fixed in what was scanned (VEX `resolved`): the finding is resolved.
    Resolved,
    /// Not a risk here, for a reason the contract names.
    Suppressed {
        reason: SuppressionReason,
        /// The report's own words (state, justification, detail).
        #[serde(default)]
        note: Option<String>,
    },
}

/// The contract's suppression reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuppressionReason {
    AcceptedRisk,
    FalsePositive,
    CompensatingControl,
}

/// An entry of the report that esr cannot represent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SkippedEntry {
    /// Which entry: where it is in the report and what names it, e.g.
    /// `runs[0].results[3] (ruleId java/sql-injection)`.
    pub entry: String,
    /// Why, e.g. `a code-scanning result names no package and no
    /// vulnerability id`.
    pub reason: String,
}

/// What an importer converts (WIT `importer-info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImporterInfo {
    pub format: String,
    pub version: String,
    pub description: String,
}

/// How sure [`ReportImporter::detect`] is (WIT `confidence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Confidence {
    No,
    Possible,
    Certain,
}

/// Why a report cannot be converted (WIT `report-error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportError {
    /// Not JSON: where the parser stopped (1-based) and why.
    Malformed { line: u32, column: u32, reason: String },
    /// JSON, but not this format or a version of it not understood.
    Unsupported(String),
    /// This format, but something in it cannot be read.
    Invalid(String),
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportError::Malformed { line, column, reason } => {
                write!(f, "not valid JSON at line {line}, column {column}: {reason}")
            }
            ReportError::Unsupported(reason) | ReportError::Invalid(reason) => f.write_str(reason),
        }
    }
}

/// A converter of one report format; exported as a component of the
/// `report-importer` world by
/// `esr_plugin_sdk::export_report_importer!`.
pub trait ReportImporter {
    fn describe() -> ImporterInfo;
    /// Never fails: anything unreadable is [`Confidence::No`].
    fn detect(report: &[u8]) -> Confidence;
    fn convert(report: &[u8]) -> Result<ConvertedReport, ReportError>;
}

/// The report parsed as JSON into one format's layout; JSON of another
/// shape is [`ReportError::Unsupported`], saying it is not `expected`
/// (what the format holds, in a few words) and why.
pub fn parse_report<T: serde::de::DeserializeOwned>(report: &[u8], expected: &str) -> Result<T, ReportError> {
    parse_json(report).map_err(|error| match error {
        ReportError::Unsupported(reason) => ReportError::Unsupported(format!("not {expected}: {reason}")),
        error => error,
    })
}

/// The report parsed as JSON, or where and why it is not JSON.
pub fn parse_json<T: serde::de::DeserializeOwned>(report: &[u8]) -> Result<T, ReportError> {
    serde_json::from_slice(report).map_err(|error| {
        let reason = error.to_string();
        // serde_json appends " at line L column C"; the fields carry those.
        let reason = match reason.rfind(" at line ") {
            Some(at) => reason[..at].to_owned(),
            None => reason,
        };
        match error.classify() {
            serde_json::error::Category::Data => ReportError::Unsupported(reason),
            _ => ReportError::Malformed {
                line: u32::try_from(error.line()).unwrap_or(u32::MAX),
                column: u32::try_from(error.column()).unwrap_or(u32::MAX),
                reason,
            },
        }
    })
}

/// The report's outline for `detect`: its JSON down to `depth` levels of
/// arrays and objects, deeper ones kept empty (so their kind still shows)
/// and their content skipped without being kept; `None` when it is not
/// JSON. Detection looks at a report's first levels only, and parsing a
/// large report whole in every importer's `detect` cost more than its
/// conversion.
pub fn parse_outline(report: &[u8], depth: usize) -> Option<serde_json::Value> {
    use serde::de::DeserializeSeed;
    let mut reader = serde_json::Deserializer::from_slice(report);
    let outline = Outline { depth }.deserialize(&mut reader).ok()?;
    reader.end().ok()?;
    Some(outline)
}

/// Reads one JSON value, keeping containers down to `depth` levels.
#[derive(Clone, Copy)]
struct Outline {
    depth: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for Outline {
    type Value = serde_json::Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Outline {
    type Value = serde_json::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Self::Value, E> {
        Ok(value.into())
    }

    fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
        Ok(value.into())
    }

    fn visit_u64<E>(self, value: u64) -> Result<Self::Value, E> {
        Ok(value.into())
    }

    fn visit_f64<E>(self, value: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, serde_json::Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(value.into())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        let mut kept = Vec::new();
        if self.depth == 0 {
            while items.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        } else {
            while let Some(item) = items.next_element_seed(Outline { depth: self.depth - 1 })? {
                kept.push(item);
            }
        }
        Ok(serde_json::Value::Array(kept))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
        let mut kept = serde_json::Map::new();
        if self.depth == 0 {
            while entries.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        } else {
            while let Some(name) = entries.next_key::<String>()? {
                let value = entries.next_value_seed(Outline { depth: self.depth - 1 })?;
                kept.insert(name, value);
            }
        }
        Ok(serde_json::Value::Object(kept))
    }
}

/// The contract's severity for a report's wording, or `None` when it
/// names none (`UNKNOWN`, `none`, an empty or missing value): then
/// [`entry_severity`] falls back to the CVSS score.
///
/// | Report says | Severity |
/// |---|---|
/// | critical | critical |
/// | high, important (Red Hat) | high |
/// | medium, moderate (GHSA, Red Hat) | medium |
/// | low | low |
/// | negligible (Debian, Grype), info, informational, note | info |
/// | unknown, none, unspecified, empty | none: from the CVSS score |
///
/// Case is ignored.
pub fn map_severity(given: &str) -> Option<Severity> {
    match given.trim().to_ascii_lowercase().as_str() {
        "critical" => Some(Severity::Critical),
        "high" | "important" => Some(Severity::High),
        "medium" | "moderate" => Some(Severity::Medium),
        "low" => Some(Severity::Low),
        "negligible" | "info" | "informational" | "note" => Some(Severity::Info),
        _ => None,
    }
}

/// An entry's severity: the report's wording when it names one, else the
/// band of the first CVSS score ([`Severity::from_score`]), else `info`.
pub fn entry_severity(given: Option<&str>, cvss: &[CvssRating]) -> Severity {
    given
        .and_then(map_severity)
        .or_else(|| cvss.iter().find_map(|rating| rating.base_score).map(Severity::from_score))
        .unwrap_or(Severity::Info)
}

/// A CVSS rating from what a report gives: the version is read from the
/// vector (`CVSS:3.1/…`; a vector without prefix is v2), and the base
/// score is computed from the vector when the report gives none. `None`
/// when there is neither a usable vector nor a score.
pub fn cvss_rating(source: Option<&str>, vector: Option<&str>, score: Option<f64>) -> Option<CvssRating> {
    let vector = vector.map(str::trim).filter(|vector| !vector.is_empty());
    let parsed = vector.and_then(|vector| vector.parse::<cvss::Cvss>().ok());
    let version = match &parsed {
        Some(cvss::Cvss::CvssV20(_)) => "2.0",
        Some(cvss::Cvss::CvssV30(_)) => "3.0",
        Some(cvss::Cvss::CvssV31(_)) => "3.1",
        Some(cvss::Cvss::CvssV40(_)) => "4.0",
        Some(_) | None => match vector {
            Some(vector) if vector.starts_with("CVSS:4.0/") => "4.0",
            Some(vector) if vector.starts_with("CVSS:3.1/") => "3.1",
            Some(vector) if vector.starts_with("CVSS:3.0/") => "3.0",
            _ => "",
        },
    };
    let score = score.filter(|score| (0.0..=10.0).contains(score)).or_else(|| parsed.as_ref().map(cvss::Cvss::score));
    if score.is_none() && parsed.is_none() {
        return None;
    }
    Some(CvssRating {
        source: source.map(str::to_owned),
        version: version.to_owned(),
        vector: if parsed.is_some() { vector.map(str::to_owned) } else { None },
        base_score: score,
    })
}

/// Ratings in the order the finding should prefer them: the source the
/// report names as its own (`preferred`, e.g. Trivy's `SeveritySource`),
/// then NVD, then the rest as given; within a source, the newest CVSS
/// version first. Ratings without a score go last.
pub fn order_cvss(mut ratings: Vec<CvssRating>, preferred: Option<&str>) -> Vec<CvssRating> {
    let rank = |rating: &CvssRating| {
        let source = rating.source.as_deref().unwrap_or("").to_ascii_lowercase();
        let by_source = if preferred.is_some_and(|preferred| preferred.eq_ignore_ascii_case(&source)) {
            0
        } else if source.contains("nvd") {
            1
        } else {
            2
        };
        (rating.base_score.is_none(), by_source)
    };
    // Stable: equal ranks keep the report's order, then newer versions first.
    ratings.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| b.version.cmp(&a.version)));
    ratings
}

/// The contract's package manager for an ecosystem or package type as
/// reports name them, or for the OS of an OS package (pass the OS name:
/// `debian`, `alpine`, `redhat`…). `None` when none fits.
///
/// The contract's managers were those of endpoints (`apt`, `dnf`, `yum`,
/// `zypper`, `homebrew`, `chocolatey`, `winget`, `msi`); reports add
/// `apk`, `pip`, `npm`, `cargo`, `go`, `maven`, `nuget`, `gem`,
/// `composer`.
pub fn package_manager(ecosystem_or_os: &str) -> Option<&'static str> {
    let name = ecosystem_or_os.trim().to_ascii_lowercase();
    let manager = match name.as_str() {
        "debian" | "ubuntu" | "deb" | "dpkg" | "apt" | "kali" | "raspbian" => "apt",
        "alpine" | "apk" | "wolfi" | "chainguard" => "apk",
        "redhat" | "rhel" | "red hat" | "centos" | "rocky" | "alma" | "almalinux" | "fedora" | "oracle" | "ol"
        | "amazon" | "amzn" | "amazonlinux" | "azurelinux" | "cbl-mariner" | "mariner" | "rpm" | "dnf" => "dnf",
        "yum" => "yum",
        "suse"
        | "opensuse"
        | "opensuse-leap"
        | "opensuse-tumbleweed"
        | "sles"
        | "suse linux enterprise server"
        | "zypper" => "zypper",
        "pypi" | "pip" | "python" | "python-pkg" | "pipenv" | "poetry" | "wheel" | "egg" | "conda" | "uv" => "pip",
        "npm" | "node-pkg" | "yarn" | "pnpm" | "javascript" | "bun" => "npm",
        "crates.io" | "cargo" | "rust-crate" | "rust-binary" | "rust" => "cargo",
        "go" | "golang" | "gomod" | "gobinary" | "go-module" => "go",
        "maven" | "jar" | "java-archive" | "pom" | "gradle" | "java" | "sbt" => "maven",
        "nuget" | "dotnet" | "dotnet-core" | "dotnet-deps" | "packages-props" => "nuget",
        "rubygems" | "gem" | "gemspec" | "bundler" | "ruby" => "gem",
        "packagist" | "composer" | "php-composer" | "php" => "composer",
        "homebrew" | "brew" => "homebrew",
        "chocolatey" | "choco" => "chocolatey",
        "winget" => "winget",
        "msi" | "windows" => "msi",
        _ => return None,
    };
    Some(manager)
}

/// Words that name a Linux distribution in OS names and platforms.
const LINUX_NAMES: &[&str] = &[
    "linux",
    "debian",
    "ubuntu",
    "alpine",
    "redhat",
    "rhel",
    "centos",
    "fedora",
    "rocky",
    "alma",
    "almalinux",
    "amazon",
    "amzn",
    "suse",
    "opensuse",
    "sles",
    "oracle",
    "ol",
    "arch",
    "wolfi",
    "chainguard",
    "mariner",
    "azurelinux",
    "photon",
    "kali",
    "raspbian",
    "gentoo",
];

/// The contract's OS family for an OS name or platform as reports give
/// them (`debian`, `ubuntu`, `windows`, `darwin`…).
pub fn os_family(name: &str) -> &'static str {
    let name = name.trim().to_ascii_lowercase();
    if name.contains("windows") {
        "windows"
    } else if name.contains("mac") || name.contains("darwin") || name.contains("os x") {
        "macos"
    } else if name.contains("red hat")
        || name.split(|c: char| !c.is_ascii_alphanumeric()).any(|word| LINUX_NAMES.contains(&word))
    {
        "linux"
    } else {
        "other"
    }
}

/// The finding state of a CycloneDX VEX `analysis.state` (with its
/// `justification`, if any):
///
/// | `analysis.state` | Finding |
/// |---|---|
/// | `exploitable`, `in_triage` | open |
/// | `resolved`, `resolved_with_pedigree` | resolved |
/// | `false_positive` | suppressed, `false_positive` |
/// | `not_affected` with justification `protected_by_mitigating_control`, `protected_at_perimeter`, `protected_at_runtime`, `protected_by_compiler`, `requires_environment`, `requires_configuration`, `requires_dependency` | suppressed, `compensating_control` |
/// | `not_affected` otherwise (`code_not_present`, `code_not_reachable`, none) | suppressed, `false_positive` |
///
/// `None` for a state CycloneDX does not define.
pub fn vex_state(state: &str, justification: Option<&str>, detail: Option<&str>) -> Option<EntryState> {
    let note = || {
        let mut note = format!("VEX analysis: {state}");
        if let Some(justification) = justification {
            note.push_str(&format!(" ({justification})"));
        }
        if let Some(detail) = detail.map(str::trim).filter(|detail| !detail.is_empty()) {
            note.push_str(&format!(": {detail}"));
        }
        Some(note)
    };
    Some(match state {
        "exploitable" | "in_triage" => EntryState::Open,
        "resolved" | "resolved_with_pedigree" => EntryState::Resolved,
        "false_positive" => EntryState::Suppressed { reason: SuppressionReason::FalsePositive, note: note() },
        "not_affected" => {
            let mitigated = matches!(
                justification,
                Some(
                    "protected_by_mitigating_control"
                        | "protected_at_perimeter"
                        | "protected_at_runtime"
                        | "protected_by_compiler"
                        | "requires_environment"
                        | "requires_configuration"
                        | "requires_dependency"
                )
            );
            let reason =
                if mitigated { SuppressionReason::CompensatingControl } else { SuppressionReason::FalsePositive };
            EntryState::Suppressed { reason, note: note() }
        }
        _ => return None,
    })
}

/// Whether an id is a CVE id (`CVE-YYYY-NNNN…`).
pub fn is_cve(id: &str) -> bool {
    let Some(rest) = id.strip_prefix("CVE-") else { return false };
    let Some((year, number)) = rest.split_once('-') else { return false };
    year.len() == 4
        && year.bytes().all(|b| b.is_ascii_digit())
        && number.len() >= 4
        && number.bytes().all(|b| b.is_ascii_digit())
}

/// A tool's name as a `source.scanner` token: lowercase ASCII letters,
/// digits and dashes (`OWASP Dependency-Check` → `owasp-dependency-check`),
/// at most 64 characters; `None` when nothing is left.
pub fn scanner_token(name: &str) -> Option<String> {
    let mut token = String::new();
    for c in name.trim().chars() {
        if c.is_ascii_alphanumeric() {
            token.push(c.to_ascii_lowercase());
        } else if !token.is_empty() && !token.ends_with('-') {
            token.push('-');
        }
        if token.len() >= 64 {
            break;
        }
    }
    let token = token.trim_end_matches('-').to_owned();
    (!token.is_empty()).then_some(token)
}

/// Adds `id` to `aliases` unless it is empty, the entry's own id or
/// already there.
pub fn push_alias(aliases: &mut Vec<String>, own_id: &str, id: &str) {
    let id = id.trim();
    if !id.is_empty() && id != own_id && !aliases.iter().any(|alias| alias == id) {
        aliases.push(id.to_owned());
    }
}

/// Package types and ecosystems of operating systems' package managers.
const OS_PACKAGE_TYPES: &[&str] = &[
    "deb",
    "dpkg",
    "rpm",
    "apk",
    "alpm",
    "pacman",
    "portage",
    "ebuild",
    "nix",
    "msi",
    "kb",
    "windows",
    "debian",
    "ubuntu",
    "alpine",
    "redhat",
    "rhel",
    "centos",
    "rocky",
    "almalinux",
    "amazon",
    "amazonlinux",
    "fedora",
    "oracle",
    "suse",
    "opensuse",
    "sles",
    "wolfi",
    "chainguard",
    "mariner",
    "azurelinux",
    "photon",
];

/// Language ecosystems [`package_manager`] has no manager for.
const OTHER_LANGUAGE_TYPES: &[&str] = &[
    "hex",
    "erlang-otp",
    "pub",
    "dart-pub",
    "swift",
    "swiftpm",
    "cocoapods",
    "pod",
    "conan",
    "hackage",
    "cran",
    "r",
    "lua",
    "luarocks",
    "github",
    "github-action",
    "github-actions",
    "bitnami",
    "opam",
    "julia",
    "packagist-dev",
];

/// The class of a package from its type or ecosystem as reports name them:
/// an OS package manager's (`deb`, `rpm`, `apk`, or a distribution's name
/// as OSV ecosystems give it: `Debian:11`, `Alpine:v3.18`) is
/// [`PackageClass::Os`]; a language ecosystem's (`npm`, `PyPI`,
/// `go-module`, `java-archive`, `crates.io`) [`PackageClass::Language`];
/// anything else (`binary`, `generic`, an empty type)
/// [`PackageClass::Other`].
pub fn package_class(ecosystem: &str) -> PackageClass {
    let name = ecosystem.trim().to_ascii_lowercase();
    // OSV ecosystems carry a release: `Debian:11`, `Ubuntu:22.04:LTS`.
    let name = name.split(':').next().unwrap_or_default();
    if OS_PACKAGE_TYPES.contains(&name) {
        return PackageClass::Os;
    }
    let language_manager = package_manager(name).is_some_and(|manager| {
        matches!(manager, "pip" | "npm" | "cargo" | "go" | "maven" | "nuget" | "gem" | "composer")
    });
    if language_manager || OTHER_LANGUAGE_TYPES.contains(&name) { PackageClass::Language } else { PackageClass::Other }
}

/// A package from its package URL (`pkg:maven/xerces/xercesImpl@2.12.2`):
/// the name with its namespace as the ecosystem writes it (`xerces:xercesImpl`
/// for Maven, `@babel/core` for npm, `github.com/x/y` for Go; an OS
/// package's namespace, `debian` in `pkg:deb/debian/libc6`, is its vendor),
/// the version, the purl type as the ecosystem and its package manager.
/// `None` when the text is not a package URL.
pub fn package_from_purl(purl: &str) -> Option<Package> {
    let parsed: packageurl::PackageUrl<'static> = purl.trim().parse().ok()?;
    let namespace = parsed.namespace().filter(|namespace| !namespace.is_empty());
    let os_package = package_class(parsed.ty()) == PackageClass::Os;
    let name = match namespace {
        Some(_) if os_package => parsed.name().to_owned(),
        Some(namespace) if parsed.ty() == "maven" => format!("{namespace}:{}", parsed.name()),
        Some(namespace) => format!("{namespace}/{}", parsed.name()),
        None => parsed.name().to_owned(),
    };
    if name.trim().is_empty() {
        return None;
    }
    Some(Package {
        name,
        version: parsed.version().filter(|version| !version.is_empty()).map(str::to_owned),
        ecosystem: Some(parsed.ty().to_owned()),
        package_manager: package_manager(parsed.ty()).map(str::to_owned),
        vendor: namespace.filter(|_| os_package).map(str::to_owned),
        purl: Some(purl.trim().to_owned()),
        cpe: None,
    })
}

#[cfg(test)]
mod outline_tests {
    use super::parse_outline;
    use serde_json::json;

    #[test]
    fn an_outline_keeps_the_first_levels_and_the_kind_of_deeper_ones() {
        let report = br#"{"a": 1, "b": {"c": [1, {"d": "x"}], "e": "y"}, "f": [[2]]}"#;
        assert_eq!(parse_outline(report, 0), Some(json!({})));
        assert_eq!(parse_outline(report, 1), Some(json!({"a": 1, "b": {}, "f": []})));
        assert_eq!(parse_outline(report, 2), Some(json!({"a": 1, "b": {"c": [], "e": "y"}, "f": [[]]})));
        assert_eq!(parse_outline(report, 9), serde_json::from_slice(report).ok());
        assert_eq!(parse_outline(b"{\"a\": [}", 9), None);
        assert_eq!(parse_outline(b"{} trailing", 9), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_map_onto_the_contract() {
        assert_eq!(map_severity("CRITICAL"), Some(Severity::Critical));
        assert_eq!(map_severity("MODERATE"), Some(Severity::Medium));
        assert_eq!(map_severity("Negligible"), Some(Severity::Info));
        assert_eq!(map_severity("UNKNOWN"), None);
        let rated = cvss_rating(Some("nvd"), Some("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), None);
        assert_eq!(entry_severity(Some("Unknown"), rated.as_slice()), Severity::Critical);
        assert_eq!(entry_severity(None, &[]), Severity::Info);
    }

    #[test]
    fn scores_are_computed_from_vectors_of_every_version() {
        let v31 = cvss_rating(None, Some("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), None).expect("v3.1");
        assert_eq!((v31.version.as_str(), v31.base_score), ("3.1", Some(9.8)));
        let v2 = cvss_rating(None, Some("AV:N/AC:L/Au:N/C:P/I:P/A:P"), None).expect("v2");
        assert_eq!((v2.version.as_str(), v2.base_score), ("2.0", Some(7.5)));
        let v4 = cvss_rating(None, Some("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"), None)
            .expect("v4");
        assert_eq!((v4.version.as_str(), v4.base_score), ("4.0", Some(9.3)));
        // A given score wins over the computed one; junk gives nothing.
        assert_eq!(
            cvss_rating(None, Some("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), Some(9.0))
                .and_then(|r| r.base_score),
            Some(9.0)
        );
        assert_eq!(cvss_rating(None, Some("not a vector"), None), None);
    }

    #[test]
    fn the_preferred_source_then_nvd_come_first() {
        let rating = |source: &str, score: Option<f64>| CvssRating {
            source: Some(source.into()),
            version: "3.1".into(),
            vector: None,
            base_score: score,
        };
        let ordered = order_cvss(
            vec![
                rating("ghsa", Some(5.0)),
                rating("nvd", Some(7.0)),
                rating("redhat", None),
                rating("redhat", Some(6.0)),
            ],
            Some("redhat"),
        );
        let sources: Vec<_> = ordered.iter().map(|r| (r.source.clone().unwrap_or_default(), r.base_score)).collect();
        assert_eq!(sources[0], ("redhat".into(), Some(6.0)));
        assert_eq!(sources[1], ("nvd".into(), Some(7.0)));
        assert_eq!(sources[3], ("redhat".into(), None));
    }

    #[test]
    fn malformed_json_says_where() {
        let error = parse_json::<serde_json::Value>(b"{\n  \"a\": [1,\n  }").expect_err("malformed");
        let ReportError::Malformed { line, column, .. } = error else { panic!("{error:?}") };
        assert_eq!((line, column), (3, 3));
    }

    #[test]
    fn the_neutral_report_round_trips_and_defaults_missing_fields() {
        let report: ConvertedReport = serde_json::from_str(
            r#"{"scanner":"trivy","entries":[{"vulnerability_id":"CVE-2024-0001","package":{"name":"openssl"},
            "severity":"high","state":{"status":"suppressed","reason":"false_positive"}}],"future_field":1}"#,
        )
        .expect("parses");
        assert_eq!(report.entries[0].severity, Severity::High);
        assert_eq!(report.entries[0].class, PackageClass::Os);
        assert_eq!(
            report.entries[0].state,
            Some(EntryState::Suppressed { reason: SuppressionReason::FalsePositive, note: None })
        );
        let again: ConvertedReport =
            serde_json::from_slice(&serde_json::to_vec(&report).expect("writes")).expect("reads");
        assert_eq!(again, report);
    }

    #[test]
    fn names_and_ids() {
        assert!(is_cve("CVE-2021-44228") && !is_cve("GHSA-jfh8-c2jp-5v3q") && !is_cve("CVE-21-1"));
        assert_eq!(scanner_token("OWASP Dependency-Check").as_deref(), Some("owasp-dependency-check"));
        assert_eq!(package_manager("PyPI"), Some("pip"));
        assert_eq!(package_manager("alpine"), Some("apk"));
        assert_eq!(os_family("Microsoft Windows 11 Pro"), "windows");
        assert_eq!(os_family("debian"), "linux");
        assert_eq!(os_family("ubuntu 22.04"), "linux");
    }

    #[test]
    fn package_classes_and_purls() {
        assert_eq!(package_class("deb"), PackageClass::Os);
        assert_eq!(package_class("Debian:11"), PackageClass::Os);
        assert_eq!(package_class("go-module"), PackageClass::Language);
        assert_eq!(package_class("PyPI"), PackageClass::Language);
        assert_eq!(package_class("Hex"), PackageClass::Language);
        assert_eq!(package_class("binary"), PackageClass::Other);
        assert_eq!(package_class(""), PackageClass::Other);
        let maven = package_from_purl("pkg:maven/xerces/xercesImpl@2.12.2").expect("a purl");
        assert_eq!(maven.name, "xerces:xercesImpl");
        assert_eq!(maven.version.as_deref(), Some("2.12.2"));
        assert_eq!(maven.package_manager.as_deref(), Some("maven"));
        let npm = package_from_purl("pkg:npm/%40babel/core@7.0.0").expect("a purl");
        assert_eq!(npm.name, "@babel/core");
        let deb = package_from_purl("pkg:deb/debian/libc6@2.28-10?arch=amd64").expect("a purl");
        assert_eq!((deb.name.as_str(), deb.vendor.as_deref()), ("libc6", Some("debian")));
        assert_eq!(package_from_purl("not a purl"), None);
    }
}
