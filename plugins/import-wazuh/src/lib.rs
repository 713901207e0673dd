//! The Wazuh importer: Wazuh 4.8+ vulnerability states, as the indexer
//! answers a search of `wazuh-states-vulnerabilities-*` (`GET
//! /wazuh-states-vulnerabilities-*/_search`): one hit per agent, package
//! and vulnerability, several agents per file.
//!
//! What maps where is in `docs/scanner-report-mapping/wazuh.md`. In short:
//! each agent is a host (its name the host name, its `host.os` the
//! operating system); each hit an entry of its agent; the score comes
//! without a vector; a search answering one page of more hits is marked
//! partial, so it resolves nothing.

use std::collections::BTreeMap;

use esr_plugin_sdk::importing::importer_info;
use esr_plugin_sdk::report::{
    self, Confidence, ConvertedReport, ImporterInfo, OperatingSystem, Package, PackageClass, ReportEntry, ReportError,
    ReportHost, ReportImporter, SkippedEntry,
};
use serde::Deserialize;
use serde_json::Value;

/// What multiplies this format's entries, for the error past `report::MAX_ENTRIES`.
const FAN_OUT: &str = "hits";

pub struct Wazuh;

esr_plugin_sdk::export_report_importer!(crate::Wazuh);

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SearchResponse {
    hits: Option<Hits>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Hits {
    total: Option<Value>,
    hits: Option<Vec<Hit>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Hit {
    #[serde(rename = "_source")]
    source: Option<State>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct State {
    agent: Agent,
    host: HostInfo,
    package: WazuhPackage,
    vulnerability: Vulnerability,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Agent {
    id: String,
    name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HostInfo {
    os: Option<Os>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct Os {
    name: Option<String>,
    version: Option<String>,
    platform: Option<String>,
    full: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WazuhPackage {
    name: String,
    version: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Vulnerability {
    id: String,
    severity: Option<String>,
    description: Option<String>,
    score: Option<Score>,
    scanner: Option<Scanner>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Score {
    base: Option<f64>,
    version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Scanner {
    source: Option<String>,
}

impl ReportImporter for Wazuh {
    fn describe() -> ImporterInfo {
        importer_info(
            "wazuh",
            env!("CARGO_PKG_VERSION"),
            "Wazuh 4.8+ vulnerability states: an indexer search response of wazuh-states-vulnerabilities-*",
        )
    }

    fn detect(bytes: &[u8]) -> Confidence {
        let Some(Value::Object(object)) = report::parse_outline(bytes, 5) else { return Confidence::No };
        let Some(hits) = object.get("hits").and_then(|hits| hits.get("hits")).and_then(Value::as_array) else {
            return Confidence::No;
        };
        let is_state = |hit: &Value| {
            hit.pointer("/_source/vulnerability").is_some_and(Value::is_object)
                && hit.pointer("/_source/agent").is_some_and(Value::is_object)
        };
        let from_wazuh = |hit: &Value| {
            hit.get("_index")
                .and_then(Value::as_str)
                .is_some_and(|index| index.starts_with("wazuh-states-vulnerabilities"))
                || hit.pointer("/_source/wazuh").is_some()
        };
        if hits.is_empty() {
            Confidence::Possible
        } else if !hits.iter().all(is_state) {
            Confidence::No
        } else if hits.iter().any(from_wazuh) {
            Confidence::Certain
        } else {
            Confidence::Possible
        }
    }

    fn convert(bytes: &[u8]) -> Result<ConvertedReport, ReportError> {
        let response: SearchResponse = report::parse_report(
            bytes,
            "a Wazuh indexer search response (hits.hits[]._source with agent, host, package, vulnerability)",
        )?;
        let Some(Hits { total, hits: Some(hits) }) = response.hits else {
            return Err(ReportError::Unsupported("not an indexer search response: no hits.hits".into()));
        };
        let mut converted = ConvertedReport {
            scanner: "wazuh".into(),
            // Wazuh scans the OS packages and the language packages of its
            // inventory (PyPI, npm).
            scanned_classes: vec![PackageClass::Os, PackageClass::Language],
            ..ConvertedReport::default()
        };
        // `total` is a number, or `{value, relation}` since Elasticsearch 7,
        // where `gte` makes it a lower bound (10,000 unless the search asks
        // for `track_total_hits`): more hits may exist than it says.
        let at_least = total.as_ref().and_then(|total| total.get("relation")).and_then(Value::as_str) == Some("gte");
        let total = total.as_ref().and_then(|total| total.get("value").unwrap_or(total).as_u64());
        if let Some(total) =
            total.filter(|total| *total > hits.len() as u64 || (at_least && *total >= hits.len() as u64))
        {
            converted.partial = true;
            let of = if at_least { format!("at least {total}") } else { total.to_string() };
            converted.add_skipped(SkippedEntry {
                entry: format!("hits.hits[{}..{total}]", hits.len()),
                reason: format!(
                    "the search response holds {} of {of} hits: the others are not in the file (page the search with size and search_after); nothing is resolved",
                    hits.len()
                ),
            }, FAN_OUT)?;
        }
        let mut hosts: BTreeMap<String, ReportHost> = BTreeMap::new();
        for (index, hit) in hits.into_iter().enumerate() {
            let at = format!("hits.hits[{index}]");
            let Some(state) = hit.source else {
                converted.add_skipped(SkippedEntry { entry: at, reason: "no _source".into() }, FAN_OUT)?;
                continue;
            };
            let at = format!("{at} ({} on agent {})", state.vulnerability.id, state.agent.id);
            let problem = if state.vulnerability.id.trim().is_empty() {
                Some("no vulnerability.id")
            } else if state.package.name.trim().is_empty() {
                Some("no package.name: the state names no package")
            } else if state.agent.id.trim().is_empty() || state.agent.name.trim().is_empty() {
                Some("no agent.id or agent.name: the state names no host")
            } else {
                None
            };
            if let Some(reason) = problem {
                converted.add_skipped(SkippedEntry { entry: at, reason: reason.into() }, FAN_OUT)?;
                continue;
            }
            let os = state.host.os.clone().unwrap_or_default();
            hosts.entry(state.agent.id.clone()).or_insert_with(|| ReportHost {
                key: state.agent.id.clone(),
                hostname: state.agent.name.clone(),
                operating_system: operating_system(&os),
                ..ReportHost::default()
            });
            converted.add_entry(entry(state, &os), FAN_OUT)?;
        }
        converted.hosts = hosts.into_values().collect();
        Ok(converted)
    }
}

fn operating_system(os: &Os) -> Option<OperatingSystem> {
    let name = os.name.clone().or_else(|| os.platform.clone()).filter(|name| !name.trim().is_empty())?;
    let family = [os.platform.as_deref(), Some(name.as_str()), os.full.as_deref()]
        .into_iter()
        .flatten()
        .map(report::os_family)
        .find(|family| *family != "other")
        .unwrap_or("other");
    Some(OperatingSystem {
        name,
        version: os.version.clone().filter(|version| !version.is_empty()),
        family: Some(family.to_owned()),
        vendor: None,
        architecture: None,
    })
}

fn entry(state: State, os: &Os) -> ReportEntry {
    let State { agent, package, vulnerability, .. } = state;
    let kind = package.kind.clone().filter(|kind| !kind.is_empty());
    // Windows updates and programs (`win`) are the OS's.
    let class = match kind.as_deref() {
        Some("win" | "windows") => PackageClass::Os,
        Some(kind) => report::package_class(kind),
        None => PackageClass::Os,
    };
    let package_manager = match class {
        PackageClass::Os => os.platform.as_deref().or(os.name.as_deref()).and_then(report::package_manager),
        _ => None,
    }
    .or_else(|| kind.as_deref().and_then(report::package_manager));
    let source = vulnerability.scanner.as_ref().and_then(|scanner| scanner.source.clone());
    let cvss: Vec<_> = vulnerability
        .score
        .as_ref()
        .and_then(|score| {
            let mut rating = report::cvss_rating(source.as_deref(), None, score.base)?;
            rating.version = match score.version.as_deref().map(str::trim) {
                Some("2" | "2.0") => "2.0".into(),
                Some("3" | "3.0") => "3.0".into(),
                Some("3.1") => "3.1".into(),
                Some("4" | "4.0") => "4.0".into(),
                _ => return None,
            };
            Some(rating)
        })
        .into_iter()
        .collect();
    let severity_given = vulnerability.severity.clone().filter(|severity| !severity.trim().is_empty());
    let severity = report::entry_severity(severity_given.as_deref(), &cvss);
    ReportEntry {
        check: None,
        host: Some(agent.id),
        vulnerability_id: vulnerability.id.trim().to_owned(),
        aliases: Vec::new(),
        package: Package {
            name: package.name,
            version: package.version.filter(|version| !version.is_empty()),
            ecosystem: kind,
            package_manager: package_manager.map(str::to_owned),
            vendor: None,
            purl: None,
            cpe: None,
        },
        class,
        location: match class {
            PackageClass::Os => None,
            _ => package.path.filter(|path| !path.is_empty()),
        },
        severity_given,
        severity,
        cvss,
        epss: None,
        kev: None,
        fixed_version: None,
        state: None,
        title: None,
        description: vulnerability.description.filter(|description| !description.trim().is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::report::Severity;
    use esr_plugin_sdk::scanner_reports;

    use super::*;

    const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

    #[test]
    fn every_real_response_converts_hit_by_hit_with_its_agents() {
        for (name, bytes) in scanner_reports::real_reports(MANIFEST, "wazuh") {
            let raw: Value = serde_json::from_slice(&bytes).expect("the real file is JSON");
            let hits = raw["hits"]["hits"].as_array().expect("hits");
            let converted = Wazuh::convert(&bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
            assert_eq!(converted.entries.len(), hits.len(), "{name}");
            for (index, (entry, hit)) in converted.entries.iter().zip(hits).enumerate() {
                let at = format!("{name} hits[{index}]");
                let state = &hit["_source"];
                assert_eq!(Some(entry.vulnerability_id.as_str()), state["vulnerability"]["id"].as_str(), "{at}");
                assert_eq!(Some(entry.package.name.as_str()), state["package"]["name"].as_str(), "{at}");
                assert_eq!(entry.package.version.as_deref(), state["package"]["version"].as_str(), "{at}");
                assert_eq!(entry.host.as_deref(), state["agent"]["id"].as_str(), "{at}");
                let host = converted
                    .hosts
                    .iter()
                    .find(|host| Some(host.key.as_str()) == entry.host.as_deref())
                    .expect("its host");
                assert_eq!(Some(host.hostname.as_str()), state["agent"]["name"].as_str(), "{at}");
                let os = host.operating_system.as_ref().expect("an OS");
                assert_eq!(Some(os.name.as_str()), state["host"]["os"]["name"].as_str(), "{at}");
                assert_eq!(os.version.as_deref(), state["host"]["os"]["version"].as_str(), "{at}");
                let expected = match state["vulnerability"]["severity"].as_str() {
                    Some("Critical") => Severity::Critical,
                    Some("High") => Severity::High,
                    Some("Medium") => Severity::Medium,
                    Some("Low") => Severity::Low,
                    other => panic!("{at}: a severity the test does not know: {other:?}"),
                };
                assert_eq!(entry.severity, expected, "{at}");
                let score = &state["vulnerability"]["score"];
                assert_eq!(entry.cvss[0].base_score, score["base"].as_f64(), "{at}");
                assert_eq!(Some(entry.cvss[0].version.as_str()), score["version"].as_str(), "{at}");
                assert_eq!(entry.cvss[0].vector, None, "{at}: Wazuh gives no vector");
            }
            // One host per agent id.
            let mut agents: Vec<&str> =
                hits.iter().filter_map(|hit| hit.pointer("/_source/agent/id").and_then(Value::as_str)).collect();
            agents.sort();
            agents.dedup();
            assert_eq!(converted.hosts.len(), agents.len(), "{name}");
            // A page of a larger search resolves nothing, and says so.
            let total = raw.pointer("/hits/total/value").and_then(Value::as_u64).expect("a total");
            assert_eq!(converted.partial, total > hits.len() as u64, "{name}");
            assert_eq!(converted.skipped.len(), usize::from(converted.partial), "{name}: {:?}", converted.skipped);
        }
    }

    #[test]
    fn what_the_real_response_is_known_to_hold() {
        let (_, bytes) = scanner_reports::real_reports(MANIFEST, "wazuh").into_iter().next().expect("a file");
        let converted = Wazuh::convert(&bytes).expect("converts");
        assert_eq!(converted.hosts.len(), 8);
        assert!(converted.hosts.iter().all(|host| host.hostname.starts_with("myhost")));
        let os = converted.hosts[0].operating_system.as_ref().expect("an OS");
        assert_eq!((os.name.as_str(), os.family.as_deref()), ("Ubuntu", Some("linux")));
        let first = &converted.entries[0];
        assert_eq!((first.class, first.location.as_deref()), (PackageClass::Os, None));
        assert_eq!(first.package.package_manager.as_deref(), Some("apt"));
        assert_eq!(first.cvss[0].source.as_deref(), Some("Canonical Security Tracker"));
        assert!(converted.partial);
        assert!(converted.skipped[0].reason.contains("10 of 125"), "{:?}", converted.skipped);
    }

    #[test]
    fn a_complete_response_and_states_it_cannot_represent() {
        let response = br#"{"hits":{"total":{"value":3,"relation":"eq"},"hits":[
            {"_index":"wazuh-states-vulnerabilities-x","_source":{"agent":{"id":"007","name":"win-1"},
              "host":{"os":{"name":"Microsoft Windows 11 Pro","version":"10.0.22631","platform":"windows"}},
              "package":{"name":"Microsoft Edge","version":"120.0","type":"win"},
              "vulnerability":{"id":"CVE-2024-0001","severity":"-","score":{"base":8.8,"version":"3.1"}}}},
            {"_index":"wazuh-states-vulnerabilities-x","_source":{"agent":{"id":"007","name":"win-1"},
              "package":{"name":""},"vulnerability":{"id":"CVE-2024-0002"}}},
            {"_index":"wazuh-states-vulnerabilities-x","_source":{"agent":{"id":"008","name":"web-1"},
              "host":{"os":{"name":"Ubuntu","platform":"ubuntu"}},
              "package":{"name":"requests","version":"2.19.1","type":"pypi","path":"/usr/lib/python3/dist-packages"},
              "vulnerability":{"id":"CVE-2018-18074","severity":"Medium"}}}]}}"#;
        let converted = Wazuh::convert(response).expect("converts");
        assert!(!converted.partial);
        let [windows, python] = converted.entries.as_slice() else { panic!("{:?}", converted.entries) };
        assert_eq!(
            (windows.severity, windows.class),
            (Severity::High, PackageClass::Os),
            "\"-\" falls back on the score"
        );
        assert_eq!(windows.package.package_manager.as_deref(), Some("msi"));
        assert_eq!(converted.hosts[0].operating_system.as_ref().and_then(|os| os.family.as_deref()), Some("windows"));
        assert_eq!(
            (python.class, python.location.as_deref()),
            (PackageClass::Language, Some("/usr/lib/python3/dist-packages"))
        );
        assert_eq!(python.package.package_manager.as_deref(), Some("pip"));
        assert_eq!(converted.skipped.len(), 1);
        assert!(converted.skipped[0].reason.contains("no package.name"), "{:?}", converted.skipped);
    }

    #[test]
    fn a_total_that_is_a_lower_bound_makes_the_page_partial() {
        let page = |total: &str| {
            format!(
                r#"{{"hits":{{"total":{total},"hits":[{{"_index":"wazuh-states-vulnerabilities-x","_source":{{
                    "agent":{{"id":"007","name":"win-1"}},"package":{{"name":"openssl","version":"3.0.2"}},
                    "vulnerability":{{"id":"CVE-2024-0001","severity":"High"}}}}}}]}}}}"#
            )
        };
        for (total, partial) in [
            (r#"{"value":1,"relation":"gte"}"#, true),
            (r#"{"value":1,"relation":"eq"}"#, false),
            ("1", false),
            (r#"{"value":2,"relation":"eq"}"#, true),
        ] {
            let converted = Wazuh::convert(page(total).as_bytes()).expect("converts");
            assert_eq!((converted.entries.len(), converted.partial), (1, partial), "{total}");
            assert_eq!(converted.skipped.len(), usize::from(partial), "{total}");
        }
        let converted = Wazuh::convert(page(r#"{"value":1,"relation":"gte"}"#).as_bytes()).expect("converts");
        assert!(converted.skipped[0].reason.contains("1 of at least 1 hits"), "{:?}", converted.skipped);
    }

    #[test]
    fn wazuh_responses_are_told_from_every_other_format() {
        scanner_reports::assert_detects_its_own_and_no_other::<Wazuh>(MANIFEST, "wazuh");
    }

    #[test]
    fn hostile_and_malformed_input_is_an_error() {
        scanner_reports::assert_refuses_hostile_and_malformed::<Wazuh>();
        assert!(matches!(Wazuh::convert(br#"{"took":1}"#), Err(ReportError::Unsupported(_))));
    }
}
