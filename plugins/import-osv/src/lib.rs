//! The OSV-Scanner importer: `osv-scanner --format json` output.
//!
//! What maps where is in `docs/scanner-report-mapping/osv.md`. In short:
//! one entry per package and **group** (`groups[].ids` joins the records
//! of one flaw, such as a GHSA and its RUSTSEC twin; a vulnerability in no
//! group is its own), the first id of the group as the id and every other
//! id and alias as aliases; OSV gives CVSS as a vector only, so the score
//! is computed; language packages are located at their lockfile
//! (`source.path`). OSV-Scanner writes no report time: the import time is
//! used.

use esr_plugin_sdk::importing::importer_info;
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, ImporterInfo, Package, PackageClass, ReportEntry, ReportError, ReportImporter,
    Severity, SkippedEntry,
};

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::Value;

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "vulnerabilities × packages";

pub struct Osv;

esr_plugin_sdk::export_report_importer!(crate::Osv);

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Report {
    results: Option<Vec<SourceResult>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SourceResult {
    source: Source,
    packages: Vec<PackageResult>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Source {
    path: String,
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PackageResult {
    package: OsvPackage,
    vulnerabilities: Vec<Vulnerability>,
    groups: Vec<Group>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OsvPackage {
    name: String,
    version: Option<String>,
    ecosystem: Option<String>,
    commit: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Group {
    ids: Vec<String>,
    aliases: Vec<String>,
    /// The highest CVSS score of the group, as text.
    max_severity: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Vulnerability {
    id: String,
    aliases: Option<Vec<String>>,
    summary: Option<String>,
    details: Option<String>,
    severity: Option<Vec<SeverityScore>>,
    affected: Option<Vec<Affected>>,
    database_specific: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SeverityScore {
    #[serde(rename = "type")]
    kind: Option<String>,
    score: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Affected {
    package: Option<AffectedPackage>,
    ranges: Option<Vec<Range>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AffectedPackage {
    name: Option<String>,
    purl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Range {
    #[serde(rename = "type")]
    kind: Option<String>,
    events: Vec<Value>,
}

impl ReportImporter for Osv {
    fn describe() -> ImporterInfo {
        importer_info("osv", env!("CARGO_PKG_VERSION"), "OSV-Scanner JSON (`--format json`)")
    }

    fn detect(bytes: &[u8]) -> Confidence {
        let Some(Value::Object(object)) = report::parse_outline(bytes, 3) else { return Confidence::No };
        let Some(results) = object.get("results").and_then(Value::as_array) else { return Confidence::No };
        let shaped = |result: &Value| {
            result.get("source").is_some_and(Value::is_object) && result.get("packages").is_some_and(Value::is_array)
        };
        if results.is_empty() {
            Confidence::Possible
        } else if results.iter().all(shaped) {
            Confidence::Certain
        } else {
            Confidence::No
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        let report: Report = report::parse_report(
            bytes,
            "an OSV-Scanner JSON report (an object with results[].source and results[].packages)",
        )?;
        let Some(results) = report.results else {
            return Err(ReportError::Unsupported("not an OSV-Scanner JSON report: no results".into()));
        };
        let mut converted = ConvertedReport { scanner: "osv-scanner".into(), ..ConvertedReport::default() };
        for (index, result) in results.iter().enumerate() {
            // A lockfile or SBOM is a scan of language packages; a scanned
            // directory or image may hold any.
            match result.source.kind.as_deref() {
                Some("lockfile") => converted.scanned_classes.push(PackageClass::Language),
                Some("git") => converted.scanned_classes.push(PackageClass::Other),
                _ => {}
            }
            for (package_index, package) in result.packages.iter().enumerate() {
                add_package(
                    &mut converted,
                    &format!("results[{index}].packages[{package_index}]"),
                    &result.source,
                    package,
                )?;
            }
        }
        converted.scanned_classes.sort();
        converted.scanned_classes.dedup();
        Ok(converted)
    }
}

fn add_package(
    converted: &mut ConvertedReport,
    at: &str,
    source: &Source,
    result: &PackageResult,
) -> Result<(), ReportError> {
    let package = package(source, &result.package);
    let Some((package, class, location)) = package else {
        for vulnerability in &result.vulnerabilities {
            converted.add_skipped(
                SkippedEntry {
                    entry: format!("{at} ({})", vulnerability.id),
                    reason: "the package has no name, and its source names no repository".into(),
                },
                FAN_OUT,
            )?;
        }
        return Ok(());
    };
    converted.scanned_classes.push(class);
    // Each group is one flaw; a vulnerability no group holds is its own.
    let mut groups: Vec<(Vec<&str>, Vec<&str>, Option<&str>)> = result
        .groups
        .iter()
        .map(|group| {
            (
                group.ids.iter().map(String::as_str).collect(),
                group.aliases.iter().map(String::as_str).collect(),
                group.max_severity.as_deref(),
            )
        })
        .collect();
    // By id, once: groups and vulnerabilities are matched without walking
    // one list per item of the other.
    let grouped: HashSet<&str> = groups.iter().flat_map(|(ids, _, _)| ids.iter().copied()).collect();
    for vulnerability in &result.vulnerabilities {
        if !grouped.contains(vulnerability.id.as_str()) {
            groups.push((vec![vulnerability.id.as_str()], Vec::new(), None));
        }
    }
    let mut by_id: HashMap<&str, &Vulnerability> = HashMap::new();
    for vulnerability in &result.vulnerabilities {
        by_id.entry(vulnerability.id.as_str()).or_insert(vulnerability);
    }
    for (group_index, (ids, group_aliases, max_severity)) in groups.into_iter().enumerate() {
        let members: Vec<&Vulnerability> = ids.iter().filter_map(|id| by_id.get(id).copied()).collect();
        let Some(id) = ids.iter().map(|id| id.trim()).find(|id| !id.is_empty()) else {
            converted.add_skipped(
                SkippedEntry { entry: format!("{at}.groups[{group_index}]"), reason: "a group without ids".into() },
                FAN_OUT,
            )?;
            continue;
        };
        if members.is_empty() {
            converted.add_skipped(
                SkippedEntry {
                    entry: format!("{at}.groups[{group_index}] ({id})"),
                    reason: "the group names vulnerabilities the package does not list".into(),
                },
                FAN_OUT,
            )?;
            continue;
        }
        converted.add_entry(
            entry(id, &ids, &group_aliases, max_severity, &members, &package, class, location.clone()),
            FAN_OUT,
        )?;
    }
    Ok(())
}

/// The package, its class and location; a package without a name scanned
/// from a git repository is the repository at its commit.
fn package(source: &Source, package: &OsvPackage) -> Option<(Package, PackageClass, Option<String>)> {
    let ecosystem = package.ecosystem.clone().filter(|ecosystem| !ecosystem.trim().is_empty());
    if package.name.trim().is_empty() {
        let repository = source.path.trim_end_matches('/');
        let name = repository.rsplit('/').next().filter(|name| !name.is_empty())?;
        let package = Package {
            name: name.to_owned(),
            version: package.commit.clone().filter(|commit| !commit.is_empty()),
            ecosystem: Some("git".into()),
            ..Package::default()
        };
        return Some((package, PackageClass::Other, Some(source.path.clone())));
    }
    let class = ecosystem.as_deref().map_or(PackageClass::Other, report::package_class);
    let package_manager = ecosystem.as_deref().and_then(report::package_manager).map(str::to_owned);
    let location = (class != PackageClass::Os && !source.path.is_empty()).then(|| source.path.clone());
    let package = Package {
        name: package.name.clone(),
        version: package.version.clone().filter(|version| !version.is_empty()),
        ecosystem,
        package_manager,
        ..Package::default()
    };
    Some((package, class, location))
}

#[allow(clippy::too_many_arguments)]
fn entry(
    id: &str,
    ids: &[&str],
    group_aliases: &[&str],
    max_severity: Option<&str>,
    members: &[&Vulnerability],
    package: &Package,
    class: PackageClass,
    location: Option<String>,
) -> ReportEntry {
    let mut aliases = Vec::new();
    for alias in ids.iter().chain(group_aliases) {
        report::push_alias(&mut aliases, id, alias);
    }
    for member in members {
        for alias in member.aliases.iter().flatten() {
            report::push_alias(&mut aliases, id, alias);
        }
    }
    let mut ratings = Vec::new();
    for member in members {
        // The database that rated it: the id's prefix (GHSA, RUSTSEC, PYSEC).
        let source = member.id.split('-').next().map(str::to_ascii_lowercase);
        for score in member.severity.iter().flatten() {
            if !score.kind.as_deref().is_some_and(|kind| kind.starts_with("CVSS_")) {
                continue;
            }
            if let Some(rating) = report::cvss_rating(source.as_deref(), score.score.as_deref(), None) {
                ratings.push(rating);
            }
        }
    }
    let cvss = report::order_cvss(ratings, None);
    // GHSA records word it (`MODERATE`); else the computed score; else the
    // group's highest score.
    let severity_given = members.iter().find_map(|member| {
        member
            .database_specific
            .as_ref()
            .and_then(|specific| specific.get("severity"))
            .and_then(Value::as_str)
            .filter(|severity| !severity.trim().is_empty())
            .map(str::to_owned)
    });
    let severity = match severity_given.as_deref().and_then(report::map_severity) {
        Some(severity) => severity,
        None => cvss
            .iter()
            .find_map(|rating| rating.base_score)
            .or_else(|| max_severity.and_then(|score| score.trim().parse::<f64>().ok()))
            .map_or(Severity::Info, Severity::from_score),
    };
    let mut fixed: Vec<&str> = Vec::new();
    let mut purl = None;
    for member in members {
        for affected in member.affected.iter().flatten() {
            let names_it = affected
                .package
                .as_ref()
                .is_none_or(|affected| affected.name.as_deref().is_none_or(|name| name == package.name));
            if !names_it {
                continue;
            }
            if purl.is_none() {
                purl = affected.package.as_ref().and_then(|affected| affected.purl.clone());
            }
            // Commits fix a git repository; versions fix a package.
            let by_commit = package.ecosystem.as_deref() == Some("git");
            for range in affected.ranges.iter().flatten() {
                if (range.kind.as_deref() == Some("GIT")) != by_commit {
                    continue;
                }
                for event in &range.events {
                    if let Some(version) = event.get("fixed").and_then(Value::as_str).filter(|v| !v.is_empty())
                        && !fixed.contains(&version)
                    {
                        fixed.push(version);
                    }
                }
            }
        }
    }
    let mut package = package.clone();
    package.purl = purl.filter(|purl| !purl.contains('@')).map(|purl| match &package.version {
        Some(version) => format!("{purl}@{version}"),
        None => purl,
    });
    ReportEntry {
        check: None,
        host: None,
        vulnerability_id: id.to_owned(),
        aliases,
        package,
        class,
        location,
        severity_given,
        severity,
        cvss,
        epss: None,
        kev: None,
        fixed_version: (!fixed.is_empty()).then(|| fixed.join(", ")),
        state: None,
        title: members.iter().find_map(|member| member.summary.clone().filter(|summary| !summary.trim().is_empty())),
        description: members
            .iter()
            .find_map(|member| member.details.clone().filter(|details| !details.trim().is_empty())),
    }
}

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::scanner_reports;

    use super::*;

    const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

    fn convert_file(name: &str) -> ConvertedReport {
        scanner_reports::convert_real_report::<Osv>(MANIFEST, "osv-scanner", name)
    }

    fn strings(value: &Value) -> Vec<&str> {
        value.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
    }

    #[test]
    fn every_real_report_converts_group_by_group() {
        for (name, bytes) in scanner_reports::real_reports(MANIFEST, "osv-scanner") {
            let raw: Value = serde_json::from_slice(&bytes).expect("the real file is JSON");
            let converted = Osv::convert(&bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
            assert_eq!((converted.scanner.as_str(), converted.scanned_at.as_deref()), ("osv-scanner", None));
            assert!(converted.skipped.is_empty(), "{name}: {:?}", converted.skipped);
            let mut entries = converted.entries.iter();
            for result in raw["results"].as_array().expect("results") {
                let lockfile = result["source"]["path"].as_str().expect("a source path");
                for package in result["packages"].as_array().expect("packages") {
                    let vulnerabilities = package["vulnerabilities"].as_array().expect("vulnerabilities");
                    // Every real package groups all of its vulnerabilities.
                    let grouped: Vec<&str> = package["groups"]
                        .as_array()
                        .expect("groups")
                        .iter()
                        .flat_map(|group| strings(&group["ids"]))
                        .collect();
                    assert!(
                        vulnerabilities.iter().all(|v| grouped.contains(&v["id"].as_str().unwrap_or(""))),
                        "{name}"
                    );
                    for group in package["groups"].as_array().expect("groups") {
                        let ids = strings(&group["ids"]);
                        let at = format!("{name} {lockfile} {ids:?}");
                        let entry = entries.next().unwrap_or_else(|| panic!("{at}: no entry"));
                        assert_eq!(entry.vulnerability_id, ids[0], "{at}");
                        let members: Vec<&Value> =
                            vulnerabilities.iter().filter(|v| ids.contains(&v["id"].as_str().unwrap_or(""))).collect();
                        let all_ids = ids
                            .iter()
                            .copied()
                            .chain(strings(&group["aliases"]))
                            .chain(members.iter().flat_map(|member| strings(&member["aliases"])));
                        for id in all_ids {
                            assert!(
                                id == entry.vulnerability_id || entry.aliases.iter().any(|alias| alias == id),
                                "{at}: {id} not among {:?}",
                                entry.aliases
                            );
                        }
                        let package_name = package["package"]["name"].as_str().unwrap_or_default();
                        if package_name.is_empty() {
                            assert_eq!(entry.package.version.as_deref(), package["package"]["commit"].as_str(), "{at}");
                            assert_eq!(entry.class, PackageClass::Other, "{at}");
                        } else {
                            assert_eq!(entry.package.name, package_name, "{at}");
                            assert_eq!(
                                entry.package.version.as_deref(),
                                package["package"]["version"].as_str(),
                                "{at}"
                            );
                            assert_eq!(
                                entry.package.ecosystem.as_deref(),
                                package["package"]["ecosystem"].as_str(),
                                "{at}"
                            );
                            assert_eq!(entry.class, PackageClass::Language, "{at}");
                            assert_eq!(entry.location.as_deref(), Some(lockfile), "{at}");
                        }
                        let word = members
                            .iter()
                            .find_map(|member| member.pointer("/database_specific/severity").and_then(Value::as_str));
                        let vectors = members
                            .iter()
                            .flat_map(|member| member["severity"].as_array().into_iter().flatten())
                            .count();
                        // Every vector's score is computed.
                        assert_eq!(entry.cvss.len(), vectors, "{at}");
                        assert!(
                            entry.cvss.iter().all(|rating| rating.base_score.is_some() && rating.vector.is_some()),
                            "{at}"
                        );
                        let expected = match word {
                            Some("CRITICAL") => Severity::Critical,
                            Some("HIGH") => Severity::High,
                            Some("MODERATE") => Severity::Medium,
                            Some("LOW") => Severity::Low,
                            Some(other) => panic!("{at}: a severity the test does not know: {other}"),
                            None => entry
                                .cvss
                                .first()
                                .and_then(|rating| rating.base_score)
                                .map_or(Severity::Info, Severity::from_score),
                        };
                        assert_eq!(entry.severity, expected, "{at}");
                    }
                }
            }
            assert!(entries.next().is_none(), "{name}: more out than in");
        }
    }

    #[test]
    fn what_the_real_reports_are_known_to_hold() {
        let cargo = convert_file("osv-scanner-repo_cargo-multiple-packages.json");
        assert_eq!(cargo.scanned_classes, [PackageClass::Language]);
        let [crossbeam, memoffset, smallvec] = cargo.entries.as_slice() else { panic!("{:?}", cargo.entries) };
        // A GHSA and its RUSTSEC twin are one entry, naming the CVE.
        assert_eq!(crossbeam.vulnerability_id, "GHSA-qc84-gqf4-9926");
        assert!(
            crossbeam.aliases.contains(&"RUSTSEC-2022-0041".to_owned())
                && crossbeam.aliases.contains(&"CVE-2022-23639".to_owned())
        );
        assert_eq!((crossbeam.cvss[0].version.as_str(), crossbeam.cvss[0].base_score), ("3.1", Some(8.1)));
        assert_eq!((crossbeam.severity, crossbeam.fixed_version.as_deref()), (Severity::High, Some("0.8.7")));
        assert_eq!(crossbeam.package.package_manager.as_deref(), Some("cargo"));
        assert_eq!(crossbeam.package.purl.as_deref(), Some("pkg:cargo/crossbeam-utils@0.6.6"));
        assert_eq!(crossbeam.location.as_deref(), Some("/path/to/Cargo.lock"));
        assert_eq!((memoffset.severity_given.as_deref(), memoffset.severity), (Some("MODERATE"), Severity::Medium));
        assert!(memoffset.cvss.is_empty());
        assert_eq!(smallvec.cvss.len(), 2, "the vectors of both records are kept");
        assert_eq!((smallvec.cvss[0].base_score, smallvec.severity), (Some(9.8), Severity::Critical));

        let many = convert_file("defectdojo_many-findings.json");
        assert_eq!(many.entries.len(), 37);
        let guzzle = &many.entries[0];
        assert_eq!(
            (guzzle.package.name.as_str(), guzzle.package.package_manager.as_deref()),
            ("guzzlehttp/guzzle", Some("composer"))
        );
        assert_eq!(guzzle.fixed_version.as_deref(), Some("6.5.8, 7.4.5"));
        let repository =
            many.entries.iter().find(|entry| entry.vulnerability_id == "CVE-2023-50094").expect("the git result");
        assert_eq!(
            (repository.package.name.as_str(), repository.location.as_deref()),
            ("tmprengine", Some("/tmprengine/"))
        );
        assert!(many.entries.iter().any(|entry| entry.package.package_manager.as_deref() == Some("pip")));
    }

    #[test]
    fn osv_reports_are_told_from_every_other_format() {
        scanner_reports::assert_detects_its_own_and_no_other::<Osv>(MANIFEST, "osv-scanner");
    }

    #[test]
    fn hostile_and_malformed_input_is_an_error() {
        scanner_reports::assert_refuses_hostile_and_malformed::<Osv>();
        assert!(matches!(Osv::convert(br#"{"results":{}}"#), Err(ReportError::Unsupported(_))));
    }
}
