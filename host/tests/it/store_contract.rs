//! The store's contract, written once against `esr::store::Store` and run
//! against every backend: records by id and in order, index scans,
//! positions and counts, count-matching, count-in-range and count-groups
//! (against brute force), organizations, API keys, their revocation, uses
//! and expiries, secrets and
//! markers across a reopen, the write batch (all or nothing, validation
//! under the write lock, writers serialized), the probe and sizes, clearing,
//! bulk loads and the index check; the change feed (sequences in commit
//! order, one event per record, deletions, pruning), history; the audit
//! trail (paged per organization, filtered by principal, expired).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use esr::store::Collection;

use std::collections::BTreeSet;
use std::sync::Arc;

use esr::store::{
    self, AUDIT_EXAMINED, ApiKeyRecord, AuditEntry, AuditPage, AuditPrincipal, ChangeEvent, ChangeLog, ChangeOperation,
    CollectionWrite, IndexCondition, IndexPosition, IndexRange, IndexWalk, MAX_SCAN, Matching, Organization,
    RecordWalk, Store, StoreError, StoreReader,
};
use esr_contract::indexes::{self, SORTED, UNSORTED};
use esr_contract::time::Timestamp;
use serde_json::{Value, json};
use uuid::Uuid;

/// A backend under test: a store over one place (a directory, a database)
/// that can be opened again after the previous store was dropped.
trait Backend {
    fn open(&self) -> Arc<dyn Store>;
    /// Whether a key's lookup reads the record of its request too
    /// (`Store::api_key_reading_ahead`): a backend whose reads cost a
    /// round trip.
    fn reads_ahead(&self) -> bool;
}

/// sled in a fresh temporary directory.
struct Sled(tempfile::TempDir);

impl Backend for Sled {
    /// sled's background flusher lets go of the directory's lock a moment
    /// after the store that held it is dropped: a reopen waits for that.
    fn open(&self) -> Arc<dyn Store> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match store::open(None, self.0.path()) {
                Err(StoreError::Locked(_)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                opened => return opened.expect("opening sled"),
            }
        }
    }

    fn reads_ahead(&self) -> bool {
        false
    }
}

fn sled() -> Sled {
    Sled(tempfile::tempdir().expect("temporary directory"))
}

/// PostgreSQL: a database of its own on the test binary's cluster (and the
/// host's directory, which then holds no data).
struct Postgres(common::postgres::TestDatabase, tempfile::TempDir);

impl Backend for Postgres {
    fn open(&self) -> Arc<dyn Store> {
        store::open(Some(&self.0.url), self.1.path()).expect("opening PostgreSQL")
    }

    fn reads_ahead(&self) -> bool {
        true
    }
}

fn postgres() -> Postgres {
    Postgres(common::postgres::TestDatabase::new(), tempfile::tempdir().expect("temporary directory"))
}

/// One test per check for a backend (a function returning a fresh [`Backend`]).
macro_rules! contract {
    ($backend:ident) => {
        mod $backend {
            contract!(@checks $backend:
                records_by_id_and_in_order,
                a_read_by_id_leaves_later_readers_the_latest_state,
                many_records_by_id_at_once,
                scans_return_at_most_max_scan,
                index_scans_walk_positions,
                walks_of_many_limits_answer_alike,
                count_matching_agrees_with_brute_force,
                count_in_range_agrees_with_brute_force,
                count_groups_agrees_with_brute_force,
                organizations_and_api_keys,
                a_key_reads_ahead_only_its_organizations_record,
                a_key_opens_a_read_session_in_its_organization_only,
                api_key_uses_and_expiries_survive_a_reopen,
                secrets_and_markers_survive_a_reopen,
                documents_are_swapped_by_version_and_survive_a_reopen,
                a_batch_is_all_or_nothing,
                a_batch_reads_and_writes_under_one_lock,
                write_times_increase_in_commit_order,
                probe_and_size,
                clearing_keeps_secrets,
                a_bulk_load_ends_with_agreeing_indexes,
                changes_follow_writes_in_commit_order,
                deletions_remove_records_and_leave_events,
                history_is_kept_until_the_record_is_deleted,
                pruning_removes_old_deletions_only,
                a_copy_continues_the_sequence,
                sequences_follow_commit_order_across_writers,
                audit_entries_are_paged_per_organization_filtered_and_expired,
            );
        }
    };
    (@checks $backend:ident: $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                super::$check(&super::$backend());
            }
        )*
    };
}

// Each backend adds itself here with one line.
contract!(sled);
contract!(postgres);

const FINDINGS: Collection = Collection::VulnerabilityFindings;

fn timestamp(day: usize, minute: usize) -> String {
    format!("2026-01-{:02}T{:02}:{:02}:30Z", day % 28 + 1, minute / 60 % 24, minute % 60)
}

/// A finding with the fields the findings' indexes read (the store checks
/// no schema: only the id and the two timestamps are required).
pub(crate) fn finding(n: usize) -> Value {
    let statuses = ["open", "resolved", "suppressed"];
    let severities = ["critical", "high", "medium", "low"];
    let mut record = json!({
        "id": Uuid::now_v7().to_string(),
        "status": statuses[n % 3],
        "severity": severities[n % 4],
        "kev": n.is_multiple_of(5),
        "finding_type": if n.is_multiple_of(2) { "os_package" } else { "application" },
        // Created out of id order, so that index order is not id order.
        "created_at": timestamp(27 - n % 28, n * 7),
        "updated_at": timestamp(n % 28, n * 13),
    });
    if !n.is_multiple_of(6) {
        // Ties on purpose: the id breaks them.
        record["cvss"] = json!({"base_score": (n % 50) as f64 / 5.0});
    }
    if n % 4 != 1 {
        // A second range index, held by other records than the first.
        record["first_seen_at"] = json!(timestamp(n % 28, n * 3));
    }
    record
}

fn id_of(record: &Value) -> Uuid {
    record["id"].as_str().and_then(|id| Uuid::parse_str(id).ok()).expect("a record id")
}

fn reader(store: &dyn Store, organization: Uuid) -> Box<dyn StoreReader> {
    store.reader(organization).expect("a read session")
}

/// Where the index puts a record (position, id), as the SDK computes it.
fn position(collection: Collection, index: &str, record: &Value) -> IndexPosition {
    IndexPosition::new(indexes::find(collection, index).expect("a known index").position(record), id_of(record))
}

/// The middle position of the findings' first sightings (of those that
/// have one), in the `by_first_seen_at` index.
pub(crate) fn middle_first_sighting(findings: &[Value]) -> IndexPosition {
    let mut first_seen: Vec<IndexPosition> = findings
        .iter()
        .filter(|record| record.get("first_seen_at").is_some())
        .map(|record| position(FINDINGS, "by_first_seen_at", record))
        .collect();
    first_seen.sort();
    first_seen[first_seen.len() / 2]
}

fn matching(ranges: &[IndexRange], conditions: &[IndexCondition], updated_after: Option<i64>) -> Matching {
    Matching { ranges: ranges.to_vec(), conditions: conditions.to_vec(), updated_after }
}

fn range(index: &str, after: Option<IndexPosition>, before: Option<IndexPosition>) -> IndexRange {
    IndexRange { index: index.to_owned(), after, before }
}

fn conditions(list: &[(&str, &[&str])]) -> Vec<IndexCondition> {
    list.iter()
        .map(|(index, values)| IndexCondition::new(*index, values.iter().map(|v| (*v).to_owned()).collect()))
        .collect()
}

/// Whether a record meets every condition (one of its values) and was
/// updated strictly after `updated_after`.
fn matches(record: &Value, conditions: &[IndexCondition], updated_after: Option<i64>) -> bool {
    let updated = record["updated_at"].as_str().and_then(Timestamp::parse).map_or(i64::MIN, |t| t.0);
    conditions.iter().all(|IndexCondition { index, values }| {
        let held = indexes::find(FINDINGS, index).expect("a known index").values(record);
        values.iter().any(|value| held.contains(value))
    }) && updated_after.is_none_or(|after| updated > after)
}

fn records_by_id_and_in_order(backend: &dyn Backend) {
    let store = backend.open();
    let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
    let scopes: Vec<Value> = (0..5)
        .map(|n| {
            let at = timestamp(5 - n, n);
            json!({"id": Uuid::now_v7().to_string(), "name": format!("scope {n}"), "status": "active",
                   "created_at": at, "updated_at": at})
        })
        .collect();
    let ids: Vec<Uuid> = scopes.iter().map(id_of).collect();
    store.insert_records(acme, Collection::Scopes, &scopes[..3]).unwrap();
    store.insert_records(globex, Collection::Scopes, &scopes[3..]).unwrap();

    let mut acme_reader = reader(&*store, acme);
    assert_eq!(acme_reader.count(Collection::Scopes).unwrap(), 3);
    let scanned = |reader: &mut dyn StoreReader, after: Option<Uuid>, limit: usize, reverse: bool| -> Vec<Uuid> {
        reader
            .scan(Collection::Scopes, &RecordWalk::new(limit).after(after).reversed(reverse))
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    };
    assert_eq!(scanned(&mut *acme_reader, None, 100, false), ids[..3], "id order, this organization only");
    assert_eq!(scanned(&mut *acme_reader, Some(ids[0]), 100, false), ids[1..3], "strictly after");
    assert_eq!(scanned(&mut *acme_reader, None, 2, false), ids[..2], "a limit");
    assert_eq!(scanned(&mut *acme_reader, None, 100, true), [ids[2], ids[1], ids[0]], "newest first");
    assert_eq!(scanned(&mut *acme_reader, Some(ids[2]), 100, true), [ids[1], ids[0]], "strictly before");
    assert_eq!(scanned(&mut *acme_reader, Some(ids[0]), 100, true), Vec::<Uuid>::new());

    // The bytes are the record's JSON, the same through every read.
    let by_id = acme_reader.get(Collection::Scopes, ids[1]).unwrap().expect("stored");
    assert_eq!(serde_json::from_slice::<Value>(&by_id).unwrap(), scopes[1]);
    let in_scan = acme_reader.scan(Collection::Scopes, &RecordWalk::new(1).after(Some(ids[0]))).unwrap();
    assert_eq!(in_scan, [(ids[1], by_id.clone())]);
    let in_index = acme_reader.index_scan(Collection::Scopes, &IndexWalk::new("status", "active", 100)).unwrap();
    assert!(in_index.iter().any(|(at, bytes)| at.id == ids[1] && *bytes == by_id));

    // Another organization's records, and collections that do not exist, hold nothing.
    assert_eq!(acme_reader.get(Collection::Scopes, ids[4]).unwrap(), None);
    assert!(reader(&*store, globex).get(Collection::Scopes, ids[4]).unwrap().is_some());
    assert_eq!(reader(&*store, globex).count(Collection::Scopes).unwrap(), 2);
    assert_eq!(reader(&*store, Uuid::now_v7()).count(Collection::Scopes).unwrap(), 0);
}

/// A reader whose only read is by id (one statement outside a snapshot on
/// PostgreSQL) hands its connection on as it found it: every later reader
/// sees each write made before it, and reads on after a read by id work.
fn a_read_by_id_leaves_later_readers_the_latest_state(backend: &dyn Backend) {
    let store = backend.open();
    let acme = Uuid::now_v7();
    let scopes: Vec<Value> = (0..4)
        .map(|n| {
            let at = timestamp(1, n);
            json!({"id": Uuid::now_v7().to_string(), "name": format!("scope {n}"), "status": "active",
                   "created_at": at, "updated_at": at})
        })
        .collect();
    let ids: Vec<Uuid> = scopes.iter().map(id_of).collect();
    for (n, scope) in scopes.iter().enumerate() {
        store.insert_records(acme, Collection::Scopes, std::slice::from_ref(scope)).unwrap();
        // More readers than the pool holds connections, one after another.
        for _ in 0..12 {
            let mut reader = reader(&*store, acme);
            let by_id = reader.get(Collection::Scopes, ids[n]).unwrap().expect("written before this reader");
            assert_eq!(serde_json::from_slice::<Value>(&by_id).unwrap(), *scope);
        }
        let mut reader = reader(&*store, acme);
        assert!(reader.get(Collection::Scopes, ids[0]).unwrap().is_some());
        assert_eq!(reader.count(Collection::Scopes).unwrap(), n as u64 + 1, "a read on after a read by id");
        let scanned: Vec<Uuid> =
            reader.scan(Collection::Scopes, &RecordWalk::new(100)).unwrap().into_iter().map(|(id, _)| id).collect();
        assert_eq!(scanned, ids[..=n]);
        assert!(reader.get(Collection::Scopes, ids[n]).unwrap().is_some());
    }
}

fn many_records_by_id_at_once(backend: &dyn Backend) {
    let store = backend.open();
    let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
    let findings: Vec<Value> = (0..6).map(finding).collect();
    let ids: Vec<Uuid> = findings.iter().map(id_of).collect();
    store.insert_records(acme, FINDINGS, &findings[..4]).unwrap();
    store.insert_records(globex, FINDINGS, &findings[4..]).unwrap();
    let missing = Uuid::now_v7();

    // Each stored id once (whatever the order and repeats asked), with the
    // bytes `get` answers; missing ids and other organizations' left out.
    let mut acme_reader = reader(&*store, acme);
    let asked = [ids[2], missing, ids[0], ids[4], ids[2], ids[3]];
    let mut found = acme_reader.get_many(FINDINGS, &asked).unwrap();
    found.sort();
    let mut expected: Vec<(Uuid, Vec<u8>)> = [ids[0], ids[2], ids[3]]
        .into_iter()
        .map(|id| (id, acme_reader.get(FINDINGS, id).unwrap().expect("stored")))
        .collect();
    expected.sort();
    assert_eq!(found, expected);
    for (id, bytes) in &found {
        let record: Value = serde_json::from_slice(bytes).unwrap();
        assert_eq!(id_of(&record), *id);
    }
    assert_eq!(acme_reader.get_many(FINDINGS, &[]).unwrap(), Vec::new());
    assert_eq!(acme_reader.get_many(FINDINGS, &[missing]).unwrap(), Vec::new());
    assert_eq!(acme_reader.get_many(Collection::Scopes, &ids).unwrap(), Vec::new(), "another collection");

    // Inside a write batch, as the write's checks read.
    store
        .write_batch(globex, &mut |view, _| {
            let found: BTreeSet<Uuid> = view.get_many(FINDINGS, &ids)?.into_iter().map(|(id, _)| id).collect();
            assert_eq!(found, BTreeSet::from([ids[4], ids[5]]));
            Ok(Vec::new())
        })
        .unwrap();
}

fn scans_return_at_most_max_scan(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let findings: Vec<Value> = (0..store::MAX_SCAN + 5).map(|n| finding(n * 3)).collect();
    store.insert_records(organization, FINDINGS, &findings).unwrap();
    let mut reader = reader(&*store, organization);
    assert_eq!(reader.count(FINDINGS).unwrap(), findings.len() as u64);
    assert_eq!(reader.scan(FINDINGS, &RecordWalk::new(usize::MAX)).unwrap().len(), store::MAX_SCAN);
    let open = reader.index_count(FINDINGS, "status", "open").unwrap() as usize;
    assert_eq!(open, findings.len(), "every third finding is open");
    assert_eq!(
        reader.index_scan(FINDINGS, &IndexWalk::new("status", "open", usize::MAX).reversed(true)).unwrap().len(),
        store::MAX_SCAN
    );
    assert_eq!(
        reader.index_positions(FINDINGS, &IndexWalk::new("status", "open", usize::MAX)).unwrap().len(),
        store::MAX_SCAN
    );
}

fn index_scans_walk_positions(backend: &dyn Backend) {
    let store = backend.open();
    let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
    let mut findings: Vec<Value> = (0..60).map(finding).collect();
    store.insert_records(acme, FINDINGS, &findings).unwrap();
    store.insert_records(globex, FINDINGS, &findings[..7]).unwrap();
    // Replacing records moves their index entries and counts.
    for n in (0..60).step_by(4) {
        findings[n]["status"] = json!("resolved");
        findings[n]["updated_at"] = json!(timestamp(20, n));
    }
    store.insert_records(acme, FINDINGS, &findings).unwrap();

    let mut reader = reader(&*store, acme);
    for (index, value) in [
        ("status", "open"),
        ("status", "resolved"),
        ("severity", "low"),
        ("created_at", ""),
        ("updated_at", ""),
        ("by_cvss", SORTED),
        ("by_cvss", UNSORTED),
    ] {
        let mut expected: Vec<IndexPosition> = findings
            .iter()
            .filter(|record| indexes::find(FINDINGS, index).unwrap().values(record).iter().any(|v| v == value))
            .map(|record| position(FINDINGS, index, record))
            .collect();
        expected.sort();
        assert_eq!(reader.index_count(FINDINGS, index, value).unwrap(), expected.len() as u64, "{index}={value}");
        let positions = reader.index_positions(FINDINGS, &IndexWalk::new(index, value, 1000)).unwrap();
        assert_eq!(positions, expected, "{index}={value}: (position, id) order");
        let records = reader.index_scan(FINDINGS, &IndexWalk::new(index, value, 1000)).unwrap();
        // Each record comes with its place in the index, as the positions give it.
        let walked: Vec<IndexPosition> = records.iter().map(|(at, _)| *at).collect();
        assert_eq!(walked, expected, "{index}={value}: records");
        for (at, bytes) in &records {
            let stored = findings.iter().find(|record| id_of(record) == at.id).unwrap();
            assert_eq!(&serde_json::from_slice::<Value>(bytes).unwrap(), stored);
        }
        // From a position on, both ways; positions and records agree.
        if let Some(middle) = expected.get(expected.len() / 2).copied() {
            let later: Vec<IndexPosition> = expected.iter().copied().filter(|p| *p > middle).collect();
            let earlier: Vec<IndexPosition> = expected.iter().rev().copied().filter(|p| *p < middle).collect();
            assert_eq!(
                reader.index_positions(FINDINGS, &IndexWalk::new(index, value, 1000).after(Some(middle))).unwrap(),
                later
            );
            assert_eq!(
                reader
                    .index_positions(FINDINGS, &IndexWalk::new(index, value, 1000).after(Some(middle)).reversed(true))
                    .unwrap(),
                earlier
            );
            let walked: Vec<IndexPosition> = reader
                .index_scan(FINDINGS, &IndexWalk::new(index, value, 3).after(Some(middle)).reversed(true))
                .unwrap()
                .into_iter()
                .map(|(at, _)| at)
                .collect();
            assert_eq!(walked, earlier.iter().take(3).copied().collect::<Vec<_>>());
        }
    }
    assert_eq!(reader.index_count(FINDINGS, "status", "no-such-status").unwrap(), 0);
    assert!(matches!(reader.index_count(FINDINGS, "colour", "red"), Err(StoreError::UnknownIndex(_))));
    assert!(matches!(
        reader.index_scan(FINDINGS, &IndexWalk::new("colour", "red", 10)),
        Err(StoreError::UnknownIndex(_))
    ));
    let globex_entries = self::reader(&*store, globex).index_count(FINDINGS, "created_at", "").unwrap();
    assert_eq!(globex_entries, 7, "the other organization's entries are its own");
    assert_eq!(store.verify_indexes().unwrap(), Vec::<String>::new());
}

/// A walk's statement holds its limit (PostgreSQL): walks of more limits
/// than a connection keeps statements for still answer each one alike.
fn walks_of_many_limits_answer_alike(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let findings: Vec<Value> = (0..40).map(finding).collect();
    store.insert_records(organization, FINDINGS, &findings).unwrap();
    let mut reader = reader(&*store, organization);
    let everything = reader.index_scan(FINDINGS, &IndexWalk::new("created_at", "", MAX_SCAN)).unwrap();
    assert_eq!(everything.len(), findings.len());
    for round in 0..3 {
        for limit in 1..=MAX_SCAN {
            let walk = IndexWalk::new("created_at", "", limit).reversed(round % 2 == 1);
            let page = reader.index_scan(FINDINGS, &walk).unwrap();
            let mut expected: Vec<_> = everything.clone();
            if round % 2 == 1 {
                expected.reverse();
            }
            expected.truncate(limit);
            assert_eq!(page, expected, "limit {limit}, round {round}");
        }
    }
}

fn count_matching_agrees_with_brute_force(backend: &dyn Backend) {
    let store = backend.open();
    let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
    let mut findings: Vec<Value> = (0..90).map(finding).collect();
    store.insert_records(acme, FINDINGS, &findings).unwrap();
    store.insert_records(globex, FINDINGS, &findings[..10]).unwrap();
    // Re-imports move records between pairs and update hours.
    for n in (0..90).step_by(5) {
        findings[n]["status"] = json!("resolved");
        findings[n]["updated_at"] = json!(timestamp(27, 400 + n));
    }
    store.insert_records(acme, FINDINGS, &findings).unwrap();

    let mut reader = reader(&*store, acme);
    let cases: Vec<Vec<IndexCondition>> = vec![
        conditions(&[]),
        conditions(&[("status", &["open"])]),
        conditions(&[("status", &["open", "suppressed", "open"])]),
        conditions(&[("severity", &["critical"]), ("status", &["open"])]),
        conditions(&[("status", &["open", "suppressed"]), ("severity", &["critical", "low"])]),
        conditions(&[("status", &["resolved"]), ("kev", &["true"])]),
        conditions(&[("status", &["open"]), ("severity", &["high", "low"]), ("finding_type", &["application"])]),
        conditions(&[("created_at", &[""])]),
        conditions(&[("status", &["none-such"])]),
    ];
    let afters = [
        None,
        Some("2026-01-01T00:00:00Z"),
        Some("2026-01-11T02:10:30Z"),
        Some("2026-01-11T02:10:31Z"),
        Some("2026-01-28T06:59:59Z"),
    ];
    for case in &cases {
        for after in afters {
            let updated_after = after.map(|after| Timestamp::parse(after).unwrap().0);
            let expected = findings.iter().filter(|record| matches(record, case, updated_after)).count() as u64;
            assert_eq!(
                reader.count_matching(FINDINGS, &matching(&[], case, updated_after)).unwrap(),
                expected,
                "{case:?} after {after:?}"
            );
        }
    }
    let globex_updated =
        self::reader(&*store, globex).count_matching(FINDINGS, &matching(&[], &[], Some(i64::MIN))).unwrap();
    assert_eq!(globex_updated, 10, "the other organization's counts are its own");
    assert!(matches!(
        reader.count_matching(FINDINGS, &Matching::conditions(conditions(&[("colour", &["red"])]))),
        Err(StoreError::UnknownIndex(_))
    ));
}

fn count_in_range_agrees_with_brute_force(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let findings: Vec<Value> = (0..80).map(finding).collect();
    store.insert_records(organization, FINDINGS, &findings).unwrap();
    store.insert_records(Uuid::now_v7(), FINDINGS, &findings[..20]).unwrap();
    let mut reader = reader(&*store, organization);
    let mut sorted: Vec<(IndexPosition, &Value)> = findings
        .iter()
        .filter(|record| record.pointer("/cvss/base_score").is_some())
        .map(|record| (position(FINDINGS, "by_cvss", record), record))
        .collect();
    sorted.sort_by_key(|(position, _)| *position);
    let at = |n: usize| Some(sorted[n].0);
    let bounds = [(None, None), (at(3), None), (None, at(40)), (at(3), at(40)), (at(40), at(3)), (at(10), at(11))];
    let cases = [
        conditions(&[]),
        conditions(&[("status", &["open"])]),
        conditions(&[("status", &["open", "resolved"]), ("severity", &["low", "critical"])]),
    ];
    // A second range, on when each was first seen: none, or after the
    // first seen in the middle of the data (records without a score are
    // outside the first range whatever the second says).
    let seen_after = middle_first_sighting(&findings);
    for (after, before) in bounds {
        for case in &cases {
            for updated_after in [None, Some(Timestamp::parse("2026-01-14T00:00:00Z").unwrap().0)] {
                for second in [None, Some(seen_after)] {
                    let expected = sorted
                        .iter()
                        .filter(|(position, _)| after.is_none_or(|after| *position > after))
                        .filter(|(position, _)| before.is_none_or(|before| *position < before))
                        .filter(|(_, record)| {
                            second.is_none_or(|second| {
                                record.get("first_seen_at").is_some()
                                    && position(FINDINGS, "by_first_seen_at", record) > second
                            })
                        })
                        .filter(|(_, record)| matches(record, case, updated_after))
                        .count() as u64;
                    let mut ranges = vec![range("by_cvss", after, before)];
                    ranges.extend(second.map(|second| range("by_first_seen_at", Some(second), None)));
                    assert_eq!(
                        reader.count_matching(FINDINGS, &matching(&ranges, case, updated_after)).unwrap(),
                        expected,
                        "({after:?}, {before:?}) and first seen after {second:?} {case:?} after {updated_after:?}"
                    );
                }
            }
        }
    }
    assert!(matches!(
        reader.count_matching(FINDINGS, &matching(&[range("status", None, None)], &[], None)),
        Err(StoreError::MalformedCall(_))
    ));
    assert!(matches!(
        reader.count_matching(FINDINGS, &matching(&[range("by_colour", None, None)], &[], None)),
        Err(StoreError::UnknownIndex(_))
    ));
}

/// An endpoint with the fields the endpoints' indexes read.
pub(crate) fn endpoint(n: usize) -> Value {
    let families = ["linux", "windows", "macos"];
    let tags = ["prod", "dev", "pci", "eu"];
    let mut record = json!({
        "id": Uuid::now_v7().to_string(),
        "operating_system": {"family": families[n % 3]},
        "tags": [tags[n % 4], tags[n / 3 % 4]],
        "created_at": timestamp(27 - n % 28, n * 11),
        "updated_at": timestamp(n % 28, n * 17),
    });
    if n.is_multiple_of(3) {
        record["agent_id"] = json!(Uuid::now_v7().to_string());
    }
    record
}

/// A collection to count groups of: its records, the conditions a filter
/// picks from (index, values), the indexes a summary may group by.
type GroupedCollection<'a> = (Collection, &'a [Value], Vec<(&'a str, Vec<String>)>, &'a [&'a str]);

/// Random filters on findings and endpoints (several runs of blocks per
/// index value, values some records lack, multi-valued conditions, ranges
/// and `updated_after`), grouped by one or two indexes: the groups are
/// what brute force counts, in the order of the group indexes' values, and
/// the same whether counted from the candidates or by combination.
fn count_groups_agrees_with_brute_force(backend: &dyn Backend) {
    use rand::{Rng, SeedableRng, seq::SliceRandom};

    let store = backend.open();
    let organization = Uuid::now_v7();
    let endpoint_ids: Vec<String> = (0..7).map(|_| Uuid::now_v7().to_string()).collect();
    let mut findings: Vec<Value> = (0..700)
        .map(|n| {
            let mut record = finding(n);
            record["endpoint_id"] = json!(endpoint_ids[n * 7 / 700]);
            if n % 7 == 3 {
                record.as_object_mut().unwrap().remove("finding_type");
            }
            record
        })
        .collect();
    // In batches, then moved between values: several runs per value.
    for batch in findings.chunks(150) {
        store.insert_records(organization, FINDINGS, batch).unwrap();
    }
    for n in (0..700).step_by(3) {
        findings[n]["status"] = json!("suppressed");
        findings[n]["updated_at"] = json!(timestamp(27, 300 + n));
    }
    store.insert_records(organization, FINDINGS, &findings[..350]).unwrap();
    store.insert_records(organization, FINDINGS, &findings[350..]).unwrap();
    let endpoints: Vec<Value> = (0..200).map(endpoint).collect();
    store.insert_records(organization, Collection::Endpoints, &endpoints).unwrap();
    store.insert_records(Uuid::now_v7(), FINDINGS, &findings[..50]).unwrap();

    // Each range filter's sort index, with the positions of its records.
    let sorted = |index: &str, has: &str| -> (String, Vec<IndexPosition>) {
        let mut positions: Vec<IndexPosition> = findings
            .iter()
            .filter(|record| record.pointer(has).is_some())
            .map(|record| position(FINDINGS, index, record))
            .collect();
        positions.sort();
        (index.to_owned(), positions)
    };
    let range_indexes = [sorted("by_cvss", "/cvss/base_score"), sorted("by_first_seen_at", "/first_seen_at")];
    let pools: [GroupedCollection; 2] = [
        (
            FINDINGS,
            &findings,
            vec![
                ("endpoint_id", endpoint_ids.clone()),
                ("status", ["open", "resolved", "suppressed"].map(String::from).to_vec()),
                ("severity", ["critical", "high", "medium", "low"].map(String::from).to_vec()),
                ("kev", ["true", "false"].map(String::from).to_vec()),
                ("finding_type", ["os_package", "application", "none-such"].map(String::from).to_vec()),
                ("by_cvss", [SORTED, UNSORTED].map(String::from).to_vec()),
                ("created_at", vec![String::new()]),
            ],
            &["severity", "status", "kev", "finding_type", "endpoint_id"],
        ),
        (
            Collection::Endpoints,
            &endpoints,
            vec![
                ("tag", ["prod", "dev", "pci", "eu"].map(String::from).to_vec()),
                ("os_family", ["linux", "windows", "macos"].map(String::from).to_vec()),
                ("has_agent", ["true", "false"].map(String::from).to_vec()),
            ],
            &["os_family", "has_agent"],
        ),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(26);
    let mut reader = reader(&*store, organization);
    let mut from_candidates = 0;
    for case in 0..400 {
        let (collection, records, pool, groupable) = &pools[case % 2];
        let collection = *collection;
        let group_count = rng.gen_range(1..=2);
        let group_by: Vec<String> =
            groupable.choose_multiple(&mut rng, group_count).map(|index| (*index).to_owned()).collect();
        let mut case_conditions = Vec::new();
        let condition_count = rng.gen_range(0..=3);
        for (index, values) in pool.choose_multiple(&mut rng, condition_count) {
            let value_count = rng.gen_range(1..=values.len().min(3));
            let chosen = values.choose_multiple(&mut rng, value_count);
            case_conditions.push(IndexCondition::new(*index, chosen.cloned().collect::<Vec<String>>()));
        }
        // None, one or both range indexes (a third of the cases each).
        let range_count = if collection == FINDINGS { rng.gen_range(0..=2) } else { 0 };
        let ranges: Vec<store::IndexRange> = range_indexes
            .choose_multiple(&mut rng, range_count)
            .map(|(index, positions)| {
                let mut bound = || rng.gen_bool(0.7).then(|| positions[rng.gen_range(0..positions.len())]);
                let (after, before) = (bound(), bound());
                store::IndexRange { index: index.clone(), after, before }
            })
            .collect();
        let updated_after = rng
            .gen_bool(0.3)
            .then(|| Timestamp::parse(&timestamp(rng.gen_range(0..28), rng.gen_range(0..1440))).unwrap().0);

        // The groups by `group_by` and the total, record by record.
        let brute_force = |group_by: &[String]| {
            let mut expected: std::collections::BTreeMap<Vec<String>, u64> = Default::default();
            let mut expected_total = 0;
            for record in records.iter() {
                let updated = record["updated_at"].as_str().and_then(Timestamp::parse).unwrap().0;
                let meets = case_conditions.iter().all(|IndexCondition { index, values }| {
                    let held = indexes::find(collection, index).unwrap().values(record);
                    values.iter().any(|value| held.contains(value))
                }) && updated_after.is_none_or(|after| updated > after)
                    && ranges.iter().all(|range| {
                        let index = indexes::find(FINDINGS, &range.index).unwrap();
                        index.values(record).iter().any(|value| value == SORTED) && {
                            let at = position(FINDINGS, &range.index, record);
                            range.after.is_none_or(|after| at > after) && range.before.is_none_or(|before| at < before)
                        }
                    });
                let held: Vec<Vec<String>> =
                    group_by.iter().map(|index| indexes::find(collection, index).unwrap().values(record)).collect();
                expected_total += u64::from(meets);
                if meets && held.iter().all(|values| values.len() == 1) {
                    *expected.entry(held.into_iter().flatten().collect()).or_default() += 1;
                }
            }
            (expected, expected_total)
        };
        let (expected, expected_total) = brute_force(&group_by);
        let what =
            format!("{collection} by {group_by:?} where {case_conditions:?} in {ranges:?} after {updated_after:?}");
        let groups =
            reader.count_groups(collection, &group_by, &matching(&ranges, &case_conditions, updated_after)).unwrap();
        let answered: std::collections::BTreeMap<Vec<String>, u64> =
            groups.iter().map(|group| (group.values.clone(), group.count)).collect();
        assert_eq!(answered, expected, "{what}");
        assert_eq!(answered.len(), groups.len(), "each group once: {what}");
        // Groups come in the order of the group indexes' values.
        let mut orders = Vec::new();
        for index in &group_by {
            let values: Vec<String> =
                reader.index_values(collection, index).unwrap().into_iter().map(|(value, _)| value).collect();
            orders.push(values);
        }
        let places: Vec<Vec<usize>> = groups
            .iter()
            .map(|group| {
                group
                    .values
                    .iter()
                    .zip(&orders)
                    .map(|(value, order)| order.iter().position(|v| v == value).unwrap())
                    .collect()
            })
            .collect();
        assert!(places.is_sorted(), "groups out of value order: {what}: {groups:?}");
        // Counted from the candidates whenever a condition gives their
        // places, or a range gives them.
        let placed = store::restricting_conditions(collection, &case_conditions)
            .iter()
            .any(|condition| store::ordered_by_creation(collection, &condition.index))
            || !ranges.is_empty();
        let candidates = reader
            .count_groups_of_candidates(
                collection,
                &group_by,
                &matching(&ranges, &case_conditions, updated_after),
                u64::MAX,
            )
            .unwrap();
        assert_eq!(candidates.is_some(), placed, "{what}");
        if let Some(candidates) = candidates {
            from_candidates += 1;
            assert_eq!(candidates, groups, "{what}");
        }
        // As a summary asks: the total, then the groups of the same filters
        // (which a backend may count together with the total).
        let case_matching = matching(&ranges, &case_conditions, updated_after);
        assert_eq!(reader.count_matching(collection, &case_matching).unwrap(), expected_total, "total: {what}");
        let after_total = reader.count_groups(collection, &group_by, &case_matching).unwrap();
        assert_eq!(after_total, groups, "after the total: {what}");
        // Other groups of the same filters, after a backend kept only the
        // first ones with the total.
        let other: Vec<String> = groupable.choose_multiple(&mut rng, 1).map(|index| (*index).to_owned()).collect();
        let other_groups = reader.count_groups(collection, &other, &case_matching).unwrap();
        let answered: std::collections::BTreeMap<Vec<String>, u64> =
            other_groups.iter().map(|group| (group.values.clone(), group.count)).collect();
        assert_eq!(answered, brute_force(&other).0, "then by {other:?}: {what}");
        // As a summary asks: the groups first, then the total, on a reader
        // that counted nothing before.
        let mut fresh = store.reader(organization).expect("a read session");
        assert_eq!(fresh.count_groups(collection, &group_by, &case_matching).unwrap(), groups, "first: {what}");
        assert_eq!(fresh.count_matching(collection, &case_matching).unwrap(), expected_total, "then the total: {what}");
    }
    assert!(from_candidates > 100, "only {from_candidates} cases counted from candidates");
    assert!(matches!(
        reader.count_groups(
            FINDINGS,
            &["severity".to_owned()],
            &Matching::conditions(conditions(&[("colour", &["red"])]))
        ),
        Err(StoreError::UnknownIndex(_))
    ));
    let by_status = store::IndexRange { index: "status".to_owned(), after: None, before: None };
    assert!(matches!(
        reader.count_groups(
            FINDINGS,
            &["severity".to_owned()],
            &matching(&[by_status], &conditions(&[("endpoint_id", &[endpoint_ids[0].as_str()])]), None),
        ),
        Err(StoreError::MalformedCall(_))
    ));
    // Counted by combination (`updated_after` alone: no condition or range
    // to collect candidates from): the same answer within a budget that
    // covers the walks, and a clear refusal, before any walk, past one that
    // does not.
    let group_by = ["severity".to_owned(), "status".to_owned()];
    let updated = matching(&[], &[], Some(Timestamp::parse(&timestamp(1, 0)).unwrap().0));
    let within = reader.count_groups_within(FINDINGS, &group_by, &updated, u64::MAX).unwrap();
    assert_eq!(within, reader.count_groups(FINDINGS, &group_by, &updated).unwrap());
    match reader.count_groups_within(FINDINGS, &group_by, &updated, 1_000) {
        Err(StoreError::TooBroad(reason)) => {
            assert!(reason.contains("more than 1000") && reason.contains("add a filter"), "{reason}")
        }
        other => panic!("past the budget: {other:?}"),
    }
    // Where count rows answer every combination (a counted pair, with no
    // filter or with one of its own), each is one lookup: answered within
    // any budget, as the list's total of the same filters is.
    let pair = ["severity".to_owned(), "status".to_owned()];
    let everything = reader.count_groups_within(FINDINGS, &pair, &Matching::default(), u64::MAX).unwrap();
    assert_eq!(everything.iter().map(|group| group.count).sum::<u64>(), findings.len() as u64);
    assert_eq!(reader.count_groups_within(FINDINGS, &pair, &Matching::default(), 0).unwrap(), everything);
    let resolved = Matching::conditions(conditions(&[("status", &["resolved"])]));
    let by_severity = ["severity".to_owned()];
    let resolved_by_severity = reader.count_groups_within(FINDINGS, &by_severity, &resolved, u64::MAX).unwrap();
    assert!(!resolved_by_severity.is_empty());
    assert_eq!(reader.count_groups_within(FINDINGS, &by_severity, &resolved, 0).unwrap(), resolved_by_severity);
}

fn organization(name: &str) -> Organization {
    Organization {
        organization_id: Uuid::now_v7(),
        name: name.to_owned(),
        enrollment_token: format!("enroll_{name}"),
        created_at: "2026-01-01T00:00:00Z".to_owned(),
    }
}

fn key_record(organization: Uuid, name: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        id: Uuid::now_v7(),
        organization_id: organization,
        name: name.to_owned(),
        scopes: vec!["scopes:read".to_owned()],
        prefix: "esr_abcdef".to_owned(),
        created_at: "2026-01-01T00:00:00Z".to_owned(),
        expires_at: None,
        revoked_at: None,
        last_used_at: None,
    }
}

fn organizations_and_api_keys(backend: &dyn Backend) {
    let store = backend.open();
    assert!(store.is_empty().unwrap());
    assert_eq!(store.organizations().unwrap(), Vec::new());
    let (acme, globex) = (organization("acme"), organization("globex"));
    store.insert_organization(&globex).unwrap();
    store.insert_organization(&acme).unwrap();
    assert!(!store.is_empty().unwrap());
    assert_eq!(store.organization(acme.organization_id).unwrap(), Some(acme.clone()));
    assert_eq!(store.organization(Uuid::now_v7()).unwrap(), None);
    assert_eq!(store.organizations().unwrap(), [acme.clone(), globex.clone()], "in id order");

    let hashes: Vec<[u8; 32]> = (0..3u8).map(|n| [n + 1; 32]).collect();
    let keys = [
        key_record(acme.organization_id, "first"),
        key_record(globex.organization_id, "second"),
        key_record(acme.organization_id, "third"),
    ];
    for (hash, key) in hashes.iter().zip(&keys) {
        store.insert_api_key(hash, key).unwrap();
    }
    assert_eq!(store.api_key(&hashes[1]).unwrap(), Some(keys[1].clone()));
    assert_eq!(store.api_key(&[9; 32]).unwrap(), None);
    assert_eq!(store.api_keys(None).unwrap(), keys, "oldest first");
    assert_eq!(store.api_keys(Some(acme.organization_id)).unwrap(), [keys[0].clone(), keys[2].clone()]);
    assert_eq!(store.api_keys(Some(Uuid::now_v7())).unwrap(), Vec::new());

    // A revocation is seen by the next lookup, and keeps its first time.
    let revoked = store.revoke_api_key(keys[2].id, "2026-02-01T00:00:00Z").unwrap().expect("a key");
    assert_eq!(revoked.revoked_at.as_deref(), Some("2026-02-01T00:00:00Z"));
    assert_eq!(store.api_key(&hashes[2]).unwrap(), Some(revoked.clone()));
    let again = store.revoke_api_key(keys[2].id, "2026-03-01T00:00:00Z").unwrap().expect("a key");
    assert_eq!(again.revoked_at.as_deref(), Some("2026-02-01T00:00:00Z"));
    assert_eq!(store.revoke_api_key(Uuid::now_v7(), "2026-03-01T00:00:00Z").unwrap(), None);
    assert_eq!(store.api_key(&hashes[0]).unwrap(), Some(keys[0].clone()), "others unaffected");
    // Every key with its hash, oldest first (what a copy of the store needs).
    let with_hashes = vec![(hashes[0], keys[0].clone()), (hashes[1], keys[1].clone()), (hashes[2], revoked)];
    assert_eq!(store.api_keys_with_hashes().unwrap(), with_hashes);
}

/// The organizations `acme` and `globex`, each with a key stored under a
/// hash of `bytes`' byte.
fn two_organizations_with_keys(store: &dyn Store, bytes: [u8; 2]) -> [(Organization, [u8; 32]); 2] {
    ["acme", "globex"]
        .into_iter()
        .zip(bytes)
        .map(|(name, byte)| {
            let organization = organization(name);
            store.insert_organization(&organization).unwrap();
            store.insert_api_key(&[byte; 32], &key_record(organization.organization_id, name)).unwrap();
            (organization, [byte; 32])
        })
        .collect::<Vec<_>>()
        .try_into()
        .unwrap()
}

fn a_key_reads_ahead_only_its_organizations_record(backend: &dyn Backend) {
    let store = backend.open();
    let [(acme, acme_hash), (globex, globex_hash)] = two_organizations_with_keys(&*store, [21, 22]);
    // The same id in both organizations, with different bodies.
    let ours = finding(0);
    let mut theirs = ours.clone();
    theirs["status"] = json!("resolved");
    store.insert_records(acme.organization_id, FINDINGS, std::slice::from_ref(&ours)).unwrap();
    store.insert_records(globex.organization_id, FINDINGS, std::slice::from_ref(&theirs)).unwrap();
    let id = id_of(&ours);
    for (hash, organization) in [(acme_hash, acme.organization_id), (globex_hash, globex.organization_id)] {
        let (key, ahead) = store.api_key_reading_ahead(&hash, organization, FINDINGS, id).unwrap();
        assert_eq!(key, store.api_key(&hash).unwrap());
        assert_eq!(ahead.is_some(), backend.reads_ahead());
        if let Some(ahead) = ahead {
            let stored = reader(&*store, organization).get(FINDINGS, id).unwrap();
            assert!(stored.is_some());
            assert_eq!((ahead.organization, ahead.collection, ahead.id), (organization, FINDINGS, id));
            assert_eq!(ahead.body, stored, "the key's organization's record, as a reader reads it");
            assert!(ahead.position.is_some(), "the write position the read saw");
        }
    }
    // Another collection's, or an id not stored: no record.
    for (collection, id) in [(Collection::Endpoints, id), (FINDINGS, Uuid::now_v7())] {
        let (key, ahead) = store.api_key_reading_ahead(&acme_hash, acme.organization_id, collection, id).unwrap();
        assert!(key.is_some());
        assert!(ahead.is_none_or(|ahead| ahead.body.is_none()), "{collection}/{id}");
    }
    // Another organization than the key's reads nothing; nor does an
    // unknown key.
    let (key, ahead) = store.api_key_reading_ahead(&acme_hash, globex.organization_id, FINDINGS, id).unwrap();
    assert_eq!(key, store.api_key(&acme_hash).unwrap());
    assert_eq!(ahead, None);
    assert_eq!(store.api_key_reading_ahead(&[99; 32], acme.organization_id, FINDINGS, id).unwrap(), (None, None));
}

/// `Store::api_key_opening_reader`: the key as `api_key` finds it, and on
/// a backend that reads both at once a session on the key's organization
/// that reads what a reader of its own reads (its change log included).
fn a_key_opens_a_read_session_in_its_organization_only(backend: &dyn Backend) {
    let store = backend.open();
    let [(acme, acme_hash), (globex, globex_hash)] = two_organizations_with_keys(&*store, [31, 32]);
    let ours = finding(0);
    store.insert_records(acme.organization_id, FINDINGS, std::slice::from_ref(&ours)).unwrap();
    store.insert_records(globex.organization_id, FINDINGS, &[finding(1), finding(2)]).unwrap();
    let from = esr_store::ReadFrom {
        deadline: Some(std::time::Instant::now() + std::time::Duration::from_secs(30)),
        ..Default::default()
    };
    for (hash, organization, records) in
        [(acme_hash, acme.organization_id, 1), (globex_hash, globex.organization_id, 2)]
    {
        let (key, opened) = store.api_key_opening_reader(&hash, organization, from).unwrap();
        assert_eq!(key, store.api_key(&hash).unwrap());
        assert!(key.is_some());
        assert_eq!(opened.is_some(), backend.reads_ahead());
        if let Some(mut opened) = opened {
            let mut own = reader(&*store, organization);
            assert_eq!(opened.change_log().unwrap(), own.change_log().unwrap());
            assert_eq!(opened.count(FINDINGS).unwrap(), records);
            assert!(opened.position().is_some(), "the write position the snapshot began at");
            let walk = RecordWalk::new(10);
            assert_eq!(opened.scan(FINDINGS, &walk).unwrap(), own.scan(FINDINGS, &walk).unwrap());
            // The counts a list reads first (a backend may read them with
            // the key): each value's, and a value no record holds.
            for index in ["severity", "status", "kev", "finding_type", "created_at"] {
                let values = own.index_values(FINDINGS, index).unwrap();
                assert!(!values.is_empty(), "{index}");
                assert_eq!(opened.index_values(FINDINGS, index).unwrap(), values, "{index}");
                for (value, held) in values {
                    assert_eq!(opened.index_count(FINDINGS, index, &value).unwrap(), held, "{index}={value}");
                    assert_eq!(opened.index_count(FINDINGS, index, &value).unwrap(), held, "{index}={value} again");
                }
                assert_eq!(opened.index_count(FINDINGS, index, "no-such-value").unwrap(), 0, "{index}");
            }
            // A name of many values, read value by value, twice.
            for _ in 0..2 {
                assert_eq!(opened.index_count(FINDINGS, "endpoint_id", "no-such-endpoint").unwrap(), 0);
            }
        }
    }
    // Another organization than the key's opens nothing; nor does an
    // unknown key.
    let (key, opened) = store.api_key_opening_reader(&acme_hash, globex.organization_id, from).unwrap();
    assert_eq!(key, store.api_key(&acme_hash).unwrap());
    assert!(opened.is_none());
    let (key, opened) = store.api_key_opening_reader(&[99; 32], acme.organization_id, from).unwrap();
    assert!(key.is_none() && opened.is_none());
    // A revocation is seen by the next lookup.
    let acme_key = store.api_key(&acme_hash).unwrap().unwrap();
    store.revoke_api_key(acme_key.id, "2026-12-05T00:00:00Z").unwrap();
    let (key, _) = store.api_key_opening_reader(&acme_hash, acme.organization_id, from).unwrap();
    assert_eq!(key.and_then(|key| key.revoked_at).as_deref(), Some("2026-12-05T00:00:00Z"));
}

fn api_key_uses_and_expiries_survive_a_reopen(backend: &dyn Backend) {
    let organization = Uuid::now_v7();
    let hashes: Vec<[u8; 32]> = (0..3u8).map(|n| [n + 11; 32]).collect();
    let keys =
        [key_record(organization, "used"), key_record(organization, "revoked"), key_record(organization, "busy")];
    let expected = {
        let store = backend.open();
        for (hash, key) in hashes.iter().zip(&keys) {
            store.insert_api_key(hash, key).unwrap();
        }
        // A use is noted; an earlier one noted later (another host's, late)
        // does not move it back.
        store.touch_api_key(keys[0].id, "2026-02-01T10:00:00Z").unwrap();
        assert_eq!(store.api_key(&hashes[0]).unwrap().unwrap().last_used_at.as_deref(), Some("2026-02-01T10:00:00Z"));
        store.touch_api_key(keys[0].id, "2026-02-01T09:59:00Z").unwrap();
        assert_eq!(store.api_key(&hashes[0]).unwrap().unwrap().last_used_at.as_deref(), Some("2026-02-01T10:00:00Z"));
        store.touch_api_key(keys[0].id, "2026-02-01T10:01:00Z").unwrap();
        store.touch_api_key(Uuid::now_v7(), "2026-02-01T10:01:00Z").unwrap();

        // A new expiry changes nothing else.
        let changed = store.set_api_key_expiry(keys[0].id, "2026-03-01T00:00:00Z").unwrap().expect("a key");
        let used = ApiKeyRecord {
            expires_at: Some("2026-03-01T00:00:00Z".into()),
            last_used_at: Some("2026-02-01T10:01:00Z".into()),
            ..keys[0].clone()
        };
        assert_eq!(changed, used);
        assert_eq!(store.api_key(&hashes[0]).unwrap(), Some(used.clone()));
        assert_eq!(store.set_api_key_expiry(Uuid::now_v7(), "2026-03-01T00:00:00Z").unwrap(), None);

        // A use noted after a revocation keeps it, and so does a new expiry.
        store.revoke_api_key(keys[1].id, "2026-02-02T00:00:00Z").unwrap();
        store.touch_api_key(keys[1].id, "2026-02-02T00:00:01Z").unwrap();
        let revoked = store.set_api_key_expiry(keys[1].id, "2026-04-01T00:00:00Z").unwrap().expect("a key");
        assert_eq!(revoked.revoked_at.as_deref(), Some("2026-02-02T00:00:00Z"));
        assert_eq!(revoked.last_used_at.as_deref(), Some("2026-02-02T00:00:01Z"));

        // Uses noted while the key is revoked and its expiry set: none lost.
        std::thread::scope(|scope| {
            let store = &store;
            let id = keys[2].id;
            scope.spawn(move || {
                for second in 0..40 {
                    store.touch_api_key(id, &format!("2026-02-03T00:00:{second:02}Z")).unwrap();
                }
            });
            scope.spawn(move || {
                store.revoke_api_key(id, "2026-02-03T12:00:00Z").unwrap();
            });
            scope.spawn(move || {
                store.set_api_key_expiry(id, "2026-05-01T00:00:00Z").unwrap();
            });
        });
        let busy = store.api_key(&hashes[2]).unwrap().expect("a key");
        assert_eq!(
            (busy.revoked_at.as_deref(), busy.expires_at.as_deref(), busy.last_used_at.as_deref()),
            (Some("2026-02-03T12:00:00Z"), Some("2026-05-01T00:00:00Z"), Some("2026-02-03T00:00:39Z"))
        );
        store.flush().unwrap();
        vec![(hashes[0], used), (hashes[1], revoked), (hashes[2], busy)]
    };
    let store = backend.open();
    assert_eq!(store.api_keys_with_hashes().unwrap(), expected, "as they were, after a reopen");
    assert_eq!(store.api_key(&hashes[0]).unwrap(), Some(expected[0].1.clone()));
}

fn secrets_and_markers_survive_a_reopen(backend: &dyn Backend) {
    let organization = Uuid::now_v7();
    let record = finding(1);
    let (cursor, other) = {
        let store = backend.open();
        let cursor = store.secret("cursor").unwrap();
        assert_eq!(store.secret("cursor").unwrap(), cursor, "the same on every use");
        let other = store.secret("other").unwrap();
        assert_ne!(cursor, other);
        assert_ne!(cursor, [0; 32]);
        assert_eq!(store.marker("demo").unwrap(), None);
        store.set_marker("demo", "in-progress").unwrap();
        store.set_marker("demo", "complete").unwrap();
        // Secrets set as given (a copied deployment's), of any length.
        store.set_secret("copied", &[7; 32]).unwrap();
        store.set_secret("text", b"esradm_copied").unwrap();
        // The first value stored under a name stays (the admin token's digest).
        assert_eq!(store.secret_if_absent("digest", [1; 32]).unwrap(), [1; 32]);
        assert_eq!(store.secret_if_absent("digest", [2; 32]).unwrap(), [1; 32], "the first writer wins");
        store.insert_records(organization, FINDINGS, std::slice::from_ref(&record)).unwrap();
        store.insert_organization(&self::organization("acme")).unwrap();
        store.flush().unwrap();
        (cursor, other)
    };
    let store = backend.open();
    assert_eq!(store.secret("cursor").unwrap(), cursor);
    assert_eq!(store.secret("other").unwrap(), other);
    assert_eq!(store.marker("demo").unwrap().as_deref(), Some("complete"));
    assert_eq!(store.markers().unwrap(), [("demo".to_owned(), "complete".to_owned())]);
    assert_eq!(store.secret("copied").unwrap(), [7; 32]);
    let mut secrets = store.secrets().unwrap();
    secrets.sort();
    let expected = [
        ("copied", vec![7; 32]),
        ("cursor", cursor.to_vec()),
        ("digest", vec![1; 32]),
        ("other", other.to_vec()),
        ("text", b"esradm_copied".to_vec()),
    ];
    assert_eq!(secrets, expected.map(|(name, value)| (name.to_owned(), value)));
    assert_eq!(store.organizations().unwrap().len(), 1);
    let bytes = reader(&*store, organization).get(FINDINGS, id_of(&record)).unwrap().expect("kept");
    assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), record);
    assert_eq!(store.verify_indexes().unwrap(), Vec::<String>::new());
}

fn documents_are_swapped_by_version_and_survive_a_reopen(backend: &dyn Backend) {
    {
        let store = backend.open();
        assert_eq!(store.document("webhook", "a").unwrap(), None);
        assert_eq!(store.swap_document("webhook", "a", None, b"{\"n\":1}").unwrap(), Some(1));
        assert_eq!(store.swap_document("webhook", "a", None, b"{\"n\":0}").unwrap(), None, "it exists already");
        assert_eq!(store.swap_document("webhook", "a", Some(1), b"{\"n\":2}").unwrap(), Some(2));
        assert_eq!(store.swap_document("webhook", "a", Some(1), b"{\"n\":3}").unwrap(), None, "a stale version loses");
        assert_eq!(store.swap_document("webhook", "b", Some(1), b"{}").unwrap(), None, "no such document");
        assert_eq!(store.swap_document("webhook", "b", None, b"{\"b\":true}").unwrap(), Some(1));
        // Kinds are apart, even where one's name starts another's.
        assert_eq!(store.swap_document("webhook-batch", "a", None, b"[]").unwrap(), Some(1));
        assert_eq!(store.swap_document("webhook-attempts", "c", None, b"[1]").unwrap(), Some(1));
        store.flush().unwrap();
    }
    let store = backend.open();
    let found = store.document("webhook", "a").unwrap().expect("kept");
    assert_eq!((found.version, found.body.as_slice()), (2, &b"{\"n\":2}"[..]));
    let all: Vec<(String, u64)> =
        store.documents("webhook").unwrap().into_iter().map(|document| (document.id, document.version)).collect();
    assert_eq!(all, [("a".to_owned(), 2), ("b".to_owned(), 1)]);
    assert_eq!(store.documents("webhook-batch").unwrap().len(), 1);
    assert!(store.delete_document("webhook", "a").unwrap());
    assert!(!store.delete_document("webhook", "a").unwrap());
    assert_eq!(store.document("webhook", "a").unwrap(), None);
    assert_eq!(store.swap_document("webhook", "a", None, b"{}").unwrap(), Some(1), "made again from version 1");
    // Two writers racing from one version: exactly one wins.
    let winners: usize = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..8)
            .map(|n| {
                let store = store.clone();
                scope.spawn(move || {
                    store.swap_document("webhook", "b", Some(1), format!("{{\"racer\":{n}}}").as_bytes())
                })
            })
            .collect();
        racers.into_iter().map(|racer| usize::from(racer.join().unwrap().unwrap().is_some())).sum()
    });
    assert_eq!(winners, 1);
}

fn a_batch_is_all_or_nothing(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let endpoint = json!({"id": Uuid::now_v7().to_string(), "hostname": "a", "created_at": timestamp(1, 1),
                          "updated_at": timestamp(1, 1)});
    let good = finding(3);
    assert_eq!(good["status"], "open");
    let mut no_timestamp = finding(2);
    no_timestamp.as_object_mut().unwrap().remove("created_at");
    let writes = |records: Vec<Value>| {
        vec![
            CollectionWrite::records(Collection::Endpoints, vec![endpoint.clone()]),
            CollectionWrite::records(FINDINGS, records),
        ]
    };
    let nothing_written = |store: &dyn Store| {
        let mut reader = reader(store, organization);
        assert_eq!(reader.count(Collection::Endpoints).unwrap(), 0);
        assert_eq!(reader.count(FINDINGS).unwrap(), 0);
        assert_eq!(reader.get(FINDINGS, id_of(&good)).unwrap(), None);
        assert_eq!(reader.index_count(FINDINGS, "status", "resolved").unwrap(), 0);
    };

    // A record the store refuses: neither collection is written.
    let refused = store.write_batch(organization, &mut |_, _| Ok(writes(vec![good.clone(), no_timestamp.clone()])));
    assert!(matches!(refused, Err(StoreError::InvalidRecord(_))), "{refused:?}");
    nothing_written(&*store);
    // A build step that fails: its error, nothing written.
    let failed = store.write_batch(organization, &mut |_, _| Err(StoreError::Corrupt("refused by the build".into())));
    assert!(matches!(failed, Err(StoreError::Corrupt(message)) if message == "refused by the build"));
    nothing_written(&*store);
    // Nothing to write.
    store.write_batch(organization, &mut |_, _| Ok(Vec::new())).unwrap();
    nothing_written(&*store);

    // Two collections in one batch; an id repeated ends as its last record.
    let mut later = good.clone();
    later["status"] = json!("resolved");
    store.write_batch(organization, &mut |_, _| Ok(writes(vec![good.clone(), later.clone()]))).unwrap();
    let mut reader = reader(&*store, organization);
    assert_eq!(reader.count(Collection::Endpoints).unwrap(), 1);
    assert_eq!(reader.count(FINDINGS).unwrap(), 1);
    let stored = reader.get(FINDINGS, id_of(&good)).unwrap().expect("written");
    assert_eq!(serde_json::from_slice::<Value>(&stored).unwrap(), later);
    assert_eq!(reader.index_count(FINDINGS, "status", "resolved").unwrap(), 1);
    assert_eq!(reader.index_count(FINDINGS, "status", good["status"].as_str().unwrap()).unwrap(), 0);
    assert_eq!(store.verify_indexes().unwrap(), Vec::<String>::new());
}

fn a_batch_reads_and_writes_under_one_lock(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let mut counter = finding(3);
    counter["count"] = json!(0);
    let id = id_of(&counter);
    store.insert_records(organization, FINDINGS, std::slice::from_ref(&counter)).unwrap();
    // The build step sees the store as the lock holds it: concurrent
    // read-modify-write batches lose no increment.
    const WRITERS: usize = 4;
    const INCREMENTS: u64 = 15;
    std::thread::scope(|scope| {
        for _ in 0..WRITERS {
            scope.spawn(|| {
                for _ in 0..INCREMENTS {
                    store
                        .write_batch(organization, &mut |view, _| {
                            let bytes = view.get(FINDINGS, id)?.ok_or_else(|| StoreError::Corrupt("gone".into()))?;
                            let mut record: Value = serde_json::from_slice(&bytes).unwrap();
                            record["count"] = json!(record["count"].as_u64().unwrap() + 1);
                            Ok(vec![CollectionWrite::records(FINDINGS, vec![record])])
                        })
                        .unwrap();
                }
            });
        }
    });
    let bytes = reader(&*store, organization).get(FINDINGS, id).unwrap().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap()["count"], json!(WRITERS as u64 * INCREMENTS));
}

fn write_times_increase_in_commit_order(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let mut counter = finding(5);
    counter["count"] = json!(0);
    let id = id_of(&counter);
    store.insert_records(organization, FINDINGS, std::slice::from_ref(&counter)).unwrap();
    // Each batch reads the counter under the lock (its place in commit
    // order) and keeps the write time it was given.
    let seen = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..10 {
                    let mut given = None;
                    store
                        .write_batch(organization, &mut |view, now| {
                            let bytes = view.get(FINDINGS, id)?.ok_or_else(|| StoreError::Corrupt("gone".into()))?;
                            let mut record: Value = serde_json::from_slice(&bytes).unwrap();
                            let place = record["count"].as_u64().unwrap() + 1;
                            record["count"] = json!(place);
                            record["updated_at"] = json!(now.format());
                            given = Some((place, now.0));
                            Ok(vec![CollectionWrite::records(FINDINGS, vec![record])])
                        })
                        .unwrap();
                    seen.lock().unwrap().push(given.unwrap());
                }
            });
        }
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(seen.iter().map(|(place, _)| *place).collect::<Vec<_>>(), (1..=40).collect::<Vec<u64>>());
    for pair in seen.windows(2) {
        assert!(pair[0].1 < pair[1].1, "write times out of commit order: {pair:?}");
        assert_eq!(pair[1].1 % 1000, 0, "write times are whole microseconds");
    }
    // A record written with a time of its own (a copy, a bulk load) later
    // than the clock: the next write time is later still.
    let mut ahead = finding(6);
    ahead["updated_at"] = json!("2200-01-01T00:00:00Z");
    store.insert_records(organization, FINDINGS, &[ahead]).unwrap();
    let mut next = None;
    store
        .write_batch(organization, &mut |_, now| {
            next = Some(now);
            Ok(Vec::new())
        })
        .unwrap();
    let ahead_at = Timestamp::parse("2200-01-01T00:00:00Z").unwrap();
    assert!(next.unwrap().0 > ahead_at.0, "{:?} is not past a stored update", next);
}

fn probe_and_size(backend: &dyn Backend) {
    let store = backend.open();
    store.probe().unwrap();
    let findings: Vec<Value> = (0..200).map(finding).collect();
    store.insert_records(Uuid::now_v7(), FINDINGS, &findings).unwrap();
    store.flush().unwrap();
    store.probe().unwrap();
    let size = store.size_on_disk().unwrap();
    let bytes: usize = findings.iter().map(|record| record.to_string().len()).sum();
    assert!(size >= bytes as u64, "{size} bytes on disk for {bytes} bytes of records");
}

fn clearing_keeps_secrets(backend: &dyn Backend) {
    let store = backend.open();
    let cursor = store.secret("cursor").unwrap();
    let acme = organization("acme");
    store.insert_organization(&acme).unwrap();
    store.insert_api_key(&[7; 32], &key_record(acme.organization_id, "k")).unwrap();
    let findings: Vec<Value> = (0..30).map(finding).collect();
    store.insert_records(acme.organization_id, FINDINGS, &findings).unwrap();
    store.clear_data().unwrap();
    assert!(store.is_empty().unwrap());
    assert_eq!(store.api_key(&[7; 32]).unwrap(), None);
    assert_eq!(store.api_keys(None).unwrap(), Vec::new());
    let mut reader = reader(&*store, acme.organization_id);
    assert_eq!(reader.count(FINDINGS).unwrap(), 0);
    assert_eq!(reader.index_count(FINDINGS, "status", "open").unwrap(), 0);
    assert_eq!(
        reader.count_matching(FINDINGS, &Matching::conditions(conditions(&[("status", &["open"])]))).unwrap(),
        0
    );
    assert_eq!(store.secret("cursor").unwrap(), cursor);
    assert_eq!(store.verify_indexes().unwrap(), Vec::<String>::new());
}

fn a_bulk_load_ends_with_agreeing_indexes(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let findings: Vec<Value> = (0..120).map(finding).collect();
    for chunk in findings.chunks(50) {
        store.bulk_insert_records(organization, FINDINGS, chunk).unwrap();
    }
    store.finish_bulk_load().unwrap();
    assert_eq!(store.verify_indexes().unwrap(), Vec::<String>::new());
    let mut reader = reader(&*store, organization);
    assert_eq!(reader.count(FINDINGS).unwrap(), 120);
    let open: BTreeSet<Uuid> = findings.iter().filter(|record| record["status"] == "open").map(id_of).collect();
    let walked: BTreeSet<Uuid> = reader
        .index_scan(FINDINGS, &IndexWalk::new("status", "open", 1000))
        .unwrap()
        .into_iter()
        .map(|(at, _)| at.id)
        .collect();
    assert_eq!(walked, open);
    let pair = conditions(&[("status", &["open"]), ("severity", &["critical"])]);
    let expected = findings.iter().filter(|record| matches(record, &pair, None)).count() as u64;
    assert_eq!(reader.count_matching(FINDINGS, &Matching::conditions(pair.clone())).unwrap(), expected);
}

/// Every change event of the organization (of these collections), read
/// through the feed a page of `page` at a time.
fn all_changes(store: &dyn Store, organization: Uuid, collections: &[Collection], page: usize) -> Vec<ChangeEvent> {
    let mut events: Vec<ChangeEvent> = Vec::new();
    loop {
        let after = events.last().map_or(0, |event| event.sequence);
        let read = reader(store, organization).changes(after, collections, page).unwrap();
        assert!(read.len() <= page, "{} events for a page of {page}", read.len());
        if read.is_empty() {
            return events;
        }
        events.extend(read);
    }
}

/// Each event as (collection, id, operation), in sequence order.
fn operations(events: &[ChangeEvent]) -> Vec<(Collection, Uuid, ChangeOperation)> {
    events.iter().map(|event| (event.collection, event.id, event.operation)).collect()
}

fn changes_follow_writes_in_commit_order(backend: &dyn Backend) {
    let store = backend.open();
    let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
    assert_eq!(store.change_log(acme).unwrap(), ChangeLog::default());
    assert_eq!(reader(&*store, acme).changes(0, &[], 10).unwrap(), Vec::new());
    let endpoint = json!({"id": Uuid::now_v7().to_string(), "hostname": "a", "created_at": timestamp(1, 1),
                          "updated_at": timestamp(1, 1)});
    let findings: Vec<Value> = (0..5).map(finding).collect();
    let mut written_at = None;
    store
        .write_batch(acme, &mut |_, now| {
            written_at = Some(now.0);
            // One id twice: one event, for what its last line holds.
            let mut repeated = findings.clone();
            repeated.push(findings[2].clone());
            Ok(vec![
                CollectionWrite::records(FINDINGS, repeated),
                CollectionWrite::records(Collection::Endpoints, vec![endpoint.clone()]),
            ])
        })
        .unwrap();
    let events = all_changes(&*store, acme, &[], 2);
    let mut expected: Vec<_> =
        findings.iter().map(|record| (FINDINGS.to_owned(), id_of(record), ChangeOperation::Created)).collect();
    expected.push((Collection::Endpoints, id_of(&endpoint), ChangeOperation::Created));
    assert_eq!(operations(&events), expected);
    assert!(events.windows(2).all(|pair| pair[0].sequence < pair[1].sequence), "{events:?}");
    assert!(events.iter().all(|event| Some(event.changed_at) == written_at && event.sequence > 0));
    let log = store.change_log(acme).unwrap();
    assert_eq!(log, ChangeLog { latest: events.last().unwrap().sequence, pruned_through: 0 });
    assert_eq!(reader(&*store, acme).change_log().unwrap(), log);
    // Another organization's changes are its own.
    assert_eq!(store.change_log(globex).unwrap(), ChangeLog::default());
    assert_eq!(reader(&*store, globex).changes(0, &[], 100).unwrap(), Vec::new());

    // An update: the record's event moves past everything before it.
    let mut updated = findings[1].clone();
    updated["status"] = json!("resolved");
    store.insert_records(acme, FINDINGS, std::slice::from_ref(&updated)).unwrap();
    let events = all_changes(&*store, acme, &[], 100);
    assert_eq!(events.len(), 6, "one event per record: {events:?}");
    let last = events.last().unwrap();
    assert_eq!((last.id, last.operation), (id_of(&updated), ChangeOperation::Updated));
    assert!(last.sequence > log.latest);
    assert_eq!(store.change_log(acme).unwrap().latest, last.sequence);
    // Read from a sequence on: only what came after it.
    let after = reader(&*store, acme).changes(log.latest, &[], 100).unwrap();
    assert_eq!(operations(&after), [(FINDINGS, id_of(&updated), ChangeOperation::Updated)]);
    // Filtered by collection, in the same order.
    let endpoints_only = all_changes(&*store, acme, &[Collection::Endpoints], 100);
    assert_eq!(operations(&endpoints_only), [(Collection::Endpoints, id_of(&endpoint), ChangeOperation::Created)]);
    let both = all_changes(&*store, acme, &[Collection::Endpoints, FINDINGS], 1);
    assert_eq!(both, events);
    assert_eq!(all_changes(&*store, acme, &[Collection::Scopes], 100), Vec::new());

    // The sequence survives a reopen.
    let latest = store.change_log(acme).unwrap().latest;
    drop(store);
    let store = backend.open();
    assert_eq!(store.change_log(acme).unwrap().latest, latest);
    store.insert_records(acme, FINDINGS, &[finding(9)]).unwrap();
    assert!(store.change_log(acme).unwrap().latest > latest);
}

fn deletions_remove_records_and_leave_events(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let findings: Vec<Value> = (0..12).map(finding).collect();
    store.insert_records(organization, FINDINGS, &findings).unwrap();
    let before = store.change_log(organization).unwrap().latest;
    let (gone, kept): (Vec<&Value>, Vec<&Value>) = findings.iter().partition(|record| record["status"] == "open");
    assert_eq!(gone.len(), 4);
    let never_stored = Uuid::now_v7();
    let mut deleted: Vec<Uuid> = gone.iter().map(|record| id_of(record)).collect();
    deleted.push(never_stored);
    store
        .write_batch(organization, &mut |_, _| {
            Ok(vec![CollectionWrite { deleted: deleted.clone(), ..CollectionWrite::new(FINDINGS) }])
        })
        .unwrap();
    let mut session = reader(&*store, organization);
    for record in &gone {
        assert_eq!(session.get(FINDINGS, id_of(record)).unwrap(), None);
    }
    assert_eq!(session.count(FINDINGS).unwrap(), 8);
    assert_eq!(session.index_count(FINDINGS, "status", "open").unwrap(), 0);
    assert_eq!(
        session
            .count_matching(FINDINGS, &Matching::conditions(conditions(&[("status", &["open", "resolved"])])))
            .unwrap(),
        4
    );
    assert_eq!(
        session.index_values(FINDINGS, "status").unwrap().iter().map(|(value, _)| value.as_str()).collect::<Vec<_>>(),
        ["resolved", "suppressed"]
    );
    let scanned: BTreeSet<Uuid> =
        session.scan(FINDINGS, &RecordWalk::new(100)).unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(scanned, kept.iter().map(|record| id_of(record)).collect());
    assert_eq!(session.get_many(FINDINGS, &deleted).unwrap(), Vec::new());
    drop(session);
    assert_eq!(store.verify_indexes().unwrap(), Vec::<String>::new());
    // One event per deleted record that existed, in the order given; the
    // id never stored has none.
    let events = all_changes(&*store, organization, &[], 100);
    assert_eq!(events.len(), 12);
    let deletions: Vec<_> = events.iter().filter(|event| event.sequence > before).collect();
    assert_eq!(
        deletions.iter().map(|event| (event.id, event.operation)).collect::<Vec<_>>(),
        gone.iter().map(|record| (id_of(record), ChangeOperation::Deleted)).collect::<Vec<_>>()
    );
    // Written again: created anew.
    store.insert_records(organization, FINDINGS, &[gone[0].clone()]).unwrap();
    let last = all_changes(&*store, organization, &[], 100).pop().unwrap();
    assert_eq!((last.id, last.operation), (id_of(gone[0]), ChangeOperation::Created));
    assert_eq!(reader(&*store, organization).index_count(FINDINGS, "status", "open").unwrap(), 1);
    // Written and deleted by one batch: refused, nothing written.
    let latest = store.change_log(organization).unwrap().latest;
    let both = store.write_batch(organization, &mut |_, _| {
        Ok(vec![CollectionWrite {
            records: vec![kept[0].clone()],
            deleted: vec![id_of(kept[0])],
            ..CollectionWrite::new(FINDINGS)
        }])
    });
    assert!(matches!(both, Err(StoreError::InvalidRecord(_))), "{both:?}");
    assert_eq!(store.change_log(organization).unwrap().latest, latest);
    assert!(reader(&*store, organization).get(FINDINGS, id_of(kept[0])).unwrap().is_some());
}

fn history_is_kept_until_the_record_is_deleted(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let (first, second) = (finding(0), finding(1));
    let entry = |n: u32| serde_json::to_vec(&json!({"status": format!("s{n}")})).unwrap();
    store
        .write_batch(organization, &mut |_, _| {
            Ok(vec![CollectionWrite {
                records: vec![first.clone(), second.clone()],
                history: vec![(id_of(&first), entry(1)), (id_of(&second), entry(2))],
                ..CollectionWrite::new(FINDINGS)
            }])
        })
        .unwrap();
    // A batch of history alone changes no record: no event.
    let latest = store.change_log(organization).unwrap().latest;
    store
        .write_batch(organization, &mut |_, _| {
            Ok(vec![CollectionWrite {
                history: vec![(id_of(&first), entry(3)), (id_of(&first), entry(4))],
                ..CollectionWrite::new(FINDINGS)
            }])
        })
        .unwrap();
    assert_eq!(store.change_log(organization).unwrap().latest, latest);
    let mut session = reader(&*store, organization);
    assert_eq!(session.history(FINDINGS, id_of(&first)).unwrap(), [entry(1), entry(3), entry(4)]);
    assert_eq!(session.history(FINDINGS, id_of(&second)).unwrap(), [entry(2)]);
    assert_eq!(session.history(Collection::RemediationTargets, id_of(&first)).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(reader(&*store, Uuid::now_v7()).history(FINDINGS, id_of(&first)).unwrap(), Vec::<Vec<u8>>::new());
    drop(session);
    store
        .write_batch(organization, &mut |_, _| {
            Ok(vec![CollectionWrite { deleted: vec![id_of(&first)], ..CollectionWrite::new(FINDINGS) }])
        })
        .unwrap();
    let mut session = reader(&*store, organization);
    assert_eq!(session.history(FINDINGS, id_of(&first)).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(session.history(FINDINGS, id_of(&second)).unwrap(), [entry(2)]);
}

fn pruning_removes_old_deletions_only(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    let findings: Vec<Value> = (0..6).map(finding).collect();
    store.insert_records(organization, FINDINGS, &findings).unwrap();
    let delete = |ids: Vec<Uuid>| {
        let mut at = 0;
        store
            .write_batch(organization, &mut |_, now| {
                at = now.0;
                Ok(vec![CollectionWrite { deleted: ids.clone(), ..CollectionWrite::new(FINDINGS) }])
            })
            .unwrap();
        at
    };
    let old_deletion = delete(vec![id_of(&findings[0]), id_of(&findings[1])]);
    let old_sequence = store.change_log(organization).unwrap().latest;
    let new_deletion = delete(vec![id_of(&findings[2])]);
    assert!(new_deletion > old_deletion);
    // Nothing is old enough yet.
    assert_eq!(store.prune_changes(organization, old_deletion).unwrap(), 0);
    assert_eq!(store.change_log(organization).unwrap().pruned_through, 0);
    // The first two deletions are.
    assert_eq!(store.prune_changes(organization, old_deletion + 1).unwrap(), 2);
    let log = store.change_log(organization).unwrap();
    assert_eq!(log.pruned_through, old_sequence);
    let events = all_changes(&*store, organization, &[], 100);
    assert_eq!(events.iter().filter(|event| event.operation == ChangeOperation::Deleted).count(), 1);
    assert_eq!(events.iter().filter(|event| event.operation == ChangeOperation::Created).count(), 3);
    // Live records' events stay, however old.
    assert_eq!(store.prune_changes(organization, i64::MAX).unwrap(), 1);
    let log = store.change_log(organization).unwrap();
    assert_eq!(log, ChangeLog { latest: log.latest, pruned_through: log.latest });
    assert_eq!(all_changes(&*store, organization, &[], 100).len(), 3);
    // Pruning again changes nothing.
    assert_eq!(store.prune_changes(organization, i64::MAX).unwrap(), 0);
    assert_eq!(store.change_log(organization).unwrap(), log);
}

fn a_copy_continues_the_sequence(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    store.continue_changes_from(organization, 500).unwrap();
    assert_eq!(store.change_log(organization).unwrap(), ChangeLog { latest: 500, pruned_through: 500 });
    store.insert_records(organization, FINDINGS, &[finding(1)]).unwrap();
    let events = all_changes(&*store, organization, &[], 100);
    assert_eq!(events.len(), 1);
    assert!(events[0].sequence > 500);
    // Never back.
    store.continue_changes_from(organization, 10).unwrap();
    assert_eq!(store.change_log(organization).unwrap(), ChangeLog { latest: events[0].sequence, pruned_through: 500 });
}

fn sequences_follow_commit_order_across_writers(backend: &dyn Backend) {
    let store = backend.open();
    let organization = Uuid::now_v7();
    // Each batch notes its write time; the events' order by sequence is
    // the batches' commit order, which write times follow.
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for n in 0..10 {
                    store.insert_records(organization, FINDINGS, &[finding(n), finding(n + 1)]).unwrap();
                }
            });
        }
    });
    let events = all_changes(&*store, organization, &[], 7);
    assert_eq!(events.len(), 80);
    assert!(
        events.windows(2).all(|pair| pair[0].sequence < pair[1].sequence && pair[0].changed_at <= pair[1].changed_at)
    );
    assert_eq!(store.change_log(organization).unwrap().latest, events.last().unwrap().sequence);
}

fn audit_entry(organization: Option<Uuid>, n: usize, principal: &str, at: i64) -> AuditEntry {
    AuditEntry {
        at: Timestamp(at).format(),
        request_id: format!("request-{n}"),
        principal: AuditPrincipal {
            kind: if principal.is_empty() { "api_key" } else { "client" }.to_owned(),
            id: (!principal.is_empty()).then(|| principal.to_owned()),
            issuer: n.is_multiple_of(2).then(|| "https://issuer.example".to_owned()),
        },
        organization_id: organization,
        method: "GET".to_owned(),
        route: "/v1/vulnerability-findings".to_owned(),
        query: n.is_multiple_of(3).then(|| format!("limit={n}&q=caf\u{e9}")),
        status: if principal.is_empty() { 401 } else { 200 },
        records: (!n.is_multiple_of(4)).then_some(n as u64),
    }
}

/// Every page of a walk through an organization's trail (with a
/// principal filter), checking each page's `next`.
fn audit_pages(store: &dyn Store, organization: Uuid, principal: Option<&str>, limit: usize) -> Vec<AuditPage> {
    let (mut pages, mut after) = (Vec::new(), None);
    loop {
        let page = store.audit_page(organization, after, principal, limit).unwrap();
        assert!(page.entries.len() <= limit);
        if let Some(next) = page.next {
            assert!(after.is_none_or(|after| next > after), "a page goes forward");
        }
        let next = page.next;
        pages.push(page);
        match next {
            Some(next) => after = Some(next),
            None => return pages,
        }
    }
}

fn audit_trail(store: &dyn Store, organization: Uuid, principal: Option<&str>, limit: usize) -> Vec<(u64, AuditEntry)> {
    let entries: Vec<(u64, AuditEntry)> =
        audit_pages(store, organization, principal, limit).into_iter().flat_map(|page| page.entries).collect();
    assert!(entries.windows(2).all(|pair| pair[0].0 < pair[1].0), "positions increase");
    entries
}

fn audit_entries_are_paged_per_organization_filtered_and_expired(backend: &dyn Backend) {
    const DAY: i64 = 86_400 * 1_000_000_000;
    let now = Timestamp::parse("2026-03-01T12:00:00.123456Z").unwrap().0;
    let (acme, globex, quiet) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    // Principals, one with a NUL and one with the text of another field.
    let principals = ["key-1", "client-\0-2", "GET", ""];
    let mut written = Vec::new();
    {
        let store = backend.open();
        assert_eq!(store.audit_page(acme, None, None, 10).unwrap(), AuditPage::default());
        // Two batches, old entries (100 days) and recent ones, interleaved
        // across organizations and none.
        for (batch, age) in [(0..40, 100 * DAY), (40..95, 0)] {
            let entries: Vec<AuditEntry> = batch
                .map(|n| {
                    let organization = [Some(acme), Some(globex), None][n % 3];
                    audit_entry(organization, n, principals[n % 4], now - age + n as i64 * 1_000)
                })
                .collect();
            store.append_audit(&entries).unwrap();
            written.extend(entries);
        }
        store.append_audit(&[]).unwrap();
        // A time that is not RFC 3339 refuses the whole batch.
        let mut bad = vec![audit_entry(Some(acme), 100, "key-1", now), audit_entry(Some(acme), 101, "key-1", now)];
        bad[1].at = "yesterday".to_owned();
        assert!(matches!(store.append_audit(&bad), Err(StoreError::InvalidRecord(_))));
        store.flush().unwrap();
    }
    let store = backend.open();
    let of = |organization: Option<Uuid>, principal: Option<&str>| -> Vec<AuditEntry> {
        written
            .iter()
            .filter(|entry| entry.organization_id == organization)
            .filter(|entry| principal.is_none() || entry.principal.id.as_deref() == principal)
            .cloned()
            .collect()
    };
    let entries = |trail: Vec<(u64, AuditEntry)>| trail.into_iter().map(|(_, entry)| entry).collect::<Vec<_>>();

    // Each organization's trail, in the order recorded, kept as given,
    // whatever the page size; nothing of another's.
    for limit in [1, 7, 32, 1000] {
        assert_eq!(entries(audit_trail(&*store, acme, None, limit)), of(Some(acme), None), "pages of {limit}");
    }
    assert_eq!(entries(audit_trail(&*store, globex, None, 5)), of(Some(globex), None));
    assert_eq!(entries(audit_trail(&*store, Uuid::nil(), None, 5)), of(None, None), "none's under the nil UUID");
    assert_eq!(audit_trail(&*store, quiet, None, 5), []);
    // A full page says where the next starts; the last says there is none.
    let pages = audit_pages(&*store, acme, None, 8);
    let acme_count = of(Some(acme), None).len();
    assert_eq!(pages.len(), acme_count / 8 + 1);
    assert_eq!(pages[0].next, Some(pages[0].entries[7].0));
    assert_eq!(pages.last().unwrap().next, None);
    // From a position, only what follows it.
    let trail = audit_trail(&*store, acme, None, 100);
    let from_middle = store.audit_page(acme, Some(trail[10].0), None, 100).unwrap();
    assert_eq!(from_middle.entries, trail[11..]);
    assert_eq!(store.audit_page(acme, Some(u64::MAX), None, 10).unwrap(), AuditPage::default());
    // A limit is brought within 1 to MAX_SCAN.
    assert_eq!(store.audit_page(acme, None, None, 0).unwrap().entries.len(), 1);

    // The principal filter matches the id exactly.
    for principal in &principals[..3] {
        for limit in [1, 3, 100] {
            let found = entries(audit_trail(&*store, acme, Some(principal), limit));
            assert_eq!(found, of(Some(acme), Some(principal)), "{principal:?} in pages of {limit}");
        }
    }
    assert_eq!(audit_trail(&*store, acme, Some("key"), 10), []);
    assert_eq!(audit_trail(&*store, acme, Some(""), 10), [], "no id is not the empty id");

    // A filter that matches rarely examines at most AUDIT_EXAMINED entries
    // per call and says where to go on.
    let many: Vec<AuditEntry> = (0..AUDIT_EXAMINED + 5)
        .map(|n| audit_entry(Some(quiet), n, if n == AUDIT_EXAMINED + 2 { "rare" } else { "common" }, now))
        .collect();
    for chunk in many.chunks(2_000) {
        store.append_audit(chunk).unwrap();
    }
    let first = store.audit_page(quiet, None, Some("rare"), 10).unwrap();
    assert_eq!(first.entries, []);
    let examined_through = first.next.expect("more to examine");
    let second = store.audit_page(quiet, Some(examined_through), Some("rare"), 10).unwrap();
    assert_eq!(entries(second.entries), [many[AUDIT_EXAMINED + 2].clone()]);
    assert_eq!(second.next, None);
    assert_eq!(store.audit_page(quiet, None, None, 5 * MAX_SCAN).unwrap().entries.len(), MAX_SCAN);
    assert_eq!(entries(audit_trail(&*store, quiet, None, MAX_SCAN)), many);

    // Expiry removes what is older than the cutoff, of every organization and none.
    let cutoff = now - 90 * DAY;
    let old = written.iter().filter(|entry| entry.at_nanos().unwrap() < cutoff).count();
    assert_eq!(old, 40);
    assert_eq!(store.expire_audit(cutoff).unwrap(), old as u64);
    let recent = |organization| -> Vec<AuditEntry> {
        of(organization, None).into_iter().filter(|entry| entry.at_nanos().unwrap() >= cutoff).collect()
    };
    assert_eq!(entries(audit_trail(&*store, acme, None, 9)), recent(Some(acme)));
    assert_eq!(entries(audit_trail(&*store, globex, None, 9)), recent(Some(globex)));
    assert_eq!(entries(audit_trail(&*store, Uuid::nil(), None, 9)), recent(None));
    assert_eq!(store.expire_audit(cutoff).unwrap(), 0, "nothing more is that old");
    // More than one batch of expiry.
    assert_eq!(store.expire_audit(now + DAY).unwrap(), (95 - 40 + AUDIT_EXAMINED + 5) as u64);
    assert_eq!(audit_trail(&*store, quiet, None, MAX_SCAN), []);

    // Positions are never given again, and clearing removes the trail.
    let last = trail.last().unwrap().0;
    store.append_audit(&[audit_entry(Some(acme), 200, "key-1", now)]).unwrap();
    assert!(audit_trail(&*store, acme, None, 10)[0].0 > last);
    store.clear_data().unwrap();
    assert_eq!(audit_trail(&*store, acme, None, 10), []);
}
