//! What one organization's large answers leave for the others' calls. A
//! pooled instance slot keeps resident what its calls wrote, and wasmtime
//! 48 zeroes all of it again after every later call in that slot; the pool
//! reuses a slot for the module that used it last. So a get-by-id runs on
//! a copy of its component (modules of their own, slots of their own), and
//! a page of large records cannot make every later get-by-id reset it.
//! Drives the real components and a real sled store through the host's
//! library, on one thread (one shard of the pool).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::library::{findings_request as request, library};
use esr::store::Collection;

use esr_runtime::IdleSlots;
use serde_json::{Value, json};
use uuid::Uuid;

#[test]
fn a_page_of_large_records_leaves_nothing_for_a_get_by_id_to_reset() {
    let library = library();
    let (db, registry, tenant) = (&library.db, &library.registry, &library.tenant);
    let organization_id = library.organization_id;
    let plugins = registry.current();
    let findings = "vulnerability-findings";
    let (page, _) = plugins.list(findings, tenant.clone(), &request(&[("limit", "1")]), "t").unwrap();
    let template = serde_json::from_slice::<Vec<Value>>(&page.data).unwrap().remove(0);
    let small_id = template["id"].as_str().unwrap().to_owned();

    // A hundred findings as large as the fields allow a description, the
    // newest of the organization.
    let large: Vec<Value> = (0..100)
        .map(|n| {
            let mut record = template.clone();
            record["id"] = json!(Uuid::now_v7().to_string());
            record["description"] = json!(format!("{n:04} {}", "scanner output ".repeat(540)));
            record["created_at"] = json!("2030-01-01T00:00:00Z");
            record
        })
        .collect();
    db.insert_records(organization_id, Collection::VulnerabilityFindings, &large).unwrap();

    let (page, _) =
        plugins.list(findings, tenant.clone(), &request(&[("sort", "-created_at"), ("limit", "100")]), "t").unwrap();
    assert!(page.data.len() > 800_000, "the page is large: {} bytes", page.data.len());
    let after_page = registry.idle_slots().expect("a pooled engine");

    // Resets in place (no swap for this process) keep what a call wrote;
    // where the process may swap, every page is released instead.
    let in_place = !esr_system::swap::may_swap();
    if in_place {
        assert!(after_page.resident_bytes > 1 << 20, "the page's slot keeps its pages: {after_page:?}");
    } else {
        assert_eq!(after_page.resident_bytes, 0, "released after each call: {after_page:?}");
    }

    let get = || plugins.get_record(findings, tenant.clone(), &small_id, &request(&[]), "t").unwrap();
    get();
    let after_get = registry.idle_slots().unwrap();
    assert_eq!(
        after_get.memories,
        after_page.memories + 1,
        "the get-by-id took a slot of its own, not the page's: {after_page:?} then {after_get:?}"
    );
    let kept_by_get = |slots: IdleSlots| slots.resident_bytes.saturating_sub(after_page.resident_bytes);
    assert!(kept_by_get(after_get) <= 64 << 10, "a get-by-id writes a few pages: {after_get:?}");

    // Later gets keep to their slot, and the page's keeps its own.
    for _ in 0..10 {
        get();
    }
    let after_gets = registry.idle_slots().unwrap();
    assert_eq!(after_gets.memories, after_get.memories, "{after_gets:?}");
    assert!(kept_by_get(after_gets) <= 64 << 10, "{after_gets:?}");
}
