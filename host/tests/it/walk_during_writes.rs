//! A cursor walk while records are being added: every record that existed
//! when the walk began comes back exactly once, whatever the sort, even
//! when the new records sort before, between and after the page already
//! read. Drives the real components and a real sled store through the
//! host's library (the HTTP layer only seals and opens the cursors, which
//! `api.rs` covers).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::library::{findings_request as request, library};
use esr::store::Collection;

use std::collections::BTreeSet;

use esr_runtime::Tenant;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use uuid::Uuid;

#[test]
fn records_added_during_a_walk_never_duplicate_or_skip_existing_ones() {
    let library = library();
    let (db, organization_id, tenant) = (&library.db, library.organization_id, &library.tenant);
    let plugins = library.registry.current();
    let mut rng = StdRng::seed_from_u64(7);

    let template: Value = {
        let (page, _) =
            plugins.list("vulnerability-findings", tenant.clone(), &request(&[("limit", "1")]), "t").unwrap();
        serde_json::from_slice::<Vec<Value>>(&page.data).unwrap().remove(0)
    };

    for sort in ["created_at", "-created_at", "-severity", "cvss", "-updated_at"] {
        for filter in [None, Some(("severity", "critical,high"))] {
            let mut query = vec![("sort", sort), ("limit", "60")];
            query.extend(filter);
            let before: BTreeSet<String> = {
                let mut all = query.clone();
                all.retain(|(name, _)| *name != "limit");
                all.push(("limit", "100"));
                walk(&plugins, tenant, &all, |_| {}).into_iter().collect()
            };
            let mut added = BTreeSet::new();
            let walked = walk(&plugins, tenant, &query, |_| {
                // Between pages: new findings with timestamps and values
                // anywhere in the range, so some sort before the cursor.
                let records: Vec<Value> = (0..5)
                    .map(|_| {
                        let id = Uuid::now_v7().to_string();
                        added.insert(id.clone());
                        let day = rng.gen_range(1..=28);
                        let mut record = template.clone();
                        record["id"] = json!(id);
                        record["created_at"] = json!(format!("2025-06-{day:02}T00:00:00Z"));
                        record["updated_at"] = json!(format!("2026-0{}-{day:02}T00:00:00Z", rng.gen_range(1..=9)));
                        record["first_seen_at"] = record["created_at"].clone();
                        record["severity"] = json!(["critical", "high", "low"][rng.gen_range(0..3)]);
                        record["cvss"]["base_score"] = json!(rng.gen_range(0.0..10.0_f64));
                        record
                    })
                    .collect();
                db.insert_records(organization_id, Collection::VulnerabilityFindings, &records).unwrap();
            });
            let unique: BTreeSet<&String> = walked.iter().collect();
            assert_eq!(unique.len(), walked.len(), "sort {sort} {filter:?}: a record came back twice");
            let seen: BTreeSet<String> = walked.iter().filter(|id| !added.contains(*id)).cloned().collect();
            assert_eq!(seen, before, "sort {sort} {filter:?}: every existing record exactly once");
        }
    }
}

/// Walks a list by cursor, calling `between` after each page; the ids in
/// the order returned.
fn walk(
    plugins: &esr_runtime::ComponentSet,
    tenant: &Tenant,
    query: &[(&str, &str)],
    mut between: impl FnMut(usize),
) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for page_number in 0.. {
        let mut query = query.to_vec();
        if let Some(cursor) = &cursor {
            query.push(("cursor", cursor.as_str()));
        }
        let (page, _) = plugins.list("vulnerability-findings", tenant.clone(), &request(&query), "t").unwrap();
        let records: Vec<Value> = serde_json::from_slice(&page.data).unwrap();
        ids.extend(records.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
        between(page_number);
    }
    ids
}
