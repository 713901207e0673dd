//! Loading components: a replacement serves its group without a host
//! rebuild, and a broken plugins directory stops the host with a message
//! naming the file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, plugins_dir, plugins_dir_with, run_to_exit, test_plugins_dir};
use serde_json::Value;

#[test]
fn a_replacement_component_serves_its_group_without_rebuilding_the_host() {
    let stock = Server::start(&plugins_dir());
    let stock_endpoints = stock.all(0, "endpoints");
    assert!(stock_endpoints.iter().any(|e| e["owner"].is_object() && e["ip"].is_string()));
    let stock_version = stock.health_details()["checks"]["plugin:endpoints"][0]["version"].clone();
    drop(stock);

    // The same host binary, with the endpoints component swapped for the
    // alternative one.
    let redacted = test_plugins_dir().join("endpoints-redacted.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("endpoints-redacted.wasm", &redacted)]);
    let server = Server::start(dir.path());
    let endpoints = server.all(0, "endpoints");
    assert_eq!(endpoints.len(), stock_endpoints.len());
    assert!(endpoints.iter().all(|e| e["owner"].is_null() && e["ip"].is_null() && e["mac_address"].is_null()));
    assert!(endpoints.iter().all(|e| e["hostname"].is_string()));
    let health: Value = server.health_details();
    let version = &health["checks"]["plugin:endpoints"][0]["version"];
    assert!(version.as_str().unwrap().ends_with("+redacted"), "{version}");
    assert_ne!(version, &stock_version);
    // Its own parameters now apply: it knows no osFamily filter.
    assert_eq!(server.get("/v1/endpoints?osFamily=macos").status(), 400);
    // The other groups are untouched.
    assert_eq!(server.get("/v1/scopes").status(), 200);
}

#[test]
fn a_missing_group_stops_the_host_with_a_clear_message() {
    let dir = plugins_dir_with(&["scopes.wasm"], &[]);
    let (success, stderr) = run_to_exit(dir.path());
    assert!(!success);
    assert!(stderr.contains("serves scopes") && stderr.contains(&dir.path().display().to_string()), "{stderr}");
}

#[test]
fn two_components_for_one_group_stop_the_host() {
    let redacted = test_plugins_dir().join("endpoints-redacted.wasm");
    let dir = plugins_dir_with(&[], &[("endpoints-redacted.wasm", &redacted)]);
    let (success, stderr) = run_to_exit(dir.path());
    assert!(!success);
    assert!(stderr.contains("endpoints-redacted.wasm") && stderr.contains("endpoints.wasm"), "{stderr}");
    assert!(stderr.contains("both serve the group `endpoints`"), "{stderr}");
}

#[test]
fn a_malformed_file_is_named() {
    let junk = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(junk.path(), b"\0asm this is not a component").unwrap();
    let dir = plugins_dir_with(&[], &[("broken.wasm", junk.path())]);
    let (success, stderr) = run_to_exit(dir.path());
    assert!(!success);
    assert!(stderr.contains("broken.wasm") && stderr.contains("not a valid WebAssembly component"), "{stderr}");
}

/// A copy of a built component with every occurrence of `from` replaced by
/// `to` (same length, so the binary stays well-formed).
fn patched_component(name: &str, from: &[u8], to: &[u8]) -> tempfile::NamedTempFile {
    patched_component_all(name, &[(from, to)])
}

/// The same, for several replacements.
/// The package version the components are built against.
const WIT: &str = "0.3.6";
/// What a resource component exports of the package.
const EXPORTED: [&str; 4] = ["handler", "summaries", "bulk-export", "held-lists"];
/// Every interface of the package it names.
const NAMED: [&str; 6] = ["handler", "summaries", "bulk-export", "held-lists", "store", "types"];

/// The component `name` with the package's `interfaces` renamed into
/// `package` at `version` (of the same lengths as `esr:plugin` and [`WIT`]).
fn renamed(name: &str, interfaces: &[&str], package: &str, version: &str) -> tempfile::NamedTempFile {
    let names = |package: &str, version: &str| -> Vec<Vec<u8>> {
        interfaces.iter().map(|interface| format!("{package}/{interface}@{version}").into_bytes()).collect()
    };
    let (from, to) = (names("esr:plugin", WIT), names(package, version));
    let replacements: Vec<(&[u8], &[u8])> = from.iter().zip(&to).map(|(a, b)| (a.as_slice(), b.as_slice())).collect();
    patched_component_all(name, &replacements)
}

fn patched_component_all(name: &str, replacements: &[(&[u8], &[u8])]) -> tempfile::NamedTempFile {
    let mut bytes = std::fs::read(plugins_dir().join(name)).unwrap();
    for (from, to) in replacements {
        assert_eq!(from.len(), to.len());
        let mut replaced = 0;
        let mut index = 0;
        while let Some(position) = bytes[index..].windows(from.len()).position(|w| w == *from) {
            let at = index + position;
            bytes[at..at + from.len()].copy_from_slice(to);
            index = at + from.len();
            replaced += 1;
        }
        assert!(replaced > 0, "{} is in {name}", String::from_utf8_lossy(from));
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &bytes).unwrap();
    file
}

#[test]
fn a_component_of_another_world_is_refused() {
    let other = renamed("scopes.wasm", &EXPORTED, "acme:other", "0.1.1");
    let dir = plugins_dir_with(&["scopes.wasm"], &[("scopes.wasm", other.path())]);
    let (success, stderr) = run_to_exit(dir.path());
    assert!(!success);
    assert!(stderr.contains("scopes.wasm") && stderr.contains("another world"), "{stderr}");
}

#[test]
fn a_component_built_against_another_wit_version_is_refused() {
    let newer = renamed("scopes.wasm", &EXPORTED, "esr:plugin", "9.1.0");
    let dir = plugins_dir_with(&["scopes.wasm"], &[("scopes.wasm", newer.path())]);
    let (success, stderr) = run_to_exit(dir.path());
    assert!(!success);
    assert!(stderr.contains("scopes.wasm") && stderr.contains("9.1.0") && stderr.contains("0.3.x"), "{stderr}");
}

#[test]
fn a_component_built_against_wit_0_3_0_still_loads() {
    // 0.3.1 to 0.3.6 only added to the package (the report-importer
    // world, summaries, bulk-export, counts in ranges, batches of records,
    // held records): components built against 0.3.0 keep serving.
    let older = renamed("scopes.wasm", &NAMED, "esr:plugin", "0.3.0");
    let dir = plugins_dir_with(&["scopes.wasm"], &[("scopes.wasm", older.path())]);
    let server = Server::start(dir.path());
    assert_eq!(server.get("/v1/scopes").status(), 200);
    let health: Value = server.health_details();
    assert_eq!(health["checks"]["plugin:scopes"][0]["wit_version"], "0.3.0", "{health}");
}

#[test]
fn a_component_built_against_wit_0_2_is_refused_with_what_to_do() {
    // Before 0.3.0 a descriptor declared no `reads`, and every component
    // could read every collection.
    let older = renamed("scopes.wasm", &NAMED, "esr:plugin", "0.2.0");
    let dir = plugins_dir_with(&["scopes.wasm"], &[("scopes.wasm", older.path())]);
    let (success, stderr) = run_to_exit(dir.path());
    assert!(!success);
    assert!(stderr.contains("scopes.wasm") && stderr.contains("esr:plugin@0.2.0"), "{stderr}");
    assert!(stderr.contains("esr:plugin@0.3.x") && stderr.contains("`reads`"), "says what to do: {stderr}");
}

#[test]
fn a_component_declaring_an_unknown_read_is_refused() {
    // The agent declares `scopes` and `organization`; this copy declares
    // (and scans) `tokens` instead of `scopes`.
    let agent = std::fs::read(plugins_dir().join("agent.wasm")).unwrap();
    assert_eq!(agent.windows(6).filter(|w| *w == b"scopes").count(), 1, "one `scopes` to replace");
    let unknown = patched_component("agent.wasm", b"scopes", b"tokens");
    let dir = plugins_dir_with(&["agent.wasm"], &[("agent.wasm", unknown.path())]);
    let (success, stderr) = run_to_exit(dir.path());
    assert!(!success);
    assert!(stderr.contains("agent.wasm") && stderr.contains(r#"reads "tokens""#), "{stderr}");
}

#[test]
fn plugins_check_describes_a_good_component_and_names_a_bad_one() {
    let good = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["plugins", "check"])
        .arg(plugins_dir().join("vulnerability-findings.wasm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success(), "{stdout}");
    assert!(stdout.contains("group        vulnerability-findings") && stdout.contains("severity"), "{stdout}");
    assert!(
        stdout.contains("reads        endpoints, vulnerability-findings\n"),
        "its own collection, and endpoints for the OCSF device: {stdout}"
    );

    let other = renamed("scopes.wasm", &EXPORTED, "esr:plugin", "2.0.0");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["plugins", "check"])
        .arg(other.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(stderr.contains(&other.path().display().to_string()) && stderr.contains("2.0.0"), "{stderr}");
}

#[test]
fn compiled_components_are_cached_and_a_corrupt_cache_entry_is_ignored() {
    let data_dir = common::private_tempdir();
    let cache = data_dir.path().join("component-cache");
    let flag = format!("--component-cache-dir={}", cache.display());
    let mut server = Server::start_on_with(&plugins_dir(), data_dir.path(), &[&flag]);
    let cached: Vec<std::path::PathBuf> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).collect();
    // One per component in the directory: the groups' and the report importers'.
    let components = std::fs::read_dir(plugins_dir())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "wasm"))
        .count();
    assert!(components >= 6, "five groups and at least one report importer");
    assert_eq!(cached.iter().filter(|p| p.extension().is_some_and(|x| x == "cwasm")).count(), components, "{cached:?}");
    // Restart on the same data directory with one cache entry corrupted.
    server.stop();
    std::fs::write(&cached[0], b"garbage").unwrap();
    let mut child = common::spawn(&plugins_dir(), server.data_dir(), &[&flag]);
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let listening = std::io::BufRead::lines(stdout).map_while(Result::ok).any(|line| line.starts_with("listening on"));
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening, "the server starts despite a corrupt cache entry");
}

#[test]
fn a_compile_cache_others_may_write_to_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let shared = common::private_tempdir();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let flag = format!("--component-cache-dir={}", shared.path().display());
    let server = Server::start_with(&plugins_dir(), &[&flag]);
    assert_eq!(server.get("/v1/health").status(), 200);
    assert!(server.log().contains("not caching compiled components"), "{}", server.log());
    assert_eq!(std::fs::read_dir(shared.path()).unwrap().count(), 0, "nothing was written to it");
}
