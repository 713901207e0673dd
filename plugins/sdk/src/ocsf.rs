//! Findings as OCSF Vulnerability Findings (class 2002 of OCSF 1.6.0), as
//! `format=ocsf` renders them: one pure mapping of a finding and its
//! endpoint record. `docs/ocsf.md` documents it attribute by attribute.

use serde_json::{Map, Value, json};

use crate::report::package_manager;
use crate::time::Timestamp;

/// The OCSF schema version renderings follow (`metadata.version`).
pub const OCSF_VERSION: &str = "1.6.0";
/// Vulnerability Finding.
pub const CLASS_UID: i64 = 2002;
/// Findings.
pub const CATEGORY_UID: i64 = 2;
/// `metadata.product.name` and `metadata.product.vendor_name`.
pub const PRODUCT_NAME: &str = "esr";

/// OCSF's id for a value its enum lacks; the sibling string then carries
/// the source's own value.
const OTHER: i64 = 99;

/// The finding fields the mapping places; any other non-null field goes to
/// `unmapped` as it is, so a component's extra fields are never dropped.
const MAPPED_FIELDS: &[&str] = &[
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
    "first_seen_at",
    "last_seen_at",
    "created_at",
    "updated_at",
];

/// `severity_id` and `severity` of an esr severity.
pub fn severity(value: Option<&str>) -> (i64, String) {
    let (id, caption) = match value {
        Some("critical") => (5, "Critical"),
        Some("high") => (4, "High"),
        Some("medium") => (3, "Medium"),
        Some("low") => (2, "Low"),
        Some("info") => (1, "Informational"),
        Some(other) => return (OTHER, other.to_owned()),
        None => (0, "Unknown"),
    };
    (id, caption.to_owned())
}

/// `status_id` and `status` of an esr finding status. `reopened` is a
/// finding to act on again, as `open` is; `status_code` keeps them apart.
pub fn status(value: Option<&str>) -> (i64, String) {
    let (id, caption) = match value {
        Some("open" | "reopened") => (1, "New"),
        Some("suppressed") => (3, "Suppressed"),
        Some("resolved") => (4, "Resolved"),
        Some(other) => return (OTHER, other.to_owned()),
        None => (0, "Unknown"),
    };
    (id, caption.to_owned())
}

/// `activity_id` and `activity_name`: the record's state, as the record
/// alone tells it (an export has no event to go by). Resolved is Close;
/// a record never changed since it was created is Create; else Update.
pub fn activity(finding: &Value) -> (i64, &'static str) {
    let at = |field: &str| finding.get(field).and_then(Value::as_str).and_then(Timestamp::parse);
    if finding.get("status").and_then(Value::as_str) == Some("resolved") {
        return (3, "Close");
    }
    match (at("created_at"), at("updated_at")) {
        (Some(created), Some(updated)) if created == updated => (1, "Create"),
        _ => (2, "Update"),
    }
}

/// An RFC 3339 timestamp as OCSF's `timestamp_t`: milliseconds since the
/// Unix epoch.
pub fn epoch_millis(text: &str) -> Option<i64> {
    Timestamp::parse(text).map(|at| at.0.div_euclid(1_000_000))
}

/// The finding as an OCSF 1.6.0 Vulnerability Finding. `endpoint` is the
/// finding's endpoint record (`None` when it is missing: the device is then
/// only the finding's `endpoint_id`); `product_version` becomes
/// `metadata.product.version`. What has no OCSF attribute goes to
/// `unmapped`, under its esr name, as esr holds it.
pub fn vulnerability_finding(finding: &Value, endpoint: Option<&Value>, product_version: &str) -> Value {
    let text = |pointer: &str| non_empty(finding.pointer(pointer));
    let millis = |pointer: &str| text(pointer).and_then(epoch_millis);
    let mut unmapped = Map::new();

    let (activity_id, activity_name) = activity(finding);
    let (severity_id, severity) = severity(text("/severity"));
    let (status_id, status) = status(text("/status"));
    // `time` is required: the record's last change, else the newest time it has.
    let time = ["/updated_at", "/last_seen_at", "/created_at", "/first_seen_at"]
        .iter()
        .find_map(|pointer| millis(pointer))
        .unwrap_or(0);

    let mut event = Map::new();
    event.insert("class_uid".into(), json!(CLASS_UID));
    event.insert("class_name".into(), json!("Vulnerability Finding"));
    event.insert("category_uid".into(), json!(CATEGORY_UID));
    event.insert("category_name".into(), json!("Findings"));
    event.insert("activity_id".into(), json!(activity_id));
    event.insert("activity_name".into(), json!(activity_name));
    event.insert("type_uid".into(), json!(CLASS_UID * 100 + activity_id));
    event.insert("type_name".into(), json!(format!("Vulnerability Finding: {activity_name}")));
    event.insert("severity_id".into(), json!(severity_id));
    event.insert("severity".into(), json!(severity));
    event.insert("status_id".into(), json!(status_id));
    event.insert("status".into(), json!(status));
    put(&mut event, "status_code", text("/status").map(Value::from));
    if text("/status") == Some("suppressed") {
        put(&mut event, "status_detail", text("/suppression/reason").map(Value::from));
    }
    event.insert("time".into(), json!(time));
    put(&mut event, "message", text("/title").map(Value::from));
    event.insert(
        "metadata".into(),
        json!({
            "version": OCSF_VERSION,
            "product": {"name": PRODUCT_NAME, "vendor_name": PRODUCT_NAME, "version": product_version},
        }),
    );

    let mut info = Map::new();
    let uid = text("/id").or(text("/source/scanner_finding_id")).unwrap_or_default();
    info.insert("uid".into(), json!(uid));
    put(&mut info, "uid_alt", text("/source/scanner_finding_id").map(Value::from));
    put(&mut info, "title", text("/title").map(Value::from));
    put(&mut info, "desc", text("/description").map(Value::from));
    put(&mut info, "types", text("/finding_type").map(|kind| json!([kind])));
    put(&mut info, "product", text("/source/scanner").map(|scanner| json!({"name": scanner})));
    put(&mut info, "first_seen_time", millis("/first_seen_at").map(Value::from));
    put(&mut info, "last_seen_time", millis("/last_seen_at").map(Value::from));
    put(&mut info, "created_time", millis("/created_at").map(Value::from));
    put(&mut info, "modified_time", millis("/updated_at").map(Value::from));
    event.insert("finding_info".into(), Value::Object(info));

    event.insert("vulnerabilities".into(), json!([vulnerability(finding, &severity, &mut unmapped)]));

    if let Some(device) = device(finding, endpoint, &mut unmapped) {
        event.insert("device".into(), device);
    }

    // OCSF 1.6 has no KEV attribute: a listed CVE is `is_exploit_available`
    // and the flag itself stays here, true or false.
    unmapped.insert("kev".into(), json!(finding.get("kev").and_then(Value::as_bool).unwrap_or(false)));
    if let Some(fields) = finding.as_object() {
        for (name, value) in fields {
            if !value.is_null() && !MAPPED_FIELDS.contains(&name.as_str()) {
                unmapped.insert(name.clone(), value.clone());
            }
        }
    }
    event.insert("unmapped".into(), Value::Object(unmapped));
    Value::Object(event)
}

/// The one entry of `vulnerabilities`. OCSF wants exactly one of `cve`,
/// `advisory` and `cwe` in it: a finding with a CVE id names it in `cve`,
/// any other names the scanner's own id of the check in `advisory`.
fn vulnerability(finding: &Value, severity: &str, unmapped: &mut Map<String, Value>) -> Value {
    let text = |pointer: &str| non_empty(finding.pointer(pointer));
    let millis = |pointer: &str| text(pointer).and_then(epoch_millis);
    let mut vulnerability = Map::new();
    put(&mut vulnerability, "title", text("/title").map(Value::from));
    put(&mut vulnerability, "desc", text("/description").map(Value::from));
    vulnerability.insert("severity".into(), json!(severity));
    put(&mut vulnerability, "vendor_name", text("/source/scanner").map(Value::from));
    put(&mut vulnerability, "first_seen_time", millis("/first_seen_at").map(Value::from));
    put(&mut vulnerability, "last_seen_time", millis("/last_seen_at").map(Value::from));

    let cvss = finding.get("cvss").filter(|cvss| !cvss.is_null());
    let epss = finding.get("epss").filter(|epss| !epss.is_null());
    match text("/cve_id") {
        Some(cve_id) => {
            let mut cve = Map::new();
            cve.insert("uid".into(), json!(cve_id));
            put(&mut cve, "cvss", cvss.and_then(cvss_entry).map(|entry| json!([entry])));
            put(&mut cve, "epss", epss.and_then(epss_entry));
            vulnerability.insert("cve".into(), Value::Object(cve));
        }
        None => {
            // CVSS and EPSS have their place under `cve` only.
            let uid = text("/source/scanner_finding_id").or(text("/id")).unwrap_or_default();
            vulnerability.insert("advisory".into(), json!({"uid": uid}));
            put(unmapped, "cvss", cvss.cloned());
            put(unmapped, "epss", epss.cloned());
        }
    }

    if finding.get("kev").and_then(Value::as_bool) == Some(true) {
        vulnerability.insert("is_exploit_available".into(), json!(true));
    }
    let fixed_version = text("/fixed_version");
    if fixed_version.is_some() {
        vulnerability.insert("is_fix_available".into(), json!(true));
    }

    match affected_package(finding) {
        Some(package) => {
            vulnerability.insert("affected_packages".into(), json!([package]));
        }
        None => {
            put(unmapped, "subject", finding.get("subject").filter(|subject| !subject.is_null()).cloned());
            put(unmapped, "fixed_version", fixed_version.map(Value::from));
        }
    }
    if let Some(fixed) = fixed_version {
        let desc = match text("/subject/product") {
            Some(product) => format!("Update {product} to version {fixed} or later."),
            None => format!("Update to version {fixed} or later."),
        };
        vulnerability.insert("remediation".into(), json!({"desc": desc}));
    }
    Value::Object(vulnerability)
}

/// The finding's subject as an affected package: software with a version
/// (OCSF requires `name` and `version`); services and configurations are
/// no packages.
fn affected_package(finding: &Value) -> Option<Value> {
    let text = |pointer: &str| non_empty(finding.pointer(pointer));
    if text("/subject/type") != Some("software") {
        return None;
    }
    let mut package = Map::new();
    package.insert("name".into(), json!(text("/subject/product")?));
    package.insert("version".into(), json!(text("/subject/version")?));
    put(&mut package, "vendor_name", text("/subject/vendor").map(Value::from));
    put(&mut package, "cpe_name", text("/subject/cpe").map(Value::from));
    put(&mut package, "fixed_in_version", text("/fixed_version").map(Value::from));
    if let Some(purl) = text("/subject/purl") {
        package.insert("purl".into(), json!(purl));
        // `pkg:<type>/…`: the ecosystem names the manager, in esr's names.
        let ecosystem = purl.strip_prefix("pkg:").and_then(|rest| rest.split('/').next());
        if let Some(manager) = ecosystem.and_then(package_manager) {
            package.insert("package_manager".into(), json!(manager));
            let (type_id, kind) = match manager {
                "apt" | "apk" | "dnf" | "yum" | "zypper" => (2, "Operating System"),
                _ => (1, "Application"),
            };
            package.insert("type_id".into(), json!(type_id));
            package.insert("type".into(), json!(kind));
        }
    }
    Some(Value::Object(package))
}

/// The device: the endpoint record, or only the finding's `endpoint_id`
/// when the record is missing. `None` when nothing identifies one (OCSF
/// needs at least a `uid`, `hostname` or `ip`).
fn device(finding: &Value, endpoint: Option<&Value>, unmapped: &mut Map<String, Value>) -> Option<Value> {
    let mut device = Map::new();
    let endpoint_id = non_empty(finding.get("endpoint_id"));
    let Some(endpoint) = endpoint else {
        device.insert("uid".into(), json!(endpoint_id?));
        device.insert("type_id".into(), json!(0));
        device.insert("type".into(), json!("Unknown"));
        return Some(Value::Object(device));
    };
    let text = |pointer: &str| non_empty(endpoint.pointer(pointer));
    let millis = |pointer: &str| text(pointer).and_then(epoch_millis);
    put(&mut device, "uid", text("/id").or(endpoint_id).map(Value::from));
    put(&mut device, "hostname", text("/hostname").map(Value::from));
    put(&mut device, "ip", text("/ip").map(Value::from));
    put(&mut device, "mac", text("/mac_address").map(Value::from));
    if !["uid", "hostname", "ip"].iter().any(|name| device.contains_key(*name)) {
        return None;
    }
    // esr knows no device types.
    device.insert("type_id".into(), json!(0));
    device.insert("type".into(), json!("Unknown"));
    if let Some(name) = text("/operating_system/name") {
        let (type_id, kind) = match text("/operating_system/family") {
            Some("windows") => (100, "Windows"),
            Some("linux") => (200, "Linux"),
            Some("macos") => (300, "macOS"),
            Some(_) => (OTHER, "Other"),
            None => (0, "Unknown"),
        };
        let mut os = Map::new();
        os.insert("name".into(), json!(name));
        put(&mut os, "version", text("/operating_system/version").map(Value::from));
        os.insert("type_id".into(), json!(type_id));
        os.insert("type".into(), json!(kind));
        device.insert("os".into(), Value::Object(os));
    }
    // OCSF's user needs a name; an owner with only an e-mail stays in esr's form.
    let owner = endpoint.get("owner").filter(|owner| !owner.is_null());
    if let Some(name) = text("/owner/name") {
        let mut user = Map::new();
        user.insert("name".into(), json!(name));
        put(&mut user, "email_addr", text("/owner/email").map(Value::from));
        device.insert("owner".into(), Value::Object(user));
    }
    if let Some(agent_id) = text("/agent_id") {
        let mut agent = Map::new();
        agent.insert("uid".into(), json!(agent_id));
        put(&mut agent, "version", text("/agent_version").map(Value::from));
        device.insert("agent_list".into(), json!([agent]));
    }
    put(&mut device, "created_time", millis("/created_at").map(Value::from));
    put(&mut device, "modified_time", millis("/updated_at").map(Value::from));
    put(&mut device, "last_seen_time", millis("/last_seen_at").map(Value::from));

    let mut rest = Map::new();
    let mut os_rest = Map::new();
    put(&mut os_rest, "vendor", text("/operating_system/vendor").map(Value::from));
    put(&mut os_rest, "architecture", text("/operating_system/architecture").map(Value::from));
    if !os_rest.is_empty() {
        rest.insert("operating_system".into(), Value::Object(os_rest));
    }
    if let Some(tags) = endpoint.get("tags").filter(|tags| tags.as_array().is_some_and(|tags| !tags.is_empty())) {
        rest.insert("tags".into(), tags.clone());
    }
    if text("/owner/name").is_none() {
        put(&mut rest, "owner", owner.cloned());
    }
    if !rest.is_empty() {
        unmapped.insert("endpoint".into(), Value::Object(rest));
    }
    Some(Value::Object(device))
}

/// One `cve.cvss` entry; OCSF requires `version` and `base_score`.
fn cvss_entry(cvss: &Value) -> Option<Value> {
    let mut entry = Map::new();
    entry.insert("version".into(), json!(non_empty(cvss.get("version"))?));
    entry.insert("base_score".into(), json!(cvss.get("base_score")?.as_f64()?));
    put(&mut entry, "vector_string", non_empty(cvss.get("vector")).map(Value::from));
    entry.insert("depth".into(), json!("Base"));
    Some(Value::Object(entry))
}

/// `cve.epss`; OCSF 1.6 types the score as a string.
fn epss_entry(epss: &Value) -> Option<Value> {
    let score = epss.get("score").filter(|score| score.is_number())?;
    let mut entry = Map::new();
    entry.insert("score".into(), json!(score.to_string()));
    put(&mut entry, "percentile", epss.get("percentile").and_then(Value::as_f64).map(Value::from));
    Some(Value::Object(entry))
}

fn non_empty(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|text| !text.is_empty())
}

/// Sets `name` when there is a value: OCSF leaves out what is unknown
/// rather than sending `null`.
fn put(object: &mut Map<String, Value>, name: &str, value: Option<Value>) {
    if let Some(value) = value.filter(|value| !value.is_null()) {
        object.insert(name.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FINDING_ID: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a01";
    const ENDPOINT_ID: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a0b";

    fn finding() -> Value {
        json!({
            "id": FINDING_ID,
            "endpoint_id": ENDPOINT_ID,
            "finding_type": "vulnerability",
            "title": "openssl: X.400 address type confusion in X.509 GeneralName",
            "description": "A type confusion vulnerability relating to X.400 address processing inside an X.509 GeneralName.",
            "severity": "high",
            "status": "reopened",
            "cve_id": "CVE-2023-0286",
            "cvss": {"version": "3.1", "base_score": 7.4, "vector": "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:H"},
            "epss": {"score": 0.00624, "percentile": 0.78311},
            "kev": false,
            "subject": {
                "type": "software",
                "vendor": "OpenSSL",
                "product": "openssl",
                "version": "1.1.1n-0+deb11u3",
                "cpe": "cpe:2.3:a:openssl:openssl:1.1.1n:*:*:*:*:*:*:*",
                "purl": "pkg:deb/debian/openssl@1.1.1n-0%2Bdeb11u3?arch=amd64&distro=debian-11",
            },
            "fixed_version": "1.1.1n-0+deb11u4",
            "source": {"scanner": "trivy", "scanner_finding_id": "CVE-2023-0286/openssl@1.1.1n-0+deb11u3"},
            "remediation_target_id": "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a77",
            "suppression": null,
            "first_seen_at": "2026-01-02T08:15:00Z",
            "last_seen_at": "2026-03-10T06:00:00.250Z",
            "resolved_at": null,
            "created_at": "2026-01-02T08:15:00Z",
            "updated_at": "2026-03-10T06:00:00.250Z",
        })
    }

    fn endpoint() -> Value {
        json!({
            "id": ENDPOINT_ID,
            "hostname": "web-01.acme.example",
            "ip": "10.20.0.15",
            "mac_address": "52:54:00:12:34:56",
            "operating_system": {
                "name": "Debian GNU/Linux 11 (bullseye)",
                "version": "11.9",
                "family": "linux",
                "vendor": "Debian",
                "architecture": "x86_64",
            },
            "agent_id": "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a99",
            "agent_version": "2.4.1",
            "created_at": "2025-06-01T00:00:00Z",
            "updated_at": "2026-03-10T06:00:00Z",
            "tags": ["production", "dmz"],
            "owner": {"name": "Ana Souza", "email": "ana.souza@acme.example"},
            "last_seen_at": "2026-03-10T05:58:00Z",
            "open_findings": {"critical": 0, "high": 3, "medium": 5, "low": 1, "info": 0},
        })
    }

    #[test]
    fn a_vulnerability_renders_every_mapped_field() {
        let event = vulnerability_finding(&finding(), Some(&endpoint()), "1.4.0");
        assert_eq!(event["class_uid"], 2002);
        assert_eq!(event["category_uid"], 2);
        // Reopened since it was created: an update of a finding to act on again.
        assert_eq!((event["activity_id"].clone(), event["type_uid"].clone()), (json!(2), json!(200202)));
        assert_eq!((event["severity_id"].clone(), event["severity"].clone()), (json!(4), json!("High")));
        assert_eq!((event["status_id"].clone(), event["status"].clone()), (json!(1), json!("New")));
        assert_eq!(event["status_code"], "reopened");
        assert_eq!(event["time"], 1_773_122_400_250_i64);
        assert_eq!(
            event["metadata"],
            json!({"version": "1.6.0", "product": {"name": "esr", "vendor_name": "esr", "version": "1.4.0"}})
        );

        let info = &event["finding_info"];
        assert_eq!(info["uid"], FINDING_ID);
        assert_eq!(info["uid_alt"], "CVE-2023-0286/openssl@1.1.1n-0+deb11u3");
        assert_eq!(info["types"], json!(["vulnerability"]));
        assert_eq!(info["product"], json!({"name": "trivy"}));
        assert_eq!(info["first_seen_time"], 1_767_341_700_000_i64);
        assert_eq!(info["created_time"], info["first_seen_time"]);
        assert_eq!(info["modified_time"], event["time"]);

        let vulnerability = &event["vulnerabilities"][0];
        assert_eq!(event["vulnerabilities"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            vulnerability["cve"],
            json!({
                "uid": "CVE-2023-0286",
                "cvss": [{"version": "3.1", "base_score": 7.4, "depth": "Base",
                          "vector_string": "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:H"}],
                "epss": {"score": "0.00624", "percentile": 0.78311},
            })
        );
        assert!(vulnerability.get("advisory").is_none());
        // Not in KEV says nothing about exploits.
        assert!(vulnerability.get("is_exploit_available").is_none());
        assert_eq!(vulnerability["is_fix_available"], true);
        assert_eq!(
            vulnerability["affected_packages"],
            json!([{
                "name": "openssl", "version": "1.1.1n-0+deb11u3", "vendor_name": "OpenSSL",
                "cpe_name": "cpe:2.3:a:openssl:openssl:1.1.1n:*:*:*:*:*:*:*",
                "fixed_in_version": "1.1.1n-0+deb11u4",
                "purl": "pkg:deb/debian/openssl@1.1.1n-0%2Bdeb11u3?arch=amd64&distro=debian-11",
                "package_manager": "apt", "type_id": 2, "type": "Operating System",
            }])
        );
        assert_eq!(vulnerability["remediation"]["desc"], "Update openssl to version 1.1.1n-0+deb11u4 or later.");

        let device = &event["device"];
        assert_eq!(device["uid"], ENDPOINT_ID);
        assert_eq!(device["hostname"], "web-01.acme.example");
        assert_eq!(device["ip"], "10.20.0.15");
        assert_eq!(device["mac"], "52:54:00:12:34:56");
        assert_eq!(device["type_id"], 0);
        assert_eq!(
            device["os"],
            json!({"name": "Debian GNU/Linux 11 (bullseye)", "version": "11.9", "type_id": 200, "type": "Linux"})
        );
        assert_eq!(device["owner"], json!({"name": "Ana Souza", "email_addr": "ana.souza@acme.example"}));
        assert_eq!(device["agent_list"], json!([{"uid": "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a99", "version": "2.4.1"}]));
        assert_eq!(device["last_seen_time"], 1_773_122_280_000_i64);

        assert_eq!(
            event["unmapped"],
            json!({
                "kev": false,
                "remediation_target_id": "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a77",
                "endpoint": {"operating_system": {"vendor": "Debian", "architecture": "x86_64"},
                             "tags": ["production", "dmz"]},
            })
        );
    }

    #[test]
    fn enums_map_to_ocsf_ids_and_captions() {
        let severities: Vec<(i64, String)> = crate::contract::SEVERITIES.iter().map(|s| severity(Some(s))).collect();
        let expected = [(5, "Critical"), (4, "High"), (3, "Medium"), (2, "Low"), (1, "Informational")];
        assert_eq!(severities, expected.map(|(id, caption)| (id, caption.to_owned())));
        let statuses: Vec<(i64, String)> = crate::contract::FINDING_STATUSES.iter().map(|s| status(Some(s))).collect();
        let expected = [(1, "New"), (4, "Resolved"), (1, "New"), (3, "Suppressed")];
        assert_eq!(statuses, expected.map(|(id, caption)| (id, caption.to_owned())));
        // A value esr's contract lacks keeps its own text beside Other.
        assert_eq!(status(Some("triaged")), (99, "triaged".to_owned()));
        assert_eq!(severity(None), (0, "Unknown".to_owned()));
    }

    #[test]
    fn activity_follows_the_record() {
        let mut record = finding();
        record["status"] = json!("open");
        record["updated_at"] = record["created_at"].clone();
        assert_eq!(activity(&record), (1, "Create"));
        record["updated_at"] = json!("2026-01-03T00:00:00Z");
        assert_eq!(activity(&record), (2, "Update"));
        record["status"] = json!("resolved");
        assert_eq!(activity(&record), (3, "Close"));
        assert_eq!(vulnerability_finding(&record, None, "1")["type_uid"], 200203);
    }

    #[test]
    fn a_compliance_finding_names_the_check_in_an_advisory() {
        let mut record = finding();
        for (field, value) in [
            ("finding_type", json!("compliance")),
            ("title", json!("SSH permits root login")),
            ("cve_id", Value::Null),
            ("cvss", Value::Null),
            ("epss", Value::Null),
            ("kev", json!(false)),
            ("status", json!("suppressed")),
            ("fixed_version", Value::Null),
            (
                "subject",
                json!({"type": "configuration", "vendor": null, "product": "OpenSSH", "version": "8.4p1",
                       "cpe": null, "purl": null}),
            ),
            ("source", json!({"scanner": "wazuh", "scanner_finding_id": "sca-28503"})),
            ("suppression", json!({"reason": "compensating_control", "note": "bastion only", "expires_at": null})),
        ] {
            record[field] = value;
        }
        let event = vulnerability_finding(&record, Some(&endpoint()), "1.4.0");
        let vulnerability = &event["vulnerabilities"][0];
        assert_eq!(vulnerability["advisory"], json!({"uid": "sca-28503"}));
        assert_eq!(vulnerability["title"], "SSH permits root login");
        for absent in ["cve", "affected_packages", "remediation", "is_fix_available"] {
            assert!(vulnerability.get(absent).is_none(), "{absent}");
        }
        assert_eq!(
            (event["status_id"].clone(), event["status_detail"].clone()),
            (json!(3), json!("compensating_control"))
        );
        assert_eq!(event["finding_info"]["types"], json!(["compliance"]));
        assert_eq!(event["unmapped"]["subject"], record["subject"]);
        assert_eq!(event["unmapped"]["suppression"], record["suppression"]);
    }

    #[test]
    fn kev_and_scores_without_a_cve() {
        let mut record = finding();
        record["kev"] = json!(true);
        let event = vulnerability_finding(&record, Some(&endpoint()), "1");
        assert_eq!(event["vulnerabilities"][0]["is_exploit_available"], true);
        assert_eq!(event["unmapped"]["kev"], true);
        record["cve_id"] = Value::Null;
        let event = vulnerability_finding(&record, Some(&endpoint()), "1");
        assert!(event["vulnerabilities"][0].get("cve").is_none());
        assert_eq!(event["unmapped"]["cvss"], record["cvss"]);
        assert_eq!(event["unmapped"]["epss"], record["epss"]);
    }

    #[test]
    fn a_missing_endpoint_leaves_the_device_its_id() {
        let event = vulnerability_finding(&finding(), None, "1");
        assert_eq!(event["device"], json!({"uid": ENDPOINT_ID, "type_id": 0, "type": "Unknown"}));
        assert!(event["unmapped"].get("endpoint").is_none());
    }

    #[test]
    fn fields_the_mapping_does_not_know_go_to_unmapped() {
        let mut record = finding();
        record["risk"] = json!({"business": "high"});
        let mut host = endpoint();
        host["owner"] = json!({"name": null, "email": "ops@acme.example"});
        let event = vulnerability_finding(&record, Some(&host), "1");
        assert_eq!(event["unmapped"]["risk"], json!({"business": "high"}));
        assert!(event["device"].get("owner").is_none());
        assert_eq!(event["unmapped"]["endpoint"]["owner"], host["owner"]);
    }

    /// With `ESR_OCSF_SAMPLE` set, writes the renderings of these tests'
    /// findings there as NDJSON, for an independent OCSF validator.
    #[test]
    fn write_samples_when_asked() {
        let Some(path) = std::env::var_os("ESR_OCSF_SAMPLE") else { return };
        let mut compliance = finding();
        compliance["finding_type"] = json!("compliance");
        compliance["cve_id"] = Value::Null;
        compliance["subject"]["type"] = json!("configuration");
        compliance["status"] = json!("suppressed");
        compliance["suppression"] = json!({"reason": "accepted_risk", "note": null, "expires_at": null});
        let mut resolved = finding();
        resolved["status"] = json!("resolved");
        resolved["kev"] = json!(true);
        resolved["resolved_at"] = json!("2026-03-11T00:00:00Z");
        let mut bare = finding();
        for field in ["description", "cvss", "epss", "fixed_version", "remediation_target_id"] {
            bare[field] = Value::Null;
        }
        bare["subject"]["version"] = Value::Null;
        let lines: Vec<String> = [
            vulnerability_finding(&finding(), Some(&endpoint()), "1.4.0"),
            vulnerability_finding(&compliance, Some(&endpoint()), "1.4.0"),
            vulnerability_finding(&resolved, None, "1.4.0"),
            vulnerability_finding(&bare, Some(&json!({"id": ENDPOINT_ID})), "1.4.0"),
        ]
        .iter()
        .map(Value::to_string)
        .collect();
        std::fs::write(path, lines.join("\n") + "\n").expect("write the samples");
    }
}
