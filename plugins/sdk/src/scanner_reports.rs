//! The real scanner reports importers' tests read (native builds only):
//! `shared/scanner-reports/<format>/` beside the repository, or where
//! `ESR_SCANNER_REPORTS_DIR` says. They are never copied into the project,
//! and a test that cannot find them fails rather than passing on nothing.

use std::path::{Path, PathBuf};

/// The directories of the formats, one per scanner.
pub const FORMAT_DIRS: &[&str] = &[
    "trivy",
    "grype",
    "osv-scanner",
    "sarif",
    "cyclonedx",
    "wazuh",
    "nessus",
    "openvas",
    "qualys",
    "nexpose",
    "snyk",
    "inspector",
    "dependabot",
];

/// The folder of the format that takes file `name` of folder `dir`: its
/// own, except for what a scanner writes in another tool's format (Snyk's
/// SARIF is SARIF's).
pub fn format_dir_of<'a>(dir: &'a str, name: &str) -> &'a str {
    if name.ends_with(".sarif.json") { "sarif" } else { dir }
}

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

/// Every report the format of `format_dir` takes (see [`format_dir_of`]):
/// the files of its folder (`README`s aside) and those of other folders
/// written in its format, named `<file>` in its own folder and
/// `<folder>/<file>` in another, sorted, with their bytes. Panics when
/// there are none.
pub fn real_reports(manifest_dir: &str, format_dir: &str) -> Vec<(String, Vec<u8>)> {
    let mut reports = Vec::new();
    for dir in FORMAT_DIRS {
        for (name, bytes) in folder_reports(manifest_dir, dir) {
            if format_dir_of(dir, &name) != format_dir {
                continue;
            }
            reports.push((if *dir == format_dir { name } else { format!("{dir}/{name}") }, bytes));
        }
    }
    reports.sort();
    assert!(!reports.is_empty(), "no real reports of {format_dir}");
    reports
}

/// Every file of one folder, `README`s aside, sorted by name, with its
/// bytes. Panics when the folder is missing.
fn folder_reports(manifest_dir: &str, folder: &str) -> Vec<(String, Vec<u8>)> {
    let dir = reports_dir(manifest_dir).join(folder);
    let mut reports: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap_or_else(|error| panic!("{}: {error}", dir.display())).path())
        .filter(|path| {
            path.is_file() && !path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("README"))
        })
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            (name, bytes)
        })
        .collect();
    reports.sort();
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

/// Every real report of every format but `own_dir`'s, named `<folder>/<file>`.
pub fn other_formats_reports(manifest_dir: &str, own_dir: &str) -> Vec<(String, Vec<u8>)> {
    FORMAT_DIRS
        .iter()
        .flat_map(|dir| {
            folder_reports(manifest_dir, dir)
                .into_iter()
                .filter(move |(name, _)| format_dir_of(dir, name) != own_dir)
                .map(move |(name, bytes)| (format!("{dir}/{name}"), bytes))
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

/// Hostile XML an XML importer must refuse, each shaped as a document of
/// `root` (the format's root element, so `detect` cannot be what stops
/// it): a billion laughs, external entities naming a local file and a
/// URL, elements nested 100,000 deep, a 50 MB text node, invalid UTF-8.
pub fn hostile_xml_inputs(root: &str) -> Vec<(&'static str, Vec<u8>)> {
    let mut laughs = String::from("<?xml version=\"1.0\"?>\n<!DOCTYPE ROOT [\n<!ENTITY lol \"lol\">\n");
    laughs.push_str("<!ENTITY lol1 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">\n");
    for level in 2..=9 {
        let previous = format!("&lol{};", level - 1);
        laughs.push_str(&format!("<!ENTITY lol{level} \"{}\">\n", previous.repeat(10)));
    }
    laughs.push_str("]>\n<ROOT>&lol9;</ROOT>\n");
    let file_entity =
        "<?xml version=\"1.0\"?>\n<!DOCTYPE ROOT [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>\n<ROOT>&xxe;</ROOT>\n";
    let url_entity = "<?xml version=\"1.0\"?>\n<!DOCTYPE ROOT [<!ENTITY xxe SYSTEM \"http://127.0.0.1:9/evil.dtd\">]>\n<ROOT>&xxe;</ROOT>\n";
    let undeclared = "<?xml version=\"1.0\"?>\n<ROOT>&xxe;</ROOT>\n";
    let depth = 100_000;
    let nested = format!("<ROOT>{}{}</ROOT>", "<a>".repeat(depth), "</a>".repeat(depth));
    let big_text = format!("<ROOT><a>{}</a></ROOT>", "x".repeat(50_000_000));
    let mut bad_utf8 = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{root}><a>").into_bytes();
    bad_utf8.extend_from_slice(b"\xff\xfe\xfd");
    bad_utf8.extend_from_slice(format!("</a></{root}>").as_bytes());
    let named = |text: String| text.replace("ROOT", root).into_bytes();
    vec![
        ("a billion laughs", named(laughs)),
        ("an external entity naming a local file", named(file_entity.to_owned())),
        ("an external entity naming a URL", named(url_entity.to_owned())),
        ("an entity never declared", named(undeclared.to_owned())),
        ("elements nested 100,000 deep", named(nested)),
        ("a 50 MB text node", named(big_text)),
        ("invalid UTF-8", bad_utf8),
    ]
}

/// Checks an XML importer refuses every [`hostile_xml_inputs`] of its
/// `root` with [`crate::report::ReportError::Invalid`] naming what was
/// wrong, without a panic.
pub fn assert_refuses_hostile_xml<I: crate::report::ReportImporter>(root: &str) {
    use crate::report::ReportError;
    for (what, bytes) in hostile_xml_inputs(root) {
        match I::convert(&bytes) {
            Err(ReportError::Invalid(reason) | ReportError::Unsupported(reason)) => {
                assert!(!reason.is_empty(), "{what}: a refusal that says nothing")
            }
            other => panic!("{what}: {:?}", other.map(|converted| converted.entries.len())),
        }
    }
}
