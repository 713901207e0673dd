//! The real scanner reports importers' tests read (native builds only):
//! `shared/scanner-reports/<format>/` beside the repository, or where
//! `ESR_SCANNER_REPORTS_DIR` says. They are never copied into the project,
//! and a test that cannot find them fails rather than passing on nothing.

use std::path::{Path, PathBuf};

/// The directories of the formats, one per scanner output.
pub const FORMAT_DIRS: &[&str] = &["trivy", "grype", "osv-scanner", "sarif", "cyclonedx", "wazuh"];

/// The directory holding one folder per format: `ESR_SCANNER_REPORTS_DIR`,
/// else the first `shared/scanner-reports` found walking up from
/// `manifest_dir` (a crate's `CARGO_MANIFEST_DIR`; the repository's parent
/// holds `shared/`, whichever worktree the crate is in). Panics, naming
/// where it looked, when there is none.
pub fn reports_dir(manifest_dir: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("ESR_SCANNER_REPORTS_DIR") {
        let dir = PathBuf::from(dir);
        assert!(dir.is_dir(), "ESR_SCANNER_REPORTS_DIR={} is not a directory", dir.display());
        return dir;
    }
    Path::new(manifest_dir)
        .ancestors()
        .map(|ancestor| ancestor.join("shared/scanner-reports"))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no shared/scanner-reports above {manifest_dir}: set ESR_SCANNER_REPORTS_DIR to the directory of the real scanner reports"
            )
        })
}

/// Every `*.json` file of one format's folder (`grype`, `sarif`…), sorted
/// by name, with its bytes. Panics when the folder is missing or empty.
pub fn real_reports(manifest_dir: &str, format_dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = reports_dir(manifest_dir).join(format_dir);
    let mut reports: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap_or_else(|error| panic!("{}: {error}", dir.display())).path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "json"))
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            (name, bytes)
        })
        .collect();
    reports.sort();
    assert!(!reports.is_empty(), "no real reports in {}", dir.display());
    reports
}

/// The real report `name` of one format's folder, converted by `I`.
/// Panics when it is missing or does not convert.
pub fn convert_real_report<I: crate::report::ReportImporter>(
    manifest_dir: &str,
    format_dir: &str,
    name: &str,
) -> crate::report::ConvertedReport {
    let (_, bytes) = real_reports(manifest_dir, format_dir)
        .into_iter()
        .find(|(file, _)| file == name)
        .unwrap_or_else(|| panic!("{format_dir}/{name} is missing"));
    I::convert(&bytes).unwrap_or_else(|error| panic!("{format_dir}/{name} does not convert: {error:?}"))
}

/// Every real report of every format but `own_dir`, named `<format>/<file>`.
pub fn other_formats_reports(manifest_dir: &str, own_dir: &str) -> Vec<(String, Vec<u8>)> {
    FORMAT_DIRS
        .iter()
        .filter(|dir| **dir != own_dir)
        .flat_map(|dir| {
            real_reports(manifest_dir, dir).into_iter().map(move |(name, bytes)| (format!("{dir}/{name}"), bytes))
        })
        .collect()
}

/// Inputs no importer may panic on: nesting far deeper than any report,
/// truncations, wrong types where objects are expected, invalid UTF-8.
pub fn hostile_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let depth = 100_000;
    let mut nested_arrays = "[".repeat(depth).into_bytes();
    nested_arrays.extend("]".repeat(depth).into_bytes());
    let mut nested_objects = Vec::new();
    for _ in 0..depth {
        nested_objects.extend_from_slice(br#"{"a":"#);
    }
    nested_objects.extend_from_slice(b"1");
    nested_objects.extend("}".repeat(depth).into_bytes());
    vec![
        ("arrays nested 100,000 deep", nested_arrays),
        ("objects nested 100,000 deep", nested_objects),
        ("empty", Vec::new()),
        ("a bare number", b"42".to_vec()),
        ("a string", br#""report""#.to_vec()),
        ("null", b"null".to_vec()),
        ("invalid UTF-8", b"{\"a\": \"\xff\xfe\"}".to_vec()),
        ("truncated", br#"{"matches": [{"vulnerability": {"id": "CVE-2024-0001""#.to_vec()),
        ("NUL bytes", b"\0\0\0\0".to_vec()),
    ]
}

/// Checks an importer claims every real report of its own folder
/// (`certain`) and says `no` to every other format's, naming each file it
/// gets wrong.
pub fn assert_detects_its_own_and_no_other<I: crate::report::ReportImporter>(manifest_dir: &str, own_dir: &str) {
    use crate::report::Confidence;
    let mut wrong = Vec::new();
    for (name, bytes) in real_reports(manifest_dir, own_dir) {
        let confidence = I::detect(&bytes);
        if confidence != Confidence::Certain {
            wrong.push(format!("{own_dir}/{name}: {confidence:?}, not Certain"));
        }
    }
    for (name, bytes) in other_formats_reports(manifest_dir, own_dir) {
        let confidence = I::detect(&bytes);
        if confidence != Confidence::No {
            wrong.push(format!("{name}: {confidence:?}, not No"));
        }
    }
    assert!(wrong.is_empty(), "{} detection is wrong for:\n{}", I::describe().format, wrong.join("\n"));
}

/// Checks an importer answers every [`hostile_inputs`] with `no` from
/// `detect` and an error from `convert` (a panic fails the test), and a
/// report broken on its third line with that line and a column.
pub fn assert_refuses_hostile_and_malformed<I: crate::report::ReportImporter>() {
    use crate::report::{Confidence, ReportError};
    for (what, bytes) in hostile_inputs() {
        assert_eq!(I::detect(&bytes), Confidence::No, "{what}");
        let error = I::convert(&bytes).expect_err(what);
        assert!(!error.to_string().is_empty(), "{what}: an error that says nothing");
    }
    match I::convert(b"{\n  \"a\": [1,\n  }") {
        Err(ReportError::Malformed { line: 3, column: 3, reason }) => assert!(!reason.is_empty()),
        other => panic!("malformed JSON: {other:?}"),
    }
}
