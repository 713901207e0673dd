//! Deleting records through the admin listener and `esr delete`, on sled
//! and on PostgreSQL: what goes with a record, which references are
//! cleared, what the public API and the change feed show afterwards, and
//! the status history the write path keeps (imports, reports, expired
//! suppressions).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use esr::store::Collection;

use std::time::Duration;

use common::postgres::TestDatabase;
use common::{Server, plugins_dir, wait_until};
use esr::store::{ChangeEvent, ChangeOperation, Store};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const FINDINGS: &str = "vulnerability-findings";
const TARGETS: &str = "remediation-targets";

/// Where a test's server keeps its records.
enum Backend {
    Sled,
    Postgres(TestDatabase),
}

impl Backend {
    fn start(&self) -> Server {
        match self {
            Backend::Sled => Server::start(&plugins_dir()),
            Backend::Postgres(database) => {
                Server::start_with(&plugins_dir(), &["--database", &database.url, common::postgres::TWIN_DEADLINE])
            }
        }
    }

    /// The store the (stopped) server used, opened directly.
    fn open(&self, server: &Server) -> std::sync::Arc<dyn Store> {
        let url = match self {
            Backend::Sled => None,
            Backend::Postgres(database) => Some(database.url.as_str()),
        };
        esr::store::open(url, server.data_dir()).unwrap()
    }

    /// `esr check` on the (stopped) server's store.
    fn check(&self, server: &Server) -> std::process::Output {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_esr"));
        command.arg("check").arg("--data-dir").arg(server.data_dir());
        if let Backend::Postgres(database) = self {
            command.args(["--database", &database.url]);
        }
        command.output().unwrap()
    }

    /// Stops the server, checks that `esr check` passes on what it left,
    /// and opens its store.
    fn stop_and_check(&self, server: &mut Server) -> std::sync::Arc<dyn Store> {
        server.stop();
        let check = self.check(server);
        assert!(
            check.status.success(),
            "esr check: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        self.open(server)
    }
}

/// The operation of the record's event in `events`, if it has one.
fn operation_in(events: &[ChangeEvent], collection: &str, id: &str) -> Option<ChangeOperation> {
    let id = Uuid::try_parse(id).unwrap();
    events.iter().find(|event| event.collection.name() == collection && event.id == id).map(|event| event.operation)
}

/// An organization of its own on a server, with a key that reads
/// everything (it holds the server's addresses, not the server, so the
/// server can be stopped and started again).
struct Organization {
    base: String,
    admin_base: String,
    admin_token: String,
    client: reqwest::blocking::Client,
    id: String,
    key: String,
}

impl Organization {
    fn new(server: &Server, name: &str) -> Organization {
        let (id, key) = server.organization_with_key(name, &esr_auth::keys::ALL_READ_SCOPES);
        Organization::on(server, id, key)
    }

    /// The organization `id`, read with `key`, on `server`.
    fn on(server: &Server, id: String, key: String) -> Organization {
        Organization {
            base: server.base.clone(),
            admin_base: server.admin_base.clone(),
            admin_token: server.admin_token(),
            client: server.client.clone(),
            id,
            key,
        }
    }

    fn admin(&self, method: Method, path: &str) -> reqwest::blocking::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.admin_base)).bearer_auth(&self.admin_token)
    }

    /// Imports records into a collection; their ids in line order.
    fn import(&self, collection: &str, lines: &[Value]) -> Vec<String> {
        let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
        let response = self
            .admin(Method::POST, &format!("/admin/v1/organizations/{}/import/{collection}", self.id))
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        let summary: Value = response.json().unwrap();
        assert!(Uuid::try_parse(summary["batch_id"].as_str().unwrap()).is_ok(), "{summary}");
        summary["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
    }

    fn delete(&self, collection: &str, id: &str) -> reqwest::blocking::Response {
        self.admin(Method::DELETE, &format!("/admin/v1/organizations/{}/{collection}/{id}", self.id)).send().unwrap()
    }

    fn status(&self, path: &str) -> u16 {
        self.client.get(format!("{}{path}", self.base)).bearer_auth(&self.key).send().unwrap().status().as_u16()
    }

    fn json(&self, path: &str) -> Value {
        let response = self.client.get(format!("{}{path}", self.base)).bearer_auth(&self.key).send().unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
        response.json().unwrap()
    }

    fn record(&self, collection: &str, id: &str) -> Value {
        self.json(&format!("/v1/{collection}/{id}"))
    }

    /// Every record of a collection (the test's organizations are small).
    fn list(&self, collection: &str) -> Value {
        self.json(&format!("/v1/{collection}?limit=100"))
    }

    fn uuid(&self) -> Uuid {
        Uuid::try_parse(&self.id).unwrap()
    }
}

fn endpoint(hostname: &str) -> Value {
    json!({"hostname": hostname, "operating_system": {"name": "Debian 12", "family": "linux"}})
}

fn finding(endpoint: &str, name: &str, severity: &str, status: &str) -> Value {
    json!({
        "endpoint_id": endpoint, "finding_type": "vulnerability", "title": format!("{name} flaw"),
        "severity": severity, "status": status, "cve_id": "CVE-2024-3094",
        "subject": {"type": "software", "vendor": "Tukaani", "product": name, "version": "5.6.0"},
        "source": {"scanner": "trivy", "scanner_finding_id": name},
        "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00Z",
        "resolved_at": if status == "resolved" { json!("2026-11-21T00:00:00Z") } else { Value::Null },
    })
}

fn target(endpoint: &str, product: &str, finding_ids: &[&str], scope_ids: &[&str]) -> Value {
    json!({
        "endpoint_id": endpoint, "target_type": "software", "discovery_method": "passive",
        "status": "identified", "finding_ids": finding_ids, "scope_ids": scope_ids,
        "subject": {"type": "software", "vendor": "Tukaani", "product": product},
    })
}

fn open_findings(organization: &Organization, endpoint: &str) -> Value {
    organization.record("endpoints", endpoint)["open_findings"].clone()
}

/// Two endpoints, each with findings and a target, and scopes naming them.
struct Estate {
    hosts: Vec<String>,
    /// Per host: an open high, an open critical, a resolved low.
    findings: Vec<Vec<String>>,
    /// Per host: one target listing the host's findings.
    targets: Vec<String>,
    /// Names both hosts; and one the targets list.
    scopes: Vec<String>,
}

fn estate(organization: &Organization) -> Estate {
    let hosts = organization.import("endpoints", &[endpoint("alpha"), endpoint("beta")]);
    let scopes = organization.import(
        "scopes",
        &[
            json!({"name": "Pinned hosts", "status": "active", "endpoint_filter": {"endpoint_ids": [hosts[0], hosts[1]]}}),
            json!({"name": "Everything", "status": "active"}),
        ],
    );
    let mut findings = Vec::new();
    let mut targets = Vec::new();
    for host in &hosts {
        let ids = organization.import(
            FINDINGS,
            &[
                finding(host, "xz-utils", "high", "open"),
                finding(host, "openssl", "critical", "open"),
                finding(host, "zlib", "low", "resolved"),
            ],
        );
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let target_id = organization.import(TARGETS, &[target(host, "xz-utils", &refs, &[&scopes[1]])]).remove(0);
        // The findings name their target.
        let mut named = finding(host, "xz-utils", "high", "open");
        named["id"] = json!(ids[0]);
        named["remediation_target_id"] = json!(target_id);
        organization.import(FINDINGS, &[named]);
        findings.push(ids);
        targets.push(target_id);
    }
    Estate { hosts, findings, targets, scopes }
}

fn deleting_an_endpoint_takes_its_findings_and_targets(backend: Backend) {
    let mut server = backend.start();
    let organization = Organization::new(&server, "Deletions");
    let estate = estate(&organization);
    let (gone, kept) = (&estate.hosts[0], &estate.hosts[1]);
    let kept_before: Vec<Value> = std::iter::once(organization.record("endpoints", kept))
        .chain(estate.findings[1].iter().map(|id| organization.record(FINDINGS, id)))
        .chain(std::iter::once(organization.record(TARGETS, &estate.targets[1])))
        .collect();
    let scope_before = organization.record("scopes", &estate.scopes[0]);
    let summary_before = organization.json("/v1/vulnerability-findings/summary?groupBy=status");
    assert_eq!(summary_before["total"], 6, "{summary_before}");

    let response = organization.delete("endpoints", gone);
    assert_eq!(response.status(), 204);
    assert!(response.text().unwrap().is_empty());

    assert_eq!(organization.status(&format!("/v1/endpoints/{gone}")), 404);
    for id in &estate.findings[0] {
        assert_eq!(organization.status(&format!("/v1/{FINDINGS}/{id}")), 404, "finding {id}");
    }
    assert_eq!(organization.status(&format!("/v1/{TARGETS}/{}", estate.targets[0])), 404);
    for (collection, left) in [("endpoints", 1), (FINDINGS, 3), (TARGETS, 1), ("scopes", 2)] {
        let list = organization.list(collection);
        assert_eq!(list["total"], left, "{collection}: {list}");
        assert_eq!(list["data"].as_array().unwrap().len(), left, "{collection}");
        assert!(!list.to_string().contains(gone.as_str()), "{collection} still names the endpoint: {list}");
    }
    assert_eq!(organization.json(&format!("/v1/{FINDINGS}?endpointId={gone}"))["total"], 0);
    let summary = organization.json("/v1/vulnerability-findings/summary?groupBy=status");
    assert_eq!(summary["total"], 3, "{summary}");
    let groups: Vec<(String, u64)> = summary["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|group| (group["status"].as_str().unwrap().to_owned(), group["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(groups, [("open".to_owned(), 2), ("resolved".to_owned(), 1)], "{summary}");
    assert_eq!(organization.json("/v1/endpoints/summary?groupBy=osFamily")["total"], 1);

    // The other endpoint's records are as they were, byte for byte.
    let kept_after: Vec<Value> = std::iter::once(organization.record("endpoints", kept))
        .chain(estate.findings[1].iter().map(|id| organization.record(FINDINGS, id)))
        .chain(std::iter::once(organization.record(TARGETS, &estate.targets[1])))
        .collect();
    assert_eq!(kept_after, kept_before);
    // The scope names only the endpoint that is left, and says it changed.
    let scope = organization.record("scopes", &estate.scopes[0]);
    assert_eq!(scope["endpoint_filter"]["endpoint_ids"], json!([kept]));
    assert!(scope["updated_at"].as_str() > scope_before["updated_at"].as_str(), "{scope}");
    assert_eq!(scope["name"], scope_before["name"]);

    // Deleting it again: nothing there.
    let again = organization.delete("endpoints", gone);
    assert_eq!(again.status(), 404);
    let problem: Value = again.json().unwrap();
    assert!(problem["detail"].as_str().unwrap().contains(&format!("no endpoints record {gone}")), "{problem}");

    let store = backend.stop_and_check(&mut server);
    // The change feed: every deleted record once, `deleted`, after the
    // scope's rewrite, which is `updated`.
    let mut reader = store.reader(organization.uuid()).unwrap();
    let events = reader.changes(0, &[], esr::store::MAX_SCAN).unwrap();
    let operation_of = |collection: &str, id: &str| operation_in(&events, collection, id);
    assert_eq!(operation_of("endpoints", gone), Some(ChangeOperation::Deleted));
    for id in &estate.findings[0] {
        assert_eq!(operation_of(FINDINGS, id), Some(ChangeOperation::Deleted), "finding {id}");
    }
    assert_eq!(operation_of(TARGETS, &estate.targets[0]), Some(ChangeOperation::Deleted));
    assert_eq!(operation_of("scopes", &estate.scopes[0]), Some(ChangeOperation::Updated));
    assert_eq!(operation_of("endpoints", kept), Some(ChangeOperation::Updated), "its counts moved when imported");
    let deletion_events: Vec<_> = events.iter().filter(|event| event.operation == ChangeOperation::Deleted).collect();
    assert_eq!(deletion_events.len(), 5, "{events:?}");
    let batch_time = deletion_events[0].changed_at;
    assert!(deletion_events.iter().all(|event| event.changed_at == batch_time), "one batch: {events:?}");
    // The deleted records' histories went with them.
    for id in &estate.findings[0] {
        assert!(reader.history(Collection::VulnerabilityFindings, Uuid::try_parse(id).unwrap()).unwrap().is_empty());
    }
}

#[test]
fn deleting_an_endpoint_takes_its_findings_and_targets_on_sled() {
    deleting_an_endpoint_takes_its_findings_and_targets(Backend::Sled);
}

#[test]
fn deleting_an_endpoint_takes_its_findings_and_targets_on_postgres() {
    deleting_an_endpoint_takes_its_findings_and_targets(Backend::Postgres(TestDatabase::new()));
}

fn deleting_a_finding_a_target_or_a_scope_clears_the_references_to_it(backend: Backend) {
    let mut server = backend.start();
    let organization = Organization::new(&server, "References");
    let estate = estate(&organization);
    let host = &estate.hosts[0];
    let [high, critical, resolved] = [0, 1, 2].map(|index| estate.findings[0][index].clone());
    let target = &estate.targets[0];
    assert_eq!(open_findings(&organization, host), json!({"critical": 1, "high": 1, "medium": 0, "low": 0, "info": 0}));

    // An open finding: its endpoint's count falls, the target no longer lists it.
    let target_before = organization.record(TARGETS, target);
    assert_eq!(organization.delete(FINDINGS, &critical).status(), 204);
    assert_eq!(organization.status(&format!("/v1/{FINDINGS}/{critical}")), 404);
    assert_eq!(open_findings(&organization, host), json!({"critical": 0, "high": 1, "medium": 0, "low": 0, "info": 0}));
    let target_after = organization.record(TARGETS, target);
    assert_eq!(target_after["finding_ids"], json!([high, resolved]));
    assert!(target_after["updated_at"].as_str() > target_before["updated_at"].as_str());
    // A resolved one moves no count.
    let endpoint_before = organization.record("endpoints", host);
    assert_eq!(organization.delete(FINDINGS, &resolved).status(), 204);
    assert_eq!(organization.record("endpoints", host), endpoint_before, "no count moved, nothing rewritten");
    assert_eq!(organization.record(TARGETS, target)["finding_ids"], json!([high]));
    assert_eq!(organization.list(FINDINGS)["total"], 4);

    // A target: the finding naming it names none.
    assert_eq!(organization.record(FINDINGS, &high)["remediation_target_id"], json!(target));
    assert_eq!(organization.delete(TARGETS, target).status(), 204);
    assert_eq!(organization.record(FINDINGS, &high)["remediation_target_id"], Value::Null);
    assert_eq!(organization.record(FINDINGS, &high)["status"], "open", "the finding itself stays");
    assert_eq!(organization.list(TARGETS)["total"], 1);

    // A scope: the targets listing it list it no more.
    let other_target = &estate.targets[1];
    assert_eq!(organization.record(TARGETS, other_target)["scope_ids"], json!([estate.scopes[1]]));
    assert_eq!(organization.delete("scopes", &estate.scopes[1]).status(), 204);
    assert_eq!(organization.record(TARGETS, other_target)["scope_ids"], json!([]));
    assert_eq!(organization.status(&format!("/v1/scopes/{}", estate.scopes[1])), 404);
    assert_eq!(organization.list("scopes")["total"], 1);
    // The records that are left still import unchanged: cleared references are valid ones.
    let left: Vec<Value> = organization.list(TARGETS)["data"].as_array().unwrap().clone();
    let body: String = left.iter().map(|line| format!("{line}\n")).collect();
    let response = organization
        .admin(Method::POST, &format!("/admin/v1/organizations/{}/import/{TARGETS}", organization.id))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().unwrap()["unchanged"], 1);

    let store = backend.stop_and_check(&mut server);
    let mut reader = store.reader(organization.uuid()).unwrap();
    let events = reader.changes(0, &[], esr::store::MAX_SCAN).unwrap();
    let operation_of = |collection: &str, id: &str| operation_in(&events, collection, id);
    for (collection, id) in
        [(FINDINGS, &critical), (FINDINGS, &resolved), (TARGETS, target), ("scopes", &estate.scopes[1])]
    {
        assert_eq!(operation_of(collection, id), Some(ChangeOperation::Deleted), "{collection} {id}");
    }
    for (collection, id) in [(FINDINGS, &high), (TARGETS, other_target), ("endpoints", host)] {
        assert_eq!(operation_of(collection, id), Some(ChangeOperation::Updated), "{collection} {id}");
    }
}

#[test]
fn deleting_a_finding_a_target_or_a_scope_clears_the_references_to_it_on_sled() {
    deleting_a_finding_a_target_or_a_scope_clears_the_references_to_it(Backend::Sled);
}

#[test]
fn deleting_a_finding_a_target_or_a_scope_clears_the_references_to_it_on_postgres() {
    deleting_a_finding_a_target_or_a_scope_clears_the_references_to_it(Backend::Postgres(TestDatabase::new()));
}

#[test]
fn deletions_refuse_what_they_cannot_mean() {
    let server = Server::start(&plugins_dir());
    let organization = Organization::new(&server, "Refusals");
    let host = organization.import("endpoints", &[endpoint("alpha")]).remove(0);
    let problem = |response: reqwest::blocking::Response, status: u16| -> Value {
        assert_eq!(response.status(), status);
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        response.json().unwrap()
    };
    let unknown = problem(organization.delete("hosts", &host), 400);
    assert_eq!(unknown["invalid_params"][0]["name"], "collection", "{unknown}");
    assert!(unknown["detail"].as_str().unwrap().contains("no collection hosts"), "{unknown}");
    let malformed = problem(organization.delete("endpoints", "not-a-uuid"), 400);
    assert_eq!(malformed["invalid_params"][0]["name"], "id", "{malformed}");
    let missing_record = problem(organization.delete("endpoints", &Uuid::now_v7().to_string()), 404);
    assert!(missing_record["detail"].as_str().unwrap().contains("no endpoints record"), "{missing_record}");
    // Another organization's record does not exist for this one.
    let other = Organization::new(&server, "Other");
    problem(other.delete("endpoints", &host), 404);
    let missing_organization = Uuid::now_v7();
    let response = server
        .admin(Method::DELETE, &format!("/admin/v1/organizations/{missing_organization}/endpoints/{host}"))
        .send()
        .unwrap();
    let body = problem(response, 404);
    assert!(body["detail"].as_str().unwrap().contains(&format!("no organization {missing_organization}")), "{body}");
    let without_token = server
        .client
        .delete(format!("{}/admin/v1/organizations/{}/endpoints/{host}", server.admin_base, organization.id))
        .send()
        .unwrap();
    assert_eq!(without_token.status(), 401);
    assert_eq!(organization.status(&format!("/v1/endpoints/{host}")), 200, "nothing was deleted");
}

#[test]
fn the_command_line_deletes_and_says_when_there_is_nothing_to_delete() {
    let server = Server::start(&plugins_dir());
    let organization = Organization::new(&server, "Command line");
    let host = organization.import("endpoints", &[endpoint("alpha")]).remove(0);
    let finding_id = organization.import(FINDINGS, &[finding(&host, "xz-utils", "high", "open")]).remove(0);
    let run = |args: &[&str]| {
        let output = server.cli(args);
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) =
        run(&["delete", "--organization", &organization.id, "--collection", "endpoints", &host]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&format!("deleted endpoints {host}")), "{stdout}");
    assert_eq!(organization.status(&format!("/v1/endpoints/{host}")), 404);
    assert_eq!(organization.status(&format!("/v1/{FINDINGS}/{finding_id}")), 404);

    let (code, _, stderr) = run(&["delete", "--organization", &organization.id, "--collection", FINDINGS, &finding_id]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!("nothing was deleted: no {FINDINGS} record {finding_id} in this organization")),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["delete", "--organization", &organization.id, "--collection", "hosts", &finding_id]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("nothing was deleted: collection: no collection hosts"), "{stderr}");
}

/// The history entries of a record, read from the (stopped) server's store.
fn history(store: &dyn Store, organization: Uuid, collection: Collection, id: &str) -> Vec<Value> {
    let mut reader = store.reader(organization).unwrap();
    reader
        .history(collection, Uuid::try_parse(id).unwrap())
        .unwrap()
        .iter()
        .map(|entry| serde_json::from_slice(entry).unwrap())
        .collect()
}

fn statuses_and_kinds(entries: &[Value]) -> Vec<(String, String)> {
    entries
        .iter()
        .map(|entry| {
            (entry["status"].as_str().unwrap().to_owned(), entry["cause"]["kind"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn imports_and_reports_write_each_status_change_into_the_history() {
    let mut server = Server::start(&plugins_dir());
    let organization = Organization::new(&server, "History");
    let hosts = organization.import("endpoints", &[endpoint("alpha"), endpoint("beta")]);
    let host = hosts[0].clone();
    // Created open, resolved, then reopened; a re-import changing only the title adds nothing.
    let mut line = finding(&host, "xz-utils", "high", "open");
    let id = organization.import(FINDINGS, std::slice::from_ref(&line)).remove(0);
    line["id"] = json!(id);
    line["status"] = json!("resolved");
    line["resolved_at"] = json!("2026-11-21T00:00:00Z");
    let resolve = organization.import(FINDINGS, std::slice::from_ref(&line));
    assert_eq!(resolve, std::slice::from_ref(&id));
    line["title"] = json!("renamed");
    organization.import(FINDINGS, std::slice::from_ref(&line));
    line["status"] = json!("reopened");
    organization.import(FINDINGS, std::slice::from_ref(&line));
    let finding_record = organization.record(FINDINGS, &id);
    let target_id = organization.import(TARGETS, &[target(&host, "xz-utils", &[&id], &[])]).remove(0);

    // A scanner report: its findings and targets are created with a `report` cause.
    let report_path = std::path::Path::new(
        &std::env::var("ESR_SCANNER_REPORTS_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/scanner-reports").to_owned()),
    )
    .join("trivy/trivy-repo_debian-stretch.json");
    let response = server
        .admin(
            Method::POST,
            &format!(
                "/admin/v1/organizations/{}/reports?format=trivy&createEndpoint=true&endpoint=beta",
                organization.id
            ),
        )
        .header("content-type", "application/json")
        .body(std::fs::read(&report_path).unwrap())
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let outcome: Value = response.json().unwrap();
    let report_batch = outcome["batch_id"].as_str().unwrap().to_owned();
    assert!(outcome["created"].as_u64().unwrap() > 0, "{outcome}");
    let reported = organization.json(&format!("/v1/{FINDINGS}?scanner=trivy&limit=1&status=open"));
    let reported_id = reported["data"][0]["id"].as_str().unwrap().to_owned();

    server.stop();
    let store = esr::store::open(None, server.data_dir()).unwrap();
    let entries = history(store.as_ref(), organization.uuid(), Collection::VulnerabilityFindings, &id);
    assert_eq!(
        statuses_and_kinds(&entries),
        [("open", "import"), ("resolved", "import"), ("reopened", "import")].map(|(s, k)| (s.to_owned(), k.to_owned()))
    );
    let batches: Vec<&str> = entries.iter().map(|entry| entry["cause"]["batch_id"].as_str().unwrap()).collect();
    assert!(batches[0] != batches[1] && batches[1] != batches[2], "a batch id per import: {entries:?}");
    assert!(entries.iter().all(|entry| entry["cause"]["scanner"].is_null()));
    assert_eq!(entries[2]["at"], finding_record["updated_at"], "at the write time of the batch: {entries:?}");
    let times: Vec<&str> = entries.iter().map(|entry| entry["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "{times:?}");

    let target_entries = history(store.as_ref(), organization.uuid(), Collection::RemediationTargets, &target_id);
    assert_eq!(statuses_and_kinds(&target_entries), [("identified".to_owned(), "import".to_owned())]);

    let reported_entries =
        history(store.as_ref(), organization.uuid(), Collection::VulnerabilityFindings, &reported_id);
    assert_eq!(reported_entries.len(), 1, "{reported_entries:?}");
    let mut cause = reported_entries[0]["cause"].clone();
    // The request's id (the report was sent without one: a new one).
    let request_id = cause.as_object_mut().and_then(|cause| cause.remove("request_id"));
    assert!(request_id.as_ref().and_then(Value::as_str).is_some_and(|id| !id.is_empty()), "{reported_entries:?}");
    assert_eq!(
        cause,
        json!({"kind": "report", "scanner": "trivy", "batch_id": report_batch, "scanner_declared": false,
               "format": "trivy", "importer_version": "0.1.0", "tool": null}),
        "{reported_entries:?}"
    );
    assert!(
        history(store.as_ref(), organization.uuid(), Collection::Endpoints, &host).is_empty(),
        "endpoints keep none"
    );
}

fn an_expired_suppression_reopens_the_finding(backend: Backend) {
    let mut server = backend.start();
    let organization = Organization::new(&server, "Suppressions");
    let host = organization.import("endpoints", &[endpoint("alpha")]).remove(0);
    let expires = esr_contract::time::Timestamp(esr_system::clock::unix_now_nanos() + 3_000_000_000);
    let mut suppressed = finding(&host, "xz-utils", "critical", "suppressed");
    suppressed["suppression"] =
        json!({"reason": "accepted_risk", "note": "until the patch", "expires_at": expires.format()});
    let mut lasting = finding(&host, "openssl", "high", "suppressed");
    lasting["suppression"] = json!({"reason": "false_positive", "expires_at": null});
    // More than one reopening batch (1,000) expire together.
    const MANY: usize = 2_345;
    let many: Vec<Value> = (0..MANY)
        .map(|n| {
            let mut finding = finding(&host, &format!("lib{n}"), "low", "suppressed");
            finding["suppression"] = json!({"reason": "accepted_risk", "expires_at": expires.format()});
            finding
        })
        .collect();
    let ids = organization.import(FINDINGS, &[&[suppressed, lasting][..], &many].concat());
    assert_eq!(organization.record(FINDINGS, &ids[0])["status"], "suppressed");
    assert_eq!(open_findings(&organization, &host)["critical"], 0);
    // The server looks at start and every minute; restarting once the
    // suppression has expired makes the start-up pass find it.
    wait_until(Duration::from_secs(10), "the suppression's expiry", || esr_system::clock::unix_now_nanos() > expires.0);
    server.stop();
    let restarted = Server::start_on_with(
        &plugins_dir(),
        server.data_dir(),
        &match &backend {
            Backend::Sled => vec![],
            Backend::Postgres(database) => vec!["--database", database.url.as_str()],
        },
    );
    let organization = Organization::on(&restarted, organization.id.clone(), organization.key.clone());
    wait_until(Duration::from_secs(60), "the expired suppression to reopen its finding", || {
        organization.record(FINDINGS, &ids[0])["status"] == "open"
    });
    let reopened = organization.record(FINDINGS, &ids[0]);
    assert_eq!(reopened["suppression"], Value::Null);
    assert_eq!(reopened["resolved_at"], Value::Null);
    assert_eq!(open_findings(&organization, &host)["critical"], 1);
    assert_eq!(organization.record(FINDINGS, &ids[1])["status"], "suppressed", "no expiry: suppressed for good");
    wait_until(Duration::from_secs(60), "every expired suppression to reopen", || {
        open_findings(&organization, &host)["low"] == MANY
    });
    assert_eq!(organization.json(&format!("/v1/{FINDINGS}?status=suppressed"))["total"], 1);
    let mut restarted = restarted;
    restarted.stop();
    let store = backend.open(&restarted);
    let entries = history(store.as_ref(), organization.uuid(), Collection::VulnerabilityFindings, &ids[0]);
    assert_eq!(
        statuses_and_kinds(&entries),
        [("suppressed", "import"), ("open", "suppression_expired")].map(|(s, k)| (s.to_owned(), k.to_owned()))
    );
    assert_eq!(entries[1]["cause"], json!({"kind": "suppression_expired", "scanner": null, "batch_id": null}));
    assert_eq!(entries[1]["at"], reopened["updated_at"]);
}

#[test]
fn an_expired_suppression_reopens_the_finding_on_sled() {
    an_expired_suppression_reopens_the_finding(Backend::Sled);
}

#[test]
fn an_expired_suppression_reopens_the_finding_on_postgres() {
    an_expired_suppression_reopens_the_finding(Backend::Postgres(TestDatabase::new()));
}
