//! The contract's enum value sets (`public-api.md`), in the contract's
//! order: one definition for the components that filter by them and the
//! host's demo data generator that produces them.

pub const OS_FAMILIES: &[&str] = &["macos", "windows", "linux", "other"];
pub const SCOPE_STATUSES: &[&str] = &["active", "paused", "archived"];
pub const SUBJECT_TYPES: &[&str] = &["software", "service", "configuration"];
pub const FINDING_TYPES: &[&str] = &["vulnerability", "deprecation", "compliance", "licensing", "standardization"];
pub const SEVERITIES: &[&str] = &["critical", "high", "medium", "low", "info"];
pub const FINDING_STATUSES: &[&str] = &["open", "resolved", "reopened", "suppressed"];
pub const SUPPRESSION_REASONS: &[&str] = &["accepted_risk", "false_positive", "compensating_control"];
pub const SCANNERS: &[&str] = &["trivy", "qualys", "tenable", "defender", "crowdstrike"];
pub const TARGET_TYPES: &[&str] = &["software", "os_patch", "configuration", "service"];
pub const PACKAGE_MANAGERS: &[&str] =
    &["apt", "dnf", "yum", "zypper", "homebrew", "chocolatey", "winget", "msi", "none"];
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
