//! The write path: everything that changes what the store holds. Components
//! never write; writes come through the admin listener and the host's jobs,
//! each batch one `Store::write_batch`.
//!
//! - `ingest`: NDJSON batches, validated line by line, written all or nothing;
//!   `natural_keys` finds a line without an id again; `pairing` keeps
//!   findings and remediation targets agreeing.
//! - `reports`: a converted scanner report becomes endpoints, findings and
//!   targets.
//! - `deletions`: a record and what depends on it.
//! - The background jobs: `suppression_expiry` reopens findings whose
//!   suppression ran out; `change_retention` drops old deletion events.

pub mod change_retention;
pub mod deletions;
mod host_matching;
pub mod ingest;
pub mod natural_keys;
pub mod pairing;
pub mod reports;
pub mod suppression_expiry;
