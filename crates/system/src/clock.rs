//! The server's clock and the RFC 3339 text it writes times as.

use esr_contract::time::Timestamp;

/// Now, in Unix nanoseconds.
pub fn unix_now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Now, in whole Unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Whole Unix seconds as RFC 3339 in UTC (`2026-11-27T07:41:12Z`).
pub fn format_timestamp(unix_seconds: i64) -> String {
    Timestamp(unix_seconds.saturating_mul(1_000_000_000)).format()
}

/// Now, as [`format_timestamp`] writes it.
pub fn now_rfc3339() -> String {
    format_timestamp(unix_now())
}
