//! What the host takes from the operating system: the wall clock (and the
//! RFC 3339 text it writes times as), and files and directories only esr's
//! own user may read or change.

pub mod clock;
pub mod private_files;
