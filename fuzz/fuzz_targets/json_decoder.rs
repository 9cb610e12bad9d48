//! Fuzz target: the source's JSON decoder against serde_json on arbitrary bytes; the check is
//! `oracles/json_decoder.rs`, which the stable tests also run over the committed seeds.

#![no_main]

#[path = "../oracles/json_decoder.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|payload: &[u8]| oracle::check(payload));
