//! RFC 3339 timestamps, compared as instants.

/// An instant: nanoseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Seconds and nanoseconds since the epoch of
    /// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (RFC 3339).
    fn parse_parts(text: &str) -> Option<(i64, i64)> {
        let b = text.as_bytes();
        if b.len() < 20
            || b[4] != b'-'
            || b[7] != b'-'
            || !matches!(b[10], b'T' | b't')
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        let year = digits(&b[0..4])?;
        let month = digits(&b[5..7])?;
        let day = digits(&b[8..10])?;
        let hour = digits(&b[11..13])?;
        let minute = digits(&b[14..16])?;
        let second = digits(&b[17..19])?;
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 60
        {
            return None;
        }
        let mut rest = &b[19..];
        let mut nanos: i64 = 0;
        if let [b'.', tail @ ..] = rest {
            let count = tail.iter().take_while(|c| c.is_ascii_digit()).count();
            if count == 0 {
                return None;
            }
            // RFC 3339 allows any number of digits; beyond nanoseconds they are dropped.
            let kept = count.min(9);
            nanos = digits(&tail[..kept])? * 10_i64.pow(9 - kept as u32);
            rest = &tail[count..];
        }
        let offset_seconds = match rest {
            [b'Z' | b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let hours = digits(&[*h1, *h2])?;
                let minutes = digits(&[*m1, *m2])?;
                if hours > 23 || minutes > 59 {
                    return None;
                }
                let magnitude = hours * 3600 + minutes * 60;
                if *sign == b'+' { magnitude } else { -magnitude }
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_seconds;
        Some((seconds, nanos))
    }

    /// Parses an RFC 3339 timestamp between the years 1677 and 2262 (what
    /// nanoseconds in an `i64` span); others are `None`.
    pub fn parse(text: &str) -> Option<Timestamp> {
        let (seconds, nanos) = Timestamp::parse_parts(text)?;
        seconds.checked_mul(1_000_000_000)?.checked_add(nanos).map(Timestamp)
    }

    /// Parses any RFC 3339 timestamp; one before 1677 or after 2262 becomes
    /// the first or last instant there is, which orders it correctly
    /// against every stored time (for filters such as `updatedAfter`).
    pub fn parse_saturating(text: &str) -> Option<Timestamp> {
        let (seconds, nanos) = Timestamp::parse_parts(text)?;
        Some(Timestamp(seconds.saturating_mul(1_000_000_000).saturating_add(nanos)))
    }
}

impl Timestamp {
    /// The instant in UTC, `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, with as many
    /// fraction digits as it needs (none for whole seconds).
    pub fn format(self) -> String {
        let (seconds, nanos) = (self.0.div_euclid(1_000_000_000), self.0.rem_euclid(1_000_000_000));
        let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        let mut text = format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            second_of_day / 3600,
            second_of_day % 3600 / 60,
            second_of_day % 60
        );
        if nanos != 0 {
            let fraction = format!("{nanos:09}");
            text.push('.');
            text.push_str(fraction.trim_end_matches('0'));
        }
        text.push('Z');
        text
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (the
/// inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

fn digits(bytes: &[u8]) -> Option<i64> {
    bytes.iter().try_fold(0_i64, |acc, b| b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0')))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_and_offsets_to_the_same_instant() {
        let utc = Timestamp::parse("2026-11-22T05:39:42Z").expect("valid");
        assert_eq!(utc.0, 1_795_325_982 * 1_000_000_000);
        assert_eq!(Timestamp::parse("2026-11-22T06:39:42+01:00"), Some(utc));
        assert_eq!(Timestamp::parse("2026-11-22T05:39:42.5Z").map(|t| t.0 - utc.0), Some(500_000_000));
        assert_eq!(Timestamp::parse("1970-01-01T00:00:00Z"), Some(Timestamp(0)));
    }

    #[test]
    fn formats_what_it_parses_in_utc() {
        for (text, utc) in [
            ("2026-11-22T05:39:42Z", "2026-11-22T05:39:42Z"),
            ("2026-11-22T06:39:42.250+01:00", "2026-11-22T05:39:42.25Z"),
            ("2024-02-29T23:59:59.000001Z", "2024-02-29T23:59:59.000001Z"),
            ("1969-12-31T23:59:59.5Z", "1969-12-31T23:59:59.5Z"),
        ] {
            assert_eq!(Timestamp::parse(text).map(Timestamp::format).as_deref(), Some(utc), "{text}");
        }
    }

    #[test]
    fn rejects_malformed_timestamps() {
        for bad in [
            "2026-11-22",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-22T05:39:42",
            "2026-11-22T05:39:42+0100",
            "2026-11-22T24:00:00Z",
            "2026-11-22T05:39:42.Z",
            "２０２６-11-22T05:39:42Z",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad}");
            assert_eq!(Timestamp::parse_saturating(bad), None, "{bad}");
        }
    }

    #[test]
    fn instants_beyond_nanosecond_range_are_refused_or_saturated() {
        assert_eq!(Timestamp::parse("0001-01-01T00:00:00Z"), None);
        assert_eq!(Timestamp::parse_saturating("0001-01-01T00:00:00Z"), Some(Timestamp(i64::MIN)));
        assert_eq!(Timestamp::parse_saturating("9999-12-31T23:59:59.999999999999Z"), Some(Timestamp(i64::MAX)));
        let many_digits = Timestamp::parse("2026-11-22T05:39:42.1234567891234Z").expect("valid");
        assert_eq!(many_digits.0 % 1_000_000_000, 123_456_789);
    }
}
