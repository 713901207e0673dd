//! A hostile endpoints component for the isolation tests. Its `list` tries
//! every ambient authority a program could want (files, environment,
//! arguments, network, processes) and calls every store function with
//! every argument it can think of, including ids it was told belong to
//! another organization, then reports what it got. The host must give it
//! nothing but the caller's own records, and the request must still answer.
//!
//! `probe` (comma-separated) names what to read: collections, or
//! `organization` for `store.organization()`; by default every collection
//! and the organization. `via` calls one store function once on each
//! instead of everything.

use std::collections::BTreeSet;

use esr_plugin_sdk::contract::*;
use esr_plugin_sdk::{
    Descriptor, IndexCondition, IndexPosition, IndexWalk, Matching, ORGANIZATION, Page, PluginError, RecordWalk,
    Request, ResourcePlugin, Store, Uuid, get_record,
};
use serde_json::{Value, json};

pub struct Prober;

/// What a request probes unless it says otherwise.
const DEFAULT_PROBES: &[&str] =
    &["endpoints", "remediation-targets", "scopes", "vulnerability-findings", "organization"];
/// What its descriptor declares it reads: the endpoints it serves, or
/// (feature `all-reads`, built as `prober-all-reads.wasm`) everything.
#[cfg(not(feature = "all-reads"))]
const DECLARED_READS: &[&str] = &["endpoints"];
#[cfg(feature = "all-reads")]
const DECLARED_READS: &[&str] = DEFAULT_PROBES;

fn outcome<T: std::fmt::Debug, E: std::fmt::Display>(result: Result<T, E>) -> Value {
    match result {
        Ok(value) => json!({"ok": format!("{value:?}").chars().take(200).collect::<String>()}),
        Err(error) => json!({"error": error.to_string()}),
    }
}

fn param<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request.query.iter().find(|param| param.name == name).map(|param| param.value.as_str())
}

/// Every way out of the sandbox a program might try.
fn ambient(request: &Request) -> Value {
    let port = param(request, "port").unwrap_or("80");
    json!({
        "read_dir_root": outcome(std::fs::read_dir("/").map(|entries| entries.count())),
        "read_passwd": outcome(std::fs::read_to_string("/etc/passwd")),
        "read_cwd": outcome(std::fs::read_dir(".").map(|entries| entries.count())),
        "write_file": outcome(std::fs::write("/tmp/esr-prober", b"x")),
        "env": std::env::vars().map(|(name, _)| name).collect::<Vec<_>>(),
        "args": std::env::args().collect::<Vec<_>>(),
        "connect": outcome(std::net::TcpStream::connect(format!("127.0.0.1:{port}"))),
        "bind": outcome(std::net::TcpListener::bind("127.0.0.1:0")),
        "resolve": outcome(std::net::ToSocketAddrs::to_socket_addrs("localhost:80").map(|addresses| addresses.count())),
        "spawn": outcome(std::process::Command::new("/bin/sh").arg("-c").arg("id").output()),
    })
}

/// Values worth asking each index for: the given ids, and every enum value.
fn candidate_values(ids: &[String]) -> Vec<String> {
    let mut values: Vec<String> = ids.to_vec();
    for set in [
        OS_FAMILIES,
        SCOPE_STATUSES,
        FINDING_TYPES,
        SEVERITIES,
        FINDING_STATUSES,
        SCANNERS,
        TARGET_TYPES,
        PACKAGE_MANAGERS,
        TARGET_STATUSES,
    ] {
        values.extend(set.iter().map(|value| (*value).to_owned()));
    }
    values.extend(["", "true", "false", "\0", "%", "*"].iter().map(|value| (*value).to_owned()));
    values
}

/// Every record the store hands out, by any call, from these collections.
fn probe_store(store: &dyn Store, ids: &[String], collections: &[&str]) -> Value {
    let mut seen = BTreeSet::new();
    let mut counts = serde_json::Map::new();
    let mut matching = serde_json::Map::new();
    let mut disagreements = Vec::new();
    let values = candidate_values(ids);
    for collection in collections {
        counts.insert((*collection).to_owned(), json!(store.count(collection)));
        matching.insert(
            (*collection).to_owned(),
            json!(store.count_matching(collection, &Matching { updated_after: Some(i64::MIN), ..Matching::default() })),
        );
        for id in ids {
            if store.get(collection, id).is_some() {
                seen.insert(id.clone());
            }
        }
        for reverse in [false, true] {
            let mut after: Option<Uuid> = None;
            loop {
                let page = store.scan(collection, &RecordWalk::new(usize::MAX).after(after).reversed(reverse));
                let Some(last) = page.last() else { break };
                after = Uuid::parse_str(&last.id).ok();
                seen.extend(page.into_iter().map(|entry| entry.id));
            }
            for id in ids {
                let from = RecordWalk::new(1000).after(Uuid::parse_str(id).ok()).reversed(reverse);
                seen.extend(store.scan(collection, &from).into_iter().map(|entry| entry.id));
            }
        }
        // (An unknown index name or a malformed position fails the whole
        // call; `misuse` below shows that.)
        let table = esr_plugin_sdk::Collection::named(collection).map_or(&[][..], esr_plugin_sdk::indexes::indexes);
        for index in table.iter().map(|index| index.name) {
            for value in &values {
                let held = store.index_count(collection, index, value);
                let condition = IndexCondition { index: index.to_owned(), values: vec![value.clone()] };
                if store.count_matching(collection, &Matching::conditions(vec![condition])) != held {
                    disagreements.push(format!("{collection} {index}={value}"));
                }
                for reverse in [false, true] {
                    let positions = [
                        None,
                        Some(IndexPosition::new(i64::MIN, esr_plugin_sdk::Uuid::nil())),
                        Some(IndexPosition::new(i64::MAX, esr_plugin_sdk::Uuid::max())),
                    ];
                    for after in &positions {
                        let walk = IndexWalk::new(index, value, usize::MAX).after(*after).reversed(reverse);
                        let entries = store.index_scan(collection, &walk);
                        seen.extend(entries.into_iter().map(|entry| entry.id));
                    }
                }
            }
        }
    }
    json!({"seen": seen, "counts": counts, "matching": matching, "disagreements": disagreements})
}

fn organization(store: &dyn Store) -> Value {
    serde_json::from_slice::<Value>(&store.organization()).unwrap_or(Value::Null)
}

/// One call of the store function `function` on `collection`, and its answer.
fn call_once(store: &dyn Store, function: &str, collection: &str) -> Value {
    let nil = "00000000-0000-0000-0000-000000000000";
    match function {
        "get" => json!(store.get(collection, nil).is_some()),
        "scan" => json!(store.scan(collection, &RecordWalk::new(1000)).len()),
        "count" => json!(store.count(collection)),
        "index-scan" => json!(store.index_scan(collection, &IndexWalk::new("created_at", "", 1000)).len()),
        "index-count" => json!(store.index_count(collection, "created_at", "")),
        "count-matching" => json!(store.count_matching(collection, &Matching::default())),
        "index-scan-held" => {
            json!(store.index_scan_held(collection, &IndexWalk::new("created_at", "", 1000)).map(|held| held.len()))
        }
        other => json!(format!("no store function {other}")),
    }
}

/// A page of held records that breaks the contract, as `how` says:
/// `page` names the endpoints held once (a good page, for comparison),
/// `unknown` a number never handed out, `repeated` the first held record
/// ten million times, `hoard` holds records until the host stops it.
fn held_page(store: &dyn Store, how: &str) -> Result<Page, PluginError> {
    // A page holds at most 100 records (`limit`).
    let walk = IndexWalk::new("created_at", "", 100);
    let held = store.index_scan_held("endpoints", &walk).ok_or_else(|| PluginError::Internal("nothing held".into()))?;
    let first = held.first().map_or(0, |record| record.number);
    let numbers: Vec<u32> = match how {
        "page" => held.iter().map(|record| record.number).collect(),
        "unknown" => vec![first, u32::MAX - 1],
        "repeated" => vec![first; 10_000_000],
        "hoard" => loop {
            // Each call holds the endpoints again: the host fails the
            // call once they pass its memory cap.
            store.index_scan_held("endpoints", &walk);
        },
        other => return Err(PluginError::invalid("held", format!("no way {other}"))),
    };
    Ok(Page {
        data: Vec::new(),
        held: Some(numbers),
        total: held.len() as u64,
        limit: 100,
        offset: Some(0),
        next_cursor: None,
    })
}

impl ResourcePlugin for Prober {
    // So that `held` may hold records (its other pages are reports, which
    // never name held records).
    const PAGES_ARE_STORED_RECORDS: bool = true;

    fn describe() -> Descriptor {
        Descriptor::new("endpoints", concat!(env!("CARGO_PKG_VERSION"), "+prober"), &[], &[]).with_reads(DECLARED_READS)
    }

    fn list(store: &dyn Store, request: &Request) -> Result<Page, PluginError> {
        if let Some(how) = param(request, "held") {
            return held_page(store, how);
        }
        if param(request, "misuse").is_some() {
            // An unknown index: the host fails the whole call.
            let _ = store.index_count("endpoints", "organization", "");
        }
        let ids: Vec<String> =
            param(request, "ids").map(|ids| ids.split(',').map(str::to_owned).collect()).unwrap_or_default();
        let probes: Vec<&str> =
            param(request, "probe").map(|probes| probes.split(',').collect()).unwrap_or(DEFAULT_PROBES.to_vec());
        let collections: Vec<&str> = probes.iter().copied().filter(|probe| *probe != ORGANIZATION).collect();
        let report = if let Some(function) = param(request, "via") {
            let answers: Vec<Value> = probes
                .iter()
                .map(|probe| match *probe {
                    ORGANIZATION => organization(store),
                    collection => call_once(store, function, collection),
                })
                .collect();
            json!([{"via": function, "answers": answers}])
        } else {
            let mut report = json!({"ambient": ambient(request), "store": probe_store(store, &ids, &collections)});
            if probes.contains(&ORGANIZATION) {
                report["store"]["organization"] = organization(store);
            }
            json!([report])
        };
        Ok(Page {
            data: report.to_string().into_bytes(),
            held: None,
            total: 1,
            limit: 1,
            offset: Some(0),
            next_cursor: None,
        })
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, "endpoints", id, request)
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::Prober);
