//! The SARIF importer: SARIF 2.1.0 as vulnerability scanners write it —
//! Trivy (`--format sarif`), Grype (`-o sarif`), OWASP dependency-check
//! (`--format SARIF`), Snyk (`snyk test --sarif`). SARIF has no field for a
//! package or a vulnerability: each tool puts them somewhere else, and this
//! importer reads each place, whoever the tool.
//!
//! What maps where is in `docs/scanner-report-mapping/sarif.md`. In short:
//! one entry per `runs[].results[]`; the package from a purl
//! (`logicalLocations[].fullyQualifiedName`, the rule's `purls`, the text),
//! the `Package:` and `Version:` lines Trivy and Grype write into the
//! message and the rule's help, a `name@version` in the message, the
//! logical location or the rule's descriptions (Snyk's `(CVE-…)
//! group:artifact@1.2.3`), else the help's `Vulnerable module:` line; the
//! vulnerability from the `Vulnerability <id>` line, else the `ruleId` when
//! it is an advisory id, else a CVE the rule's properties or descriptions
//! name; a result with neither package nor vulnerability (a code
//! scanner's, such as CodeQL's) is skipped with that reason.

use esr_plugin_sdk::importing::{fixed_versions, importer_info};
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, ImporterInfo, Package, PackageClass, ReportEntry, ReportError,
    ReportImporter, Severity, SkippedEntry,
};
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "results of every run";

pub struct Sarif;

esr_plugin_sdk::export_report_importer!(crate::Sarif);

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Log {
    version: Option<String>,
    runs: Option<Vec<Run>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Run {
    tool: Tool,
    results: Vec<SarifResult>,
    invocations: Vec<Invocation>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Tool {
    driver: Driver,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Driver {
    name: String,
    version: Option<String>,
    semantic_version: Option<String>,
    rules: Vec<Rule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Invocation {
    end_time_utc: Option<String>,
    start_time_utc: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Rule {
    id: String,
    name: Option<String>,
    short_description: Option<Text>,
    full_description: Option<Text>,
    help: Option<Text>,
    properties: Option<serde_json::Map<String, Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Text {
    text: Option<String>,
    markdown: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct SarifResult {
    rule_id: Option<String>,
    rule_index: Option<usize>,
    level: Option<String>,
    message: Text,
    locations: Vec<Location>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Location {
    physical_location: Option<PhysicalLocation>,
    logical_locations: Vec<LogicalLocation>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PhysicalLocation {
    artifact_location: Option<ArtifactLocation>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ArtifactLocation {
    uri: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct LogicalLocation {
    name: Option<String>,
    fully_qualified_name: Option<String>,
}

impl ReportImporter for Sarif {
    fn describe() -> ImporterInfo {
        importer_info(
            "sarif",
            env!("CARGO_PKG_VERSION"),
            "SARIF 2.1.0 of vulnerability scanners (Trivy, Grype, OWASP dependency-check, Snyk)",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        let Some(Value::Object(object)) = report::parse_outline(bytes, 1) else { return Confidence::No };
        if !object.get("runs").is_some_and(Value::is_array) {
            return Confidence::No;
        }
        let version = object.get("version").and_then(Value::as_str) == Some("2.1.0");
        let schema = object.get("$schema").and_then(Value::as_str).is_some_and(|schema| schema.contains("sarif"));
        if version || schema { Confidence::Certain } else { Confidence::Possible }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        let log: Log =
            report::parse_report(bytes, "a SARIF 2.1.0 log (an object with version and runs[].tool, runs[].results)")?;
        convert(log)
    }
}

fn convert(log: Log) -> Result<ConvertedReport, ReportError> {
    match log.version.as_deref() {
        Some("2.1.0") => {}
        Some(other) => {
            return Err(ReportError::Unsupported(format!("SARIF version {other} is not supported (2.1.0 is)")));
        }
        None => return Err(ReportError::Unsupported("not a SARIF log: no version".into())),
    }
    let Some(runs) = log.runs else { return Err(ReportError::Unsupported("not a SARIF log: no runs".into())) };
    let mut converted = ConvertedReport::default();
    for (run_index, run) in runs.into_iter().enumerate() {
        // One report, one tool: the first run's names it.
        if converted.tool.is_none() {
            converted.tool = report::scanner_token(&run.tool.driver.name);
            converted.scanner_version =
                run.tool.driver.semantic_version.clone().or_else(|| run.tool.driver.version.clone());
        }
        if converted.scanned_at.is_none() {
            converted.scanned_at = run
                .invocations
                .iter()
                .find_map(|invocation| invocation.end_time_utc.clone().or_else(|| invocation.start_time_utc.clone()));
        }
        // Rules by id, once per run: a result naming its rule by id alone
        // must not cost a walk over every rule.
        let mut rules_by_id: HashMap<&str, &Rule> = HashMap::new();
        for rule in &run.tool.driver.rules {
            rules_by_id.entry(rule.id.as_str()).or_insert(rule);
        }
        for (index, result) in run.results.iter().enumerate() {
            let at = format!("runs[{run_index}].results[{index}] (ruleId {})", result.rule_id.as_deref().unwrap_or(""));
            match entry(&run.tool.driver, &rules_by_id, result) {
                Ok(entry) => {
                    converted.scanned_classes.push(entry.class);
                    converted.add_entry(entry, FAN_OUT)?;
                }
                Err(reason) => converted.add_skipped(SkippedEntry { entry: at, reason: reason.into() }, FAN_OUT)?,
            }
        }
    }
    // Any tool writes SARIF: the document does not choose whose findings
    // it is compared with.
    converted.scanner = "sarif".into();
    converted.scanned_classes.sort();
    converted.scanned_classes.dedup();
    Ok(converted)
}

/// The value of a `Key: value` line of a text (Trivy and Grype write the
/// package, version, severity and fix this way; Snyk as markdown bullets,
/// `* Vulnerable module: …`).
fn line_value<'a>(texts: &[&'a str], key: &str) -> Option<&'a str> {
    texts.iter().flat_map(|text| text.lines()).find_map(|line| {
        let line = line.trim();
        let line = line.strip_prefix("* ").or_else(|| line.strip_prefix("- ")).unwrap_or(line);
        let value = line.trim_start().strip_prefix(key)?.strip_prefix(':')?.trim();
        (!value.is_empty()).then_some(value)
    })
}

/// A word of a text without the punctuation around it (`(`, `,`, a
/// backtick, a final full stop).
fn bare_word(word: &str) -> &str {
    word.trim_matches(|c: char| "()[]{}<>,;'\"`".contains(c)).trim_end_matches(['.', ':'])
}

/// The `name@version` words of a text (Snyk's `commons-fileupload:commons-fileupload@1.3.1`,
/// `bzip2/libbz2@1.0.6-r6`, npm's `@scope/name@1.0.0`): a version starts
/// with a digit, so mail addresses are not taken for packages.
fn versioned_packages(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split_whitespace().filter_map(|word| {
        let word = bare_word(word);
        if word.starts_with("pkg:") || word.contains("://") {
            return None;
        }
        let (name, version) = word.rsplit_once('@')?;
        let name_ok = !name.is_empty() && !name.ends_with('/') && name.chars().skip(1).all(|c| c != '@');
        let version_ok = version.starts_with(|c: char| c.is_ascii_digit()) && !version.contains('/');
        (name_ok && version_ok).then_some((name, version))
    })
}

/// The CVE ids a text names, in order, once each.
fn cves_in(text: &str) -> Vec<&str> {
    let mut cves: Vec<&str> = Vec::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if report::is_cve(word) && !cves.contains(&word) {
            cves.push(word);
        }
    }
    cves
}

/// The CVE ids a rule's properties name: a `cve`/`cves`/`cveId` property
/// (text or list, any case), or tags that are CVE ids.
fn property_cves(rule: Option<&Rule>) -> Vec<String> {
    let mut cves: Vec<String> = Vec::new();
    let Some(properties) = rule.and_then(|rule| rule.properties.as_ref()) else { return cves };
    for (key, value) in properties {
        let key = key.to_ascii_lowercase().replace(['_', '-'], "");
        if !matches!(key.as_str(), "cve" | "cves" | "cveid" | "cveids" | "tags") {
            continue;
        }
        let values: Vec<&str> = match value {
            Value::String(text) => vec![text.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        for cve in values.into_iter().flat_map(cves_in) {
            if !cves.iter().any(|known| known == cve) {
                cves.push(cve.to_owned());
            }
        }
    }
    cves
}

/// An ecosystem among the rule's tags (Snyk tags each rule with the
/// project's package manager: `maven`, `npm`, `apk`, `deb`).
fn tag_ecosystem(rule: Option<&Rule>) -> Option<&str> {
    let tags = property(rule, "tags").and_then(Value::as_array)?;
    tags.iter().filter_map(Value::as_str).find(|tag| report::package_class(tag) != PackageClass::Other)
}

/// Whether a rule id is an advisory's id (`CVE-…`, `GHSA-…`, `RUSTSEC-…`,
/// `ALAS-…`): an upper-case prefix, a dash and more; code scanners' rules
/// (`java/sql-injection`) are not.
fn is_advisory_id(id: &str) -> bool {
    let Some((prefix, rest)) = id.split_once('-') else { return false };
    (2..=10).contains(&prefix.len())
        && prefix.bytes().all(|b| b.is_ascii_uppercase())
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b':')
}

fn text(text: &Option<Text>) -> Option<&str> {
    text.as_ref().and_then(|text| text.text.as_deref()).filter(|text| !text.trim().is_empty())
}

fn markdown(text: &Option<Text>) -> Option<&str> {
    text.as_ref().and_then(|text| text.markdown.as_deref()).filter(|text| !text.trim().is_empty())
}

fn property<'a>(rule: Option<&'a Rule>, key: &str) -> Option<&'a Value> {
    rule.and_then(|rule| rule.properties.as_ref()).and_then(|properties| properties.get(key))
}

fn number(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

fn string(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).map(str::trim).filter(|text| !text.is_empty())
}

/// A CVSS v3 vector from dependency-check's one property per metric
/// (`cvssv3_attackVector: "N"` or `"NETWORK"`: the first letter is the
/// vector's).
fn vector_from_metrics(rule: Option<&Rule>) -> Option<String> {
    let metrics = [
        ("AV", "cvssv3_attackVector"),
        ("AC", "cvssv3_attackComplexity"),
        ("PR", "cvssv3_privilegesRequired"),
        ("UI", "cvssv3_userInteraction"),
        ("S", "cvssv3_scope"),
        ("C", "cvssv3_confidentialityImpact"),
        ("I", "cvssv3_integrityImpact"),
        ("A", "cvssv3_availabilityImpact"),
    ];
    let version = string(property(rule, "cvssv3_version")).unwrap_or("3.1");
    let mut vector = format!("CVSS:{version}");
    for (metric, key) in metrics {
        let value = string(property(rule, key))?;
        vector.push_str(&format!("/{metric}:{}", value.chars().next()?.to_ascii_uppercase()));
    }
    Some(vector)
}

fn ratings(rule: Option<&Rule>) -> Vec<CvssRating> {
    let source = string(property(rule, "source"));
    let v3_vector = string(property(rule, "cvssv3_vector")).map(str::to_owned).or_else(|| vector_from_metrics(rule));
    let mut ratings = Vec::new();
    for (vector, score) in [
        (string(property(rule, "cvssv4_vector")).map(str::to_owned), number(property(rule, "cvssv4_baseScore"))),
        (v3_vector, number(property(rule, "cvssv3_baseScore"))),
        (string(property(rule, "cvssv2_vector")).map(str::to_owned), number(property(rule, "cvssv2_score"))),
    ] {
        if let Some(rating) = report::cvss_rating(source, vector.as_deref(), score)
            && !rating.version.is_empty()
        {
            ratings.push(rating);
        }
    }
    report::order_cvss(ratings, source)
}

/// The severity word a tool wrote: Trivy's and Grype's `Severity:` line,
/// Trivy's severity tag, dependency-check's `cvssv3_baseSeverity` or the
/// `<Severity> severity - …` of its short description.
fn severity_word(rule: Option<&Rule>, texts: &[&str]) -> Option<String> {
    if let Some(word) = line_value(texts, "Severity") {
        return Some(word.to_owned());
    }
    let tags = property(rule, "tags").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    if let Some(tag) =
        tags.into_iter().find(|tag| report::map_severity(tag).is_some() || tag.eq_ignore_ascii_case("unknown"))
    {
        return Some(tag.to_owned());
    }
    if let Some(word) = string(property(rule, "cvssv3_baseSeverity")) {
        return Some(word.to_owned());
    }
    rule.and_then(|rule| text(&rule.short_description))
        .and_then(|description| description.split_once(" severity - "))
        .map(|(word, _)| word.trim().to_owned())
        .filter(|word| !word.contains(' '))
}

fn entry(
    driver: &Driver,
    rules_by_id: &HashMap<&str, &Rule>,
    result: &SarifResult,
) -> Result<ReportEntry, &'static str> {
    let rule = result
        .rule_index
        .and_then(|index| driver.rules.get(index))
        .filter(|rule| result.rule_id.as_deref().is_none_or(|id| id == rule.id))
        .or_else(|| result.rule_id.as_deref().and_then(|id| rules_by_id.get(id).copied()));
    let rule_id = result.rule_id.as_deref().map(str::trim).filter(|id| !id.is_empty());
    let message = result.message.text.as_deref().filter(|text| !text.trim().is_empty());
    let help = rule.and_then(|rule| text(&rule.help));
    let help_markdown = rule.and_then(|rule| markdown(&rule.help));
    let full_description = rule.and_then(|rule| text(&rule.full_description));
    let short_description = rule.and_then(|rule| text(&rule.short_description));
    // `Key: value` lines: the message and the help (Trivy, Grype), then
    // the help's markdown (Snyk's bullets).
    let texts: Vec<&str> = [message, help, help_markdown].into_iter().flatten().collect();
    let logical_names: Vec<&str> = result
        .locations
        .iter()
        .flat_map(|location| &location.logical_locations)
        .filter_map(|logical| logical.fully_qualified_name.as_deref())
        .collect();
    // Where a package is named as `name@version`: the result's own words
    // before its rule's, which may speak for several results.
    let named_at: Vec<&str> = message
        .into_iter()
        .chain(logical_names.iter().copied().filter(|name| !name.starts_with("pkg:")))
        .chain(full_description)
        .chain(short_description)
        .collect();

    let purl = logical_names
        .iter()
        .copied()
        .find(|name| name.starts_with("pkg:"))
        .or_else(|| string(property(rule, "purls").and_then(|purls| purls.get(0))))
        .or_else(|| string(property(rule, "purl")))
        .or_else(|| {
            named_at
                .iter()
                .flat_map(|text| text.split_whitespace())
                .map(bare_word)
                .find(|word| word.starts_with("pkg:"))
        });
    let unversioned = |name: &str| Package { name: name.to_owned(), ..Package::default() };
    let mut package = purl
        .and_then(report::package_from_purl)
        .or_else(|| line_value(&texts, "Package").map(unversioned))
        .or_else(|| {
            let (mut name, version) = named_at.iter().find_map(|text| versioned_packages(text).next())?;
            // Snyk's result names an image's source package (`bzip2@1.0.6-r6`),
            // its rule the binary one too (`bzip2/libbz2@1.0.6-r6`): the
            // more precise name of the same package wins.
            let source = format!("{name}/");
            if let Some((binary, _)) = [full_description, short_description]
                .into_iter()
                .flatten()
                .flat_map(versioned_packages)
                .find(|(named, named_version)| *named_version == version && named.starts_with(&source))
            {
                name = binary;
            }
            Some(Package { name: name.to_owned(), version: Some(version.to_owned()), ..Package::default() })
        })
        .or_else(|| line_value(&texts, "Vulnerable module").map(unversioned));
    if let Some(package) = package.as_mut().filter(|package| package.version.is_none()) {
        let name = package.name.as_str();
        let version = line_value(&texts, "Installed Version").or_else(|| line_value(&texts, "Version")).or_else(|| {
            // A name without version (Snyk's `Vulnerable module:`): the
            // version a `name@version` of the same package gives.
            named_at
                .iter()
                .chain(&texts)
                .flat_map(|text| versioned_packages(text))
                .find_map(|(named, version)| (named == name).then_some(version))
        });
        package.version = version.map(str::to_owned);
    }
    // Grype names the vulnerability `Vulnerability <id>` and its rule
    // `<id>-<package>`; Trivy's, dependency-check's and Snyk's rule is the id.
    let named = [message, help].into_iter().flatten().flat_map(str::lines).find_map(|line| {
        let id = line.trim().strip_prefix("Vulnerability ")?.trim();
        (!id.is_empty() && !id.contains(' ')).then_some(id)
    });
    let advisory_rule = rule_id.filter(|id| is_advisory_id(id));
    // A vulnerability that is not a CVE is given the CVEs the rule's
    // properties name, else its descriptions or the message (Snyk's
    // `(CVE-2016-3092) commons-fileupload:…@1.3.1`). A CVE's own text may
    // name others (an incomplete fix for …): they are not its aliases.
    let mut cves = property_cves(rule);
    if cves.is_empty() {
        cves = [full_description, short_description, message]
            .into_iter()
            .flatten()
            .map(cves_in)
            .find(|found| !found.is_empty())
            .unwrap_or_default()
            .into_iter()
            .map(str::to_owned)
            .collect();
    }
    if cves.is_empty() && named.is_none() && advisory_rule.is_none() {
        // Nothing else names the vulnerability: a CVE the help names.
        cves = [help, help_markdown].into_iter().flatten().flat_map(cves_in).take(1).map(str::to_owned).collect();
    }
    let vulnerability_id = named.or(advisory_rule).or(cves.first().map(String::as_str)).map(str::to_owned);
    let (vulnerability_id, mut package) = match (vulnerability_id, package) {
        (Some(id), Some(package)) => (id, package),
        // A tool's own rule about a package: its rule id is the scanner's id.
        (None, Some(package)) => match rule_id {
            Some(id) => (id.to_owned(), package),
            None => return Err("a result names a package but no rule or vulnerability id"),
        },
        (Some(_), None) => {
            return Err(
                "a vulnerability result names no package (no purl, `Package:` line, `name@version` or `Vulnerable module:` in the result or its rule)",
            );
        }
        (None, None) => return Err("a code-scanning result names no package and no vulnerability id"),
    };

    // Trivy's rule names say the class; otherwise the package's type does:
    // Grype's `Type:` line, the purl's type, Snyk's `Package Manager:` line
    // or tag (`maven`, `apk`).
    let kind = line_value(&texts, "Type")
        .map(str::to_owned)
        .or_else(|| package.ecosystem.clone())
        .or_else(|| line_value(&texts, "Package Manager").map(str::to_owned))
        .or_else(|| tag_ecosystem(rule).map(str::to_owned));
    // `alpine:3.9`: the distribution names the package manager.
    let kind_name = kind.as_deref().map(|kind| kind.split(':').next().unwrap_or(kind));
    let class = match rule.and_then(|rule| rule.name.as_deref()) {
        Some("OsPackageVulnerability") => PackageClass::Os,
        Some("LanguageSpecificPackageVulnerability") => PackageClass::Language,
        _ => kind.as_deref().map_or(PackageClass::Other, report::package_class),
    };
    if package.ecosystem.is_none() {
        package.ecosystem = kind.clone();
    }
    if package.package_manager.is_none() {
        package.package_manager = kind_name.and_then(report::package_manager).map(str::to_owned);
    }
    // An OS package named `<source>/<binary>` (Snyk's `bzip2/libbz2`) is
    // the binary package, as Trivy and Grype name it.
    if class == PackageClass::Os
        && package.purl.is_none()
        && let Some((_, binary)) = package.name.split_once('/')
        && !binary.trim().is_empty()
    {
        package.name = binary.trim().to_owned();
    }
    let location = match class {
        PackageClass::Os => None,
        _ => {
            let logical = result
                .locations
                .iter()
                .flat_map(|location| &location.logical_locations)
                .filter_map(|logical| logical.name.as_deref())
                .find(|name| name.starts_with('/'));
            let physical = result
                .locations
                .iter()
                .filter_map(|location| location.physical_location.as_ref()?.artifact_location.as_ref()?.uri.as_deref())
                .find(|uri| !uri.is_empty());
            logical.or(physical).map(str::to_owned)
        }
    };
    let cvss = ratings(rule);
    let severity_given = severity_word(rule, &texts);
    // Without a word or a CVSS score: GitHub's bands of security-severity,
    // then the result's level (lossy: error high, warning medium, note low).
    let severity = match severity_given.as_deref().and_then(report::map_severity) {
        Some(severity) => severity,
        None => match cvss.iter().find_map(|rating| rating.base_score) {
            Some(score) => Severity::from_score(score),
            None => match number(property(rule, "security-severity")) {
                Some(score) => Severity::from_score(score),
                None => match result.level.as_deref() {
                    Some("error") => Severity::High,
                    Some("warning") => Severity::Medium,
                    Some("note") => Severity::Low,
                    _ => Severity::Info,
                },
            },
        },
    };
    let fixed_version = line_value(&texts, "Fixed Version")
        .or_else(|| line_value(&texts, "Fix Version"))
        .and_then(|fixed| fixed_versions(fixed.split(',')));
    let mut aliases = Vec::new();
    if let Some(id) = rule_id {
        // Grype's `<id>-<package>` rule is not an alias; a rule that is
        // another advisory's id is.
        if is_advisory_id(id) && !id.starts_with(&format!("{vulnerability_id}-")) {
            report::push_alias(&mut aliases, &vulnerability_id, id);
        }
    }
    if !report::is_cve(&vulnerability_id) {
        for cve in &cves {
            report::push_alias(&mut aliases, &vulnerability_id, cve);
        }
    }
    Ok(ReportEntry {
        check: None,
        host: None,
        vulnerability_id,
        aliases,
        package,
        class,
        location,
        severity_given,
        severity,
        cvss,
        epss: None,
        kev: None,
        fixed_version,
        state: None,
        title: rule.and_then(|rule| text(&rule.short_description)).map(str::to_owned),
        description: rule.and_then(|rule| text(&rule.full_description)).map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::{importing, scanner_reports};

    use super::*;

    const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

    fn convert_file(name: &str) -> ConvertedReport {
        scanner_reports::convert_real_report::<Sarif>(MANIFEST, "sarif", name)
    }

    /// What the test reads itself from a result: its package (name's last
    /// part, version) and vulnerability id, or `None` for a code scanner's.
    /// Snyk names the package only in its rule's full description,
    /// `(CVE-…) group:artifact@version`.
    fn expected(run: &Value, result: &Value) -> Option<(String, String, Option<String>)> {
        let rule_id = result["ruleId"].as_str()?;
        let rule = run["tool"]["driver"]["rules"].as_array()?.iter().find(|rule| rule["id"] == rule_id)?;
        let texts = [result.pointer("/message/text"), rule.pointer("/help/text")];
        let lines: Vec<&str> = texts.iter().flatten().filter_map(|text| text.as_str()).flat_map(str::lines).collect();
        let after = |key: &str| lines.iter().find_map(|line| line.strip_prefix(key)).map(str::trim);
        let id = after("Vulnerability ").unwrap_or(rule_id).to_owned();
        let purl = result
            .pointer("/locations/0/logicalLocations/0/fullyQualifiedName")
            .and_then(Value::as_str)
            .filter(|name| name.starts_with("pkg:"))
            .or_else(|| rule.pointer("/properties/purls/0").and_then(Value::as_str));
        match purl {
            Some(purl) => {
                let (path, version) = purl.split_once('@').expect("a versioned purl");
                let name = path.rsplit('/').next().expect("a name");
                Some((id, name.to_owned(), Some(version.to_owned())))
            }
            None => match after("Package: ") {
                Some(name) => {
                    let version = after("Installed Version: ").or_else(|| after("Version: ")).map(str::to_owned);
                    Some((id, name.to_owned(), version))
                }
                None => {
                    let described = rule.pointer("/fullDescription/text").and_then(Value::as_str)?;
                    let (name, version) = described.split_whitespace().last()?.rsplit_once('@')?;
                    Some((id, name.to_owned(), Some(version.to_owned())))
                }
            },
        }
    }

    #[test]
    fn every_real_log_converts_result_by_result() {
        for (name, bytes) in scanner_reports::real_reports(MANIFEST, "sarif") {
            let raw: Value = serde_json::from_slice(&bytes).expect("the real file is JSON");
            let converted = Sarif::convert(&bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
            let tool = raw.pointer("/runs/0/tool/driver/name").and_then(Value::as_str).expect("a tool");
            assert_eq!(converted.scanner, "sarif", "{name}");
            assert_eq!(converted.tool, report::scanner_token(tool), "{name}");
            let mut entries = converted.entries.iter();
            let mut skipped = converted.skipped.iter();
            for run in raw["runs"].as_array().expect("runs") {
                for (index, result) in run["results"].as_array().expect("results").iter().enumerate() {
                    let at = format!("{name} results[{index}]");
                    match expected(run, result) {
                        Some((id, package, version)) => {
                            let entry = entries.next().unwrap_or_else(|| panic!("{at}: no entry"));
                            assert_eq!(entry.vulnerability_id, id, "{at}");
                            assert!(
                                entry.package.name.ends_with(&package),
                                "{at}: {} for {package}",
                                entry.package.name
                            );
                            assert_eq!(entry.package.version, version, "{at}");
                        }
                        None => {
                            let skip = skipped.next().unwrap_or_else(|| panic!("{at}: not skipped"));
                            assert!(skip.entry.contains(result["ruleId"].as_str().unwrap_or("")), "{at}: {skip:?}");
                            assert_eq!(skip.reason, "a code-scanning result names no package and no vulnerability id");
                        }
                    }
                }
            }
            assert!(entries.next().is_none() && skipped.next().is_none(), "{name}: more out than in");
        }
    }

    #[test]
    fn what_the_real_logs_are_known_to_hold() {
        let codeql = convert_file("codeql-2.2.5_java.sarif.json");
        assert_eq!((codeql.entries.len(), codeql.skipped.len()), (0, 15));

        let trivy = convert_file("trivy-repo_alpine-310.sarif.json");
        assert_eq!(trivy.entries.len(), 4);
        for entry in &trivy.entries {
            assert_eq!((entry.class, entry.location.as_deref()), (PackageClass::Os, None));
            assert_eq!((entry.severity_given.as_deref(), entry.severity), (Some("MEDIUM"), Severity::Medium));
            assert_eq!(entry.cvss[0].vector.as_deref(), Some("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:N"));
            assert_eq!(entry.cvss[0].base_score, Some(5.3));
            assert_eq!(entry.cvss[1].version, "2.0");
        }
        assert_eq!(trivy.entries[1].fixed_version.as_deref(), Some("1.1.1d-r2"));
        assert_eq!(trivy.entries[0].title.as_deref(), Some("openssl: information disclosure in fork()"));

        let grype = convert_file("grype-repo_image-snapshot.sarif.json");
        let [one, two] = grype.entries.as_slice() else { panic!("{:?}", grype.entries) };
        assert_eq!((one.vulnerability_id.as_str(), one.package.name.as_str()), ("CVE-1999-0001", "package-1"));
        assert_eq!((one.class, one.package.package_manager.as_deref()), (PackageClass::Os, Some("dnf")));
        assert_eq!(one.fixed_version.as_deref(), Some("1.2.1, 2.1.3, 3.4.0"));
        assert_eq!((one.severity, two.severity), (Severity::Low, Severity::Critical));
        assert_eq!(two.package.purl.as_deref(), Some("pkg:deb/package-2@2.2.2"));
        assert!(one.aliases.is_empty(), "{:?}", one.aliases);

        let check = convert_file("secobserve_dependency-check-8.0.1.sarif.json");
        assert_eq!(check.tool.as_deref(), Some("dependency-check"));
        let by_id = |id: &str| check.entries.iter().find(|entry| entry.vulnerability_id == id).expect(id);
        let bcel = by_id("CVE-2022-42920");
        assert_eq!(bcel.package.name, "org.apache.bcel:bcel");
        assert_eq!((bcel.class, bcel.package.package_manager.as_deref()), (PackageClass::Language, Some("maven")));
        assert!(bcel.location.as_deref().is_some_and(|location| location.ends_with("bcel-6.5.0.jar")));
        assert_eq!(bcel.severity, Severity::Critical);
        // The vector is rebuilt from one property per metric.
        assert_eq!(bcel.cvss[0].vector.as_deref(), Some("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"));
        assert_eq!((bcel.cvss[0].base_score, bcel.cvss[0].source.as_deref()), (Some(9.8), Some("NVD")));
        let quarkus = by_id("CVE-2023-0044");
        assert_eq!((quarkus.severity_given.as_deref(), quarkus.severity), (Some("Unknown"), Severity::High));
        assert_eq!((quarkus.cvss[0].version.as_str(), quarkus.cvss[0].base_score), ("4.0", Some(8.8)));
        let xerces = by_id("CVE-2017-10355");
        assert_eq!(xerces.severity, Severity::Medium);
        assert_eq!(xerces.cvss[0].vector.as_deref(), Some("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:N/A:H"));
        assert!(check.entries.iter().all(|entry| entry.aliases.is_empty()), "a CVE's description names no alias");

        // Snyk: the package and CVE only in the rule's text.
        let snyk = convert_file("snyk/snyk-fixtures_open-source_maven.sarif.json");
        assert_eq!(snyk.tool.as_deref(), Some("snyk-open-source"));
        assert_eq!((snyk.entries.len(), snyk.skipped.len()), (41, 0));
        let with_cve = snyk.entries.iter().filter(|entry| entry.aliases.iter().any(|alias| report::is_cve(alias)));
        assert_eq!(with_cve.count(), 40);
        let upload = snyk
            .entries
            .iter()
            .find(|entry| entry.vulnerability_id == "SNYK-JAVA-COMMONSFILEUPLOAD-30082")
            .expect("commons-fileupload");
        assert_eq!(upload.aliases, vec!["CVE-2016-3092"]);
        assert_eq!(
            (upload.package.name.as_str(), upload.package.version.as_deref()),
            ("commons-fileupload:commons-fileupload", Some("1.3.1"))
        );
        assert_eq!((upload.class, upload.location.as_deref()), (PackageClass::Language, Some("pom.xml")));
        assert_eq!(upload.package.package_manager.as_deref(), Some("maven"));
        assert_eq!((upload.severity_given.as_deref(), upload.severity), (Some("High"), Severity::High));
        let no_cve = snyk.entries.iter().find(|entry| entry.vulnerability_id == "SNYK-JAVA-COMMONSFILEUPLOAD-31540");
        let no_cve = no_cve.expect("the rule without a CVE");
        assert!(no_cve.aliases.is_empty(), "{:?}", no_cve.aliases);
        assert_eq!(no_cve.severity, Severity::Medium);
        // The level agrees with the short description's severity.
        let high = snyk.entries.iter().filter(|entry| entry.severity == Severity::High).count();
        assert_eq!((high, snyk.entries.len() - high), (31, 10));
    }

    /// Any tool's package and vulnerability, wherever its result or rule
    /// states them.
    #[test]
    fn packages_and_cves_are_read_from_properties_descriptions_and_help() {
        let log = br#"{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"Acme Scan","rules":[
            {"id":"ACME-1","properties":{"cve":["CVE-2024-0001","CVE-2024-0002"],"tags":["security","npm"]}},
            {"id":"acme/deps/2","fullDescription":{"text":"Outdated dependency: see the help"},
             "help":{"text":"","markdown":"* Package Manager: pip\n* Vulnerable module: urllib3\n* Introduced through: app@1.0 > urllib3@1.26.4\nFixes CVE-2021-33503."}},
            {"id":"SNYK-ALPINE39-BZIP2-452847","shortDescription":{"text":"Critical severity - Out-of-bounds Write vulnerability in bzip2"},
             "fullDescription":{"text":"(CVE-2019-12900) bzip2/libbz2@1.0.6-r6"},"properties":{"tags":["security","CWE-787","apk"]}},
            {"id":"java/sql-injection","fullDescription":{"text":"Mail admin@example.com, see CVE-2020-9999"}}]}},
          "results":[
            {"ruleId":"ACME-1","level":"warning","message":{"text":"left-pad@1.0.0 is vulnerable"},
             "locations":[{"physicalLocation":{"artifactLocation":{"uri":"web/package-lock.json"}}}]},
            {"ruleId":"acme/deps/2","level":"error","message":{"text":"an outdated dependency"},
             "locations":[{"physicalLocation":{"artifactLocation":{"uri":"requirements.txt"}}}]},
            {"ruleId":"SNYK-ALPINE39-BZIP2-452847","level":"error","message":{"text":"This file introduces a vulnerable bzip2 package"},
             "locations":[{"physicalLocation":{"artifactLocation":{"uri":"Dockerfile"}},
                           "logicalLocations":[{"fullyQualifiedName":"bzip2@1.0.6-r6"}]}]},
            {"ruleId":"java/sql-injection","level":"error","message":{"text":"Query built from user-controlled sources"}}]}]}"#;
        let converted = Sarif::convert(log).expect("converts");
        let [acme, urllib3, bzip2] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
        // The rule's properties name the CVEs; the message the package.
        assert_eq!(acme.vulnerability_id, "ACME-1");
        assert_eq!(acme.aliases, vec!["CVE-2024-0001", "CVE-2024-0002"]);
        assert_eq!((acme.package.name.as_str(), acme.package.version.as_deref()), ("left-pad", Some("1.0.0")));
        assert_eq!((acme.class, acme.package.package_manager.as_deref()), (PackageClass::Language, Some("npm")));
        assert_eq!(acme.location.as_deref(), Some("web/package-lock.json"));
        // Only the help names the module, its version and a CVE.
        assert_eq!(urllib3.vulnerability_id, "CVE-2021-33503");
        assert_eq!((urllib3.package.name.as_str(), urllib3.package.version.as_deref()), ("urllib3", Some("1.26.4")));
        assert_eq!((urllib3.class, urllib3.package.package_manager.as_deref()), (PackageClass::Language, Some("pip")));
        // An image's OS package: the binary package of the rule's text, no location.
        assert_eq!((bzip2.package.name.as_str(), bzip2.package.version.as_deref()), ("libbz2", Some("1.0.6-r6")));
        assert_eq!((bzip2.class, bzip2.location.as_deref()), (PackageClass::Os, None));
        assert_eq!((bzip2.package.package_manager.as_deref(), bzip2.severity), (Some("apk"), Severity::Critical));
        assert_eq!(bzip2.aliases, vec!["CVE-2019-12900"]);
        // A code scanner's rule stays skipped: a CVE its description
        // mentions names no package, and a mail address is not one.
        assert_eq!(converted.skipped.len(), 1);
        assert!(converted.skipped[0].reason.contains("names no package"), "{:?}", converted.skipped);
    }

    #[test]
    fn severity_falls_back_on_security_severity_then_level() {
        let log = br#"{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"Some Scanner","rules":[
            {"id":"GHSA-aaaa-bbbb-cccc","properties":{"security-severity":"9.1"}},{"id":"RUSTSEC-2024-0001"}]}},
          "results":[
            {"ruleId":"GHSA-aaaa-bbbb-cccc","level":"note","message":{"text":"x"},
             "locations":[{"logicalLocations":[{"fullyQualifiedName":"pkg:npm/left-pad@1.0.0"}],
                           "physicalLocation":{"artifactLocation":{"uri":"package-lock.json"}}}]},
            {"ruleId":"RUSTSEC-2024-0001","level":"error","message":{"text":"Package: time\nVersion: 0.1.0\nType: rust-crate"}},
            {"ruleId":"RUSTSEC-2024-0001","level":"error","message":{"text":"no package here"}}]}]}"#;
        let converted = Sarif::convert(log).expect("converts");
        assert_eq!((converted.scanner.as_str(), converted.tool.as_deref()), ("sarif", Some("some-scanner")));
        let [npm, crate_] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
        assert_eq!((npm.severity, npm.location.as_deref()), (Severity::Critical, Some("package-lock.json")));
        assert_eq!((crate_.severity, crate_.package.package_manager.as_deref()), (Severity::High, Some("cargo")));
        assert_eq!(converted.skipped.len(), 1);
        assert!(converted.skipped[0].reason.contains("names no package"), "{:?}", converted.skipped);
        assert!(matches!(Sarif::convert(br#"{"version":"2.0.0","runs":[]}"#), Err(ReportError::Unsupported(_))));
    }

    /// Every result is an entry (or a skipped one), across every run: a
    /// log of more than `report::MAX_ENTRIES` results is refused, naming
    /// the bound and what multiplied.
    #[test]
    fn a_log_with_more_results_than_the_bound_is_refused() {
        let log = |runs: usize, results: usize| {
            let result = serde_json::json!({"ruleId": "RUSTSEC-2024-0001", "level": "error",
                "message": {"text": "Package: time\nVersion: 0.1.0\nType: rust-crate"}});
            let run = serde_json::json!({"tool": {"driver": {"name": "Some Scanner", "rules": [{"id": "RUSTSEC-2024-0001"}]}},
                "results": vec![result; results]});
            serde_json::to_vec(&serde_json::json!({"version": "2.1.0", "runs": vec![run; runs]})).expect("JSON")
        };
        let within = Sarif::convert(&log(2, 50_000)).expect("100,000 results convert");
        assert_eq!(within.entries.len(), 100_000);
        importing::assert_refused_past_max_entries(Sarif::convert(&log(3, 40_000)), "results of every run");
    }

    #[test]
    fn sarif_logs_are_told_from_every_other_format() {
        scanner_reports::assert_detects_its_own_and_no_other::<Sarif>(MANIFEST, "sarif");
    }

    #[test]
    fn hostile_and_malformed_input_is_an_error() {
        scanner_reports::assert_refuses_hostile_and_malformed::<Sarif>();
    }
}
