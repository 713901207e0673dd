//! What the host takes from the operating system: the wall clock (and the
//! RFC 3339 text it writes times as), files and directories only esr's own
//! user may read or change, and whether its memory may be swapped out.

pub mod clock;
pub mod private_files;
pub mod swap;
