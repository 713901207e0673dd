//! Lists against an oracle: random filter combinations and sorts over the
//! demo data and a larger generated organization, each checked against a
//! naive filter-and-sort of every record
//! (read unfiltered). The cursor walk must return exactly the oracle's
//! records, each once, in its order; `total` must equal its count; offset
//! pages must agree with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::cmp::Ordering;

use common::{Server, plugins_dir};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// How a sort key reads a record, for the oracle.
#[derive(Clone, Copy)]
enum Key {
    Text(&'static str),
    Number(&'static str),
    Rank(&'static str, &'static [&'static str]),
}

#[derive(Debug, Clone, PartialEq, PartialOrd)]
enum SortValue {
    Text(String),
    Number(f64),
}

impl Key {
    fn read(self, record: &Value) -> Option<SortValue> {
        match self {
            Key::Text(pointer) => record.pointer(pointer)?.as_str().map(|s| SortValue::Text(s.to_lowercase())),
            Key::Number(pointer) => record.pointer(pointer)?.as_f64().map(SortValue::Number),
            Key::Rank(pointer, ranks) => {
                let value = record.pointer(pointer)?.as_str()?;
                ranks.iter().position(|r| *r == value).map(|p| SortValue::Number(p as f64))
            }
        }
    }
}

/// A filter parameter: its name, how to draw a value from the data, and
/// whether a record matches that value.
/// Draws a value for a parameter from the records.
type Draw = Box<dyn Fn(&[Value], &mut StdRng) -> String>;
/// Whether a record matches a parameter's value.
type Matches = Box<dyn Fn(&Value, &str) -> bool>;

struct Param {
    name: &'static str,
    draw: Draw,
    matches: Matches,
}

impl Param {
    fn new(
        name: &'static str,
        draw: impl Fn(&[Value], &mut StdRng) -> String + 'static,
        matches: impl Fn(&Value, &str) -> bool + 'static,
    ) -> Param {
        Param { name, draw: Box::new(draw), matches: Box::new(matches) }
    }

    /// One to three values of the string at `pointer`; a record matches
    /// when its value is one of them.
    fn one_of(name: &'static str, pointer: &'static str) -> Param {
        Param::new(name, move |r, g| draw_values(r, g, pointer), move |r, v| one_of(r, pointer, v))
    }

    /// A value from the array at `pointer`; a record matches when its
    /// array holds it.
    fn in_array(name: &'static str, pointer: &'static str) -> Param {
        Param::new(name, move |r, g| draw_from_array(r, g, pointer), move |r, v| any_in_array(r, pointer, v))
    }
}

fn pick<'a>(records: &'a [Value], rng: &mut StdRng) -> &'a Value {
    &records[rng.gen_range(0..records.len())]
}

fn text<'a>(record: &'a Value, pointer: &str) -> Option<&'a str> {
    record.pointer(pointer).and_then(Value::as_str)
}

/// One to three distinct values of the string at `pointer`, comma-joined.
fn draw_values(records: &[Value], rng: &mut StdRng, pointer: &str) -> String {
    let mut values: Vec<String> =
        (0..rng.gen_range(1..=3)).filter_map(|_| text(pick(records, rng), pointer).map(str::to_owned)).collect();
    values.sort();
    values.dedup();
    if values.is_empty() { "none".to_owned() } else { values.join(",") }
}

fn one_of(record: &Value, pointer: &str, wanted: &str) -> bool {
    text(record, pointer).is_some_and(|value| wanted.split(',').any(|w| w == value))
}

fn any_in_array(record: &Value, pointer: &str, wanted: &str) -> bool {
    record
        .pointer(pointer)
        .and_then(Value::as_array)
        .is_some_and(|items| items.iter().filter_map(Value::as_str).any(|item| wanted.split(',').any(|w| w == item)))
}

fn draw_from_array(records: &[Value], rng: &mut StdRng, pointer: &str) -> String {
    for _ in 0..50 {
        if let Some(items) = pick(records, rng).pointer(pointer).and_then(Value::as_array)
            && let Some(item) = items.choose(rng).and_then(Value::as_str)
        {
            return item.to_owned();
        }
    }
    "none".to_owned()
}

fn draw_timestamp(records: &[Value], rng: &mut StdRng, pointer: &str) -> String {
    for _ in 0..50 {
        if let Some(value) = text(pick(records, rng), pointer) {
            return value.to_owned();
        }
    }
    "2026-01-01T00:00:00Z".to_owned()
}

fn updated_after() -> Param {
    Param::new(
        "updatedAfter",
        |r, g| draw_timestamp(r, g, "/updated_at"),
        |r, v| text(r, "/updated_at").is_some_and(|t| t > v),
    )
}

const SEVERITY_RANK: &[&str] = &["info", "low", "medium", "high", "critical"];

struct Collection {
    name: &'static str,
    params: Vec<Param>,
    sorts: Vec<(&'static str, Key)>,
}

fn collections() -> Vec<Collection> {
    vec![
        Collection {
            name: "endpoints",
            params: vec![
                Param::one_of("osFamily", "/operating_system/family"),
                Param::new(
                    "hasAgent",
                    |_, g| g.gen_bool(0.5).to_string(),
                    |r, v| r["agent_id"].is_string() == (v == "true"),
                ),
                Param::new(
                    "hostname",
                    |r, g| {
                        let host = text(pick(r, g), "/hostname").unwrap_or("x").to_uppercase();
                        host.chars().take(g.gen_range(1..=4)).collect()
                    },
                    |r, v| text(r, "/hostname").is_some_and(|h| h.to_lowercase().starts_with(&v.to_lowercase())),
                ),
                Param::in_array("tag", "/tags"),
                updated_after(),
            ],
            sorts: vec![
                ("created_at", Key::Text("/created_at")),
                ("updated_at", Key::Text("/updated_at")),
                ("hostname", Key::Text("/hostname")),
                ("last_seen_at", Key::Text("/last_seen_at")),
            ],
        },
        Collection {
            name: "vulnerability-findings",
            params: vec![
                Param::one_of("endpointId", "/endpoint_id"),
                Param::one_of("status", "/status"),
                Param::one_of("severity", "/severity"),
                Param::one_of("findingType", "/finding_type"),
                Param::one_of("cveId", "/cve_id"),
                Param::new("kev", |_, g| g.gen_bool(0.5).to_string(), |r, v| r["kev"].as_bool() == Some(v == "true")),
                Param::new(
                    "minCvss",
                    |_, g| format!("{:.1}", g.gen_range(0.0..10.0)),
                    |r, v| {
                        let min: f64 = v.parse().unwrap();
                        r.pointer("/cvss/base_score").and_then(Value::as_f64).is_some_and(|s| s >= min)
                    },
                ),
                Param::one_of("scanner", "/source/scanner"),
                Param::one_of("remediationTargetId", "/remediation_target_id"),
                Param::new(
                    "firstSeenAfter",
                    |r, g| draw_timestamp(r, g, "/first_seen_at"),
                    |r, v| text(r, "/first_seen_at").is_some_and(|t| t > v),
                ),
                updated_after(),
            ],
            sorts: vec![
                ("created_at", Key::Text("/created_at")),
                ("updated_at", Key::Text("/updated_at")),
                ("first_seen_at", Key::Text("/first_seen_at")),
                ("last_seen_at", Key::Text("/last_seen_at")),
                ("severity", Key::Rank("/severity", SEVERITY_RANK)),
                ("cvss", Key::Number("/cvss/base_score")),
            ],
        },
        Collection {
            name: "remediation-targets",
            params: vec![
                Param::one_of("endpointId", "/endpoint_id"),
                Param::in_array("scopeId", "/scope_ids"),
                Param::in_array("findingId", "/finding_ids"),
                Param::one_of("status", "/status"),
                Param::one_of("targetType", "/target_type"),
                Param::one_of("packageManager", "/package_manager"),
                Param::new(
                    "dueBefore",
                    |r, g| draw_timestamp(r, g, "/due_at"),
                    |r, v| text(r, "/due_at").is_some_and(|t| t < v),
                ),
                updated_after(),
            ],
            sorts: vec![
                ("created_at", Key::Text("/created_at")),
                ("updated_at", Key::Text("/updated_at")),
                ("due_at", Key::Text("/due_at")),
            ],
        },
        Collection {
            name: "scopes",
            params: vec![
                Param::one_of("status", "/status"),
                Param::new(
                    "q",
                    |r, g| {
                        let name = text(pick(r, g), "/name").unwrap_or("x").to_uppercase();
                        let start = g.gen_range(0..name.len().saturating_sub(3).max(1));
                        name.chars().skip(start).take(3).collect()
                    },
                    |r, v| text(r, "/name").is_some_and(|n| n.to_lowercase().contains(&v.to_lowercase())),
                ),
                updated_after(),
            ],
            sorts: vec![
                ("created_at", Key::Text("/created_at")),
                ("updated_at", Key::Text("/updated_at")),
                ("name", Key::Text("/name")),
            ],
        },
    ]
}

/// The oracle's order: the key (nulls last either way), then id.
fn compare(a: &Value, b: &Value, key: Key, descending: bool) -> Ordering {
    let by_key = match (key.read(a), key.read(b)) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => return Ordering::Greater,
        (Some(_), None) => return Ordering::Less,
        (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    };
    let by_id = a["id"].as_str().cmp(&b["id"].as_str());
    let ordering = by_key.then(by_id);
    if descending { ordering.reverse() } else { ordering }
}

fn ids(records: &[Value]) -> Vec<String> {
    records.iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
}

fn encode(value: &str) -> String {
    value.replace('%', "%25").replace('+', "%2B").replace(' ', "%20").replace('&', "%26")
}

/// Random filters and sorts for the organization with this index, each
/// checked against the oracle: `cases_per_collection` per collection, page
/// sizes drawn from `limits`.
fn check_against_the_oracle(server: &Server, organization: usize, cases_per_collection: usize, limits: &[usize]) {
    check_against_the_oracle_and_twin(server, None, organization, cases_per_collection, limits)
}

/// [`check_against_the_oracle`]; with `twins`, on the PostgreSQL server,
/// each answer compared with the sled server's, byte for byte apart from
/// cursors.
fn check_against_the_oracle_and_twin(
    server: &Server,
    twins: Option<&common::postgres::Twins>,
    organization: usize,
    cases_per_collection: usize,
    limits: &[usize],
) {
    let server = twins.map_or(server, |twins| &twins.postgres);
    let mut rng = StdRng::seed_from_u64(20_261_122);
    let (mut cases, mut non_empty, mut multi_page) = (0, 0, 0);
    for collection in collections() {
        let everything = server.all(organization, collection.name);
        for case in 0..cases_per_collection {
            // Zero to three filters, one sort, one page size.
            let mut chosen: Vec<(&Param, String)> = Vec::new();
            for _ in 0..rng.gen_range(0..=3) {
                let param = &collection.params[rng.gen_range(0..collection.params.len())];
                if chosen.iter().all(|(p, _)| p.name != param.name) {
                    chosen.push((param, (param.draw)(&everything, &mut rng)));
                }
            }
            let (sort_name, key) = collection.sorts[rng.gen_range(0..collection.sorts.len())];
            let descending = rng.gen_bool(0.5);
            let limit = limits[rng.gen_range(0..limits.len())];

            let mut expected: Vec<Value> =
                everything.iter().filter(|r| chosen.iter().all(|(p, v)| (p.matches)(r, v))).cloned().collect();
            expected.sort_by(|a, b| compare(a, b, key, descending));

            let mut query: Vec<String> = chosen.iter().map(|(p, v)| format!("{}={}", p.name, encode(v))).collect();
            query.push(format!("sort={}{sort_name}", if descending { "-" } else { "" }));
            query.push(format!("limit={limit}"));
            let base = format!("/v1/{}?{}", collection.name, query.join("&"));
            let what = format!("{} case {case}: {base}", collection.name);

            // The cursor walk.
            let mut walked: Vec<Value> = Vec::new();
            let mut path = base.clone();
            let mut twin_path = base.clone();
            loop {
                let page = match twins {
                    None => server.json_as(organization, &path),
                    Some(twins) => {
                        let (status, sled_body, body) = twins.same(organization, &twin_path, &path);
                        assert_eq!(status, 200, "{what}");
                        let sled_page: Value = serde_json::from_str(&sled_body).unwrap();
                        if let Some(cursor) = sled_page["next_cursor"].as_str() {
                            twin_path = format!("{base}&cursor={cursor}");
                        }
                        serde_json::from_str(&body).unwrap()
                    }
                };
                assert_eq!(page["total"].as_u64(), Some(expected.len() as u64), "{what}: total");
                let data = page["data"].as_array().unwrap();
                assert!(data.len() <= limit);
                walked.extend(data.iter().cloned());
                assert!(walked.len() <= expected.len(), "{what}: more records than match");
                match page["next_cursor"].as_str() {
                    Some(cursor) => path = format!("{base}&cursor={cursor}"),
                    None => break,
                }
            }
            assert_eq!(ids(&walked), ids(&expected), "{what}: cursor walk");
            cases += 1;
            non_empty += usize::from(!expected.is_empty());
            multi_page += usize::from(expected.len() > limit);

            // An offset page agrees with the same slice.
            let offset = rng.gen_range(0..=expected.len());
            let offset_path = format!("{base}&offset={offset}");
            let page = match twins {
                None => server.json_as(organization, &offset_path),
                Some(twins) => serde_json::from_str(&twins.same_at(organization, &offset_path).1).unwrap(),
            };
            let end = (offset + limit).min(expected.len());
            assert_eq!(ids(page["data"].as_array().unwrap()), ids(&expected[offset..end]), "{what} offset {offset}");
        }
    }
    // The draws must exercise something: most cases select records, many span pages.
    assert!(
        non_empty * 2 > cases && multi_page * 4 > cases,
        "{non_empty} non-empty, {multi_page} multi-page of {cases}"
    );
}

/// The same data set on sled and on PostgreSQL: the oracle's cases answer
/// alike on both, byte for byte apart from cursors.
#[test]
fn postgres_answers_the_oracle_cases_as_sled_does() {
    let twins = common::postgres::Twins::start(&plugins_dir());
    check_against_the_oracle_and_twin(&twins.postgres, Some(&twins), 0, 40, &[3, 7, 50, 100]);
    check_against_the_oracle_and_twin(&twins.postgres, Some(&twins), 1, 10, &[7, 100]);
}

#[test]
fn random_filters_and_sorts_agree_with_a_naive_oracle() {
    let server = Server::start(&plugins_dir());
    check_against_the_oracle(&server, 0, 40, &[3, 7, 50, 100]);
}

/// 6,400 findings: beyond what a list reads whole and sorts, so sorts by
/// severity, CVSS and the seen times walk the host's sort indexes, and
/// totals of several indexed filters come from index entries alone. Half
/// of them are then re-imported, batch by batch, with severities, scores
/// and seen times drawn anew, so that the sort indexes hold several runs
/// (and the entries the re-imports moved are gone from the runs they were
/// in) when the oracle checks them again.
#[test]
fn sort_indexes_and_key_only_totals_agree_with_the_oracle_at_a_larger_size() {
    let server = Server::start_seeded(&plugins_dir(), 80, 80);
    check_against_the_oracle(&server, 0, 12, &[50, 100]);
    scatter_sort_values(&server, 8, 400);
    check_against_the_oracle(&server, 0, 12, &[50, 100]);
}

/// Re-imports `per_batch` random findings of the first organization in
/// each of `batches` batches, with a new severity, CVSS score and seen
/// times anywhere in their ranges.
fn scatter_sort_values(server: &Server, batches: usize, per_batch: usize) {
    const SEVERITIES: [&str; 5] = ["critical", "high", "medium", "low", "info"];
    let mut rng = StdRng::seed_from_u64(20_261_124);
    let organization = &server.organization_ids[0];
    let mut findings = server.all(0, "vulnerability-findings");
    for _ in 0..batches {
        findings.shuffle(&mut rng);
        let mut body = String::new();
        for finding in findings.iter_mut().take(per_batch) {
            finding["severity"] = SEVERITIES[rng.gen_range(0..SEVERITIES.len())].into();
            if finding["cvss"].is_object() {
                finding["cvss"]["base_score"] = (f64::from(rng.gen_range(0..=100u8)) / 10.0).into();
            }
            let (first, last) = (rng.gen_range(1..28), rng.gen_range(1..28));
            finding["first_seen_at"] =
                format!("2026-10-{:02}T{:02}:00:00Z", first.min(last), rng.gen_range(0..24)).into();
            finding["last_seen_at"] = format!("2026-11-{last:02}T00:00:00Z").into();
            body.push_str(&format!("{finding}\n"));
        }
        let response = server
            .admin(
                reqwest::Method::POST,
                &format!("/admin/v1/organizations/{organization}/import/vulnerability-findings"),
            )
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .unwrap();
        let status = response.status();
        assert_eq!(status, 200, "re-import refused: {}", response.text().unwrap());
    }
}

/// Imports `records` into the first organization's `collection`, in
/// batches, each answered `200`.
fn import(server: &Server, collection: &str, records: &[Value]) {
    let organization = &server.organization_ids[0];
    for batch in records.chunks(2000) {
        let body: String = batch.iter().map(|record| format!("{record}\n")).collect();
        let response = server
            .admin(reqwest::Method::POST, &format!("/admin/v1/organizations/{organization}/import/{collection}"))
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .unwrap();
        let status = response.status();
        assert_eq!(status, 200, "import refused: {}", response.text().unwrap());
    }
}

/// `count` new scopes: the organization's own again, named per team, with
/// names that share long prefixes (`Team 0001: …`), and some that differ
/// only in case, past the tenth character, or in characters outside
/// ASCII.
fn team_scopes(templates: &[Value], count: usize) -> Vec<Value> {
    const ODD_NAMES: [&str; 8] = [
        "Team 0001: critical cves on laptops",
        "TEAM 0001: Critical CVEs on laptops",
        "Team 0001: Critical CVEs on laptopsX",
        "Équipe 0001: laptops",
        "équipe 0001: laptops",
        "Team 0001",
        "Team 0001:",
        "team 0001: zzz ünïcode",
    ];
    (0..count)
        .map(|number| {
            let mut scope = templates[number % templates.len()].clone();
            let object = scope.as_object_mut().unwrap();
            for field in ["created_at", "updated_at"] {
                object.remove(field);
            }
            // Ids of their own: many share a name, which would otherwise
            // name one scope (a scope's natural key).
            object.insert("id".into(), uuid::Uuid::now_v7().to_string().into());
            let name = templates[number % templates.len()]["name"].as_str().unwrap();
            scope["name"] = match number % 50 {
                0..8 => ODD_NAMES[number % 50].to_owned(),
                _ => format!("Team {:04}: {name}", number / templates.len() % 40),
            }
            .into();
            scope
        })
        .collect()
}

/// Host names (RFC 1123, as import requires) with long shared prefixes,
/// differing in case, after the tenth character, or in a dot where others
/// have a hyphen, for a share of the endpoints.
fn rename_endpoints(endpoints: &mut [Value]) {
    let names = [
        "seed-mbp-aaaaaaaaaaaaaaaa-001",
        "SEED-MBP-AAAAAAAAAAAAAAAA-002",
        "seed-mbp-aaaaaaaaaaaaaaaa-001x",
        "seed-mbp-a",
        "seed-mbp-0",
        "seed.mbp-a",
        "seed-mbp-a.example",
        "seed-mbp-aaaaaaaaaaaaaaaa",
        "Seed-Mbp-Aaaaaaaaaaaaaaaa-003",
        "z",
    ];
    for (number, endpoint) in endpoints.iter_mut().enumerate() {
        endpoint["hostname"] = names[number % names.len()].into();
    }
}

/// More endpoints and scopes than a list reads whole and sorts: `sort=hostname`
/// and `sort=name`, both ways, walk the text sort indexes, ties on their
/// prefixes resolved by the whole text. Every cursor walk and offset page,
/// with and without a filter, agrees with the oracle.
#[test]
fn text_sorts_walk_their_sort_indexes_and_agree_with_the_oracle() {
    let server = Server::start_seeded(&plugins_dir(), 6000, 0);
    let mut endpoints = server.all(0, "endpoints");
    endpoints.truncate(400);
    rename_endpoints(&mut endpoints);
    import(&server, "endpoints", &endpoints);
    let scopes = server.all(0, "scopes");
    import(&server, "scopes", &team_scopes(&scopes, 6000));

    let mut rng = StdRng::seed_from_u64(20_261_125);
    for (collection, key, filter) in
        [("endpoints", "hostname", ("osFamily", "/operating_system/family")), ("scopes", "name", ("status", "/status"))]
    {
        let everything = server.all(0, collection);
        assert!(everything.len() >= 6000, "{collection}: {}", everything.len());
        for descending in [false, true] {
            for filtered in [false, true] {
                let wanted = text(pick(&everything, &mut rng), filter.1).unwrap().to_owned();
                let mut expected: Vec<Value> = everything
                    .iter()
                    .filter(|r| !filtered || text(r, filter.1) == Some(wanted.as_str()))
                    .cloned()
                    .collect();
                expected.sort_by(|a, b| compare(a, b, Key::Text(leak(format!("/{key}"))), descending));
                let sort = format!("{}{key}", if descending { "-" } else { "" });
                let mut base = format!("/v1/{collection}?sort={sort}&limit=100");
                if filtered {
                    base.push_str(&format!("&{}={wanted}", filter.0));
                }
                let mut walked: Vec<Value> = Vec::new();
                let mut path = base.clone();
                loop {
                    let page = server.json_as(0, &path);
                    assert_eq!(page["total"].as_u64(), Some(expected.len() as u64), "{base}: total");
                    walked.extend(page["data"].as_array().unwrap().iter().cloned());
                    assert!(walked.len() <= expected.len(), "{base}: more records than match");
                    match page["next_cursor"].as_str() {
                        Some(cursor) => path = format!("{base}&cursor={cursor}"),
                        None => break,
                    }
                }
                assert_eq!(ids(&walked), ids(&expected), "{base}: cursor walk");
                for _ in 0..5 {
                    let offset = rng.gen_range(0..=expected.len());
                    let page = server.json_as(0, &format!("{base}&offset={offset}"));
                    let end = (offset + 100).min(expected.len());
                    assert_eq!(ids(page["data"].as_array().unwrap()), ids(&expected[offset..end]), "{base} @{offset}");
                }
            }
        }
    }
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// An organization of 20,000 endpoints (60,000 findings) and 20,000 more
/// scopes, served with a guest memory cap of 16 MiB: the lists that read
/// every record into the component (text sorts), or read every record to
/// count (`minCvss`), and the agent configuration answer `200`, with the
/// same records and totals as the indexes say; a filter too broad to count
/// by reading answers `400` naming what to narrow.
#[test]
fn a_large_organization_is_listed_within_a_small_memory_cap() {
    let server = Server::start_seeded_with(&plugins_dir(), 20_000, 3, &["--plugin-memory-mib", "16"]);
    let scopes = server.all(0, "scopes");
    let teams = team_scopes(&scopes, 20_000);
    import(&server, "scopes", &teams);
    let ok = |path: &str| {
        let response = server.get_as(0, path);
        let status = response.status();
        let body: Value = response.json().unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        body
    };

    for path in ["/v1/endpoints?sort=hostname", "/v1/endpoints?sort=-hostname&offset=5000"] {
        assert_eq!(ok(path)["total"], 20_000, "{path}");
    }
    let by_name = ok("/v1/scopes?sort=name&limit=100");
    assert_eq!(by_name["total"].as_u64(), Some(scopes.len() as u64 + 20_000));
    let names: Vec<String> =
        by_name["data"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_lowercase()).collect();
    assert!(names.windows(2).all(|pair| pair[0] <= pair[1]), "{names:?}");

    // The agent's file: every active scope that applies to Linux (naming
    // no family, or Linux among them).
    let for_linux = scopes
        .iter()
        .chain(&teams)
        .filter(|s| s["status"] == "active")
        .filter(|s| {
            s.pointer("/endpoint_filter/os_families")
                .and_then(Value::as_array)
                .is_none_or(|families| families.is_empty() || families.iter().any(|f| f == "linux"))
        })
        .count();
    let config = ok("/v1/agent/config?platform=linux");
    assert_eq!(config["active_scope_ids"].as_array().unwrap().len(), for_linux);

    // Every finding of CVSS 9.5 or more, by cursor: as many as `total` says.
    let base = "/v1/vulnerability-findings?minCvss=9.5&limit=100";
    let first = ok(base);
    let total = first["total"].as_u64().unwrap();
    let (mut page, mut walked) = (first, 0);
    loop {
        let data = page["data"].as_array().unwrap();
        assert!(data.iter().all(|f| f["cvss"]["base_score"].as_f64().is_some_and(|s| s >= 9.5)));
        walked += data.len() as u64;
        match page["next_cursor"].as_str() {
            Some(cursor) => page = ok(&format!("{base}&cursor={cursor}")),
            None => break,
        }
    }
    assert!(total > 0 && walked == total, "walked {walked} of {total}");

    // Two ranges over every scored finding, more than a list reads to
    // count (20,000): counted from the indexes, as one range alone is.
    let one_range = ok("/v1/vulnerability-findings?minCvss=0&limit=1");
    let two_ranges = ok("/v1/vulnerability-findings?minCvss=0&firstSeenAfter=2000-01-01T00:00:00Z&limit=1");
    assert!(one_range["total"].as_u64().is_some_and(|total| total > 20_000), "{one_range}");
    assert_eq!(two_ranges["total"], one_range["total"]);

    // A text tested on each of 40,000 scopes: too many records to count.
    let response = server.get_as(0, "/v1/scopes?q=e");
    assert_eq!(response.status(), 400);
    let problem: Value = response.json().unwrap();
    let reason = problem["invalid_params"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        problem["invalid_params"][0]["name"] == "q" && reason.contains("too broad") && reason.contains("narrow"),
        "{problem}"
    );
}
