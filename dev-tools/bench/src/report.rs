//! The report's shared pieces: a latency table's row, and printing a
//! part's report and keeping it in a file.

use std::path::Path;
use std::time::Duration;

use crate::stats::{ms, percentile};

/// One case of a latency table: its name, a count, p50 and p90 in ms, the target.
pub(crate) fn latency_row(case: &str, count: &dyn std::fmt::Display, samples: &[Duration], target: &str) -> String {
    format!(
        "{:<56} {:>9} {:>9.3} {:>9.3}  {target}\n",
        case,
        count.to_string(),
        ms(percentile(samples, 0.5)),
        ms(percentile(samples, 0.9)),
    )
}

/// Prints a part's report and keeps it in `out/file`.
pub(crate) fn print_and_keep(out: &Path, file: &str, report: &str) -> anyhow::Result<()> {
    print!("{report}");
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join(file), report)?;
    Ok(())
}
