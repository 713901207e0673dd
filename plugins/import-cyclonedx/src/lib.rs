//! The CycloneDX importer: CycloneDX 1.4 to 1.7 JSON documents with
//! `vulnerabilities[]` — a VDR (what a scanner such as Grype or Trivy
//! found) or a VEX (a vendor's statement per vulnerability, whose
//! `analysis.state` becomes the finding's status or suppression).
//!
//! What maps where is in `docs/scanner-report-mapping/cyclonedx.md`. In
//! short: one entry per vulnerability and `affects[]` reference, the
//! package being the component with that `bom-ref` (among `components[]`,
//! nested ones and `metadata.component`); CVSS from `ratings[]` with
//! methods `CVSSv2`…`CVSSv4` (the vulnerability's `source` preferred),
//! EPSS from the FIRST rating and KEV from the "CISA KEV Catalog" one.

use std::collections::HashMap;

use esr_plugin_sdk::importing::{fixed_versions, importer_info};
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, Epss, ImporterInfo, OperatingSystem, Package, PackageClass,
    ReportEntry, ReportError, ReportImporter, SkippedEntry,
};
use serde::Deserialize;
use serde_json::Value;

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "vulnerabilities × affected components";

pub struct CycloneDx;

esr_plugin_sdk::export_report_importer!(crate::CycloneDx);

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Bom {
    bom_format: Option<String>,
    spec_version: Option<String>,
    metadata: Metadata,
    components: Vec<Component>,
    vulnerabilities: Option<Vec<Vulnerability>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Metadata {
    timestamp: Option<String>,
    /// An array of tools up to 1.4; `{components, services}` since 1.5.
    tools: Option<Value>,
    component: Option<Component>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Component {
    #[serde(rename = "bom-ref")]
    bom_ref: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    group: Option<String>,
    name: String,
    version: Option<String>,
    purl: Option<String>,
    cpe: Option<String>,
    publisher: Option<String>,
    properties: Vec<Property>,
    components: Vec<Component>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Property {
    name: String,
    value: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Vulnerability {
    id: String,
    source: Option<Source>,
    references: Vec<Reference>,
    ratings: Vec<Rating>,
    description: Option<String>,
    detail: Option<String>,
    analysis: Option<Analysis>,
    affects: Vec<Affects>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Source {
    name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Reference {
    id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Rating {
    source: Option<Source>,
    score: Option<f64>,
    severity: Option<String>,
    method: Option<String>,
    vector: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Analysis {
    state: Option<String>,
    justification: Option<String>,
    detail: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Affects {
    #[serde(rename = "ref")]
    reference: Option<String>,
    versions: Vec<AffectedVersion>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AffectedVersion {
    version: Option<String>,
    status: Option<String>,
}

/// The CVSS version a rating `method` names, and the prefix its vector
/// carries (CycloneDX vectors often leave it out).
fn cvss_method(method: &str) -> Option<(&'static str, &'static str)> {
    match method {
        "CVSSv2" => Some(("2.0", "")),
        "CVSSv3" => Some(("3.0", "CVSS:3.0/")),
        "CVSSv31" => Some(("3.1", "CVSS:3.1/")),
        "CVSSv4" => Some(("4.0", "CVSS:4.0/")),
        _ => None,
    }
}

impl ReportImporter for CycloneDx {
    fn describe() -> ImporterInfo {
        importer_info(
            "cyclonedx",
            env!("CARGO_PKG_VERSION"),
            "CycloneDX 1.4 to 1.7 JSON with vulnerabilities (VDR and VEX)",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        let Some(Value::Object(object)) = report::parse_outline(bytes, 1) else { return Confidence::No };
        if object.get("bomFormat").and_then(Value::as_str) != Some("CycloneDX") {
            return Confidence::No;
        }
        // A BOM without vulnerabilities is an SBOM: convert says so.
        if object.get("vulnerabilities").is_some_and(Value::is_array) {
            Confidence::Certain
        } else {
            Confidence::Possible
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        let bom: Bom = report::parse_report(
            bytes,
            "a CycloneDX JSON document with vulnerabilities (bomFormat, specVersion, components, vulnerabilities)",
        )?;
        convert(bom)
    }
}

fn convert(bom: Bom) -> Result<ConvertedReport, ReportError> {
    if bom.bom_format.as_deref() != Some("CycloneDX") {
        return Err(ReportError::Unsupported("not a CycloneDX document: bomFormat is not \"CycloneDX\"".into()));
    }
    let spec = bom.spec_version.clone().unwrap_or_default();
    let minor = spec.strip_prefix("1.").and_then(|minor| minor.parse::<u32>().ok());
    if minor.is_none_or(|minor| minor < 4) {
        return Err(ReportError::Unsupported(format!(
            "CycloneDX specVersion {spec:?} is not supported: vulnerabilities need 1.4 or later (1.4 to 1.7 are)"
        )));
    }
    let Some(vulnerabilities) = bom.vulnerabilities else {
        return Err(ReportError::Unsupported(
            "this CycloneDX document is an SBOM: it lists no vulnerabilities to import".into(),
        ));
    };
    let (tool, scanner_version) = tool(bom.metadata.tools.as_ref());
    let mut components: Vec<&Component> = Vec::new();
    if let Some(component) = &bom.metadata.component {
        collect(component, &mut components);
    }
    for component in &bom.components {
        collect(component, &mut components);
    }
    let by_ref: HashMap<&str, &Component> = components
        .iter()
        .filter_map(|component| component.bom_ref.as_deref().map(|reference| (reference, *component)))
        .collect();
    let os = components.iter().find(|component| component.kind.as_deref() == Some("operating-system"));
    let operating_system = os.map(|os| OperatingSystem {
        name: os.name.clone(),
        version: os.version.clone().filter(|version| !version.is_empty()),
        family: Some(report::os_family(&os.name).to_owned()),
        vendor: None,
        architecture: None,
    });
    let mut converted = ConvertedReport {
        // Any tool writes CycloneDX: the document does not choose whose
        // findings it is compared with.
        scanner: "cyclonedx".into(),
        tool,
        scanner_version,
        scanned_at: bom.metadata.timestamp.clone(),
        operating_system,
        ..ConvertedReport::default()
    };
    // The BOM lists what was looked at: the classes of its packages were
    // scanned, whether or not anything was found in them.
    for component in &components {
        if component.kind.as_deref() != Some("operating-system") {
            converted.scanned_classes.push(package(component, os.map(|os| os.name.as_str())).1);
        }
    }
    for (index, vulnerability) in vulnerabilities.iter().enumerate() {
        let at = format!("vulnerabilities[{index}]");
        if vulnerability.id.trim().is_empty() {
            converted.add_skipped(SkippedEntry { entry: at, reason: "no id".into() }, FAN_OUT)?;
            continue;
        }
        if vulnerability.affects.is_empty() {
            converted.add_skipped(
                SkippedEntry { entry: format!("{at} ({})", vulnerability.id), reason: "affects no component".into() },
                FAN_OUT,
            )?;
            continue;
        }
        for (affects_index, affects) in vulnerability.affects.iter().enumerate() {
            let reference = affects.reference.as_deref().unwrap_or_default();
            let Some(component) = by_ref.get(reference).filter(|component| !component.name.trim().is_empty()) else {
                converted.add_skipped(
                    SkippedEntry {
                        entry: format!("{at}.affects[{affects_index}] ({})", vulnerability.id),
                        reason: format!("ref {reference:?} names no component of the document"),
                    },
                    FAN_OUT,
                )?;
                continue;
            };
            let entry = entry(vulnerability, affects, component, os.map(|os| os.name.as_str()));
            converted.scanned_classes.push(entry.class);
            converted.add_entry(entry, FAN_OUT)?;
        }
    }
    converted.scanned_classes.sort();
    converted.scanned_classes.dedup();
    Ok(converted)
}

/// A component and the components nested in it.
fn collect<'a>(component: &'a Component, into: &mut Vec<&'a Component>) {
    into.push(component);
    for nested in &component.components {
        collect(nested, into);
    }
}

/// The tool the document says wrote it, as a scanner name, and its
/// version: the first of `metadata.tools` (an array up to 1.4,
/// `tools.components` since 1.5).
fn tool(tools: Option<&Value>) -> (Option<String>, Option<String>) {
    let first = match tools {
        Some(Value::Array(tools)) => tools.first(),
        Some(Value::Object(tools)) => tools
            .get("components")
            .and_then(Value::as_array)
            .and_then(|components| components.first())
            .or_else(|| tools.get("services").and_then(Value::as_array).and_then(|services| services.first())),
        _ => None,
    };
    let name = first.and_then(|tool| tool.get("name")).and_then(Value::as_str).and_then(report::scanner_token);
    let version = first
        .and_then(|tool| tool.get("version"))
        .and_then(Value::as_str)
        .filter(|version| !version.is_empty() && !version.starts_with('['))
        .map(str::to_owned);
    (name.clone(), version.filter(|_| name.is_some()))
}

fn property<'a>(component: &'a Component, name: &str) -> Option<&'a str> {
    component
        .properties
        .iter()
        .find(|property| property.name == name)
        .and_then(|property| property.value.as_deref())
        .filter(|value| !value.is_empty())
}

/// The package a component is, with its class and location.
fn package(component: &Component, os_name: Option<&str>) -> (Package, PackageClass, Option<String>) {
    let from_purl = component.purl.as_deref().and_then(report::package_from_purl);
    // Syft (Grype, Trivy's SBOMs) records the package type; the purl's
    // type says the same for other tools.
    let ecosystem = property(component, "syft:package:type")
        .or_else(|| property(component, "aquasecurity:trivy:PkgType"))
        .map(str::to_owned)
        .or_else(|| from_purl.as_ref().and_then(|package| package.ecosystem.clone()));
    let class = match (ecosystem.as_deref(), component.kind.as_deref()) {
        (Some(ecosystem), _) => report::package_class(ecosystem),
        (None, Some("library" | "framework")) => PackageClass::Language,
        (None, _) => PackageClass::Other,
    };
    let group = component.group.as_deref().filter(|group| !group.is_empty());
    let name = match group {
        Some(group) if matches!(ecosystem.as_deref(), Some("maven" | "java-archive")) => {
            format!("{group}:{}", component.name)
        }
        Some(group) => format!("{group}/{}", component.name),
        None => component.name.clone(),
    };
    let package_manager = match class {
        PackageClass::Os => os_name.and_then(report::package_manager),
        _ => None,
    }
    .or_else(|| ecosystem.as_deref().and_then(report::package_manager));
    let location = match class {
        PackageClass::Os => None,
        _ => property(component, "syft:location:0:path")
            .or_else(|| property(component, "aquasecurity:trivy:FilePath"))
            .map(str::to_owned),
    };
    let package = Package {
        name,
        version: component.version.clone().filter(|version| !version.is_empty()),
        ecosystem,
        package_manager: package_manager.map(str::to_owned),
        vendor: component.publisher.clone().or_else(|| from_purl.and_then(|package| package.vendor)),
        purl: component.purl.clone().filter(|purl| !purl.is_empty()),
        cpe: component.cpe.clone().filter(|cpe| !cpe.is_empty()),
    };
    (package, class, location)
}

fn is_epss(rating: &Rating) -> bool {
    let source = rating.source.as_ref().and_then(|source| source.name.as_deref()).unwrap_or_default();
    source.eq_ignore_ascii_case("FIRST") || source.to_ascii_uppercase().contains("EPSS")
}

fn is_kev(rating: &Rating) -> bool {
    let source = rating.source.as_ref().and_then(|source| source.name.as_deref()).unwrap_or_default();
    source.to_ascii_uppercase().contains("KEV")
}

fn entry(
    vulnerability: &Vulnerability,
    affects: &Affects,
    component: &Component,
    os_name: Option<&str>,
) -> ReportEntry {
    let id = vulnerability.id.trim().to_owned();
    let mut aliases = Vec::new();
    for reference in &vulnerability.references {
        report::push_alias(&mut aliases, &id, reference.id.as_deref().unwrap_or_default());
    }
    let preferred = vulnerability.source.as_ref().and_then(|source| source.name.clone());
    let mut ratings: Vec<CvssRating> = Vec::new();
    let mut severities: Vec<(Option<String>, String)> = Vec::new();
    let mut epss = None;
    let mut kev = None;
    for rating in &vulnerability.ratings {
        if is_epss(rating) {
            epss =
                rating.score.filter(|score| (0.0..=1.0).contains(score)).map(|score| Epss { score, percentile: None });
            continue;
        }
        if is_kev(rating) {
            kev = Some(true);
            continue;
        }
        let source = rating.source.as_ref().and_then(|source| source.name.clone());
        if let Some(severity) = rating.severity.clone().filter(|severity| !severity.trim().is_empty()) {
            severities.push((source.clone(), severity));
        }
        let Some((version, prefix)) = rating.method.as_deref().and_then(cvss_method) else { continue };
        let vector =
            rating.vector.as_deref().map(str::trim).filter(|vector| !vector.is_empty()).map(|vector| {
                if vector.starts_with("CVSS:") { vector.to_owned() } else { format!("{prefix}{vector}") }
            });
        if let Some(mut rated) = report::cvss_rating(source.as_deref(), vector.as_deref(), rating.score) {
            if rated.version.is_empty() {
                rated.version = version.into();
            }
            ratings.push(rated);
        }
    }
    let cvss = report::order_cvss(ratings, preferred.as_deref());
    // The severity of the rating the document prefers (its source's), else
    // the first CVSS rating's source's, else the first given.
    let source_of = |wanted: Option<&str>| {
        severities
            .iter()
            .find(|(source, _)| {
                wanted.is_some_and(|wanted| source.as_deref().is_some_and(|s| s.eq_ignore_ascii_case(wanted)))
            })
            .map(|(_, severity)| severity.clone())
    };
    let severity_given = source_of(preferred.as_deref())
        .or_else(|| source_of(cvss.first().and_then(|rating| rating.source.as_deref())))
        .or_else(|| severities.first().map(|(_, severity)| severity.clone()));
    let severity = report::entry_severity(severity_given.as_deref(), &cvss);
    let (package, class, location) = package(component, os_name);
    let fixed_version = fixed_versions(
        affects
            .versions
            .iter()
            .filter(|version| version.status.as_deref() == Some("unaffected"))
            .filter_map(|version| version.version.as_deref()),
    );
    let state = vulnerability.analysis.as_ref().and_then(|analysis| {
        report::vex_state(analysis.state.as_deref()?, analysis.justification.as_deref(), analysis.detail.as_deref())
    });
    ReportEntry {
        check: None,
        host: None,
        vulnerability_id: id,
        aliases,
        package,
        class,
        location,
        severity_given,
        severity,
        cvss,
        epss,
        kev,
        fixed_version,
        state,
        title: None,
        description: vulnerability
            .description
            .clone()
            .filter(|description| !description.trim().is_empty())
            .or_else(|| vulnerability.detail.clone().filter(|detail| !detail.trim().is_empty())),
    }
}

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::report::{EntryState, Severity, SuppressionReason};
    use esr_plugin_sdk::{importing, scanner_reports};

    use super::*;

    const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

    fn convert_file(name: &str) -> ConvertedReport {
        scanner_reports::convert_real_report::<CycloneDx>(MANIFEST, "cyclonedx", name)
    }

    /// Components by bom-ref, read from the raw document.
    fn components_by_ref(raw: &Value) -> HashMap<String, Value> {
        fn walk(component: &Value, into: &mut HashMap<String, Value>) {
            if let Some(reference) = component["bom-ref"].as_str() {
                into.insert(reference.to_owned(), component.clone());
            }
            for nested in component["components"].as_array().into_iter().flatten() {
                walk(nested, into);
            }
        }
        let mut by_ref = HashMap::new();
        walk(&raw["metadata"]["component"], &mut by_ref);
        for component in raw["components"].as_array().into_iter().flatten() {
            walk(component, &mut by_ref);
        }
        by_ref
    }

    fn expected_state(state: Option<&str>) -> Option<&'static str> {
        match state? {
            "in_triage" | "exploitable" => Some("open"),
            "resolved" | "resolved_with_pedigree" => Some("resolved"),
            "not_affected" | "false_positive" => Some("suppressed"),
            other => panic!("a state the test does not know: {other}"),
        }
    }

    #[test]
    fn every_real_document_converts_vulnerability_by_affected_component() {
        for (name, bytes) in scanner_reports::real_reports(MANIFEST, "cyclonedx") {
            let raw: Value = serde_json::from_slice(&bytes).expect("the real file is JSON");
            let by_ref = components_by_ref(&raw);
            let converted = CycloneDx::convert(&bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
            assert_eq!(converted.scanned_at.as_deref(), raw.pointer("/metadata/timestamp").and_then(Value::as_str));
            let mut entries = converted.entries.iter();
            let mut skipped = converted.skipped.iter();
            for (index, vulnerability) in raw["vulnerabilities"].as_array().expect("vulnerabilities").iter().enumerate()
            {
                let id = vulnerability["id"].as_str().expect("an id");
                for affects in vulnerability["affects"].as_array().expect("affects") {
                    let reference = affects["ref"].as_str().expect("a ref");
                    let at = format!("{name} vulnerabilities[{index}] {id} → {reference}");
                    let Some(component) = by_ref.get(reference) else {
                        let skip = skipped.next().unwrap_or_else(|| panic!("{at}: not skipped"));
                        assert!(skip.entry.contains(id) && skip.reason.contains(reference), "{at}: {skip:?}");
                        continue;
                    };
                    let entry = entries.next().unwrap_or_else(|| panic!("{at}: no entry"));
                    assert_eq!(entry.vulnerability_id, id, "{at}");
                    assert_eq!(Some(entry.package.name.as_str()), component["name"].as_str(), "{at}");
                    assert_eq!(entry.package.version.as_deref(), component["version"].as_str(), "{at}");
                    assert_eq!(entry.package.purl.as_deref(), component["purl"].as_str(), "{at}");
                    let state = entry.state.as_ref().map(|state| match state {
                        EntryState::Open => "open",
                        EntryState::Resolved => "resolved",
                        EntryState::Suppressed { .. } => "suppressed",
                    });
                    assert_eq!(
                        state,
                        expected_state(vulnerability.pointer("/analysis/state").and_then(Value::as_str)),
                        "{at}"
                    );
                    let ratings = vulnerability["ratings"].as_array().expect("ratings");
                    let source = |rating: &Value| {
                        rating.pointer("/source/name").and_then(Value::as_str).unwrap_or("").to_owned()
                    };
                    let epss = ratings
                        .iter()
                        .find(|rating| source(rating) == "FIRST")
                        .and_then(|rating| rating["score"].as_f64());
                    assert_eq!(entry.epss.as_ref().map(|epss| epss.score), epss, "{at}");
                    let kev = ratings.iter().any(|rating| source(rating).contains("KEV")).then_some(true);
                    assert_eq!(entry.kev, kev, "{at}");
                    // Where the ratings agree on a severity, it is the one.
                    let given: Vec<&str> = ratings
                        .iter()
                        .filter(|rating| source(rating) != "FIRST" && !source(rating).contains("KEV"))
                        .filter_map(|rating| rating["severity"].as_str())
                        .collect();
                    if let Some(first) = given.first().filter(|first| given.iter().all(|other| other == *first)) {
                        let expected = match *first {
                            "critical" => Severity::Critical,
                            "high" => Severity::High,
                            "medium" => Severity::Medium,
                            "low" => Severity::Low,
                            "info" => Severity::Info,
                            "none" | "unknown" => entry
                                .cvss
                                .first()
                                .and_then(|r| r.base_score)
                                .map_or(Severity::Info, Severity::from_score),
                            other => panic!("{at}: a severity the test does not know: {other}"),
                        };
                        assert_eq!(entry.severity, expected, "{at}");
                    }
                    assert!(
                        entry.cvss.iter().all(|rating| ["2.0", "3.0", "3.1", "4.0"].contains(&rating.version.as_str())),
                        "{at}: {:?}",
                        entry.cvss
                    );
                }
            }
            assert!(entries.next().is_none() && skipped.next().is_none(), "{name}: more out than in");
        }
    }

    #[test]
    fn what_the_real_documents_are_known_to_hold() {
        // VEX: the four states of the CISA example, on its one product.
        let vex = convert_file("bom-examples_cisa-case-3.vex.json");
        assert_eq!((vex.scanner.as_str(), vex.tool.as_deref()), ("cyclonedx", None));
        let count = |wanted: fn(&EntryState) -> bool| {
            vex.entries.iter().filter(|e| e.state.as_ref().is_some_and(wanted)).count()
        };
        assert_eq!(count(|state| matches!(state, EntryState::Open)), 10);
        assert_eq!(count(|state| matches!(state, EntryState::Resolved)), 3);
        assert_eq!(
            count(|state| matches!(state, EntryState::Suppressed { reason: SuppressionReason::FalsePositive, .. })),
            6
        );
        assert!(
            vex.entries
                .iter()
                .all(|entry| entry.package.name == "GHI" && entry.package.version.as_deref() == Some("17.4"))
        );
        // A vector without its prefix is read with the method's version.
        let first = &vex.entries[0];
        assert_eq!(first.cvss[0].version, "3.1");
        assert_eq!(first.cvss[0].vector.as_deref(), Some("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H"));
        assert_eq!((first.cvss[0].base_score, first.severity), (Some(10.0), Severity::Critical));
        // Grype's CycloneDX 1.7: EPSS and KEV as ratings; the rating's own
        // severity stands even beside a higher score.
        let grype = convert_file("grype-repo_image-snapshot.cdx.json");
        assert_eq!((grype.scanner.as_str(), grype.tool.as_deref()), ("cyclonedx", Some("grype")));
        let [one, two] = grype.entries.as_slice() else { panic!("{:?}", grype.entries) };
        assert_eq!((one.severity, one.cvss[0].base_score, one.kev), (Severity::Low, Some(8.2), None));
        assert_eq!((two.kev, two.epss.as_ref().map(|epss| epss.score)), (Some(true), Some(0.08)));
        assert_eq!(
            (one.class, one.package.package_manager.as_deref(), one.location.as_deref()),
            (PackageClass::Os, Some("dnf"), None)
        );
        // Grype's CycloneDX 1.4 of a container: tool and version from the
        // 1.4 tools array, packages by bom-ref.
        let container = convert_file("secobserve_grype-container.cdx.json");
        assert_eq!((container.tool.as_deref(), container.scanner_version.as_deref()), (Some("grype"), Some("0.59.1")));
        assert_eq!(container.entries.len(), 8);
        assert_eq!(container.entries[0].cvss[0].version, "2.0");
        assert!(container.scanned_classes.contains(&PackageClass::Os));
    }

    #[test]
    fn vex_justifications_and_unknown_refs() {
        let document = br#"{"bomFormat":"CycloneDX","specVersion":"1.6","components":[
            {"bom-ref":"lib","type":"library","name":"log4j-core","group":"org.apache.logging.log4j","version":"2.14.1",
             "purl":"pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1",
             "properties":[{"name":"syft:package:type","value":"java-archive"},{"name":"syft:location:0:path","value":"/app/lib/log4j-core.jar"}]}],
          "vulnerabilities":[
            {"id":"CVE-2021-44228","source":{"name":"NVD"},
             "ratings":[{"source":{"name":"NVD"},"score":10.0,"severity":"critical","method":"CVSSv31","vector":"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H"}],
             "analysis":{"state":"not_affected","justification":"protected_by_mitigating_control","detail":"JNDI disabled"},
             "affects":[{"ref":"lib","versions":[{"version":"2.17.1","status":"unaffected"}]},{"ref":"missing"}]},
            {"id":"CVE-2021-45046","affects":[]}]}"#;
        let converted = CycloneDx::convert(document).expect("converts");
        let [entry] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
        assert_eq!(entry.package.name, "org.apache.logging.log4j:log4j-core");
        assert_eq!((entry.class, entry.location.as_deref()), (PackageClass::Language, Some("/app/lib/log4j-core.jar")));
        assert_eq!(entry.fixed_version.as_deref(), Some("2.17.1"));
        assert!(matches!(
            entry.state,
            Some(EntryState::Suppressed { reason: SuppressionReason::CompensatingControl, .. })
        ));
        assert_eq!(converted.skipped.len(), 2, "{:?}", converted.skipped);
        assert!(matches!(
            CycloneDx::convert(br#"{"bomFormat":"CycloneDX","specVersion":"1.3","vulnerabilities":[]}"#),
            Err(ReportError::Unsupported(_))
        ));
        assert!(matches!(
            CycloneDx::convert(br#"{"bomFormat":"CycloneDX","specVersion":"1.6","components":[]}"#),
            Err(ReportError::Unsupported(reason)) if reason.contains("SBOM")
        ));
    }

    /// Vulnerabilities each affecting every component multiply: past the
    /// SDK's bound the conversion stops with an error naming it.
    #[test]
    fn a_document_fanning_out_past_the_bound_is_refused() {
        let document = |vulnerabilities: usize, components: usize| {
            let components: Vec<Value> = (0..components)
                .map(|n| serde_json::json!({"bom-ref": format!("c{n}"), "type": "library", "name": format!("lib{n}"), "version": "1"}))
                .collect();
            let affects: Vec<Value> =
                (0..components.len()).map(|n| serde_json::json!({"ref": format!("c{n}")})).collect();
            let vulnerabilities: Vec<Value> = (0..vulnerabilities)
                .map(|n| serde_json::json!({"id": format!("CVE-2024-{:05}", n + 10_000), "affects": affects}))
                .collect();
            serde_json::to_vec(&serde_json::json!({"bomFormat": "CycloneDX", "specVersion": "1.5",
                "components": components, "vulnerabilities": vulnerabilities}))
            .expect("JSON")
        };
        let within = CycloneDx::convert(&document(200, 200)).expect("40,000 entries convert");
        assert_eq!(within.entries.len(), 40_000);
        importing::assert_refused_past_max_entries(CycloneDx::convert(&document(400, 300)), "affected components");
    }

    #[test]
    fn cyclonedx_documents_are_told_from_every_other_format() {
        scanner_reports::assert_detects_its_own_and_no_other::<CycloneDx>(MANIFEST, "cyclonedx");
    }

    #[test]
    fn hostile_and_malformed_input_is_an_error() {
        scanner_reports::assert_refuses_hostile_and_malformed::<CycloneDx>();
    }
}
