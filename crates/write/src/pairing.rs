//! A vulnerability finding belongs to at most one remediation target, and
//! the two sides say so together: the finding's `remediation_target_id`
//! names the target exactly when the target's `finding_ids` lists the
//! finding. The write path keeps both (`ingest`, `reports`); `esr check`
//! verifies them with [`verify`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use esr_contract::Collection;
use serde_json::Value;
use uuid::Uuid;

use esr_store::{MAX_SCAN, RecordWalk, Store, StoreError, StoreReader, for_each_by_index};

const FINDINGS: Collection = Collection::VulnerabilityFindings;
const TARGETS: Collection = Collection::RemediationTargets;

/// Every disagreement between findings and targets, in every organization,
/// each a line naming the records.
pub fn verify(db: &dyn Store) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    for organization in db.organizations()? {
        let mut reader = db.reader(organization.organization_id)?;
        problems.extend(verify_organization(reader.as_mut())?.into_iter().map(|problem| {
            format!("organization {} ({}): {problem}", organization.organization_id, organization.name)
        }));
    }
    Ok(problems)
}

fn verify_organization(reader: &mut dyn StoreReader) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    // Which target lists each finding (the first; a second is a problem).
    let mut listed_by: HashMap<String, String> = HashMap::new();
    for_each_by_index(reader, TARGETS, esr_contract::indexes::CREATED_AT, "", |target| {
        let target_id = text(&target, "id");
        for finding_id in target["finding_ids"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if let Some(first) = listed_by.insert(finding_id.to_owned(), target_id.clone()) {
                problems.push(format!("finding {finding_id} is listed by two targets: {first} and {target_id}"));
            }
        }
    })?;
    let mut after: Option<Uuid> = None;
    loop {
        let page = reader.scan(FINDINGS, &RecordWalk::new(MAX_SCAN).after(after))?;
        for (id, bytes) in &page {
            let finding: Value = serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let finding_id = id.to_string();
            let named = finding["remediation_target_id"].as_str();
            match (named, listed_by.remove(&finding_id)) {
                (Some(named), Some(lister)) if named == lister => {}
                (Some(named), Some(lister)) => {
                    problems.push(format!("finding {finding_id} names target {named}, but target {lister} lists it"))
                }
                (Some(named), None) => {
                    problems.push(format!("finding {finding_id} names target {named}, which does not list it"))
                }
                (None, Some(lister)) => {
                    problems.push(format!("target {lister} lists finding {finding_id}, which names no target"))
                }
                (None, None) => {}
            }
        }
        match page.last() {
            Some((id, _)) if page.len() == MAX_SCAN => after = Some(*id),
            _ => break,
        }
    }
    let mut dangling: Vec<(String, String)> = listed_by.into_iter().collect();
    dangling.sort();
    problems.extend(
        dangling
            .into_iter()
            .map(|(finding, target)| format!("target {target} lists finding {finding}, which is not stored")),
    );
    Ok(problems)
}

fn text(record: &Value, field: &str) -> String {
    record[field].as_str().unwrap_or_default().to_owned()
}

/// The target a finding names.
pub fn named_target(finding: Option<&Value>) -> Option<String> {
    finding?.get("remediation_target_id")?.as_str().map(str::to_owned)
}

/// The findings a target lists.
pub fn listed_findings(target: Option<&Value>) -> BTreeSet<String> {
    target
        .and_then(|target| target.get("finding_ids")?.as_array())
        .map(|ids| ids.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The targets whose lists follow findings written with another
/// `remediation_target_id` than they had (`before`, by finding id): each
/// target left drops the finding, each target named lists it; a target
/// left with no open finding (moved away or closed) and not being worked
/// on becomes `obsolete`. Stamped `now`.
pub fn targets_following(
    reader: &mut dyn StoreReader,
    before: &HashMap<Uuid, Option<String>>,
    written: &BTreeMap<Uuid, Value>,
    now: &str,
) -> Result<Followers, StoreError> {
    let mut dropped: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut added: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Targets of findings written closed: perhaps nothing of theirs is open now.
    let mut closed: BTreeSet<String> = BTreeSet::new();
    for (id, finding) in written {
        let (old, new) = (before.get(id).cloned().flatten(), named_target(Some(finding)));
        if let Some(named) = &new
            && !is_open(finding)
        {
            closed.insert(named.clone());
        }
        if old == new {
            continue;
        }
        if let Some(old) = old {
            dropped.entry(old).or_default().insert(id.to_string());
        }
        if let Some(new) = new {
            added.entry(new).or_default().insert(id.to_string());
        }
    }
    let touched: BTreeSet<&String> = dropped.keys().chain(added.keys()).chain(closed.iter()).collect();
    let mut followers = Followers::default();
    for mut target in read_all(reader, TARGETS, touched)? {
        let id = text(&target, "id");
        let mut ids: Vec<Value> = target["finding_ids"].as_array().cloned().unwrap_or_default();
        let before = ids.len();
        if let Some(dropped) = dropped.get(&id) {
            ids.retain(|finding| finding.as_str().is_none_or(|finding| !dropped.contains(finding)));
        }
        let mut changed = ids.len() != before;
        for finding in added.get(&id).into_iter().flatten() {
            if !ids.iter().any(|listed| listed.as_str() == Some(finding)) {
                ids.push(Value::String(finding.clone()));
                changed = true;
            }
        }
        target["finding_ids"] = Value::Array(ids);
        if (changed || closed.contains(&id)) && obsolete_if_nothing_open(reader, &mut target, written)? {
            followers.obsoleted.extend(Uuid::parse_str(&id).ok());
            changed = true;
        }
        if changed {
            target["updated_at"] = Value::String(now.to_owned());
            followers.records.push(target);
        }
    }
    Ok(followers)
}

/// Records an import changes to keep links whole, and the targets among
/// them that became `obsolete` (their history says so).
#[derive(Default)]
pub struct Followers {
    pub records: Vec<Value>,
    pub obsoleted: Vec<Uuid>,
}

fn is_open(finding: &Value) -> bool {
    matches!(finding.get("status").and_then(Value::as_str), Some("open" | "reopened"))
}

/// A target not being worked on whose findings are all closed or gone
/// becomes `obsolete`, as a report makes it (`docs/scanner-reports.md`,
/// remediation targets): whether this one did. Its findings' states are
/// those `written` gives, else the stored ones.
fn obsolete_if_nothing_open(
    reader: &mut dyn StoreReader,
    target: &mut Value,
    written: &BTreeMap<Uuid, Value>,
) -> Result<bool, StoreError> {
    let idle = matches!(
        target.get("status").and_then(Value::as_str),
        Some("identified" | "actionable" | "queued" | "pending_approval" | "blocked" | "failed")
    );
    if !idle {
        return Ok(false);
    }
    let listed = listed_findings(Some(target));
    let mut unwritten = BTreeSet::new();
    for finding in &listed {
        match Uuid::parse_str(finding).ok().and_then(|id| written.get(&id)) {
            Some(finding) if is_open(finding) => return Ok(false),
            Some(_) => {}
            None => {
                unwritten.insert(finding);
            }
        }
    }
    if read_all(reader, FINDINGS, unwritten)?.iter().any(is_open) {
        return Ok(false);
    }
    target["status"] = Value::String("obsolete".into());
    Ok(true)
}

/// The findings (and the other targets) that follow targets written with
/// other `finding_ids` than they had (`before`, by target id): a finding a
/// target now lists names it, and leaves the target it named before, which
/// drops it; a finding a target no longer lists names no target (unless it
/// names another), and one left with nothing open becomes `obsolete` as
/// in [`targets_following`]. Returns (findings, other targets), stamped
/// `now`.
pub fn findings_following(
    reader: &mut dyn StoreReader,
    before: &HashMap<Uuid, BTreeSet<String>>,
    written: &BTreeMap<Uuid, Value>,
    now: &str,
) -> Result<(Vec<Value>, Followers), StoreError> {
    let mut claimed: BTreeMap<String, String> = BTreeMap::new();
    let mut released: BTreeMap<String, String> = BTreeMap::new();
    for (id, target) in written {
        let old = before.get(id).cloned().unwrap_or_default();
        let new = listed_findings(Some(target));
        for finding in old.difference(&new) {
            released.insert(finding.clone(), id.to_string());
        }
        for finding in new.difference(&old) {
            claimed.insert(finding.clone(), id.to_string());
        }
    }
    let touched: BTreeSet<&String> = claimed.keys().chain(released.keys()).collect();
    let written_ids: BTreeSet<String> = written.keys().map(Uuid::to_string).collect();
    let mut findings = Vec::new();
    let mut trimmed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for mut finding in read_all(reader, FINDINGS, touched)? {
        let id = text(&finding, "id");
        let named = named_target(Some(&finding));
        let next = match (claimed.get(&id), released.get(&id)) {
            (Some(claimer), _) => Some(claimer.clone()),
            (None, Some(releaser)) if named.as_deref() == Some(releaser.as_str()) => None,
            _ => continue,
        };
        if next == named {
            continue;
        }
        if let Some(previous) = named.filter(|previous| !written_ids.contains(previous)) {
            trimmed.entry(previous).or_default().insert(id.clone());
        }
        finding["remediation_target_id"] = next.map_or(Value::Null, Value::String);
        finding["updated_at"] = Value::String(now.to_owned());
        findings.push(finding);
    }
    let mut targets = Followers::default();
    let none_written = BTreeMap::new();
    for mut target in read_all(reader, TARGETS, trimmed.keys().collect())? {
        let id = text(&target, "id");
        let Some(left) = trimmed.get(&id) else { continue };
        if let Some(ids) = target["finding_ids"].as_array_mut() {
            ids.retain(|finding| finding.as_str().is_none_or(|finding| !left.contains(finding)));
        }
        if obsolete_if_nothing_open(reader, &mut target, &none_written)? {
            targets.obsoleted.extend(Uuid::parse_str(&id).ok());
        }
        target["updated_at"] = Value::String(now.to_owned());
        targets.records.push(target);
    }
    Ok((findings, targets))
}

/// The stored records of these ids that exist (ids that are not UUIDs
/// name nothing).
fn read_all(
    reader: &mut dyn StoreReader,
    collection: Collection,
    ids: BTreeSet<&String>,
) -> Result<Vec<Value>, StoreError> {
    let ids: Vec<Uuid> = ids.into_iter().filter_map(|id| Uuid::parse_str(id).ok()).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    reader
        .get_many(collection, &ids)?
        .into_iter()
        .map(|(_, bytes)| serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string())))
        .collect()
}
