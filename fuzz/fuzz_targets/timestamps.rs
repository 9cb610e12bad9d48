//! Fuzz target: every event-time parser of `weir_features::timestamp` against its definition
//! and a naive RFC 3339 parser; the check is `oracles/timestamps.rs`, which the stable tests
//! also run over the committed seeds.

#![no_main]

#[path = "../oracles/timestamps.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle::check(data));
