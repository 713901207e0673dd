//! The store as components read it: one set of checks, run on the SDK's
//! `MemoryStore` (what plugins' unit tests read) and on sled and PostgreSQL
//! through the host's store functions (`esr::native::with_store`, the calls
//! a component's `store` makes). Every answer is compared with brute force
//! over the same records, and a call the host fails fails on all three, so
//! a plugin's unit test cannot pass on index semantics no backend has.
//! (Built with the native baseline, as `make test` builds.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::store_contract::{endpoint, finding, middle_first_sighting};

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use esr::store;
use esr_contract::indexes::{self, SORTED};
use esr_contract::time::Timestamp;
use esr_plugin_sdk::testing::MemoryStore;
use esr_plugin_sdk::{GroupCount, IndexCondition, IndexPosition, IndexRange, IndexWalk, Matching, RecordWalk, Store};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use uuid::Uuid;

/// The collection a check names as components do.
fn named(collection: &str) -> esr::store::Collection {
    esr::store::Collection::named(collection).unwrap()
}

const FINDINGS: &str = "vulnerability-findings";
const ENDPOINTS: &str = "endpoints";

/// Where the records are kept: a check runs on a `Store` holding them and
/// fails (`Err`) where a component's call would fail the request.
trait Holder {
    fn read(&self, check: &mut dyn FnMut(&dyn Store)) -> Result<(), String>;
}

struct Memory(MemoryStore);

impl Holder for Memory {
    /// A call the host fails panics in the `MemoryStore` (a component's
    /// call traps the same way).
    fn read(&self, check: &mut dyn FnMut(&dyn Store)) -> Result<(), String> {
        std::panic::catch_unwind(AssertUnwindSafe(|| check(&self.0)))
            .map_err(|panic| panic.downcast_ref::<String>().cloned().unwrap_or_else(|| "the call panicked".to_owned()))
    }
}

/// The host's store (sled or PostgreSQL) for one organization, with what
/// keeps its place alive.
struct Host {
    store: Arc<dyn store::Store>,
    organization: Uuid,
    _places: (tempfile::TempDir, Option<common::postgres::TestDatabase>),
}

impl Holder for Host {
    fn read(&self, check: &mut dyn FnMut(&dyn Store)) -> Result<(), String> {
        let tenant = esr_runtime::Tenant {
            store: self.store.clone(),
            organization_id: self.organization,
            organization_json: Arc::new(b"{}".to_vec()),
            reads: Arc::default(),
            call_time: None,
        };
        esr::native::with_store(&tenant, |store| {
            check(store);
            Ok(())
        })
        .map_err(|error| format!("{error:?}"))
    }
}

/// The records every holder keeps: findings on a few endpoints (some
/// without a finding type, some without CVSS, ties on purpose) and
/// endpoints with several tags.
struct Records {
    findings: Vec<Value>,
    endpoints: Vec<Value>,
    endpoint_ids: Vec<String>,
}

impl Records {
    fn new() -> Records {
        let endpoint_ids: Vec<String> = (0..5).map(|_| Uuid::now_v7().to_string()).collect();
        let findings = (0..240)
            .map(|n| {
                let mut record = finding(n);
                record["endpoint_id"] = json!(endpoint_ids[n % 5]);
                if n % 7 == 3 {
                    record.as_object_mut().unwrap().remove("finding_type");
                }
                record
            })
            .collect();
        Records { findings, endpoints: (0..60).map(endpoint).collect(), endpoint_ids }
    }

    fn of(&self, collection: &str) -> &[Value] {
        if collection == FINDINGS { &self.findings } else { &self.endpoints }
    }
}

fn memory(records: &Records) -> Memory {
    let mut store = MemoryStore::default();
    for collection in [FINDINGS, ENDPOINTS] {
        for record in records.of(collection) {
            store.insert(collection, record.clone());
        }
    }
    Memory(store)
}

fn host(records: &Records, database: Option<common::postgres::TestDatabase>) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(database.as_ref().map(|database| database.url.as_str()), dir.path()).unwrap();
    let organization = Uuid::now_v7();
    for collection in [FINDINGS, ENDPOINTS] {
        store.insert_records(organization, named(collection), records.of(collection)).unwrap();
        // Another organization's records are never counted.
        store.insert_records(Uuid::now_v7(), named(collection), &records.of(collection)[..10]).unwrap();
    }
    Host { store, organization, _places: (dir, database) }
}

/// The same checks on each holder, named in a failure.
fn on_every_holder(check: impl Fn(&dyn Holder, &Records)) {
    let records = Records::new();
    let holders: [(&str, Box<dyn Holder>); 3] = [
        ("MemoryStore", Box::new(memory(&records))),
        ("sled", Box::new(host(&records, None))),
        ("PostgreSQL", Box::new(host(&records, Some(common::postgres::TestDatabase::new())))),
    ];
    for (name, holder) in &holders {
        eprintln!("checking {name}");
        check(holder.as_ref(), &records);
    }
}

fn id_of(record: &Value) -> String {
    record["id"].as_str().unwrap().to_owned()
}

/// Where the index puts a record.
fn position(collection: &str, index: &str, record: &Value) -> IndexPosition {
    IndexPosition::new(
        indexes::find(named(collection), index).unwrap().position(record),
        Uuid::parse_str(&id_of(record)).unwrap(),
    )
}

/// Whether a record meets every condition and was updated strictly after
/// `updated_after`.
fn meets(collection: &str, record: &Value, conditions: &[IndexCondition], updated_after: Option<i64>) -> bool {
    let updated = record["updated_at"].as_str().and_then(Timestamp::parse).unwrap().0;
    conditions.iter().all(|condition| {
        let held = indexes::find(named(collection), &condition.index).unwrap().values(record);
        condition.values.iter().any(|value| held.contains(value))
    }) && updated_after.is_none_or(|after| updated > after)
}

fn in_range(collection: &str, record: &Value, range: &IndexRange) -> bool {
    indexes::find(named(collection), &range.index).unwrap().values(record) == [SORTED] && {
        let at = position(collection, &range.index, record);
        range.after.is_none_or(|after| at > after) && range.before.is_none_or(|before| at < before)
    }
}

fn read(holder: &dyn Holder, mut check: impl FnMut(&dyn Store)) {
    holder.read(&mut check).expect("no call failed");
}

#[test]
fn records_by_id_and_in_id_order() {
    on_every_holder(|holder, records| {
        read(holder, |store| {
            for collection in [FINDINGS, ENDPOINTS] {
                let mut ids: Vec<String> = records.of(collection).iter().map(id_of).collect();
                ids.sort();
                assert_eq!(store.count(collection), ids.len() as u64);
                for record in records.of(collection) {
                    let bytes = store.get(collection, &id_of(record)).expect("stored");
                    assert_eq!(&serde_json::from_slice::<Value>(&bytes).unwrap(), record);
                }
                assert_eq!(store.get(collection, &Uuid::now_v7().to_string()), None);
                for reverse in [false, true] {
                    let mut walked = Vec::new();
                    let mut after: Option<Uuid> = None;
                    loop {
                        let page = store.scan(collection, &RecordWalk::new(7).after(after).reversed(reverse));
                        after = page.last().map(|entry| Uuid::parse_str(&entry.id).unwrap());
                        walked.extend(page.iter().map(|entry| entry.id.clone()));
                        if page.len() < 7 {
                            break;
                        }
                    }
                    let expected: Vec<String> = if reverse { ids.iter().rev().cloned().collect() } else { ids.clone() };
                    assert_eq!(walked, expected, "{collection} scanned in pages, reverse {reverse}");
                }
            }
            assert_eq!(store.count("no-such-collection"), 0);
            assert!(store.scan("no-such-collection", &RecordWalk::new(10)).is_empty());
            assert_eq!(store.get("no-such-collection", &Uuid::now_v7().to_string()), None);
        });
    });
}

#[test]
fn index_walks_and_counts_agree_with_brute_force() {
    on_every_holder(|holder, records| {
        read(holder, |store| {
            for collection in [FINDINGS, ENDPOINTS] {
                for index in indexes::indexes(named(collection)) {
                    let values: BTreeSet<String> =
                        records.of(collection).iter().flat_map(|record| index.values(record)).collect();
                    for value in values.iter().chain([&"none-such".to_owned()]) {
                        let mut expected: Vec<IndexPosition> = records
                            .of(collection)
                            .iter()
                            .filter(|record| index.values(record).contains(value))
                            .map(|record| position(collection, index.name, record))
                            .collect();
                        expected.sort();
                        let what = format!("{collection} {}={value:?}", index.name);
                        assert_eq!(store.index_count(collection, index.name, value), expected.len() as u64, "{what}");
                        let whole = store.index_positions(collection, &IndexWalk::new(index.name, value, 1000));
                        assert_eq!(whole, expected, "{what}: positions");
                        let scanned: Vec<String> = store
                            .index_scan(collection, &IndexWalk::new(index.name, value, 1000))
                            .into_iter()
                            .map(|entry| entry.id)
                            .collect();
                        let expected_ids: Vec<String> = expected.iter().map(|at| at.id.to_string()).collect();
                        assert_eq!(scanned, expected_ids, "{what}: records");
                        for reverse in [false, true] {
                            let mut walked = Vec::new();
                            let mut after: Option<IndexPosition> = None;
                            loop {
                                let page = store.index_positions(
                                    collection,
                                    &IndexWalk::new(index.name, value, 7).after(after).reversed(reverse),
                                );
                                after = page.last().copied();
                                walked.extend(page.iter().copied());
                                if page.len() < 7 {
                                    break;
                                }
                            }
                            let in_order: Vec<IndexPosition> =
                                if reverse { expected.iter().rev().copied().collect() } else { expected.clone() };
                            assert_eq!(walked, in_order, "{what}: in pages, reverse {reverse}");
                        }
                        if let Some(middle) = expected.get(expected.len() / 2).copied() {
                            let later: Vec<String> =
                                expected.iter().filter(|at| **at > middle).map(|at| at.id.to_string()).collect();
                            let from_middle: Vec<String> = store
                                .index_scan(collection, &IndexWalk::new(index.name, value, 1000).after(Some(middle)))
                                .into_iter()
                                .map(|entry| entry.id)
                                .collect();
                            assert_eq!(from_middle, later, "{what}: strictly after a position");
                        }
                    }
                }
            }
        });
    });
}

#[test]
fn counts_with_conditions_and_ranges_agree_with_brute_force() {
    on_every_holder(|holder, records| {
        let condition = |index: &str, values: &[&str]| {
            IndexCondition::new(index, values.iter().map(|value| (*value).to_owned()).collect())
        };
        let cases = [
            vec![],
            vec![condition("status", &["open"])],
            vec![condition("status", &["open", "suppressed", "open"])],
            vec![condition("severity", &["critical"]), condition("status", &["open"])],
            vec![condition("kev", &["true"]), condition("finding_type", &["application", "none-such"])],
            vec![condition("endpoint_id", &[&records.endpoint_ids[1], &records.endpoint_ids[3]])],
            vec![condition("created_at", &[""]), condition("status", &["resolved"])],
        ];
        let afters = [None, Some("2026-01-11T02:10:30Z"), Some("2026-01-28T06:59:59Z")];
        let mut sorted: Vec<IndexPosition> = records
            .findings
            .iter()
            .filter(|record| record.pointer("/cvss/base_score").is_some())
            .map(|record| position(FINDINGS, "by_cvss", record))
            .collect();
        sorted.sort();
        let at = |n: usize| Some(sorted[n]);
        let bounds = [(None, None), (at(3), None), (None, at(90)), (at(3), at(90)), (at(90), at(3)), (at(10), at(11))];
        let seen_after = middle_first_sighting(&records.findings);
        read(holder, |store| {
            for conditions in &cases {
                for after in afters {
                    let updated_after = after.map(|after| Timestamp::parse(after).unwrap().0);
                    let expected = records
                        .findings
                        .iter()
                        .filter(|record| meets(FINDINGS, record, conditions, updated_after))
                        .count() as u64;
                    assert_eq!(
                        store.count_matching(
                            FINDINGS,
                            &Matching { conditions: conditions.clone(), updated_after, ranges: Vec::new() }
                        ),
                        expected,
                        "{conditions:?} after {after:?}"
                    );
                    for ((after, before), seen) in bounds.into_iter().zip([None, Some(seen_after)].into_iter().cycle())
                    {
                        // A range of scores, and every other time one of
                        // first sightings too.
                        let mut ranges = vec![IndexRange { index: "by_cvss".to_owned(), after, before }];
                        ranges.extend(seen.map(|seen| IndexRange {
                            index: "by_first_seen_at".to_owned(),
                            after: Some(seen),
                            before: None,
                        }));
                        let expected = records
                            .findings
                            .iter()
                            .filter(|record| ranges.iter().all(|range| in_range(FINDINGS, record, range)))
                            .filter(|record| meets(FINDINGS, record, conditions, updated_after))
                            .count() as u64;
                        assert_eq!(
                            store.count_matching(
                                FINDINGS,
                                &Matching { ranges: ranges.clone(), conditions: conditions.clone(), updated_after }
                            ),
                            expected,
                            "{ranges:?} {conditions:?} after {updated_after:?}"
                        );
                    }
                }
            }
        });
    });
}

/// A collection to count groups of: the conditions a case picks from
/// (index, values) and the indexes it may group by.
type GroupedCollection<'a> = (&'a str, Vec<(&'a str, Vec<String>)>, &'a [&'a str]);

/// A store call, named by what it does wrong.
type Call = Box<dyn Fn(&dyn Store)>;

#[test]
fn counts_by_group_agree_with_brute_force() {
    on_every_holder(|holder, records| {
        let pools: [GroupedCollection; 2] = [
            (
                FINDINGS,
                vec![
                    ("endpoint_id", records.endpoint_ids.clone()),
                    ("status", ["open", "resolved", "suppressed"].map(String::from).to_vec()),
                    ("severity", ["critical", "high", "medium", "low"].map(String::from).to_vec()),
                    ("kev", ["true", "false"].map(String::from).to_vec()),
                    ("finding_type", ["os_package", "application", "none-such"].map(String::from).to_vec()),
                ],
                &["severity", "status", "kev", "finding_type", "endpoint_id"],
            ),
            (
                ENDPOINTS,
                vec![
                    ("tag", ["prod", "dev", "pci", "eu"].map(String::from).to_vec()),
                    ("os_family", ["linux", "windows", "macos"].map(String::from).to_vec()),
                ],
                &["os_family", "has_agent"],
            ),
        ];
        let sorted = |index: &str| -> (String, Vec<IndexPosition>) {
            let found = indexes::find(named(FINDINGS), index).unwrap();
            let mut positions: Vec<IndexPosition> = records
                .findings
                .iter()
                .filter(|record| found.values(record).iter().any(|value| value == indexes::SORTED))
                .map(|record| position(FINDINGS, index, record))
                .collect();
            positions.sort();
            (index.to_owned(), positions)
        };
        let range_indexes = [sorted("by_cvss"), sorted("by_first_seen_at")];
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        read(holder, |store| {
            for case in 0..120 {
                let (collection, pool, groupable) = &pools[case % 2];
                let group_count = rng.gen_range(1..=2);
                let group_by: Vec<String> =
                    groupable.choose_multiple(&mut rng, group_count).map(|index| (*index).to_owned()).collect();
                let condition_count = rng.gen_range(0..=2);
                let conditions: Vec<IndexCondition> = pool
                    .choose_multiple(&mut rng, condition_count)
                    .map(|(index, values)| {
                        let count = rng.gen_range(1..=values.len().min(3));
                        IndexCondition::new(*index, values.choose_multiple(&mut rng, count).cloned().collect())
                    })
                    .collect();
                // None, one or both range indexes.
                let range_count = if *collection == FINDINGS { rng.gen_range(0..=2) } else { 0 };
                let ranges: Vec<IndexRange> = range_indexes
                    .choose_multiple(&mut rng, range_count)
                    .map(|(index, positions)| {
                        let mut bound = || rng.gen_bool(0.7).then(|| positions[rng.gen_range(0..positions.len())]);
                        let (after, before) = (bound(), bound());
                        IndexRange { index: index.clone(), after, before }
                    })
                    .collect();
                let updated_after = rng
                    .gen_bool(0.3)
                    .then(|| Timestamp::parse(&format!("2026-01-{:02}T00:00:00Z", rng.gen_range(1..=28))).unwrap().0);

                let mut expected: BTreeMap<Vec<String>, u64> = BTreeMap::new();
                for record in records.of(collection) {
                    let held: Vec<Vec<String>> = group_by
                        .iter()
                        .map(|index| indexes::find(named(collection), index).unwrap().values(record))
                        .collect();
                    if meets(collection, record, &conditions, updated_after)
                        && ranges.iter().all(|range| in_range(collection, record, range))
                        && held.iter().all(|values| values.len() == 1)
                    {
                        *expected.entry(held.into_iter().flatten().collect()).or_default() += 1;
                    }
                }
                let expected: Vec<GroupCount> =
                    expected.into_iter().map(|(values, count)| GroupCount { values, count }).collect();
                let matching = Matching { ranges: ranges.clone(), conditions: conditions.clone(), updated_after };
                let groups = store.count_groups(collection, &group_by, &matching);
                assert_eq!(groups, expected, "{collection} by {group_by:?} where {conditions:?} in {ranges:?}");
            }
        });
    });
}

/// What the host refuses (an index the collection does not have, a range
/// on an index that is not a sort index, a count by a field a record may
/// hold several times) fails the call on every holder.
#[test]
fn malformed_calls_fail_on_every_holder() {
    on_every_holder(|holder, _| {
        let sorted = IndexRange { index: "by_cvss".to_owned(), after: None, before: None };
        let by_status = IndexRange { index: "status".to_owned(), after: None, before: None };
        let colour = [IndexCondition::new("colour", vec!["red".to_owned()])];
        let five = sorted.clone();
        let calls: [(&str, Call); 8] = [
            ("index-count of an unknown index", Box::new(|store| _ = store.index_count(FINDINGS, "colour", "red"))),
            (
                "index-scan of an unknown index",
                Box::new(|store| drop(store.index_scan(FINDINGS, &IndexWalk::new("colour", "red", 10)))),
            ),
            (
                "index-positions of an unknown collection",
                Box::new(|store| {
                    drop(store.index_positions("no-such-collection", &IndexWalk::new("status", "open", 10)))
                }),
            ),
            (
                "count-matching on an unknown index",
                Box::new(move |store| _ = store.count_matching(FINDINGS, &Matching::conditions(colour.to_vec()))),
            ),
            (
                "count-in-range of an index that is not a sort index",
                Box::new(move |store| {
                    _ = store
                        .count_matching(FINDINGS, &Matching { ranges: vec![by_status.clone()], ..Matching::default() })
                }),
            ),
            (
                "count-groups by a field a record holds several times",
                Box::new(|store| drop(store.count_groups(ENDPOINTS, &["tag".to_owned()], &Matching::default()))),
            ),
            (
                "count-groups by three fields",
                Box::new(move |store| {
                    let three = ["status", "severity", "kev"].map(String::from);
                    drop(store.count_groups(
                        FINDINGS,
                        &three,
                        &Matching { ranges: vec![sorted.clone()], ..Matching::default() },
                    ))
                }),
            ),
            (
                "count-in-ranges of more ranges than a count may name",
                Box::new(move |store| {
                    let ranges = vec![five.clone(); esr_contract::limits::MAX_RANGES + 1];
                    _ = store.count_matching(FINDINGS, &Matching { ranges, ..Matching::default() })
                }),
            ),
        ];
        for (what, call) in &calls {
            assert!(holder.read(&mut |store| call(store)).is_err(), "{what} did not fail");
        }
    });
}
