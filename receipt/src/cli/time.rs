//! Timestamps as the CLI prints them: ISO-8601 UTC with milliseconds, as JavaScript's
//! `Date#toISOString` writes them.

/// `ms` since the epoch as an ISO-8601 UTC instant with milliseconds, as JavaScript's
/// `Date#toISOString` writes it (years outside 0..=9999 get a sign and six digits).
pub(super) fn iso_ts(ms: i64) -> String {
    durable_support::civil::iso_ms(ms)
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
}
