//! Snyk's reports through the real host: `snyk test --json` (one project
//! and `--all-projects`) and `snyk container test --json` by the `snyk`
//! importer, Snyk's SARIF (`snyk test --sarif`) by the `sarif` one. Each
//! report is read here too, with serde_json and independently of the
//! importers: the findings, severities, versions, the endpoint and the
//! remediation targets that come out are the ones that reading gives, and
//! importing again changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::common::{Server, plugins_dir, read_json};
use crate::reports::{NAMED_HOST, all, cve_or, import_ok, new_organization, report_files, severity_word, texts_of};

/// A finding's identity: class, CVE or Snyk id, package, location (empty
/// for OS packages).
type Identity = (String, String, String, String);

/// What a finding should say: its severity and the installed version of
/// the first entry of its identity.
#[derive(Debug, PartialEq)]
struct Expected {
    severity: &'static str,
    version: Option<String>,
}

#[derive(Default)]
struct Reading {
    findings: BTreeMap<Identity, Expected>,
    /// The entries the importer makes: one per (id, package, version,
    /// location); Snyk repeats each once per dependency path.
    entries: BTreeSet<(String, String, Option<String>, String)>,
    /// Licence issues and projects Snyk could not test.
    skipped: usize,
    /// An image's OS: name and release.
    os: Option<(String, String)>,
    package_manager: BTreeSet<String>,
}

impl Reading {
    /// An entry of vulnerability `id` whose finding is `identity`.
    fn add(&mut self, id: &str, identity: Identity, version: Option<&str>, severity: &'static str) {
        let (_, _, package, location) = &identity;
        self.entries.insert((id.to_owned(), package.clone(), version.map(str::to_owned), location.clone()));
        self.findings.entry(identity).or_insert(Expected { severity, version: version.map(str::to_owned) });
    }
}

/// The contract's package manager of what Snyk calls a package manager,
/// as far as these reports go.
fn package_manager_of(snyk: &str) -> &'static str {
    match snyk.split(':').next().unwrap() {
        "npm" => "npm",
        "pip" => "pip",
        "nuget" => "nuget",
        "maven" => "maven",
        "alpine" | "apk" => "apk",
        "debian" | "deb" => "apt",
        other => panic!("a package manager the test does not know: {other}"),
    }
}

/// `snyk test --json` and `snyk container test --json`: an object per
/// project, or an array of them.
fn json_reading(report: &Value) -> Reading {
    let mut reading = Reading::default();
    let projects: Vec<&Value> = match report {
        Value::Array(projects) => projects.iter().collect(),
        project => vec![project],
    };
    for project in projects {
        if project.get("error").is_some() {
            reading.skipped += 1;
            continue;
        }
        let target = ["displayTargetFile", "targetFile", "path"]
            .iter()
            .find_map(|key| project[*key].as_str().filter(|text| !text.is_empty()))
            .unwrap();
        for vulnerability in project["vulnerabilities"].as_array().unwrap() {
            if vulnerability["type"] == "license" {
                reading.skipped += 1;
                continue;
            }
            let id = vulnerability["id"].as_str().unwrap();
            let manager = vulnerability["packageManager"].as_str().unwrap();
            reading.package_manager.insert(package_manager_of(manager).to_owned());
            let name = vulnerability["name"].as_str().unwrap();
            // An image's packages: `<distribution>:<release>`, named
            // `<source>/<binary>`; the binary is installed.
            let (class, package, location) = match manager.split_once(':') {
                Some((distribution, release)) => {
                    reading.os.get_or_insert_with(|| (distribution.to_owned(), release.to_owned()));
                    ("os", name.rsplit('/').next().unwrap(), "")
                }
                None => ("language", name, target),
            };
            let cves = texts_of(&vulnerability["identifiers"]["CVE"]);
            let severity = severity_word(vulnerability["severity"].as_str().unwrap()).unwrap();
            let identity = (
                class.to_owned(),
                cve_or(id, cves.iter().map(String::as_str)),
                package.to_owned(),
                location.to_owned(),
            );
            reading.add(id, identity, vulnerability["version"].as_str(), severity);
        }
    }
    reading
}

/// Snyk's SARIF: one result per Snyk id, whose rule says the rest —
/// `(CVE-…) group:artifact@version` in its full description,
/// `<Severity> severity - …` in its short one, `* Package Manager: maven`
/// in its help's markdown.
fn sarif_reading(report: &Value) -> Reading {
    let mut reading = Reading::default();
    for run in report["runs"].as_array().unwrap() {
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        for result in run["results"].as_array().unwrap() {
            let id = result["ruleId"].as_str().unwrap();
            let rule = rules.iter().find(|rule| rule["id"] == id).unwrap();
            let described = rule["fullDescription"]["text"].as_str().unwrap();
            let (cves, versioned) = match described.strip_prefix('(') {
                Some(rest) => {
                    let (cves, versioned) = rest.split_once(") ").unwrap();
                    (cves.split(',').map(str::trim).collect::<Vec<_>>(), versioned)
                }
                None => (Vec::new(), described),
            };
            let (package, version) = versioned.trim().rsplit_once('@').unwrap();
            let manager = rule["help"]["markdown"]
                .as_str()
                .unwrap()
                .lines()
                .find_map(|line| line.strip_prefix("* Package Manager: "))
                .unwrap();
            reading.package_manager.insert(package_manager_of(manager).to_owned());
            let word = rule["shortDescription"]["text"].as_str().unwrap().split(' ').next().unwrap();
            let location = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap();
            let identity =
                ("language".to_owned(), cve_or(id, cves.iter().copied()), package.to_owned(), location.to_owned());
            reading.add(id, identity, Some(version), severity_word(word).unwrap());
        }
    }
    reading
}

#[test]
fn every_snyk_report_comes_out_as_a_reading_of_it_says_and_again_quietly() {
    let server = Server::start(&plugins_dir());
    let files = report_files("snyk");
    assert_eq!(files.len(), 5, "{files:?}");
    for (index, file) in files.iter().enumerate() {
        let name = file.display().to_string();
        let sarif = name.ends_with(".sarif.json");
        let format = if sarif { "sarif" } else { "snyk" };
        let expected = if sarif { sarif_reading(&read_json(file)) } else { json_reading(&read_json(file)) };
        let (organization, key) = new_organization(&server, &format!("snyk-{index}"));
        let query = format!("createEndpoint=true&endpoint={NAMED_HOST}&format={format}");
        let bytes = std::fs::read(file).unwrap();
        let answer = import_ok(&server, &organization, &query, bytes.clone());
        assert_eq!(
            (answer["format"].as_str(), answer["scanner"].as_str()),
            (Some(format), Some(format)),
            "{name}: {answer}"
        );
        if sarif {
            assert_eq!(answer["tool"], "snyk-open-source", "{name}: {answer}");
        }
        assert_eq!(answer["created"].as_u64(), Some(expected.findings.len() as u64), "{name}: {answer}");
        // Versions of one package in one file with one vulnerability are
        // one finding: the entries beyond it are counted as duplicates.
        assert_eq!(
            answer["duplicates"].as_u64(),
            Some((expected.entries.len() - expected.findings.len()) as u64),
            "{name}: {answer}"
        );
        let skipped = answer["skipped"].as_array().unwrap();
        assert_eq!(skipped.len(), expected.skipped, "{name}: {answer}");
        assert!(skipped.iter().all(|entry| !entry["reason"].as_str().unwrap_or_default().is_empty()), "{name}");

        // The one endpoint the import named; an image's OS when the report states it.
        let endpoints = all(&server, &key, "endpoints", "");
        let [endpoint] = endpoints.as_slice() else { panic!("{name}: {endpoints:?}") };
        assert_eq!(endpoint["hostname"], NAMED_HOST);
        let os = &endpoint["operating_system"];
        match &expected.os {
            Some((distribution, release)) => {
                assert_eq!(
                    (os["name"].as_str(), os["version"].as_str()),
                    (Some(distribution.as_str()), Some(release.as_str()))
                );
                assert_eq!(
                    (os["family"].as_str(), os["architecture"].as_str()),
                    (Some("linux"), Some("amd64")),
                    "{name}"
                );
            }
            None => assert_eq!(os["family"], "other", "{name}: {endpoint}"),
        }

        let findings = all(&server, &key, "vulnerability-findings", "");
        let found: BTreeMap<Identity, Expected> = findings
            .iter()
            .map(|finding| {
                let identity = finding["source"]["scanner_finding_id"].as_str().unwrap();
                let mut parts = identity.splitn(4, ' ');
                let mut part = || parts.next().unwrap_or_default().to_owned();
                let identity = (part(), part(), part(), part());
                assert_eq!(finding["source"]["scanner"], format, "{name}");
                assert_eq!(finding["endpoint_id"], endpoint["id"], "{name}");
                assert_eq!(finding["subject"]["product"], identity.2.as_str(), "{name}");
                let cve = identity.1.starts_with("CVE-").then(|| identity.1.clone());
                assert_eq!(finding["cve_id"].as_str(), cve.as_deref(), "{name}: {identity:?}");
                let severity = match finding["severity"].as_str().unwrap() {
                    "critical" => "critical",
                    "high" => "high",
                    "medium" => "medium",
                    "low" => "low",
                    other => panic!("{name}: severity {other}"),
                };
                (identity, Expected { severity, version: finding["subject"]["version"].as_str().map(str::to_owned) })
            })
            .collect();
        assert_eq!(
            found.keys().collect::<Vec<_>>(),
            expected.findings.keys().collect::<Vec<_>>(),
            "{name}: the (class, vulnerability, package, location) of the findings"
        );
        for (identity, expected) in &expected.findings {
            assert_eq!(&found[identity], expected, "{name}: {identity:?}");
        }

        // Remediation targets: one per installed package, OS packages by
        // their binary package's name, as Trivy and Grype name them.
        let installed: BTreeSet<(&str, Option<&str>, &str)> = expected
            .findings
            .iter()
            .map(|((_, _, package, location), finding)| {
                (package.as_str(), finding.version.as_deref(), location.as_str())
            })
            .collect();
        let targets = all(&server, &key, "remediation-targets", "");
        assert!(!targets.is_empty(), "{name}");
        for target in &targets {
            let product = target["subject"]["product"].as_str().unwrap();
            let installation =
                (product, target["installed_version"].as_str(), target["install_path"].as_str().unwrap_or_default());
            assert!(installed.contains(&installation), "{name}: {installation:?}");
            let os_package = installation.2.is_empty();
            assert_eq!(target["target_type"], if os_package { "os_patch" } else { "software" }, "{name}: {target}");
            let manager = target["package_manager"].as_str().unwrap();
            assert!(expected.package_manager.contains(manager), "{name}: {manager}");
        }

        super::assert_reimport_quiet(&server, &organization, &key, &query, bytes, &findings, &name.to_string());
    }
}
