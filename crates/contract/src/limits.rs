//! The bounds the public API states, shared by the host (which enforces and
//! documents them) and the components (which apply them).

/// The most records one list page holds.
pub const MAX_LIMIT: u32 = 100;

/// The longest cursor the host issues or accepts, in characters.
pub const MAX_CURSOR_CHARS: usize = 4096;

/// The most groups a summary answers: beyond it the request is refused as
/// too broad (a field of many values, such as `scanner`, needs a filter).
pub const MAX_SUMMARY_GROUPS: usize = 10_000;

/// The longest value a group holds (index values are the records' short texts).
pub const MAX_SUMMARY_VALUE_CHARS: usize = 256;

/// The most ranges one count names (`store.count-in-ranges`,
/// `store.count-groups-in-ranges`): a collection has a few sort indexes,
/// and each range is a walk of the host's, so a component may not ask for
/// more.
pub const MAX_RANGES: usize = 4;
