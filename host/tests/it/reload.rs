//! Live replacement: SIGHUP re-reads the plugins directory and swaps the
//! components without failing a request; a broken directory is refused and
//! the components in service keep serving.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};

fn endpoints_version(server: &Server) -> String {
    server.health_details()["checks"]["plugin:endpoints"][0]["version"].as_str().unwrap().to_owned()
}

/// Puts `component` in the directory as the endpoints component.
fn use_endpoints(dir: &std::path::Path, component: &std::path::Path) {
    // Write beside, then rename: a reload never sees a half-written file.
    let staged = dir.join("endpoints.wasm.partial");
    std::fs::copy(component, &staged).unwrap();
    std::fs::rename(&staged, dir.join("endpoints.wasm")).unwrap();
}

#[test]
fn reloads_swap_components_without_failing_a_request() {
    let dir = plugins_dir_with(&[], &[]);
    let server = Arc::new(Server::start(dir.path()));
    let stock = plugins_dir().join("endpoints.wasm");
    let redacted = test_plugins_dir().join("endpoints-redacted.wasm");
    let stock_version = endpoints_version(&server);

    let stop = Arc::new(AtomicBool::new(false));
    let (served, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..3)
        .map(|client| {
            let (server, stop, served, failed) = (server.clone(), stop.clone(), served.clone(), failed.clone());
            std::thread::spawn(move || {
                let paths = ["/v1/endpoints?limit=5", "/v1/scopes", "/v1/vulnerability-findings?limit=20"];
                let mut turn = client;
                while !stop.load(Ordering::Relaxed) {
                    let status = server.get(paths[turn % paths.len()]).status();
                    let counter = if status == 200 { &served } else { &failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                    turn += 1;
                }
            })
        })
        .collect();

    for reload in 1..=10 {
        let (component, suffix) = if reload % 2 == 1 { (&redacted, "+redacted") } else { (&stock, "") };
        use_endpoints(dir.path(), component);
        server.signal("HUP");
        server.wait_for_log(30, |log| log.matches("plugins reloaded").count() >= reload);
        let version = endpoints_version(&server);
        assert!(
            version.ends_with(suffix) && (suffix.is_empty() == (version == stock_version)),
            "reload {reload}: {version}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no request failed during 10 reloads");
    assert!(served.load(Ordering::Relaxed) > 30, "the clients really ran");
}

#[test]
fn a_broken_directory_is_refused_and_the_loaded_components_keep_serving() {
    let dir = plugins_dir_with(&[], &[]);
    let server = Server::start_with(dir.path(), &[]);
    let before = server.health_details();
    std::fs::write(dir.path().join("endpoints.wasm"), b"not a component").unwrap();
    server.signal("HUP");
    server.wait_for_log(30, |log| log.contains("plugin reload refused"));
    let log = server.log();
    assert!(log.contains("endpoints.wasm") && log.contains("not a valid WebAssembly component"), "{log}");
    assert_eq!(server.health_details()["checks"], before["checks"], "health is unchanged");
    assert_eq!(server.get("/v1/endpoints?limit=1").status(), 200, "the old component keeps serving");
}

#[test]
fn the_admin_route_and_the_cli_reload_and_report_refusals() {
    let dir = plugins_dir_with(&[], &[]);
    let server = Server::start(dir.path());
    let reload_url = format!("{}/admin/v1/plugins/reload", server.admin_base);

    let anonymous = server.client.post(&reload_url).send().unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = server.client.post(&reload_url).bearer_auth(&server.keys[0]).send().unwrap();
    assert_eq!(wrong.status(), 401, "an API key is not the admin token");

    use_endpoints(dir.path(), &test_plugins_dir().join("endpoints-redacted.wasm"));
    let response = server.client.post(&reload_url).bearer_auth(server.admin_token()).send().unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().unwrap();
    let endpoints = body["loaded"].as_array().unwrap().iter().find(|p| p["group"] == "endpoints").unwrap().clone();
    assert!(endpoints["version"].as_str().unwrap().ends_with("+redacted"), "{body}");
    assert!(endpoints_version(&server).ends_with("+redacted"));

    // Two components for one group: refused, naming both files.
    std::fs::copy(plugins_dir().join("endpoints.wasm"), dir.path().join("endpoints-stock.wasm")).unwrap();
    let refused = server.client.post(&reload_url).bearer_auth(server.admin_token()).send().unwrap();
    assert_eq!(refused.status(), 422);
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = refused.json().unwrap();
    let reason = problem["error"].as_str().unwrap();
    assert!(reason.contains("endpoints-stock.wasm") && reason.contains("both serve"), "{reason}");
    assert!(endpoints_version(&server).ends_with("+redacted"), "the loaded set keeps serving");

    // The CLI reaches the same route and reports the refusal.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["plugins", "reload", "--admin-url", &server.admin_base, "--data-dir"])
        .arg(server.data_dir())
        .output()
        .unwrap();
    assert!(!cli.status.success());
    assert!(String::from_utf8_lossy(&cli.stderr).contains("endpoints-stock.wasm"));
    std::fs::remove_file(dir.path().join("endpoints-stock.wasm")).unwrap();
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
        .args(["plugins", "reload", "--admin-url", &server.admin_base, "--data-dir"])
        .arg(server.data_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    assert!(stdout.contains("vulnerability-findings") && stdout.contains("+redacted"), "{stdout}");
}
