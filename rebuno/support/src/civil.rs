//! Civil (calendar) dates in the proleptic Gregorian calendar, as day counts since
//! 1970-01-01 and back, on 400-year eras of 146 097 days that start on March 1st (so the leap
//! day is the last day of its year and needs no special case).

/// Days from 0000-03-01 (the start of the first era) to 1970-01-01.
const EPOCH_SHIFT: i64 = 719_468;
/// Days in a 400-year era.
const ERA_DAYS: i64 = 146_097;

/// The date `(year, month, day)` of day `days` since 1970-01-01 (negative before it); month
/// and day count from 1.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + EPOCH_SHIFT;
    let era = z.div_euclid(ERA_DAYS);
    let doe = z.rem_euclid(ERA_DAYS); // day of era, 0..=146_096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year
    let mp = (5 * doy + 2) / 153; // March-based month, 0..=11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day count since 1970-01-01 of the date `year-month-day` (month 1..=12; a day past the
/// end of its month counts on into the next).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * ERA_DAYS + doe - EPOCH_SHIFT
}

/// `ms` since the epoch as an ISO-8601 UTC instant with milliseconds, as JavaScript's
/// `Date#toISOString` writes it (years outside 0..=9999 get a sign and six digits).
pub fn iso_ms(ms: i64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn days_from_civil_inverts_civil_from_days() {
        for day in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
    }
}
