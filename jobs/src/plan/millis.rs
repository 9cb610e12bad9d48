//! Durations as the operator configurations count them (milliseconds), saturating instead of
//! wrapping: the one place a plan's `Duration` becomes a number.

use std::time::Duration;

/// `duration` in whole milliseconds (`u64::MAX` past it).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `duration` in whole milliseconds as a signed count (`i64::MAX` past it).
pub fn millis_i64(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A job file's millisecond count as a `Duration` (`None` for zero or less: "off").
pub fn positive(ms: i64) -> Option<Duration> {
    u64::try_from(ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_saturates() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(millis_i64(Duration::MAX), i64::MAX);
        assert_eq!(positive(0), None);
        assert_eq!(positive(-5), None);
        assert_eq!(positive(100), Some(Duration::from_millis(100)));
    }
}
