//! The Snyk importer: the JSON the Snyk CLI writes with `--json` — `snyk
//! test` of one project, `snyk test --all-projects` (a top-level array of
//! project results) and `snyk container test` (an image's OS packages and,
//! with application scanning, its `applications[]`). Snyk's SARIF is the
//! SARIF importer's.
//!
//! What maps where is in `docs/scanner-report-mapping/snyk.md`. In short:
//! Snyk lists a vulnerability once per dependency path (`from`), so the
//! importer keeps one entry per vulnerability, package, version and project
//! file; the Snyk id is the vulnerability id and its CVEs and GHSAs the
//! aliases; an image's OS packages are named by the binary package
//! (`libbz2` of `bzip2/libbz2`), as Trivy and Grype name them, and have no
//! location; language packages are located at the project's target file.
//! A Snyk report names no host and no scan time: the import names the
//! endpoint.

use std::collections::HashSet;

use esr_plugin_sdk::importing::{fixed_versions, importer_info};
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, EntryState, Epss, ImporterInfo, OperatingSystem, Package,
    PackageClass, ReportEntry, ReportError, ReportImporter, SkippedEntry, SuppressionReason,
};
use serde::Deserialize;
use serde_json::Value;

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "vulnerabilities of every project";

pub struct Snyk;

esr_plugin_sdk::export_report_importer!(crate::Snyk);

/// One project's result (only what the importer reads).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Project {
    vulnerabilities: Option<Vec<Vulnerability>>,
    /// Why Snyk could not test the project (`--all-projects` lists it
    /// beside the others).
    error: Option<Value>,
    package_manager: Option<String>,
    display_target_file: Option<String>,
    target_file: Option<String>,
    path: Option<String>,
    /// An image's platform, `linux/amd64`.
    platform: Option<String>,
    filtered: Option<Filtered>,
    /// An image's application dependencies, each a project result.
    applications: Option<Vec<Project>>,
}

/// What the project's `.snyk` policy took out of `vulnerabilities`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Filtered {
    ignore: Option<Vec<Vulnerability>>,
    patch: Option<Vec<Vulnerability>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Vulnerability {
    id: Option<String>,
    /// `license` for a licence issue; vulnerabilities have none.
    #[serde(rename = "type")]
    kind: Option<String>,
    title: Option<String>,
    description: Option<String>,
    /// The package (`bzip2/libbz2`: source and binary package in an image).
    name: Option<String>,
    /// The source package in an image, else the package.
    package_name: Option<String>,
    version: Option<String>,
    /// The package's ecosystem: `npm`, `pip`, or an image's distribution
    /// and release, `debian:12`.
    package_manager: Option<String>,
    severity: Option<String>,
    #[serde(rename = "CVSSv3")]
    cvss_v3: Option<String>,
    cvss_score: Option<Value>,
    cvss_details: Option<Vec<CvssDetail>>,
    cvss_sources: Option<Vec<CvssSource>>,
    identifiers: Option<serde_json::Map<String, Value>>,
    alternative_ids: Option<Vec<Value>>,
    fixed_in: Option<Vec<Value>>,
    epss_details: Option<EpssDetails>,
    /// Why the policy ignored it (`filtered.ignored[].reason`).
    filtered: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct CvssDetail {
    assigner: Option<String>,
    cvss_v3_vector: Option<String>,
    cvss_v3_base_score: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct CvssSource {
    /// `primary` (the rating Snyk's `CVSSv3` repeats) or `secondary`.
    #[serde(rename = "type")]
    kind: Option<String>,
    assigner: Option<String>,
    vector: Option<String>,
    base_score: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EpssDetails {
    probability: Option<Value>,
    percentile: Option<Value>,
}

/// The keys a project result has beside `vulnerabilities` and
/// `packageManager`, one of which marks it as Snyk's.
const PROJECT_MARKS: &[&str] = &["ok", "dependencyCount", "uniqueCount", "projectName"];

impl ReportImporter for Snyk {
    fn describe() -> ImporterInfo {
        importer_info(
            "snyk",
            env!("CARGO_PKG_VERSION"),
            "Snyk CLI JSON: snyk test (one project or --all-projects) and snyk container test",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        let Some(outline) = report::parse_outline(bytes, 2) else { return Confidence::No };
        let certain = match &outline {
            Value::Object(project) => is_project(project),
            // `--all-projects`: results, and the projects Snyk could not test.
            Value::Array(projects) => {
                projects.iter().any(|project| project.as_object().is_some_and(is_project))
                    && projects.iter().all(|project| {
                        project.as_object().is_some_and(|project| is_project(project) || is_failed_project(project))
                    })
            }
            _ => false,
        };
        if certain { Confidence::Certain } else { Confidence::No }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        const SNYK: &str = "a Snyk JSON report (`snyk test --json`: an object with vulnerabilities and packageManager, or an array of them)";
        let mut converter = Converter {
            report: ConvertedReport { scanner: "snyk".into(), ..ConvertedReport::default() },
            seen: HashSet::new(),
        };
        // The first byte tells the layouts apart, so the report is parsed
        // once, straight into the fields read.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            let projects: Vec<Project> = report::parse_report(bytes, SNYK)?;
            if projects.is_empty() {
                return Err(ReportError::Unsupported(format!("not {SNYK}: an empty array")));
            }
            for (index, project) in projects.into_iter().enumerate() {
                converter.add_project(&format!("[{index}]."), project, true)?;
            }
        } else {
            let project: Project = report::parse_report(bytes, SNYK)?;
            converter.add_project("", project, false)?;
        }
        let mut converted = converter.report;
        converted.scanned_classes.sort();
        converted.scanned_classes.dedup();
        Ok(converted)
    }
}

fn is_project(object: &serde_json::Map<String, Value>) -> bool {
    object.get("vulnerabilities").is_some_and(Value::is_array)
        && object.get("packageManager").is_some_and(Value::is_string)
        && PROJECT_MARKS.iter().any(|mark| object.contains_key(*mark))
}

fn is_failed_project(object: &serde_json::Map<String, Value>) -> bool {
    object.get("ok") == Some(&Value::Bool(false)) && object.contains_key("error")
}

/// What a project's entries share.
struct ProjectContext<'a> {
    package_manager: &'a str,
    class: PackageClass,
    /// Where its language packages are: the manifest or lockfile tested.
    target: Option<String>,
    platform: Option<&'a str>,
}

/// (vulnerability id, package, version, location): what one entry is;
/// Snyk repeats it once per dependency path.
type EntryKey = (String, String, Option<String>, Option<String>);

struct Converter {
    report: ConvertedReport,
    seen: HashSet<EntryKey>,
}

impl Converter {
    /// `at` is where the project is, ending in a dot (`[2].`), or empty
    /// for the report's only project; `among_others` when the report holds
    /// other projects, so a failed one is skipped rather than refused.
    fn add_project(&mut self, at: &str, project: Project, among_others: bool) -> Result<(), ReportError> {
        let Project {
            vulnerabilities,
            error,
            package_manager,
            display_target_file,
            target_file,
            path,
            platform,
            filtered,
            applications,
        } = project;
        let target = [display_target_file, target_file, path]
            .into_iter()
            .flatten()
            .map(|text| text.trim().to_owned())
            .find(|text| !text.is_empty());
        let named = || if at.is_empty() { "the object".to_owned() } else { at.trim_end_matches('.').to_owned() };
        let Some(vulnerabilities) = vulnerabilities else {
            let Some(error) = error.as_ref().map(error_text) else {
                return Err(ReportError::Unsupported(format!(
                    "not a Snyk JSON report: {} has no vulnerabilities and no error",
                    named()
                )));
            };
            let what = target.unwrap_or_else(|| "the project".into());
            if !among_others {
                return Err(ReportError::Invalid(format!("Snyk could not test {what}: {error}")));
            }
            // What the project holds is unknown: its findings must not be
            // resolved for not being listed.
            self.report.partial = true;
            return self.report.add_skipped(
                SkippedEntry {
                    entry: format!("{} ({what})", named()),
                    reason: format!("Snyk could not test this project, so the report resolves nothing: {error}"),
                },
                FAN_OUT,
            );
        };
        let Some(package_manager) = package_manager.as_deref().map(str::trim).filter(|manager| !manager.is_empty())
        else {
            return Err(ReportError::Unsupported(format!(
                "not a Snyk JSON report: {} has vulnerabilities but no packageManager",
                named()
            )));
        };
        let class = report::package_class(&kind_of(package_manager));
        // A project where nothing was found still says its class was scanned.
        self.report.scanned_classes.push(class);
        let context = ProjectContext { package_manager, class, target, platform: platform.as_deref() };
        for (index, vulnerability) in vulnerabilities.iter().enumerate() {
            self.add_vulnerability(&format!("{at}vulnerabilities[{index}]"), vulnerability, &context, None)?;
        }
        let Filtered { ignore, patch } = filtered.unwrap_or_default();
        for (index, vulnerability) in ignore.iter().flatten().enumerate() {
            let state = ignored(vulnerability);
            self.add_vulnerability(&format!("{at}filtered.ignore[{index}]"), vulnerability, &context, Some(state))?;
        }
        for (index, vulnerability) in patch.iter().flatten().enumerate() {
            let state = EntryState::Suppressed {
                reason: SuppressionReason::CompensatingControl,
                note: Some("patched with a Snyk patch (the project's .snyk policy)".into()),
            };
            self.add_vulnerability(&format!("{at}filtered.patch[{index}]"), vulnerability, &context, Some(state))?;
        }
        for (index, application) in applications.into_iter().flatten().enumerate() {
            self.add_project(&format!("{at}applications[{index}]."), application, true)?;
        }
        Ok(())
    }

    fn add_vulnerability(
        &mut self,
        at: &str,
        vulnerability: &Vulnerability,
        project: &ProjectContext<'_>,
        state: Option<EntryState>,
    ) -> Result<(), ReportError> {
        let id = vulnerability.id.as_deref().map(str::trim).unwrap_or_default().to_owned();
        if id.is_empty() {
            return self.report.add_skipped(SkippedEntry { entry: at.to_owned(), reason: "no id".into() }, FAN_OUT);
        }
        let given_manager = vulnerability
            .package_manager
            .as_deref()
            .map(str::trim)
            .filter(|manager| !manager.is_empty())
            .unwrap_or(project.package_manager);
        let kind = kind_of(given_manager);
        let mut class = report::package_class(&kind);
        // An image's package under a distribution the contract does not
        // know is still one of its OS packages.
        if class == PackageClass::Other && project.class == PackageClass::Os {
            class = PackageClass::Os;
        }
        self.report.scanned_classes.push(class);
        let Some(full_name) = [&vulnerability.name, &vulnerability.package_name]
            .into_iter()
            .flatten()
            .map(|name| name.trim())
            .find(|name| !name.is_empty())
        else {
            return self.report.add_skipped(
                SkippedEntry {
                    entry: format!("{at} ({id})"),
                    reason: "names no package (no name or packageName)".into(),
                },
                FAN_OUT,
            );
        };
        // In an image `name` is `<source>/<binary>` (`bzip2/libbz2`): the
        // binary package is what is installed, and what Trivy and Grype
        // name.
        let name = match class {
            PackageClass::Os => full_name.split_once('/').map_or(full_name, |(_, binary)| binary),
            _ => full_name,
        }
        .to_owned();
        let version = vulnerability.version.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let location = match class {
            PackageClass::Os => None,
            _ => project.target.clone(),
        };
        if !self.seen.insert((id.clone(), name.clone(), version.clone(), location.clone())) {
            // The same vulnerability of the same package by another
            // dependency path (`from`).
            return Ok(());
        }
        if vulnerability.kind.as_deref() == Some("license") {
            return self.report.add_skipped(
                SkippedEntry {
                    entry: format!("{at} ({id})"),
                    reason:
                        "a licence issue (the package's licence breaks the Snyk licence policy), not a vulnerability"
                            .into(),
                },
                FAN_OUT,
            );
        }
        let package_manager = match class {
            PackageClass::Os => {
                report::package_manager(&kind).or_else(|| report::package_manager(&kind_of(project.package_manager)))
            }
            _ => report::package_manager(&kind),
        };
        if class == PackageClass::Os && self.report.operating_system.is_none() {
            self.report.operating_system = operating_system(given_manager, project.platform);
        }
        let cvss = ratings(vulnerability);
        let severity_given =
            vulnerability.severity.as_deref().map(str::trim).filter(|severity| !severity.is_empty()).map(str::to_owned);
        let severity = report::entry_severity(severity_given.as_deref(), &cvss);
        let epss = vulnerability.epss_details.as_ref().and_then(|details| {
            Some(Epss { score: number(details.probability.as_ref())?, percentile: number(details.percentile.as_ref()) })
        });
        let fixed_version = fixed_versions(vulnerability.fixed_in.iter().flatten().filter_map(Value::as_str));
        let entry = ReportEntry {
            host: None,
            aliases: aliases(&id, vulnerability),
            vulnerability_id: id,
            check: None,
            package: Package {
                name,
                version,
                ecosystem: Some(given_manager.to_owned()),
                package_manager: package_manager.map(str::to_owned),
                vendor: None,
                purl: None,
                cpe: None,
            },
            class,
            location,
            severity_given,
            severity,
            cvss,
            epss,
            kev: None,
            fixed_version,
            state,
            title: vulnerability.title.clone().filter(|title| !title.trim().is_empty()),
            description: vulnerability.description.clone().filter(|description| !description.trim().is_empty()),
        };
        self.report.add_entry(entry, FAN_OUT)
    }
}

/// Snyk's package manager as the contract's helpers name it: an image's
/// distribution without its release (`debian:12` → `debian`), Go's
/// dependency tools as `go`, Paket as `nuget`.
fn kind_of(package_manager: &str) -> String {
    let name = package_manager.trim().to_ascii_lowercase();
    match name.split(':').next().unwrap_or_default() {
        "gomodules" | "golangdep" | "govendor" => "go".into(),
        "paket" => "nuget".into(),
        other => other.to_owned(),
    }
}

/// An image's OS from its packages' `packageManager` (`debian:12`) and the
/// project's `platform` (`linux/amd64`); `None` when it names no release
/// (the project's `deb` or `apk` says no more than the package manager).
fn operating_system(package_manager: &str, platform: Option<&str>) -> Option<OperatingSystem> {
    let (name, version) = package_manager.trim().split_once(':')?;
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    let architecture = platform
        .and_then(|platform| platform.split('/').nth(1))
        .map(str::trim)
        .filter(|architecture| !architecture.is_empty())
        .map(str::to_owned);
    Some(OperatingSystem {
        name: name.to_owned(),
        version: Some(version.trim().to_owned()).filter(|version| !version.is_empty()),
        family: Some(report::os_family(name).to_owned()),
        vendor: None,
        architecture,
    })
}

/// The ratings a vulnerability gives: each assigner's (`cvssSources[]`,
/// else the older `cvssDetails[]`), and Snyk's own `CVSSv3`/`cvssScore`
/// unless it repeats one of them (in an image it is NVD's). The primary
/// source (else Snyk) comes first.
fn ratings(vulnerability: &Vulnerability) -> Vec<CvssRating> {
    let mut ratings: Vec<CvssRating> = Vec::new();
    let sources = vulnerability.cvss_sources.as_deref().unwrap_or_default();
    if sources.is_empty() {
        for detail in vulnerability.cvss_details.iter().flatten() {
            push_rating(
                &mut ratings,
                report::cvss_rating(
                    detail.assigner.as_deref(),
                    detail.cvss_v3_vector.as_deref(),
                    number(detail.cvss_v3_base_score.as_ref()),
                ),
            );
        }
    } else {
        for source in sources {
            push_rating(
                &mut ratings,
                report::cvss_rating(
                    source.assigner.as_deref(),
                    source.vector.as_deref(),
                    number(source.base_score.as_ref()),
                ),
            );
        }
    }
    let own =
        report::cvss_rating(Some("snyk"), vulnerability.cvss_v3.as_deref(), number(vulnerability.cvss_score.as_ref()));
    if let Some(own) = own
        && !ratings.iter().any(|rating| rating.vector == own.vector && rating.base_score == own.base_score)
    {
        ratings.insert(0, own);
    }
    let primary = sources
        .iter()
        .find(|source| source.kind.as_deref() == Some("primary"))
        .and_then(|source| source.assigner.as_deref());
    report::order_cvss(ratings, Some(primary.unwrap_or("snyk")))
}

fn push_rating(ratings: &mut Vec<CvssRating>, rating: Option<CvssRating>) {
    if let Some(rating) = rating
        && !ratings.contains(&rating)
    {
        ratings.push(rating);
    }
}

/// A number Snyk writes as a number or as text (`epssDetails`).
fn number(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// The other ids of the flaw: `identifiers.CVE` (the finding's CVE is the
/// first), `GHSA`, `GHSL`, and the Snyk ids it was known by (`ALTERNATIVE`,
/// `alternativeIds`). CWEs name a weakness, NSP numbers a retired
/// database, `SNYK` a related vulnerability: none is this one's id.
fn aliases(id: &str, vulnerability: &Vulnerability) -> Vec<String> {
    let mut aliases = Vec::new();
    let identifiers = vulnerability.identifiers.as_ref();
    for key in ["CVE", "GHSA", "GHSL", "ALTERNATIVE"] {
        let listed = identifiers.and_then(|identifiers| identifiers.get(key)).and_then(Value::as_array);
        for alias in listed.into_iter().flatten().filter_map(Value::as_str) {
            report::push_alias(&mut aliases, id, alias);
        }
    }
    for alias in vulnerability.alternative_ids.iter().flatten().filter_map(Value::as_str) {
        report::push_alias(&mut aliases, id, alias);
    }
    aliases
}

/// The state of a vulnerability the project's policy ignores, with the
/// reasons it gives (`filtered.ignored[].reason`).
fn ignored(vulnerability: &Vulnerability) -> EntryState {
    let rules = vulnerability.filtered.as_ref().and_then(|filtered| filtered.get("ignored")).and_then(Value::as_array);
    let reasons: Vec<&str> = rules
        .into_iter()
        .flatten()
        .filter_map(|rule| rule.get("reason").and_then(Value::as_str))
        .map(str::trim)
        .filter(|reason| !reason.is_empty())
        .collect();
    let note = if reasons.is_empty() {
        "ignored by the project's .snyk policy".to_owned()
    } else {
        format!("ignored by the project's .snyk policy: {}", reasons.join("; "))
    };
    EntryState::Suppressed { reason: SuppressionReason::AcceptedRisk, note: Some(note) }
}

/// Snyk's error for a project it could not test, as text of bounded length.
fn error_text(error: &Value) -> String {
    let text = match error {
        Value::String(text) => text.trim().to_owned(),
        other => other.to_string(),
    };
    if text.chars().count() > 500 { format!("{}…", text.chars().take(499).collect::<String>()) } else { text }
}

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::report::Severity;
    use esr_plugin_sdk::{importing, scanner_reports};

    use super::*;

    const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

    fn convert_file(name: &str) -> ConvertedReport {
        scanner_reports::convert_real_report::<Snyk>(MANIFEST, "snyk", name)
    }

    /// What the test reads itself from a report: each vulnerability once
    /// per (id, package, version, location), in the report's order, with
    /// the vulnerability as listed first; and how many the report lists.
    fn expected(raw: &Value) -> (Vec<(EntryKey, &Value)>, usize) {
        let projects: Vec<&Value> = match raw {
            Value::Array(projects) => projects.iter().collect(),
            project => vec![project],
        };
        let mut listed = 0;
        let mut kept: Vec<(EntryKey, &Value)> = Vec::new();
        for project in projects {
            let target = ["displayTargetFile", "targetFile", "path"]
                .iter()
                .find_map(|key| project[*key].as_str().filter(|text| !text.is_empty()));
            for vulnerability in project["vulnerabilities"].as_array().expect("vulnerabilities") {
                listed += 1;
                let name = vulnerability["name"].as_str().expect("a name");
                // An image's packages are `<distribution>:<release>`'s.
                let in_image = vulnerability["packageManager"].as_str().expect("a package manager").contains(':');
                let (name, location) = match in_image {
                    true => (name.rsplit('/').next().expect("a binary package"), None),
                    false => (name, target.map(str::to_owned)),
                };
                let key = (
                    vulnerability["id"].as_str().expect("an id").to_owned(),
                    name.to_owned(),
                    vulnerability["version"].as_str().map(str::to_owned),
                    location,
                );
                if !kept.iter().any(|(known, _)| *known == key) {
                    kept.push((key, vulnerability));
                }
            }
        }
        (kept, listed)
    }

    fn strings(value: &Value) -> Vec<&str> {
        value.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
    }

    #[test]
    fn every_real_report_converts_once_per_vulnerability_package_version_and_file() {
        let counts = [
            ("defectdojo_all-projects_7-targets.json", 40, 17),
            ("heimdall2_nodejs-goof_npm.json", 379, 133),
            ("sample-scan-files_container_python-3.4-alpine.json", 164, 37),
            ("shoppingcart_container_aspnet-8-debian.json", 168, 74),
        ];
        let reports = scanner_reports::real_reports(MANIFEST, "snyk");
        let names: Vec<&str> = reports.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, counts.iter().map(|(name, _, _)| *name).collect::<Vec<_>>(), "the Snyk JSON reports");
        for ((name, bytes), (_, listed_count, kept_count)) in reports.iter().zip(counts) {
            let raw: Value = serde_json::from_slice(bytes).expect("the real file is JSON");
            let converted = Snyk::convert(bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
            let (kept, listed) = expected(&raw);
            assert_eq!((listed, kept.len()), (listed_count, kept_count), "{name}: entries listed and kept");
            assert_eq!(converted.entries.len(), kept.len(), "{name}");
            assert_eq!(converted.scanner, "snyk");
            assert!(converted.skipped.is_empty() && !converted.partial, "{name}: {:?}", converted.skipped);
            assert_eq!(converted.scanned_at, None, "{name}: Snyk states no scan time");
            for (entry, ((id, package, version, location), raw)) in converted.entries.iter().zip(&kept) {
                let at = format!("{name} {id} {package}");
                assert_eq!(&entry.vulnerability_id, id, "{at}");
                assert_eq!(&entry.package.name, package, "{at}");
                assert_eq!(&entry.package.version, version, "{at}");
                assert_eq!(&entry.location, location, "{at}");
                assert_eq!(entry.class, if location.is_some() { PackageClass::Language } else { PackageClass::Os });
                assert_eq!(entry.package.ecosystem.as_deref(), raw["packageManager"].as_str(), "{at}");
                let cves = strings(&raw["identifiers"]["CVE"]);
                assert_eq!(entry.aliases.iter().take(cves.len()).map(String::as_str).collect::<Vec<_>>(), cves, "{at}");
                let word = raw["severity"].as_str().expect("a severity");
                assert_eq!(entry.severity_given.as_deref(), Some(word), "{at}");
                let severity = match word {
                    "critical" => Severity::Critical,
                    "high" => Severity::High,
                    "medium" => Severity::Medium,
                    "low" => Severity::Low,
                    other => panic!("{at}: a severity the test does not know: {other}"),
                };
                assert_eq!(entry.severity, severity, "{at}");
                let fixed = strings(&raw["fixedIn"]);
                assert_eq!(entry.fixed_version, (!fixed.is_empty()).then(|| fixed.join(", ")), "{at}");
                // Snyk's own rating first, else the primary source's.
                match raw["CVSSv3"].as_str() {
                    Some(vector) => {
                        assert_eq!(entry.cvss[0].vector.as_deref(), Some(vector), "{at}");
                        assert_eq!(entry.cvss[0].base_score, raw["cvssScore"].as_f64(), "{at}");
                    }
                    None => {
                        let first = &raw["cvssSources"][0];
                        assert_eq!(entry.cvss[0].source.as_deref(), first["assigner"].as_str(), "{at}");
                        assert_eq!(entry.cvss[0].base_score, first["baseScore"].as_f64(), "{at}");
                    }
                }
                let assigners = raw["cvssSources"].as_array().map_or(0, Vec::len);
                assert!(entry.cvss.len() >= assigners.max(1), "{at}: {:?}", entry.cvss);
                assert_eq!(entry.title.as_deref(), raw["title"].as_str(), "{at}");
            }
        }
    }

    #[test]
    fn what_the_real_reports_are_known_to_hold() {
        // One project, one finding per (CVE or id, package): Snyk's own
        // count of its issues.
        let goof = convert_file("heimdall2_nodejs-goof_npm.json");
        assert_eq!(goof.scanned_classes, vec![PackageClass::Language]);
        assert_eq!(goof.operating_system, None);
        let mut issues: Vec<(String, &str)> = goof
            .entries
            .iter()
            .map(|entry| {
                let cve = std::iter::once(&entry.vulnerability_id)
                    .chain(&entry.aliases)
                    .find(|id| report::is_cve(id))
                    .unwrap_or(&entry.vulnerability_id);
                (cve.clone(), entry.package.name.as_str())
            })
            .collect();
        issues.sort();
        issues.dedup();
        assert_eq!(issues.len(), 94, "uniqueCount");
        assert!(goof.entries.iter().all(|entry| entry.location.as_deref() == Some("package-lock.json")));
        assert!(goof.entries.iter().all(|entry| entry.package.package_manager.as_deref() == Some("npm")));
        let legacy = goof.entries.iter().find(|entry| entry.vulnerability_id == "npm:ejs:20161128").expect("npm:ejs");
        assert_eq!(legacy.aliases, vec!["CVE-2017-1000228", "SNYK-JS-EJS-10218"]);
        assert_eq!(legacy.cvss[0].source.as_deref(), Some("snyk"));
        let two_cves =
            goof.entries.iter().filter(|entry| entry.aliases.iter().filter(|alias| report::is_cve(alias)).count() == 2);
        assert!(two_cves.count() >= 2);
        let ghsa = goof.entries.iter().filter(|entry| entry.aliases.iter().any(|alias| alias.starts_with("GHSA-")));
        assert!(ghsa.count() > 50);

        // Seven projects: each located at its own file; the four where
        // nothing was found still count as scanned.
        let all = convert_file("defectdojo_all-projects_7-targets.json");
        assert_eq!(all.scanned_classes, vec![PackageClass::Language]);
        let mut files: Vec<(&str, &str)> = all
            .entries
            .iter()
            .map(|entry| {
                (
                    entry.location.as_deref().unwrap_or_default(),
                    entry.package.package_manager.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        files.dedup();
        assert_eq!(
            files,
            vec![
                ("Mobile-Security-Framework-MobSF/requirements.txt", "pip"),
                ("frontend/package-lock.json", "npm"),
                ("sbom/SBOMTests/obj/project.assets.json", "nuget"),
            ]
        );
        // Three name no CVE: their identity is the Snyk id.
        let without_cve = all.entries.iter().filter(|entry| !entry.aliases.iter().any(|alias| report::is_cve(alias)));
        assert_eq!(
            without_cve.map(|entry| entry.vulnerability_id.as_str()).collect::<Vec<_>>(),
            vec!["SNYK-PYTHON-NETWORKX-1062709", "SNYK-JS-BOOTSTRAPTABLE-2825191", "SNYK-JS-MERGE-1040469"]
        );

        // An image: OS packages named by their binary package, no location.
        let alpine = convert_file("sample-scan-files_container_python-3.4-alpine.json");
        let os = alpine.operating_system.as_ref().expect("the image's OS");
        assert_eq!(
            (os.name.as_str(), os.version.as_deref(), os.family.as_deref(), os.architecture.as_deref()),
            ("alpine", Some("3.9"), Some("linux"), Some("amd64"))
        );
        assert_eq!(alpine.scanned_classes, vec![PackageClass::Os]);
        let bzip2 = alpine.entries.iter().find(|entry| entry.vulnerability_id == "SNYK-ALPINE39-BZIP2-452847");
        let bzip2 = bzip2.expect("bzip2");
        assert_eq!((bzip2.package.name.as_str(), bzip2.package.version.as_deref()), ("libbz2", Some("1.0.6-r6")));
        assert_eq!((bzip2.class, bzip2.location.as_deref()), (PackageClass::Os, None));
        assert_eq!(bzip2.package.package_manager.as_deref(), Some("apk"));
        assert_eq!(bzip2.fixed_version.as_deref(), Some("1.0.6-r7"));
        assert_eq!(
            (bzip2.aliases.as_slice(), bzip2.severity),
            (&["CVE-2019-12900".to_owned()][..], Severity::Critical)
        );
        // NVD's rating is Snyk's CVSSv3; Red Hat's and SUSE's follow.
        assert_eq!(bzip2.cvss[0].source.as_deref(), Some("NVD"));
        assert!(bzip2.cvss.iter().all(|rating| rating.source.as_deref() != Some("snyk")), "{:?}", bzip2.cvss);
        assert!(bzip2.epss.as_ref().is_some_and(|epss| epss.percentile.is_some() && epss.score > 0.0));

        let debian = convert_file("shoppingcart_container_aspnet-8-debian.json");
        let os = debian.operating_system.as_ref().expect("the image's OS");
        assert_eq!((os.name.as_str(), os.version.as_deref()), ("debian", Some("12")));
        let apt = debian.entries.iter().find(|entry| entry.package.name == "libapt-pkg6.0").expect("libapt-pkg6.0");
        assert_eq!((apt.package.package_manager.as_deref(), apt.severity), (Some("apt"), Severity::Low));
        // Snyk rates Debian's "unimportant" issues low whatever NVD says.
        let raw: Value = serde_json::from_slice(&scanner_reports::real_reports(MANIFEST, "snyk")[3].1).expect("JSON");
        let (kept, _) = expected(&raw);
        let rated_up_by_nvd = kept
            .iter()
            .filter(|(_, raw)| {
                raw["severity"] == "low" && matches!(raw["nvdSeverity"].as_str(), Some("high" | "critical"))
            })
            .count();
        assert!(rated_up_by_nvd > 10, "{rated_up_by_nvd}");
        // Without a CVSSv3 (NVD's, in an image), the other assigners' ratings remain.
        let unscored: Vec<&ReportEntry> = debian
            .entries
            .iter()
            .filter(|entry| entry.cvss.iter().all(|rating| rating.source.as_deref() != Some("NVD")))
            .collect();
        assert_eq!(unscored.len(), 5, "10 listed, 5 kept");
        for entry in unscored {
            let sources: Vec<&str> = entry.cvss.iter().filter_map(|rating| rating.source.as_deref()).collect();
            assert!(
                !sources.is_empty() && sources.iter().all(|source| ["Red Hat", "SUSE"].contains(source)),
                "{sources:?}"
            );
        }
        let fixed: Vec<&str> = debian
            .entries
            .iter()
            .filter(|entry| entry.fixed_version.is_some())
            .map(|entry| entry.package.name.as_str())
            .collect();
        assert!(!fixed.is_empty() && fixed.iter().all(|name| ["openssl", "libssl3"].contains(name)), "{fixed:?}");
    }

    #[test]
    fn policy_ignores_patches_licences_failed_projects_and_applications() {
        let report = br#"[
          {"ok": false, "packageManager": "npm", "projectName": "web", "displayTargetFile": "web/package-lock.json",
           "vulnerabilities": [
             {"id": "SNYK-JS-LODASH-1", "name": "lodash", "version": "4.17.4", "packageManager": "npm", "severity": "high",
              "identifiers": {"CVE": ["CVE-2020-8203"], "CWE": ["CWE-400"], "NSP": ["1523"]}, "fixedIn": ["4.17.19"], "from": ["web@1", "lodash@4.17.4"]},
             {"id": "SNYK-JS-LODASH-1", "name": "lodash", "version": "4.17.4", "packageManager": "npm", "severity": "high",
              "from": ["web@1", "x@1", "lodash@4.17.4"]},
             {"id": "snyk:lic:npm:gpl-thing:GPL-3.0", "type": "license", "name": "gpl-thing", "version": "1.0.0",
              "packageManager": "npm", "severity": "medium"},
             {"id": "SNYK-JS-NONAME-1", "packageManager": "npm", "severity": "low"}],
           "filtered": {
             "ignore": [{"id": "SNYK-JS-MINIMIST-2", "name": "minimist", "version": "0.0.8", "packageManager": "npm",
                         "severity": "medium", "filtered": {"ignored": [{"reason": "not reachable", "expires": "2030-01-01"}]}}],
             "patch": [{"id": "npm:ms:20170412", "name": "ms", "version": "0.7.1", "packageManager": "npm", "severity": "low"}]}},
          {"ok": false, "error": "Could not detect supported target files", "path": "/src/legacy"},
          {"ok": true, "packageManager": "rpm", "projectName": "docker-image|app", "path": "app:latest",
           "platform": "linux/arm64", "vulnerabilities": [
             {"id": "SNYK-WOLFI-X-1", "name": "x/libx", "version": "1.0", "packageManager": "wolfi:latest", "severity": "low"},
             {"id": "SNYK-UBI9-Y-1", "name": "y/liby", "version": "2.0", "packageManager": "ubi9:9.3", "severity": "critical",
              "CVSSv3": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", "cvssScore": 9.8}],
           "applications": [{"packageManager": "gomodules", "targetFile": "/app/server", "uniqueCount": 1, "vulnerabilities": [
             {"id": "SNYK-GOLANG-NET-1", "name": "golang.org/x/net", "version": "0.1.0", "packageManager": "gomodules",
              "severity": "medium"}]}]}]"#;
        assert_eq!(Snyk::detect(report), Confidence::Certain);
        let converted = Snyk::convert(report).expect("converts");
        let ids: Vec<&str> = converted.entries.iter().map(|entry| entry.vulnerability_id.as_str()).collect();
        assert_eq!(
            ids,
            vec![
                "SNYK-JS-LODASH-1",
                "SNYK-JS-MINIMIST-2",
                "npm:ms:20170412",
                "SNYK-WOLFI-X-1",
                "SNYK-UBI9-Y-1",
                "SNYK-GOLANG-NET-1"
            ]
        );
        let by_id = |id: &str| converted.entries.iter().find(|entry| entry.vulnerability_id == id).expect(id);
        let lodash = by_id("SNYK-JS-LODASH-1");
        assert_eq!(lodash.aliases, vec!["CVE-2020-8203"], "CWE and NSP are not ids of the flaw");
        assert_eq!(lodash.location.as_deref(), Some("web/package-lock.json"));
        assert_eq!(lodash.state, None);
        assert_eq!(converted.entries.iter().filter(|entry| entry.vulnerability_id == "SNYK-JS-LODASH-1").count(), 1);
        let ignored = by_id("SNYK-JS-MINIMIST-2");
        assert_eq!(
            ignored.state,
            Some(EntryState::Suppressed {
                reason: SuppressionReason::AcceptedRisk,
                note: Some("ignored by the project's .snyk policy: not reachable".into())
            })
        );
        assert!(matches!(
            by_id("npm:ms:20170412").state,
            Some(EntryState::Suppressed { reason: SuppressionReason::CompensatingControl, .. })
        ));
        // An image's packages under distributions the contract does not
        // name are still its OS packages.
        let wolfi = by_id("SNYK-WOLFI-X-1");
        assert_eq!(
            (wolfi.class, wolfi.package.name.as_str(), wolfi.location.as_deref()),
            (PackageClass::Os, "libx", None)
        );
        assert_eq!(wolfi.package.package_manager.as_deref(), Some("apk"));
        let ubi = by_id("SNYK-UBI9-Y-1");
        assert_eq!((ubi.class, ubi.package.package_manager.as_deref()), (PackageClass::Os, Some("dnf")));
        assert_eq!((ubi.cvss[0].source.as_deref(), ubi.cvss[0].base_score), (Some("snyk"), Some(9.8)));
        let os = converted.operating_system.as_ref().expect("an OS");
        assert_eq!((os.name.as_str(), os.architecture.as_deref()), ("wolfi", Some("arm64")));
        let go = by_id("SNYK-GOLANG-NET-1");
        assert_eq!((go.class, go.location.as_deref()), (PackageClass::Language, Some("/app/server")));
        assert_eq!(go.package.package_manager.as_deref(), Some("go"));
        assert_eq!(converted.scanned_classes, vec![PackageClass::Os, PackageClass::Language]);
        // The licence issue, the package-less entry and the failed project
        // are skipped with why; the failed project makes the report partial.
        let reasons: Vec<&str> = converted.skipped.iter().map(|skipped| skipped.reason.as_str()).collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].contains("licence issue") && reasons[1].contains("names no package"), "{reasons:?}");
        assert!(reasons[2].contains("Could not detect supported target files"), "{reasons:?}");
        assert_eq!(converted.skipped[2].entry, "[1] (/src/legacy)");
        assert!(converted.partial);

        // A report that is only a failure says so.
        let failed = br#"{"ok": false, "error": "Missing node_modules folder", "path": "/src/web"}"#;
        match Snyk::convert(failed) {
            Err(ReportError::Invalid(reason)) => assert!(reason.contains("Missing node_modules folder"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(Snyk::detect(failed), Confidence::No);
    }

    #[test]
    fn a_report_of_more_entries_than_the_bound_is_refused() {
        let report = |count: usize| {
            let vulnerabilities: Vec<Value> = (0..count)
                .map(|index| {
                    serde_json::json!({"id": format!("SNYK-JS-X-{index}"), "name": "x", "version": "1.0.0",
                        "packageManager": "npm", "severity": "low"})
                })
                .collect();
            serde_json::to_vec(
                &serde_json::json!({"ok": false, "packageManager": "npm", "displayTargetFile": "package.json",
                "vulnerabilities": vulnerabilities}),
            )
            .expect("JSON")
        };
        assert_eq!(Snyk::convert(&report(report::MAX_ENTRIES)).expect("converts").entries.len(), report::MAX_ENTRIES);
        importing::assert_refused_past_max_entries(Snyk::convert(&report(report::MAX_ENTRIES + 1)), FAN_OUT);
    }

    #[test]
    fn snyk_reports_are_told_from_every_other_format() {
        scanner_reports::assert_detects_its_own_and_no_other::<Snyk>(MANIFEST, "snyk");
    }

    #[test]
    fn hostile_and_malformed_input_is_an_error() {
        scanner_reports::assert_refuses_hostile_and_malformed::<Snyk>();
        assert!(matches!(Snyk::convert(br#"{"took": 1}"#), Err(ReportError::Unsupported(_))));
        assert!(matches!(Snyk::convert(b"[]"), Err(ReportError::Unsupported(_))));
        assert!(matches!(Snyk::convert(br#"{"vulnerabilities": []}"#), Err(ReportError::Unsupported(_))));
    }
}
