//! A criterion [`Measurement`] of the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`)
//! instead of wall-clock time. On a shared machine a single-threaded benchmark is descheduled
//! whenever other processes want its core; wall-clock time then counts their time too, while
//! thread CPU time counts only the time the benchmark ran, i.e. throughput *per core*. It does
//! not remove the other processes' effect on shared caches. Values are nanoseconds, formatted
//! like criterion's wall time.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use rustix::time::{clock_gettime, ClockId, Timespec};

/// Thread CPU time, in nanoseconds.
pub struct ThreadCpuTime;

/// Criterion's wall-time formatter (nanoseconds -> ns/µs/ms/s, elements/s).
static NANOS: WallTime = WallTime;

fn nanos(t: Timespec) -> u64 {
    (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        nanos(clock_gettime(ClockId::ThreadCPUTime))
    }

    fn end(&self, start: u64) -> u64 {
        nanos(clock_gettime(ClockId::ThreadCPUTime)).saturating_sub(start)
    }

    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        NANOS.formatter()
    }
}
