//! The Grype report importer: `grype … -o json` output, the current layout
//! (`cvss[]`, `fix`, `epss[]`, `knownExploited[]` on each match's
//! vulnerability) and the old 0.7 one (`cvssV2`/`cvssV3` objects, no fix).
//!
//! What maps where is in `docs/scanner-report-mapping/grype.md`. In short:
//! one entry per `matches[]`; the id is `vulnerability.id` with the ids of
//! `relatedVulnerabilities[]` and `advisories[]` as aliases (a GHSA or
//! ALAS match names its CVE there); CVSS from the vulnerability's own
//! record (preferred) and its related records (NVD); OS packages (`deb`,
//! `rpm`, `apk`) have no location, others are at their first location's
//! path; `ignoredMatches[]` are skipped with the rules that ignored them.

use esr_plugin_sdk::importing::{fixed_versions, importer_info};
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, Epss, ImporterInfo, OperatingSystem, Package, PackageClass,
    ReportEntry, ReportError, ReportImporter, SkippedEntry,
};
use serde::Deserialize;
use serde_json::Value;

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "matches";

pub struct Grype;

esr_plugin_sdk::export_report_importer!(crate::Grype);

/// A Grype report (only what the importer reads).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Report {
    matches: Option<Vec<Match>>,
    ignored_matches: Vec<IgnoredMatch>,
    source: Option<Source>,
    distro: Option<Distro>,
    descriptor: Option<Descriptor>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Descriptor {
    version: Option<String>,
    timestamp: Option<String>,
    db: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Source {
    target: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Distro {
    name: Option<String>,
    version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Match {
    vulnerability: Vulnerability,
    related_vulnerabilities: Option<Vec<Vulnerability>>,
    artifact: Artifact,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct IgnoredMatch {
    vulnerability: Vulnerability,
    artifact: Artifact,
    applied_ignore_rules: Option<Vec<Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Vulnerability {
    id: String,
    namespace: Option<String>,
    severity: Option<String>,
    description: Option<String>,
    cvss: Option<Vec<Cvss>>,
    /// Grype 0.7.
    #[serde(rename = "cvssV2")]
    cvss_v2: Option<LegacyCvss>,
    #[serde(rename = "cvssV3")]
    cvss_v3: Option<LegacyCvss>,
    fix: Option<Fix>,
    advisories: Option<Vec<Advisory>>,
    epss: Option<Vec<EpssEntry>>,
    known_exploited: Option<Vec<Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Cvss {
    source: Option<String>,
    version: Option<String>,
    vector: Option<String>,
    metrics: CvssMetrics,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct CvssMetrics {
    base_score: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct LegacyCvss {
    base_score: Option<f64>,
    vector: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Fix {
    versions: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Advisory {
    id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EpssEntry {
    epss: Option<f64>,
    percentile: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Artifact {
    name: String,
    version: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    locations: Vec<Location>,
    purl: Option<String>,
    /// Strings since Grype 0.8; objects (`{Part, Vendor, Product…}`) in 0.7.
    cpes: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Location {
    path: Option<String>,
}

impl ReportImporter for Grype {
    fn describe() -> ImporterInfo {
        importer_info(
            "grype",
            env!("CARGO_PKG_VERSION"),
            "Grype JSON (`-o json`): the current layout and the old 0.7 one",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        let Some(Value::Object(object)) = report::parse_outline(bytes, 2) else { return Confidence::No };
        if !object.get("matches").is_some_and(Value::is_array) {
            return Confidence::No;
        }
        let named_grype = object
            .get("descriptor")
            .and_then(|descriptor| descriptor.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|name| name.eq_ignore_ascii_case("grype"));
        if named_grype {
            Confidence::Certain
        } else if object.contains_key("source") || object.contains_key("distro") {
            Confidence::Possible
        } else {
            Confidence::No
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        let report: Report =
            report::parse_report(bytes, "a Grype JSON report (an object with matches, source, distro and descriptor)")?;
        convert(report)
    }
}

fn convert(report: Report) -> Result<ConvertedReport, ReportError> {
    let Some(matches) = report.matches else {
        return Err(ReportError::Unsupported("not a Grype JSON report: no matches".into()));
    };
    let descriptor = report.descriptor.unwrap_or_default();
    // A database that carries the KEV catalog (Grype ≥ 0.87) lists every
    // known exploited match, so a match it does not mark is not one.
    let kev_known = descriptor.db.as_ref().and_then(|db| db.pointer("/providers/kev")).is_some();
    let distro = report.distro.unwrap_or_default();
    let distro_name = distro.name.clone().filter(|name| !name.trim().is_empty());
    let architecture = report
        .source
        .as_ref()
        .and_then(|source| source.target.as_ref())
        .and_then(|target| target.get("architecture"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut converted = ConvertedReport {
        scanner: "grype".into(),
        scanner_version: descriptor.version.clone(),
        scanned_at: descriptor.timestamp.clone(),
        operating_system: distro_name.as_ref().map(|name| OperatingSystem {
            name: name.clone(),
            version: distro.version.clone().filter(|version| !version.is_empty()),
            family: Some(report::os_family(name).to_owned()),
            vendor: None,
            architecture,
        }),
        // Grype catalogs every class of package of what it scans.
        scanned_classes: vec![PackageClass::Os, PackageClass::Language, PackageClass::Other],
        ..ConvertedReport::default()
    };
    for (index, matched) in matches.into_iter().enumerate() {
        let at = format!("matches[{index}]");
        if matched.vulnerability.id.trim().is_empty() {
            converted.add_skipped(SkippedEntry { entry: at, reason: "no vulnerability.id".into() }, FAN_OUT)?;
            continue;
        }
        if matched.artifact.name.trim().is_empty() {
            converted.add_skipped(
                SkippedEntry {
                    entry: format!("{at} ({})", matched.vulnerability.id),
                    reason: "no artifact.name: the match names no package".into(),
                },
                FAN_OUT,
            )?;
            continue;
        }
        converted.add_entry(entry(matched, distro_name.as_deref(), kev_known), FAN_OUT)?;
    }
    for (index, ignored) in report.ignored_matches.into_iter().enumerate() {
        let rules = ignored
            .applied_ignore_rules
            .map(|rules| rules.iter().map(Value::to_string).collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        converted.add_skipped(
            SkippedEntry {
                entry: format!("ignoredMatches[{index}] ({} in {})", ignored.vulnerability.id, ignored.artifact.name),
                reason: format!("ignored by Grype's ignore rules: {rules}"),
            },
            FAN_OUT,
        )?;
    }
    Ok(converted)
}

/// Who rated a vulnerability's own CVSS: the first part of its namespace
/// (`github:language:go` → `github`, `nvd:cpe` → `nvd`).
fn namespace_vendor(namespace: Option<&str>) -> Option<String> {
    namespace.and_then(|namespace| namespace.split(':').next()).filter(|vendor| !vendor.is_empty()).map(str::to_owned)
}

fn ratings_of(vulnerability: &Vulnerability, ratings: &mut Vec<CvssRating>) {
    let own = namespace_vendor(vulnerability.namespace.as_deref());
    for cvss in vulnerability.cvss.iter().flatten() {
        let source = cvss.source.clone().or_else(|| own.clone());
        if let Some(mut rating) =
            report::cvss_rating(source.as_deref(), cvss.vector.as_deref(), cvss.metrics.base_score)
        {
            if rating.version.is_empty() {
                rating.version = cvss.version.clone().unwrap_or_default();
            }
            ratings.push(rating);
        }
    }
    for (legacy, version) in [(&vulnerability.cvss_v3, "3.0"), (&vulnerability.cvss_v2, "2.0")] {
        let Some(legacy) = legacy else { continue };
        if let Some(mut rating) = report::cvss_rating(own.as_deref(), legacy.vector.as_deref(), legacy.base_score) {
            if rating.version.is_empty() {
                rating.version = version.into();
            }
            ratings.push(rating);
        }
    }
}

fn entry(matched: Match, distro: Option<&str>, kev_known: bool) -> ReportEntry {
    let Match { vulnerability, related_vulnerabilities, artifact } = matched;
    let related = related_vulnerabilities.unwrap_or_default();
    let id = vulnerability.id.trim().to_owned();
    let mut aliases = Vec::new();
    for other in &related {
        report::push_alias(&mut aliases, &id, &other.id);
    }
    for advisory in vulnerability.advisories.iter().flatten() {
        report::push_alias(&mut aliases, &id, advisory.id.as_deref().unwrap_or_default());
    }
    let mut ratings = Vec::new();
    ratings_of(&vulnerability, &mut ratings);
    for other in &related {
        ratings_of(other, &mut ratings);
    }
    let own_vendor = namespace_vendor(vulnerability.namespace.as_deref());
    let cvss = report::order_cvss(ratings, own_vendor.as_deref());
    let severity_given = vulnerability.severity.clone().filter(|severity| !severity.trim().is_empty());
    let severity = report::entry_severity(severity_given.as_deref(), &cvss);
    let kind = artifact.kind.clone().filter(|kind| !kind.is_empty());
    let class = report::package_class(kind.as_deref().unwrap_or_default());
    // An OS package's manager is the distribution's (amazonlinux → dnf),
    // a language package's its ecosystem's.
    let package_manager = match class {
        PackageClass::Os => {
            distro.and_then(report::package_manager).or_else(|| kind.as_deref().and_then(report::package_manager))
        }
        _ => kind.as_deref().and_then(report::package_manager),
    };
    let location = match class {
        PackageClass::Os => None,
        _ => artifact.locations.iter().find_map(|location| location.path.clone().filter(|path| !path.is_empty())),
    };
    let epss = vulnerability
        .epss
        .iter()
        .flatten()
        .find_map(|entry| entry.epss.map(|score| Epss { score, percentile: entry.percentile }));
    let kev = match &vulnerability.known_exploited {
        Some(listed) => Some(!listed.is_empty()),
        None if kev_known => Some(false),
        None => None,
    };
    // `fix.state` (fixed, not-fixed, wont-fix, unknown or "") adds
    // nothing the versions do not say.
    let fixed_version =
        vulnerability.fix.as_ref().and_then(|fix| fixed_versions(fix.versions.iter().map(String::as_str)));
    let description = vulnerability
        .description
        .clone()
        .into_iter()
        .chain(related.iter().filter_map(|other| other.description.clone()))
        .find(|description| !description.trim().is_empty());
    ReportEntry {
        check: None,
        host: None,
        vulnerability_id: id,
        aliases,
        package: Package {
            name: artifact.name,
            version: artifact.version.filter(|version| !version.is_empty()),
            ecosystem: kind,
            package_manager: package_manager.map(str::to_owned),
            vendor: None,
            purl: artifact.purl.filter(|purl| !purl.is_empty()),
            cpe: artifact.cpes.iter().find_map(|cpe| cpe.as_str().map(str::to_owned)),
        },
        class,
        location,
        severity_given,
        severity,
        cvss,
        epss,
        kev,
        fixed_version,
        state: None,
        title: None,
        description,
    }
}

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::report::Severity;
    use esr_plugin_sdk::scanner_reports;

    use super::*;

    const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

    /// The contract's severity for Grype's wording, as the mapping table
    /// states it; `None` for Unknown or no severity (then the score).
    fn expected_severity(given: Option<&str>) -> Option<Severity> {
        match given? {
            "Critical" => Some(Severity::Critical),
            "High" => Some(Severity::High),
            "Medium" => Some(Severity::Medium),
            "Low" => Some(Severity::Low),
            "Negligible" => Some(Severity::Info),
            "Unknown" | "" => None,
            other => panic!("a severity the test does not know: {other}"),
        }
    }

    fn text<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
        value.pointer(pointer).and_then(Value::as_str)
    }

    #[test]
    fn every_real_report_converts_match_for_match() {
        for (name, bytes) in scanner_reports::real_reports(MANIFEST, "grype") {
            let raw: Value = serde_json::from_slice(&bytes).expect("the real file is JSON");
            let matches = raw["matches"].as_array().expect("matches");
            let converted = Grype::convert(&bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
            assert_eq!(converted.scanner, "grype");
            assert_eq!(converted.scanner_version.as_deref(), text(&raw, "/descriptor/version"), "{name}");
            assert_eq!(converted.scanned_at.as_deref(), text(&raw, "/descriptor/timestamp"), "{name}");
            assert_eq!(
                converted.operating_system.as_ref().map(|os| os.name.as_str()),
                text(&raw, "/distro/name"),
                "{name}"
            );
            // Every real match names a vulnerability and a package.
            assert!(converted.skipped.is_empty(), "{name}: {:?}", converted.skipped);
            assert_eq!(converted.entries.len(), matches.len(), "{name}");
            for (index, (entry, raw)) in converted.entries.iter().zip(matches).enumerate() {
                let at = format!("{name} matches[{index}]");
                assert_eq!(Some(entry.vulnerability_id.as_str()), text(raw, "/vulnerability/id"), "{at}");
                for related in raw["relatedVulnerabilities"].as_array().into_iter().flatten() {
                    let related = related["id"].as_str().expect("a related id");
                    assert!(
                        related == entry.vulnerability_id || entry.aliases.iter().any(|alias| alias == related),
                        "{at}: {related} not among {:?}",
                        entry.aliases
                    );
                }
                assert_eq!(Some(entry.package.name.as_str()), text(raw, "/artifact/name"), "{at}");
                assert_eq!(entry.package.version.as_deref(), text(raw, "/artifact/version"), "{at}");
                assert_eq!(entry.package.purl.as_deref(), text(raw, "/artifact/purl"), "{at}");
                let kind = text(raw, "/artifact/type").unwrap_or_default();
                let os_package = ["deb", "rpm", "apk"].contains(&kind);
                assert_eq!(entry.class == PackageClass::Os, os_package, "{at}: {kind}");
                if os_package {
                    assert_eq!(entry.location, None, "{at}");
                } else {
                    assert_eq!(entry.location.as_deref(), text(raw, "/artifact/locations/0/path"), "{at}");
                }
                let given = text(raw, "/vulnerability/severity");
                assert_eq!(entry.severity_given.as_deref(), given.filter(|given| !given.is_empty()), "{at}");
                let from_score = entry.cvss.first().and_then(|rating| rating.base_score).map(Severity::from_score);
                let expected = expected_severity(given).or(from_score).unwrap_or(Severity::Info);
                assert_eq!(entry.severity, expected, "{at}: given {given:?}");
                let fixes: Vec<&str> = raw
                    .pointer("/vulnerability/fix/versions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let fixed = (!fixes.is_empty()).then(|| fixes.join(", "));
                assert_eq!(entry.fixed_version, fixed, "{at}");
                match raw.pointer("/vulnerability/epss/0/epss").and_then(Value::as_f64) {
                    Some(score) => assert_eq!(entry.epss.as_ref().map(|epss| epss.score), Some(score), "{at}"),
                    None => assert_eq!(entry.epss, None, "{at}"),
                }
                // Every score given with a vector is kept, with the vector.
                let given_scores = raw.pointer("/vulnerability/cvss").and_then(Value::as_array).map_or(0, Vec::len)
                    + raw["relatedVulnerabilities"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|related| related["cvss"].as_array().map_or(0, Vec::len))
                        .sum::<usize>()
                    + ["cvssV2", "cvssV3"]
                        .iter()
                        .filter(|key| raw["vulnerability"].get(**key).is_some_and(Value::is_object))
                        .count();
                assert_eq!(entry.cvss.len(), given_scores, "{at}: {:?}", entry.cvss);
                assert!(
                    entry.cvss.iter().all(|rating| ["2.0", "3.0", "3.1", "4.0"].contains(&rating.version.as_str()))
                );
            }
        }
    }

    #[test]
    fn what_the_real_reports_are_known_to_hold() {
        let convert = |name: &str| {
            let (_, bytes) = scanner_reports::real_reports(MANIFEST, "grype")
                .into_iter()
                .find(|(file, _)| file == name)
                .unwrap_or_else(|| panic!("{name} is missing"));
            Grype::convert(&bytes).expect("converts")
        };
        // ALAS and GHSA ids name their CVE through related records.
        let amazon = convert("heimdall2_amazonlinux-2.json");
        let not_cves: Vec<_> = amazon.entries.iter().filter(|entry| !report::is_cve(&entry.vulnerability_id)).collect();
        assert_eq!(not_cves.len(), 7);
        assert!(not_cves.iter().all(|entry| entry.aliases.iter().any(|alias| report::is_cve(alias))));
        let alas = amazon.entries.iter().find(|entry| entry.vulnerability_id == "ALAS-2024-2607").expect("ALAS");
        assert_eq!(alas.aliases, ["CVE-2024-39689"]);
        assert_eq!(alas.package.package_manager.as_deref(), Some("dnf"));
        // A match without a severity is rated by its score.
        let rhel = convert("defectdojo_issue-9618_rhel-8.7.json");
        assert_eq!(rhel.entries.iter().filter(|entry| entry.severity_given.is_none()).count(), 1);
        let jar = rhel.entries.iter().find(|entry| entry.package.ecosystem.as_deref() == Some("java-archive"));
        assert_eq!(
            jar.map(|entry| (entry.class, entry.package.package_manager.as_deref())),
            Some((PackageClass::Language, Some("maven")))
        );
        // EPSS, and a KEV-carrying database that marks none of them.
        let busybox = convert("defectdojo_busybox-epss.json");
        assert!(busybox.entries.iter().all(|entry| entry.epss.is_some() && entry.kev == Some(false)));
        assert!(busybox.entries.iter().all(|entry| entry.class == PackageClass::Other));
        assert_eq!(busybox.entries[0].epss, Some(Epss { score: 0.0719, percentile: Some(0.91123) }));
        // 0.7: Negligible is info, scores from cvssV2, no fixes.
        let legacy = convert("sample-scan-files_legacy-v0.7_nginx.json");
        assert_eq!(legacy.entries.len(), 143);
        let negligible: Vec<_> =
            legacy.entries.iter().filter(|entry| entry.severity_given.as_deref() == Some("Negligible")).collect();
        assert_eq!(negligible.len(), 83);
        assert!(negligible.iter().all(|entry| entry.severity == Severity::Info));
        assert!(legacy.entries.iter().all(|entry| entry.fixed_version.is_none() && entry.kev.is_none()));
        let first = &legacy.entries[0];
        assert_eq!(
            (first.cvss[0].version.as_str(), first.cvss[0].base_score, first.package.package_manager.as_deref()),
            ("2.0", Some(5.8), Some("apt"))
        );
        assert_eq!(legacy.operating_system.as_ref().and_then(|os| os.family.as_deref()), Some("linux"));
    }

    #[test]
    fn the_own_records_rating_comes_first_then_nvd() {
        let report = br#"{"descriptor":{"name":"grype","version":"0.80.0"},"matches":[{
            "vulnerability":{"id":"GHSA-aaaa-bbbb-cccc","namespace":"github:language:python","severity":"Medium",
              "cvss":[{"version":"3.1","vector":"CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:L/I:N/A:N","metrics":{"baseScore":3.7}}],
              "knownExploited":[{"cve":"CVE-2024-0001"}],"fix":{"versions":["2.0.0"],"state":"fixed"}},
            "relatedVulnerabilities":[{"id":"CVE-2024-0001","namespace":"nvd:cpe",
              "cvss":[{"source":"nvd@nist.gov","version":"3.1","vector":"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H","metrics":{"baseScore":9.8}}]}],
            "artifact":{"name":"requests","version":"1.0.0","type":"python","locations":[{"path":"/app/requirements.txt"}]}}],
          "ignoredMatches":[{"vulnerability":{"id":"CVE-2024-0002"},"artifact":{"name":"zlib"},"appliedIgnoreRules":[{"vulnerability":"CVE-2024-0002"}]}]}"#;
        let converted = Grype::convert(report).expect("converts");
        let [entry] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
        assert_eq!(entry.cvss[0].source.as_deref(), Some("github"));
        assert_eq!(entry.cvss[1].source.as_deref(), Some("nvd@nist.gov"));
        assert_eq!((entry.severity, entry.kev), (Severity::Medium, Some(true)));
        assert_eq!(entry.location.as_deref(), Some("/app/requirements.txt"));
        assert_eq!(entry.package.package_manager.as_deref(), Some("pip"));
        assert_eq!(converted.skipped.len(), 1);
        assert!(converted.skipped[0].reason.contains("ignore rules"), "{:?}", converted.skipped);
    }

    #[test]
    fn grype_reports_are_told_from_every_other_format() {
        scanner_reports::assert_detects_its_own_and_no_other::<Grype>(MANIFEST, "grype");
    }

    #[test]
    fn hostile_and_malformed_input_is_an_error() {
        scanner_reports::assert_refuses_hostile_and_malformed::<Grype>();
        assert!(matches!(Grype::convert(br#"{"runs":[]}"#), Err(ReportError::Unsupported(_))));
        assert!(matches!(Grype::convert(br#"{"matches":{}}"#), Err(ReportError::Unsupported(_))));
    }
}
