//! OAuth 2.0 client credentials end to end: API clients made on the admin
//! listener and the command line, the token endpoint's answers, tokens
//! used on the public API, refused for the right reasons (tokens minted by
//! PyJWT, identity providers served by the test), revocation and rotation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{
    Server, access_token, any_holds, data_dir_files, plugins_dir, python_dir, token_request, venv_program,
};

/// Creates an API client through the admin listener; its JSON (with the secret).
fn create_client(server: &Server, organization: &str, scopes: &[&str]) -> Value {
    let response = server
        .admin(Method::POST, "/admin/v1/clients")
        .json(&json!({"organization_id": organization, "name": "SIEM", "scopes": scopes}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 201);
    response.json().unwrap()
}

fn get_with(server: &Server, token: &str, path: &str) -> reqwest::blocking::Response {
    server.client.get(server.url(path)).bearer_auth(token).send().unwrap()
}

/// The claims of a JWT, unverified (the test reads what the server wrote).
fn claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

#[test]
fn the_token_endpoint_answers_as_rfc_6749_says_and_its_tokens_read_the_api() {
    let server = Server::start(&plugins_dir());
    let organization = server.organization_ids[0].clone();
    let client = create_client(&server, &organization, &["findings:read", "endpoints:read"]);
    let secret = client["client_secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("esrcs_"));

    // Metadata (RFC 8414) and the key set.
    let metadata: Value =
        server.client.get(server.url("/.well-known/oauth-authorization-server")).send().unwrap().json().unwrap();
    assert_eq!(metadata["issuer"], server.base);
    assert_eq!(metadata["token_endpoint"], server.url("/oauth2/token"));
    assert_eq!(metadata["grant_types_supported"], json!(["client_credentials"]));
    assert_eq!(metadata["token_endpoint_auth_methods_supported"], json!(["client_secret_basic", "client_secret_post"]));
    let jwks: Value = server.client.get(server.url("/.well-known/jwks.json")).send().unwrap().json().unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 1);
    assert_eq!(jwks["keys"][0]["kty"], "OKP");
    assert!(jwks["keys"][0].get("d").is_none(), "never the private key");

    // A token with the client's scopes, RFC 9068's claims, 15 minutes.
    let response = token_request(&server, &client, &[("grant_type", "client_credentials")]);
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 900);
    assert_eq!(body["scope"], "findings:read endpoints:read");
    let token = body["access_token"].as_str().unwrap();
    let header: Value = {
        use base64::Engine;
        let part = token.split('.').next().unwrap();
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    };
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["alg"], "EdDSA");
    assert_eq!(header["kid"], jwks["keys"][0]["kid"]);
    let claims = claims(token);
    assert_eq!(claims["iss"], server.base);
    assert_eq!(claims["aud"], server.url("/v1"));
    assert_eq!(claims["sub"], client["client_id"]);
    assert_eq!(claims["client_id"], client["client_id"]);
    assert_eq!(claims["org"], organization.as_str());
    assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 900);
    assert!(claims["jti"].as_str().is_some_and(|jti| !jti.is_empty()));

    // It reads what an API key of the organization reads.
    let with_token: Value = get_with(&server, token, "/v1/vulnerability-findings?limit=5").json().unwrap();
    let with_key = server.json("/v1/vulnerability-findings?limit=5");
    assert_eq!(with_token["data"], with_key["data"]);
    assert!(!with_key["data"].as_array().unwrap().is_empty());

    // Narrowed when asked: the scope it lacks is 403 with RFC 6750's error.
    let narrow = access_token(&server, &client, Some("endpoints:read"));
    assert_eq!(claims_of_scope(&narrow), "endpoints:read");
    let refused = get_with(&server, &narrow, "/v1/vulnerability-findings");
    assert_eq!(refused.status(), 403);
    assert_eq!(refused.headers()["www-authenticate"], "Bearer error=\"insufficient_scope\"");
    assert_eq!(get_with(&server, &narrow, "/v1/endpoints").status(), 200);

    // client_secret_post.
    let posted = server
        .client
        .post(server.url("/oauth2/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", client["client_id"].as_str().unwrap()),
            ("client_secret", &secret),
        ])
        .send()
        .unwrap();
    assert_eq!(posted.status(), 200);

    // RFC 6749 §5.2 errors.
    let error_of = |response: reqwest::blocking::Response| -> (u16, Option<String>, Value) {
        let status = response.status().as_u16();
        let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
        (status, challenge, response.json().unwrap())
    };
    let (status, challenge, body) = error_of(token_request(
        &server,
        &json!({"client_id": client["client_id"], "client_secret": "esrcs_wrong"}),
        &[("grant_type", "client_credentials")],
    ));
    assert_eq!((status, body["error"].as_str()), (401, Some("invalid_client")));
    assert_eq!(challenge.as_deref(), Some("Basic realm=\"esr\""));
    let (status, _, body) = error_of(token_request(
        &server,
        &json!({"client_id": uuid::Uuid::now_v7().to_string(), "client_secret": secret}),
        &[("grant_type", "client_credentials")],
    ));
    assert_eq!((status, body["error"].as_str()), (401, Some("invalid_client")), "an unknown client");
    let (status, _, body) = error_of(token_request(&server, &client, &[("grant_type", "password")]));
    assert_eq!((status, body["error"].as_str()), (400, Some("unsupported_grant_type")));
    let (status, _, body) =
        error_of(token_request(&server, &client, &[("grant_type", "client_credentials"), ("scope", "targets:read")]));
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_scope")));
    let (status, _, body) =
        error_of(token_request(&server, &client, &[("grant_type", "client_credentials"), ("scope", "admin")]));
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_scope")));
    let (status, _, body) = error_of(token_request(&server, &client, &[]));
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_request")));
    let (status, _, body) = error_of(token_request(
        &server,
        &client,
        &[("grant_type", "client_credentials"), ("grant_type", "client_credentials")],
    ));
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_request")), "a repeated parameter");
    let json_body = server
        .client
        .post(server.url("/oauth2/token"))
        .json(&json!({"grant_type": "client_credentials"}))
        .send()
        .unwrap();
    assert_eq!(json_body.status(), 400);

    // Rate-limited per client: the burst, then 429 with Retry-After.
    let mut statuses = Vec::new();
    for _ in 0..30 {
        let response = token_request(&server, &client, &[("grant_type", "client_credentials")]);
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            assert!(response.headers().contains_key("retry-after"));
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // Per client and address: the client's attempts from one address do
    // not lock it out from another (loopback answers on 127.0.0.2 too).
    let elsewhere =
        reqwest::blocking::Client::builder().local_address(std::net::IpAddr::from([127, 0, 0, 2])).build().unwrap();
    let from_elsewhere = elsewhere
        .post(server.url("/oauth2/token"))
        .basic_auth(client["client_id"].as_str().unwrap(), Some(&secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap();
    assert_eq!(from_elsewhere.status(), 200, "another address is not locked out");

    // A body is read no further than the endpoint's limit, whatever the
    // request says its length is: refused at once, not waited for.
    let mut stream = std::net::TcpStream::connect(server.base.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = "POST /oauth2/token HTTP/1.1\r\nHost: esr\r\nContent-Type: application/x-www-form-urlencoded\r\n\
                Content-Length: 1000000\r\n\r\n";
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&[b'a'; 9 * 1024]).unwrap();
    let mut status_line = String::new();
    BufReader::new(&stream).read_line(&mut status_line).unwrap();
    assert!(status_line.starts_with("HTTP/1.1 400"), "{status_line:?}");

    // Only the secret's hash is stored, and it is never logged.
    let files = data_dir_files(server.data_dir());
    assert!(any_holds(&files, b"$argon2id$"), "the secret's hash is in the store");
    assert!(!any_holds(&files, secret.as_bytes()), "the client secret is on disk");
    assert!(!server.log().contains(&secret));
    assert!(!server.log().contains(token), "a token is never logged");
}

fn claims_of_scope(token: &str) -> String {
    claims(token)["scope"].as_str().unwrap().to_owned()
}

#[test]
fn revoked_clients_tokens_stop_within_seconds_and_rotations_keep_tokens_working() {
    let server = Server::start(&plugins_dir());
    let organization = server.organization_ids[0].clone();

    // The command line: create, list, rotate the secret.
    let created = server.cli(&[
        "clients",
        "create",
        "--organization",
        &organization,
        "--name",
        "Sentinel",
        "--scope",
        "findings:read",
        "--expires-in",
        "90d",
    ]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let printed = String::from_utf8(created.stdout).unwrap();
    let field =
        |name: &str| printed.lines().find_map(|line| line.strip_prefix(&format!("{name}="))).unwrap().to_owned();
    let (client_id, secret) = (field("client_id"), field("client_secret"));
    let client = json!({"client_id": client_id, "client_secret": secret});
    let listed = server.cli(&["clients", "list", "--organization", &organization]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains(&client_id) && listed.contains("active until") && !listed.contains(&secret), "{listed}");
    let token = access_token(&server, &client, None);
    assert_eq!(get_with(&server, &token, "/v1/vulnerability-findings?limit=1").status(), 200);

    let rotated = server.cli(&["clients", "rotate-secret", &client_id]);
    assert!(rotated.status.success());
    let new_secret =
        String::from_utf8(rotated.stdout).unwrap().trim().strip_prefix("client_secret=").unwrap().to_owned();
    assert_eq!(
        token_request(&server, &client, &[("grant_type", "client_credentials")]).status(),
        401,
        "the old secret stops"
    );
    let client = json!({"client_id": client_id, "client_secret": new_secret});
    let second = access_token(&server, &client, None);
    assert_eq!(get_with(&server, &token, "/v1/vulnerability-findings?limit=1").status(), 200, "issued tokens run on");

    // Signing keys rotate: new tokens carry the new key, the old key stays
    // published and its tokens accepted.
    let before: Value = server.client.get(server.url("/.well-known/jwks.json")).send().unwrap().json().unwrap();
    let rotated = server.cli(&["signing-keys", "rotate"]);
    assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
    let keys = String::from_utf8(server.cli(&["signing-keys", "list"]).stdout).unwrap();
    assert!(keys.contains("retired, published until") && keys.contains("signing"), "{keys}");
    let after: Value = server.client.get(server.url("/.well-known/jwks.json")).send().unwrap().json().unwrap();
    assert_eq!(after["keys"].as_array().unwrap().len(), 2);
    let third = access_token(&server, &client, None);
    let kid_of = |token: &str| {
        use base64::Engine;
        let part = token.split('.').next().unwrap();
        let header: Value =
            serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap();
        header["kid"].as_str().unwrap().to_owned()
    };
    assert_ne!(kid_of(&third), kid_of(&second));
    assert_eq!(kid_of(&second), before["keys"][0]["kid"].as_str().unwrap());
    for token in [&token, &second, &third] {
        assert_eq!(get_with(&server, token, "/v1/vulnerability-findings?limit=1").status(), 200);
    }

    // Revoked: every token of the client is refused within the documented
    // bound (a host trusts what it read of a client for 5 s at most).
    let revoked_at = Instant::now();
    let revoked = server.cli(&["clients", "revoke", &client_id]);
    assert!(revoked.status.success());
    loop {
        let response = get_with(&server, &third, "/v1/vulnerability-findings?limit=1");
        if response.status() == 401 {
            assert_eq!(response.headers()["www-authenticate"], "Bearer error=\"invalid_token\"");
            let problem: Value = response.json().unwrap();
            assert!(problem["detail"].as_str().unwrap().contains("revoked"), "{problem}");
            break;
        }
        assert_eq!(response.status(), 200);
        assert!(revoked_at.elapsed() < Duration::from_secs(10), "a revoked client's token still works");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get_with(&server, &token, "/v1/vulnerability-findings?limit=1").status(), 401);
    assert_eq!(token_request(&server, &client, &[("grant_type", "client_credentials")]).status(), 401);
}

#[test]
fn tokens_minted_independently_are_refused_for_the_right_reasons_and_none_reaches_a_component() {
    // The organizations exist before the server that trusts the providers
    // for one of them starts.
    let mut first = Server::start(&plugins_dir());
    let (organization, other) = (first.organization_ids[0].clone(), first.organization_ids[1].clone());
    first.stop();

    let mut python = Command::new(venv_program("python"))
        .arg(python_dir().join("oauth_tokens.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(python.stdout.take().unwrap()).lines();
    let announced: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let (issuer_a, issuer_b) = (announced["issuers"][0].as_str().unwrap(), announced["issuers"][1].as_str().unwrap());
    let server = Server::start_on_with(
        &plugins_dir(),
        first.data_dir(),
        &[
            "--oidc-issuer",
            issuer_a,
            "--oidc-audience",
            "esr-a",
            "--oidc-issuer",
            issuer_b,
            "--oidc-audience",
            "esr-b",
            "--oidc-organizations",
            &organization,
            "--oidc-organizations",
            "*",
            "--oidc-allow-http",
            "--oidc-allow-private",
        ],
    );
    let client = create_client(&server, &organization, &["findings:read", "endpoints:read"]);
    let calls_before = server.metric_sum("esr_component_call_duration_seconds_count");
    let job = json!({
        "api": server.base, "organization": organization, "other_organization": other,
        "client_id": client["client_id"], "client_secret": client["client_secret"],
        "audiences": {"a": "esr-a", "b": "esr-b"},
    });
    python.stdin.take().unwrap().write_all(format!("{job}\n").as_bytes()).unwrap();
    let results: Vec<Value> = lines.map(|line| serde_json::from_str(&line.unwrap()).unwrap()).collect();
    assert!(python.wait().unwrap().success());

    let mut accepted = 0;
    let mut refused = Vec::new();
    for result in results.iter().filter(|result| result.get("case").is_some()) {
        let case = result["case"].as_str().unwrap();
        if case.starts_with("accepted:") {
            assert_eq!(result["status"], 200, "{result}");
            accepted += 1;
        } else if case.starts_with("forbidden:") {
            assert_eq!(result["status"], 403, "{result}");
            assert_eq!(result["www_authenticate"], "Bearer error=\"insufficient_scope\"", "{result}");
        } else {
            assert_eq!(result["status"], 401, "{result}");
            assert_eq!(result["www_authenticate"], "Bearer error=\"invalid_token\"", "{result}");
            assert_eq!(result["content_type"], "application/problem+json", "{result}");
            refused.push(case.to_owned());
        }
    }
    let reason = |case: &str| {
        results.iter().find(|result| result["case"] == case).unwrap()["detail"].as_str().unwrap().to_owned()
    };
    assert!(reason("expired").contains("expired"));
    assert!(reason("not yet valid").contains("not valid yet"));
    assert!(reason("wrong aud").contains("aud"));
    assert!(reason("wrong iss").contains("issuer"));
    assert!(reason("wrong typ").contains("typ"));
    assert!(reason("provider a, organization it may not speak for").contains("may not speak for"));
    assert!(reason("own token, modified payload (organization)").contains("signature"));
    assert!(reason("HS256 signed with the public key").contains("algorithm"));
    assert_eq!(accepted, 4);
    assert!(refused.len() >= 20, "{refused:?}");
    // Only the accepted requests reached a component.
    let calls_after = server.metric_sum("esr_component_call_duration_seconds_count");
    // Authlib paged through every endpoint of the organization.
    let paged = results.iter().find_map(|result| result["paged"].as_u64()).unwrap();
    let pages = results.iter().find_map(|result| result["pages"].as_u64()).unwrap();
    let reached = f64::from(accepted) + pages as f64;
    assert_eq!(calls_after - calls_before, reached, "a refused token reached a component");
    let total = server.json("/v1/endpoints?limit=1")["total"].as_u64().unwrap();
    assert_eq!(paged, total);
    assert!(total > 7, "more than one page");
}
