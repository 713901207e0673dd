//! The PostgreSQL backend answers every store question exactly as the sled
//! backend does: the same batches are written to both (new records,
//! replacements, an id twice in one batch, two organizations), then every
//! read the components make is asked of both and compared.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use esr::store::Collection;

use common::postgres::TestDatabase;
use esr::store::{self, CollectionWrite, IndexWalk, RecordWalk, Store};
use esr_contract::indexes;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use uuid::Uuid;

const SEVERITIES: [&str; 4] = ["critical", "high", "medium", "low"];
const STATUSES: [&str; 3] = ["open", "resolved", "suppressed"];

fn id(n: u128) -> Uuid {
    Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0000 + n)
}

fn timestamp(rng: &mut impl Rng) -> String {
    format!(
        "2026-0{}-{:02}T{:02}:{:02}:{:02}Z",
        rng.gen_range(1..4),
        rng.gen_range(1..29),
        rng.gen_range(0..24),
        rng.gen_range(0..60),
        rng.gen_range(0..60)
    )
}

fn finding(rng: &mut impl Rng, n: u128) -> Value {
    let created = timestamp(rng);
    let status = STATUSES[rng.gen_range(0..3)];
    // Half the suppressions expire (the index of suppressions by expiry).
    let suppression = match status {
        "suppressed" if rng.gen_bool(0.5) => json!({"reason": "accepted_risk", "expires_at": timestamp(rng)}),
        "suppressed" => json!({"reason": "false_positive"}),
        _ => Value::Null,
    };
    json!({
        "id": id(n).to_string(),
        "endpoint_id": id(10_000 + n % 7).to_string(),
        "severity": SEVERITIES[rng.gen_range(0..4)],
        "status": status,
        "suppression": suppression,
        "finding_type": if rng.gen_bool(0.7) { "vulnerability" } else { "misconfiguration" },
        "cve_id": if rng.gen_bool(0.5) { Value::from(format!("CVE-2024-{}", rng.gen_range(1000..1010))) } else { Value::Null },
        "kev": rng.gen_bool(0.2),
        "source": {"scanner": (["trivy", "grype"][rng.gen_range(0..2)])},
        "first_seen_at": if rng.gen_bool(0.9) { Value::from(timestamp(rng)) } else { Value::Null },
        "last_seen_at": timestamp(rng),
        "cvss": if rng.gen_bool(0.8) { json!({"base_score": rng.gen_range(0..100) as f64 / 10.0}) } else { Value::Null },
        "created_at": created,
        "updated_at": timestamp(rng),
    })
}

fn endpoint(rng: &mut impl Rng, n: u128) -> Value {
    let tags: Vec<&str> = ["prod", "eu", "db", "web"].into_iter().filter(|_| rng.gen_bool(0.4)).collect();
    json!({
        "id": id(10_000 + n).to_string(),
        "hostname": format!("{}-{n}", ["web", "db", "Web", "cache"][rng.gen_range(0..4)]),
        "operating_system": {"family": (["linux", "windows", "macos"][rng.gen_range(0..3)])},
        "agent_id": if rng.gen_bool(0.6) { Value::from(id(20_000 + n).to_string()) } else { Value::Null },
        "tags": tags,
        "last_seen_at": if rng.gen_bool(0.9) { Value::from(timestamp(rng)) } else { Value::Null },
        "created_at": timestamp(rng),
        "updated_at": timestamp(rng),
    })
}

/// Every value each index holds in these records, plus one nobody holds.
fn values_of(index: &indexes::Index, records: &[Value]) -> Vec<String> {
    let mut values: Vec<String> = records.iter().flat_map(|record| index.values(record)).collect();
    values.push("nobody".into());
    values.sort();
    values.dedup();
    values
}

#[test]
fn postgres_answers_every_store_question_as_sled_does() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let dir =
        tempfile::Builder::new().permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700)).tempdir().unwrap();
    let sled = store::open(None, dir.path()).unwrap();
    let database = TestDatabase::new();
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());

    let mut findings: Vec<Value> = (0..300).map(|n| finding(&mut rng, n)).collect();
    let endpoints: Vec<Value> = (0..40).map(|n| endpoint(&mut rng, n)).collect();
    let write = |organization: Uuid, batches: &[(Collection, &[Value])]| {
        let writes: Vec<CollectionWrite> = batches
            .iter()
            .map(|(collection, records)| CollectionWrite::records(*collection, records.to_vec()))
            .collect();
        sled.write_batch(organization, &mut |_, _| Ok(writes.clone())).unwrap();
        pg.write_batch(organization, &mut |_, _| Ok(writes.clone())).unwrap();
    };
    write(acme, &[(Collection::VulnerabilityFindings, &findings[..200]), (Collection::Endpoints, &endpoints)]);
    write(globex, &[(Collection::VulnerabilityFindings, &findings[150..])]);
    // Replacements: some records change, one id twice in a batch, some unchanged.
    for n in (0..200).step_by(3) {
        findings[n] = finding(&mut rng, n as u128);
    }
    let mut batch: Vec<Value> = findings[..250].to_vec();
    batch.push(finding(&mut rng, 5));
    write(acme, &[(Collection::VulnerabilityFindings, &batch)]);
    let final_acme: Vec<Value> = {
        let mut by_id = std::collections::BTreeMap::new();
        for record in findings[..250].iter().chain([&batch[250]]) {
            by_id.insert(record["id"].as_str().unwrap().to_owned(), record.clone());
        }
        by_id.into_values().collect()
    };

    let organizations = [acme, globex, Uuid::now_v7()];
    assert_reads_alike(&*sled, &*pg, &organizations, &final_acme, &endpoints);
    assert!(matches!(
        pg.reader(acme).unwrap().index_count(Collection::Scopes, "colour", "red"),
        Err(esr::store::StoreError::UnknownIndex(_))
    ));
    assert_eq!(pg.verify_indexes().unwrap(), Vec::<String>::new());
    assert_eq!(sled.verify_indexes().unwrap(), Vec::<String>::new());

    // A database the schema before index columns wrote is carried over at
    // start, every entry in place.
    drop(pg);
    back_to_schema_3(&mut database.client());
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    assert_reads_alike(&*sled, &*pg, &organizations, &final_acme, &endpoints);
    assert_eq!(pg.verify_indexes().unwrap(), Vec::<String>::new());

    // A database of schema 4 gains the index of suppressions by expiry at
    // start, filled from the records.
    drop(pg);
    database
        .client()
        .batch_execute(
            "ALTER TABLE records DROP COLUMN suppression_expiry_value, DROP COLUMN suppression_expiry_position; \
             DELETE FROM counts WHERE name = 'suppression_expiry'; UPDATE schema_version SET version = 4",
        )
        .unwrap();
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    let expiring =
        pg.reader(acme).unwrap().index_count(Collection::VulnerabilityFindings, "suppression_expiry", "").unwrap();
    assert!(expiring > 10, "{expiring} suppressions that expire");
    assert_reads_alike(&*sled, &*pg, &organizations, &final_acme, &endpoints);
    assert_eq!(pg.verify_indexes().unwrap(), Vec::<String>::new());

    // A record without created_at is refused and nothing of its batch is written.
    let count = || pg.reader(acme).unwrap().count(Collection::Scopes).unwrap();
    let before = count();
    let bad = [
        json!({"id": Uuid::now_v7().to_string(), "status": "active", "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}),
        json!({"id": Uuid::now_v7().to_string(), "status": "active"}),
    ];
    assert!(pg.insert_records(acme, Collection::Scopes, &bad).is_err());
    assert_eq!(count(), before);

    // Lost index entries are found.
    let lost = database
        .client()
        .execute(
            "DELETE FROM index_entries WHERE collection = 'endpoints' AND index_name = 'tag' AND value = 'prod'",
            &[],
        )
        .unwrap();
    assert!(lost > 0);
    assert_eq!(
        pg.verify_indexes().unwrap(),
        [format!("endpoints: {lost} index entries missing, 0 pointing at nothing")]
    );

    // So are entries of no record, and counts that drifted.
    database
        .client()
        .batch_execute(&format!(
            "INSERT INTO index_entries VALUES ('{acme}', 'scopes', 'status', 'active', 0, '{}');
             INSERT INTO counts VALUES ('{acme}', 'scopes', 'status', 'drifted', 1)",
            Uuid::now_v7()
        ))
        .unwrap();
    assert_eq!(
        pg.verify_indexes().unwrap(),
        [
            format!("endpoints: {lost} index entries missing, 0 pointing at nothing"),
            "scopes: 0 index entries missing, 1 pointing at nothing".to_owned(),
            "scopes: index counts disagree with the records".to_owned(),
        ]
    );
}

#[test]
fn hosts_of_one_database_share_its_secrets_and_schema() {
    let database = TestDatabase::empty();
    let dir = tempfile::tempdir().unwrap();
    let no_data_dir = dir.path();
    let first = store::open(Some(&database.url), no_data_dir).unwrap();
    // A second host finds the schema in place and the same secrets.
    let second = store::open(Some(&database.url), no_data_dir).unwrap();
    assert_eq!(first.secret("cursor").unwrap(), second.secret("cursor").unwrap());
    assert_ne!(first.secret("cursor").unwrap(), second.secret("other").unwrap());
    first.set_marker("demo", "done").unwrap();
    assert_eq!(second.marker("demo").unwrap().as_deref(), Some("done"));
    let version: i32 = database.client().query_one("SELECT version FROM schema_version", &[]).unwrap().get(0);
    assert_eq!(version, esr::store::postgres::SCHEMA_VERSION);
}

#[test]
fn a_schema_newer_than_the_binary_is_refused() {
    let database = TestDatabase::new();
    database.client().execute("UPDATE schema_version SET version = version + 1", &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let refused = store::open(Some(&database.url), dir.path()).err().expect("a newer schema must be refused");
    let message = refused.to_string();
    assert!(message.contains("newer than this esr knows"), "{message}");
    assert!(message.contains(&format!("version {}", esr::store::postgres::SCHEMA_VERSION + 1)), "{message}");
}

#[test]
fn an_unreachable_database_is_named_in_the_error() {
    let url = common::postgres::cluster().url("no_such_database");
    let message =
        store::open(Some(&url), tempfile::tempdir().unwrap().path()).err().expect("no such database").to_string();
    assert!(message.contains("no_such_database"), "{message}");
}

#[test]
fn the_index_check_finds_change_events_and_histories_the_records_contradict() {
    let database = TestDatabase::new();
    let dir = tempfile::tempdir().unwrap();
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    let organization = Uuid::now_v7();
    let scope = |n: u32| {
        json!({"id": Uuid::now_v7().to_string(), "status": "active", "name": format!("scope {n}"),
               "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"})
    };
    let scopes = [scope(1), scope(2), scope(3)];
    let ids: Vec<Uuid> = scopes.iter().map(|record| Uuid::parse_str(record["id"].as_str().unwrap()).unwrap()).collect();
    pg.write_batch(organization, &mut |_, _| {
        Ok(vec![CollectionWrite {
            records: scopes.to_vec(),
            history: vec![(ids[0], b"first".to_vec())],
            ..CollectionWrite::new(Collection::Scopes)
        }])
    })
    .unwrap();
    pg.write_batch(organization, &mut |_, _| {
        Ok(vec![CollectionWrite { deleted: vec![ids[2]], ..CollectionWrite::new(Collection::Scopes) }])
    })
    .unwrap();
    assert_eq!(pg.change_log(organization).unwrap().latest, 4);
    assert_eq!(pg.verify_indexes().unwrap(), Vec::<String>::new());

    // A deleted record's event that says otherwise, a live record's that
    // says it was deleted, a sequence past the organization's latest, and
    // the history of a record that does not exist: each is found.
    database
        .client()
        .batch_execute(&format!(
            "UPDATE changes SET operation = 'u' WHERE id = '{deleted}';
             UPDATE changes SET operation = 'd' WHERE id = '{live}';
             UPDATE write_clocks SET sequence = 3 WHERE org_id = '{organization}';
             INSERT INTO history VALUES ('{organization}', 'scopes', '{nothing}', 1, '\\x00'::bytea)",
            deleted = ids[2],
            live = ids[1],
            nothing = Uuid::now_v7(),
        ))
        .unwrap();
    assert_eq!(
        pg.verify_indexes().unwrap(),
        [
            "scopes: 1 change events of records that do not exist",
            "scopes: 1 deletion events of records that exist",
            "1 change events have a sequence past their organization's latest",
            "scopes: the history of 1 records that do not exist",
        ]
    );
}

#[test]
fn a_database_of_schema_2_gains_the_change_feed_at_start() {
    let database = TestDatabase::empty();
    let mut client = database.client();
    // The schema as the release before the change feed left it, with an
    // organization that has written.
    client.batch_execute(include_str!("../../../crates/store-postgres/src/migrations/0001_initial.sql")).unwrap();
    client
        .batch_execute(include_str!("../../../crates/store-postgres/src/migrations/0002_write_clocks_and_hosts.sql"))
        .unwrap();
    let organization = Uuid::now_v7();
    let last_write: i64 = 1_800_000_000_000_000_000;
    client
        .batch_execute(&format!(
            "CREATE TABLE schema_version (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), \
             version integer NOT NULL);
             INSERT INTO schema_version VALUES (true, 2);
             INSERT INTO write_clocks VALUES ('{organization}', {last_write})"
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    let version: i32 = client.query_one("SELECT version FROM schema_version", &[]).unwrap().get(0);
    assert_eq!(version, esr::store::postgres::SCHEMA_VERSION);
    assert_eq!(pg.change_log(organization).unwrap(), store::ChangeLog::default());
    let scope = json!({"id": Uuid::now_v7().to_string(), "status": "active", "name": "a",
                       "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"});
    let mut written_at = 0;
    pg.write_batch(organization, &mut |_, now| {
        written_at = now.0;
        Ok(vec![CollectionWrite::records(Collection::Scopes, vec![scope.clone()])])
    })
    .unwrap();
    // The clock kept its place; the feed starts at 1.
    assert!(written_at > last_write);
    let events = pg.reader(organization).unwrap().changes(0, &[], 10).unwrap();
    assert_eq!(
        events.iter().map(|event| (event.sequence, event.operation, event.changed_at)).collect::<Vec<_>>(),
        [(1, store::ChangeOperation::Created, written_at)]
    );
    assert_eq!(pg.verify_indexes().unwrap(), Vec::<String>::new());
}

/// Every read the components make, asked of both stores for each
/// organization and compared.
fn assert_reads_alike(
    sled: &dyn Store,
    pg: &dyn Store,
    organizations: &[Uuid],
    final_acme: &[Value],
    endpoints: &[Value],
) {
    for organization in organizations.iter().copied() {
        let mut sled_reads = sled.reader(organization).unwrap();
        let mut pg_reads = pg.reader(organization).unwrap();
        for (collection, records) in
            [(Collection::VulnerabilityFindings, final_acme), (Collection::Endpoints, endpoints)]
        {
            assert_eq!(sled_reads.count(collection).unwrap(), pg_reads.count(collection).unwrap());
            // Scans in id order, both ways, from the start and from the middle.
            for after in [None, Some(id(77)), Some(id(10_020))] {
                for reverse in [false, true] {
                    let from_sled: Vec<(Uuid, Vec<u8>)> =
                        sled_reads.scan(collection, &RecordWalk::new(50).after(after).reversed(reverse)).unwrap();
                    assert_eq!(
                        from_sled,
                        pg_reads.scan(collection, &RecordWalk::new(50).after(after).reversed(reverse)).unwrap()
                    );
                }
            }
            for n in [0, 5, 77, 299, 10_003, 99_999] {
                assert_eq!(sled_reads.get(collection, id(n)).unwrap(), pg_reads.get(collection, id(n)).unwrap());
            }
            for index in indexes::indexes(collection) {
                for value in values_of(index, records) {
                    let count = sled_reads.index_count(collection, index.name, &value).unwrap();
                    assert_eq!(count, pg_reads.index_count(collection, index.name, &value).unwrap());
                    for reverse in [false, true] {
                        let whole = IndexWalk::new(index.name, &value, 1000).reversed(reverse);
                        let positions = sled_reads.index_positions(collection, &whole).unwrap();
                        assert_eq!(
                            positions,
                            pg_reads.index_positions(collection, &whole).unwrap(),
                            "{collection} {} {value:?}",
                            index.name
                        );
                        // Pages resumed from the middle.
                        if let Some(middle) = positions.get(positions.len() / 2).copied() {
                            let page = IndexWalk::new(index.name, &value, 7).after(Some(middle)).reversed(reverse);
                            let from_sled: Vec<(store::IndexPosition, Vec<u8>)> =
                                sled_reads.index_scan(collection, &page).unwrap();
                            assert_eq!(from_sled, pg_reads.index_scan(collection, &page).unwrap());
                        }
                    }
                    if index.key == indexes::IndexKey::SortValue && value == indexes::SORTED {
                        let positions =
                            sled_reads.index_positions(collection, &IndexWalk::new(index.name, &value, 1000)).unwrap();
                        let bounds: Vec<Option<store::IndexPosition>> = [None]
                            .into_iter()
                            .chain([positions.len() / 4, positions.len() * 3 / 4].map(|at| positions.get(at).copied()))
                            .collect();
                        for after in &bounds {
                            for before in &bounds {
                                for conditions in
                                    [vec![], vec![store::IndexCondition::new("status", vec!["open".to_owned()])]]
                                {
                                    let conditions: Vec<store::IndexCondition> = conditions
                                        .into_iter()
                                        .filter(|condition| indexes::find(collection, &condition.index).is_some())
                                        .collect();
                                    for updated_after in [None, Some(1_772_000_000_000_000_000)] {
                                        let count = |reads: &mut Box<dyn store::StoreReader>| {
                                            reads
                                                .count_matching(
                                                    collection,
                                                    &store::Matching {
                                                        ranges: vec![store::IndexRange {
                                                            index: index.name.to_owned(),
                                                            after: *after,
                                                            before: *before,
                                                        }],
                                                        conditions: conditions.clone(),
                                                        updated_after,
                                                    },
                                                )
                                                .unwrap()
                                        };
                                        assert_eq!(
                                            count(&mut sled_reads),
                                            count(&mut pg_reads),
                                            "{collection} {} {after:?}..{before:?} {conditions:?} {updated_after:?}",
                                            index.name
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // Totals of combinations of filters, with and without updatedAfter.
        let condition = |index: &str, values: &[&str]| {
            store::IndexCondition::new(index, values.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>())
        };
        let matching = |conditions: &[store::IndexCondition], updated_after: Option<i64>| store::Matching {
            conditions: conditions.to_vec(),
            updated_after,
            ..store::Matching::default()
        };
        let combinations = [
            vec![],
            vec![condition("status", &["open"])],
            vec![condition("status", &["open", "resolved", "open"])],
            vec![condition("status", &["open"]), condition("severity", &["critical", "high"])],
            vec![condition("kev", &["true"]), condition("severity", &["low"])],
            vec![condition("status", &["resolved"]), condition("scanner", &["trivy"])],
            vec![condition("status", &["open"]), condition("severity", &["high"]), condition("kev", &["false"])],
            vec![
                condition("cve_id", &["CVE-2024-1003", "CVE-2024-1004"]),
                condition("endpoint_id", &[&id(10_003).to_string()]),
            ],
            vec![condition("created_at", &[""]), condition("status", &["suppressed"])],
        ];
        for conditions in &combinations {
            for updated_after in
                [None, Some(0), Some(1_770_000_000_000_000_000), Some(1_772_123_456_000_000_000), Some(i64::MAX)]
            {
                assert_eq!(
                    sled_reads
                        .count_matching(Collection::VulnerabilityFindings, &matching(conditions, updated_after))
                        .unwrap(),
                    pg_reads
                        .count_matching(Collection::VulnerabilityFindings, &matching(conditions, updated_after))
                        .unwrap(),
                    "{conditions:?} after {updated_after:?}"
                );
            }
        }
        for conditions in [
            vec![condition("tag", &["prod", "eu"])],
            vec![condition("tag", &["db"]), condition("os_family", &["linux"])],
            vec![condition("os_family", &["linux"]), condition("has_agent", &["true"])],
        ] {
            assert_eq!(
                sled_reads.count_matching(Collection::Endpoints, &matching(&conditions, None)).unwrap(),
                pg_reads.count_matching(Collection::Endpoints, &matching(&conditions, None)).unwrap(),
                "{conditions:?}"
            );
        }
    }
}

/// Puts the database back in the layout of schema 3, which kept every
/// index entry as a row of `index_entries`: what migration 0004 moves into
/// columns of the records' rows.
fn back_to_schema_3(client: &mut postgres::Client) {
    let mut sql = String::new();
    let mut columns = std::collections::BTreeSet::new();
    for collection in Collection::ALL {
        for index in indexes::indexes(collection) {
            if matches!(index.key, indexes::IndexKey::EachOf(_)) {
                continue;
            }
            let value = format!("{}_value", index.name);
            let position = match index.order {
                indexes::IndexOrder::CreatedAt => "created_position".to_owned(),
                indexes::IndexOrder::UpdatedAt => "updated_position".to_owned(),
                indexes::IndexOrder::By(_) => format!("{}_position", index.name),
            };
            sql.push_str(&format!(
                "INSERT INTO index_entries SELECT org_id, collection, '{}', {value}, {position}, id FROM records \
                 WHERE collection = '{collection}' AND {value} IS NOT NULL;\n",
                index.name
            ));
            columns.insert(value);
            columns.insert(position);
        }
    }
    for column in columns {
        sql.push_str(&format!("ALTER TABLE records DROP COLUMN {column};\n"));
    }
    sql.push_str("UPDATE schema_version SET version = 3;");
    client.batch_execute(&sql).unwrap();
}

/// A table an import grows from nothing is analysed by the host as it
/// grows: PostgreSQL's own analysis waits for a minute, and until it comes
/// a batch's lookup of its ids is planned for the empty table it was (a
/// read of every record of the organization, not a probe of each key;
/// docs/performance.md).
#[test]
fn tables_an_import_grows_are_analysed_as_they_grow() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let dir =
        tempfile::Builder::new().permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700)).tempdir().unwrap();
    let database = TestDatabase::new();
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    let mut client = database.client();
    let organization = Uuid::now_v7();
    let analysed = |client: &mut postgres::Client| -> bool {
        let row = client
            .query_one("SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'records'", &[])
            .unwrap();
        row.get(0)
    };
    assert!(!analysed(&mut client), "a new database's records were analysed before any write");
    for batch in 0..3u128 {
        let findings: Vec<Value> = (0..4_000).map(|n| finding(&mut rng, batch * 4_000 + n)).collect();
        let write = CollectionWrite::records(Collection::VulnerabilityFindings, findings);
        pg.write_batch(organization, &mut |_, _| Ok(vec![write.clone()])).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !analysed(&mut client) {
        assert!(std::time::Instant::now() < deadline, "12,000 records written and the tables not analysed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // What the planner now counts is what was written.
    let counted: f32 =
        client.query_one("SELECT reltuples FROM pg_class WHERE relname = 'records'", &[]).unwrap().get(0);
    assert!(counted >= 12_000.0, "the planner counts {counted} records of 12,000");
}

/// An import batch is built before the organization's lock is taken, on
/// what is committed then, and kept only if nothing it read changed before
/// the lock was released to it. Here another writer resolves a finding
/// while the batch that reopens it waits for the lock: an open finding
/// cannot become reopened, a resolved one can.
#[test]
fn a_batch_built_ahead_of_the_lock_is_built_again_when_a_record_it_read_changed() {
    let summary = reopen_while_another_writer_resolves(ChangeEvent::Recorded)
        .unwrap_or_else(|error| panic!("reopening the resolved finding was refused: {error:?}"));
    assert_eq!((summary.created, summary.updated, summary.unchanged), (0, 1, 0));
    // Without the change event (which every write of the server records),
    // nothing tells that the finding changed: the batch built ahead, on the
    // finding still open, is what is kept. So it was built ahead.
    match reopen_while_another_writer_resolves(ChangeEvent::Missing) {
        Err(esr_write::ingest::ImportError::Invalid { lines, .. }) => {
            assert!(lines.iter().any(|error| error.reason.contains("cannot become reopened")), "{lines:?}")
        }
        other => panic!("the batch was not built ahead of the lock: {other:?}"),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ChangeEvent {
    Recorded,
    Missing,
}

fn reopen_while_another_writer_resolves(
    event: ChangeEvent,
) -> Result<esr_write::ingest::ImportSummary, esr_write::ingest::ImportError> {
    let dir =
        tempfile::Builder::new().permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700)).tempdir().unwrap();
    let database = TestDatabase::new();
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    let organization = Uuid::now_v7();
    let (endpoint, finding) = (Uuid::now_v7(), Uuid::now_v7());
    let line = |value: Value| format!("{value}\n").into_bytes();
    let finding_line = |status: &str| {
        let mut finding_record = common::xz_finding(&endpoint.to_string(), "high", "t-1");
        finding_record["id"] = json!(finding);
        finding_record["status"] = json!(status);
        line(finding_record)
    };
    let import = |collection: Collection, body: &[u8]| {
        esr_write::ingest::import(pg.as_ref(), organization, collection, body, 10, false)
    };
    let endpoint_line = line(json!({
        "id": endpoint, "hostname": "web-1", "operating_system": {"name": "Ubuntu 24.04", "family": "linux"},
    }));
    import(Collection::Endpoints, &endpoint_line).unwrap();
    assert_eq!(import(Collection::VulnerabilityFindings, &finding_line("open")).unwrap().created, 1);

    // The organization has no row: its writers take the advisory lock.
    let (high, low) = organization.as_u64_pair();
    let mut holder = database.client();
    let mut held = holder.transaction().unwrap();
    held.execute("SELECT pg_advisory_xact_lock($1)", &[&((high ^ low) as i64)]).unwrap();
    std::thread::scope(|scope| {
        let reopening = scope.spawn(|| import(Collection::VulnerabilityFindings, &finding_line("reopened")));
        let mut watcher = database.client();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            assert!(std::time::Instant::now() < deadline, "the import never waited for the lock");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        held.execute(
            "UPDATE records SET body = convert_to(replace(convert_from(body, 'UTF8'), '\"status\":\"open\"', \
             '\"status\":\"resolved\"'), 'UTF8') WHERE org_id = $1 AND id = $2",
            &[&organization, &finding],
        )
        .unwrap();
        if event == ChangeEvent::Recorded {
            let sequence: i64 = held
                .query_one(
                    "UPDATE write_clocks SET sequence = sequence + 1 WHERE org_id = $1 RETURNING sequence",
                    &[&organization],
                )
                .unwrap()
                .get(0);
            let moved = held
                .execute(
                    "UPDATE changes SET sequence = $3, operation = 'u' WHERE org_id = $1 AND id = $2",
                    &[&organization, &finding, &sequence],
                )
                .unwrap();
            assert_eq!(moved, 1);
        }
        held.commit().unwrap();
        reopening.join().unwrap()
    })
}

/// A line without an id is found by its natural key, a walk of an index,
/// which a batch built ahead of the lock may not rely on: such a batch is
/// built again under the lock, and a second run finds what the first made.
#[test]
fn a_batch_that_finds_records_by_their_natural_keys_is_built_under_the_lock() {
    let dir =
        tempfile::Builder::new().permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700)).tempdir().unwrap();
    let database = TestDatabase::new();
    let pg = store::open(Some(&database.url), dir.path()).unwrap();
    let organization = Uuid::now_v7();
    let lines = [json!({"hostname": "web-1", "operating_system": {"name": "Ubuntu 24.04", "family": "linux"}})]
        .iter()
        .map(|line| format!("{line}\n"))
        .collect::<String>();
    let run = || {
        let summary =
            esr_write::ingest::import(pg.as_ref(), organization, Collection::Endpoints, lines.as_bytes(), 10, false)
                .unwrap();
        (summary.created, summary.updated, summary.unchanged, summary.ids)
    };
    let (created, _, _, first_ids) = run();
    assert_eq!(created, 1);
    for _ in 0..3 {
        let (created, updated, unchanged, ids) = run();
        assert_eq!((created, updated, unchanged), (0, 0, 1));
        assert_eq!(ids, first_ids);
    }
}

/// A read snapshot whose opening statements fail (here its change log
/// waits on a lock past the call's time) leaves no pooled connection
/// inside the failed transaction: every later read on every connection
/// works.
#[test]
fn a_snapshot_that_failed_to_begin_leaves_every_pooled_connection_usable() {
    let database = TestDatabase::new();
    let dir = tempfile::tempdir().unwrap();
    let db = store::open(Some(&database.url), dir.path()).unwrap();
    let organization = store::Organization {
        organization_id: Uuid::now_v7(),
        name: "locked out".to_owned(),
        enrollment_token: "enroll_locked_out".to_owned(),
        created_at: "2026-01-01T00:00:00Z".to_owned(),
    };
    db.insert_organization(&organization).unwrap();
    let organization = organization.organization_id;
    let mut locker = database.client();
    let mut lock = locker.transaction().unwrap();
    lock.batch_execute("LOCK TABLE write_clocks IN ACCESS EXCLUSIVE MODE").unwrap();
    for _ in 0..3 {
        let from = store::ReadFrom {
            deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(300)),
            ..Default::default()
        };
        let mut reader = db.reader_from(organization, from).unwrap();
        assert!(reader.change_log().is_err(), "the change log waited on the lock past the call's time");
    }
    lock.rollback().unwrap();
    // More reads than the pool holds connections, one after another.
    for _ in 0..40 {
        db.change_log(organization).unwrap();
        assert!(db.api_key(&[7; 32]).unwrap().is_none());
    }
}
