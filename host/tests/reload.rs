//! Live replacement: SIGHUP re-reads the plugins directory and swaps the
//! components without failing a request; a broken directory is refused and
//! the components in service keep serving.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};

fn endpoints_version(server: &Server) -> String {
    server.json("/v1/health")["checks"]["plugin:endpoints"][0]["version"].as_str().unwrap().to_owned()
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
    let before = server.json("/v1/health");
    std::fs::write(dir.path().join("endpoints.wasm"), b"not a component").unwrap();
    server.signal("HUP");
    server.wait_for_log(30, |log| log.contains("plugin reload refused"));
    let log = server.log();
    assert!(log.contains("endpoints.wasm") && log.contains("not a valid WebAssembly component"), "{log}");
    assert_eq!(server.json("/v1/health")["checks"], before["checks"], "health is unchanged");
    assert_eq!(server.get("/v1/endpoints?limit=1").status(), 200, "the old component keeps serving");
}
