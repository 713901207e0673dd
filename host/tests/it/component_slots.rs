//! What one organization's large answers leave for the others' calls. A
//! pooled instance slot keeps resident what its calls wrote, and wasmtime
//! 48 zeroes all of it again after every later call in that slot; the pool
//! reuses a slot for the module that used it last. So gets and exports run
//! on copies of their component (modules of their own, slots of their
//! own): a page of large records cannot make every later get-by-id reset
//! it, nor an export every later list. Drives the real components and a
//! real sled store through the host's library, on one thread (one shard of
//! the pool).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::library::{Library, findings_request as request, library};
use esr::store::Collection;

use esr_runtime::IdleSlots;
use serde_json::{Value, json};
use uuid::Uuid;

const FINDINGS: &str = "vulnerability-findings";

/// What a call that takes a slot of its own leaves there, at most.
const SMALL_CALL_BYTES: usize = 64 << 10;

/// A hundred findings with descriptions as long as their field allows,
/// the newest of the organization; returns the id of an ordinary one.
fn add_large_findings(library: &Library) -> String {
    let (page, _) =
        library.registry.current().list(FINDINGS, library.tenant.clone(), &request(&[("limit", "1")]), "t").unwrap();
    let template = serde_json::from_slice::<Vec<Value>>(&page.data).unwrap().remove(0);
    let large: Vec<Value> = (0..100)
        .map(|n| {
            let mut record = template.clone();
            record["id"] = json!(Uuid::now_v7().to_string());
            record["description"] = json!(format!("{n:04} {}", "scanner output ".repeat(540)));
            record["created_at"] = json!("2030-01-01T00:00:00Z");
            record
        })
        .collect();
    library.db.insert_records(library.organization_id, Collection::VulnerabilityFindings, &large).unwrap();
    template["id"].as_str().unwrap().to_owned()
}

/// The idle slots after a large call: they keep more than 1 MiB where
/// memory is reset in place (this process cannot swap), nothing where it
/// is released after each call.
fn after_large_call(library: &Library) -> IdleSlots {
    let idle = library.registry.idle_slots().expect("a pooled engine");
    if esr_system::swap::may_swap() {
        assert_eq!(idle.resident_bytes, 0, "released after each call: {idle:?}");
    } else {
        assert!(idle.resident_bytes > 1 << 20, "the large call's slot keeps its pages: {idle:?}");
    }
    idle
}

/// Asserts that the call made between `before` and `after` took a slot of
/// its own and left little there.
fn took_a_slot_of_its_own(call: &str, before: IdleSlots, after: IdleSlots) {
    assert_eq!(after.memories, before.memories + 1, "{call} took a slot of its own: {before:?} then {after:?}");
    let kept = after.resident_bytes.saturating_sub(before.resident_bytes);
    assert!(kept <= SMALL_CALL_BYTES, "{call} wrote a few pages: {before:?} then {after:?}");
}

#[test]
fn a_page_of_large_records_leaves_nothing_for_a_get_by_id_to_reset() {
    let library = library();
    let small_id = add_large_findings(&library);
    let plugins = library.registry.current();
    let tenant = &library.tenant;

    // `updatedAfter` is tested on each record: the page's records cross
    // into the component and back.
    let read_page = [("sort", "-created_at"), ("limit", "100"), ("updatedAfter", "2000-01-01T00:00:00Z")];
    let (page, _) = plugins.list(FINDINGS, tenant.clone(), &request(&read_page), "t").unwrap();
    assert!(page.data.len() > 800_000, "the page is large: {} bytes", page.data.len());
    let after_page = after_large_call(&library);

    let get = || plugins.get_record(FINDINGS, tenant.clone(), &small_id, &request(&[]), "t").unwrap();
    get();
    let after_get = library.registry.idle_slots().unwrap();
    took_a_slot_of_its_own("the get-by-id", after_page, after_get);

    // Later gets keep to their slot.
    for _ in 0..10 {
        get();
    }
    let after_gets = library.registry.idle_slots().unwrap();
    assert_eq!(after_gets.memories, after_get.memories, "{after_gets:?}");
    assert!(after_gets.resident_bytes - after_page.resident_bytes <= SMALL_CALL_BYTES, "{after_gets:?}");
}

#[test]
fn a_page_of_held_records_leaves_its_slot_a_few_pages() {
    let library = library();
    add_large_findings(&library);
    let plugins = library.registry.current();
    let before = library.registry.idle_slots().unwrap();

    // No filter to test: the host holds the page's records and writes them.
    let held_page = [("sort", "-created_at"), ("limit", "100")];
    let (page, _) = plugins.list(FINDINGS, library.tenant.clone(), &request(&held_page), "t").unwrap();
    assert!(page.data.len() > 800_000, "the page is large: {} bytes", page.data.len());
    let records: Vec<Value> = serde_json::from_slice(&page.data).unwrap();
    assert_eq!(records.len(), 100);
    assert!(records.iter().all(|record| record["created_at"] == "2030-01-01T00:00:00Z"), "the newest first");

    let after = library.registry.idle_slots().unwrap();
    let kept = after.resident_bytes.saturating_sub(before.resident_bytes);
    assert!(kept <= SMALL_CALL_BYTES, "its records never entered the component: {before:?} then {after:?}");
}

#[test]
fn an_export_leaves_nothing_for_a_list_to_reset() {
    let library = library();
    add_large_findings(&library);
    let plugins = library.registry.current();
    let tenant = &library.tenant;
    // The list that added the findings left its slot idle; its module's
    // next call takes that one.
    let before_export = library.registry.idle_slots().unwrap();

    let chunk = plugins.export_chunk(FINDINGS, tenant.clone(), &request(&[]), None, (1000, 4 << 20), "t").unwrap();
    assert!(chunk.lines.len() > 800_000, "the chunk is large: {} bytes", chunk.lines.len());
    let after_export = after_large_call(&library);
    assert_eq!(after_export.memories, before_export.memories + 1, "the export took a slot of its own");

    plugins.list(FINDINGS, tenant.clone(), &request(&[("limit", "1")]), "t").unwrap();
    let after_list = library.registry.idle_slots().unwrap();
    assert_eq!(after_list.memories, after_export.memories, "the list kept to its slot: {after_list:?}");
    let kept = after_list.resident_bytes.saturating_sub(after_export.resident_bytes);
    assert!(kept <= SMALL_CALL_BYTES, "the list did not take the export's slot: {after_export:?} then {after_list:?}");
}
