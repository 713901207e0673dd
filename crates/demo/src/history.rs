//! A plausible status history for the demo's findings and targets, worked
//! out from each record's own times: what a newcomer's first
//! `GET …/{id}/history` shows (a finding created by a report, resolved by a
//! later one, a suppression that expired; a target's way through the state
//! machine). Deterministic, as the demo is.

use esr_contract::Collection;
use esr_contract::time::Timestamp;
use serde_json::Value;
use sha2::{Digest, Sha256};

use esr_write::ingest::{CauseKind, HistoryCause};

/// The history entries of a demo record of `collection`, oldest first,
/// ending with its current status.
pub fn entries(collection: Collection, record: &Value) -> Vec<Vec<u8>> {
    let text = |field: &str| record.get(field).and_then(Value::as_str);
    let time = |field: &str| text(field).and_then(Timestamp::parse);
    let (Some(id), Some(status), Some(created), Some(updated)) =
        (text("id"), text("status"), time("created_at"), time("updated_at"))
    else {
        return Vec::new();
    };
    let start = match collection {
        Collection::VulnerabilityFindings => time("first_seen_at").unwrap_or(created),
        _ => created,
    };
    let end = Timestamp(updated.0.max(start.0));
    // `n` of `of` evenly between the record's first time and its last.
    let at = |n: i64, of: i64| Timestamp(start.0 + (end.0 - start.0) / of * n).format();
    let scanner = record.pointer("/source/scanner").and_then(Value::as_str).map(str::to_owned);
    let report = |moment: &str| cause(CauseKind::Report, scanner.clone(), id, moment);
    let import = |moment: &str| cause(CauseKind::Import, None, id, moment);
    let mut steps: Vec<(String, &str, HistoryCause)> = Vec::new();
    let mut step = |moment: String, status: &'static str, cause: HistoryCause| steps.push((moment, status, cause));
    match (collection, status) {
        (Collection::VulnerabilityFindings, "resolved") => {
            step(at(0, 1), "open", report("first"));
            let resolved = time("resolved_at").unwrap_or(end).format();
            step(resolved.clone(), "resolved", report(&resolved));
        }
        (Collection::VulnerabilityFindings, "reopened") => {
            step(at(0, 1), "open", report("first"));
            step(at(1, 2), "resolved", report("resolved"));
            step(at(1, 1), "reopened", report("reopened"));
        }
        (Collection::VulnerabilityFindings, "suppressed") => {
            step(at(0, 1), "open", report("first"));
            step(at(1, 1), "suppressed", import("suppressed"));
        }
        (Collection::VulnerabilityFindings, _) => {
            step(at(0, 1), "open", report("first"));
            // One open finding in eight had a suppression that ran out.
            if fingerprint(id, "expired")[0] < 32 {
                step(at(1, 3), "suppressed", import("suppressed"));
                step(at(2, 3), "open", cause(CauseKind::SuppressionExpired, None, id, "expired"));
            }
        }
        (_, status) => {
            let path = target_path(status);
            let steps_count = path.len() as i64;
            for (n, status) in path.iter().enumerate() {
                let n = n as i64;
                let by =
                    if n == 0 { cause(CauseKind::Report, Some("trivy".into()), id, "found") } else { import(status) };
                step(at(n, (steps_count - 1).max(1)), status, by);
            }
        }
    }
    steps
        .into_iter()
        .map(|(moment, status, cause)| {
            serde_json::to_vec(&serde_json::json!({"status": status, "at": moment, "cause": cause})).unwrap_or_default()
        })
        .collect()
}

/// A way through the targets' state machine from `identified` to `status`.
fn target_path(status: &str) -> &'static [&'static str] {
    match status {
        "actionable" => &["identified", "actionable"],
        "queued" => &["identified", "actionable", "queued"],
        "pending_approval" => &["identified", "actionable", "queued", "pending_approval"],
        "in_progress" => &["identified", "actionable", "queued", "in_progress"],
        "verifying" => &["identified", "actionable", "queued", "in_progress", "verifying"],
        "remediated" => &["identified", "actionable", "queued", "in_progress", "verifying", "remediated"],
        "blocked" => &["identified", "actionable", "queued", "blocked"],
        "failed" => &["identified", "actionable", "queued", "in_progress", "failed"],
        "rejected" => &["identified", "actionable", "rejected"],
        "obsolete" => &["identified", "actionable", "obsolete"],
        _ => &["identified"],
    }
}

/// A cause whose batch id is derived from the record and the moment, so
/// the demo is the same on every machine.
fn cause(kind: CauseKind, scanner: Option<String>, id: &str, moment: &str) -> HistoryCause {
    let bytes = fingerprint(id, moment);
    let mut first = [0u8; 16];
    first.copy_from_slice(&bytes[..16]);
    let batch_id = uuid::Builder::from_random_bytes(first).into_uuid();
    let batch_id = (kind != CauseKind::SuppressionExpired).then_some(batch_id);
    HistoryCause { kind, scanner, batch_id, report: None }
}

fn fingerprint(id: &str, what: &str) -> [u8; 32] {
    Sha256::digest(format!("{id}/{what}").as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use esr_contract::contract::transition_allowed;

    #[test]
    fn every_demo_history_walks_the_state_machine_to_the_record_status() {
        let mut generator = crate::Generator::new(1, crate::DemoSpec::DEMO, crate::DEMO_ANCHOR_UNIX, "acme");
        let mut expired = 0;
        let mut records = 0;
        while let Some(batch) = generator.next_endpoint() {
            for (collection, record) in batch
                .findings
                .iter()
                .map(|f| (Collection::VulnerabilityFindings, f))
                .chain(batch.targets.iter().map(|t| (Collection::RemediationTargets, t)))
            {
                records += 1;
                let entries: Vec<Value> =
                    entries(collection, record).iter().map(|e| serde_json::from_slice(e).expect("json")).collect();
                assert_eq!(entries.last().map(|e| &e["status"]), Some(&record["status"]), "{record}");
                for pair in entries.windows(2) {
                    let (from, to) =
                        (pair[0]["status"].as_str().unwrap_or(""), pair[1]["status"].as_str().unwrap_or(""));
                    assert!(transition_allowed(collection, from, to), "{from} -> {to} in {entries:?}");
                    assert!(pair[0]["at"].as_str() <= pair[1]["at"].as_str(), "{entries:?}");
                }
                expired += entries.iter().filter(|e| e["cause"]["kind"] == "suppression_expired").count();
            }
        }
        assert!(records > 100 && expired > 0, "{records} records, {expired} expired suppressions");
    }
}
