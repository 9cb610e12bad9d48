//! Tests of the JSON decoder's two paths against each other ([`crate::json_scan`], the fast
//! path, and [`crate::decode`]'s serde path): wherever the fast path answers, the serde path
//! must give the same values, bit for bit (and so the same key and event time).

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::decode::JsonDecoder;
use crate::json_scan::{decode_object, needs_escape, special_bytes};
use crate::record::{Value, Values};
use crate::schema::{FieldDecl, FieldType, RecordSchema};

fn decoder() -> JsonDecoder {
    let optional = |ty| FieldDecl::Full {
        ty,
        required: false,
    };
    let fields = BTreeMap::from([
        ("user".to_owned(), FieldDecl::Type(FieldType::String)),
        ("ts".to_owned(), FieldDecl::Type(FieldType::TimestampMs)),
        ("amount".to_owned(), optional(FieldType::F64)),
        ("n".to_owned(), optional(FieldType::I64)),
        ("flag".to_owned(), optional(FieldType::Bool)),
        ("kind".to_owned(), optional(FieldType::String)),
        ("seen_s".to_owned(), optional(FieldType::TimestampS)),
        ("seen_at".to_owned(), optional(FieldType::TimestampRfc3339)),
    ]);
    let schema = RecordSchema::new(&fields, "user", "ts").expect("a valid schema");
    JsonDecoder::new(schema)
}

/// Values compared bit for bit (`-0.0` is not `0.0` here).
fn same(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Value::Num(x), Value::Num(y)) => x.to_bits() == y.to_bits(),
            (x, y) => x == y,
        })
}

/// Whether the fast path answered for `text`; panics when it answered otherwise than
/// the serde path.
fn agrees(d: &JsonDecoder, text: &str) -> bool {
    let missing = || Values::from_elem(Value::Missing, d.schema().fields().len());
    let mut fast = missing();
    if decode_object(d.schema(), text, &mut fast).is_none() {
        return false;
    }
    let mut slow = missing();
    let by_serde = d.decode_with_serde(text, &mut slow);
    let consistent = match by_serde {
        Ok(_) => same(&fast, &slow),
        // A required field missing is `finish`'s verdict, which both paths share.
        Err(ref e) => e.reason == crate::dead_letter::DeadLetterReason::MissingField,
    };
    assert!(
        consistent,
        "{text:?}: fast {fast:?}, serde {by_serde:?} {slow:?}"
    );
    true
}

#[test]
fn ordinary_records_take_the_fast_path_and_agree() {
    let d = decoder();
    for text in [
        r#"{"user":"u000001","ts":1767225599511,"type":"view","dwell_ms":1177.2}"#,
        r#" { "user" : "é✓" , "ts" : 5 , "amount" : null , "flag" : true } "#,
        r#"{"user":"u","ts":-5,"n":-9007199254740992,"amount":-0,"kind":""}"#,
        r#"{"user":"u","ts":1.5e3,"amount":1e-400,"seen_s":1733097600.25}"#,
        r#"{"user":"u","ts":1,"seen_at":"2026-11-30T12:00:00.250+01:00"}"#,
        r#"{"user":"u","ts":1,"x":[1,{"a":[true,false,null,-0.5e+7]},"s"],"y":{}}"#,
        r#"{"user":"a","user":"b","ts":1,"ts":2}"#,
        r#"{"user":"u","ts":1,"big":123456789012345678901234567890e999}"#,
        "{}",
    ] {
        assert!(agrees(&d, text), "{text} should take the fast path");
    }
}

#[test]
fn other_shapes_go_to_the_serde_path() {
    let d = decoder();
    for text in [
        r#"{"user":"u\u0031","ts":1}"#,
        r#"{"us\"er":"u","ts":1}"#,
        r#"{"user":"u","ts":1,"x":"a\nb"}"#,
        r#"{"user":"u","ts":01}"#,
        r#"{"user":"u","ts":18446744073709551616}"#,
        r#"{"user":"u","ts":1e400}"#,
        r#"{"user":"u","ts":1,}"#,
        r#"{"user":"u","ts":1} x"#,
        r#"{"user":"u","ts":"1"}"#,
        r#"{"user":"u","ts":1,"n":1.5}"#,
        r#"{"user":"u","ts":1,"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
        "[1]",
        "",
    ] {
        assert!(!agrees(&d, text), "{text} should be left to serde");
    }
}

/// A JSON value, valid or nearly so, as text.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:e}")),
        any::<f64>().prop_map(|v| v.to_string()),
        "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?",
        "[-+0-9.eE]{1,12}",
        "\"[a-z\u{e9}\u{2713}\\\\\"\n]{0,6}\"",
        "2026-1[0-2]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,4})?(Z|[+-][01][0-9]:[0-5][0-9])"
            .prop_map(|s| format!("\"{s}\"")),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("nul".to_owned()),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(","))),
            proptest::collection::vec(("[a-z]{1,3}", inner), 0..4).prop_map(|members| {
                let members: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!("\"{k}\":{v}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "user", "ts", "amount", "n", "flag", "kind", "seen_s", "seen_at", "other",
        ])
        .prop_map(str::to_owned),
        "[a-z\\\\]{1,4}",
    ]
}

/// An object of generated members, with whitespace of any JSON kind between tokens.
fn object() -> impl Strategy<Value = String> {
    let ws = "[ \t\r\n]{0,2}";
    proptest::collection::vec((name(), value(), ws, ws), 0..8).prop_map(|members| {
        let members: Vec<String> = members
            .iter()
            .map(|(k, v, a, b)| format!("{a}\"{k}\"{b}:{a}{v}{b}"))
            .collect();
        format!("{{{}}}", members.join(","))
    })
}

/// A number's text in every form a producer writes: integers, decimals, exponents,
/// shortest round-trip and long expansions.
fn float_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|v| format!("{v:e}")),
        (-1e15f64..1e15).prop_map(|v| v.to_string()),
        (-1e6f64..1e6).prop_map(|v| format!("{v:.3}")),
        "-?(0|[1-9][0-9]{0,17})(\\.[0-9]{1,25})?([eE][+-]?[0-9]{1,2})?",
        any::<i32>().prop_map(|v| v.to_string()),
    ]
}

/// A record of the test schema whose every declared field has a value of its type,
/// beside unknown fields of any shape: the fast path must read it.
fn typed_record() -> impl Strategy<Value = String> {
    (
        "[a-z0-9\u{e9}]{1,30}",
        -(1i64 << 53)..(1i64 << 53),
        float_text(),
        -(1i64 << 53)..(1i64 << 53),
        any::<bool>(),
        (0i64..4_000_000_000).prop_map(|s| format!("{}.{:03}", s, s % 1000)),
        proptest::collection::vec(("x[a-z]{0,3}", value()), 0..3),
    )
        .prop_map(|(user, ts, amount, n, flag, seen_s, unknown)| {
            let mut members = vec![
                format!("\"user\":\"{user}\""),
                format!("\"ts\":{ts}"),
                format!("\"amount\":{amount}"),
                format!("\"n\":{n}"),
                format!("\"flag\":{flag}"),
                format!("\"seen_s\":{seen_s}"),
            ];
            members.extend(
                unknown
                    .iter()
                    .filter(|(_, v)| !v.contains('\\') && !v.contains('\n'))
                    .filter(|(_, v)| serde_json::from_str::<serde::de::IgnoredAny>(v).is_ok())
                    .map(|(k, v)| format!("\"{k}\":{v}")),
            );
            format!("{{{}}}", members.join(","))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn typed_records_take_the_fast_path_and_agree(text in typed_record()) {
        prop_assert!(agrees(&decoder(), &text), "{} was left to serde", text);
    }

    #[test]
    fn the_fast_path_agrees_with_serde(text in object()) {
        agrees(&decoder(), &text);
    }

    #[test]
    fn the_fast_path_agrees_on_mutated_records(
        text in object(),
        at in 0.0f64..1.0,
        byte in proptest::sample::select(b"{}[]\",:0-.e \\ntx".to_vec()),
        edit in 0u8..3,
    ) {
        let mut bytes = text.into_bytes();
        let i = ((bytes.len() as f64) * at) as usize;
        match edit {
            0 => bytes.insert(i, byte),
            1 if i < bytes.len() => { bytes.remove(i); }
            _ => bytes.truncate(i),
        }
        if let Ok(text) = String::from_utf8(bytes) {
            agrees(&decoder(), &text);
        }
    }
}

/// Bytes at the edges of the string scan's tests ([`crate::json_scan::special_bytes`]): the
/// specials, their neighbours, and the same with the high bit set.
fn edge_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        any::<u8>(),
        proptest::sample::select(vec![
            0x00, 0x01, 0x1f, 0x20, 0x21, b'"', 0x23, 0x5b, b'\\', 0x5d, 0x7f, 0x80, 0x9f, 0xa0,
            0xa2, 0xdc, 0xff,
        ]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]
    /// Eight bytes at a time find the byte a byte-by-byte scan stops at, or none.
    #[test]
    fn special_bytes_finds_the_first_quote_escape_or_control_byte(
        word in proptest::array::uniform8(edge_byte()),
    ) {
        let first = word.iter().position(|&b| needs_escape(b)).unwrap_or(8);
        let found = special_bytes(u64::from_le_bytes(word));
        let at = if found == 0 { 8 } else { (found.trailing_zeros() / 8) as usize };
        prop_assert_eq!(at, first, "{:02x?}", word);
    }

    /// Decimals within the exact fast path's digits, and just beyond, read to serde's bits.
    #[test]
    fn short_decimals_agree_with_serde(
        text in "-?(0|[1-9][0-9]{0,15})\\.[0-9]{1,16}",
    ) {
        let record = format!(r#"{{"user":"u","ts":1,"amount":{text}}}"#);
        prop_assert!(agrees(&decoder(), &record), "{} was left to serde", record);
    }
}

/// Strings of every length around the eight-byte scan's steps end at their closing quote
/// (ASCII and multi-byte text), and one with a control byte or an escape at any place is left
/// to serde.
#[test]
fn strings_of_every_length_end_where_they_end() {
    let d = decoder();
    for len in 0..40 {
        for fill in ["a", "é", "✓"] {
            let text = fill.repeat(len);
            let record = format!(r#"{{"user":"{text}","ts":1,"kind":"{text}"}}"#);
            assert!(agrees(&d, &record), "{record} should take the fast path");
            for at in 0..=len {
                let (head, tail) = text.split_at(fill.len() * at);
                for special in ["\u{1}", "\\n", "\\\""] {
                    let record = format!(r#"{{"user":"{head}{special}{tail}","ts":1}}"#);
                    assert!(!agrees(&d, &record), "{record} should be left to serde");
                }
            }
        }
    }
}

/// The `json_decoder` fuzz target's committed seeds (`fuzz/seeds/`, the fuzzing corpus
/// minimized to one input per code edge; `features/tests/fuzz_seeds.rs` runs the target's own
/// check on them): every one that is UTF-8 text and that the fast path answers is answered
/// as the serde path answers it.
#[test]
fn the_fuzz_seeds_the_fast_path_answers_agree() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/json_decoder");
    let d = decoder();
    let (mut texts, mut fast) = (0, 0);
    for entry in std::fs::read_dir(&dir).expect("the seeds") {
        let bytes = std::fs::read(entry.expect("a seed").path()).expect("a seed's bytes");
        if let Ok(text) = std::str::from_utf8(&bytes) {
            texts += 1;
            fast += usize::from(agrees(&d, text));
        }
    }
    assert!(
        texts >= 500 && fast >= 10,
        "{texts} text seeds, {fast} on the fast path"
    );
}
