//! Deterministic, realistic demo data for the public read API.
//!
//! A [`Generator`] produces one organization: its remediation scopes, then its
//! endpoints one at a time, each with the vulnerability findings seen on it and
//! the remediation targets that fix them ([`EndpointBatch`]). Only a few
//! counters survive between batches, so 10,000 endpoints with 100 findings each
//! stream in constant memory.
//!
//! The records are derived from an inventory rather than drawn independently:
//! each endpoint gets an operating system release and build, software from the
//! catalogue, and (on servers and developer machines) libraries bundled in
//! application directories. A CVE becomes a finding only when an installed
//! version lies in that CVE's vulnerable range for that platform, so findings,
//! installed and fixed versions, paths, CPEs, purls and package managers agree.
//! CVSS base scores are computed from the real vectors and severities from the
//! scores. Targets group an endpoint's findings per installation and pick up
//! the scopes whose filters really match them.
//!
//! Everything comes from one seeded ChaCha8 stream and a fixed anchor time:
//! the same `(seed, spec, anchor, hostname prefix)` gives byte-identical
//! records. Event timestamps never pass the anchor; deadlines (`due_at`, a
//! suppression's `expires_at`) may lie after it.

mod catalogue;
/// A plausible status history for each demo record.
mod history;
/// Seeding a store: the demo organizations, or one generated organization.
pub mod seed;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use esr_contract::time::Timestamp;

use esr_system::clock::format_timestamp;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use catalogue::{
    AGENT_VERSIONS, APPLE_OUIS, Audience, BUNDLED_LIBRARIES, Build, CHECKS, CVES, Check, Cve, DEPARTMENTS,
    DESKTOP_APPS, ENVIRONMENTS, FAILED_EXECUTION_ERRORS, FIRST_NAMES, Fix, LAST_NAMES, LINUX_SERVER_ROLES,
    NO_AGENT_ERROR, NOT_FIXED_ERROR, OS_RELEASES, OsRelease, PC_OUIS, PREFLIGHT_ERRORS, PRODUCTS, Product,
    ROLE_WEIGHTS, Role, SCOPE_TEMPLATES, SERVER_BLOCKED_ERRORS, SERVER_TEAMS, SERVICE_APPS, SUPPRESSION_NOTES,
    ScopeTemplate, UPSTREAM, VIRTUAL_OUIS, WINDOWS_SERVER_ROLES, WORKSTATION_BLOCKED_ERRORS,
};

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

/// Fixed anchor time so that the demo data set is the same on every run
/// (unix seconds, 2026-11-01T00:00:00Z).
pub const DEMO_ANCHOR_UNIX: i64 = 1_793_491_200;

/// How far back endpoints were first discovered (about 18 months).
pub const ENDPOINT_HISTORY_DAYS: i64 = 540;

/// The size of a generated organization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DemoSpec {
    pub endpoints: usize,
    /// Exact average: individual endpoints vary around it, the total is
    /// `endpoints * findings_per_endpoint`.
    pub findings_per_endpoint: usize,
}

impl DemoSpec {
    pub const DEMO: DemoSpec = DemoSpec { endpoints: 100, findings_per_endpoint: 10 };
}

/// One endpoint with everything that hangs off it.
#[derive(Clone, Debug)]
pub struct EndpointBatch {
    pub endpoint: Value,
    pub findings: Vec<Value>,
    pub targets: Vec<Value>,
}

/// Operating system family, as the contract spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    MacOs,
    Windows,
    Linux,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::MacOs => "macos",
            Family::Windows => "windows",
            Family::Linux => "linux",
        }
    }
}

/// Finding severity; the derived order is by rank (`Info` lowest).
pub use esr_contract::report::Severity;

/// Index into a scope's `[critical, high, medium, low]` SLA days.
fn sla_index(severity: Severity) -> Option<usize> {
    match severity {
        Severity::Critical => Some(0),
        Severity::High => Some(1),
        Severity::Medium => Some(2),
        Severity::Low => Some(3),
        Severity::Info => None,
    }
}

// The contract's enum value sets live in the SDK, shared with the components.
pub use esr_contract::contract::{
    DISCOVERY_METHODS, EXECUTION_EFFICACIES, EXECUTION_STATUSES, FINDING_STATUSES, FINDING_TYPES, OS_FAMILIES,
    PACKAGE_MANAGERS, SCANNERS, SCOPE_STATUSES, SEVERITIES, SUBJECT_TYPES, SUPPRESSION_REASONS, TARGET_STATUSES,
    TARGET_TYPES,
};

/// Generates one organization's demo records.
pub struct Generator {
    rng: ChaCha8Rng,
    spec: DemoSpec,
    anchor: i64,
    hostname_prefix: String,
    email_domain: String,
    scopes: Vec<Scope>,
    /// CVSS base score of each catalogue CVE, computed once from its vector.
    cve_scores: Vec<f64>,
    cves_by_product: BTreeMap<&'static str, Vec<usize>>,
    endpoints_done: usize,
    /// Finding count for the second endpoint of a jittered pair.
    paired_count: Option<usize>,
    /// Findings an endpoint could not hold, handed to the next one.
    carried_findings: usize,
    hostname_serials: BTreeMap<String, u32>,
    /// Roles still to hand out in the current shuffled deck of 100, so that
    /// every 100 endpoints have exactly the catalogue's OS mix.
    role_deck: Vec<Role>,
}

impl Generator {
    /// Deterministic: the same (seed, spec, anchor, prefix) gives byte-identical output.
    ///
    /// `hostname_prefix` is the organization's short name (e.g. `acme`); it
    /// starts workstation hostnames and forms the owners' e-mail domain
    /// (`acme.example`).
    pub fn new(seed: u64, spec: DemoSpec, anchor_unix: i64, hostname_prefix: &str) -> Generator {
        let prefix = sanitize_prefix(hostname_prefix);
        let cve_scores = CVES
            .iter()
            .map(|cve| cvss31_base_score(cve.vector).expect("catalogue CVSS vectors are valid (checked by tests)"))
            .collect();
        let mut cves_by_product: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
        for (index, cve) in CVES.iter().enumerate() {
            cves_by_product.entry(cve.product).or_default().push(index);
        }
        let mut generator = Generator {
            rng: ChaCha8Rng::seed_from_u64(seed),
            spec,
            anchor: anchor_unix,
            email_domain: format!("{prefix}.example"),
            hostname_prefix: prefix,
            scopes: Vec::new(),
            cve_scores,
            cves_by_product,
            endpoints_done: 0,
            paired_count: None,
            carried_findings: 0,
            hostname_serials: BTreeMap::new(),
            role_deck: Vec::new(),
        };
        // Scopes come first in the random stream, so calling `scopes()` early,
        // late or never does not change the endpoints.
        generator.scopes = generator.generate_scopes();
        generator
    }

    /// The organization's scopes (6-8, across active, paused and archived).
    pub fn scopes(&mut self) -> Vec<Value> {
        self.scopes.iter().map(|scope| scope.record.clone()).collect()
    }

    /// `count` more scopes for a large organization (benchmarks): the
    /// organization's scopes again, per team, as `Team NNNN: <name>`, with
    /// new ids, created over the same period. They target no endpoint's
    /// remediation (only `scopes()` do).
    pub fn team_scopes(&mut self, count: usize) -> Vec<Value> {
        let mut scopes = Vec::with_capacity(count);
        for number in 0..count {
            let Some(scope) = self.scopes.get(number % self.scopes.len().max(1)) else { break };
            let team = number / self.scopes.len().max(1);
            let created_at = scope.created_at + i64::try_from(team).unwrap_or(0);
            let mut record = scope.record.clone();
            record["name"] = format!("Team {team:04}: {}", scope.template.name).into();
            record["id"] = self.new_id(created_at).into();
            record["created_at"] = format_timestamp(created_at).into();
            let updated_at = record["updated_at"].as_str().and_then(Timestamp::parse).map(|t| t.0 / 1_000_000_000);
            if let Some(updated_at) = updated_at {
                record["updated_at"] = format_timestamp(updated_at + i64::try_from(team).unwrap_or(0)).into();
            }
            scopes.push(record);
        }
        scopes
    }

    /// The next endpoint with its findings and targets, or `None` after
    /// `spec.endpoints` endpoints.
    pub fn next_endpoint(&mut self) -> Option<EndpointBatch> {
        if self.endpoints_done >= self.spec.endpoints {
            return None;
        }
        let wanted = self.next_finding_count();
        let batch = self.generate_endpoint(wanted);
        let shortfall = wanted.saturating_sub(batch.findings.len());
        self.carried_findings = shortfall.min(self.spec.findings_per_endpoint);
        self.endpoints_done += 1;
        Some(batch)
    }

    /// Endpoints come in pairs whose counts differ by up to ±60% around the
    /// mean but add up to twice the mean, so the total stays exact.
    fn next_finding_count(&mut self) -> usize {
        let mean = self.spec.findings_per_endpoint;
        let planned = match self.paired_count.take() {
            Some(count) => count,
            None if self.endpoints_done + 1 < self.spec.endpoints => {
                let spread = self.rng.gen_range(0..=mean * 3 / 5);
                self.paired_count = Some(mean - spread);
                mean + spread
            }
            None => mean,
        };
        planned + self.carried_findings
    }
}

// ---------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------

struct Scope {
    id: String,
    template: &'static ScopeTemplate,
    created_at: i64,
    record: Value,
}

impl Generator {
    fn generate_scopes(&mut self) -> Vec<Scope> {
        let mut templates: Vec<&'static ScopeTemplate> = SCOPE_TEMPLATES.iter().filter(|t| t.always).collect();
        let mut optional: Vec<&'static ScopeTemplate> = SCOPE_TEMPLATES.iter().filter(|t| !t.always).collect();
        optional.shuffle(&mut self.rng);
        let extra = self.rng.gen_range(0..=2);
        templates.extend(optional.into_iter().take(extra));

        // Scopes were set up while the organization onboarded, before most endpoints.
        let earliest = self.anchor - ENDPOINT_HISTORY_DAYS * DAY;
        let mut dated: Vec<(i64, &'static ScopeTemplate)> = templates
            .into_iter()
            .map(|template| (between(&mut self.rng, earliest, self.anchor - 300 * DAY), template))
            .collect();
        dated.sort_by_key(|(created_at, _)| *created_at);

        let mut scopes = Vec::with_capacity(dated.len());
        for (created_at, template) in dated {
            let updated_at = match template.status {
                "archived" => between(&mut self.rng, created_at + 30 * DAY, self.anchor - 14 * DAY),
                "paused" => between(&mut self.rng, created_at + 7 * DAY, self.anchor - DAY),
                _ => between(&mut self.rng, created_at, self.anchor),
            };
            let id = self.new_id(created_at);
            let [critical, high, medium, low] = template.sla_days;
            let record = json!({
                "id": id,
                "name": template.name,
                "description": template.description,
                "status": template.status,
                "subject_filter": {
                    "subject_types": template.subject_types,
                    "vendors": template.vendors,
                    "products": template.products,
                    "cpe_patterns": template.cpe_patterns,
                },
                "endpoint_filter": {
                    "os_families": template.os_families,
                    "endpoint_ids": Vec::<String>::new(),
                    "has_agent": template.has_agent,
                    "tags": template.tags,
                },
                "finding_filter": {
                    "finding_types": template.finding_types,
                    "min_severity": template.min_severity.map(Severity::as_str),
                    "min_cvss_score": template.min_cvss_score,
                    "kev_only": template.kev_only,
                },
                "sla_days": {"critical": critical, "high": high, "medium": medium, "low": low},
                "created_at": format_timestamp(created_at),
                "updated_at": format_timestamp(updated_at),
            });
            scopes.push(Scope { id, template, created_at, record });
        }
        scopes
    }
}

/// What scope filters look at on one endpoint.
struct EndpointFacts<'a> {
    family: Family,
    has_agent: bool,
    tags: &'a [String],
}

/// What scope filters look at on one target and its findings.
struct TargetFacts<'a> {
    subject_type: &'a str,
    vendor: &'a str,
    product: &'a str,
    cpes: Vec<&'a str>,
    findings: Vec<FindingFacts>,
}

struct FindingFacts {
    finding_type: &'static str,
    severity: Severity,
    cvss: Option<f64>,
    kev: bool,
}

/// The three filters are AND-ed, and so are the non-empty lists inside each;
/// an empty list matches everything. The finding filter matches when at least
/// one of the target's findings passes it.
fn scope_matches(scope: &ScopeTemplate, endpoint: &EndpointFacts, target: &TargetFacts) -> bool {
    let listed = |list: &[&str], value: &str| list.is_empty() || list.contains(&value);
    let subject_ok = listed(scope.subject_types, target.subject_type)
        && listed(scope.vendors, target.vendor)
        && listed(scope.products, target.product)
        && (scope.cpe_patterns.is_empty()
            || target.cpes.iter().any(|cpe| scope.cpe_patterns.iter().any(|pattern| glob_match(pattern, cpe))));
    let endpoint_ok = listed(scope.os_families, endpoint.family.as_str())
        && scope.has_agent.is_none_or(|wanted| wanted == endpoint.has_agent)
        && (scope.tags.is_empty() || endpoint.tags.iter().any(|tag| scope.tags.contains(&tag.as_str())));
    let finding_ok = target.findings.iter().any(|finding| {
        listed(scope.finding_types, finding.finding_type)
            && scope.min_severity.is_none_or(|min| finding.severity >= min)
            && scope.min_cvss_score.is_none_or(|min| finding.cvss.is_some_and(|score| score >= min))
            && (!scope.kev_only || finding.kev)
    });
    subject_ok && endpoint_ok && finding_ok
}

/// `*` matches any run of characters; everything else matches itself.
fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

// ---------------------------------------------------------------------------
// Endpoints
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    fn as_str(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }
}

struct Owner {
    name: String,
    email: String,
}

/// An endpoint and the facts its findings and targets depend on.
struct Host {
    id: String,
    role: Role,
    release: &'static OsRelease,
    os_version: &'static str,
    arch: Arch,
    /// Engineers and IT staff have developer tools and source checkouts.
    engineering: bool,
    /// User name in home-directory paths.
    login: String,
    hostname: String,
    tags: Vec<String>,
    ip: Option<String>,
    mac_address: Option<String>,
    owner: Option<Owner>,
    agent: Option<(String, &'static str)>,
    scanner: &'static str,
    /// The scanner's own id for this endpoint (host id, machine id, sensor id).
    scanner_host_ref: String,
    created_at: i64,
    last_seen_at: Option<i64>,
    /// Observations (scans, executions) happen in `[window_start, last_scan]`.
    window_start: i64,
    last_scan: i64,
}

impl Host {
    fn family(&self) -> Family {
        self.release.family
    }

    fn has_agent(&self) -> bool {
        self.agent.is_some()
    }

    fn facts(&self) -> EndpointFacts<'_> {
        EndpointFacts { family: self.family(), has_agent: self.has_agent(), tags: &self.tags }
    }
}

impl Generator {
    fn new_host(&mut self) -> Host {
        let anchor = self.anchor;
        let role = self.next_role();
        let releases: Vec<&'static OsRelease> = OS_RELEASES.iter().filter(|r| r.roles.contains(&role)).collect();
        let release = *pick_weighted(&mut self.rng, &releases, |release| release.weight);
        let os_version = *pick(&mut self.rng, release.versions);
        let arch = if chance(&mut self.rng, release.arm64_percent) { Arch::Arm64 } else { Arch::X86_64 };

        let department = match role {
            Role::MacLaptop | Role::WindowsWorkstation => {
                Some(pick_weighted(&mut self.rng, DEPARTMENTS, |(_, weight)| *weight).0)
            }
            Role::LinuxWorkstation => Some("engineering"),
            Role::WindowsServer | Role::LinuxServer => None,
        };
        let engineering = matches!(department, Some("engineering" | "it"));

        let mut login = String::from("shared");
        let owner = if role.is_server() {
            chance(&mut self.rng, 30).then(|| {
                let (team, mailbox) = *pick(&mut self.rng, SERVER_TEAMS);
                Owner { name: team.to_string(), email: format!("{mailbox}@{}", self.email_domain) }
            })
        } else if chance(&mut self.rng, 97) {
            let first = *pick(&mut self.rng, FIRST_NAMES);
            let last = *pick(&mut self.rng, LAST_NAMES);
            let (first_lower, last_lower) = (first.to_ascii_lowercase(), last.to_ascii_lowercase());
            login = format!("{}{last_lower}", first_lower.chars().next().unwrap_or('x'));
            Some(Owner {
                name: format!("{first} {last}"),
                email: format!("{first_lower}.{last_lower}@{}", self.email_domain),
            })
        } else {
            None
        };

        let (hostname, tags) = self.hostname_and_tags(role, release, department, &login);
        let remote = tags.iter().any(|tag| tag == "remote");
        let cloud = tags.iter().any(|tag| tag == "aws");

        let has_agent = chance(&mut self.rng, 85);
        let ip = (!chance(&mut self.rng, 6)).then(|| private_ip(&mut self.rng, role, remote, cloud));
        let mac_missing_percent = if has_agent { 5 } else { 20 };
        let mac_address =
            (!chance(&mut self.rng, mac_missing_percent)).then(|| mac_address(&mut self.rng, role, cloud));
        let agent = has_agent.then(|| {
            let agent_id = uuid::Builder::from_random_bytes(self.rng.r#gen()).into_uuid().to_string();
            (agent_id, pick_weighted(&mut self.rng, AGENT_VERSIONS, |(_, weight)| *weight).0)
        });

        let scanner = pick_weighted(&mut self.rng, catalogue::scanners(release.family), |(_, weight)| *weight).0;
        let scanner_host_ref = match scanner {
            "qualys" => self.rng.gen_range(100_000_000u32..1_000_000_000).to_string(),
            "tenable" => uuid::Builder::from_random_bytes(self.rng.r#gen()).into_uuid().to_string(),
            "defender" => random_hex(&mut self.rng, 40),
            _ => random_hex(&mut self.rng, 32),
        };

        // Discovered over the last 18 months; agents check in daily unless the
        // device went quiet, agentless devices are seen by network scans.
        let created_at = between(&mut self.rng, anchor - ENDPOINT_HISTORY_DAYS * DAY, anchor - 2 * DAY);
        let last_seen_at = if has_agent {
            if chance(&mut self.rng, 90) {
                Some(between(&mut self.rng, (anchor - 3 * DAY).max(created_at), anchor))
            } else {
                let stale_until = (anchor - 7 * DAY).max(created_at);
                Some(between(&mut self.rng, (anchor - 60 * DAY).max(created_at), stale_until))
            }
        } else if chance(&mut self.rng, 50) {
            Some(between(&mut self.rng, (anchor - 30 * DAY).max(created_at), anchor))
        } else {
            None
        };
        let last_scan = last_seen_at.unwrap_or_else(|| between(&mut self.rng, created_at + DAY, anchor));
        let window_start = (created_at + 10 * MINUTE).min(last_scan);

        let id = self.new_id(created_at);
        Host {
            id,
            role,
            release,
            os_version,
            arch,
            engineering,
            login,
            hostname,
            tags,
            ip,
            mac_address,
            owner,
            agent,
            scanner,
            scanner_host_ref,
            created_at,
            last_seen_at,
            window_start,
            last_scan,
        }
    }

    fn hostname_and_tags(
        &mut self,
        role: Role,
        release: &OsRelease,
        department: Option<&'static str>,
        login: &str,
    ) -> (String, Vec<String>) {
        let prefix = self.hostname_prefix.clone();
        // NetBIOS names are at most 15 characters.
        let windows_prefix: String =
            prefix.chars().filter(char::is_ascii_alphanumeric).take(6).collect::<String>().to_ascii_uppercase();
        let department = department.unwrap_or("it").to_string();
        match role {
            Role::MacLaptop => {
                let model = if chance(&mut self.rng, 70) { "mbp" } else { "mba" };
                let serial = self.next_serial("mac");
                let mut tags = vec!["laptop".to_string(), department];
                if chance(&mut self.rng, 20) {
                    tags.push("remote".to_string());
                }
                (format!("{prefix}-{model}-{login}-{serial:03}"), tags)
            }
            Role::WindowsWorkstation => {
                let laptop = chance(&mut self.rng, 70);
                let serial = self.next_serial("windows-workstation");
                let (code, kind) = if laptop { ("LT", "laptop") } else { ("WS", "desktop") };
                let mut tags = vec![kind.to_string(), department];
                if laptop && chance(&mut self.rng, 15) {
                    tags.push("remote".to_string());
                }
                (format!("{windows_prefix}-{code}-{serial:04}"), tags)
            }
            Role::WindowsServer => {
                let (code, tag, _) = *pick_weighted(&mut self.rng, WINDOWS_SERVER_ROLES, |(_, _, weight)| *weight);
                let environment = pick_weighted(&mut self.rng, ENVIRONMENTS, |(_, weight)| *weight).0;
                let serial = self.next_serial(&format!("windows-{code}"));
                let tags = vec!["server".to_string(), environment.to_string(), tag.to_string()];
                (format!("{windows_prefix}-{code}-{serial:02}"), tags)
            }
            Role::LinuxServer => {
                let server_role = pick_weighted(&mut self.rng, LINUX_SERVER_ROLES, |(_, weight)| *weight).0;
                let environment = pick_weighted(&mut self.rng, ENVIRONMENTS, |(_, weight)| *weight).0;
                let serial = self.next_serial(&format!("{server_role}-{environment}"));
                let location = if release.key == "amzn-2" || chance(&mut self.rng, 35) { "aws" } else { "on-prem" };
                let tags =
                    vec!["server".to_string(), environment.to_string(), server_role.to_string(), location.to_string()];
                (format!("{server_role}-{environment}-{serial:02}"), tags)
            }
            Role::LinuxWorkstation => {
                let serial = self.next_serial("linux-workstation");
                (format!("{prefix}-lx-{login}-{serial:03}"), vec!["workstation".to_string(), department])
            }
        }
    }

    fn next_role(&mut self) -> Role {
        if self.role_deck.is_empty() {
            for &(role, weight) in ROLE_WEIGHTS {
                self.role_deck.extend(std::iter::repeat_n(role, weight as usize));
            }
            self.role_deck.shuffle(&mut self.rng);
        }
        self.role_deck.pop().expect("the role deck was just refilled")
    }

    /// Increasing per naming series, with gaps where devices were retired.
    fn next_serial(&mut self, series: &str) -> u32 {
        let step = self.rng.gen_range(1..=3);
        let serial = self.hostname_serials.entry(series.to_string()).or_insert(0);
        *serial += step;
        *serial
    }
}

fn private_ip(rng: &mut ChaCha8Rng, role: Role, remote: bool, cloud: bool) -> String {
    let host = rng.gen_range(2..=254);
    match role {
        Role::WindowsServer | Role::LinuxServer if cloud => {
            format!("172.{}.{}.{host}", rng.gen_range(16..=31), rng.gen_range(0..=255))
        }
        Role::WindowsServer | Role::LinuxServer => {
            format!("10.{}.{}.{host}", rng.gen_range(0..=3), rng.gen_range(1..=40))
        }
        _ if remote => format!("192.168.{}.{host}", pick(rng, &[0, 1, 178])),
        _ => format!("10.{}.{}.{host}", rng.gen_range(20..=29), rng.gen_range(0..=63)),
    }
}

fn mac_address(rng: &mut ChaCha8Rng, role: Role, cloud: bool) -> String {
    let prefix = match role {
        // Cloud NICs have locally administered addresses.
        Role::LinuxServer | Role::WindowsServer if cloud => {
            format!(
                "{:02x}:{:02x}:{:02x}",
                pick(rng, &[0x02u8, 0x06, 0x0a, 0x0e]),
                rng.r#gen::<u8>(),
                rng.r#gen::<u8>()
            )
        }
        Role::LinuxServer | Role::WindowsServer => pick(rng, VIRTUAL_OUIS).to_string(),
        Role::MacLaptop => pick(rng, APPLE_OUIS).to_string(),
        Role::WindowsWorkstation | Role::LinuxWorkstation => pick(rng, PC_OUIS).to_string(),
    };
    let [a, b, c]: [u8; 3] = rng.r#gen();
    format!("{prefix}:{a:02x}:{b:02x}:{c:02x}")
}

// ---------------------------------------------------------------------------
// Inventory
// ---------------------------------------------------------------------------

/// One installation of one product on the endpoint.
struct Installation {
    product_key: &'static str,
    stream: &'static str,
    vendor: &'static str,
    product: &'static str,
    subject_type: &'static str,
    target_type: &'static str,
    version: &'static str,
    install_path: Option<String>,
    package_manager: Option<&'static str>,
    cpe: Option<String>,
    purl: Option<String>,
}

#[derive(Default)]
struct Inventory {
    installations: Vec<Installation>,
    /// (library, application directory) pairs already used by bundled copies.
    bundle_slots: BTreeSet<(&'static str, String)>,
}

/// Values for the `{...}` placeholders of catalogue templates.
struct TemplateVars<'a> {
    version: &'a str,
    arch: Arch,
    app_dir: Option<&'a str>,
}

fn fill_template(template: &str, vars: &TemplateVars) -> String {
    if !template.contains('{') {
        return template.to_string();
    }
    let (brew, multiarch, deb_arch, rpm_arch, cpe_arch) = match vars.arch {
        Arch::X86_64 => ("/usr/local", "x86_64-linux-gnu", "amd64", "x86_64", "x64"),
        Arch::Arm64 => ("/opt/homebrew", "aarch64-linux-gnu", "arm64", "aarch64", "arm64"),
    };
    template
        .replace("{version}", vars.version)
        .replace("{brew}", brew)
        .replace("{multiarch}", multiarch)
        .replace("{deb_arch}", deb_arch)
        .replace("{rpm_arch}", rpm_arch)
        .replace("{cpe_arch}", cpe_arch)
        .replace("{app_dir}", vars.app_dir.unwrap_or_default())
}

/// Package URLs percent-encode the epoch colon and `+` of versions.
fn fill_purl(template: &str, vars: &TemplateVars) -> String {
    let encoded = vars.version.replace(':', "%3A").replace('+', "%2B");
    fill_template(template, &TemplateVars { version: &encoded, arch: vars.arch, app_dir: vars.app_dir })
}

fn catalogue_product(key: &str) -> &'static Product {
    PRODUCTS.iter().find(|product| product.key == key).expect("inventory and bundle lists name catalogue products")
}

fn install(
    product: &'static Product,
    build: &'static Build,
    version: &'static str,
    package_manager: Option<&'static str>,
    host: &Host,
    app_dir: Option<&str>,
) -> Installation {
    let vars = TemplateVars { version, arch: host.arch, app_dir };
    let mut install_path = build.install_path.map(|template| fill_template(template, &vars));
    if host.family() == Family::Windows {
        install_path = install_path.map(|path| path.replace('/', "\\"));
    }
    Installation {
        product_key: product.key,
        stream: build.stream,
        vendor: product.vendor,
        product: product.name,
        subject_type: product.subject_type,
        target_type: product.target_type,
        version,
        install_path,
        package_manager,
        cpe: build.cpe.map(|template| fill_template(template, &vars)),
        purl: build.purl.map(|template| fill_purl(template, &vars)),
    }
}

/// The fix that makes `version` of `stream` no longer vulnerable, if it is vulnerable.
fn applicable_fix(cve: &'static Cve, stream: &str, version: &str) -> Option<&'static Fix> {
    cve.fixes.iter().find(|fix| {
        fix.stream == stream
            && fix.introduced.is_none_or(|introduced| compare_versions(version, introduced) != Ordering::Less)
            && compare_versions(version, fix.fixed) == Ordering::Less
    })
}

/// A CVE that applies to one installation.
#[derive(Clone, Copy)]
struct CveHit {
    installation: usize,
    cve: usize,
    fixed_version: &'static str,
}

impl Generator {
    fn base_inventory(&mut self, host: &Host) -> Inventory {
        let mut inventory = Inventory::default();
        if let Some(os) = &host.release.os_product {
            let vars = TemplateVars { version: host.os_version, arch: host.arch, app_dir: None };
            inventory.installations.push(Installation {
                product_key: os.key,
                stream: host.release.key,
                vendor: host.release.vendor,
                product: os.subject,
                subject_type: "software",
                target_type: "os_patch",
                version: host.os_version,
                install_path: None,
                package_manager: None,
                cpe: Some(fill_template(os.cpe, &vars)),
                purl: None,
            });
        }
        for item in catalogue::inventory(host.role) {
            let percent = if host.engineering { item.engineering_percent } else { item.percent };
            if !chance(&mut self.rng, percent) {
                continue;
            }
            let product = catalogue_product(item.product);
            let family = host.family();
            let usable = |build: &&Build| !build.bundled && build.families.contains(&family);
            // A distro's own package wins over an upstream build.
            let build = product
                .builds
                .iter()
                .filter(usable)
                .find(|build| build.stream == host.release.key)
                .or_else(|| product.builds.iter().filter(usable).find(|build| build.stream == UPSTREAM));
            let Some(build) = build else {
                continue;
            };
            let version = *pick(&mut self.rng, build.versions);
            let package_manager = *pick(&mut self.rng, build.package_managers);
            inventory.installations.push(install(product, build, version, package_manager, host, None));
        }
        let bundles = if host.role.is_server() || host.engineering {
            self.rng.gen_range(0..=3)
        } else {
            usize::from(chance(&mut self.rng, 15))
        };
        for _ in 0..bundles {
            self.add_bundle(host, &mut inventory, false);
        }
        inventory
    }

    /// Adds a library copy inside an application directory. With
    /// `vulnerable_only` the copy is a version with at least one CVE, which is
    /// how endpoints with many findings get them.
    fn add_bundle(&mut self, host: &Host, inventory: &mut Inventory, vulnerable_only: bool) -> bool {
        let product = catalogue_product(pick_copy(&mut self.rng, BUNDLED_LIBRARIES));
        let family = host.family();
        let Some(build) = product.builds.iter().find(|build| build.bundled && build.families.contains(&family)) else {
            return false;
        };
        let app_dir = self.app_dir(host);
        if !inventory.bundle_slots.insert((product.key, app_dir.clone())) {
            return false;
        }
        let versions: Vec<&'static str> = build
            .versions
            .iter()
            .copied()
            .filter(|version| !vulnerable_only || self.has_vulnerability(product.key, build.stream, version))
            .collect();
        let Some(&version) = versions.choose(&mut self.rng) else {
            return false;
        };
        let package_manager = *pick(&mut self.rng, build.package_managers);
        inventory.installations.push(install(product, build, version, package_manager, host, Some(&app_dir)));
        true
    }

    fn app_dir(&mut self, host: &Host) -> String {
        let login = &host.login;
        match host.role {
            Role::LinuxServer => format!("/opt/{}", pick(&mut self.rng, SERVICE_APPS)),
            Role::LinuxWorkstation => {
                format!("/home/{login}/src/{}", pick(&mut self.rng, SERVICE_APPS))
            }
            Role::WindowsServer => format!(r"D:\Apps\{}", pick(&mut self.rng, SERVICE_APPS)),
            Role::WindowsWorkstation if host.engineering => {
                format!(r"C:\Users\{login}\source\repos\{}", pick(&mut self.rng, SERVICE_APPS))
            }
            Role::WindowsWorkstation => {
                format!(r"C:\Program Files\{}", pick(&mut self.rng, DESKTOP_APPS))
            }
            Role::MacLaptop if host.engineering => {
                format!("/Users/{login}/src/{}", pick(&mut self.rng, SERVICE_APPS))
            }
            Role::MacLaptop => format!("/Applications/{}.app/Contents/Resources", pick(&mut self.rng, DESKTOP_APPS)),
        }
    }

    fn has_vulnerability(&self, product_key: &str, stream: &str, version: &str) -> bool {
        self.cves_by_product
            .get(product_key)
            .is_some_and(|cves| cves.iter().any(|&cve| applicable_fix(&CVES[cve], stream, version).is_some()))
    }

    fn collect_hits(&self, index: usize, installation: &Installation, hits: &mut Vec<CveHit>) {
        let Some(cves) = self.cves_by_product.get(installation.product_key) else {
            return;
        };
        for &cve in cves {
            if let Some(fix) = applicable_fix(&CVES[cve], installation.stream, installation.version) {
                hits.push(CveHit { installation: index, cve, fixed_version: fix.fixed });
            }
        }
    }
}

fn check_applies(check: &Check, host: &Host, inventory: &Inventory) -> bool {
    let audience_ok = match check.audience {
        Audience::Any => true,
        Audience::Workstations => !host.role.is_server(),
        Audience::Servers => host.role.is_server(),
    };
    audience_ok
        && check.families.contains(&host.family())
        && (check.releases.is_empty() || check.releases.contains(&host.release.key))
        && check.requires_product.is_none_or(|key| inventory.installations.iter().any(|i| i.product_key == key))
}

// ---------------------------------------------------------------------------
// Findings and targets
// ---------------------------------------------------------------------------

/// Most bundled copies an endpoint may try to add to reach its finding count.
const MAX_BUNDLE_ATTEMPTS: usize = 400;

#[derive(Clone, Copy)]
enum Origin {
    Cve(CveHit),
    Check(usize),
}

struct Suppression {
    reason: &'static str,
    note: &'static str,
    expires_at: Option<i64>,
}

struct FindingDraft {
    origin: Origin,
    severity: Severity,
    first_seen: i64,
    last_seen: i64,
    status: &'static str,
    resolved_at: Option<i64>,
    updated_at: i64,
    suppression: Option<Suppression>,
    target: Option<usize>,
    id: String,
}

struct Execution {
    status: &'static str,
    efficacy: &'static str,
    started_at: i64,
    finished_at: Option<i64>,
    error: Option<&'static str>,
}

/// What a target works on.
struct TargetSubject {
    target_type: &'static str,
    subject_type: &'static str,
    vendor: &'static str,
    product: &'static str,
    installed_version: Option<&'static str>,
    install_path: Option<String>,
    package_manager: Option<&'static str>,
}

struct TargetDraft {
    subject: TargetSubject,
    members: Vec<usize>,
    status: &'static str,
    discovery_method: &'static str,
    scope_ids: Vec<String>,
    last_execution: Option<Execution>,
    due_at: Option<i64>,
    remediated_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
    id: String,
}

/// How the findings of a target end up, given what happened to the target.
#[derive(Clone, Copy)]
enum FindingOutcome {
    /// Still present: open, reopened or suppressed.
    Present,
    /// The owner declined the fix; mostly suppressed as an accepted risk.
    RiskAccepted,
    /// Fixed (or the software removed) at `at`; last scanned before `last_seen_by`.
    Resolved { at: i64, last_seen_by: i64 },
}

const STANDALONE_FINDING_STATUSES: &[(&str, u32)] =
    &[("open", 55), ("resolved", 25), ("reopened", 8), ("suppressed", 12)];
const PRESENT_FINDING_STATUSES: &[(&str, u32)] = &[("open", 74), ("reopened", 10), ("suppressed", 16)];

/// Without an active scope nothing puts a target in motion.
const UNSCOPED_TARGET_STATUSES: &[(&str, u32)] = &[("identified", 40), ("actionable", 45), ("obsolete", 15)];
/// Without an agent nothing can execute.
const AGENTLESS_TARGET_STATUSES: &[(&str, u32)] =
    &[("identified", 10), ("actionable", 15), ("queued", 25), ("blocked", 35), ("rejected", 5), ("obsolete", 10)];
const TARGET_STATUS_WEIGHTS: &[(&str, u32)] = &[
    ("identified", 6),
    ("actionable", 8),
    ("queued", 12),
    ("pending_approval", 7),
    ("in_progress", 7),
    ("verifying", 6),
    ("remediated", 24),
    ("blocked", 5),
    ("failed", 8),
    ("rejected", 5),
    ("obsolete", 6),
];

impl Generator {
    fn generate_endpoint(&mut self, wanted: usize) -> EndpointBatch {
        let host = self.new_host();
        let mut inventory = self.base_inventory(&host);

        let mut hits = Vec::new();
        for (index, installation) in inventory.installations.iter().enumerate() {
            self.collect_hits(index, installation, &mut hits);
        }
        let mut checks: Vec<usize> = CHECKS
            .iter()
            .enumerate()
            .filter(|(_, check)| check_applies(check, &host, &inventory))
            .map(|(index, _)| index)
            .collect();

        // Roughly a quarter of findings are not CVEs.
        let check_percent = self.rng.gen_range(15..=35);
        let mut check_count = ((wanted * check_percent + 50) / 100).min(checks.len());
        let mut cve_count = wanted - check_count;
        let mut attempts = 0;
        while hits.len() < cve_count && attempts < MAX_BUNDLE_ATTEMPTS {
            attempts += 1;
            if self.add_bundle(&host, &mut inventory, true) {
                let index = inventory.installations.len() - 1;
                self.collect_hits(index, &inventory.installations[index], &mut hits);
            }
        }
        if hits.len() < cve_count {
            let shortfall = cve_count - hits.len();
            cve_count = hits.len();
            check_count = (check_count + shortfall).min(checks.len());
        }

        let mut chosen_hits: Vec<CveHit> = hits.partial_shuffle(&mut self.rng, cve_count).0.to_vec();
        chosen_hits.sort_by_key(|hit| (hit.installation, hit.cve));
        let mut chosen_checks: Vec<usize> = checks.partial_shuffle(&mut self.rng, check_count).0.to_vec();
        chosen_checks.sort_unstable();

        let mut drafts: Vec<FindingDraft> = chosen_hits
            .iter()
            .map(|&hit| Origin::Cve(hit))
            .chain(chosen_checks.iter().map(|&check| Origin::Check(check)))
            .map(|origin| FindingDraft {
                origin,
                severity: self.severity_of(origin),
                first_seen: 0,
                last_seen: 0,
                status: "open",
                resolved_at: None,
                updated_at: 0,
                suppression: None,
                target: None,
                id: String::new(),
            })
            .collect();

        // One target per installation with CVE findings, and one per
        // configuration finding that a setting change can fix.
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut configuration_groups = Vec::new();
        let mut standalone = Vec::new();
        for (index, draft) in drafts.iter().enumerate() {
            match draft.origin {
                Origin::Cve(hit) => groups.entry(hit.installation).or_default().push(index),
                Origin::Check(check) if CHECKS[check].remediable => configuration_groups.push(index),
                Origin::Check(_) => standalone.push(index),
            }
        }

        let mut targets = Vec::new();
        for (installation, members) in groups {
            let installed = &inventory.installations[installation];
            let subject = TargetSubject {
                target_type: installed.target_type,
                subject_type: installed.subject_type,
                vendor: installed.vendor,
                product: installed.product,
                installed_version: Some(installed.version),
                install_path: installed.install_path.clone(),
                package_manager: installed.package_manager,
            };
            targets.push(self.plan_target(&host, &inventory, &mut drafts, members, subject));
        }
        for index in configuration_groups {
            let Origin::Check(check) = drafts[index].origin else {
                continue;
            };
            let check = &CHECKS[check];
            let subject = TargetSubject {
                target_type: "configuration",
                subject_type: check.subject_type,
                vendor: check.vendor.unwrap_or(host.release.vendor),
                product: check.product,
                installed_version: None,
                install_path: None,
                package_manager: None,
            };
            targets.push(self.plan_target(&host, &inventory, &mut drafts, vec![index], subject));
        }
        for index in standalone {
            drafts[index].first_seen = between(&mut self.rng, host.window_start, host.last_scan);
            let status = pick_weighted(&mut self.rng, STANDALONE_FINDING_STATUSES, |(_, weight)| *weight).0;
            self.settle_finding(&host, &mut drafts[index], status, FindingOutcome::Present);
        }

        for (index, target) in targets.iter_mut().enumerate() {
            target.id = self.new_id(target.created_at);
            for &member in &target.members {
                drafts[member].target = Some(index);
            }
        }
        for draft in &mut drafts {
            draft.id = self.new_id(draft.first_seen);
        }

        self.assemble(&host, &inventory, drafts, targets)
    }

    fn severity_of(&self, origin: Origin) -> Severity {
        match origin {
            Origin::Cve(hit) => Severity::from_score(self.cve_scores[hit.cve]),
            Origin::Check(check) => CHECKS[check].severity,
        }
    }

    fn finding_facts(&self, draft: &FindingDraft) -> FindingFacts {
        match draft.origin {
            Origin::Cve(hit) => FindingFacts {
                finding_type: "vulnerability",
                severity: draft.severity,
                cvss: Some(self.cve_scores[hit.cve]),
                kev: CVES[hit.cve].kev,
            },
            Origin::Check(check) => FindingFacts {
                finding_type: CHECKS[check].finding_type,
                severity: draft.severity,
                cvss: None,
                kev: false,
            },
        }
    }

    /// Decides a target's state and history, then the matching state and
    /// history of its findings, all inside the endpoint's observation window.
    fn plan_target(
        &mut self,
        host: &Host,
        inventory: &Inventory,
        drafts: &mut [FindingDraft],
        members: Vec<usize>,
        subject: TargetSubject,
    ) -> TargetDraft {
        let (start, scan) = (host.window_start, host.last_scan);
        // Findings on one installation are first seen by the same or nearby scans.
        let first_seen = between(&mut self.rng, start, scan);
        for (position, &member) in members.iter().enumerate() {
            let offset = if position == 0 { 0 } else { self.rng.gen_range(0..=3 * DAY) };
            drafts[member].first_seen = (first_seen + offset).min(scan);
        }
        let latest_first_seen = members.iter().map(|&m| drafts[m].first_seen).max().unwrap_or(first_seen);

        let matching: Vec<usize> = {
            let cpes = members
                .iter()
                .filter_map(|&m| match drafts[m].origin {
                    Origin::Cve(hit) => inventory.installations[hit.installation].cpe.as_deref(),
                    Origin::Check(check) => CHECKS[check].cpe,
                })
                .collect();
            let facts = TargetFacts {
                subject_type: subject.subject_type,
                vendor: subject.vendor,
                product: subject.product,
                cpes,
                findings: members.iter().map(|&m| self.finding_facts(&drafts[m])).collect(),
            };
            let endpoint = host.facts();
            self.scopes
                .iter()
                .enumerate()
                .filter(|(_, scope)| matches!(scope.template.status, "active" | "paused"))
                .filter(|(_, scope)| scope_matches(scope.template, &endpoint, &facts))
                .map(|(index, _)| index)
                .collect()
        };
        let first_active = matching.iter().copied().find(|&index| self.scopes[index].template.status == "active");

        let status_weights = match (first_active, host.has_agent()) {
            (None, _) => UNSCOPED_TARGET_STATUSES,
            (Some(_), false) => AGENTLESS_TARGET_STATUSES,
            (Some(_), true) => TARGET_STATUS_WEIGHTS,
        };
        let status = pick_weighted(&mut self.rng, status_weights, |(_, weight)| *weight).0;
        // Identified targets have not been evaluated against scopes yet.
        let scope_indices = if status == "identified" { Vec::new() } else { matching };

        let created_at = (first_seen + self.rng.gen_range(5 * MINUTE..=2 * HOUR)).min(scan);
        let scope_start = first_active.map_or(created_at, |index| self.scopes[index].created_at);
        let floor = created_at.max(latest_first_seen).max(scope_start).min(scan);
        let run_time = self.rng.gen_range(2 * MINUTE..=40 * MINUTE);

        let mut last_execution = None;
        let mut remediated_at = None;
        let mut outcome = FindingOutcome::Present;
        let updated_at = match status {
            "identified" => created_at,
            "actionable" => between(&mut self.rng, created_at, scan),
            "queued" => {
                // A queued target may be a retry of a blocked or failed run.
                if host.has_agent() && chance(&mut self.rng, 25) {
                    let started_at = between(&mut self.rng, floor, scan);
                    let finished_at = (started_at + run_time).min(scan);
                    let kind = *pick(&mut self.rng, &["failed", "preflight_failed", "blocked"]);
                    let error = match kind {
                        "failed" => *pick(&mut self.rng, FAILED_EXECUTION_ERRORS),
                        "preflight_failed" => *pick(&mut self.rng, PREFLIGHT_ERRORS),
                        _ => blocked_error(&mut self.rng, host),
                    };
                    last_execution = Some(Execution {
                        status: kind,
                        efficacy: "unknown",
                        started_at,
                        finished_at: Some(finished_at),
                        error: Some(error),
                    });
                    between(&mut self.rng, finished_at, scan)
                } else {
                    between(&mut self.rng, floor, scan)
                }
            }
            "pending_approval" => {
                let requested_at = between(&mut self.rng, floor, scan);
                last_execution = Some(Execution {
                    status: "pending_approval",
                    efficacy: "pending",
                    started_at: requested_at,
                    finished_at: None,
                    error: None,
                });
                requested_at
            }
            "in_progress" => {
                let started_at = between(&mut self.rng, floor.max(scan - 6 * HOUR), scan);
                let run_status = if chance(&mut self.rng, 70) { "running" } else { "pending" };
                last_execution = Some(Execution {
                    status: run_status,
                    efficacy: "pending",
                    started_at,
                    finished_at: None,
                    error: None,
                });
                started_at
            }
            "verifying" => {
                let started_at = between(&mut self.rng, floor.max(scan - 2 * DAY), scan);
                let finished_at = (started_at + run_time).min(scan);
                last_execution = Some(Execution {
                    status: "succeeded",
                    efficacy: "pending",
                    started_at,
                    finished_at: Some(finished_at),
                    error: None,
                });
                finished_at
            }
            "remediated" => {
                let started_at = between(&mut self.rng, floor, scan);
                let finished_at = (started_at + run_time).min(scan);
                let verified_at = between(&mut self.rng, finished_at, (finished_at + 2 * DAY).min(scan));
                last_execution = Some(Execution {
                    status: "succeeded",
                    efficacy: "verified_fixed",
                    started_at,
                    finished_at: Some(finished_at),
                    error: None,
                });
                remediated_at = Some(verified_at);
                outcome = FindingOutcome::Resolved { at: verified_at, last_seen_by: started_at };
                verified_at
            }
            "blocked" => {
                let started_at = between(&mut self.rng, floor, scan);
                let finished_at = (started_at + self.rng.gen_range(1..=90)).min(scan);
                let error = if host.has_agent() { blocked_error(&mut self.rng, host) } else { NO_AGENT_ERROR };
                last_execution = Some(Execution {
                    status: "blocked",
                    efficacy: "unknown",
                    started_at,
                    finished_at: Some(finished_at),
                    error: Some(error),
                });
                finished_at
            }
            "failed" => {
                let started_at = between(&mut self.rng, floor, scan);
                let finished_at = (started_at + run_time).min(scan);
                let (run_status, efficacy, error, updated_at) = match self.rng.gen_range(0..4) {
                    0 | 1 => ("failed", "unknown", *pick(&mut self.rng, FAILED_EXECUTION_ERRORS), finished_at),
                    2 => ("preflight_failed", "unknown", *pick(&mut self.rng, PREFLIGHT_ERRORS), finished_at),
                    _ => {
                        // The run succeeded but the next scan still saw the old version.
                        let verified_at = between(&mut self.rng, finished_at, (finished_at + 2 * DAY).min(scan));
                        ("succeeded", "verified_not_fixed", NOT_FIXED_ERROR, verified_at)
                    }
                };
                last_execution = Some(Execution {
                    status: run_status,
                    efficacy,
                    started_at,
                    finished_at: Some(finished_at),
                    error: Some(error),
                });
                updated_at
            }
            "rejected" => {
                // Approval was requested, then the owner declined (an operator
                // action, so not bound to scans).
                let requested_at = between(&mut self.rng, floor, scan);
                let decided_at = between(&mut self.rng, requested_at, (requested_at + 3 * DAY).min(self.anchor));
                last_execution = Some(Execution {
                    status: "rejected",
                    efficacy: "unknown",
                    started_at: requested_at,
                    finished_at: Some(decided_at),
                    error: None,
                });
                outcome = FindingOutcome::RiskAccepted;
                decided_at
            }
            _ => {
                // obsolete: the software (or its vulnerable version) is gone.
                let gone_at = between(&mut self.rng, created_at.max(latest_first_seen), scan);
                outcome = FindingOutcome::Resolved { at: gone_at, last_seen_by: gone_at };
                gone_at
            }
        };

        for &member in &members {
            let finding_status = match outcome {
                FindingOutcome::Resolved { .. } => "resolved",
                FindingOutcome::RiskAccepted if chance(&mut self.rng, 60) => "suppressed",
                FindingOutcome::RiskAccepted => "open",
                FindingOutcome::Present => {
                    pick_weighted(&mut self.rng, PRESENT_FINDING_STATUSES, |(_, weight)| *weight).0
                }
            };
            self.settle_finding(host, &mut drafts[member], finding_status, outcome);
        }

        let worst = members.iter().map(|&m| drafts[m].severity).max().unwrap_or(Severity::Info);
        let due_at = scope_indices.first().and_then(|&index| {
            let days = self.scopes[index].template.sla_days[sla_index(worst)?];
            Some(created_at + i64::from(days) * DAY)
        });
        let discovery_method = if host.has_agent() {
            pick_weighted(&mut self.rng, &[("passive", 65), ("targeted_query", 25), ("operator", 10)], |(_, w)| *w).0
        } else {
            pick_weighted(&mut self.rng, &[("passive", 85), ("operator", 15)], |(_, w)| *w).0
        };

        TargetDraft {
            subject,
            members,
            status,
            discovery_method,
            scope_ids: scope_indices.iter().map(|&index| self.scopes[index].id.clone()).collect(),
            last_execution,
            due_at,
            remediated_at,
            created_at,
            updated_at,
            id: String::new(),
        }
    }

    /// Fills in a finding's status history; `first_seen` is already set.
    fn settle_finding(&mut self, host: &Host, draft: &mut FindingDraft, status: &'static str, outcome: FindingOutcome) {
        let first_seen = draft.first_seen;
        let scan = host.last_scan;
        let recent_scan = |rng: &mut ChaCha8Rng| between(rng, (scan - DAY).max(first_seen), scan);
        draft.status = status;
        match status {
            "resolved" => {
                let (resolved_at, last_seen_by) = match outcome {
                    FindingOutcome::Resolved { at, last_seen_by } => (at.max(first_seen), last_seen_by),
                    _ => {
                        let at = between(&mut self.rng, first_seen, scan);
                        (at, at)
                    }
                };
                draft.last_seen = between(&mut self.rng, first_seen, last_seen_by.clamp(first_seen, resolved_at));
                draft.resolved_at = Some(resolved_at);
                draft.updated_at = resolved_at;
            }
            "reopened" => {
                // Resolved once, then seen again by a later scan.
                let reopened_at = between(&mut self.rng, first_seen, scan);
                draft.last_seen = between(&mut self.rng, reopened_at.max(scan - DAY), scan);
                draft.updated_at = draft.last_seen;
            }
            "suppressed" => {
                let reason = match outcome {
                    FindingOutcome::RiskAccepted => "accepted_risk",
                    _ => pick(&mut self.rng, SUPPRESSION_NOTES).0,
                };
                let notes = SUPPRESSION_NOTES
                    .iter()
                    .find(|(candidate, _)| *candidate == reason)
                    .map_or(&[][..], |(_, notes)| *notes);
                let note = notes.choose(&mut self.rng).copied().unwrap_or("Suppressed by the security team.");
                // A suppression that had expired would be open again (the
                // server reopens it), so an expiring one runs for years from
                // the last quarter before the anchor: still in force long
                // after the anchor, whenever the demo is served.
                let (suppressed_at, expires_at) = if chance(&mut self.rng, 25) {
                    (between(&mut self.rng, first_seen, self.anchor), None)
                } else {
                    let days = *pick(&mut self.rng, &[730i64, 1095, 1825]);
                    let set_at = between(&mut self.rng, (self.anchor - 90 * DAY).max(first_seen), self.anchor);
                    (set_at, Some(set_at + days * DAY))
                };
                draft.last_seen = recent_scan(&mut self.rng);
                draft.updated_at = draft.last_seen.max(suppressed_at);
                draft.suppression = Some(Suppression { reason, note, expires_at });
            }
            _ => {
                draft.last_seen = recent_scan(&mut self.rng);
                draft.updated_at = draft.last_seen;
            }
        }
    }

    fn assemble(
        &mut self,
        host: &Host,
        inventory: &Inventory,
        mut drafts: Vec<FindingDraft>,
        targets: Vec<TargetDraft>,
    ) -> EndpointBatch {
        // Indexed by severity rank: info first, critical last.
        let mut open_counts = [0u32; 5];
        for draft in &drafts {
            if matches!(draft.status, "open" | "reopened") {
                open_counts[draft.severity as usize] += 1;
            }
        }
        let [info, low, medium, high, critical] = open_counts;
        let updated_at = drafts
            .iter()
            .map(|draft| draft.updated_at)
            .chain(targets.iter().map(|target| target.updated_at))
            .chain([host.created_at, host.last_seen_at.unwrap_or(host.created_at)])
            .max()
            .unwrap_or(host.created_at);

        let endpoint = json!({
            "id": host.id,
            "hostname": host.hostname,
            "ip": host.ip,
            "mac_address": host.mac_address,
            "operating_system": {
                "name": host.release.name,
                "version": host.os_version,
                "family": host.family().as_str(),
                "vendor": host.release.vendor,
                "architecture": host.arch.as_str(),
            },
            "agent_id": host.agent.as_ref().map(|(id, _)| id),
            "agent_version": host.agent.as_ref().map(|(_, version)| version),
            "created_at": format_timestamp(host.created_at),
            "updated_at": format_timestamp(updated_at),
            "tags": host.tags,
            "owner": host.owner.as_ref().map(|owner| json!({"name": owner.name, "email": owner.email})),
            "last_seen_at": host.last_seen_at.map(format_timestamp),
            "open_findings": {"critical": critical, "high": high, "medium": medium, "low": low, "info": info},
        });

        drafts.sort_by(|a, b| a.id.cmp(&b.id));
        let findings = drafts.iter().map(|draft| self.finding_record(host, inventory, draft, &targets)).collect();

        let finding_ids: Vec<Vec<String>> = {
            let mut ids = vec![Vec::new(); targets.len()];
            for draft in &drafts {
                if let Some(target) = draft.target {
                    ids[target].push(draft.id.clone());
                }
            }
            ids
        };
        let mut records: Vec<(String, Value)> = targets
            .iter()
            .zip(finding_ids)
            .map(|(target, finding_ids)| (target.id.clone(), target_record(host, target, finding_ids)))
            .collect();
        records.sort_by(|a, b| a.0.cmp(&b.0));

        EndpointBatch { endpoint, findings, targets: records.into_iter().map(|(_, record)| record).collect() }
    }

    fn finding_record(
        &mut self,
        host: &Host,
        inventory: &Inventory,
        draft: &FindingDraft,
        targets: &[TargetDraft],
    ) -> Value {
        let description_missing = chance(&mut self.rng, 7);
        let (finding_type, title, description, cve_id, cvss, epss, kev, subject, fixed_version, reference, package) =
            match draft.origin {
                Origin::Cve(hit) => {
                    let cve = &CVES[hit.cve];
                    let installed = &inventory.installations[hit.installation];
                    // Defender does not report EPSS.
                    let epss = (host.scanner != "defender")
                        .then(|| json!({"score": round5(cve.epss), "percentile": round5(epss_percentile(cve.epss))}));
                    (
                        "vulnerability",
                        cve.title,
                        cve.description,
                        Some(cve.id),
                        Some(json!({"version": "3.1", "base_score": self.cve_scores[hit.cve], "vector": cve.vector})),
                        epss,
                        cve.kev,
                        json!({
                            "type": installed.subject_type,
                            "vendor": installed.vendor,
                            "product": installed.product,
                            "version": installed.version,
                            "cpe": installed.cpe,
                            "purl": installed.purl,
                        }),
                        Some(hit.fixed_version),
                        cve.id,
                        (installed.product, installed.version),
                    )
                }
                Origin::Check(index) => {
                    let check = &CHECKS[index];
                    let version = check.version.unwrap_or(host.os_version);
                    (
                        check.finding_type,
                        check.title,
                        check.description,
                        None,
                        None,
                        None,
                        false,
                        json!({
                            "type": check.subject_type,
                            "vendor": check.vendor.unwrap_or(host.release.vendor),
                            "product": check.product,
                            "version": version,
                            "cpe": check.cpe,
                            "purl": Value::Null,
                        }),
                        check.fixed_version,
                        check.id,
                        (check.product, version),
                    )
                }
            };
        let scanner_finding_id = self.scanner_finding_id(host, reference, package);
        json!({
            "id": draft.id,
            "endpoint_id": host.id,
            "finding_type": finding_type,
            "title": title,
            "description": (!description_missing).then_some(description),
            "severity": draft.severity.as_str(),
            "status": draft.status,
            "cve_id": cve_id,
            "cvss": cvss,
            "epss": epss,
            "kev": kev,
            "subject": subject,
            "fixed_version": fixed_version,
            "source": {"scanner": host.scanner, "scanner_finding_id": scanner_finding_id},
            "remediation_target_id": draft.target.map(|target| targets[target].id.clone()),
            "suppression": draft.suppression.as_ref().map(|suppression| json!({
                "reason": suppression.reason,
                "note": suppression.note,
                "expires_at": suppression.expires_at.map(format_timestamp),
            })),
            "first_seen_at": format_timestamp(draft.first_seen),
            "last_seen_at": format_timestamp(draft.last_seen),
            "resolved_at": draft.resolved_at.map(format_timestamp),
            "created_at": format_timestamp(draft.first_seen),
            "updated_at": format_timestamp(draft.updated_at),
        })
    }

    /// Each scanner's own style of reference for a finding.
    fn scanner_finding_id(&mut self, host: &Host, reference: &str, (product, version): (&str, &str)) -> String {
        let host_ref = &host.scanner_host_ref;
        match host.scanner {
            "trivy" => format!("{reference}/{}@{version}", product.to_ascii_lowercase().replace(' ', "-")),
            "qualys" => format!("{host_ref}-{}", 100_000 + stable_hash(reference) % 280_000),
            "tenable" => format!("{}:{host_ref}", 10_000 + stable_hash(reference) % 190_000),
            "defender" => {
                let product = product.to_ascii_lowercase().replace(' ', "_");
                format!("{host_ref}_{product}_{version}_{reference}")
            }
            _ => format!("{host_ref}_{}", random_hex(&mut self.rng, 32)),
        }
    }
}

fn blocked_error(rng: &mut ChaCha8Rng, host: &Host) -> &'static str {
    let reasons = if host.role.is_server() { SERVER_BLOCKED_ERRORS } else { WORKSTATION_BLOCKED_ERRORS };
    pick_copy(rng, reasons)
}

fn target_record(host: &Host, target: &TargetDraft, finding_ids: Vec<String>) -> Value {
    let subject = &target.subject;
    json!({
        "id": target.id,
        "endpoint_id": host.id,
        "target_type": subject.target_type,
        "subject": {"type": subject.subject_type, "vendor": subject.vendor, "product": subject.product},
        "installed_version": subject.installed_version,
        "install_path": subject.install_path,
        "package_manager": subject.package_manager,
        "discovery_method": target.discovery_method,
        "status": target.status,
        "finding_ids": finding_ids,
        "scope_ids": target.scope_ids,
        "last_execution": target.last_execution.as_ref().map(|execution| json!({
            "status": execution.status,
            "efficacy": execution.efficacy,
            "started_at": format_timestamp(execution.started_at),
            "finished_at": execution.finished_at.map(format_timestamp),
            "error": execution.error,
        })),
        "due_at": target.due_at.map(format_timestamp),
        "remediated_at": target.remediated_at.map(format_timestamp),
        "created_at": format_timestamp(target.created_at),
        "updated_at": format_timestamp(target.updated_at),
    })
}

impl Generator {
    /// UUIDv7 whose timestamp is `created_at`, so id order is creation order;
    /// the random bits come from the seeded stream.
    fn new_id(&mut self, created_at: i64) -> String {
        let random_bytes: [u8; 10] = self.rng.r#gen();
        let millis = u64::try_from(created_at).unwrap_or(0).saturating_mul(1000);
        uuid::Builder::from_unix_timestamp_millis(millis, &random_bytes).into_uuid().to_string()
    }
}

// ---------------------------------------------------------------------------
// CVSS 3.1
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CvssError {
    #[error("not a CVSS 3.x vector: {0:?}")]
    NotCvss3(String),
    #[error("unknown or repeated metric {0:?}")]
    BadMetric(String),
    #[error("missing base metric {0}")]
    MissingMetric(&'static str),
}

/// The CVSS 3.1 base score of a vector such as
/// `CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H`, per the FIRST
/// specification (section 7.1 formulas, Appendix A round-up).
pub fn cvss31_base_score(vector: &str) -> Result<f64, CvssError> {
    let metrics = vector
        .strip_prefix("CVSS:3.1/")
        .or_else(|| vector.strip_prefix("CVSS:3.0/"))
        .ok_or_else(|| CvssError::NotCvss3(vector.to_string()))?;
    const NAMES: [&str; 8] = ["AV", "AC", "PR", "UI", "S", "C", "I", "A"];
    let mut values: [Option<&str>; 8] = [None; 8];
    for metric in metrics.split('/') {
        let bad = || CvssError::BadMetric(metric.to_string());
        let (name, value) = metric.split_once(':').ok_or_else(bad)?;
        let slot = NAMES.iter().position(|known| *known == name).ok_or_else(bad)?;
        if values[slot].replace(value).is_some() {
            return Err(bad());
        }
    }
    let get = |slot: usize| values[slot].ok_or(CvssError::MissingMetric(NAMES[slot]));
    let weight = |slot: usize, table: &[(&str, f64)]| -> Result<f64, CvssError> {
        let value = get(slot)?;
        table
            .iter()
            .find(|(key, _)| *key == value)
            .map(|(_, weight)| *weight)
            .ok_or_else(|| CvssError::BadMetric(format!("{}:{value}", NAMES[slot])))
    };
    let scope_changed = match get(4)? {
        "U" => false,
        "C" => true,
        other => return Err(CvssError::BadMetric(format!("S:{other}"))),
    };
    let attack_vector = weight(0, &[("N", 0.85), ("A", 0.62), ("L", 0.55), ("P", 0.2)])?;
    let attack_complexity = weight(1, &[("L", 0.77), ("H", 0.44)])?;
    let privileges = if scope_changed {
        weight(2, &[("N", 0.85), ("L", 0.68), ("H", 0.5)])?
    } else {
        weight(2, &[("N", 0.85), ("L", 0.62), ("H", 0.27)])?
    };
    let user_interaction = weight(3, &[("N", 0.85), ("R", 0.62)])?;
    let cia = [("H", 0.56), ("L", 0.22), ("N", 0.0)];
    let (confidentiality, integrity, availability) = (weight(5, &cia)?, weight(6, &cia)?, weight(7, &cia)?);

    let impact_sub_score = 1.0 - (1.0 - confidentiality) * (1.0 - integrity) * (1.0 - availability);
    let impact = if scope_changed {
        7.52 * (impact_sub_score - 0.029) - 3.25 * (impact_sub_score - 0.02).powi(15)
    } else {
        6.42 * impact_sub_score
    };
    let exploitability = 8.22 * attack_vector * attack_complexity * privileges * user_interaction;
    if impact <= 0.0 {
        return Ok(0.0);
    }
    let raw = if scope_changed { 1.08 * (impact + exploitability) } else { impact + exploitability };
    Ok(roundup(raw.min(10.0)))
}

/// CVSS 3.1 Appendix A: the smallest one-decimal number >= the input, computed
/// on integers to avoid floating point artefacts.
fn roundup(value: f64) -> f64 {
    let scaled = (value * 100_000.0).round() as i64;
    if scaled % 10_000 == 0 { scaled as f64 / 100_000.0 } else { (scaled / 10_000 + 1) as f64 / 10.0 }
}

/// An EPSS score's approximate percentile among all scored CVEs (the score
/// distribution is very skewed: 0.01 is already above the 80th percentile).
fn epss_percentile(score: f64) -> f64 {
    const CURVE: [(f64, f64); 10] = [
        (0.0, 0.0),
        (0.0004, 0.08),
        (0.001, 0.40),
        (0.003, 0.68),
        (0.01, 0.84),
        (0.05, 0.93),
        (0.2, 0.96),
        (0.5, 0.98),
        (0.9, 0.996),
        (1.0, 1.0),
    ];
    for pair in CURVE.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if score <= x1 {
            return y0 + (y1 - y0) * (score - x0) / (x1 - x0);
        }
    }
    1.0
}

fn round5(value: f64) -> f64 {
    (value * 100_000.0).round() / 100_000.0
}

// ---------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------

/// Compares package versions the way rpm and dpkg broadly do: digit runs
/// numerically, other runs as text, a prefix sorts first. Exact for every
/// version in the catalogue (epochs, `~debNuM`, `.el9_4`, `p1` suffixes).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let (mut left, mut right) = (version_runs(a), version_runs(b));
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    // A number is newer than text (rpmvercmp).
                    (Ok(_), Err(_)) => Ordering::Greater,
                    (Err(_), Ok(_)) => Ordering::Less,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// Splits a version into maximal runs of digits and of non-digits.
fn version_runs(version: &str) -> impl Iterator<Item = &str> {
    let mut rest = version;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let digit = first.is_ascii_digit();
        let end = rest.find(|c: char| c.is_ascii_digit() != digit).unwrap_or(rest.len());
        let (run, tail) = rest.split_at(end);
        rest = tail;
        Some(run)
    })
}

// ---------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// Parses exactly the format [`format_timestamp`] writes: whole seconds in UTC.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let utc_seconds = text.len() == 20 && text.ends_with('Z');
    let instant = Timestamp::parse(text).filter(|_| utc_seconds)?;
    (instant.0 % 1_000_000_000 == 0).then_some(instant.0 / 1_000_000_000)
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// Lowercase letters, digits and single hyphens; `demo` when nothing is left.
fn sanitize_prefix(raw: &str) -> String {
    let mut prefix = String::new();
    for c in raw.trim().chars() {
        if c.is_ascii_alphanumeric() {
            prefix.push(c.to_ascii_lowercase());
        } else if !prefix.is_empty() && !prefix.ends_with('-') {
            prefix.push('-');
        }
    }
    let prefix: String = prefix.trim_end_matches('-').chars().take(12).collect();
    let prefix = prefix.trim_end_matches('-');
    if prefix.is_empty() { "demo".to_string() } else { prefix.to_string() }
}

fn between(rng: &mut ChaCha8Rng, low: i64, high: i64) -> i64 {
    if high <= low { low } else { rng.gen_range(low..=high) }
}

fn chance(rng: &mut ChaCha8Rng, percent: u32) -> bool {
    rng.gen_range(0..100) < percent
}

fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    items.choose(rng).expect("catalogue lists are never empty")
}

fn pick_copy<T: Copy>(rng: &mut ChaCha8Rng, items: &[T]) -> T {
    *pick(rng, items)
}

fn pick_weighted<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T], weight: impl Fn(&T) -> u32) -> &'a T {
    let total: u32 = items.iter().map(&weight).sum();
    let mut ticket = rng.gen_range(0..total.max(1));
    for item in items {
        let item_weight = weight(item);
        if ticket < item_weight {
            return item;
        }
        ticket -= item_weight;
    }
    items.last().expect("weighted choices are never empty")
}

fn random_hex(rng: &mut ChaCha8Rng, digits: usize) -> String {
    (0..digits).map(|_| char::from(b"0123456789abcdef"[rng.gen_range(0..16)])).collect()
}

/// FNV-1a: a stable hash (unlike `DefaultHasher`, fixed across Rust releases)
/// for scanner check numbers that must not vary between runs.
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    const PREFIX: &str = "acme";
    /// Several seeds, so that coverage checks do not pass by luck of one seed.
    const SEEDS: [u64; 3] = [1, 2, 42];

    struct Dataset {
        scopes: Vec<Value>,
        endpoints: Vec<Value>,
        findings: Vec<Value>,
        targets: Vec<Value>,
    }

    fn generate(seed: u64, spec: DemoSpec) -> Dataset {
        let mut generator = Generator::new(seed, spec, DEMO_ANCHOR_UNIX, PREFIX);
        let scopes = generator.scopes();
        let (mut endpoints, mut findings, mut targets) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(batch) = generator.next_endpoint() {
            endpoints.push(batch.endpoint);
            findings.extend(batch.findings);
            targets.extend(batch.targets);
        }
        Dataset { scopes, endpoints, findings, targets }
    }

    fn demo_sets() -> Vec<Dataset> {
        SEEDS.iter().map(|&seed| generate(seed, DemoSpec::DEMO)).collect()
    }

    fn text<'a>(record: &'a Value, field: &str) -> &'a str {
        record[field].as_str().unwrap_or_else(|| panic!("{field} is not a string in {record}"))
    }

    fn optional_text<'a>(record: &'a Value, field: &str) -> Option<&'a str> {
        match &record[field] {
            Value::Null => None,
            Value::String(value) => Some(value),
            other => panic!("{field} is neither null nor a string: {other}"),
        }
    }

    fn time(record: &Value, field: &str) -> i64 {
        let value = text(record, field);
        parse_timestamp(value).unwrap_or_else(|| panic!("{field} = {value:?} is not an RFC 3339 UTC timestamp"))
    }

    fn optional_time(record: &Value, field: &str) -> Option<i64> {
        optional_text(record, field)
            .map(|value| parse_timestamp(value).unwrap_or_else(|| panic!("{field} = {value:?} is not a timestamp")))
    }

    fn strings<'a>(record: &'a Value, field: &str) -> Vec<&'a str> {
        record[field]
            .as_array()
            .unwrap_or_else(|| panic!("{field} is not an array in {record}"))
            .iter()
            .map(|value| value.as_str().unwrap_or_else(|| panic!("{field} holds a non-string: {value}")))
            .collect()
    }

    fn keys(record: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> = record
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {record}"))
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        keys
    }

    fn sorted(mut names: Vec<&'static str>) -> Vec<&'static str> {
        names.sort_unstable();
        names
    }

    fn uuid_millis(id: &str) -> u64 {
        let uuid = uuid::Uuid::parse_str(id).unwrap_or_else(|_| panic!("{id} is not a UUID"));
        assert_eq!(uuid.get_version_num(), 7, "{id} is not a UUIDv7");
        assert_eq!(id, uuid.hyphenated().to_string(), "{id} is not lowercase hyphenated");
        let (seconds, nanos) = uuid.get_timestamp().expect("v7 ids carry a timestamp").to_unix();
        seconds * 1000 + u64::from(nanos) / 1_000_000
    }

    // --- building blocks ---------------------------------------------------

    #[test]
    fn cvss_scores_match_the_specification() {
        let cases = [
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0),
            ("CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H", 7.8),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H", 8.8),
            ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:H/A:N", 5.9),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:H/I:H/A:H", 9.6),
            ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:C/C:H/I:H/A:H", 9.0),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1),
            ("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H", 9.9),
            ("CVSS:3.1/AV:N/AC:L/PR:H/UI:N/S:U/C:H/I:H/A:H", 7.2),
            ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:L/A:N", 3.7),
            ("CVSS:3.1/AV:P/AC:H/PR:H/UI:R/S:U/C:L/I:N/A:N", 1.6),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0),
            ("CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8),
        ];
        for (vector, expected) in cases {
            assert_eq!(cvss31_base_score(vector), Ok(expected), "{vector}");
        }
        assert_eq!(Severity::from_score(9.0), Severity::Critical);
        assert_eq!(Severity::from_score(8.9), Severity::High);
        assert_eq!(Severity::from_score(4.0), Severity::Medium);
        assert_eq!(Severity::from_score(3.9), Severity::Low);
        assert_eq!(Severity::from_score(0.0), Severity::Info);
    }

    #[test]
    fn cvss_rejects_malformed_vectors() {
        let bad = [
            "AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
            "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
            "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H",
            "CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
            "CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
            "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:X/C:H/I:H/A:H",
            "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/E:P",
        ];
        for vector in bad {
            assert!(cvss31_base_score(vector).is_err(), "{vector} was accepted");
        }
    }

    #[test]
    fn timestamps_format_and_parse_back() {
        assert_eq!(format_timestamp(DEMO_ANCHOR_UNIX), "2026-11-01T00:00:00Z");
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_timestamp(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(format_timestamp(951_825_600), "2000-02-29T12:00:00Z");
        assert_eq!(
            parse_timestamp("2026-11-22T05:39:42Z"),
            Some(DEMO_ANCHOR_UNIX + 21 * DAY + 5 * HOUR + 39 * 60 + 42)
        );
        let mut moment = 0;
        while moment < 4_102_444_800 {
            assert_eq!(parse_timestamp(&format_timestamp(moment)), Some(moment), "{moment}");
            moment += 7_919 * 97;
        }
        for bad in [
            "2026-02-29T00:00:00Z",
            "2026-11-01 00:00:00Z",
            "2026-11-01T00:00:00+00:00",
            "2026-13-01T00:00:00Z",
            "2026-11-01T24:00:00Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn versions_compare_like_package_managers() {
        let ascending = [
            ("116.0.5845.179", "116.0.5845.187"),
            ("10.0.22631.3155", "10.0.22631.3880"),
            ("1:8.9p1-3ubuntu0.4", "1:8.9p1-3ubuntu0.10"),
            ("3.0.11-1~deb12u2", "3.0.13-1~deb12u1"),
            ("8.7p1-38.el9", "8.7p1-38.el9_4.1"),
            ("5.10.93-87.444.amzn2", "5.10.102-99.473.amzn2"),
            ("0.112-26.amzn2", "0.112-26.amzn2.1"),
            ("v0.15.0", "v0.17.0"),
            ("2.0", "2.14.1"),
            ("24.07", "24.08"),
            ("23.003.20244", "23.006.20320"),
        ];
        for (older, newer) in ascending {
            assert_eq!(compare_versions(older, newer), Ordering::Less, "{older} < {newer}");
            assert_eq!(compare_versions(newer, older), Ordering::Greater, "{newer} > {older}");
        }
        assert_eq!(compare_versions("3.0.2-0ubuntu1.10", "3.0.2-0ubuntu1.10"), Ordering::Equal);
    }

    #[test]
    fn glob_patterns_match_cpes() {
        assert!(glob_match("cpe:2.3:a:google:chrome:*", "cpe:2.3:a:google:chrome:116.0.5845.179:*:*:*:*:*:*:*"));
        assert!(!glob_match("cpe:2.3:a:google:chrome:*", "cpe:2.3:a:mozilla:firefox:117.0:*:*:*:*:*:*:*"));
        assert!(glob_match("*:log4j:*", "cpe:2.3:a:apache:log4j:2.14.1:*:*:*:*:*:*:*"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn hostname_prefixes_are_sanitized() {
        assert_eq!(sanitize_prefix("Acme Corp"), "acme-corp");
        assert_eq!(sanitize_prefix("  --Ünïcode!! "), "n-code");
        assert_eq!(sanitize_prefix("***"), "demo");
        assert_eq!(sanitize_prefix("averyveryverylongname"), "averyveryver");
    }

    // --- catalogue ---------------------------------------------------------

    #[test]
    fn catalogue_is_real_and_consistent() {
        let distinct: BTreeSet<&str> = CVES.iter().map(|cve| cve.id).collect();
        assert!(distinct.len() >= 40, "only {} distinct CVEs", distinct.len());
        for required in [
            "CVE-2023-4863",
            "CVE-2021-44228",
            "CVE-2024-3094",
            "CVE-2024-6387",
            "CVE-2021-4034",
            "CVE-2022-0847",
            "CVE-2023-4911",
            "CVE-2023-38545",
            "CVE-2023-23397",
            "CVE-2023-28252",
            "CVE-2023-41064",
            "CVE-2023-5678",
            "CVE-2023-48795",
        ] {
            assert!(distinct.contains(required), "{required} missing");
        }
        let mut catalogue_severities = BTreeSet::new();
        for cve in CVES {
            let (year, number) = cve.id.strip_prefix("CVE-").and_then(|rest| rest.split_once('-')).expect("CVE-YYYY-N");
            assert!(year.len() == 4 && number.len() >= 4, "{}", cve.id);
            assert!(year.chars().chain(number.chars()).all(|c| c.is_ascii_digit()), "{}", cve.id);
            let score = cvss31_base_score(cve.vector).unwrap_or_else(|error| panic!("{}: {error}", cve.id));
            catalogue_severities.insert(Severity::from_score(score));
            assert!((0.0..=1.0).contains(&cve.epss), "{}", cve.id);
            assert!(!cve.title.is_empty() && !cve.description.is_empty() && !cve.fixes.is_empty(), "{}", cve.id);
            // The same CVE listed for several products agrees on its facts.
            for other in CVES.iter().filter(|other| other.id == cve.id) {
                assert_eq!((other.vector, other.kev), (cve.vector, cve.kev), "{}", cve.id);
            }
            // Every fix applies to a real stream of the product, and some
            // version the fleet can have is vulnerable to it.
            for fix in cve.fixes {
                let versions: Vec<&str> = match PRODUCTS.iter().find(|product| product.key == cve.product) {
                    Some(product) => product
                        .builds
                        .iter()
                        .filter(|build| build.stream == fix.stream)
                        .flat_map(|build| build.versions.iter().copied())
                        .collect(),
                    None => OS_RELEASES
                        .iter()
                        .filter(|release| release.key == fix.stream)
                        .filter(|release| release.os_product.as_ref().is_some_and(|os| os.key == cve.product))
                        .flat_map(|release| release.versions.iter().copied())
                        .collect(),
                };
                assert!(!versions.is_empty(), "{} has a fix for unknown stream {}", cve.id, fix.stream);
                assert!(
                    versions.iter().any(|version| applicable_fix(cve, fix.stream, version).is_some()),
                    "{} on {}: no catalogued version is vulnerable",
                    cve.id,
                    fix.stream
                );
            }
        }
        let all_severities = [Severity::Critical, Severity::High, Severity::Medium, Severity::Low];
        assert!(all_severities.iter().all(|severity| catalogue_severities.contains(severity)));

        for key in BUNDLED_LIBRARIES {
            let product = catalogue_product(key);
            for family in [Family::MacOs, Family::Windows, Family::Linux] {
                assert!(
                    product.builds.iter().any(|build| build.bundled && build.families.contains(&family)),
                    "{key} cannot be bundled on {family:?}"
                );
            }
        }
        for role in
            [Role::MacLaptop, Role::WindowsWorkstation, Role::WindowsServer, Role::LinuxServer, Role::LinuxWorkstation]
        {
            for item in catalogue::inventory(role) {
                catalogue_product(item.product);
            }
        }
        let check_ids: BTreeSet<&str> = CHECKS.iter().map(|check| check.id).collect();
        assert_eq!(check_ids.len(), CHECKS.len(), "check ids are unique");
        for check in CHECKS {
            assert!(FINDING_TYPES.contains(&check.finding_type) && check.finding_type != "vulnerability");
            assert!(matches!(check.severity, Severity::Medium | Severity::Low | Severity::Info), "{}", check.id);
            assert!(SUBJECT_TYPES.contains(&check.subject_type) && !check.product.is_empty(), "{}", check.id);
        }
        for template in SCOPE_TEMPLATES {
            assert!(SCOPE_STATUSES.contains(&template.status));
            assert!(template.subject_types.iter().all(|value| SUBJECT_TYPES.contains(value)));
            assert!(template.os_families.iter().all(|value| OS_FAMILIES.contains(value)));
            assert!(template.finding_types.iter().all(|value| FINDING_TYPES.contains(value)));
        }
    }

    // --- the generated data set --------------------------------------------

    #[test]
    fn same_arguments_give_identical_output_and_seeds_differ() {
        let serialize = |data: &Dataset| {
            serde_json::to_string(&(&data.scopes, &data.endpoints, &data.findings, &data.targets))
                .expect("JSON values serialize")
        };
        let first = generate(7, DemoSpec::DEMO);
        let again = generate(7, DemoSpec::DEMO);
        assert_eq!(serialize(&first), serialize(&again));

        // Calling scopes() is optional and does not shift the endpoints.
        let mut without_scopes = Generator::new(7, DemoSpec::DEMO, DEMO_ANCHOR_UNIX, PREFIX);
        let endpoint = without_scopes.next_endpoint().expect("an endpoint").endpoint;
        assert_eq!(endpoint, first.endpoints[0]);

        let other = generate(8, DemoSpec::DEMO);
        let ids = |data: &Dataset| -> BTreeSet<String> {
            data.scopes
                .iter()
                .chain(&data.endpoints)
                .chain(&data.findings)
                .chain(&data.targets)
                .map(|record| text(record, "id").to_string())
                .collect()
        };
        assert!(ids(&first).is_disjoint(&ids(&other)));
        assert_ne!(serialize(&first), serialize(&other));
    }

    #[test]
    fn sizes_follow_the_spec() {
        for data in demo_sets() {
            assert_eq!(data.endpoints.len(), 100);
            assert_eq!(data.findings.len(), 1000, "findings_per_endpoint is an exact average");
            assert!((5..=8).contains(&data.scopes.len()));
            let mut per_endpoint: BTreeMap<&str, usize> = BTreeMap::new();
            for finding in &data.findings {
                *per_endpoint.entry(text(finding, "endpoint_id")).or_default() += 1;
            }
            let counts: BTreeSet<usize> = per_endpoint.values().copied().collect();
            assert!(counts.len() > 3, "finding counts vary between endpoints: {counts:?}");
        }
        let dense = generate(3, DemoSpec { endpoints: 30, findings_per_endpoint: 100 });
        assert_eq!(dense.findings.len(), 3000);
        let empty = generate(3, DemoSpec { endpoints: 0, findings_per_endpoint: 10 });
        assert!(empty.endpoints.is_empty() && empty.findings.is_empty() && !empty.scopes.is_empty());
        let bare = generate(3, DemoSpec { endpoints: 5, findings_per_endpoint: 0 });
        assert_eq!((bare.endpoints.len(), bare.findings.len(), bare.targets.len()), (5, 0, 0));
    }

    #[test]
    fn every_contract_field_is_present() {
        let endpoint_fields = sorted(vec![
            "id",
            "hostname",
            "ip",
            "mac_address",
            "operating_system",
            "agent_id",
            "agent_version",
            "created_at",
            "updated_at",
            "tags",
            "owner",
            "last_seen_at",
            "open_findings",
        ]);
        let scope_fields = sorted(vec![
            "id",
            "name",
            "description",
            "status",
            "subject_filter",
            "endpoint_filter",
            "finding_filter",
            "sla_days",
            "created_at",
            "updated_at",
        ]);
        let finding_fields = sorted(vec![
            "id",
            "endpoint_id",
            "finding_type",
            "title",
            "description",
            "severity",
            "status",
            "cve_id",
            "cvss",
            "epss",
            "kev",
            "subject",
            "fixed_version",
            "source",
            "remediation_target_id",
            "suppression",
            "first_seen_at",
            "last_seen_at",
            "resolved_at",
            "created_at",
            "updated_at",
        ]);
        let target_fields = sorted(vec![
            "id",
            "endpoint_id",
            "target_type",
            "subject",
            "installed_version",
            "install_path",
            "package_manager",
            "discovery_method",
            "status",
            "finding_ids",
            "scope_ids",
            "last_execution",
            "due_at",
            "remediated_at",
            "created_at",
            "updated_at",
        ]);
        let data = generate(1, DemoSpec::DEMO);
        for scope in &data.scopes {
            assert_eq!(keys(scope), scope_fields);
            assert_eq!(
                keys(&scope["subject_filter"]),
                sorted(vec!["subject_types", "vendors", "products", "cpe_patterns"])
            );
            assert_eq!(
                keys(&scope["endpoint_filter"]),
                sorted(vec!["os_families", "endpoint_ids", "has_agent", "tags"])
            );
            assert_eq!(
                keys(&scope["finding_filter"]),
                sorted(vec!["finding_types", "min_severity", "min_cvss_score", "kev_only"])
            );
            assert_eq!(keys(&scope["sla_days"]), sorted(vec!["critical", "high", "medium", "low"]));
            for (filter, field) in [
                ("subject_filter", "subject_types"),
                ("subject_filter", "vendors"),
                ("subject_filter", "products"),
                ("subject_filter", "cpe_patterns"),
                ("endpoint_filter", "os_families"),
                ("endpoint_filter", "endpoint_ids"),
                ("endpoint_filter", "tags"),
                ("finding_filter", "finding_types"),
            ] {
                strings(&scope[filter], field);
            }
            assert!(scope["finding_filter"]["kev_only"].is_boolean());
            assert!(
                scope["endpoint_filter"]["has_agent"].is_boolean() || scope["endpoint_filter"]["has_agent"].is_null()
            );
            let min_cvss = &scope["finding_filter"]["min_cvss_score"];
            assert!(min_cvss.is_null() || min_cvss.as_f64().is_some_and(|score| (0.0..=10.0).contains(&score)));
        }
        for endpoint in &data.endpoints {
            assert_eq!(keys(endpoint), endpoint_fields);
            assert_eq!(
                keys(&endpoint["operating_system"]),
                sorted(vec!["name", "version", "family", "vendor", "architecture"])
            );
            assert_eq!(keys(&endpoint["open_findings"]), sorted(vec!["critical", "high", "medium", "low", "info"]));
            strings(endpoint, "tags");
            if !endpoint["owner"].is_null() {
                assert_eq!(keys(&endpoint["owner"]), sorted(vec!["name", "email"]));
            }
        }
        for finding in &data.findings {
            assert_eq!(keys(finding), finding_fields);
            assert_eq!(keys(&finding["subject"]), sorted(vec!["type", "vendor", "product", "version", "cpe", "purl"]));
            assert_eq!(keys(&finding["source"]), sorted(vec!["scanner", "scanner_finding_id"]));
            assert!(finding["kev"].is_boolean());
            if !finding["cvss"].is_null() {
                assert_eq!(keys(&finding["cvss"]), sorted(vec!["version", "base_score", "vector"]));
            }
            if !finding["epss"].is_null() {
                assert_eq!(keys(&finding["epss"]), sorted(vec!["score", "percentile"]));
            }
            if !finding["suppression"].is_null() {
                assert_eq!(keys(&finding["suppression"]), sorted(vec!["reason", "note", "expires_at"]));
            }
        }
        for target in &data.targets {
            assert_eq!(keys(target), target_fields);
            assert_eq!(keys(&target["subject"]), sorted(vec!["type", "vendor", "product"]));
            strings(target, "finding_ids");
            strings(target, "scope_ids");
            if !target["last_execution"].is_null() {
                assert_eq!(
                    keys(&target["last_execution"]),
                    sorted(vec!["status", "efficacy", "started_at", "finished_at", "error"])
                );
            }
        }
    }

    #[test]
    fn enum_values_come_from_the_contract() {
        for data in demo_sets() {
            for scope in &data.scopes {
                assert!(SCOPE_STATUSES.contains(&text(scope, "status")));
                assert!(strings(&scope["subject_filter"], "subject_types").iter().all(|v| SUBJECT_TYPES.contains(v)));
                assert!(strings(&scope["endpoint_filter"], "os_families").iter().all(|v| OS_FAMILIES.contains(v)));
                assert!(strings(&scope["finding_filter"], "finding_types").iter().all(|v| FINDING_TYPES.contains(v)));
                if let Some(min) = optional_text(&scope["finding_filter"], "min_severity") {
                    assert!(SEVERITIES.contains(&min));
                }
            }
            for endpoint in &data.endpoints {
                assert!(OS_FAMILIES.contains(&text(&endpoint["operating_system"], "family")));
                assert!(["x86_64", "arm64"].contains(&text(&endpoint["operating_system"], "architecture")));
            }
            for finding in &data.findings {
                assert!(FINDING_TYPES.contains(&text(finding, "finding_type")));
                assert!(SEVERITIES.contains(&text(finding, "severity")));
                assert!(FINDING_STATUSES.contains(&text(finding, "status")));
                assert!(SUBJECT_TYPES.contains(&text(&finding["subject"], "type")));
                assert!(SCANNERS.contains(&text(&finding["source"], "scanner")));
                if !finding["suppression"].is_null() {
                    assert!(SUPPRESSION_REASONS.contains(&text(&finding["suppression"], "reason")));
                }
                if !finding["cvss"].is_null() {
                    assert!(["3.1", "4.0"].contains(&text(&finding["cvss"], "version")));
                }
            }
            for target in &data.targets {
                assert!(TARGET_TYPES.contains(&text(target, "target_type")));
                assert!(TARGET_STATUSES.contains(&text(target, "status")));
                assert!(DISCOVERY_METHODS.contains(&text(target, "discovery_method")));
                assert!(SUBJECT_TYPES.contains(&text(&target["subject"], "type")));
                if let Some(manager) = optional_text(target, "package_manager") {
                    assert!(PACKAGE_MANAGERS.contains(&manager), "{manager}");
                }
                if !target["last_execution"].is_null() {
                    assert!(EXECUTION_STATUSES.contains(&text(&target["last_execution"], "status")));
                    assert!(EXECUTION_EFFICACIES.contains(&text(&target["last_execution"], "efficacy")));
                }
            }
        }
    }

    #[test]
    fn the_demo_covers_every_state_and_category() {
        for (seed, data) in SEEDS.iter().zip(demo_sets()) {
            let seen = |records: &[Value], value: &dyn Fn(&Value) -> Option<String>| -> BTreeSet<String> {
                records.iter().filter_map(value).collect()
            };
            let expect_all = |name: &str, wanted: &[&str], seen: BTreeSet<String>| {
                let missing: Vec<&&str> = wanted.iter().filter(|value| !seen.contains(**value)).collect();
                assert!(missing.is_empty(), "seed {seed}: {name} never occurs: {missing:?}");
            };
            let field = |name: &'static str| move |record: &Value| optional_text(record, name).map(str::to_string);
            let execution = |name: &'static str| {
                move |record: &Value| optional_text(&record["last_execution"], name).map(str::to_string)
            };
            expect_all("scope status", SCOPE_STATUSES, seen(&data.scopes, &field("status")));
            expect_all("finding status", FINDING_STATUSES, seen(&data.findings, &field("status")));
            expect_all("severity", SEVERITIES, seen(&data.findings, &field("severity")));
            expect_all("finding type", FINDING_TYPES, seen(&data.findings, &field("finding_type")));
            expect_all(
                "suppression reason",
                SUPPRESSION_REASONS,
                seen(&data.findings, &|record: &Value| {
                    optional_text(&record["suppression"], "reason").map(str::to_string)
                }),
            );
            expect_all("target status", TARGET_STATUSES, seen(&data.targets, &field("status")));
            expect_all("target type", TARGET_TYPES, seen(&data.targets, &field("target_type")));
            expect_all("discovery method", DISCOVERY_METHODS, seen(&data.targets, &field("discovery_method")));
            expect_all(
                "execution status",
                EXECUTION_STATUSES,
                seen(&data.targets, &|record: &Value| {
                    record["last_execution"].is_object().then(|| execution("status")(record)).flatten()
                }),
            );
            expect_all(
                "execution efficacy",
                EXECUTION_EFFICACIES,
                seen(&data.targets, &|record: &Value| {
                    record["last_execution"].is_object().then(|| execution("efficacy")(record)).flatten()
                }),
            );
            expect_all(
                "OS family",
                &["macos", "windows", "linux"],
                seen(&data.endpoints, &|record: &Value| {
                    optional_text(&record["operating_system"], "family").map(str::to_string)
                }),
            );

            // Open is the most common finding status.
            let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
            for finding in &data.findings {
                *by_status.entry(text(finding, "status")).or_default() += 1;
            }
            let open = by_status["open"];
            assert!(by_status.values().all(|&count| count <= open), "seed {seed}: {by_status:?}");
        }
    }

    #[test]
    fn the_fleet_mix_is_plausible() {
        for data in demo_sets() {
            let family_share = |family: &str| {
                data.endpoints.iter().filter(|e| text(&e["operating_system"], "family") == family).count()
            };
            let (macos, windows, linux) = (family_share("macos"), family_share("windows"), family_share("linux"));
            assert_eq!((macos, windows, linux), (30, 45, 25), "every 100 endpoints have the catalogue's mix");
            let macs: Vec<&Value> =
                data.endpoints.iter().filter(|e| text(&e["operating_system"], "family") == "macos").collect();
            let apple_silicon = macs.iter().filter(|e| text(&e["operating_system"], "architecture") == "arm64").count();
            assert!(apple_silicon * 10 >= macs.len() * 6, "Macs are mostly Apple silicon");
            let with_agent = data.endpoints.iter().filter(|e| !e["agent_id"].is_null()).count();
            assert!((72..=96).contains(&with_agent), "{with_agent} agents");
            let cve_findings = data.findings.iter().filter(|f| !f["cve_id"].is_null()).count();
            assert!(cve_findings * 100 >= data.findings.len() * 60, "most findings are CVEs");
        }
    }

    #[test]
    fn every_reference_resolves_and_back_references_agree() {
        for data in demo_sets() {
            let endpoints: BTreeMap<&str, &Value> = data.endpoints.iter().map(|e| (text(e, "id"), e)).collect();
            let findings: BTreeMap<&str, &Value> = data.findings.iter().map(|f| (text(f, "id"), f)).collect();
            let targets: BTreeMap<&str, &Value> = data.targets.iter().map(|t| (text(t, "id"), t)).collect();
            let scopes: BTreeMap<&str, &Value> = data.scopes.iter().map(|s| (text(s, "id"), s)).collect();

            for finding in &data.findings {
                assert!(endpoints.contains_key(text(finding, "endpoint_id")));
                if let Some(target_id) = optional_text(finding, "remediation_target_id") {
                    let target = targets.get(target_id).unwrap_or_else(|| panic!("dangling target {target_id}"));
                    assert!(strings(target, "finding_ids").contains(&text(finding, "id")), "back-reference");
                    assert_eq!(text(target, "endpoint_id"), text(finding, "endpoint_id"));
                } else {
                    // Every CVE finding has the work that fixes it.
                    assert!(finding["cve_id"].is_null(), "CVE finding without a target");
                }
            }
            for target in &data.targets {
                assert!(endpoints.contains_key(text(target, "endpoint_id")));
                let finding_ids = strings(target, "finding_ids");
                assert!(!finding_ids.is_empty());
                for finding_id in &finding_ids {
                    let finding = findings.get(finding_id).unwrap_or_else(|| panic!("dangling finding {finding_id}"));
                    assert_eq!(optional_text(finding, "remediation_target_id"), Some(text(target, "id")));
                    assert_eq!(text(finding, "endpoint_id"), text(target, "endpoint_id"));
                    assert_eq!(text(&finding["subject"], "vendor"), text(&target["subject"], "vendor"));
                    assert_eq!(text(&finding["subject"], "product"), text(&target["subject"], "product"));
                    if let Some(installed) = optional_text(target, "installed_version") {
                        assert_eq!(text(&finding["subject"], "version"), installed);
                    }
                }
                for scope_id in strings(target, "scope_ids") {
                    let scope = scopes.get(scope_id).unwrap_or_else(|| panic!("dangling scope {scope_id}"));
                    assert!(
                        ["active", "paused"].contains(&text(scope, "status")),
                        "archived scopes put nothing in motion"
                    );
                }
            }
            for scope in &data.scopes {
                for endpoint_id in strings(&scope["endpoint_filter"], "endpoint_ids") {
                    assert!(endpoints.contains_key(endpoint_id));
                }
            }
        }
    }

    #[test]
    fn targets_follow_their_lifecycle() {
        for data in demo_sets() {
            let scopes: BTreeMap<&str, &Value> = data.scopes.iter().map(|s| (text(s, "id"), s)).collect();
            let findings: BTreeMap<&str, &Value> = data.findings.iter().map(|f| (text(f, "id"), f)).collect();
            let endpoints: BTreeMap<&str, &Value> = data.endpoints.iter().map(|e| (text(e, "id"), e)).collect();
            for target in &data.targets {
                let status = text(target, "status");
                let scope_ids = strings(target, "scope_ids");
                let execution = &target["last_execution"];
                let run = optional_text(execution, "status");
                let efficacy = optional_text(execution, "efficacy");
                let allowed = match status {
                    "identified" | "actionable" | "obsolete" => run.is_none(),
                    "queued" => {
                        matches!(run, None | Some("failed" | "preflight_failed" | "blocked"))
                    }
                    "pending_approval" => run == Some("pending_approval"),
                    "in_progress" => matches!(run, Some("running" | "pending")),
                    "verifying" => run == Some("succeeded") && efficacy == Some("pending"),
                    "remediated" => run == Some("succeeded") && efficacy == Some("verified_fixed"),
                    "blocked" => run == Some("blocked"),
                    "failed" => {
                        matches!(run, Some("failed" | "preflight_failed"))
                            || (run == Some("succeeded") && efficacy == Some("verified_not_fixed"))
                    }
                    "rejected" => run == Some("rejected"),
                    other => panic!("unknown status {other}"),
                };
                assert!(allowed, "target {status} with execution {execution}");
                if execution.is_object() {
                    let unfinished = matches!(run, Some("pending" | "pending_approval" | "running"));
                    assert_eq!(execution["finished_at"].is_null(), unfinished, "{execution}");
                    let errored = matches!(run, Some("failed" | "preflight_failed" | "blocked"))
                        || efficacy == Some("verified_not_fixed");
                    assert_eq!(execution["error"].is_string(), errored, "{execution}");
                    let endpoint = endpoints[text(target, "endpoint_id")];
                    if endpoint["agent_id"].is_null() {
                        assert!(matches!(run, Some("blocked" | "rejected")), "nothing runs without an agent");
                    }
                }
                // Work beyond "actionable" needs an active scope behind it.
                let has_active = scope_ids.iter().any(|id| text(scopes[id], "status") == "active");
                if !matches!(status, "identified" | "actionable" | "obsolete") {
                    assert!(has_active, "{status} target without an active scope");
                }
                if status == "identified" {
                    assert!(scope_ids.is_empty());
                }
                if scope_ids.is_empty() {
                    assert!(target["due_at"].is_null());
                }
                assert_eq!(target["remediated_at"].is_string(), status == "remediated");
                for finding_id in strings(target, "finding_ids") {
                    let finding_status = text(findings[finding_id], "status");
                    match status {
                        "remediated" | "obsolete" => assert_eq!(finding_status, "resolved"),
                        _ => assert_ne!(finding_status, "resolved", "{status} target with a resolved finding"),
                    }
                }
            }
        }
    }

    #[test]
    fn scope_ids_are_exactly_the_matching_scopes() {
        // Recomputes the filters independently of the generator's fast path.
        let data = generate(1, DemoSpec::DEMO);
        let endpoints: BTreeMap<&str, &Value> = data.endpoints.iter().map(|e| (text(e, "id"), e)).collect();
        let findings: BTreeMap<&str, &Value> = data.findings.iter().map(|f| (text(f, "id"), f)).collect();
        for target in data.targets.iter().filter(|t| text(t, "status") != "identified") {
            let endpoint = endpoints[text(target, "endpoint_id")];
            let members: Vec<&Value> = strings(target, "finding_ids").iter().map(|id| findings[id]).collect();
            let expected: Vec<&str> = data
                .scopes
                .iter()
                .filter(|scope| ["active", "paused"].contains(&text(scope, "status")))
                .filter(|scope| {
                    let subject = &scope["subject_filter"];
                    let endpoint_filter = &scope["endpoint_filter"];
                    let finding_filter = &scope["finding_filter"];
                    let in_list = |list: Vec<&str>, value: &str| list.is_empty() || list.contains(&value);
                    let patterns = strings(subject, "cpe_patterns");
                    let subject_ok = in_list(strings(subject, "subject_types"), text(&target["subject"], "type"))
                        && in_list(strings(subject, "vendors"), text(&target["subject"], "vendor"))
                        && in_list(strings(subject, "products"), text(&target["subject"], "product"))
                        && (patterns.is_empty()
                            || members.iter().any(|f| {
                                optional_text(&f["subject"], "cpe")
                                    .is_some_and(|cpe| patterns.iter().any(|p| glob_match(p, cpe)))
                            }));
                    let tags = strings(endpoint_filter, "tags");
                    let endpoint_ok =
                        in_list(strings(endpoint_filter, "os_families"), text(&endpoint["operating_system"], "family"))
                            && endpoint_filter["has_agent"]
                                .as_bool()
                                .is_none_or(|wanted| wanted != endpoint["agent_id"].is_null())
                            && (tags.is_empty() || strings(endpoint, "tags").iter().any(|tag| tags.contains(tag)));
                    let finding_ok = members.iter().any(|f| {
                        let rank =
                            |name: &str| SEVERITIES.len() - SEVERITIES.iter().position(|s| *s == name).unwrap_or(0);
                        in_list(strings(finding_filter, "finding_types"), text(f, "finding_type"))
                            && optional_text(finding_filter, "min_severity")
                                .is_none_or(|min| rank(text(f, "severity")) >= rank(min))
                            && finding_filter["min_cvss_score"]
                                .as_f64()
                                .is_none_or(|min| f["cvss"]["base_score"].as_f64().is_some_and(|score| score >= min))
                            && (finding_filter["kev_only"] != json!(true) || f["kev"] == json!(true))
                    });
                    subject_ok && endpoint_ok && finding_ok
                })
                .map(|scope| text(scope, "id"))
                .collect();
            assert_eq!(strings(target, "scope_ids"), expected, "{target}");
        }
    }

    #[test]
    fn cvss_scores_and_severities_agree() {
        for data in demo_sets() {
            for finding in &data.findings {
                let severity = text(finding, "severity");
                if finding["cve_id"].is_null() {
                    assert!(finding["cvss"].is_null() && finding["epss"].is_null());
                    assert_eq!(finding["kev"], json!(false));
                    assert_ne!(text(finding, "finding_type"), "vulnerability");
                    assert!(["medium", "low", "info"].contains(&severity));
                    continue;
                }
                assert_eq!(text(finding, "finding_type"), "vulnerability");
                let cvss = &finding["cvss"];
                let score = cvss["base_score"].as_f64().expect("a numeric base score");
                assert_eq!(cvss31_base_score(text(cvss, "vector")), Ok(score), "{finding}");
                assert_eq!(Severity::from_score(score).as_str(), severity, "{finding}");
                let catalogued = CVES.iter().find(|cve| cve.id == text(finding, "cve_id")).expect("a catalogued CVE");
                assert_eq!(finding["kev"], json!(catalogued.kev));
                if !finding["epss"].is_null() {
                    for field in ["score", "percentile"] {
                        let value = finding["epss"][field].as_f64().expect("numeric EPSS");
                        assert!((0.0..=1.0).contains(&value));
                        assert_eq!(round5(value), value, "rounded to 5 decimals");
                    }
                }
                // The installed version really is vulnerable, the fix newer.
                let installed = text(&finding["subject"], "version");
                let fixed = text(finding, "fixed_version");
                assert_eq!(compare_versions(installed, fixed), Ordering::Less, "{installed} vs {fixed}");
            }
        }
    }

    #[test]
    fn open_finding_counts_are_exact() {
        for data in demo_sets() {
            let mut counts: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
            for finding in &data.findings {
                if matches!(text(finding, "status"), "open" | "reopened") {
                    *counts
                        .entry(text(finding, "endpoint_id"))
                        .or_default()
                        .entry(text(finding, "severity"))
                        .or_default() += 1;
                }
            }
            for endpoint in &data.endpoints {
                let expected = counts.get(text(endpoint, "id"));
                for severity in SEVERITIES {
                    let want = expected.and_then(|c| c.get(severity)).copied().unwrap_or(0);
                    assert_eq!(endpoint["open_findings"][severity].as_u64(), Some(want), "{severity}");
                }
            }
        }
    }

    #[test]
    fn timestamps_are_ordered_and_never_after_the_anchor() {
        let anchor = DEMO_ANCHOR_UNIX;
        let history_start = anchor - ENDPOINT_HISTORY_DAYS * DAY;
        for data in demo_sets() {
            for scope in &data.scopes {
                let (created, updated) = (time(scope, "created_at"), time(scope, "updated_at"));
                assert!(history_start <= created && created <= updated && updated <= anchor);
            }
            let mut endpoint_created = BTreeMap::new();
            for endpoint in &data.endpoints {
                let (created, updated) = (time(endpoint, "created_at"), time(endpoint, "updated_at"));
                assert!(history_start <= created && created <= updated && updated <= anchor);
                if let Some(last_seen) = optional_time(endpoint, "last_seen_at") {
                    assert!(created <= last_seen && last_seen <= updated);
                }
                assert_eq!(endpoint["agent_id"].is_null(), endpoint["agent_version"].is_null());
                endpoint_created.insert(text(endpoint, "id"), created);
            }
            for finding in &data.findings {
                let created = time(finding, "created_at");
                let (first_seen, last_seen) = (time(finding, "first_seen_at"), time(finding, "last_seen_at"));
                let updated = time(finding, "updated_at");
                assert!(endpoint_created[text(finding, "endpoint_id")] <= created, "findings after their endpoint");
                assert!(created == first_seen && first_seen <= last_seen && last_seen <= updated && updated <= anchor);
                let resolved = optional_time(finding, "resolved_at");
                assert_eq!(resolved.is_some(), text(finding, "status") == "resolved");
                if let Some(resolved) = resolved {
                    assert!(last_seen <= resolved && resolved <= updated);
                }
                assert_eq!(finding["suppression"].is_object(), text(finding, "status") == "suppressed");
                if let Some(expires) = optional_time(&finding["suppression"], "expires_at") {
                    // An expired suppression would have reverted to open.
                    assert!(expires > anchor, "suppression still in force");
                }
            }
            for target in &data.targets {
                let (created, updated) = (time(target, "created_at"), time(target, "updated_at"));
                assert!(endpoint_created[text(target, "endpoint_id")] <= created);
                assert!(created <= updated && updated <= anchor);
                if let Some(remediated) = optional_time(target, "remediated_at") {
                    assert!(created <= remediated && remediated <= updated);
                }
                if let Some(due) = optional_time(target, "due_at") {
                    assert!(due > created);
                }
                let execution = &target["last_execution"];
                if execution.is_object() {
                    let started = time(execution, "started_at");
                    assert!(created <= started && started <= updated);
                    if let Some(finished) = optional_time(execution, "finished_at") {
                        assert!(started <= finished && finished <= updated);
                    }
                }
            }
        }
    }

    #[test]
    fn ids_are_unique_v7_and_in_creation_order() {
        for data in demo_sets() {
            let mut all = BTreeSet::new();
            for (kind, records) in [
                ("scope", &data.scopes),
                ("endpoint", &data.endpoints),
                ("finding", &data.findings),
                ("target", &data.targets),
            ] {
                let mut by_id: Vec<(&str, i64)> =
                    records.iter().map(|r| (text(r, "id"), time(r, "created_at"))).collect();
                for (id, created) in &by_id {
                    assert_eq!(uuid_millis(id), u64::try_from(*created).expect("after 1970") * 1000, "{kind} {id}");
                    assert!(all.insert(id.to_string()), "duplicate id {id}");
                }
                by_id.sort_unstable();
                assert!(by_id.windows(2).all(|pair| pair[0].1 <= pair[1].1), "{kind} ids sort by created_at");
            }
            for endpoint in data.endpoints.iter().filter(|e| !e["agent_id"].is_null()) {
                uuid::Uuid::parse_str(text(endpoint, "agent_id")).expect("agent ids are UUIDs");
            }
        }
    }

    #[test]
    fn endpoints_look_real() {
        let data = generate(5, DemoSpec { endpoints: 1_000, findings_per_endpoint: 2 });
        let hostnames: BTreeSet<String> =
            data.endpoints.iter().map(|e| text(e, "hostname").to_ascii_lowercase()).collect();
        assert_eq!(hostnames.len(), data.endpoints.len(), "hostnames are unique (case-insensitively)");
        for endpoint in &data.endpoints {
            let hostname = text(endpoint, "hostname");
            assert!(
                hostname.len() <= 63 && hostname.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "{hostname}"
            );
            if text(&endpoint["operating_system"], "family") == "windows" {
                assert!(hostname.len() <= 15, "NetBIOS-length Windows names: {hostname}");
            }
            if let Some(ip) = optional_text(endpoint, "ip") {
                let octets: Vec<u8> = ip.split('.').map(|o| o.parse().expect("IPv4 octets")).collect();
                let private = match octets[..] {
                    [10, ..] => true,
                    [172, second, ..] => (16..=31).contains(&second),
                    [192, 168, ..] => true,
                    _ => false,
                };
                assert!(octets.len() == 4 && private, "{ip}");
            }
            if let Some(mac) = optional_text(endpoint, "mac_address") {
                let parts: Vec<&str> = mac.split(':').collect();
                assert!(parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && u8::from_str_radix(p, 16).is_ok()));
                assert_eq!(mac, mac.to_ascii_lowercase());
            }
            if let Some(email) = optional_text(&endpoint["owner"], "email") {
                assert!(email.ends_with("@acme.example"), "{email}");
            }
        }
    }

    #[test]
    fn paths_and_package_managers_fit_the_platform() {
        for data in demo_sets() {
            let families: BTreeMap<&str, &str> =
                data.endpoints.iter().map(|e| (text(e, "id"), text(&e["operating_system"], "family"))).collect();
            for target in &data.targets {
                let family = families[text(target, "endpoint_id")];
                let manager = optional_text(target, "package_manager");
                let fits = match family {
                    "macos" => matches!(manager, None | Some("homebrew" | "none")),
                    "windows" => matches!(manager, None | Some("winget" | "chocolatey" | "msi" | "none")),
                    _ => matches!(manager, None | Some("apt" | "dnf" | "yum" | "zypper" | "none")),
                };
                assert!(fits, "{manager:?} on {family}");
                if let Some(path) = optional_text(target, "install_path") {
                    let fits = match family {
                        "windows" => path.starts_with(r"C:\") || path.starts_with(r"D:\"),
                        "macos" => {
                            path.starts_with("/Applications/")
                                || path.starts_with("/Users/")
                                || path.starts_with("/opt/homebrew/")
                                || path.starts_with("/usr/local/")
                        }
                        _ => path.starts_with('/') && !path.contains('\\'),
                    };
                    assert!(fits, "{path} on {family}");
                    assert!(!path.contains('{'), "unfilled template: {path}");
                }
            }
            for finding in &data.findings {
                let family = families[text(finding, "endpoint_id")];
                for field in ["cpe", "purl"] {
                    if let Some(value) = optional_text(&finding["subject"], field) {
                        assert!(!value.contains('{'), "unfilled template: {value}");
                        if value.starts_with("pkg:deb/") || value.starts_with("pkg:rpm/") {
                            assert_eq!(family, "linux");
                        }
                        if value.starts_with("cpe:2.3:o:apple:") || value.starts_with("pkg:brew/") {
                            assert_eq!(family, "macos");
                        }
                        if value.starts_with("cpe:2.3:o:microsoft:") {
                            assert_eq!(family, "windows");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_demo_has_exactly_a_thousand_findings() {
        let mut generator = Generator::new(11, DemoSpec::DEMO, DEMO_ANCHOR_UNIX, PREFIX);
        generator.scopes();
        let mut findings = 0;
        while let Some(batch) = generator.next_endpoint() {
            findings += batch.findings.len();
        }
        assert_eq!(findings, 1000);
    }
}
