//! The Nessus importer: Tenable Nessus `.nessus` files
//! (`NessusClientData_v2`), as Nessus and Tenable.sc export a scan: one
//! `ReportHost` per scanned host, one `ReportItem` per plugin that reported
//! on it, per port.
//!
//! What maps where is in `docs/scanner-report-mapping/nessus.md`. In short:
//! each `ReportHost` is a host, named by its FQDN, host name, NetBIOS name
//! or IP; each `ReportItem` of severity 1 to 4 is one entry whose identity
//! is the plugin (`nessus:<pluginID>`) on its port, or, when a local check
//! names the installed packages it found, one entry per package; severity
//! 0 (informational) is skipped with its reason. The report is streamed
//! host by host, so memory follows the largest host, not the report.

use std::collections::HashSet;
use std::net::IpAddr;

use esr_plugin_sdk::importing::{fixed_versions, importer_info};
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, Epss, ImporterInfo, OperatingSystem, Package, PackageClass,
    ReportEntry, ReportError, ReportHost, ReportImporter, Severity, SkippedEntry,
};
use esr_plugin_sdk::time::Timestamp;
use esr_plugin_sdk::xml::{self, Element};

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "hosts × plugins × the packages a plugin names";
const ROOT: &str = "NessusClientData_v2";
/// The fixed `source.scanner` of the findings.
const SCANNER: &str = "tenable";
/// "Nessus Scan Information": its output states the scanner's version.
const SCAN_INFORMATION_PLUGIN: &str = "19506";
/// The package managers of operating systems, as `report::package_manager`
/// names them: a word of an OS name that gives another (`go`, `r`) is not
/// the OS's.
const OS_MANAGERS: &[&str] = &["apt", "apk", "dnf", "yum", "zypper", "msi"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

pub struct Nessus;

esr_plugin_sdk::export_report_importer!(crate::Nessus);

impl ReportImporter for Nessus {
    fn describe() -> ImporterInfo {
        importer_info("nessus", env!("CARGO_PKG_VERSION"), "Tenable Nessus .nessus (NessusClientData_v2)")
    }

    fn detect(bytes: &[u8]) -> Confidence {
        match xml::root(bytes) {
            Some(root) if root.name == ROOT => Confidence::Certain,
            _ => Confidence::No,
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        // Another XML document is refused before it is read through.
        if let Some(root) = xml::root(bytes)
            && root.name != ROOT
        {
            return Err(not_nessus(&root.name));
        }
        let mut converted = ConvertedReport {
            scanner: SCANNER.into(),
            // A host scan covers the OS's packages and its network services.
            scanned_classes: vec![PackageClass::Os, PackageClass::Other],
            ..ConvertedReport::default()
        };
        let mut reading = Reading::default();
        let mut root_name = None;
        // Hosts are the records; the root's other children (the policy)
        // and the report's are read as records too, only to hold their
        // text within the parser's bounds, and dropped.
        xml::for_each_record(
            bytes,
            |path| match path {
                [root] => {
                    root_name = Some(root.clone());
                    false
                }
                [_, child] => child != "Report",
                [_, report, _] => report == "Report",
                _ => false,
            },
            |parents, element| match parents {
                [root, report] if root == ROOT && report == "Report" && element.name == "ReportHost" => {
                    reading.host(&element, &mut converted)
                }
                _ => Ok(()),
            },
        )?;
        match root_name {
            Some(name) if name == ROOT => {}
            Some(name) => return Err(not_nessus(&name)),
            None => return Err(ReportError::Invalid("not XML: the document has no root element".into())),
        }
        converted.scanned_at = reading.earliest_start.map(Timestamp::format);
        converted.tool = reading.scanner_version.is_some().then(|| "nessus".to_owned());
        converted.scanner_version = reading.scanner_version;
        Ok(converted)
    }
}

fn not_nessus(root: &str) -> ReportError {
    let root: String = root.chars().take(64).collect();
    ReportError::Unsupported(format!(
        "not a Nessus v2 report: the root element is <{root}>, not <{ROOT}> (export the scan as .nessus, version 2)"
    ))
}

/// What the report says beyond its hosts, gathered host by host.
#[derive(Default)]
struct Reading {
    /// The earliest start of a host: when the scan began.
    earliest_start: Option<Timestamp>,
    scanner_version: Option<String>,
    /// Keys of the hosts listed so far: a host named twice is listed once.
    keys: HashSet<String>,
    hosts_read: usize,
}

impl Reading {
    fn host(&mut self, host: &Element, converted: &mut ConvertedReport) -> Result<(), ReportError> {
        self.hosts_read += 1;
        let tags = Tags::of(host);
        let Some(key) = host.attribute_text("name").or_else(|| tags.get("host-ip")) else {
            let items = host.children_named("ReportItem").count();
            return converted.add_skipped(
                SkippedEntry {
                    entry: format!("ReportHost #{} (line {})", self.hosts_read, host.line),
                    reason: format!("the host has no name and no host-ip: its {items} items belong to no host"),
                },
                FAN_OUT,
            );
        };
        if let Some(started) = host_start(&tags) {
            self.earliest_start = Some(self.earliest_start.map_or(started, |earliest| earliest.min(started)));
        }
        let described = describe_host(key, &tags);
        let os_manager = described.operating_system.as_ref().and_then(|os| os_package_manager(&os.name));
        if self.keys.insert(key.to_owned()) {
            converted.hosts.push(described);
        }
        for item in host.children_named("ReportItem") {
            if self.scanner_version.is_none() && item.attribute_text("pluginID") == Some(SCAN_INFORMATION_PLUGIN) {
                self.scanner_version = scanner_version(item);
            }
            add_item(converted, key, item, os_manager)?;
        }
        Ok(())
    }
}

/// A host's `HostProperties/tag`s.
struct Tags<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Tags<'a> {
    fn of(host: &'a Element) -> Tags<'a> {
        let tags = host
            .child("HostProperties")
            .into_iter()
            .flat_map(|properties| properties.children_named("tag"))
            .filter_map(|tag| Some((tag.attribute("name")?, tag.text.as_str())))
            .collect();
        Tags(tags)
    }

    /// The trimmed value of the first tag `name`; `None` when blank.
    fn get(&self, name: &str) -> Option<&'a str> {
        self.0.iter().find(|(tag, _)| *tag == name).map(|(_, value)| value.trim()).filter(|value| !value.is_empty())
    }
}

fn is_ip(text: &str) -> bool {
    text.parse::<IpAddr>().is_ok()
}

/// A name a host could be known by: letters, digits, `-`, `.` and `_`, and
/// not an address.
fn host_name(text: Option<&str>) -> Option<&str> {
    let text = text?.trim();
    let valid = !text.is_empty()
        && text.len() <= 253
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && !is_ip(text);
    valid.then_some(text)
}

/// The host as its tags describe it. `host-fqdn` may be a short name: only
/// a name with a dot is an FQDN. The best name is the host name: the FQDN,
/// else the short name, else the NetBIOS name, else the IP.
fn describe_host(key: &str, tags: &Tags) -> ReportHost {
    let ip = tags.get("host-ip").filter(|ip| is_ip(ip)).or_else(|| Some(key.trim()).filter(|key| is_ip(key)));
    let own = [tags.get("host-fqdn"), tags.get("hostname"), Some(key)];
    let fqdn = own.into_iter().chain([tags.get("host-rdns")]).filter_map(host_name).find(|name| name.contains('.'));
    // host-rdns is the address's name, not necessarily the host's own: an FQDN at most.
    let short = own.into_iter().filter_map(host_name).find(|name| !name.contains('.'));
    let netbios = tags.get("netbios-name").filter(|name| !name.chars().any(|c| c.is_whitespace() || c.is_control()));
    let hostname = fqdn.or(short).or(netbios).or(ip).unwrap_or(key);
    ReportHost {
        key: key.to_owned(),
        hostname: hostname.to_owned(),
        operating_system: operating_system(tags),
        fqdn: fqdn.map(str::to_owned),
        netbios_name: netbios.map(str::to_owned),
        ip: ip.map(str::to_owned),
        mac_address: tags.get("mac-address").and_then(first_mac),
        // A Nessus agent's `TAG` is Tenable's id, not an esr agent's.
        agent_id: None,
    }
}

/// The first valid MAC address of a `mac-address` tag, which may list
/// several, one a line.
fn first_mac(text: &str) -> Option<String> {
    text.split_whitespace().find(|candidate| is_mac(candidate)).map(str::to_owned)
}

fn is_mac(text: &str) -> bool {
    let Some(separator) = text.chars().nth(2).filter(|c| matches!(c, ':' | '-')) else { return false };
    let pairs: Vec<&str> = text.split(separator).collect();
    text.len() == 17
        && pairs.len() == 6
        && pairs.iter().all(|pair| pair.len() == 2 && u8::from_str_radix(pair, 16).is_ok())
}

/// `operating-system` (its first line: Nessus lists its guesses one a
/// line), else `os`.
fn operating_system(tags: &Tags) -> Option<OperatingSystem> {
    let os = tags.get("os");
    let name = tags
        .get("operating-system")
        .and_then(|guesses| guesses.lines().map(str::trim).find(|line| !line.is_empty()))
        .or(os)?;
    let family = [Some(name), os].into_iter().flatten().map(report::os_family).find(|family| *family != "other");
    Some(OperatingSystem {
        name: name.to_owned(),
        version: None,
        family: Some(family.unwrap_or("other").to_owned()),
        vendor: None,
        architecture: None,
    })
}

/// The package manager of the OS an OS name states
/// (`Linux Kernel 2.6.32 on CentOS release 6.3` → dnf).
fn os_package_manager(os_name: &str) -> Option<&'static str> {
    let lower = os_name.to_ascii_lowercase();
    if lower.contains("red hat") {
        return report::package_manager("redhat");
    }
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(report::package_manager)
        .find(|manager| OS_MANAGERS.contains(manager))
}

/// When the host's scan started: `HOST_START_TIMESTAMP` (epoch seconds),
/// else `HOST_START`, ctime text without a zone, read as UTC.
fn host_start(tags: &Tags) -> Option<Timestamp> {
    let epoch = tags
        .get("HOST_START_TIMESTAMP")
        .and_then(|seconds| seconds.parse::<i64>().ok())
        .filter(|seconds| *seconds > 0)
        .and_then(|seconds| seconds.checked_mul(1_000_000_000))
        .map(Timestamp);
    epoch.or_else(|| tags.get("HOST_START").and_then(ctime))
}

/// `Tue Jan  7 08:19:20 2014`, read as UTC.
fn ctime(text: &str) -> Option<Timestamp> {
    let [_, month, day, time, year] = text.split_whitespace().collect::<Vec<_>>()[..] else { return None };
    let month = MONTHS.iter().position(|name| name.eq_ignore_ascii_case(month))? + 1;
    let day: u8 = day.parse().ok()?;
    let year: u16 = year.parse().ok()?;
    Timestamp::parse(&format!("{year:04}-{month:02}-{day:02}T{time}Z"))
}

/// The version plugin 19506 states: `Nessus version : 5.2.4 (Nessus 5.2.5
/// is available …)` → `5.2.4`.
fn scanner_version(item: &Element) -> Option<String> {
    let output = item.child("plugin_output")?;
    output.text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        if !key.trim().eq_ignore_ascii_case("Nessus version") {
            return None;
        }
        value.split_whitespace().next().map(str::to_owned)
    })
}

/// The entries of one `ReportItem`, or its skipped line.
fn add_item(
    converted: &mut ConvertedReport,
    host_key: &str,
    item: &Element,
    os_manager: Option<&'static str>,
) -> Result<(), ReportError> {
    let plugin_id = item.attribute_text("pluginID");
    let port = item.attribute_text("port").unwrap_or("0");
    let protocol = item.attribute_text("protocol").unwrap_or("tcp");
    let location = format!("{port}/{protocol}");
    let title = item.attribute_text("pluginName").or_else(|| item.child_text("plugin_name"));
    let at = format!(
        "ReportHost {host_key}, ReportItem {} on {location}{}",
        plugin_id.unwrap_or("without pluginID"),
        title.map(|title| format!(" ({title})")).unwrap_or_default()
    );
    let skip = |converted: &mut ConvertedReport, reason: String| {
        converted.add_skipped(SkippedEntry { entry: at.clone(), reason }, FAN_OUT)
    };
    let Some(plugin_id) = plugin_id else {
        return skip(converted, "the item has no pluginID: nothing names the check".into());
    };
    if let Some(result) = compliance_result(item) {
        return skip(
            converted,
            format!("a compliance check ({result}): a configuration audit's result, not a vulnerability"),
        );
    }
    let severity_given = item.attribute_text("severity");
    let risk_factor = item.child_text("risk_factor");
    let cvss = ratings(item);
    let severity = match severity_given {
        Some("1") => Severity::Low,
        Some("2") => Severity::Medium,
        Some("3") => Severity::High,
        Some("4") => Severity::Critical,
        Some("0") => {
            return skip(
                converted,
                "informational (severity 0): what Nessus learned about the host (a service, a version, a setting), not a vulnerability".into(),
            );
        }
        // No 0–4 rating: the risk factor's word, else the score's band.
        other => match risk_factor.map(|word| (word, report::map_severity(word))) {
            Some((_, Some(Severity::Info))) | Some(("None" | "none", None)) => {
                return skip(converted, "informational (risk factor None): not a vulnerability".into());
            }
            Some((_, Some(severity))) => severity,
            _ => match cvss.iter().find_map(|rating| rating.base_score) {
                Some(score) if score > 0.0 => Severity::from_score(score),
                _ => {
                    return skip(
                        converted,
                        format!(
                            "severity {other:?} is not Nessus's 0 to 4, and neither a risk factor nor a score rates it"
                        ),
                    );
                }
            },
        },
    };
    // The plugin is the check; its CVEs in document order, once each.
    let check = format!("nessus:{}", plugin_id.split_whitespace().collect::<String>());
    let mut cves: Vec<String> = Vec::new();
    for cve in item.children_named("cve").filter_map(Element::text).map(str::to_ascii_uppercase) {
        if report::is_cve(&cve) && !cves.contains(&cve) {
            cves.push(cve);
        }
    }
    let vulnerability_id = cves.first().cloned().unwrap_or_else(|| check.clone());
    let mut aliases = Vec::new();
    for id in cves.iter().skip(1).chain(std::iter::once(&check)) {
        report::push_alias(&mut aliases, &vulnerability_id, id);
    }
    let output = item.child("plugin_output").map_or("", |output| output.text.as_str());
    let local = item.child_text("plugin_type").is_some_and(|kind| kind.eq_ignore_ascii_case("local"));
    let family = item.attribute_text("pluginFamily").unwrap_or_default().to_ascii_lowercase();
    let debian = family.contains("debian") || family.contains("ubuntu") || os_manager == Some("apt");
    let packages = named_packages(output, local, debian, os_manager == Some("msi"));
    let template = ReportEntry {
        host: Some(host_key.to_owned()),
        vulnerability_id,
        aliases,
        check: Some(check),
        package: Package::default(),
        class: PackageClass::Other,
        location: None,
        severity_given: severity_given.or(risk_factor).map(str::to_owned),
        severity,
        cvss,
        epss: epss(item),
        kev: kev(item),
        fixed_version: None,
        state: None,
        title: title.map(str::to_owned),
        description: description(item),
    };
    if packages.is_empty() {
        // A remote check, or a local one naming no package: the service
        // on its port. The product's version is not the service's.
        let entry = ReportEntry {
            package: Package {
                name: item.attribute_text("svc_name").unwrap_or("general").to_owned(),
                ..Package::default()
            },
            location: Some(location),
            fixed_version: fixed_versions(stated_fixed_versions(output).iter().map(String::as_str)),
            ..template
        };
        return converted.add_entry(entry, FAN_OUT);
    }
    for named in packages {
        let entry = ReportEntry {
            package: Package {
                name: named.name,
                version: named.version,
                ecosystem: named.ecosystem.map(str::to_owned),
                package_manager: named
                    .managed
                    .then(|| os_manager.or_else(|| named.ecosystem.and_then(report::package_manager)))
                    .flatten()
                    .map(str::to_owned),
                ..Package::default()
            },
            class: PackageClass::Os,
            fixed_version: named.fixed_version,
            ..template.clone()
        };
        converted.add_entry(entry, FAN_OUT)?;
    }
    Ok(())
}

/// The result of a compliance (audit) item, which carries `cm:` elements
/// or `<compliance>true</compliance>`; `None` for a vulnerability check.
fn compliance_result(item: &Element) -> Option<String> {
    let compliance = item.children.iter().any(|child| child.name.starts_with("cm:"))
        || item.child_text("compliance").is_some_and(|flag| flag.eq_ignore_ascii_case("true"));
    if !compliance {
        return None;
    }
    let result = item.child_text("cm:compliance-result").unwrap_or("no result stated");
    Some(match item.child_text("cm:compliance-check-name") {
        Some(name) => format!("{result}: {}", name.chars().take(200).collect::<String>()),
        None => result.to_owned(),
    })
}

/// Every CVSS rating the item gives: v4, v3 and v2, each with or without
/// its prefix (`CVSS2#`, `CVSS:3.0/`), newest first.
fn ratings(item: &Element) -> Vec<CvssRating> {
    let given = [
        ("cvss4_vector", "cvss4_base_score", "4.0"),
        ("cvss3_vector", "cvss3_base_score", "3.0"),
        ("cvss_vector", "cvss_base_score", "2.0"),
    ];
    let mut ratings = Vec::new();
    for (vector_name, score_name, version) in given {
        let vector = item.child_text(vector_name).map(|vector| {
            let vector = vector.strip_prefix("CVSS2#").unwrap_or(vector);
            if version == "2.0" || vector.starts_with("CVSS:") {
                vector.to_owned()
            } else {
                format!("CVSS:{version}/{vector}")
            }
        });
        let score = item.child_text(score_name).and_then(|score| score.parse::<f64>().ok());
        if let Some(mut rating) = report::cvss_rating(Some(SCANNER), vector.as_deref(), score) {
            // A score without a usable vector: the element says the version.
            if rating.version.is_empty() {
                rating.version = version.to_owned();
            }
            ratings.push(rating);
        }
    }
    report::order_cvss(ratings, Some(SCANNER))
}

fn epss(item: &Element) -> Option<Epss> {
    let probability = |name: &str| {
        item.child_text(name).and_then(|value| value.parse::<f64>().ok()).filter(|value| (0.0..=1.0).contains(value))
    };
    Some(Epss { score: probability("epss_score")?, percentile: probability("epss_percentile") })
}

/// CISA's catalog lists it when the plugin has a `CISA-KNOWN-EXPLOITED`
/// xref; older plugins predate the xref, so its absence says nothing.
fn kev(item: &Element) -> Option<bool> {
    item.children_named("xref")
        .filter_map(Element::text)
        .any(|xref| xref.to_ascii_uppercase().starts_with("CISA-KNOWN-EXPLOITED"))
        .then_some(true)
}

/// The plugin's description (else its synopsis) and its solution.
fn description(item: &Element) -> Option<String> {
    let about = item.child_text("description").or_else(|| item.child_text("synopsis"));
    let solution = item.child_text("solution").filter(|solution| !solution.eq_ignore_ascii_case("n/a"));
    let text = match (about, solution) {
        (Some(about), Some(solution)) => format!("{about}\n\nSolution: {solution}"),
        (Some(about), None) => about.to_owned(),
        (None, Some(solution)) => format!("Solution: {solution}"),
        (None, None) => return None,
    };
    // Cut here as the host would (a report of thousands of hosts repeats
    // each plugin's text once per host).
    Some(esr_plugin_sdk::text::cut_chars(&text, esr_plugin_sdk::report::MAX_DESCRIPTION_CHARS))
}

/// The `Fixed version :` lines of an output, each `a / b` as two.
fn stated_fixed_versions(output: &str) -> Vec<String> {
    let mut versions: Vec<String> = Vec::new();
    for line in output.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        if !key.trim().eq_ignore_ascii_case("Fixed version") {
            continue;
        }
        for version in value.split(" / ").map(str::trim).filter(|version| !version.is_empty()) {
            if !versions.iter().any(|known| known == version) {
                versions.push(version.to_owned());
            }
        }
    }
    versions
}

/// An installed package a local check names in its output.
#[derive(Debug, Clone, PartialEq)]
struct NamedPackage {
    name: String,
    version: Option<String>,
    fixed_version: Option<String>,
    /// `rpm`, `deb`, `apk` or `windows`, when the text tells.
    ecosystem: Option<&'static str>,
    /// Installed by the OS's package manager: a Linux package or a
    /// Windows program, not a file elsewhere (a jar a Linux check found).
    managed: bool,
}

/// A Windows install a local check names: `Path :` or `Product :` lines,
/// or `- <file> has not been patched.`, with `Installed version :` (or
/// `Remote version :`) and `Fixed version :` (or `Should be :`).
#[derive(Default)]
struct Install {
    product: Option<String>,
    path: Option<String>,
    version: Option<String>,
    fixed: Option<String>,
}

impl Install {
    fn is_empty(&self) -> bool {
        self.product.is_none() && self.path.is_none() && self.version.is_none() && self.fixed.is_none()
    }

    fn named(self, windows_host: bool) -> Option<NamedPackage> {
        self.version.as_ref()?;
        // `C:\…`: a Windows install, whatever the host's OS was taken for.
        let windows = windows_host
            || self.path.as_deref().is_some_and(|path| {
                let mut chars = path.chars();
                chars.next().is_some_and(|drive| drive.is_ascii_alphabetic()) && chars.next() == Some(':')
            });
        let name = self.product.or(self.path)?;
        let fixed = self.fixed.map(|fixed| fixed.split(" / ").collect::<Vec<_>>().join(", "));
        Some(NamedPackage {
            name,
            version: self.version,
            fixed_version: fixed,
            ecosystem: windows.then_some("windows"),
            managed: windows,
        })
    }
}

/// Which form the last line read belongs to, for its `Should be :`.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    None,
    Linux,
    Windows,
}

/// The packages a plugin's output names: Linux local checks' `Remote
/// package installed : X` / `Should be : Y` pairs (any check), and Windows
/// installs (local checks only: a remote check's `Path` is a URL path).
fn named_packages(output: &str, local: bool, debian: bool, windows_host: bool) -> Vec<NamedPackage> {
    let mut linux: Vec<(&str, Option<&str>)> = Vec::new();
    let mut installs: Vec<Install> = Vec::new();
    let mut current = Install::default();
    let mut form = Form::None;
    for line in output.lines().map(str::trim) {
        if let Some(file) = line.strip_prefix("- ").and_then(|rest| rest.strip_suffix(" has not been patched.")) {
            installs.push(std::mem::take(&mut current));
            current.path = Some(file.trim().to_owned());
            form = Form::Windows;
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        match key.trim().to_ascii_lowercase().as_str() {
            "remote package installed" => {
                linux.push((value, None));
                form = Form::Linux;
            }
            "should be" => match form {
                Form::Linux => {
                    if let Some((_, fixed @ None)) = linux.last_mut() {
                        *fixed = Some(value);
                    }
                }
                Form::Windows => {
                    current.fixed.get_or_insert_with(|| value.to_owned());
                }
                Form::None => {}
            },
            field @ ("path" | "file" | "product") => {
                // A field already given, or a version read: the next install.
                let slot = if field == "product" { &current.product } else { &current.path };
                if slot.is_some() || current.version.is_some() {
                    installs.push(std::mem::take(&mut current));
                }
                let slot = if field == "product" { &mut current.product } else { &mut current.path };
                *slot = Some(value.to_owned());
                form = Form::Windows;
            }
            "installed version" | "remote version" => {
                if current.version.is_some() {
                    installs.push(std::mem::take(&mut current));
                }
                current.version = Some(value.to_owned());
                form = Form::Windows;
            }
            "fixed version" => {
                current.fixed = Some(value.to_owned());
            }
            _ => {}
        }
    }
    if !current.is_empty() {
        installs.push(current);
    }
    let mut packages: Vec<NamedPackage> =
        linux.into_iter().map(|(installed, should_be)| linux_package(installed, should_be, debian)).collect();
    if local {
        packages.extend(installs.into_iter().filter_map(|install| install.named(windows_host)));
    }
    packages
}

/// A Linux package from `Remote package installed : X` / `Should be : Y`.
fn linux_package(installed: &str, should_be: Option<&str>, debian: bool) -> NamedPackage {
    let (name, version, ecosystem) = split_package(installed, debian);
    let fixed_version = should_be.map(|should_be| match split_package(should_be, debian) {
        (fixed_name, Some(fixed), _) if fixed_name == name => fixed,
        // Another package (a rename), or no version to be read: as given.
        _ => should_be.to_owned(),
    });
    NamedPackage { name, version, fixed_version, ecosystem, managed: true }
}

/// A package string's name and version, as the package manager writes it:
/// Debian and Ubuntu checks write `name_version` (`cpp-4.9_4.9.2-10`; a
/// Debian name has no `_`); RPM (`name-version-release`,
/// `bind-libs-32:9.11.4-26.P2.el7_9`) and Alpine (`musl-1.1.24-r2`) checks
/// are split at the last two dashes, so a name may hold dashes and digits
/// (`java-1.8.0-openjdk-1.8.0.292-1.el7`). A string that fits neither is
/// the name, without version.
fn split_package(text: &str, debian: bool) -> (String, Option<String>, Option<&'static str>) {
    let token = text.split_whitespace().next().unwrap_or(text);
    let starts_with_digit = |text: &str| text.bytes().next().is_some_and(|b| b.is_ascii_digit());
    if debian
        && let Some((name, version)) = token.split_once('_')
        && !name.is_empty()
        && starts_with_digit(version)
    {
        return (name.to_owned(), Some(version.to_owned()), Some("deb"));
    }
    let mut parts = token.rsplitn(3, '-');
    if let (Some(release), Some(version), Some(name)) = (parts.next(), parts.next(), parts.next())
        && !name.is_empty()
        && !release.is_empty()
        && starts_with_digit(version)
    {
        // Alpine's release is `r<number>`.
        let alpine = release
            .strip_prefix('r')
            .is_some_and(|number| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()));
        let ecosystem = if alpine { "apk" } else { "rpm" };
        return (name.to_owned(), Some(format!("{version}-{release}")), Some(ecosystem));
    }
    (token.to_owned(), None, None)
}

#[cfg(test)]
mod tests;
