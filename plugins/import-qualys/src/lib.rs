//! The Qualys VM importer: the three XML layouts Qualys VM writes of a
//! host scan, told apart by their root element:
//!
//! - `ASSET_DATA_REPORT` (asset_data_report.dtd, the "Scan Report" of a
//!   report template): hosts, each with `VULN_INFO`s naming a QID, and
//!   after the hosts a `GLOSSARY` of the QIDs (title, severity, CVEs);
//! - `HOST_LIST_VM_DETECTION_OUTPUT` (the host list detection API):
//!   hosts, each with `DETECTION`s of a QID; no titles, no CVEs (those
//!   are in the KnowledgeBase API);
//! - `SCAN` (scan-1.dtd, the scan results): `IP`s, each with `INFOS`,
//!   `SERVICES`, `VULNS` and `PRACTICES` of categories (`CAT`) of items.
//!
//! What maps where is in `docs/scanner-report-mapping/qualys.md`. In
//! short: one entry per host, QID and port (`check` `qid:<n>`, located at
//! `<port>/<protocol>`); information gathered is skipped with a reason; a
//! fixed detection is resolved. Reports are streamed with the SDK's XML
//! reader (no DTD is read): memory follows the largest record (a host's
//! field, a detection, a glossary entry; a whole `IP` in a `SCAN`) plus a
//! summary per host.

use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};

use esr_plugin_sdk::importing::importer_info;
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, CvssRating, EntryState, ImporterInfo, OperatingSystem, Package, PackageClass,
    ReportEntry, ReportError, ReportHost, ReportImporter, Severity, SkippedEntry, SuppressionReason,
};
use esr_plugin_sdk::time::Timestamp;
use esr_plugin_sdk::xml::{self, Element};

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "hosts × QIDs × ports";
/// The package of an item found on no port (Nessus's word for it).
const HOST_LEVEL: &str = "general";

const ASSET_DATA_REPORT: &str = "ASSET_DATA_REPORT";
const DETECTION_OUTPUT: &str = "HOST_LIST_VM_DETECTION_OUTPUT";
const SCAN: &str = "SCAN";

pub struct Qualys;

esr_plugin_sdk::export_report_importer!(crate::Qualys);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    AssetData,
    Detections,
    Scan,
}

impl ReportImporter for Qualys {
    fn describe() -> ImporterInfo {
        importer_info(
            "qualys",
            env!("CARGO_PKG_VERSION"),
            "Qualys VM XML: host detection list, scan results and asset data reports",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        if layout_of(bytes).is_some() { Confidence::Certain } else { Confidence::No }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        match layout_of(bytes) {
            Some(Layout::AssetData) => AssetData::convert(bytes),
            Some(Layout::Detections) => Detections::convert(bytes),
            Some(Layout::Scan) => Scan::convert(bytes),
            None => Err(not_qualys(bytes)),
        }
    }
}

/// The layout of a report, from its root element alone (what comes
/// before it is all that is read).
fn layout_of(report: &[u8]) -> Option<Layout> {
    let root = xml::root(report)?;
    match root.name.as_str() {
        ASSET_DATA_REPORT => Some(Layout::AssetData),
        DETECTION_OUTPUT => Some(Layout::Detections),
        // `SCAN` alone is too common a name: Qualys's carries a scan
        // reference (`scan/1327124089.959`) or names scan-1.dtd.
        SCAN if root.attribute("value").is_some_and(|value| value.trim_start().starts_with("scan/"))
            || names_scan_dtd(report) =>
        {
            Some(Layout::Scan)
        }
        _ => None,
    }
}

/// Whether the prolog (what precedes `<SCAN`) names Qualys's scan-1.dtd.
fn names_scan_dtd(report: &[u8]) -> bool {
    let head = &report[..report.len().min(64 << 10)];
    let prolog = match head.windows(5).position(|window| window == b"<SCAN") {
        Some(end) => &head[..end],
        None => head,
    };
    prolog.windows(10).any(|window| window == b"scan-1.dtd")
}

/// Why a document no layout takes cannot be converted: what is wrong with
/// it as XML, else what its root is.
fn not_qualys(report: &[u8]) -> ReportError {
    if let Err(error) = xml::for_each_record(report, |_| false, |_, _| Ok(())) {
        return error;
    }
    let root = xml::root(report).map(|root| root.name.chars().take(64).collect::<String>()).unwrap_or_default();
    ReportError::Unsupported(format!(
        "not a Qualys VM report: the root element is <{root}>, not {ASSET_DATA_REPORT}, {DETECTION_OUTPUT} or a {SCAN} of scan-1.dtd"
    ))
}

/// Whether `path` is exactly `names`.
fn path_is(path: &[String], names: &[&str]) -> bool {
    path.len() == names.len() && path.iter().zip(names).all(|(name, expected)| name == expected)
}

/// What every layout fills in: the converted report, and the host keys
/// given out.
struct Conversion {
    converted: ConvertedReport,
    keys: HashSet<String>,
}

impl Conversion {
    fn new() -> Self {
        Conversion {
            converted: ConvertedReport {
                scanner: "qualys".into(),
                // A host scan covers the OS and what listens on the network.
                scanned_classes: vec![PackageClass::Os, PackageClass::Other],
                ..ConvertedReport::default()
            },
            keys: HashSet::new(),
        }
    }

    /// `wanted`, or `wanted#2`, `#3`… when another host of the report has
    /// that key (one address listed twice).
    fn unique_key(&mut self, wanted: &str) -> String {
        let mut key = wanted.to_owned();
        let mut count = 1;
        while !self.keys.insert(key.clone()) {
            count += 1;
            key = format!("{wanted}#{count}");
        }
        key
    }

    fn skip(&mut self, entry: String, reason: &str) -> Result<(), ReportError> {
        self.converted.add_skipped(SkippedEntry { entry, reason: reason.to_owned() }, FAN_OUT)
    }

    fn add(&mut self, entry: ReportEntry) -> Result<(), ReportError> {
        self.converted.add_entry(entry, FAN_OUT)
    }

    fn set_scanned_at(&mut self, text: Option<&str>) {
        if let Some(time) = text.and_then(report_time) {
            self.converted.scanned_at = Some(time);
        }
    }
}

/// A host's fields as they stream by (the host list detection API and the
/// asset data report give each as an element of its own).
#[derive(Debug, Default)]
struct HostDraft {
    /// Its position among the report's hosts, for messages.
    index: usize,
    /// The Qualys host id (`ID` of the detection API): the host's key.
    qualys_id: Option<String>,
    ip: Option<String>,
    dns: Option<String>,
    fqdn: Option<String>,
    netbios: Option<String>,
    os: Option<String>,
    error: Option<String>,
    /// Its key, fixed once an entry names it.
    key: Option<String>,
}

impl HostDraft {
    fn read(&mut self, field: &Element) {
        let text = || field.text().map(str::to_owned);
        match field.name.as_str() {
            "ID" => self.qualys_id = text(),
            "IP" => self.ip = text(),
            // A host scanned by its IPv6 address only.
            "IPV6" if self.ip.is_none() => self.ip = text(),
            "DNS" => self.dns = text(),
            // Newer detection API answers give the parts of the name too.
            "DNS_DATA" => self.fqdn = field.child_text("FQDN").map(str::to_owned),
            "NETBIOS" => self.netbios = text(),
            "OS" | "OPERATING_SYSTEM" => self.os = text(),
            "ERROR" => self.error = text().or_else(|| Some("(no text)".into())),
            _ => {}
        }
    }

    /// The key its entries name it by: the Qualys host id, else its IP.
    fn key(&mut self, conversion: &mut Conversion) -> String {
        if let Some(key) = &self.key {
            return key.clone();
        }
        let wanted =
            self.qualys_id.clone().or_else(|| self.ip.clone()).unwrap_or_else(|| format!("HOST[{}]", self.index));
        let key = conversion.unique_key(&wanted);
        self.key = Some(key.clone());
        key
    }

    /// How messages name it: its key, else its position.
    fn label(&self) -> String {
        self.key.clone().or_else(|| self.ip.clone()).unwrap_or_else(|| format!("HOST[{}]", self.index))
    }

    fn finish(mut self, conversion: &mut Conversion) -> Result<(), ReportError> {
        if let Some(error) = self.error.take() {
            let entry = format!("HOST_LIST/HOST[{}]", self.index);
            return conversion.skip(entry, &format!("Qualys reports an error instead of this host: {error}"));
        }
        let key = self.key(conversion);
        let dns = self.fqdn.or(self.dns);
        let host = report_host(key, self.ip, dns, self.netbios, self.os.as_deref());
        conversion.converted.hosts.push(host);
        Ok(())
    }
}

/// The host whose fields are streaming by: a new one begins each time the
/// reader enters a `HOST` (counted by the record filter, which sees every
/// element's path).
#[derive(Default)]
struct HostStream {
    current: Option<HostDraft>,
}

impl HostStream {
    /// The host numbered `index` (1-based), finishing the one before.
    fn at(&mut self, index: usize, conversion: &mut Conversion) -> Result<&mut HostDraft, ReportError> {
        if self.current.as_ref().is_some_and(|host| host.index != index)
            && let Some(done) = self.current.take()
        {
            done.finish(conversion)?;
        }
        Ok(self.current.get_or_insert_with(|| HostDraft { index, ..HostDraft::default() }))
    }

    fn finish(&mut self, conversion: &mut Conversion) -> Result<(), ReportError> {
        match self.current.take() {
            Some(host) => host.finish(conversion),
            None => Ok(()),
        }
    }
}

/// The asset data report: hosts first, the glossary of their QIDs last,
/// so each `VULN_INFO` is kept (without its result text) until the
/// glossary has been read.
struct AssetData {
    conversion: Conversion,
    hosts: HostStream,
    /// (host key, vulnerability) in report order.
    found: Vec<(String, VulnInfo)>,
    glossary: BTreeMap<String, QidDetails>,
    saw_header: bool,
}

/// What an asset data report says of one QID on one host and port.
struct VulnInfo {
    /// The glossary entry's id, `qid_<n>`.
    reference: String,
    qid: String,
    kind: Option<String>,
    location: Option<String>,
    status: Option<String>,
    /// How messages name it.
    label: String,
}

/// A QID as a glossary (or a `SCAN` item) describes it.
#[derive(Debug, Default, Clone)]
struct QidDetails {
    title: Option<String>,
    level: Option<String>,
    cves: Vec<String>,
    cvss: Vec<CvssRating>,
    description: Option<String>,
}

impl AssetData {
    fn convert(report: &[u8]) -> Result<ConvertedReport, ReportError> {
        let host_count = Cell::new(0usize);
        let mut state = AssetData {
            conversion: Conversion::new(),
            hosts: HostStream::default(),
            found: Vec::new(),
            glossary: BTreeMap::new(),
            saw_header: false,
        };
        xml::for_each_record(
            report,
            |path| match path.len() {
                1 => false,
                2 => !matches!(path[1].as_str(), "HOST_LIST" | "GLOSSARY"),
                3 if path_is(path, &[ASSET_DATA_REPORT, "HOST_LIST", "HOST"]) => {
                    host_count.set(host_count.get() + 1);
                    false
                }
                3 => !path_is(path, &[ASSET_DATA_REPORT, "GLOSSARY", "VULN_DETAILS_LIST"]),
                // Inside a HOST: its fields are records, its list is not.
                4 => path[3] != "VULN_INFO_LIST",
                _ => true,
            },
            |parents, element| state.record(parents, element, host_count.get()),
        )?;
        state.finish()
    }

    fn record(&mut self, parents: &[String], element: Element, host_index: usize) -> Result<(), ReportError> {
        let in_host_list = parents.get(1).is_some_and(|name| name == "HOST_LIST");
        match parents.len() {
            1 if element.name == "HEADER" => {
                self.saw_header = true;
                self.conversion.set_scanned_at(element.child_text("GENERATION_DATETIME"));
            }
            3 if in_host_list => self.hosts.at(host_index, &mut self.conversion)?.read(&element),
            4 if in_host_list && element.name == "VULN_INFO" => {
                let host = self.hosts.at(host_index, &mut self.conversion)?;
                let key = host.key(&mut self.conversion);
                let label = host.label();
                match vuln_info(&element, &label) {
                    Some(info) => self.found.push((key, info)),
                    None => self.conversion.skip(
                        format!("HOST {label}: VULN_INFO (line {})", element.line),
                        "no QID: the item names no vulnerability",
                    )?,
                }
            }
            3 if element.name == "VULN_DETAILS" => {
                if let Some(reference) = element.attribute_text("id").map(str::to_owned) {
                    self.glossary.insert(reference, qid_details(&element, "THREAT"));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(mut self) -> Result<ConvertedReport, ReportError> {
        if !self.saw_header {
            return Err(ReportError::Unsupported(format!(
                "not a Qualys asset data report: the {ASSET_DATA_REPORT} has no HEADER"
            )));
        }
        self.hosts.finish(&mut self.conversion)?;
        let unknown = QidDetails::default();
        for (host, info) in std::mem::take(&mut self.found) {
            let at = info.label.clone();
            match info.kind.as_deref() {
                Some("Ig") => {
                    self.conversion.skip(
                        at,
                        "information gathered (TYPE Ig): what the scan learned of the host, not a vulnerability",
                    )?;
                    continue;
                }
                // Practice: a potential vulnerability, which Qualys could not confirm.
                Some("Vuln" | "Practice") => {}
                other => {
                    let reason = format!("a TYPE the importer does not know: {}", other.unwrap_or("none"));
                    self.conversion.skip(at, &reason)?;
                    continue;
                }
            }
            let details = self.glossary.get(&info.reference).unwrap_or(&unknown);
            let entry = entry(Found {
                host,
                qid: &info.qid,
                details,
                location: info.location,
                state: status_state(info.status.as_deref()),
            });
            self.conversion.add(entry)?;
        }
        Ok(self.conversion.converted)
    }
}

/// A `VULN_INFO`'s QID, type, port and status; `None` without a QID.
fn vuln_info(element: &Element, host: &str) -> Option<VulnInfo> {
    let qid_element = element.child("QID")?;
    let reference = qid_element.attribute_text("id").map(str::to_owned);
    let qid = qid_element
        .text()
        .map(str::to_owned)
        .or_else(|| reference.as_deref().and_then(|reference| reference.strip_prefix("qid_")).map(str::to_owned))
        .filter(|qid| !qid.contains(char::is_whitespace))?;
    let location = location(element.child_text("PORT"), element.child_text("PROTOCOL"));
    let label = item_label(&format!("HOST {host}"), &qid, location.as_deref());
    Some(VulnInfo {
        reference: reference.unwrap_or_else(|| format!("qid_{qid}")),
        kind: element.child_text("TYPE").map(str::to_owned),
        status: element.child_text("VULN_STATUS").map(str::to_owned),
        qid,
        location,
        label,
    })
}

/// How skipped entries name an item: `HOST 10.0.0.1: QID 38170 on 443/tcp`.
fn item_label(owner: &str, qid: &str, location: Option<&str>) -> String {
    match location {
        Some(location) => format!("{owner}: QID {qid} on {location}"),
        None => format!("{owner}: QID {qid}"),
    }
}

/// Title, severity, CVEs, CVSS and description of a glossary entry or a
/// `SCAN` item (whose description is its `description_field`).
fn qid_details(element: &Element, description_field: &str) -> QidDetails {
    let mut cvss = Vec::new();
    // The asset data report nests them (`CVSS_SCORE/CVSS_BASE`), SCAN does not.
    for (path, version) in [
        (&["CVSS3_SCORE", "CVSS3_BASE"][..], "3.0"),
        (&["CVSS3_BASE"][..], "3.0"),
        (&["CVSS_SCORE", "CVSS_BASE"][..], "2.0"),
        (&["CVSS_BASE"][..], "2.0"),
    ] {
        if let Some(rating) = element.find(path).and_then(|base| cvss_rating(base, version)) {
            cvss.push(rating);
        }
    }
    QidDetails {
        title: element.child_text("TITLE").map(str::to_owned),
        level: element.child_text("SEVERITY").or_else(|| element.attribute_text("severity")).map(str::to_owned),
        cves: cve_ids(element),
        cvss: report::order_cvss(cvss, None),
        description: element.child_text(description_field).map(truncated),
    }
}

/// The CVEs an item lists, in order, once each: `CVE_ID_LIST/CVE_ID/ID`,
/// then a `SCAN` item's `cveid` attribute (comma-separated).
fn cve_ids(element: &Element) -> Vec<String> {
    let listed = element.child("CVE_ID_LIST").into_iter().flat_map(|list| list.children_named("CVE_ID"));
    let mut ids: Vec<String> = Vec::new();
    let attribute = element.attribute("cveid").unwrap_or_default().split(',');
    for id in listed.filter_map(|cve| cve.child_text("ID")).chain(attribute) {
        let id = id.trim();
        if report::is_cve(id) && !ids.iter().any(|known| known == id) {
            ids.push(id.to_owned());
        }
    }
    ids
}

/// A CVSS base score as Qualys writes it: `5.0`, `7.4 (AV:N/AC:H/…)`, or
/// `-` for none. A v3 vector without its `CVSS:3.x/` prefix is read as
/// 3.0 (the score is kept as given either way). `source="service"`: the
/// score is Qualys's own.
fn cvss_rating(base: &Element, version: &str) -> Option<CvssRating> {
    let text = base.text().filter(|text| *text != "-")?;
    let (score, vector) = match text.split_once('(') {
        Some((score, vector)) => (score.trim(), Some(vector.trim().trim_end_matches(')').trim())),
        None => (text, None),
    };
    let vector = vector.filter(|vector| !vector.is_empty()).map(|vector| {
        if version == "3.0" && !vector.starts_with("CVSS:") { format!("CVSS:3.0/{vector}") } else { vector.to_owned() }
    });
    let source = (base.attribute_text("source") == Some("service")).then_some("qualys");
    let mut rating = report::cvss_rating(source, vector.as_deref(), score.parse::<f64>().ok())?;
    if rating.version.is_empty() {
        rating.version = version.to_owned();
    }
    Some(rating)
}

/// The host list detection API: each host's fields, then its detections,
/// each converted as it comes.
struct Detections {
    conversion: Conversion,
    hosts: HostStream,
}

impl Detections {
    fn convert(report: &[u8]) -> Result<ConvertedReport, ReportError> {
        let host_count = Cell::new(0usize);
        let saw_response = Cell::new(false);
        let mut state = Detections { conversion: Conversion::new(), hosts: HostStream::default() };
        xml::for_each_record(
            report,
            |path| match path.len() {
                1 => false,
                2 if path[1] == "RESPONSE" => {
                    saw_response.set(true);
                    false
                }
                3 => path[2] != "HOST_LIST",
                4 if path[3] == "HOST" => {
                    host_count.set(host_count.get() + 1);
                    false
                }
                5 => path[4] != "DETECTION_LIST",
                _ => true,
            },
            |parents, element| state.record(parents, element, host_count.get()),
        )?;
        if !saw_response.get() {
            return Err(ReportError::Unsupported(format!(
                "not a Qualys host detection list: the {DETECTION_OUTPUT} has no RESPONSE"
            )));
        }
        state.hosts.finish(&mut state.conversion)?;
        Ok(state.conversion.converted)
    }

    fn record(&mut self, parents: &[String], element: Element, host_index: usize) -> Result<(), ReportError> {
        let in_response = parents.get(1).is_some_and(|name| name == "RESPONSE");
        match parents.len() {
            2 if in_response && element.name == "DATETIME" => self.conversion.set_scanned_at(element.text()),
            2 if in_response && element.name == "WARNING" => self.truncated(&element)?,
            4 if in_response => self.hosts.at(host_index, &mut self.conversion)?.read(&element),
            5 if in_response && element.name == "DETECTION" => self.detection(&element, host_index)?,
            _ => {}
        }
        Ok(())
    }

    /// The API answers a page of hosts at a time, and says so in a
    /// `WARNING` with the next page's URL: the hosts of other pages are not
    /// in the file, so the report resolves nothing.
    fn truncated(&mut self, warning: &Element) -> Result<(), ReportError> {
        self.conversion.converted.partial = true;
        let text = warning.child_text("TEXT").unwrap_or("the answer is truncated");
        let next = warning.child_text("URL").map(|url| format!(" (next page: {url})")).unwrap_or_default();
        self.conversion.skip(
            "RESPONSE/WARNING".into(),
            &format!("{text}{next}: the file holds one page of the host list, so nothing is resolved"),
        )
    }

    fn detection(&mut self, detection: &Element, host_index: usize) -> Result<(), ReportError> {
        let host = self.hosts.at(host_index, &mut self.conversion)?;
        let key = host.key(&mut self.conversion);
        let label = host.label();
        let location = location(detection.child_text("PORT"), detection.child_text("PROTOCOL"));
        let Some(qid) = detection.child_text("QID").filter(|qid| !qid.contains(char::is_whitespace)) else {
            let at = format!("HOST {label}: DETECTION (line {})", detection.line);
            return self.conversion.skip(at, "no QID: the detection names no vulnerability");
        };
        let at = item_label(&format!("HOST {label}"), qid, location.as_deref());
        match detection.child_text("TYPE") {
            Some("Info") => {
                let reason = "information gathered (TYPE Info): what the scan learned of the host, not a vulnerability";
                return self.conversion.skip(at, reason);
            }
            Some("Confirmed" | "Potential") => {}
            other => {
                let reason = format!("a TYPE the importer does not know: {}", other.unwrap_or("none"));
                return self.conversion.skip(at, &reason);
            }
        }
        let ignored = detection.child_text("IS_IGNORED") == Some("1");
        let state = match status_state(detection.child_text("STATUS")) {
            None if ignored => Some(EntryState::Suppressed {
                reason: SuppressionReason::AcceptedRisk,
                note: Some("ignored in Qualys (IS_IGNORED)".into()),
            }),
            state => state,
        };
        // Titles and CVEs are in the KnowledgeBase, not here; the result is
        // what this host showed.
        let details = QidDetails {
            level: detection.child_text("SEVERITY").map(str::to_owned),
            description: detection.child_text("RESULTS").map(truncated),
            ..QidDetails::default()
        };
        let entry = entry(Found { host: key, qid, details: &details, location, state });
        self.conversion.add(entry)
    }
}

/// The scan results: a header, then one `IP` per host, each read whole
/// (its categories carry the ports, its attributes the names).
struct Scan {
    conversion: Conversion,
    ips: usize,
}

impl Scan {
    fn convert(report: &[u8]) -> Result<ConvertedReport, ReportError> {
        let mut state = Scan { conversion: Conversion::new(), ips: 0 };
        xml::for_each_record(report, |path| path.len() >= 2, |_, element| state.record(element))?;
        Ok(state.conversion.converted)
    }

    fn record(&mut self, element: Element) -> Result<(), ReportError> {
        match element.name.as_str() {
            "HEADER" => {
                for key in element.children_named("KEY") {
                    match key.attribute_text("value") {
                        Some("DATE") => self.conversion.set_scanned_at(key.text()),
                        Some("SCAN_HOST") => {
                            self.conversion.converted.scanner_version = key.text().and_then(scanner_version)
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
            "IP" => {
                self.ips += 1;
                self.host(&element)
            }
            _ => Ok(()),
        }
    }

    fn host(&mut self, ip: &Element) -> Result<(), ReportError> {
        // A host found down was not scanned: it says nothing of its findings.
        if ip.attribute_text("status").is_some_and(|status| status.eq_ignore_ascii_case("down")) {
            return Ok(());
        }
        let address = ip.attribute_text("value").map(str::to_owned);
        let wanted = address.clone().unwrap_or_else(|| format!("IP[{}]", self.ips));
        let key = self.conversion.unique_key(&wanted);
        let host =
            report_host(key.clone(), address, ip.attribute("name").map(str::to_owned), None, ip.child_text("OS"));
        self.conversion.converted.hosts.push(host);
        for (section, item_name) in
            [("INFOS", "INFO"), ("SERVICES", "SERVICE"), ("VULNS", "VULN"), ("PRACTICES", "PRACTICE")]
        {
            for category in ip.children_named(section).flat_map(|list| list.children_named("CAT")) {
                let location = location(category.attribute_text("port"), category.attribute_text("protocol"));
                for item in category.children_named(item_name) {
                    self.item(&key, section, item, location.clone())?;
                }
            }
        }
        Ok(())
    }

    fn item(&mut self, key: &str, section: &str, item: &Element, location: Option<String>) -> Result<(), ReportError> {
        let Some(qid) = item.attribute_text("number").filter(|qid| !qid.contains(char::is_whitespace)) else {
            let at = format!("IP {key}: {section}/{} (line {})", item.name, item.line);
            return self.conversion.skip(at, "no number: the item names no QID");
        };
        let at = item_label(&format!("IP {key} {section}"), qid, location.as_deref());
        match section {
            "INFOS" => self
                .conversion
                .skip(at, "information gathered (INFOS): what the scan learned of the host, not a vulnerability"),
            "SERVICES" => self
                .conversion
                .skip(at, "information gathered (SERVICES): a service the scan found running, not a vulnerability"),
            // VULNS, and PRACTICES: potential vulnerabilities, which Qualys could not confirm.
            _ => {
                let details = qid_details(item, "DIAGNOSIS");
                let entry = entry(Found { host: key.to_owned(), qid, details: &details, location, state: None });
                self.conversion.add(entry)
            }
        }
    }
}

/// The scanner's version in a `SCAN_HOST` key: `62.210.136.186 (Scanner
/// 4.14.30-1,Web 6.0 FR6 [build 6.3.94-1],Vulnsigs 1.22.62-1)`.
fn scanner_version(scan_host: &str) -> Option<String> {
    let (_, rest) = scan_host.split_once("Scanner ")?;
    let version = rest.split([',', ')', ' ']).next()?.trim();
    (!version.is_empty()).then(|| version.to_owned())
}

/// One QID found on one host and port.
struct Found<'a> {
    host: String,
    qid: &'a str,
    details: &'a QidDetails,
    location: Option<String>,
    state: Option<EntryState>,
}

fn entry(found: Found<'_>) -> ReportEntry {
    let Found { host, qid, details, location, state } = found;
    let check = format!("qid:{qid}");
    let vulnerability_id = details.cves.first().cloned().unwrap_or_else(|| check.clone());
    let mut aliases = Vec::new();
    for alias in details.cves.iter().skip(1).chain([&check]) {
        report::push_alias(&mut aliases, &vulnerability_id, alias);
    }
    let (severity_given, severity) = qualys_severity(details.level.as_deref());
    ReportEntry {
        host: Some(host),
        vulnerability_id,
        aliases,
        check: Some(check),
        package: Package {
            // The one name all three layouts give what was found: its port
            // (`SERVICE` is only in the asset data report, so naming it
            // would make another finding of each layout).
            name: location.clone().unwrap_or_else(|| HOST_LEVEL.to_owned()),
            ..Package::default()
        },
        class: PackageClass::Other,
        location,
        severity: severity.unwrap_or_else(|| report::entry_severity(None, &details.cvss)),
        severity_given,
        cvss: details.cvss.clone(),
        epss: None,
        kev: None,
        fixed_version: None,
        state,
        title: Some(details.title.clone().unwrap_or_else(|| format!("Qualys QID {qid}"))),
        description: details.description.clone(),
    }
}

/// Qualys's severity levels on the contract's scale: 5 (urgent) critical,
/// 4 (critical) high, 3 (serious) medium, 2 (medium) and 1 (minimal) low;
/// the level as given is kept. Another value is no level.
fn qualys_severity(level: Option<&str>) -> (Option<String>, Option<Severity>) {
    let Some(level) = level.map(str::trim).filter(|level| !level.is_empty()) else { return (None, None) };
    let severity = match level {
        "5" => Some(Severity::Critical),
        "4" => Some(Severity::High),
        "3" => Some(Severity::Medium),
        "1" | "2" => Some(Severity::Low),
        _ => None,
    };
    (Some(level.to_owned()), severity)
}

/// A detection Qualys found fixed is resolved; New, Active and Re-Opened
/// are open.
fn status_state(status: Option<&str>) -> Option<EntryState> {
    status.is_some_and(|status| status.trim().eq_ignore_ascii_case("Fixed")).then_some(EntryState::Resolved)
}

/// `<port>/<protocol>` (the protocol in lower case, as every layout
/// writes it), the port alone without a protocol; `None` without a port.
fn location(port: Option<&str>, protocol: Option<&str>) -> Option<String> {
    let port = port.map(str::trim).filter(|port| !port.is_empty())?;
    Some(match protocol.map(str::trim).filter(|protocol| !protocol.is_empty()) {
        Some(protocol) => format!("{port}/{}", protocol.to_ascii_lowercase()),
        None => port.to_owned(),
    })
}

/// A report time as RFC 3339: as given when it is; a time without a zone
/// is read as UTC; anything else is no time.
fn report_time(text: &str) -> Option<String> {
    let text = text.trim();
    if Timestamp::parse_saturating(text).is_some() {
        return Some(text.to_owned());
    }
    let utc = format!("{}Z", text.replacen(' ', "T", 1));
    Timestamp::parse_saturating(&utc).is_some().then_some(utc)
}

/// A host as the report names it: the best name as its host name (the DNS
/// name, else the NetBIOS name, else the IP), the others beside it.
fn report_host(
    key: String,
    ip: Option<String>,
    dns: Option<String>,
    netbios: Option<String>,
    os: Option<&str>,
) -> ReportHost {
    let dns = dns.as_deref().and_then(host_name);
    let netbios = netbios.as_deref().and_then(host_name);
    let ip = ip.map(|ip| ip.trim().to_owned()).filter(|ip| !ip.is_empty());
    let hostname = dns.clone().or_else(|| netbios.clone()).or_else(|| ip.clone()).unwrap_or_default();
    ReportHost {
        key,
        hostname,
        operating_system: os.and_then(operating_system),
        fqdn: dns.filter(|name| name.contains('.')),
        netbios_name: netbios,
        ip,
        ..ReportHost::default()
    }
}

/// A name as a host name: trimmed; `None` when blank or a placeholder
/// (`No registered hostname` in scan results) or anything with spaces.
fn host_name(name: &str) -> Option<String> {
    let name = name.trim();
    let placeholder = name.is_empty() || name == "-" || name.eq_ignore_ascii_case("No registered hostname");
    (!placeholder && !name.contains(char::is_whitespace)).then(|| name.to_owned())
}

/// Qualys names the OS it fingerprinted, sometimes as alternatives
/// (`Ubuntu / Tiny Core Linux / Linux 2.6.x`): the name as given, the
/// family from it.
fn operating_system(name: &str) -> Option<OperatingSystem> {
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    Some(OperatingSystem {
        name: name.to_owned(),
        family: Some(report::os_family(name).to_owned()),
        ..OperatingSystem::default()
    })
}

/// `text` trimmed, cut as the host cuts a finding's description, so a large
/// report does not hold what would be thrown away.
fn truncated(text: &str) -> String {
    esr_plugin_sdk::text::cut_chars(text.trim(), esr_plugin_sdk::report::MAX_DESCRIPTION_CHARS)
}

#[cfg(test)]
mod tests;
