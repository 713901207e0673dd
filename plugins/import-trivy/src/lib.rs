//! The Trivy report importer: `trivy … --format json` output, both the
//! current layout (`SchemaVersion` 2: an object with `Results`) and the
//! older top-level array of `{Target, Vulnerabilities}`.
//!
//! What maps where is in `docs/scanner-reports.md`. In short: one entry per
//! `Results[].Vulnerabilities[]`; OS packages (`Class` `os-pkgs`) have no
//! location, language packages (`lang-pkgs`) are located at their
//! `PkgPath`, else at the result's `Target` (the lockfile or binary);
//! CVSS ratings come from `CVSS{vendor}` with `SeveritySource` preferred;
//! misconfigurations, secrets and licenses are skipped with a reason.

use std::collections::BTreeMap;

use esr_plugin_sdk::importing::importer_info;
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, EntryState, ImporterInfo, OperatingSystem, Package, PackageClass,
    ReportEntry, ReportError, ReportHost, ReportImporter, SkippedEntry, SuppressionReason,
};
use serde::Deserialize;

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "vulnerabilities of every result";

pub struct Trivy;

esr_plugin_sdk::export_report_importer!(crate::Trivy);

/// The current layout (only what the importer reads).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Report {
    schema_version: Option<u32>,
    created_at: Option<String>,
    artifact_name: Option<String>,
    artifact_type: Option<String>,
    metadata: Metadata,
    trivy: Option<Tool>,
    results: Option<Vec<ScanResult>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Tool {
    version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Metadata {
    #[serde(rename = "OS")]
    os: Option<Os>,
    image_config: Option<ImageConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Os {
    family: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ImageConfig {
    architecture: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ScanResult {
    target: String,
    class: Option<String>,
    #[serde(rename = "Type")]
    kind: Option<String>,
    vulnerabilities: Option<Vec<Vulnerability>>,
    misconfigurations: Option<Vec<serde::de::IgnoredAny>>,
    secrets: Option<Vec<serde::de::IgnoredAny>>,
    licenses: Option<Vec<serde::de::IgnoredAny>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Vulnerability {
    #[serde(rename = "VulnerabilityID")]
    vulnerability_id: String,
    #[serde(rename = "VendorIDs")]
    vendor_ids: Option<Vec<String>>,
    pkg_name: String,
    pkg_path: Option<String>,
    pkg_identifier: Option<PkgIdentifier>,
    installed_version: Option<String>,
    fixed_version: Option<String>,
    status: Option<String>,
    severity_source: Option<String>,
    title: Option<String>,
    description: Option<String>,
    severity: Option<String>,
    #[serde(rename = "CVSS")]
    cvss: Option<BTreeMap<String, VendorCvss>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PkgIdentifier {
    #[serde(rename = "PURL")]
    purl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct VendorCvss {
    v2_vector: Option<String>,
    v2_score: Option<f64>,
    v3_vector: Option<String>,
    v3_score: Option<f64>,
    v40_vector: Option<String>,
    v40_score: Option<f64>,
}

/// Artifact types whose scan is of one machine, which the report names.
const HOST_ARTIFACTS: &[&str] = &["filesystem", "rootfs", "vm"];

impl ReportImporter for Trivy {
    fn describe() -> ImporterInfo {
        importer_info(
            "trivy",
            env!("CARGO_PKG_VERSION"),
            "Trivy JSON (`--format json`): SchemaVersion 2 and the older top-level array",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        let Some(value) = report::parse_outline(bytes, 2) else { return Confidence::No };
        match &value {
            serde_json::Value::Object(object)
                if object.contains_key("SchemaVersion")
                    && (object.contains_key("Results") || object.contains_key("ArtifactName")) =>
            {
                Confidence::Certain
            }
            serde_json::Value::Array(results)
                if !results.is_empty()
                    && results.iter().all(|result| result.get("Target").is_some_and(serde_json::Value::is_string))
                    && results.iter().any(|result| result.get("Vulnerabilities").is_some()) =>
            {
                Confidence::Certain
            }
            _ => Confidence::No,
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        // The first byte tells the layouts apart, so the report is parsed
        // once, straight into the fields read.
        const TRIVY: &str =
            "a Trivy JSON report (an object with SchemaVersion and Results, or an array of {Target, Vulnerabilities})";
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            convert_legacy(report::parse_report(bytes, TRIVY)?)
        } else {
            convert_current(report::parse_report(bytes, TRIVY)?)
        }
    }
}

fn convert_current(report: Report) -> Result<ConvertedReport, ReportError> {
    match report.schema_version {
        Some(2) => {}
        Some(other) => {
            return Err(ReportError::Unsupported(format!("Trivy SchemaVersion {other} is not supported (2 is)")));
        }
        None => return Err(ReportError::Unsupported("not a Trivy JSON report: no SchemaVersion".into())),
    }
    let architecture = report.metadata.image_config.as_ref().and_then(|config| config.architecture.clone());
    let operating_system = report.metadata.os.as_ref().map(|os| operating_system(os, architecture));
    let artifact = report.artifact_name.as_deref().map(str::trim).unwrap_or_default();
    let names_a_host =
        report.artifact_type.as_deref().is_some_and(|kind| HOST_ARTIFACTS.contains(&kind)) && is_host_name(artifact);
    let mut converted = ConvertedReport {
        scanner: "trivy".into(),
        scanner_version: report.trivy.and_then(|tool| tool.version),
        scanned_at: report.created_at,
        ..ConvertedReport::default()
    };
    if names_a_host {
        converted.hosts.push(ReportHost {
            key: artifact.to_owned(),
            hostname: artifact.to_owned(),
            operating_system: operating_system.clone(),
            ..ReportHost::default()
        });
    } else {
        converted.operating_system = operating_system.clone();
    }
    let os_family = report.metadata.os.as_ref().and_then(|os| os.family.clone());
    for (index, result) in report.results.unwrap_or_default().into_iter().enumerate() {
        add_result(&mut converted, &format!("Results[{index}]"), result, os_family.as_deref())?;
    }
    converted.scanned_classes.sort();
    converted.scanned_classes.dedup();
    Ok(converted)
}

/// The older layout: no SchemaVersion, no report time, OS packages only,
/// the OS in the target's parentheses (`python:3 (debian 10.2)`).
fn convert_legacy(results: Vec<ScanResult>) -> Result<ConvertedReport, ReportError> {
    let mut converted = ConvertedReport { scanner: "trivy".into(), ..ConvertedReport::default() };
    for (index, result) in results.into_iter().enumerate() {
        let os = legacy_target_os(&result.target);
        if converted.operating_system.is_none() {
            converted.operating_system = os.as_ref().map(|os| operating_system(os, None));
        }
        let family = os.and_then(|os| os.family);
        add_result(&mut converted, &format!("[{index}]"), result, family.as_deref())?;
    }
    converted.scanned_classes.sort();
    converted.scanned_classes.dedup();
    Ok(converted)
}

/// `name (family version)` → the family and version.
fn legacy_target_os(target: &str) -> Option<Os> {
    let inner = target.rsplit_once('(')?.1.strip_suffix(')')?;
    let (family, name) = inner.split_once(' ').unwrap_or((inner, ""));
    Some(Os { family: Some(family.to_owned()), name: (!name.is_empty()).then(|| name.to_owned()) })
}

fn operating_system(os: &Os, architecture: Option<String>) -> OperatingSystem {
    let family = os.family.clone().unwrap_or_default();
    OperatingSystem {
        name: family.clone(),
        version: os.name.clone(),
        family: Some(report::os_family(&family).to_owned()),
        vendor: None,
        architecture,
    }
}

fn add_result(
    converted: &mut ConvertedReport,
    at: &str,
    result: ScanResult,
    os_family: Option<&str>,
) -> Result<(), ReportError> {
    // The older layout has no Class: it scanned OS packages only.
    let class = match result.class.as_deref() {
        None | Some("os-pkgs") => Some(PackageClass::Os),
        Some("lang-pkgs") => Some(PackageClass::Language),
        Some(_) => None,
    };
    for (what, count) in [
        ("Misconfigurations", result.misconfigurations.as_ref().map_or(0, Vec::len)),
        ("Secrets", result.secrets.as_ref().map_or(0, Vec::len)),
        ("Licenses", result.licenses.as_ref().map_or(0, Vec::len)),
    ] {
        for index in 0..count {
            converted.add_skipped(
                SkippedEntry {
                    entry: format!("{at}.{what}[{index}] (Target {})", result.target),
                    reason: format!("{} findings are not package vulnerabilities", what.to_ascii_lowercase()),
                },
                FAN_OUT,
            )?;
        }
    }
    let vulnerabilities = result.vulnerabilities.unwrap_or_default();
    let Some(class) = class else {
        for (index, vulnerability) in vulnerabilities.iter().enumerate() {
            converted.add_skipped(
                SkippedEntry {
                    entry: format!("{at}.Vulnerabilities[{index}] ({})", vulnerability.vulnerability_id),
                    reason: format!(
                        "result class {:?} is neither os-pkgs nor lang-pkgs",
                        result.class.as_deref().unwrap_or_default()
                    ),
                },
                FAN_OUT,
            )?;
        }
        return Ok(());
    };
    converted.scanned_classes.push(class);
    let ecosystem = match class {
        PackageClass::Os => os_family.map(str::to_owned).or(result.kind.clone()),
        _ => result.kind.clone(),
    };
    let manager = ecosystem.as_deref().and_then(report::package_manager).map(str::to_owned);
    for (index, vulnerability) in vulnerabilities.into_iter().enumerate() {
        let entry_at = format!("{at}.Vulnerabilities[{index}]");
        if vulnerability.vulnerability_id.trim().is_empty() {
            converted.add_skipped(SkippedEntry { entry: entry_at, reason: "no VulnerabilityID".into() }, FAN_OUT)?;
            continue;
        }
        if vulnerability.pkg_name.trim().is_empty() {
            converted.add_skipped(
                SkippedEntry {
                    entry: format!("{entry_at} ({})", vulnerability.vulnerability_id),
                    reason: "no PkgName: the vulnerability names no package".into(),
                },
                FAN_OUT,
            )?;
            continue;
        }
        let location = match class {
            PackageClass::Os => None,
            _ => vulnerability.pkg_path.clone().filter(|path| !path.is_empty()).or_else(|| Some(result.target.clone())),
        };
        converted.add_entry(entry(vulnerability, class, location, ecosystem.clone(), manager.clone()), FAN_OUT)?;
    }
    Ok(())
}

fn entry(
    vulnerability: Vulnerability,
    class: PackageClass,
    location: Option<String>,
    ecosystem: Option<String>,
    package_manager: Option<String>,
) -> ReportEntry {
    let mut ratings: Vec<CvssRating> = Vec::new();
    for (vendor, cvss) in vulnerability.cvss.iter().flatten() {
        for (vector, score) in
            [(&cvss.v40_vector, cvss.v40_score), (&cvss.v3_vector, cvss.v3_score), (&cvss.v2_vector, cvss.v2_score)]
        {
            if let Some(rating) = report::cvss_rating(Some(vendor), vector.as_deref(), score) {
                ratings.push(rating);
            }
        }
    }
    let cvss = report::order_cvss(ratings, vulnerability.severity_source.as_deref());
    let severity = report::entry_severity(vulnerability.severity.as_deref(), &cvss);
    let id = vulnerability.vulnerability_id.trim().to_owned();
    let mut aliases = Vec::new();
    for vendor_id in vulnerability.vendor_ids.iter().flatten() {
        report::push_alias(&mut aliases, &id, vendor_id);
    }
    // Trivy's `not_affected` is a vendor's or VEX statement that the
    // package is not affected; every other status leaves the finding open.
    let state = match vulnerability.status.as_deref() {
        Some("not_affected") => Some(EntryState::Suppressed {
            reason: SuppressionReason::FalsePositive,
            note: Some("Trivy status not_affected".into()),
        }),
        _ => None,
    };
    ReportEntry {
        check: None,
        host: None,
        vulnerability_id: id,
        aliases,
        package: Package {
            name: vulnerability.pkg_name,
            version: vulnerability.installed_version.filter(|version| !version.is_empty()),
            ecosystem,
            package_manager,
            vendor: None,
            purl: vulnerability.pkg_identifier.and_then(|identifier| identifier.purl),
            cpe: None,
        },
        class,
        location,
        severity_given: vulnerability.severity,
        severity,
        cvss,
        epss: None,
        kev: None,
        fixed_version: vulnerability
            .fixed_version
            .map(|fixed| fixed.trim().to_owned())
            .filter(|fixed| !fixed.is_empty()),
        state,
        title: vulnerability.title.filter(|title| !title.trim().is_empty()),
        description: vulnerability.description.filter(|description| !description.trim().is_empty()),
    }
}

/// Whether an artifact name can be a host name (RFC 1123 labels): a
/// filesystem scan of `/` or `./app` names no host.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_are_detected_and_others_are_not() {
        assert_eq!(Trivy::detect(br#"{"SchemaVersion":2,"Results":[]}"#), Confidence::Certain);
        assert_eq!(Trivy::detect(br#"[{"Target":"x (debian 10)","Vulnerabilities":[]}]"#), Confidence::Certain);
        assert_eq!(Trivy::detect(br#"{"matches":[],"descriptor":{"name":"grype"}}"#), Confidence::No);
        assert_eq!(Trivy::detect(b"not json"), Confidence::No);
    }

    #[test]
    fn a_language_package_is_located_and_an_os_package_is_not() {
        let report = br#"{"SchemaVersion":2,"CreatedAt":"2024-01-01T00:00:00Z","ArtifactType":"filesystem",
          "ArtifactName":"web-1","Metadata":{"OS":{"Family":"ubuntu","Name":"22.04"}},
          "Results":[
            {"Target":"web-1 (ubuntu 22.04)","Class":"os-pkgs","Type":"ubuntu","Vulnerabilities":[
              {"VulnerabilityID":"CVE-2024-0001","PkgName":"openssl","InstalledVersion":"3.0.2","FixedVersion":"3.0.3",
               "Severity":"UNKNOWN","SeveritySource":"ubuntu",
               "CVSS":{"nvd":{"V3Vector":"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}}}]},
            {"Target":"app/Pipfile.lock","Class":"lang-pkgs","Type":"pipenv","Vulnerabilities":[
              {"VulnerabilityID":"GHSA-aaaa-bbbb-cccc","PkgName":"requests","InstalledVersion":"2.19.1","Severity":"MODERATE"}],
             "Misconfigurations":[{}]}]}"#;
        let converted = Trivy::convert(report).expect("converts");
        assert_eq!(converted.hosts.len(), 1);
        assert_eq!(converted.hosts[0].hostname, "web-1");
        assert_eq!(converted.scanned_classes, vec![PackageClass::Os, PackageClass::Language]);
        let [os, lang] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
        assert_eq!((os.location.as_deref(), os.package.package_manager.as_deref()), (None, Some("apt")));
        assert_eq!(os.severity, report::Severity::Critical, "UNKNOWN falls back on the NVD score");
        assert_eq!(os.cvss[0].base_score, Some(9.8));
        assert_eq!(lang.location.as_deref(), Some("app/Pipfile.lock"));
        assert_eq!((lang.severity, lang.package.package_manager.as_deref()), (report::Severity::Medium, Some("pip")));
        assert_eq!(converted.skipped.len(), 1);
    }

    #[test]
    fn an_unknown_schema_version_is_refused_and_malformed_json_says_where() {
        assert!(matches!(Trivy::convert(br#"{"SchemaVersion":3,"Results":[]}"#), Err(ReportError::Unsupported(_))));
        assert!(matches!(
            Trivy::convert(b"{\"SchemaVersion\": 2,\n \"Results\": [}"),
            Err(ReportError::Malformed { line: 2, .. })
        ));
    }
}
