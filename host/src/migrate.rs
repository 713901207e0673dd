//! `esr migrate`: copies a sled deployment into a PostgreSQL database,
//! through the store seam only: secrets (the cursor key, so cursors keep
//! working), the admin token's SHA-256 (the hosts compare it; the token
//! stays in the operator's hands), markers, organizations, every record in id
//! order with its index entries and counts, the API keys under their
//! hashes (so the keys keep working), and the webhook subscriptions with
//! their positions, batches in flight and delivery logs. The copy is streamed per organization
//! and collection in bounded batches and checked at the end.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::store::{self, Collection, CollectionWrite, MAX_SCAN, RecordWalk, Store};
use esr_auth::admin_token::{ADMIN_TOKEN_DIGEST_SECRET, ADMIN_TOKEN_FILE, token_digest};

/// The most records one write to the target holds (a transaction each):
/// bounds the memory a copy takes, whatever the deployment's size.
const BATCH_RECORDS: usize = 5_000;

/// A progress line on stderr every this many records of one collection.
const PROGRESS_EVERY: u64 = 100_000;

/// What a migration copied.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Copied {
    pub organizations: usize,
    pub api_keys: usize,
    pub records: u64,
    pub secrets: usize,
    pub documents: usize,
    pub audit_entries: usize,
}

/// Copies the sled deployment in `from` into the empty PostgreSQL database
/// at `to`, then checks that every index agrees with the records and that
/// every organization holds as many records per collection as in `from`.
/// Refuses, writing nothing, a directory that holds no sled store, one a
/// running server holds, and a database that already holds organizations
/// or keys. Progress goes to stderr.
pub fn migrate(from: &Path, to: &str) -> anyhow::Result<Copied> {
    if !(to.starts_with("postgres://") || to.starts_with("postgresql://")) {
        bail!("--to must be a PostgreSQL URL (postgres://… or postgresql://…)");
    }
    let source = store::open_existing_sled(from).map_err(|error| match error {
        store::StoreError::Locked(dir) => anyhow::anyhow!(
            "the data directory {dir} is in use by a running esr server: stop it first (a copy is of data at rest)"
        ),
        other => anyhow::Error::from(other),
    })?;
    let target = store::open(Some(to), from).context("opening the target database")?;
    if !target.is_empty()? || !target.api_keys(None)?.is_empty() {
        bail!(
            "the target database already holds organizations or API keys; nothing was copied: migrate into a new, \
             empty database (createdb), or drop this one and create it again"
        );
    }
    let mut copied = Copied::default();

    // The admin token of a sled deployment is a file beside its store; the
    // database keeps only its digest, which every host compares.
    match std::fs::read_to_string(from.join(ADMIN_TOKEN_FILE)) {
        Ok(token) if !token.trim().is_empty() => {
            target.set_secret(ADMIN_TOKEN_DIGEST_SECRET, &token_digest(&token))?;
            copied.secrets += 1;
        }
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => eprintln!(
            "no {ADMIN_TOKEN_FILE} in {}: the database gets an admin token of its own (or keep setting ESR_ADMIN_TOKEN)",
            from.display()
        ),
        Err(error) => {
            return Err(error).with_context(|| format!("reading {}", from.join(ADMIN_TOKEN_FILE).display()));
        }
    }
    for (name, value) in source.secrets()? {
        target.set_secret(&name, &value)?;
        copied.secrets += 1;
    }
    for organization in source.organizations()? {
        target.insert_organization(&organization)?;
        for collection in Collection::ALL {
            let records = copy_collection(source.as_ref(), target.as_ref(), organization.organization_id, collection)?;
            eprintln!(
                "{} ({}): {collection}: {records} records copied",
                organization.name, organization.organization_id
            );
            copied.records += records;
        }
        // The copy's feed goes on from the source's sequence with nothing
        // retained before it: a client's old cursor is told to list again
        // (`410`), never handed later changes under lower sequences.
        let log = source.change_log(organization.organization_id)?;
        target.continue_changes_from(organization.organization_id, log.latest)?;
        copied.organizations += 1;
    }
    target.finish_bulk_load()?;

    for (hash, key) in source.api_keys_with_hashes()? {
        target.insert_api_key(&hash, &key)?;
        copied.api_keys += 1;
    }

    for kind in document_kinds() {
        for document in source.documents(kind)? {
            if target.swap_document(kind, &document.id, None, &document.body)?.is_none() {
                bail!("the database already holds the {kind} document {}", document.id);
            }
            copied.documents += 1;
        }
    }

    // The audit trails (each organization's, and the refusals that named
    // none), oldest first; entries get the target's positions.
    let trails = source.organizations()?.into_iter().map(|organization| organization.organization_id);
    for trail in trails.chain([uuid::Uuid::nil()]) {
        let mut after = None;
        loop {
            let page = source.audit_page(trail, after, None, esr_store::MAX_SCAN)?;
            let entries: Vec<esr_store::AuditEntry> = page.entries.into_iter().map(|(_, entry)| entry).collect();
            target.append_audit(&entries)?;
            copied.audit_entries += entries.len();
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }

    // Last: a marker such as the demo's `complete` must not vouch for a copy that stopped half-way.
    for (name, value) in source.markers()? {
        target.set_marker(&name, &value)?;
    }

    eprintln!("checking the copy");
    check_copy(&source, &target)?;
    Ok(copied)
}

/// Copies one organization's records of one collection in id order, in
/// batches of at most [`BATCH_RECORDS`]; returns how many.
fn copy_collection(
    source: &dyn Store,
    target: &dyn Store,
    organization: uuid::Uuid,
    collection: Collection,
) -> anyhow::Result<u64> {
    let mut reader = source.reader(organization)?;
    let (mut after, mut copied, mut batch) = (None, 0u64, Vec::with_capacity(BATCH_RECORDS));
    // Each record's status history, copied after its record.
    let mut histories: Vec<(uuid::Uuid, Vec<u8>)> = Vec::new();
    loop {
        let page = reader.scan(collection, &RecordWalk::new(MAX_SCAN).after(after))?;
        let Some((last, _)) = page.last() else { break };
        after = Some(*last);
        for (id, bytes) in page {
            let record: Value = serde_json::from_slice(&bytes)
                .map_err(|error| store::StoreError::Corrupt(format!("{collection} record {id}: {error}")))?;
            // The target stores what it is given re-encoded: it must be the same bytes (ETags are of them).
            if serde_json::to_vec(&record)? != bytes {
                bail!("{collection} record {id} would not be stored byte for byte alike; the copy stopped there");
            }
            batch.push(record);
            histories.extend(reader.history(collection, id)?.into_iter().map(|entry| (id, entry)));
        }
        if batch.len() >= BATCH_RECORDS {
            copied += write(target, organization, collection, &mut batch, copied)?;
            write_histories(target, organization, collection, &mut histories)?;
        }
    }
    copied += write(target, organization, collection, &mut batch, copied)?;
    write_histories(target, organization, collection, &mut histories)?;
    Ok(copied)
}

/// Appends the histories of records already copied, in one batch (which
/// changes no record, so the feed records nothing), and empties them.
fn write_histories(
    target: &dyn Store,
    organization: uuid::Uuid,
    collection: Collection,
    histories: &mut Vec<(uuid::Uuid, Vec<u8>)>,
) -> anyhow::Result<()> {
    if histories.is_empty() {
        return Ok(());
    }
    let history = std::mem::take(histories);
    target.write_batch(organization, &mut |_, _| {
        Ok(vec![CollectionWrite { collection, history: history.clone(), ..CollectionWrite::new(collection) }])
    })?;
    Ok(())
}

/// Writes and empties one batch; returns how many records it held.
fn write(
    target: &dyn Store,
    organization: uuid::Uuid,
    collection: Collection,
    batch: &mut Vec<Value>,
    copied_before: u64,
) -> anyhow::Result<u64> {
    if batch.is_empty() {
        return Ok(0);
    }
    target.bulk_insert_records(organization, collection, batch)?;
    let written = batch.len() as u64;
    batch.clear();
    if (copied_before + written) / PROGRESS_EVERY > copied_before / PROGRESS_EVERY {
        eprintln!("{organization}: {collection}: {} records copied so far", copied_before + written);
    }
    Ok(written)
}

/// Checks the target against the source: every index entry and count
/// agrees with the records, each organization has as many records per
/// collection, and the same keys, markers and secrets are there.
fn check_copy(source: &Arc<dyn Store>, target: &Arc<dyn Store>) -> anyhow::Result<()> {
    let problems = target.verify_indexes()?;
    if !problems.is_empty() {
        bail!("the copy's indexes disagree with its records: {}", problems.join("; "));
    }
    for organization in source.organizations()? {
        let id = organization.organization_id;
        let (mut from, mut to) = (source.reader(id)?, target.reader(id)?);
        for collection in Collection::ALL {
            let (expected, found) = (from.count(collection)?, to.count(collection)?);
            if expected != found {
                bail!("{id}: {collection}: {found} records copied of {expected}");
            }
        }
    }
    if source.api_keys_with_hashes()? != target.api_keys_with_hashes()? {
        bail!("the API keys copied differ from the deployment's");
    }
    for kind in document_kinds() {
        let bodies = |store: &Arc<dyn Store>| -> anyhow::Result<Vec<(String, Vec<u8>)>> {
            Ok(store.documents(kind)?.into_iter().map(|document| (document.id, document.body)).collect())
        };
        if bodies(source)? != bodies(target)? {
            bail!("the {kind} documents copied differ from the deployment's");
        }
    }
    let copied_secrets = target.secrets()?;
    if let Some((name, _)) = source.secrets()?.iter().find(|secret| !copied_secrets.contains(secret)) {
        bail!("the secret {name} was not copied");
    }
    Ok(())
}

/// Every kind of document the host keeps: webhook subscriptions and their
/// deliveries, API clients, signing keys.
fn document_kinds() -> impl Iterator<Item = &'static str> {
    esr_webhooks::subscription::DOCUMENT_KINDS
        .into_iter()
        .chain([esr_oauth::clients::KIND, esr_oauth::signing_keys::KIND])
}
