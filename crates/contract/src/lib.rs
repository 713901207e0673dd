//! The contract every part of esr shares, host and components alike: what
//! records may hold and how they change, the indexes the host keeps, time,
//! the public API's bounds, and the converted report importers return. No
//! WebAssembly, no storage, no HTTP: plain Rust both sides build.
//!
//! - [`collection`]: the collections the API serves, one value each.
//! - [`schema`], [`contract`]: the records' fields, enum value sets and
//!   state machines; [`text`]: what text they may hold, and the form names
//!   match in.
//! - [`indexes`]: the table of indexes the host keeps, with [`sort`]
//!   values, and what a read of them names: positions, conditions, ranges,
//!   group counts (one type each, from the WIT glue down to each backend).
//! - [`time`]: RFC 3339 timestamps.
//! - [`limits`]: the bounds the API states.
//! - [`report`]: the neutral report scanner-report importers return, and
//!   the mappings they share (severities, CVSS, package managers, VEX).

pub mod collection;
pub mod contract;
pub mod indexes;
pub mod limits;
pub mod report;
pub mod schema;
pub mod sort;
pub mod text;
pub mod time;

pub use collection::Collection;

/// Record ids, as index positions carry them.
pub use uuid::Uuid;

/// A record id's length as text (a hyphenated UUID): each id's share of
/// a `store.index-scan-batch` answer's `ids`.
pub const UUID_TEXT_LEN: usize = uuid::fmt::Hyphenated::LENGTH;

/// The name a component's descriptor gives, among what its store `reads`,
/// the caller's organization record.
pub const ORGANIZATION: &str = "organization";
