//! The contract's enum value sets (`public-api.md`), in the contract's
//! order: one definition for the components that filter by them and the
//! host's demo data generator that produces them.

use crate::Collection;

pub const OS_FAMILIES: &[&str] = &["macos", "windows", "linux", "other"];
pub const SCOPE_STATUSES: &[&str] = &["active", "paused", "archived"];
pub const SUBJECT_TYPES: &[&str] = &["software", "service", "configuration"];
pub const FINDING_TYPES: &[&str] = &["vulnerability", "deprecation", "compliance", "licensing", "standardization"];
pub const SEVERITIES: &[&str] = &["critical", "high", "medium", "low", "info"];
/// Severities from the lowest rank up, for sorting: `-severity` puts
/// critical first.
pub const SEVERITY_RANK: &[&str] = &["info", "low", "medium", "high", "critical"];
pub const FINDING_STATUSES: &[&str] = &["open", "resolved", "reopened", "suppressed"];
pub const SUPPRESSION_REASONS: &[&str] = &["accepted_risk", "false_positive", "compensating_control"];
pub const SCANNERS: &[&str] = &["trivy", "qualys", "tenable", "defender", "crowdstrike"];
pub const TARGET_TYPES: &[&str] = &["software", "os_patch", "configuration", "service"];
/// The contract's managers, then those scanner reports need (language
/// ecosystems and Alpine's `apk`; `report::package_manager` maps onto them).
pub const PACKAGE_MANAGERS: &[&str] = &[
    "apt",
    "dnf",
    "yum",
    "zypper",
    "homebrew",
    "chocolatey",
    "winget",
    "msi",
    "none",
    "apk",
    "pip",
    "npm",
    "cargo",
    "go",
    "maven",
    "nuget",
    "gem",
    "composer",
];
pub const DISCOVERY_METHODS: &[&str] = &["passive", "targeted_query", "operator"];
pub const TARGET_STATUSES: &[&str] = &[
    "identified",
    "actionable",
    "queued",
    "pending_approval",
    "in_progress",
    "verifying",
    "remediated",
    "blocked",
    "failed",
    "rejected",
    "obsolete",
];
pub const EXECUTION_STATUSES: &[&str] =
    &["pending", "pending_approval", "blocked", "preflight_failed", "running", "succeeded", "failed", "rejected"];
pub const EXECUTION_EFFICACIES: &[&str] = &["pending", "verified_fixed", "verified_not_fixed", "unknown"];
/// `2.0` and `3.0` are what scanner reports still carry for older CVEs.
pub const CVSS_VERSIONS: &[&str] = &["3.1", "4.0", "2.0", "3.0"];

/// Whether the contract's state machine of a collection lets a stored
/// record in state `from` move to `to` (staying put is always allowed).
pub fn transition_allowed(collection: Collection, from: &str, to: &str) -> bool {
    if from == to {
        return true;
    }
    let next: &[&str] = match (collection, from) {
        // open → resolved; resolved → reopened (behaves as open);
        // open/reopened → suppressed, back to open when it expires.
        (Collection::VulnerabilityFindings, "open") => &["resolved", "suppressed"],
        (Collection::VulnerabilityFindings, "reopened") => &["resolved", "suppressed"],
        (Collection::VulnerabilityFindings, "resolved") => &["reopened"],
        (Collection::VulnerabilityFindings, "suppressed") => &["open"],
        // The remediation pipeline, with its side paths; remediated,
        // rejected and obsolete are terminal.
        (Collection::RemediationTargets, "identified") => &["actionable", "rejected", "obsolete"],
        (Collection::RemediationTargets, "actionable") => &["queued", "blocked", "rejected", "obsolete"],
        (Collection::RemediationTargets, "queued") => {
            &["pending_approval", "in_progress", "blocked", "rejected", "obsolete"]
        }
        (Collection::RemediationTargets, "pending_approval") => &["in_progress", "blocked", "rejected", "obsolete"],
        (Collection::RemediationTargets, "in_progress") => &["verifying", "failed", "blocked", "obsolete"],
        (Collection::RemediationTargets, "verifying") => &["remediated", "failed", "obsolete"],
        (Collection::RemediationTargets, "blocked") => &["queued", "rejected", "obsolete"],
        (Collection::RemediationTargets, "failed") => &["queued", "rejected", "obsolete"],
        // active ⇄ paused, either → archived (terminal).
        (Collection::Scopes, "active") => &["paused", "archived"],
        (Collection::Scopes, "paused") => &["active", "archived"],
        _ => &[],
    };
    next.contains(&to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_machines_follow_the_contract() {
        assert!(transition_allowed(Collection::VulnerabilityFindings, "resolved", "reopened"));
        assert!(!transition_allowed(Collection::VulnerabilityFindings, "resolved", "open"));
        assert!(transition_allowed(Collection::VulnerabilityFindings, "suppressed", "open"));
        assert!(!transition_allowed(Collection::VulnerabilityFindings, "resolved", "suppressed"));
        for terminal in ["remediated", "rejected", "obsolete"] {
            assert!(
                TARGET_STATUSES
                    .iter()
                    .all(|to| *to == terminal || !transition_allowed(Collection::RemediationTargets, terminal, to))
            );
        }
        assert!(transition_allowed(Collection::RemediationTargets, "failed", "queued"));
        assert!(transition_allowed(Collection::RemediationTargets, "blocked", "queued"));
        assert!(transition_allowed(Collection::Scopes, "paused", "active"));
        assert!(!transition_allowed(Collection::Scopes, "archived", "active"));
    }
}
