//! An esr report importer for the `{{NAME}}` format.
//!
//! Start here: describe the report's layout in the `serde` types below
//! (only the fields you read), recognise it in `detect`, and map each
//! entry in `convert` with the SDK's `report` helpers, so that severities,
//! CVSS, package managers and VEX states mean what they mean for every
//! format (docs/scanner-reports.md). The host does the rest: identity,
//! re-imports, endpoints, targets, validation and the write. See PLUGINS.md.

use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, ImporterInfo, Package, PackageClass, ReportEntry, ReportError, ReportImporter,
    SkippedEntry,
};
use serde::Deserialize;

pub struct Importer;

/// What multiplies entries in this format, for the error past
/// `report::MAX_ENTRIES` (`add_entry` and `add_skipped` keep the bound).
const FAN_OUT: &str = "findings";

esr_plugin_sdk::export_report_importer!(crate::Importer);

/// The report as this importer reads it, e.g.
/// `{"tool": "{{NAME}}", "scanned_at": "…", "findings": [{"id", "package", "version", "severity", "fixed"}]}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Report {
    tool: String,
    scanned_at: Option<String>,
    findings: Vec<Finding>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Finding {
    id: String,
    package: String,
    version: Option<String>,
    severity: Option<String>,
    fixed: Option<String>,
}

impl ReportImporter for Importer {
    fn describe() -> ImporterInfo {
        ImporterInfo {
            format: "{{NAME}}".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "{{NAME}} JSON reports".into(),
        }
    }

    fn detect(bytes: &[u8]) -> Confidence {
        // The first level tells; the rest is skipped, not kept.
        let outline = report::parse_outline(bytes, 1);
        match outline.as_ref().and_then(|report| report.get("tool")?.as_str()) {
            Some("{{NAME}}") => Confidence::Certain,
            _ => Confidence::No,
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        let parsed: Report = report::parse_report(bytes, "a {{NAME}} report (an object with tool)")?;
        let mut converted = ConvertedReport {
            scanner: "{{NAME}}".into(),
            scanned_at: parsed.scanned_at,
            scanned_classes: vec![PackageClass::Os],
            ..ConvertedReport::default()
        };
        for (index, finding) in parsed.findings.into_iter().enumerate() {
            if finding.id.is_empty() || finding.package.is_empty() {
                converted.add_skipped(
                    SkippedEntry {
                        entry: format!("findings[{index}]"),
                        reason: "no vulnerability id or no package".into(),
                    },
                    FAN_OUT,
                )?;
                continue;
            }
            converted.add_entry(
                ReportEntry {
                    severity: report::entry_severity(finding.severity.as_deref(), &[]),
                    severity_given: finding.severity,
                    vulnerability_id: finding.id,
                    package: Package { name: finding.package, version: finding.version, ..Package::default() },
                    class: PackageClass::Os,
                    fixed_version: finding.fixed,
                    ..ReportEntry::default()
                },
                FAN_OUT,
            )?;
        }
        Ok(converted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_its_own_format_and_skips_what_it_cannot_represent() {
        let report = br#"{"tool": "{{NAME}}", "findings": [
            {"id": "CVE-2024-0001", "package": "openssl", "version": "3.0.2", "severity": "HIGH", "fixed": "3.0.3"},
            {"id": "", "package": "zlib"}]}"#;
        assert_eq!(Importer::detect(report), Confidence::Certain);
        assert_eq!(Importer::detect(b"{}"), Confidence::No);
        let converted = Importer::convert(report).expect("converts");
        assert_eq!(converted.entries.len(), 1);
        assert_eq!(converted.entries[0].severity, report::Severity::High);
        assert_eq!(converted.skipped.len(), 1);
    }
}
