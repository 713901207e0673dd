//! The native baseline serves exactly what the components serve: the same
//! data directory answered once through the components and once with
//! `--native-handlers` gives the same status and bytes for every
//! operation. (`make test` builds with `--features native-baseline`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

#[cfg(feature = "native-baseline")]
use common::{Server, plugins_dir};

/// Without the feature there is nothing to compare: say so rather than pass.
#[cfg(not(feature = "native-baseline"))]
#[test]
fn the_native_baseline_is_built_in() {
    panic!("the native baseline is not built in: run with `--features esr/native-baseline` (as `make test` does)");
}

/// Status, content type and body of a request as Acme Corp.
#[cfg(feature = "native-baseline")]
fn answer(server: &Server, path: &str) -> (u16, String, Vec<u8>) {
    let response = server.get(path);
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, content_type, response.bytes().unwrap().to_vec())
}

#[cfg(feature = "native-baseline")]
#[test]
fn native_handlers_answer_as_the_components_do() {
    let mut components = Server::start(&plugins_dir());
    let finding = components.json("/v1/vulnerability-findings?limit=1")["data"][0]["id"].as_str().unwrap().to_owned();
    let endpoint = components.json("/v1/endpoints?limit=1")["data"][0]["id"].as_str().unwrap().to_owned();
    let second_page = components.json("/v1/vulnerability-findings?severity=high,critical&sort=-cvss&limit=7");
    let cursor = second_page["next_cursor"].as_str().unwrap().to_owned();
    let paths = [
        "/v1/endpoints?osFamily=macos&sort=-hostname".to_owned(),
        format!("/v1/endpoints/{endpoint}"),
        format!("/v1/vulnerability-findings/{finding}"),
        format!("/v1/vulnerability-findings?endpointId={endpoint}"),
        "/v1/vulnerability-findings?severity=high,critical&sort=-cvss&limit=7".to_owned(),
        format!("/v1/vulnerability-findings?severity=high,critical&sort=-cvss&limit=7&cursor={cursor}"),
        "/v1/vulnerability-findings?status=open&kev=true&updatedAfter=2020-01-01T00:00:00Z".to_owned(),
        "/v1/remediation-targets?status=queued,in_progress&sort=due_at".to_owned(),
        "/v1/scopes?q=a".to_owned(),
        "/v1/agent/config?platform=linux&format=toml".to_owned(),
        "/v1/vulnerability-findings?severity=urgent&limit=0".to_owned(),
        "/v1/scopes/01900000-0000-7000-8000-000000000000".to_owned(),
    ];
    // Documents name the server's own address: compare them without it.
    let without_base = |base: &str, (status, content_type, body): (u16, String, Vec<u8>)| {
        (status, content_type, String::from_utf8(body).unwrap().replace(base, "http://server").into_bytes())
    };
    let expected: Vec<_> = paths.iter().map(|path| without_base(&components.base, answer(&components, path))).collect();
    assert!(expected.iter().filter(|(status, _, _)| *status == 200).count() >= 10, "most succeed");
    components.stop();

    let native = Server::start_on_with(&plugins_dir(), components.data_dir(), &["--native-handlers"]);
    for (path, expected) in paths.iter().zip(expected) {
        let (status, content_type, body) = without_base(&native.base, answer(&native, path));
        assert_eq!((status, &content_type), (expected.0, &expected.1), "{path}");
        if status == 200 {
            assert!(body == expected.2, "{path}: the bodies differ");
        } else {
            // Problems carry the request's own id: compare the rest.
            let strip = |bytes: &[u8]| {
                let mut problem: serde_json::Value = serde_json::from_slice(bytes).unwrap();
                problem.as_object_mut().unwrap().remove("request_id");
                problem
            };
            assert_eq!(strip(&body), strip(&expected.2), "{path}");
        }
    }
}
