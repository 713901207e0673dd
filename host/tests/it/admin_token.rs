//! The admin token: an operator's own (`ESR_ADMIN_TOKEN`) must carry 128
//! bits or the server refuses to start, saying so; failed authentications
//! are throttled per client address, and the operator's token is never
//! refused for them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::time::Duration;

use common::{Server, plugins_dir, private_tempdir};
use reqwest::blocking::Client;

/// A client whose connections come from `local`.
fn client_from(local: IpAddr) -> Client {
    Client::builder().local_address(local).timeout(Duration::from_secs(30)).build().unwrap()
}

#[test]
fn a_weak_esr_admin_token_is_refused_at_start_and_a_strong_one_is_the_token() {
    for weak in
        ["esradm_sixteen-chars", "0123456789abcdef0123456789abcde", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]
    {
        let data_dir = private_tempdir();
        let variable = format!("ESR_ADMIN_TOKEN={weak}");
        let mut child = common::spawn(&plugins_dir(), data_dir.path(), &[&variable]);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        if esr::server::read_listening_addresses(&mut lines).is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("esr started with ESR_ADMIN_TOKEN={weak}");
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "started with ESR_ADMIN_TOKEN={weak}");
        assert!(
            stderr.contains("ESR_ADMIN_TOKEN is too weak") && stderr.contains("at least 128 bits"),
            "{weak}: {stderr}"
        );
        assert!(!stderr.contains(weak), "the refused token is not echoed: {stderr}");
    }

    // 32 hex characters (`openssl rand -hex 16`): 128 bits.
    let token = "9f86d081884c7d659a2feaa0c55ad015";
    let server = Server::start_with(&plugins_dir(), &[&format!("ESR_ADMIN_TOKEN={token}")]);
    assert!(!server.data_dir().join("admin-token").exists(), "the operator holds the token");
    let url = format!("{}/admin/v1/organizations", server.admin_base);
    assert_eq!(server.client.get(&url).bearer_auth(token).send().unwrap().status(), 200);
    assert_eq!(server.client.get(&url).bearer_auth("9f86d081884c7d659a2feaa0c55ad016").send().unwrap().status(), 401);
}

#[test]
fn failed_admin_authentications_are_throttled_per_address_and_never_the_operators_token() {
    let server = Server::start(&plugins_dir());
    let url = format!("{}/admin/v1/keys", server.admin_base);
    let stranger = client_from(IpAddr::from([127, 0, 0, 2]));
    for attempt in 1..=5 {
        let refused = stranger.get(&url).bearer_auth(format!("esradm_guess{attempt}")).send().unwrap();
        assert_eq!(refused.status(), 401, "attempt {attempt}");
    }
    let throttled = stranger.get(&url).bearer_auth("esradm_guess6").send().unwrap();
    assert_eq!(throttled.status(), 429);
    assert_eq!(throttled.headers()["content-type"], "application/problem+json");
    let retry_after: u64 = throttled.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=12).contains(&retry_after), "Retry-After: {retry_after}");
    let problem: serde_json::Value = throttled.json().unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("too many failed admin authentications"), "{problem}");
    // No token at all counts as a failure too.
    assert_eq!(stranger.get(&url).send().unwrap().status(), 429);

    // The operator's token passes from that same address, and from its own;
    // another address's first failure is a plain 401.
    assert_eq!(stranger.get(&url).bearer_auth(server.admin_token()).send().unwrap().status(), 200);
    assert_eq!(server.admin(reqwest::Method::GET, "/admin/v1/keys").send().unwrap().status(), 200);
    let other = client_from(IpAddr::from([127, 0, 0, 3]));
    assert_eq!(other.get(&url).bearer_auth("esradm_guess").send().unwrap().status(), 401);
}
