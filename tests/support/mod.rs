//! Shared helpers of the integration tests: the real broker (started by scripts/test.sh),
//! fresh topics per test, producing generated events, reading topics back, and the naive
//! oracle that recomputes every window from the generated events.

#![allow(dead_code)]

pub mod kafka;
pub mod oracle;
pub mod window_oracle;
