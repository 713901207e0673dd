//! What report importers share beyond the converted report: how they
//! describe themselves ([`importer_info`]), how they state the versions
//! that fix an entry ([`fixed_versions`]), and a check for their tests
//! ([`assert_refused_past_max_entries`]).

use crate::report::ImporterInfo;

/// What an importer tells the host about itself: its `format`, its crate's
/// `version` and a one-line `description` of what it reads.
pub fn importer_info(format: &str, version: &str, description: &str) -> ImporterInfo {
    ImporterInfo { format: format.to_owned(), version: version.to_owned(), description: description.to_owned() }
}

/// The versions that fix an entry as one text, `"2.17.1, 2.12.2"`: each
/// trimmed, blank ones left out; `None` when none is left.
pub fn fixed_versions<'a>(versions: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let versions: Vec<&str> = versions.into_iter().map(str::trim).filter(|version| !version.is_empty()).collect();
    (!versions.is_empty()).then(|| versions.join(", "))
}

/// Asserts that a conversion was refused for making more than
/// [`crate::report::MAX_ENTRIES`] entries, naming the bound and what
/// multiplied (`fan_out`, or part of it).
#[cfg(not(target_arch = "wasm32"))]
pub fn assert_refused_past_max_entries(
    converted: Result<crate::report::ConvertedReport, crate::report::ReportError>,
    fan_out: &str,
) {
    let bound = crate::report::MAX_ENTRIES.to_string();
    match converted {
        Err(crate::report::ReportError::Invalid(reason)) => {
            assert!(reason.contains(&bound) && reason.contains(fan_out), "{reason}")
        }
        other => panic!("{:?}", other.map(|converted| converted.entries.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_versions_are_trimmed_and_joined() {
        assert_eq!(fixed_versions([" 2.17.1", "", "2.12.2 ", "  "]).as_deref(), Some("2.17.1, 2.12.2"));
        assert_eq!(fixed_versions(["", " "]), None);
        assert_eq!(fixed_versions(Vec::<&str>::new()), None);
    }

    #[test]
    fn importer_info_keeps_what_it_is_given() {
        let info = importer_info("trivy", "1.2.3", "Trivy JSON");
        assert_eq!(
            (info.format.as_str(), info.version.as_str(), info.description.as_str()),
            ("trivy", "1.2.3", "Trivy JSON")
        );
    }
}
