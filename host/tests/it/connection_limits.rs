//! Connections are bounded, on both listeners: caps overall and per client
//! address enforced at accept, idle keep-alive connections closed after
//! the idle timeout, half-sent requests closed, and the admin listener kept
//! on loopback unless explicitly allowed elsewhere; a slowloris on the
//! admin listener does not lock the operator out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};

/// How long any condition below may take to come true.
const BOUND: Duration = Duration::from_secs(30);

fn host_port(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

/// Whether the server has closed `stream` (reads without blocking; any
/// bytes it sent first are skipped).
fn closed_by_server(mut stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) if error.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// Polls until at most `open` of `streams` are still open, then returns
/// the indices of those still open.
fn wait_until_open_at_most(streams: &[TcpStream], open: usize) -> Vec<usize> {
    let deadline = Instant::now() + BOUND;
    loop {
        let still_open: Vec<usize> = (0..streams.len()).filter(|&i| !closed_by_server(&streams[i])).collect();
        if still_open.len() <= open {
            return still_open;
        }
        assert!(Instant::now() < deadline, "{} connections still open, expected {open}", still_open.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads until the server closes `stream`, returning what it sent; fails
/// when it is still open after [`BOUND`].
fn read_until_closed(stream: &mut TcpStream) -> String {
    let started = Instant::now();
    stream.set_read_timeout(Some(BOUND)).unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("still open after {:?}", started.elapsed())
            }
            Err(_) => break,
        }
        assert!(started.elapsed() < BOUND, "still open after {:?}", started.elapsed());
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// A client whose connections come from `local` and are never reused.
fn client_from(local: IpAddr) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().local_address(local).pool_max_idle_per_host(0).timeout(BOUND).build().unwrap()
}

#[test]
fn idle_connections_beyond_the_per_address_cap_are_closed_at_accept_and_health_answers_at_once() {
    let server = Server::start_with(
        &plugins_dir(),
        &[
            "--max-connections=40",
            "--max-connections-per-address=10",
            "--idle-timeout-secs=300",
            "--header-read-timeout-secs=300",
        ],
    );
    let address = host_port(&server.base);
    let idle: Vec<TcpStream> = (0..100).map(|_| TcpStream::connect(&address).unwrap()).collect();
    let held = wait_until_open_at_most(&idle, 10);
    assert_eq!(held.len(), 10, "the cap's worth of connections from 127.0.0.1 is held");

    // Another address still gets in, and health answers at once.
    let client = client_from(IpAddr::from([127, 0, 0, 2]));
    let mut latencies: Vec<Duration> = (0..11)
        .map(|_| {
            let started = Instant::now();
            let response = client.get(server.url("/v1/health")).send().unwrap();
            let elapsed = started.elapsed();
            assert_eq!(response.status(), 200);
            elapsed
        })
        .collect();
    latencies.sort();
    assert!(latencies[latencies.len() / 2] < Duration::from_millis(100), "health latencies {latencies:?}");
    assert_eq!(wait_until_open_at_most(&idle, 10).len(), 10, "the held connections stay open");
}

#[test]
fn connections_beyond_the_overall_cap_are_closed_at_accept_until_one_closes() {
    let server = Server::start_with(
        &plugins_dir(),
        &[
            "--max-connections=5",
            "--max-connections-per-address=100",
            "--idle-timeout-secs=300",
            "--header-read-timeout-secs=300",
        ],
    );
    let address = host_port(&server.base);
    let mut idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&address).unwrap()).collect();
    let held = wait_until_open_at_most(&idle, 5);
    assert_eq!(held.len(), 5);
    // A connection from another address is over the overall cap too.
    let refused = client_from(IpAddr::from([127, 0, 0, 3])).get(server.url("/v1/health")).send();
    assert!(refused.is_err(), "over the overall cap: {refused:?}");

    idle.swap_remove(held[0]);
    let client = client_from(IpAddr::from([127, 0, 0, 3]));
    let deadline = Instant::now() + BOUND;
    while !client.get(server.url("/v1/health")).send().is_ok_and(|response| response.status() == 200) {
        assert!(Instant::now() < deadline, "a closed connection never freed its place");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = Server::start_with(&plugins_dir(), &["--idle-timeout-secs=1", "--header-read-timeout-secs=300"]);
    let address = host_port(&server.base);
    let mut kept_alive = TcpStream::connect(&address).unwrap();
    kept_alive.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let received = read_until_closed(&mut kept_alive);
    assert!(received.starts_with("HTTP/1.1 200"), "answered, then closed once idle: {received:?}");

    let mut silent = TcpStream::connect(&address).unwrap();
    assert_eq!(read_until_closed(&mut silent), "", "a connection that never sends a byte is idle too");
}

#[test]
fn a_request_slower_than_the_idle_timeout_still_gets_its_answer() {
    // The endpoints group loops until its 3 s deadline: 3 s without a byte either way.
    let source = test_plugins_dir().join("endless-loop.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("endless-loop.wasm", &source)]);
    let server = Server::start_with(dir.path(), &["--idle-timeout-secs=1", "--plugin-deadline-ms=3000"]);
    let started = Instant::now();
    let response = server.get("/v1/endpoints");
    assert_eq!(response.status(), 503, "the deadline's answer, not a closed connection");
    assert!(started.elapsed() > Duration::from_secs(2), "the request outlived the idle timeout");
}

#[test]
fn the_admin_listener_closes_idle_and_half_sent_connections() {
    let server = Server::start_with(&plugins_dir(), &["--idle-timeout-secs=1", "--header-read-timeout-secs=2"]);
    let address = host_port(&server.admin_base);
    for opening in
        ["", "GET /admin/v1/organizations HTTP/1.1\r\nHost: x\r\n", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"]
    {
        let mut stream = TcpStream::connect(&address).unwrap();
        stream.write_all(opening.as_bytes()).unwrap();
        read_until_closed(&mut stream);
    }
    let organizations = server.admin(reqwest::Method::GET, "/admin/v1/organizations").send().unwrap();
    assert_eq!(organizations.status(), 200, "the admin listener still serves");
}

#[test]
fn the_admin_listener_keeps_the_per_address_cap_and_head_timeout_it_is_given() {
    // Two places per address (not the default 8): of six idle connections
    // from one address, the two newest are held, the older closed for them.
    let server = Server::start_with(
        &plugins_dir(),
        &["--admin-max-connections-per-address=2", "--admin-header-read-timeout-secs=60", "--idle-timeout-secs=300"],
    );
    let address = host_port(&server.admin_base);
    let mut idle = Vec::new();
    for _ in 0..6 {
        idle.push(TcpStream::connect(&address).unwrap());
        // In order, so "oldest" is well defined.
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(wait_until_open_at_most(&idle, 2), [4, 5], "the two newest are held");
    let organizations = server.admin(reqwest::Method::GET, "/admin/v1/organizations").send().unwrap();
    assert_eq!(organizations.status(), 200, "the operator still gets in from the same address");

    // A head not sent within one second (not the default five) closes its connection.
    let server = Server::start_with(&plugins_dir(), &["--admin-header-read-timeout-secs=1", "--idle-timeout-secs=300"]);
    let mut slow = TcpStream::connect(host_port(&server.admin_base)).unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /admin/v1/organizations HTTP/1.1\r\nHost: x\r\n").unwrap();
    read_until_closed(&mut slow);
    let closed_after = started.elapsed();
    assert!(
        closed_after >= Duration::from_millis(900) && closed_after < Duration::from_secs(5),
        "closed after {closed_after:?}"
    );
}

/// `esr serve` with its admin listener on every address.
fn serve_admin_on_all_addresses(extra: &[&str]) -> (std::process::Child, tempfile::TempDir) {
    let data_dir = common::private_tempdir();
    let child = Command::new(env!("CARGO_BIN_EXE_esr"))
        .env("ESR_COMPONENT_CACHE_DIR", common::component_cache_dir())
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0", "--data-dir"])
        .arg(data_dir.path())
        .arg("--plugins-dir")
        .arg(plugins_dir())
        .args(extra)
        .env("ESR_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, data_dir)
}

#[test]
fn a_non_loopback_admin_address_is_refused_unless_explicitly_allowed() {
    let (mut child, _data_dir) = serve_admin_on_all_addresses(&[]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    if esr::server::read_listening_addresses(&mut lines).is_some() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("esr served its admin listener on 0.0.0.0 without --admin-allow-remote");
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("0.0.0.0:0, which is not a loopback address"), "{stderr}");
    assert!(stderr.contains("--admin-allow-remote"), "says how to allow it: {stderr}");

    let (mut child, _data_dir) = serve_admin_on_all_addresses(&["--admin-allow-remote"]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = esr::server::read_listening_addresses(&mut lines);
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let (_, admin) = listening.unwrap_or_else(|| panic!("refused: {}", String::from_utf8_lossy(&output.stderr)));
    assert!(admin.starts_with("http://0.0.0.0:"), "{admin}");
}

/// A slowloris against `target`: `count` connections, from `sources` in
/// turn, each sending a request head one byte every `pace` and never
/// finishing it, opened again `pace` after the server closes it, until
/// `stop`. Counts the connections it opened in `opened`.
fn slowloris(
    target: std::net::SocketAddr,
    sources: Vec<IpAddr>,
    count: usize,
    pace: Duration,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let head = b"POST /admin/v1/plugins/reload HTTP/1.1\r\nHost: admin\r\nX-Padding: ";
            let tasks: Vec<_> = (0..count)
                .map(|i| {
                    let (stop, opened, source) = (stop.clone(), opened.clone(), sources[i % sources.len()]);
                    tokio::spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            let socket = tokio::net::TcpSocket::new_v4().unwrap();
                            socket.bind(std::net::SocketAddr::new(source, 0)).unwrap();
                            if let Ok(mut stream) = socket.connect(target).await {
                                opened.fetch_add(1, Ordering::Relaxed);
                                let mut bytes = head.iter().chain(std::iter::repeat(&b'a'));
                                let mut buffer = [0u8; 1024];
                                while !stop.load(Ordering::Relaxed) {
                                    tokio::select! {
                                        // Closed (or answered): open another.
                                        _ = stream.read(&mut buffer) => break,
                                        () = tokio::time::sleep(pace) => {
                                            let byte = bytes.next().copied().unwrap_or(b'a');
                                            if stream.write_all(&[byte]).await.is_err() {
                                                break;
                                            }
                                        }
                                    }
                                }
                            }
                            tokio::time::sleep(pace).await;
                        }
                    })
                })
                .collect();
            for task in tasks {
                let _ = task.await;
            }
        });
    })
}

#[test]
fn the_operator_revokes_a_key_and_imports_while_a_slowloris_holds_the_admin_listener() {
    let server = Server::start(&plugins_dir());
    let organization = server.organization_ids[0].clone();
    let created: serde_json::Value = server
        .admin(reqwest::Method::POST, "/admin/v1/keys")
        .json(&serde_json::json!({"organization_id": organization, "name": "to revoke", "scopes": ["endpoints:read"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let (key_id, key) = (created["id"].as_str().unwrap(), created["api_key"].as_str().unwrap());
    let endpoints = common::private_tempdir();
    let file = endpoints.path().join("endpoints.ndjson");
    let line = serde_json::json!({"hostname": "during-the-attack", "operating_system": {"name": "Debian 12", "family": "linux"}});
    std::fs::write(&file, format!("{line}\n")).unwrap();

    // One local process, four loopback addresses, 40 slow connections:
    // more than the admin listener's 32 places.
    let admin: std::net::SocketAddr = host_port(&server.admin_base).parse().unwrap();
    let (stop, opened) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let sources = (2..=5).map(|last| IpAddr::from([127, 0, 0, last])).collect();
    let attack = slowloris(admin, sources, 40, Duration::from_millis(200), stop.clone(), opened.clone());
    let started = Instant::now();
    while opened.load(Ordering::Relaxed) < 40 {
        assert!(started.elapsed() < BOUND, "the slowloris opened only {} connections", opened.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    let opened_before = opened.load(Ordering::Relaxed);

    // The operator, from 127.0.0.1, with the command line.
    let timed = |args: &[&str]| {
        let started = Instant::now();
        let output = server.cli(args);
        (output, started.elapsed())
    };
    let (revoked, revoke_took) = timed(&["keys", "revoke", key_id]);
    let (imported, import_took) =
        timed(&["import", "--organization", &organization, "--collection", "endpoints", file.to_str().unwrap()]);
    let (listed, list_took) = timed(&["organizations", "list"]);
    // The attack goes on: its connections are closed (to make room, or at
    // the head timeout) and opened again, within the timeout at most.
    let still = Instant::now() + Duration::from_secs(10);
    while opened.load(Ordering::Relaxed) == opened_before && Instant::now() < still {
        std::thread::sleep(Duration::from_millis(20));
    }
    let opened_during = opened.load(Ordering::Relaxed) - opened_before;
    stop.store(true, Ordering::Relaxed);
    attack.join().unwrap();
    eprintln!(
        "under the slowloris ({opened_during} connections opened meanwhile): revoke {revoke_took:?}, import \
         {import_took:?}, list {list_took:?}"
    );
    for (what, output, took) in
        [("revoke", &revoked, revoke_took), ("import", &imported, import_took), ("list", &listed, list_took)]
    {
        assert!(output.status.success(), "{what} failed after {took:?}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(took < Duration::from_secs(20), "{what} took {took:?}");
    }
    assert!(opened_during > 0, "the slowloris was still at it");
    let refused = server.client.get(server.url("/v1/endpoints")).bearer_auth(key).send().unwrap();
    assert_eq!(refused.status(), 401, "the revoked key is refused");
    assert!(server.log().contains("closed an idle connection that had not authenticated"), "{}", server.log());
}
