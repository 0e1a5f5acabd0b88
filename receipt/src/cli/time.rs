//! Timestamps as the CLI prints them: ISO-8601 UTC with milliseconds, as JavaScript's
//! `Date#toISOString` writes them.

/// `ms` since the epoch as an ISO-8601 UTC instant with milliseconds, as JavaScript's
/// `Date#toISOString` writes it (years outside 0..=9999 get a sign and six digits).
pub(super) fn iso_ts(ms: i64) -> String {
    const DAY_MS: i64 = 86_400_000;
    let days = ms.div_euclid(DAY_MS);
    let in_day = ms.rem_euclid(DAY_MS);
    let (year, month, day) = civil_from_days(days);
    let year = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else if year < 0 {
        format!("-{:06}", year.unsigned_abs())
    } else {
        format!("+{year:06}")
    };
    format!(
        "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, on 400-year eras of 146 097 days that start on March 1st).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // shift the epoch to 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146_096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year
    let mp = (5 * doy + 2) / 153; // March-based month, 0..=11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_timestamps() {
        assert_eq!(iso_ts(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_ts(1_767_225_600_000), "2026-01-01T00:00:00.000Z");
        assert_eq!(iso_ts(1_767_225_599_999), "2025-12-31T23:59:59.999Z");
        assert_eq!(iso_ts(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_ts(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(iso_ts(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(iso_ts(-62_167_219_200_000), "0000-01-01T00:00:00.000Z");
        assert_eq!(iso_ts(253_402_300_800_000), "+010000-01-01T00:00:00.000Z");
        assert_eq!(iso_ts(-62_167_219_200_001), "-000001-12-31T23:59:59.999Z");
        assert_eq!(iso_ts(8_640_000_000_000_000), "+275760-09-13T00:00:00.000Z");
    }

    #[test]
    fn every_day_round_trips() {
        // Walk day by day over four centuries and check the date advances like a calendar.
        let (mut y, mut m, mut d) = civil_from_days(-719_468); // 0000-03-01
        assert_eq!((y, m, d), (0, 3, 1));
        for days in -719_467..200_000 {
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let month_len = match m {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            (y, m, d) = if d < month_len {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
        }
    }
}
