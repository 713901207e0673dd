//! The write path: NDJSON batches of records, validated line by line and
//! written all or nothing.
//!
//! Each line is checked against the collection's schema (`esr_contract::
//! schema`: shape, types, enums, formats), its references (records of the
//! same organization, in the store or earlier in the batch, on the same
//! endpoint where both have one) and the contract's state machines against
//! the record it replaces. The service owns `created_at`, `updated_at` and
//! the endpoints' `open_findings` counts: a line that changes nothing is
//! `unchanged` and writes nothing, and every finding that changes moves
//! its endpoint's counts in the same atomic write.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use esr_contract::Collection;
use esr_contract::contract::{SEVERITIES, transition_allowed};
use esr_contract::schema::{Field, Kind, MAX_ARRAY_ITEMS, Owner, schema};
use esr_contract::text::Form as TextForm;
use esr_contract::time::Timestamp;
use serde::Serialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::{natural_keys, pairing};
use esr_store::{CollectionWrite, Store, StoreError, StoreReader};

const FINDINGS: Collection = Collection::VulnerabilityFindings;
const TARGETS: Collection = Collection::RemediationTargets;

/// The longest line a batch may hold.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// The most invalid lines one answer lists.
const MAX_REPORTED: usize = 1000;

/// Why one line of a batch was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineError {
    /// 1-based line number in the batch.
    pub line: usize,
    /// The field, as a dotted path (`operating_system.family`,
    /// `finding_ids[2]`); empty when the line as a whole is wrong.
    pub field: String,
    pub reason: String,
}

/// What a committed batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportSummary {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    /// The id of each line's record, in line order.
    pub ids: Vec<Uuid>,
    /// The batch's id, which the history entries it wrote name as their
    /// cause's `batch_id` (none for a dry run).
    pub batch_id: Option<Uuid>,
    /// Whether the batch was only checked: what it would change, nothing written.
    pub dry_run: bool,
}

/// The collections whose records keep a history of their `status`.
pub const HISTORY_COLLECTIONS: [Collection; 2] = [Collection::VulnerabilityFindings, Collection::RemediationTargets];

/// What made a record's status change, as its history entries name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    Import,
    Report,
    SuppressionExpired,
    Deletion,
}

/// The `cause` of a history entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryCause {
    pub kind: CauseKind,
    /// The scanner whose report it was (reports only).
    pub scanner: Option<String>,
    /// The import or report request that wrote it.
    pub batch_id: Option<Uuid>,
    /// Which importer read the report and who named the scanner.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportProvenance>,
}

/// Where a report's changes came from, as its history entries record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportProvenance {
    #[serde(skip)]
    pub scanner: String,
    /// Whether the uploader declared the scanner (else the importer named it).
    pub scanner_declared: bool,
    /// The importer's format and its component's version.
    pub format: String,
    pub importer_version: String,
    /// The tool the document says wrote it; never matched on.
    pub tool: Option<String>,
    /// The request that carried the report.
    pub request_id: String,
}

impl HistoryCause {
    /// An NDJSON import batch, with a new batch id.
    pub fn import() -> HistoryCause {
        HistoryCause { kind: CauseKind::Import, scanner: None, batch_id: Some(Uuid::now_v7()), report: None }
    }

    /// A scanner report's import, with a new batch id.
    pub fn report(provenance: ReportProvenance) -> HistoryCause {
        HistoryCause {
            kind: CauseKind::Report,
            scanner: Some(provenance.scanner.clone()),
            batch_id: Some(Uuid::now_v7()),
            report: Some(provenance),
        }
    }

    /// The service's own rewrite of suppressions that expired.
    pub fn suppression_expired() -> HistoryCause {
        HistoryCause { kind: CauseKind::SuppressionExpired, scanner: None, batch_id: None, report: None }
    }

    /// A history entry: the record's `status` at `at` (RFC 3339), for this cause.
    fn entry(&self, status: &str, at: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"status": status, "at": at, "cause": self})).unwrap_or_default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{problems} problem(s) on {invalid_lines} line(s)")]
    Invalid {
        /// At most [`MAX_REPORTED`] of the problems.
        lines: Vec<LineError>,
        /// How many problems were found in all.
        problems: usize,
        /// On how many lines.
        invalid_lines: usize,
    },
    #[error("{lines} lines; a batch may hold at most {max}")]
    TooManyLines { lines: usize, max: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Lines checked on their own at a time (a report's records): what the
/// checks hold in memory beyond the valid records, whatever they hold.
const CHECK_CHUNK_LINES: usize = 8192;

/// Lines whose ids and references are read from the store in one go.
const READ_AHEAD_LINES: usize = 8192;

/// The lines a batch may hold unless `esr serve --import-max-lines` says
/// otherwise: a batch's memory grows with its lines (each is a record
/// with its empty fields filled, and one write of the store's) as much as with
/// its bytes, so a batch of many tiny lines is bounded by this.
pub const DEFAULT_MAX_LINES: u32 = 10_000;

/// Validates a batch of at most `max_lines` lines and, when every line is
/// valid, writes it durably; a dry run answers what it would change and
/// writes nothing (ids it would give to lines without one included).
pub fn import(
    db: &dyn Store,
    organization: Uuid,
    collection: Collection,
    body: &[u8],
    max_lines: usize,
    dry_run: bool,
) -> Result<ImportSummary, ImportError> {
    let fields = schema(collection);
    let lines = || {
        body.split(|byte| *byte == b'\n')
            .enumerate()
            .filter(|(_, raw)| !raw.iter().all(u8::is_ascii_whitespace))
            .map(|(index, raw)| (index + 1, raw))
    };
    let count = lines().count();
    if count > max_lines {
        return Err(ImportError::TooManyLines { lines: count, max: max_lines });
    }
    // What each line is on its own is checked before the organization's
    // write lock is taken, so a client's next batch is parsed while its
    // last one is written; the rest of the batch is built ahead of the lock
    // where the store can confirm it under the lock (`write_batch_ahead`).
    // What the checks read from the store is then what the write replaces.
    let lines: Vec<(usize, &[u8])> = lines().collect();
    let mut checked = Some(check_lines(&lines, collection, fields));
    let cause = HistoryCause::import();
    let mut outcome = None;
    db.write_batch_ahead(organization, &mut |reader, now| {
        let mut batch = Batch::new(reader, collection);
        // Built again (the first build was overtaken): checked again.
        let checked = checked.take().unwrap_or_else(|| check_lines(&lines, collection, fields));
        let mut checked = checked.into_iter().peekable();
        while checked.peek().is_some() {
            let chunk: Vec<CheckedLine> = checked.by_ref().take(READ_AHEAD_LINES).collect();
            batch.read_ahead(&chunk)?;
            for line in chunk {
                batch.line(line)?;
            }
        }
        if batch.errors.total > 0 {
            let errors = std::mem::take(&mut batch.errors);
            outcome = Some(Err(ImportError::Invalid {
                invalid_lines: errors.on_lines.len(),
                lines: errors.lines,
                problems: errors.total,
            }));
            return Ok(Vec::new());
        }
        let (mut summary, writes) = batch.commit(now, &cause)?;
        summary.dry_run = dry_run;
        summary.batch_id = cause.batch_id.filter(|_| !dry_run);
        outcome = Some(Ok(summary));
        Ok(if dry_run { Vec::new() } else { writes })
    })?;
    outcome.unwrap_or_else(|| Err(StoreError::Backend("the write ended without validating the batch".into()).into()))
}

/// Why a record the service built (from a scanner report) was refused:
/// the same reasons an import line of its collection would get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordError {
    pub collection: Collection,
    /// The record's place in its collection's list, from 0.
    pub index: usize,
    pub field: String,
    pub reason: String,
}

/// What [`write_records_checked`] wrote (or, dry, would write), per
/// collection in the order given.
pub type CheckedSummary = Vec<(Collection, ImportSummary)>;

/// Records the caller already read from the same view, by collection and
/// id (`None`: known not to be stored), so the checks read each of them
/// once: a report's records are read in bulk, not one lookup each.
pub type KnownRecords = HashMap<Collection, HashMap<Uuid, Option<Value>>>;

/// Checks records of several collections exactly as import lines of their
/// collections are checked (schema, references, state machines), where a
/// reference may also name a record of the same call, and returns the
/// records to write: those that change something, with the endpoints whose
/// open counts they move. Every record carries its `id`. `reader` is the
/// store under the write lock of the batch that writes them
/// ([`Store::write_batch`]), where the caller read what they replace;
/// `now` is that batch's write time.
/// `known` holds what it read (the checks read anything else themselves).
/// Each finding and target created or whose status changes gets a history
/// entry naming `cause`.
pub fn write_records_checked(
    reader: &mut dyn StoreReader,
    now: Timestamp,
    sets: &[(Collection, Vec<Value>)],
    known: &KnownRecords,
    cause: &HistoryCause,
) -> Result<(CheckedSummary, Vec<CollectionWrite>), Result<Vec<RecordError>, StoreError>> {
    let mut pending: HashMap<(Collection, Uuid), &Value> = HashMap::new();
    for (collection, records) in sets {
        for record in records {
            if let Some(id) = record.get("id").and_then(canonical_uuid) {
                pending.insert((*collection, id), record);
            }
        }
    }
    let now_text = now.format();
    let mut errors: Vec<RecordError> = Vec::new();
    let mut summaries = Vec::new();
    let mut written: Vec<(Collection, Vec<Value>)> = Vec::new();
    let mut histories: Vec<(Collection, HistoryEntries)> = Vec::new();
    let mut open_deltas: BTreeMap<Uuid, [i64; 5]> = BTreeMap::new();
    for &(collection, ref records) in sets {
        let fields = schema(collection);
        // Each batch borrows the view in turn; all read the store as it is
        // before the call (records of the call are `pending`).
        let mut batch = Batch::new(&mut *reader, collection);
        batch.pending = Some(&pending);
        batch.known = Some(known);
        let lines: Vec<(usize, Vec<u8>)> = records
            .iter()
            .enumerate()
            .map(|(index, record)| (index + 1, serde_json::to_vec(record).unwrap_or_default()))
            .collect();
        for chunk in lines.chunks(CHECK_CHUNK_LINES) {
            let chunk: Vec<(usize, &[u8])> = chunk.iter().map(|(line, raw)| (*line, raw.as_slice())).collect();
            let checked = check_lines(&chunk, collection, fields);
            batch.read_ahead(&checked).map_err(Err)?;
            for line in checked {
                batch.line(line).map_err(Err)?;
            }
        }
        let found = std::mem::take(&mut batch.errors);
        errors.extend(found.lines.into_iter().map(|error| RecordError {
            collection,
            index: error.line - 1,
            field: error.field,
            reason: error.reason,
        }));
        let prepared = batch.prepare(&now_text, cause);
        for (endpoint, delta) in prepared.open_deltas {
            let slot = open_deltas.entry(endpoint).or_default();
            for (total, change) in slot.iter_mut().zip(delta) {
                *total += change;
            }
        }
        summaries.push((collection, prepared.summary));
        written.push((collection, prepared.records.into_values().collect()));
        histories.push((collection, prepared.history));
    }
    if !errors.is_empty() {
        return Err(Ok(errors));
    }
    // Counts move on the endpoint records this call writes, else on the
    // stored ones.
    let mut stored_deltas = BTreeMap::new();
    for (endpoint, delta) in open_deltas {
        let in_call = written
            .iter_mut()
            .filter(|(collection, _)| *collection == Collection::Endpoints)
            .flat_map(|(_, records)| records.iter_mut())
            .find(|record| record.get("id").and_then(canonical_uuid) == Some(endpoint));
        match in_call {
            Some(record) => {
                for (severity, change) in SEVERITIES.iter().zip(delta) {
                    let count = record["open_findings"][*severity].as_i64().unwrap_or(0);
                    record["open_findings"][*severity] = json!((count + change).max(0));
                }
            }
            None => {
                stored_deltas.insert(endpoint, delta);
            }
        }
    }
    let mut endpoint_batch = Batch::new(reader, Collection::Endpoints);
    endpoint_batch.known = Some(known);
    let endpoints = endpoint_batch.endpoints_with_counts(stored_deltas, &now_text).map_err(Err)?;
    match written.iter_mut().find(|(collection, _)| *collection == Collection::Endpoints) {
        Some((_, records)) => records.extend(endpoints),
        None => written.push((Collection::Endpoints, endpoints)),
    }
    let mut writes: Vec<CollectionWrite> =
        written.into_iter().map(|(collection, records)| CollectionWrite::records(collection, records)).collect();
    for (collection, history) in histories {
        if let Some(write) = writes.iter_mut().find(|write| write.collection == collection) {
            write.history.extend(history);
        }
    }
    writes.retain(|write| !write.is_empty());
    Ok((summaries, writes))
}

/// The endpoints whose `open_findings` move when each finding changes
/// from its first state to its second (`None`: absent, as before its
/// creation or after its deletion), read from `reader` and rewritten at `now`.
pub(crate) fn endpoints_with_moved_counts<'r>(
    reader: &mut dyn StoreReader,
    changes: impl IntoIterator<Item = (Option<&'r Value>, Option<&'r Value>)>,
    now: &str,
) -> Result<Vec<Value>, StoreError> {
    let mut deltas = BTreeMap::new();
    for (before, after) in changes {
        add_open_delta(&mut deltas, before, after);
    }
    Batch::new(reader, Collection::Endpoints).endpoints_with_counts(deltas, now)
}

/// Adds how a finding's change from `before` to `after` moves its
/// endpoints' open counts.
fn add_open_delta(deltas: &mut BTreeMap<Uuid, [i64; 5]>, before: Option<&Value>, after: Option<&Value>) {
    add_moved(deltas, open_slots(before, after));
}

/// The open-count slots a finding's change from `before` to `after` leaves and enters.
fn open_slots(before: Option<&Value>, after: Option<&Value>) -> [Option<(Uuid, usize)>; 2] {
    [before.and_then(open_finding_slot), after.and_then(open_finding_slot)]
}

/// Moves one finding out of the first slot and into the second.
fn add_moved(deltas: &mut BTreeMap<Uuid, [i64; 5]>, moved: [Option<(Uuid, usize)>; 2]) {
    for (slot, sign) in moved.into_iter().zip([-1, 1]) {
        if let Some((endpoint, severity)) = slot {
            deltas.entry(endpoint).or_default()[severity] += sign;
        }
    }
}

/// History entries to append, each `(record id, entry bytes)`, in order.
type HistoryEntries = Vec<(Uuid, Vec<u8>)>;

/// What [`Batch::prepare`] makes of the validated lines.
struct Prepared {
    summary: ImportSummary,
    /// The records to write (those that change something), by id.
    records: BTreeMap<Uuid, Value>,
    /// How they move their endpoints' open counts.
    open_deltas: BTreeMap<Uuid, [i64; 5]>,
    /// The history entries they add.
    history: HistoryEntries,
}

/// Validated lines' contents, each with its place in the batch.
type NumberedLines = Vec<(usize, Map<String, Value>)>;

/// What a line did to its record.
enum LineChange {
    Unchanged,
    Updated,
    Created,
}

/// One line against the record it replaces.
struct LineOutcome {
    change: LineChange,
    /// The open-count slots the line leaves and enters (findings only).
    moved: [Option<(Uuid, usize)>; 2],
    /// The history entry it adds, if its status changes.
    history: Option<Vec<u8>>,
}

/// The lines of one id, in order, each against what the one before it
/// wrote (the first against `stored`): each line's outcome, and the record
/// the last one that changed something wrote.
fn prepare_lines_of(
    collection: Collection,
    id: Uuid,
    lines: NumberedLines,
    stored: Option<&Value>,
    now_text: &str,
    cause: &HistoryCause,
) -> (Uuid, Vec<(usize, LineOutcome)>, Option<Value>) {
    let keeps_history = HISTORY_COLLECTIONS.contains(&collection);
    let mut written: Option<Value> = None;
    let mut outcomes = Vec::with_capacity(lines.len());
    for (line, content) in lines {
        let previous = written.as_ref().or(stored);
        let (change, record) = match previous {
            Some(old) if client_content(old) == content => {
                let moved = [None, None];
                outcomes.push((line, LineOutcome { change: LineChange::Unchanged, moved, history: None }));
                continue;
            }
            Some(old) => (
                LineChange::Updated,
                record_to_store(collection, id, content, old.get("created_at").cloned(), old, now_text),
            ),
            None => (LineChange::Created, record_to_store(collection, id, content, None, &Value::Null, now_text)),
        };
        let moved = if collection == Collection::VulnerabilityFindings {
            open_slots(previous, Some(&record))
        } else {
            [None, None]
        };
        let status = record.get("status").and_then(Value::as_str).filter(|_| keeps_history);
        let history = status
            .filter(|status| previous.and_then(|old| old.get("status")?.as_str()) != Some(*status))
            .map(|status| cause.entry(status, now_text));
        outcomes.push((line, LineOutcome { change, moved, history }));
        written = Some(record);
    }
    (id, outcomes, written)
}

/// Checks each line on its own (shape, types, formats, the fields its
/// state needs), spread over the machine's cores; in line order.
fn check_lines(lines: &[(usize, &[u8])], collection: Collection, fields: &'static [Field]) -> Vec<CheckedLine> {
    esr_store::parallel::map_in_order(lines, |(line, raw)| check_line(*line, raw, collection, fields))
}

/// One line as far as it can be checked without the store.
enum CheckedLine {
    /// Not a JSON object, too long, or with an unusable id: nothing more
    /// is checked.
    Refused(Errors),
    Parsed(Box<ParsedLine>),
}

struct ParsedLine {
    line: usize,
    /// `None`: the line has no id, and the service assigns one.
    id: Option<Uuid>,
    /// The client-owned content, normalized.
    content: Map<String, Value>,
    /// The records it names, to look up in the store.
    references: Vec<Reference>,
    /// Problems of its shape and types.
    shape_errors: Errors,
    /// Fields its state needs and it lacks.
    state_errors: Errors,
}

fn check_line(line: usize, raw: &[u8], collection: Collection, fields: &'static [Field]) -> CheckedLine {
    let mut errors = Errors::default();
    if raw.len() > MAX_LINE_BYTES {
        errors.add(
            line,
            "",
            format!("the line is {} bytes; at most {MAX_LINE_BYTES} are accepted for one record", raw.len()),
        );
        return CheckedLine::Refused(errors);
    }
    if raw.starts_with(b"\xEF\xBB\xBF") {
        errors.add(line, "", "the line starts with a UTF-8 byte order mark: save the file without one");
        return CheckedLine::Refused(errors);
    }
    let object = match parse_json(raw) {
        Ok(Value::Object(object)) => object,
        Ok(_) => {
            errors.add(line, "", "a line must be one JSON object");
            return CheckedLine::Refused(errors);
        }
        Err(JsonError::DuplicateKey(path)) => {
            errors.add(line, &path, "a key may appear only once in an object");
            return CheckedLine::Refused(errors);
        }
        Err(JsonError::Syntax(error)) => {
            let hint = if looks_pretty_printed(raw) {
                "; the file looks pretty-printed: write one JSON object per line (e.g. `jq -c`)"
            } else {
                ""
            };
            errors.add(line, "", format!("not valid JSON: {error}{hint}"));
            return CheckedLine::Refused(errors);
        }
    };
    let id = match object.get("id") {
        None | Some(Value::Null) => None,
        Some(value) => match canonical_uuid(value) {
            Some(id) => Some(id),
            None => {
                errors.add(line, "id", "not a UUID (lowercase, hyphenated)");
                return CheckedLine::Refused(errors);
            }
        },
    };
    let mut references = Vec::new();
    let content = check_object(fields, &object, "", line, &mut errors, &mut references);
    let state_errors = check_state_fields(collection, line, &content);
    CheckedLine::Parsed(Box::new(ParsedLine { line, id, content, references, shape_errors: errors, state_errors }))
}

/// Whether a line that is not JSON looks like a piece of an object spread
/// over several lines: a lone bracket, or a `"key": value` member.
fn looks_pretty_printed(raw: &[u8]) -> bool {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim();
    matches!(text, "{" | "}" | "[" | "]" | "}," | "],")
        || (text.starts_with('"') && text.contains("\":"))
        || text.ends_with('{')
        || text.ends_with('[')
}

enum JsonError {
    Syntax(serde_json::Error),
    /// The dotted path of a key an object repeats.
    DuplicateKey(String),
}

/// Parses JSON as `serde_json::from_slice` does, but refuses an object
/// that repeats a key (serde_json keeps the last silently), at any depth.
fn parse_json(raw: &[u8]) -> Result<Value, JsonError> {
    let duplicate = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(raw);
    let parsed = UniqueKeys { duplicate: &duplicate }.deserialize(&mut deserializer).and_then(|value| {
        deserializer.end()?;
        Ok(value)
    });
    match (parsed, duplicate.into_inner()) {
        (Ok(value), _) => Ok(value),
        (Err(_), Some(segments)) => Err(JsonError::DuplicateKey(dotted_path(segments))),
        (Err(error), None) => Err(JsonError::Syntax(error)),
    }
}

/// A path's segments, innermost first, as a dotted path (`a.b[2].c`).
fn dotted_path(segments: Vec<PathSegment>) -> String {
    segments.into_iter().rev().fold(String::new(), |path, segment| match segment {
        PathSegment::Key(key) => join(&path, &key),
        PathSegment::Index(index) => format!("{path}[{index}]"),
    })
}

enum PathSegment {
    Key(String),
    Index(usize),
}

/// Builds a `Value`, and on a repeated key fails with the key's path in
/// `duplicate` (innermost segment first: each level adds its own as the
/// error passes through, so a line without duplicates builds no path).
#[derive(Clone, Copy)]
struct UniqueKeys<'a> {
    duplicate: &'a RefCell<Option<Vec<PathSegment>>>,
}

impl UniqueKeys<'_> {
    fn within<E>(self, segment: impl FnOnce() -> PathSegment, error: E) -> E {
        if let Some(segments) = self.duplicate.borrow_mut().as_mut() {
            segments.push(segment());
        }
        error
    }
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut array = Vec::new();
        loop {
            match items.next_element_seed(self) {
                Ok(Some(item)) => array.push(item),
                Ok(None) => return Ok(Value::Array(array)),
                Err(error) => return Err(self.within(|| PathSegment::Index(array.len()), error)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = members.next_key::<String>()? {
            if object.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(vec![PathSegment::Key(key)]);
                return Err(A::Error::custom("a repeated key"));
            }
            match members.next_value_seed(self) {
                Ok(value) => object.insert(key, value),
                Err(error) => return Err(self.within(|| PathSegment::Key(key), error)),
            };
        }
        Ok(Value::Object(object))
    }
}

/// Fields a state needs: a suppressed finding says why, a resolved one when.
fn check_state_fields(collection: Collection, line: usize, content: &Map<String, Value>) -> Errors {
    let mut errors = Errors::default();
    let status = content.get("status").and_then(Value::as_str);
    let needs = match (collection, status) {
        (Collection::VulnerabilityFindings, Some("suppressed")) => Some("suppression"),
        (Collection::VulnerabilityFindings, Some("resolved")) => Some("resolved_at"),
        (Collection::RemediationTargets, Some("remediated")) => Some("remediated_at"),
        _ => None,
    };
    if let Some(field) = needs.filter(|field| content.get(*field).is_none_or(Value::is_null)) {
        let status = status.unwrap_or_default();
        errors.add(line, field, format!("required when status is {status}"));
    }
    errors
}

#[derive(Default)]
struct Errors {
    lines: Vec<LineError>,
    total: usize,
    /// The lines with at least one problem (a line may have several).
    on_lines: HashSet<usize>,
}

impl Errors {
    fn add(&mut self, line: usize, field: &str, reason: impl Into<String>) {
        self.total += 1;
        self.on_lines.insert(line);
        if self.lines.len() < MAX_REPORTED {
            self.lines.push(LineError { line, field: field.to_owned(), reason: reason.into() });
        }
    }

    /// Adds what another collection of errors holds, after these.
    fn append(&mut self, other: Errors) {
        self.total += other.total;
        self.on_lines.extend(other.on_lines);
        let room = MAX_REPORTED.saturating_sub(self.lines.len());
        self.lines.extend(other.lines.into_iter().take(room));
    }
}

/// A reference a line makes to another record.
struct Reference {
    collection: Collection,
    id: Uuid,
    field: String,
}

/// A batch being validated: the lines' records by id (the state a later
/// line of the same id replaces), and the records they reference.
struct Batch<'a> {
    /// The store as the batch's write lock holds it, on its organization.
    reader: &'a mut dyn StoreReader,
    collection: Collection,
    errors: Errors,
    /// Each valid line's (id, client-owned content), in line order.
    lines: Vec<(Uuid, Map<String, Value>)>,
    /// The latest `status` of each id the batch touches (stored, then each
    /// line's); `None` for a record that does not exist or has no status.
    current_status: HashMap<Uuid, Option<String>>,
    /// The stored record of each id the batch touches (`None`: new).
    stored_before: HashMap<Uuid, Option<Value>>,
    /// Referenced records' endpoints, by collection and id (`None`: no
    /// such record; `Some(None)`: a record on no endpoint).
    referenced: HashMap<(Collection, Uuid), Option<Option<String>>>,
    /// Records written by the same call (of any collection), which
    /// references may name before they are stored.
    pending: Option<&'a HashMap<(Collection, Uuid), &'a Value>>,
    /// Stored records the caller already read from the view.
    known: Option<&'a KnownRecords>,
    /// What lines without an id name.
    natural: natural_keys::NaturalIds,
    /// The target line (id, line number) listing each finding, so far.
    listed_by: HashMap<String, (Uuid, usize)>,
}

impl<'a> Batch<'a> {
    fn new(reader: &'a mut dyn StoreReader, collection: Collection) -> Batch<'a> {
        Batch {
            reader,
            collection,
            errors: Errors::default(),
            lines: Vec::new(),
            current_status: HashMap::new(),
            stored_before: HashMap::new(),
            referenced: HashMap::new(),
            pending: None,
            known: None,
            natural: natural_keys::NaturalIds::default(),
            listed_by: HashMap::new(),
        }
    }

    /// Checks a line against the store (its references, its state
    /// transition) and keeps it when it has no problem at all.
    fn line(&mut self, checked: CheckedLine) -> Result<(), StoreError> {
        let parsed = match checked {
            CheckedLine::Refused(errors) => {
                self.errors.append(errors);
                return Ok(());
            }
            CheckedLine::Parsed(parsed) => *parsed,
        };
        let ParsedLine { line, id, content, references, shape_errors, state_errors } = parsed;
        let id = match id {
            Some(id) => id,
            None => match self.natural_id(line, &content)? {
                Some(id) => id,
                None => {
                    self.errors.append(shape_errors);
                    return Ok(());
                }
            },
        };
        let errors_before = self.errors.total;
        self.errors.append(shape_errors);
        for reference in references {
            let Some(their_endpoint) = self.referenced_endpoint(reference.collection, reference.id)? else {
                self.errors.add(
                    line,
                    &reference.field,
                    format!("no {} record {} in this organization", reference.collection, reference.id),
                );
                continue;
            };
            if let Some(reason) = endpoint_mismatch(&content, their_endpoint.as_deref()) {
                self.errors.add(line, &reference.field, reason);
            }
        }
        let status = content.get("status").and_then(Value::as_str);
        if let (Some(from), Some(to)) = (self.current_status(id)?, status)
            && !transition_allowed(self.collection, &from, to)
        {
            self.errors.add(line, "status", format!("a {from} record cannot become {to}"));
        }
        self.errors.append(state_errors);
        if self.collection == TARGETS {
            // A finding belongs to at most one target: two of the batch's
            // targets cannot both list it.
            for finding in content.get("finding_ids").and_then(Value::as_array).into_iter().flatten() {
                let Some(finding) = finding.as_str() else { continue };
                if let Some((other, other_line)) = self.listed_by.get(finding)
                    && *other != id
                {
                    self.errors.add(
                        line,
                        "finding_ids",
                        format!(
                            "finding {finding} is listed by the target on line {other_line} too; a finding belongs to at most one target"
                        ),
                    );
                }
            }
        }
        if self.errors.total == errors_before {
            if self.collection == TARGETS {
                for finding in content.get("finding_ids").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(finding) = finding.as_str() {
                        self.listed_by.insert(finding.to_owned(), (id, line));
                    }
                }
            }
            self.current_status.insert(id, status.map(str::to_owned));
            self.lines.push((id, content));
        }
        Ok(())
    }

    /// The id of a line without one: the record its natural key names, or
    /// a new one; `None` (the problem noted) when the key is ambiguous.
    fn natural_id(&mut self, line: usize, content: &Map<String, Value>) -> Result<Option<Uuid>, StoreError> {
        let Some(key) = natural_keys::of(self.collection, content) else { return Ok(Some(Uuid::now_v7())) };
        match self.natural.find(&mut *self.reader, self.collection, &key)? {
            natural_keys::Found::Existing(id) => Ok(Some(id)),
            natural_keys::Found::New => {
                let id = Uuid::now_v7();
                self.natural.give(key, id);
                Ok(Some(id))
            }
            natural_keys::Found::Ambiguous(ids) => {
                let ids: Vec<String> = ids.iter().take(10).map(Uuid::to_string).collect();
                self.errors.add(
                    line,
                    "id",
                    format!(
                        "no id, and {} stored records have what names this one ({}): give the id of the one meant",
                        ids.len(),
                        ids.join(", ")
                    ),
                );
                Ok(None)
            }
        }
    }

    /// The status of the record `id` before this line: stored, or from an
    /// earlier line. The stored record is kept for the commit.
    fn current_status(&mut self, id: Uuid) -> Result<Option<String>, StoreError> {
        if let Some(known) = self.current_status.get(&id) {
            return Ok(known.clone());
        }
        if !self.stored_before.contains_key(&id) {
            let stored = self.stored(self.collection, id)?;
            self.stored_before.insert(id, stored);
        }
        let stored = self.stored_before.get(&id).and_then(Option::as_ref);
        let status = stored.and_then(|record| record.get("status")?.as_str().map(str::to_owned));
        self.current_status.insert(id, status.clone());
        Ok(status)
    }

    /// Whether a referenced record exists (in the call or stored), and on
    /// which endpoint it is: all a reference is checked against, so the
    /// record itself is not kept.
    fn referenced_endpoint(&mut self, collection: Collection, id: Uuid) -> Result<Option<Option<String>>, StoreError> {
        let endpoint_of = |record: &Value| record.get("endpoint_id").and_then(Value::as_str).map(str::to_owned);
        if let Some(known) = self.referenced.get(&(collection, id)) {
            return Ok(known.clone());
        }
        if let Some(record) = self.pending.and_then(|pending| pending.get(&(collection, id))) {
            return Ok(Some(endpoint_of(record)));
        }
        let referenced = match self.known.and_then(|known| known.get(&collection)?.get(&id)) {
            Some(known) => known.as_ref().map(endpoint_of),
            None => self.stored(collection, id)?.as_ref().map(endpoint_of),
        };
        self.referenced.insert((collection, id), referenced.clone());
        Ok(referenced)
    }

    /// Reads what the checks of these lines will ask of the store (the
    /// stored record of each id, each referenced record) with one read per
    /// collection, into the maps [`Batch::line`] looks in first.
    fn read_ahead(&mut self, lines: &[CheckedLine]) -> Result<(), StoreError> {
        // Each id once: an id on several lines is read once.
        let mut own = BTreeSet::new();
        let mut references: BTreeMap<Collection, BTreeSet<Uuid>> = BTreeMap::new();
        for line in lines {
            let CheckedLine::Parsed(parsed) = line else {
                continue;
            };
            if let Some(id) = parsed.id
                && !self.current_status.contains_key(&id)
                && !self.stored_before.contains_key(&id)
            {
                own.insert(id);
            }
            for reference in &parsed.references {
                let key = (reference.collection, reference.id);
                if !self.referenced.contains_key(&key)
                    && !self.pending.is_some_and(|pending| pending.contains_key(&key))
                {
                    references.entry(reference.collection).or_default().insert(reference.id);
                }
            }
        }
        let collection = self.collection;
        let mut stored = self.stored_many(collection, &own.iter().copied().collect::<Vec<_>>())?;
        for id in own {
            let record = stored.remove(&id);
            self.stored_before.insert(id, record);
        }
        for (collection, ids) in references {
            let stored = self.stored_many(collection, &ids.iter().copied().collect::<Vec<_>>())?;
            for id in ids {
                let endpoint =
                    stored.get(&id).map(|record| record.get("endpoint_id").and_then(Value::as_str).map(str::to_owned));
                self.referenced.insert((collection, id), endpoint);
            }
        }
        Ok(())
    }

    /// The stored records with these ids that exist: those the caller
    /// already read, and the rest read at once.
    fn stored_many(&mut self, collection: Collection, ids: &[Uuid]) -> Result<HashMap<Uuid, Value>, StoreError> {
        let known = self.known.and_then(|known| known.get(&collection));
        let mut found = HashMap::new();
        let mut unread = Vec::new();
        for id in ids {
            match known.and_then(|known| known.get(id)) {
                Some(Some(record)) => {
                    found.insert(*id, record.clone());
                }
                Some(None) => {}
                None => unread.push(*id),
            }
        }
        if unread.is_empty() {
            return Ok(found);
        }
        let read = self.reader.get_many(collection, &unread)?;
        let parsed = esr_store::parallel::map_in_order(&read, |(id, bytes)| {
            serde_json::from_slice::<Value>(bytes).map(|record| (*id, record))
        });
        for record in parsed {
            let (id, record) = record.map_err(|error| StoreError::Corrupt(error.to_string()))?;
            found.insert(id, record);
        }
        Ok(found)
    }

    fn stored(&mut self, collection: Collection, id: Uuid) -> Result<Option<Value>, StoreError> {
        if let Some(known) = self.known.and_then(|known| known.get(&collection)?.get(&id)) {
            return Ok(known.clone());
        }
        match self.reader.get(collection, id)? {
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    /// Turns the validated lines into the records to store, with the
    /// endpoints whose derived counts they move (written together).
    fn commit(
        mut self,
        now: Timestamp,
        cause: &HistoryCause,
    ) -> Result<(ImportSummary, Vec<CollectionWrite>), StoreError> {
        let now_text = now.format();
        // What each record was linked to before its lines (see `pairing`).
        let targets_before: HashMap<Uuid, Option<String>> =
            self.stored_before.iter().map(|(id, stored)| (*id, pairing::named_target(stored.as_ref()))).collect();
        let findings_before: HashMap<Uuid, BTreeSet<String>> =
            self.stored_before.iter().map(|(id, stored)| (*id, pairing::listed_findings(stored.as_ref()))).collect();
        let prepared = self.prepare(&now_text, cause);
        let endpoints = self.endpoints_with_counts(prepared.open_deltas, &now_text)?;
        // The other side of each link the lines make or break follows them.
        let obsolete = |ids: &[Uuid]| -> Vec<(Uuid, Vec<u8>)> {
            ids.iter().map(|id| (*id, cause.entry("obsolete", &now_text))).collect()
        };
        let (followers, more_of_this, more_history) = match self.collection {
            FINDINGS => {
                let targets =
                    pairing::targets_following(&mut *self.reader, &targets_before, &prepared.records, &now_text)?;
                let mut write = CollectionWrite::records(TARGETS, targets.records);
                write.history = obsolete(&targets.obsoleted);
                (write, Vec::new(), Vec::new())
            }
            TARGETS => {
                let (findings, targets) =
                    pairing::findings_following(&mut *self.reader, &findings_before, &prepared.records, &now_text)?;
                let history = obsolete(&targets.obsoleted);
                (CollectionWrite::records(FINDINGS, findings), targets.records, history)
            }
            _ => (CollectionWrite::records(TARGETS, Vec::new()), Vec::new(), Vec::new()),
        };
        let records = prepared.records.into_values().chain(more_of_this).collect();
        let mut written = CollectionWrite::records(self.collection, records);
        written.history = prepared.history;
        written.history.extend(more_history);
        Ok((prepared.summary, vec![written, followers, CollectionWrite::records(Collection::Endpoints, endpoints)]))
    }

    /// The stored records the validated lines become (those that change
    /// something), how they move their endpoints' open counts, and the
    /// history entries of the records created or whose status changes.
    /// Each id's lines depend only on each other and on what is stored of
    /// it: they are prepared on every core, one id's lines in order, while
    /// the database waits for the batch.
    fn prepare(&mut self, now_text: &str, cause: &HistoryCause) -> Prepared {
        let stored_before = std::mem::take(&mut self.stored_before);
        let line_count = self.lines.len();
        let mut lines_of: Vec<(Uuid, NumberedLines)> = Vec::new();
        let mut place_of: HashMap<Uuid, usize> = HashMap::with_capacity(line_count);
        for (line, (id, content)) in std::mem::take(&mut self.lines).into_iter().enumerate() {
            let place = *place_of.entry(id).or_insert_with(|| {
                lines_of.push((id, Vec::new()));
                lines_of.len() - 1
            });
            lines_of[place].1.push((line, content));
        }
        let collection = self.collection;
        let prepared_ids = esr_store::parallel::map_owned_in_order(lines_of, |(id, lines)| {
            let stored = stored_before.get(&id).and_then(Option::as_ref);
            prepare_lines_of(collection, id, lines, stored, now_text, cause)
        });
        let mut summary = ImportSummary::default();
        let mut written: BTreeMap<Uuid, Value> = BTreeMap::new();
        let mut outcomes = Vec::with_capacity(line_count);
        for (id, lines, record) in prepared_ids {
            outcomes.extend(lines.into_iter().map(|(line, outcome)| (line, id, outcome)));
            if let Some(record) = record {
                written.insert(id, record);
            }
        }
        // Back in line order: the summary's ids and the history entries follow it.
        outcomes.sort_unstable_by_key(|(line, ..)| *line);
        let mut history = Vec::new();
        let mut open_deltas: BTreeMap<Uuid, [i64; 5]> = BTreeMap::new();
        for (_, id, outcome) in outcomes {
            summary.ids.push(id);
            match outcome.change {
                LineChange::Unchanged => summary.unchanged += 1,
                LineChange::Updated => summary.updated += 1,
                LineChange::Created => summary.created += 1,
            }
            add_moved(&mut open_deltas, outcome.moved);
            if let Some(entry) = outcome.history {
                history.push((id, entry));
            }
        }
        Prepared { summary, records: written, open_deltas, history }
    }

    /// The endpoints whose `open_findings` the batch changes, updated.
    fn endpoints_with_counts(&mut self, deltas: BTreeMap<Uuid, [i64; 5]>, now: &str) -> Result<Vec<Value>, StoreError> {
        let mut endpoints = Vec::new();
        let moved: Vec<(Uuid, [i64; 5])> =
            deltas.into_iter().filter(|(_, delta)| delta.iter().any(|d| *d != 0)).collect();
        let ids: Vec<Uuid> = moved.iter().map(|(id, _)| *id).collect();
        let mut stored = self.stored_many(Collection::Endpoints, &ids)?;
        for (id, delta) in moved {
            let Some(mut endpoint) = stored.remove(&id) else {
                return Err(StoreError::Corrupt(format!("a finding's endpoint {id} vanished")));
            };
            for (severity, change) in SEVERITIES.iter().zip(delta) {
                let count = endpoint["open_findings"][*severity].as_i64().unwrap_or(0);
                endpoint["open_findings"][*severity] = json!((count + change).max(0));
            }
            endpoint["updated_at"] = json!(now);
            endpoints.push(endpoint);
        }
        Ok(endpoints)
    }
}

/// The endpoint and severity rank whose open count a finding adds to, when
/// it is open (`reopened` behaves as open).
fn open_finding_slot(finding: &Value) -> Option<(Uuid, usize)> {
    if !matches!(finding.get("status").and_then(Value::as_str), Some("open" | "reopened")) {
        return None;
    }
    let endpoint = finding.get("endpoint_id").and_then(Value::as_str).and_then(|id| Uuid::parse_str(id).ok())?;
    let severity = finding.get("severity").and_then(Value::as_str)?;
    Some((endpoint, SEVERITIES.iter().position(|s| *s == severity)?))
}

/// A stored record's client-owned content: what an import line is compared with.
fn client_content(record: &Value) -> Map<String, Value> {
    let mut content = record.as_object().cloned().unwrap_or_default();
    content.remove("id");
    content.retain(|name, _| !is_service_field(name));
    content
}

fn is_service_field(name: &str) -> bool {
    ["created_at", "updated_at", "open_findings"].contains(&name)
}

/// A stored record without the service's fields (its `id` kept): what an
/// import line of it holds.
pub fn client_fields(record: &Value) -> Map<String, Value> {
    let mut fields = record.as_object().cloned().unwrap_or_default();
    fields.retain(|name, _| !is_service_field(name));
    fields
}

/// The record as stored: id first, then the content in schema order, with
/// the service's fields.
fn record_to_store(
    collection: Collection,
    id: Uuid,
    content: Map<String, Value>,
    created_at: Option<Value>,
    previous: &Value,
    now: &str,
) -> Value {
    let mut record = Map::new();
    record.insert("id".into(), json!(id));
    let fields = schema(collection);
    let mut content = content;
    for field in fields.iter().filter(|field| field.name != "id") {
        let value = match field.name {
            "created_at" => created_at.clone().unwrap_or_else(|| json!(now)),
            "updated_at" => json!(now),
            "open_findings" => previous
                .get("open_findings")
                .cloned()
                .unwrap_or_else(|| json!({"critical": 0, "high": 0, "medium": 0, "low": 0, "info": 0})),
            name => match content.remove(name) {
                Some(value) => value,
                None => continue,
            },
        };
        record.insert(field.name.to_owned(), value);
    }
    Value::Object(record)
}

/// When a line and a record it references both name an endpoint, they must
/// name the same one: a finding's target, a target's findings.
fn endpoint_mismatch(content: &Map<String, Value>, theirs: Option<&str>) -> Option<String> {
    let mine = content.get("endpoint_id")?.as_str()?;
    let theirs = theirs?;
    (mine != theirs).then(|| format!("it is on endpoint {theirs}, not on this record's endpoint {mine}"))
}

fn canonical_uuid(value: &Value) -> Option<Uuid> {
    let text = value.as_str()?;
    let id = Uuid::try_parse(text).ok()?;
    (text.len() == 36 && text.eq_ignore_ascii_case(&id.hyphenated().to_string())).then_some(id)
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") }
}

/// Checks an object against its fields and returns it normalized: only
/// client-owned fields, in schema order, missing optional ones filled.
fn check_object(
    fields: &'static [Field],
    object: &Map<String, Value>,
    path: &str,
    line: usize,
    errors: &mut Errors,
    references: &mut Vec<Reference>,
) -> Map<String, Value> {
    for name in object.keys() {
        if !fields.iter().any(|field| field.name == name) {
            errors.add(line, &join(path, name), "unknown field");
        }
    }
    let mut normalized = Map::new();
    for field in fields {
        if field.owner == Owner::Service || (path.is_empty() && field.name == "id") {
            continue;
        }
        let field_path = join(path, field.name);
        let value = match object.get(field.name) {
            None if field.required => {
                errors.add(line, &field_path, "required");
                continue;
            }
            Some(Value::Null) if !field.nullable => {
                errors.add(line, &field_path, "must not be null");
                continue;
            }
            None if field.nullable => Value::Null,
            None => match empty_value(field.kind) {
                Some(value) => value,
                None => continue,
            },
            Some(Value::Null) => Value::Null,
            Some(value) => match check_value(field.kind, value, &field_path, line, errors, references) {
                Some(value) => value,
                None => continue,
            },
        };
        normalized.insert(field.name.to_owned(), value);
    }
    normalized
}

/// The value a missing optional field takes, when it has one.
fn empty_value(kind: Kind) -> Option<Value> {
    match kind {
        Kind::Array(_) => Some(json!([])),
        Kind::Bool => Some(json!(false)),
        Kind::Object(fields) => {
            let mut object = Map::new();
            for field in fields {
                let value = if field.nullable { Some(Value::Null) } else { empty_value(field.kind) };
                if let Some(value) = value {
                    object.insert(field.name.to_owned(), value);
                }
            }
            Some(Value::Object(object))
        }
        _ => None,
    }
}

/// Checks one non-null value; returns it normalized, or records why not.
fn check_value(
    kind: Kind,
    value: &Value,
    path: &str,
    line: usize,
    errors: &mut Errors,
    references: &mut Vec<Reference>,
) -> Option<Value> {
    let checked: Result<Value, String> = match kind {
        Kind::Text { max, multiline } => match value.as_str() {
            Some(text) if text.trim().is_empty() => Err("must not be empty".into()),
            Some(text) if text.chars().count() > max => Err(format!("longer than {max} characters")),
            Some(text) => {
                let form = if multiline { TextForm::Lines } else { TextForm::Line };
                match esr_contract::text::refusal(text, form) {
                    Some(reason) => Err(reason),
                    None => Ok(json!(text)),
                }
            }
            None => Err("must be a string".into()),
        },
        Kind::Name { max } => match value.as_str() {
            Some(text) if text.trim().is_empty() => Err("must not be empty".into()),
            Some(text) if text.chars().count() > max => Err(format!("longer than {max} characters")),
            Some(text) => match esr_contract::text::refusal(text, TextForm::Name) {
                Some(reason) => Err(reason),
                None => Ok(json!(text)),
            },
            None => Err("must be a string".into()),
        },
        Kind::Hostname => match value.as_str() {
            Some(text) if text.trim().is_empty() => Err("must not be empty".into()),
            Some(text) if is_hostname(text) => Ok(json!(text)),
            _ => Err("not a host name (RFC 1123: labels of letters, digits and inner hyphens, \
                      1 to 63 characters each, separated by dots, 253 in all)"
                .into()),
        },
        Kind::Email => match value.as_str() {
            Some(text) if is_email(text) => Ok(json!(text)),
            _ => Err("not an e-mail address (local@example.com)".into()),
        },
        Kind::Token => match value.as_str() {
            Some(text)
                if (1..=64).contains(&text.len())
                    && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) =>
            {
                Ok(json!(text.to_ascii_lowercase()))
            }
            _ => Err("must be a name of 1 to 64 letters, digits, '.', '_' or '-'".into()),
        },
        Kind::Enum(allowed) => match value.as_str() {
            Some(text) if allowed.contains(&text) => Ok(json!(text)),
            _ => Err(format!("must be one of {}", allowed.join(", "))),
        },
        Kind::Uuid => canonical_uuid(value).map(|id| json!(id)).ok_or_else(|| "not a UUID".to_owned()),
        Kind::Reference(collection) => match canonical_uuid(value) {
            Some(id) => {
                references.push(Reference { collection, id, field: path.to_owned() });
                Ok(json!(id))
            }
            None => Err(format!("not a UUID of a {collection} record")),
        },
        Kind::Timestamp => value
            .as_str()
            .and_then(Timestamp::parse)
            .map(|instant| json!(instant.format()))
            .ok_or_else(|| "not an RFC 3339 timestamp (e.g. 2026-11-22T05:39:42Z)".to_owned()),
        Kind::Bool => value.as_bool().map(Value::Bool).ok_or_else(|| "must be true or false".to_owned()),
        Kind::Number { min, max } => match value.as_f64() {
            Some(number) if (min..=max).contains(&number) => Ok(value.clone()),
            _ => Err(format!("must be a number from {min} to {max}")),
        },
        Kind::Integer { min, max } => match value.as_i64() {
            Some(number) if (min..=max).contains(&number) => Ok(value.clone()),
            _ => Err(format!("must be a whole number from {min} to {max}")),
        },
        Kind::IpAddress => value
            .as_str()
            .and_then(|text| text.parse::<std::net::IpAddr>().ok())
            .map(|ip| json!(ip.to_string()))
            .ok_or_else(|| "not an IPv4 or IPv6 address".to_owned()),
        Kind::MacAddress => value
            .as_str()
            .and_then(mac_address)
            .map(Value::String)
            .ok_or_else(|| "not a MAC address (six hex pairs separated by ':' or '-')".to_owned()),
        Kind::CveId => {
            value.as_str().and_then(cve_id).map(Value::String).ok_or_else(|| "not a CVE id (CVE-YYYY-NNNN…)".to_owned())
        }
        Kind::Object(fields) => match value.as_object() {
            Some(object) => Ok(Value::Object(check_object(fields, object, path, line, errors, references))),
            None => Err("must be an object".into()),
        },
        Kind::Array(item) => match value.as_array() {
            Some(items) if items.len() > MAX_ARRAY_ITEMS => Err(format!("more than {MAX_ARRAY_ITEMS} items")),
            Some(items) => Ok(Value::Array(
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(index, value)| {
                        let path = format!("{path}[{index}]");
                        match value {
                            Value::Null => {
                                errors.add(line, &path, "must not be null");
                                None
                            }
                            value => check_value(*item, value, &path, line, errors, references),
                        }
                    })
                    .collect(),
            )),
            None => Err("must be an array".into()),
        },
    };
    checked.map_err(|reason| errors.add(line, path, reason)).ok()
}

/// A host name as RFC 1123 allows (no trailing dot: a name, not a query).
pub(crate) fn is_hostname(text: &str) -> bool {
    text.len() <= 253
        && text.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// An e-mail address as mail systems take it: a dot-atom local part of at
/// most 64 characters (RFC 5322 atext, no quoted strings), `@`, and a host
/// name with at least two labels; 254 characters in all (RFC 5321).
fn is_email(text: &str) -> bool {
    const ATEXT: &[u8] = b"!#$%&'*+-/=?^_`{|}~";
    let Some((local, domain)) = text.split_once('@') else { return false };
    text.len() <= 254
        && (1..=64).contains(&local.len())
        && local
            .split('.')
            .all(|atom| !atom.is_empty() && atom.bytes().all(|b| b.is_ascii_alphanumeric() || ATEXT.contains(&b)))
        && domain.contains('.')
        && is_hostname(domain)
}

/// A MAC address in lowercase, colon-separated.
pub(crate) fn mac_address(text: &str) -> Option<String> {
    let separator = *text.as_bytes().get(2)?;
    if text.len() != 17 || !matches!(separator, b':' | b'-') {
        return None;
    }
    let pairs: Vec<&str> = text.split(char::from(separator)).collect();
    let valid = pairs.len() == 6 && pairs.iter().all(|pair| pair.len() == 2 && u8::from_str_radix(pair, 16).is_ok());
    valid.then(|| pairs.join(":").to_ascii_lowercase())
}

/// A CVE id in upper case.
fn cve_id(text: &str) -> Option<String> {
    let upper = text.to_ascii_uppercase();
    let rest = upper.strip_prefix("CVE-")?;
    let (year, number) = rest.split_once('-')?;
    let valid = year.len() == 4
        && year.bytes().all(|b| b.is_ascii_digit())
        && (4..=19).contains(&number.len())
        && number.bytes().all(|b| b.is_ascii_digit());
    valid.then_some(upper)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use esr_store::Collection;

    fn database() -> (tempfile::TempDir, std::sync::Arc<dyn Store>) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = esr_store_sled::SledStore::open(dir.path()).expect("database");
        (dir, std::sync::Arc::new(db))
    }

    /// A batch with no line cap (the demo set's collections are re-imported whole).
    fn import(
        db: &dyn Store,
        organization: Uuid,
        collection: Collection,
        body: &[u8],
    ) -> Result<ImportSummary, ImportError> {
        super::import(db, organization, collection, body, usize::MAX, false)
    }

    fn ndjson(lines: &[Value]) -> Vec<u8> {
        lines.iter().map(|line| format!("{line}\n")).collect::<String>().into_bytes()
    }

    fn invalid(outcome: Result<ImportSummary, ImportError>) -> Vec<(usize, String, String)> {
        match outcome {
            Err(ImportError::Invalid { lines, .. }) => {
                lines.into_iter().map(|error| (error.line, error.field, error.reason)).collect()
            }
            other => panic!("expected invalid lines, got {other:?}"),
        }
    }

    fn endpoint(hostname: &str) -> Value {
        json!({"hostname": hostname, "operating_system": {"name": "Ubuntu 24.04", "family": "linux"}})
    }

    #[test]
    fn a_byte_order_mark_or_a_pretty_printed_file_is_named_as_such() {
        let (_dir, db) = database();
        let organization = Uuid::now_v7();
        let with_bom = [b"\xEF\xBB\xBF".as_slice(), &ndjson(&[endpoint("bom-1")])].concat();
        let errors = invalid(import(db.as_ref(), organization, Collection::Endpoints, &with_bom));
        assert!(errors[0].2.contains("byte order mark"), "{errors:?}");
        let pretty = serde_json::to_vec_pretty(&endpoint("pretty-1")).expect("json");
        let errors = invalid(import(db.as_ref(), organization, Collection::Endpoints, &pretty));
        assert!(errors.iter().all(|(_, _, reason)| reason.contains("one JSON object per line")), "{errors:?}");
        // Plain junk gets no such hint.
        let errors = invalid(import(db.as_ref(), organization, Collection::Endpoints, b"hostname=web-1\n"));
        assert!(!errors[0].2.contains("pretty-printed"), "{errors:?}");
    }

    fn finding(endpoint: &str, severity: &str, status: &str) -> Value {
        json!({
            "endpoint_id": endpoint, "finding_type": "vulnerability", "title": "OpenSSL flaw",
            "severity": severity, "status": status, "cve_id": "CVE-2024-12797",
            "subject": {"type": "software", "vendor": "OpenSSL", "product": "openssl", "version": "3.0.2"},
            "source": {"scanner": "trivy", "scanner_finding_id": format!("t-{severity}-{status}")},
            "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00+01:00",
            "resolved_at": if status == "resolved" { json!("2026-11-21T00:00:00Z") } else { Value::Null },
        })
    }

    #[test]
    fn a_batch_with_any_bad_line_writes_nothing_and_names_each_problem() -> anyhow::Result<()> {
        let (_dir, db) = database();
        let organization = Uuid::now_v7();
        let other_organization = Uuid::now_v7();
        let theirs = import(&*db, other_organization, Collection::Endpoints, &ndjson(&[endpoint("theirs")]))?.ids[0];
        let mut unknown_field = endpoint("b");
        unknown_field["colour"] = json!("red");
        let mut bad_family = endpoint("c");
        bad_family["operating_system"]["family"] = json!("beos");
        let mut bad_ip = endpoint("d");
        bad_ip["ip"] = json!("10.0.0.999");
        bad_ip["tags"] = json!(["ok", 7]);
        let mut body = ndjson(&[endpoint("a"), unknown_field, bad_family, bad_ip, json!({"hostname": ""})]);
        body.extend_from_slice(b"{not json\n[1]\n");
        body.extend_from_slice(format!("{}\n", finding(&theirs.to_string(), "high", "open")).as_bytes());
        let errors = invalid(import(&*db, organization, Collection::Endpoints, &body));
        let expect = |line: usize, field: &str, reason: &str| {
            assert!(
                errors.iter().any(|(l, f, r)| *l == line && f == field && r.contains(reason)),
                "line {line} {field} {reason}: {errors:?}"
            );
        };
        expect(2, "colour", "unknown field");
        expect(3, "operating_system.family", "must be one of macos, windows, linux, other");
        expect(4, "ip", "not an IPv4 or IPv6 address");
        expect(4, "tags[1]", "must be a string");
        expect(5, "hostname", "must not be empty");
        expect(5, "operating_system", "required");
        expect(6, "", "not valid JSON");
        expect(7, "", "one JSON object");
        expect(8, "endpoint_id", "unknown field");
        assert!(errors.iter().all(|(line, _, _)| *line != 1), "line 1 is valid");
        assert_eq!(db.reader(organization)?.count(Collection::Endpoints)?, 0, "nothing written");

        // Another organization's endpoint does not exist for this one.
        let mine = import(&*db, organization, Collection::Endpoints, &ndjson(&[endpoint("mine")]))?.ids[0];
        let errors = invalid(import(
            &*db,
            organization,
            Collection::VulnerabilityFindings,
            &ndjson(&[finding(&mine.to_string(), "high", "open"), finding(&theirs.to_string(), "high", "open")]),
        ));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!((errors[0].0, errors[0].1.as_str()), (2, "endpoint_id"));
        assert_eq!(db.reader(organization)?.count(Collection::VulnerabilityFindings)?, 0);
        Ok(())
    }

    #[test]
    fn states_move_only_as_the_contract_allows() -> anyhow::Result<()> {
        let (_dir, db) = database();
        let organization = Uuid::now_v7();
        let host = import(&*db, organization, Collection::Endpoints, &ndjson(&[endpoint("a")]))?.ids[0].to_string();
        let mut resolved = finding(&host, "high", "resolved");
        let id = import(&*db, organization, Collection::VulnerabilityFindings, &ndjson(&[resolved.clone()]))?.ids[0];
        resolved["id"] = json!(id);
        let mut open = finding(&host, "high", "open");
        open["id"] = json!(id);
        let errors = invalid(import(&*db, organization, Collection::VulnerabilityFindings, &ndjson(&[open.clone()])));
        assert_eq!(errors, [(1, "status".to_owned(), "a resolved record cannot become open".to_owned())]);
        // Earlier lines of the batch count: resolved → reopened → open is refused too.
        let mut reopened = open.clone();
        reopened["status"] = json!("reopened");
        let errors = invalid(import(
            &*db,
            organization,
            Collection::VulnerabilityFindings,
            &ndjson(&[reopened.clone(), resolved.clone(), open]),
        ));
        assert_eq!(errors, [(3, "status".to_owned(), "a resolved record cannot become open".to_owned())]);
        let summary = import(&*db, organization, Collection::VulnerabilityFindings, &ndjson(&[reopened]))?;
        assert_eq!(summary.updated, 1);

        let mut suppressed = finding(&host, "low", "suppressed");
        let errors =
            invalid(import(&*db, organization, Collection::VulnerabilityFindings, &ndjson(&[suppressed.clone()])));
        assert_eq!(errors, [(1, "suppression".to_owned(), "required when status is suppressed".to_owned())]);
        suppressed["suppression"] = json!({"reason": "accepted_risk"});
        import(&*db, organization, Collection::VulnerabilityFindings, &ndjson(&[suppressed]))?;

        let target = json!({"endpoint_id": host, "target_type": "software", "discovery_method": "passive",
                            "status": "obsolete", "finding_ids": [id],
                            "subject": {"type": "software", "vendor": "OpenSSL", "product": "openssl"}});
        let target_id =
            import(&*db, organization, Collection::RemediationTargets, &ndjson(std::slice::from_ref(&target)))?.ids[0];
        let mut revived = target;
        revived["id"] = json!(target_id);
        revived["status"] = json!("queued");
        let errors = invalid(import(&*db, organization, Collection::RemediationTargets, &ndjson(&[revived])));
        assert_eq!(errors, [(1, "status".to_owned(), "a obsolete record cannot become queued".to_owned())]);
        Ok(())
    }

    #[test]
    fn later_lines_of_the_same_id_build_on_earlier_ones() -> anyhow::Result<()> {
        let (_dir, db) = database();
        let organization = Uuid::now_v7();
        let mut host = endpoint("a");
        let id = import(&*db, organization, Collection::Endpoints, &ndjson(&[host.clone()]))?.ids[0];
        host["id"] = json!(id);
        let mut renamed = host.clone();
        renamed["hostname"] = json!("b");
        // Unchanged, then changed, then changed back: one record, updated.
        let summary = import(&*db, organization, Collection::Endpoints, &ndjson(&[host.clone(), renamed, host]))?;
        assert_eq!((summary.created, summary.updated, summary.unchanged), (0, 2, 1));
        assert_eq!(db.reader(organization)?.count(Collection::Endpoints)?, 1);
        let stored: Value = serde_json::from_slice(&db.get(organization, Collection::Endpoints, id)?.expect("stored"))?;
        assert_eq!(stored["hostname"], "a");
        Ok(())
    }

    #[test]
    fn service_fields_move_only_with_content_and_open_counts_follow_findings() -> anyhow::Result<()> {
        let (_dir, db) = database();
        let organization = Uuid::now_v7();
        let mut host = endpoint("a");
        host["created_at"] = json!("2001-01-01T00:00:00Z");
        host["open_findings"] = json!({"critical": 99});
        let host_id = import(&*db, organization, Collection::Endpoints, &ndjson(&[host.clone()]))?.ids[0];
        let stored = |collection: Collection, id: Uuid| -> Value {
            serde_json::from_slice(&db.get(organization, collection, id).expect("get").expect("stored")).expect("json")
        };
        let created = stored(Collection::Endpoints, host_id);
        assert_ne!(created["created_at"], json!("2001-01-01T00:00:00Z"), "the service sets created_at");
        assert_eq!(created["open_findings"], json!({"critical": 0, "high": 0, "medium": 0, "low": 0, "info": 0}));
        assert_eq!(created["tags"], json!([]));
        assert_eq!(created["agent_id"], Value::Null);

        host["id"] = json!(host_id);
        let again = import(&*db, organization, Collection::Endpoints, &ndjson(&[host.clone()]))?;
        assert_eq!((again.created, again.updated, again.unchanged), (0, 0, 1));
        assert_eq!(stored(Collection::Endpoints, host_id), created, "a quiet re-import changes nothing");

        let host_text = host_id.to_string();
        let lines = [
            finding(&host_text, "critical", "open"),
            finding(&host_text, "high", "open"),
            finding(&host_text, "high", "resolved"),
            finding(&host_text, "low", "open"),
        ];
        let ids = import(&*db, organization, Collection::VulnerabilityFindings, &ndjson(&lines))?.ids;
        let counted = stored(Collection::Endpoints, host_id);
        assert_eq!(counted["open_findings"], json!({"critical": 1, "high": 1, "medium": 0, "low": 1, "info": 0}));
        assert!(counted["updated_at"].as_str() > created["updated_at"].as_str(), "derived changes move updated_at");
        assert_eq!(counted["created_at"], created["created_at"]);

        // Resolve the critical one, re-open the resolved high one, and change the low one's severity.
        let mut resolve = lines[0].clone();
        resolve["id"] = json!(ids[0]);
        resolve["status"] = json!("resolved");
        resolve["resolved_at"] = json!("2026-11-21T00:00:00Z");
        let mut reopen = lines[2].clone();
        reopen["id"] = json!(ids[2]);
        reopen["status"] = json!("reopened");
        let mut regrade = lines[3].clone();
        regrade["id"] = json!(ids[3]);
        regrade["severity"] = json!("medium");
        let mut same = lines[1].clone();
        same["id"] = json!(ids[1]);
        let summary =
            import(&*db, organization, Collection::VulnerabilityFindings, &ndjson(&[resolve, reopen, regrade, same]))?;
        assert_eq!((summary.created, summary.updated, summary.unchanged), (0, 3, 1));
        assert_eq!(
            stored(Collection::Endpoints, host_id)["open_findings"],
            json!({"critical": 0, "high": 2, "medium": 1, "low": 0, "info": 0})
        );
        assert_eq!(db.reader(organization)?.index_count(Collection::VulnerabilityFindings, "status", "resolved")?, 1);
        assert_eq!(db.reader(organization)?.index_count(Collection::VulnerabilityFindings, "severity", "low")?, 0);
        let unchanged = stored(Collection::VulnerabilityFindings, ids[1]);
        assert_eq!(unchanged["last_seen_at"], json!("2026-11-19T23:00:00Z"), "timestamps are stored in UTC");
        assert!(Collection::ALL.into_iter().all(|c| !schema(c).is_empty()));
        Ok(())
    }
}
