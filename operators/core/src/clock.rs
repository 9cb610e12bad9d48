//! The wall clock, read in one place: ticks, key TTLs, latency stamps and inference times all
//! use these (0 if the system clock is before 1970).

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in Unix milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Wall-clock time in Unix nanoseconds.
pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
