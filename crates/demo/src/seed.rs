//! The demo data set: two organizations with generated records and one
//! API key each, written on first start with `--demo`.

use std::path::Path;

use esr_contract::Collection;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{DEMO_ANCHOR_UNIX, DemoSpec, Generator};
use esr_auth::keys::{self, ALL_READ_SCOPES};
use esr_store::{CollectionWrite, Store};
use esr_system::clock::format_timestamp;
use esr_system::private_files::write_private;

/// The demo organizations: name, generator seed, hostname prefix.
const DEMO_ORGANIZATIONS: [(&str, u64, &str); 2] = [("Acme Corp", 1, "acme"), ("Globex", 2, "globex")];
const DEMO_MARKER: &str = "demo";
/// The file the demo keys are written to, in the data directory.
pub const DEMO_KEYS_FILE: &str = "demo-keys.json";

/// `<data-dir>/demo-keys.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DemoKeys {
    pub organizations: Vec<DemoKey>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DemoKey {
    pub name: String,
    pub organization_id: Uuid,
    pub api_key: String,
}

/// Fills an empty database with the demo data set and returns its keys;
/// `None` when the database already holds data (it is then left alone).
pub fn seed_demo_if_empty(db: &dyn Store, data_dir: &Path) -> anyhow::Result<Option<DemoKeys>> {
    match db.marker(DEMO_MARKER)?.as_deref() {
        Some("complete") => return Ok(None),
        // A load that was interrupted: start it again from nothing.
        Some(_) => db.clear_data()?,
        None if !db.is_empty()? => return Ok(None),
        None => {}
    }
    db.set_marker(DEMO_MARKER, "in-progress")?;
    let mut keys = Vec::new();
    for (name, seed, prefix) in DEMO_ORGANIZATIONS {
        let organization = keys::new_organization(name, format_timestamp(DEMO_ANCHOR_UNIX));
        let organization_id = organization.organization_id;
        seed_organization(db, organization_id, seed, prefix)?;
        db.insert_organization(&organization)?;
        let created = keys::create_key(db, organization_id, "demo", &ALL_READ_SCOPES, None)?;
        keys.push(DemoKey { name: name.to_owned(), organization_id, api_key: created.api_key });
    }
    let keys = DemoKeys { organizations: keys };
    write_private(&data_dir.join(DEMO_KEYS_FILE), &serde_json::to_vec_pretty(&keys)?)?;
    db.set_marker(DEMO_MARKER, "complete")?;
    Ok(Some(keys))
}

/// The file `esr seed` writes the new organization's key to.
pub const SEED_KEYS_FILE: &str = "seed-keys.json";
/// How many endpoints' records go into one durable write.
const ENDPOINTS_PER_WRITE: usize = 50;
/// How many extra scopes go into one durable write.
const SCOPES_PER_WRITE: usize = 5_000;

/// Adds a generated organization of the given size (for benchmarks), with
/// `team_scopes` scopes beyond its own, and writes its key to
/// `<data-dir>/seed-keys.json`, in the demo-keys format.
pub fn seed_generated(
    db: &dyn Store,
    data_dir: &Path,
    spec: DemoSpec,
    team_scopes: usize,
    mut progress: impl FnMut(usize),
) -> anyhow::Result<DemoKeys> {
    let name = format!("Seeded {}x{}", spec.endpoints, spec.findings_per_endpoint);
    let organization = keys::new_organization(&name, format_timestamp(DEMO_ANCHOR_UNIX));
    let organization_id = organization.organization_id;
    let mut generator = Generator::new(7, spec, DEMO_ANCHOR_UNIX, "seed");
    db.bulk_insert_records(organization_id, Collection::Scopes, &generator.scopes())?;
    let scopes = generator.team_scopes(team_scopes);
    for batch in scopes.chunks(SCOPES_PER_WRITE) {
        db.bulk_insert_records(organization_id, Collection::Scopes, batch)?;
    }
    let mut done = 0;
    loop {
        let (mut endpoints, mut findings, mut targets) = (Vec::new(), Vec::new(), Vec::new());
        while endpoints.len() < ENDPOINTS_PER_WRITE {
            let Some(batch) = generator.next_endpoint() else { break };
            endpoints.push(batch.endpoint);
            findings.extend(batch.findings);
            targets.extend(batch.targets);
        }
        if endpoints.is_empty() {
            break;
        }
        done += endpoints.len();
        db.bulk_insert_records(organization_id, Collection::Endpoints, &endpoints)?;
        db.bulk_insert_records(organization_id, Collection::VulnerabilityFindings, &findings)?;
        db.bulk_insert_records(organization_id, Collection::RemediationTargets, &targets)?;
        progress(done);
    }
    db.finish_bulk_load()?;
    db.insert_organization(&organization)?;
    let created = keys::create_key(db, organization_id, "seed", &ALL_READ_SCOPES, None)?;
    let keys = DemoKeys { organizations: vec![DemoKey { name, organization_id, api_key: created.api_key }] };
    write_private(&data_dir.join(SEED_KEYS_FILE), &serde_json::to_vec_pretty(&keys)?)?;
    Ok(keys)
}

/// The keys written by an earlier demo load, if the file is still there.
pub fn read_demo_keys(data_dir: &Path) -> Option<DemoKeys> {
    let bytes = std::fs::read(data_dir.join(DEMO_KEYS_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn seed_organization(db: &dyn Store, organization_id: Uuid, seed: u64, prefix: &str) -> anyhow::Result<()> {
    let mut generator = Generator::new(seed, DemoSpec::DEMO, DEMO_ANCHOR_UNIX, prefix);
    db.insert_records(organization_id, Collection::Scopes, &generator.scopes())?;
    let (mut endpoints, mut findings, mut targets) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(batch) = generator.next_endpoint() {
        endpoints.push(batch.endpoint);
        findings.extend(batch.findings);
        targets.extend(batch.targets);
    }
    db.insert_records(organization_id, Collection::Endpoints, &endpoints)?;
    for (collection, records) in
        [(Collection::VulnerabilityFindings, findings), (Collection::RemediationTargets, targets)]
    {
        let mut write = CollectionWrite::records(collection, Vec::new());
        for record in &records {
            let id = record.get("id").and_then(serde_json::Value::as_str).and_then(|id| Uuid::parse_str(id).ok());
            if let Some(id) = id {
                write.history.extend(crate::history::entries(collection, record).into_iter().map(|e| (id, e)));
            }
        }
        write.records = records;
        // A backend may build a batch again (a retried transaction).
        db.write_batch(organization_id, &mut |_, _| Ok(vec![write.clone()]))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// Every record of a collection, in id order.
    fn records(db: &dyn Store, organization: Uuid, collection: Collection) -> Vec<Value> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = db
                .reader(organization)
                .and_then(|mut reader| reader.scan(collection, &esr_store::RecordWalk::new(1000).after(after)))
                .expect("scan");
            let Some((last, _)) = page.last() else { return all };
            after = Some(*last);
            all.extend(page.iter().map(|(_, bytes)| serde_json::from_slice::<Value>(bytes).expect("json")));
        }
    }

    #[test]
    fn the_demo_data_set_validates_and_reimports_unchanged() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let db = esr_store_sled::SledStore::open(dir.path())?;
        let db = std::sync::Arc::new(db);
        let keys = seed_demo_if_empty(db.as_ref(), dir.path())?.expect("demo seeded");
        let organization = keys.organizations[0].organization_id;
        for collection in [
            Collection::Endpoints,
            Collection::Scopes,
            Collection::VulnerabilityFindings,
            Collection::RemediationTargets,
        ] {
            let before = records(&*db, organization, collection);
            assert!(!before.is_empty(), "{collection}");
            let ndjson: String = before.iter().map(|line| format!("{line}\n")).collect();
            let summary =
                esr_write::ingest::import(&*db, organization, collection, ndjson.as_bytes(), usize::MAX, false)?;
            assert_eq!((summary.created, summary.updated, summary.unchanged), (0, 0, before.len()), "{collection}");
            assert_eq!(records(&*db, organization, collection), before, "{collection}: nothing rewritten");
        }
        Ok(())
    }
}
