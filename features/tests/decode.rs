//! JSON decoder tests: every way a payload can fail maps to its [`DeadLetterReason`], valid
//! payloads fill the right slots, and (proptest) any generated valid event round-trips.

use proptest::prelude::*;
use weir_features::dead_letter::DeadLetterReason;
use weir_features::decode::{DecodeError, Decoded, JsonDecoder};
use weir_features::encode::event_json;
use weir_features::record::{Event, Value};
use weir_features::schema::{FieldDecl, FieldType, RecordSchema};
use weir_features::vocab::{EventTime, KeyGroup, SourcePosition};
use weir_testkit::schema::{schema_of, BOOL, F64, F64_OPTIONAL, I64, STRING, TIMESTAMP_MS};

type TestResult = Result<(), String>;

/// Fields (slot order is by name): amount?, dwell, flag, kind, n, ts, user.
fn schema_with_key(key_field: &str, key_type: FieldType) -> RecordSchema {
    let decls = [
        (key_field, FieldDecl::Type(key_type)),
        ("ts", TIMESTAMP_MS),
        ("dwell", F64),
        ("n", I64),
        ("flag", BOOL),
        ("kind", STRING),
        ("amount", F64_OPTIONAL),
    ];
    schema_of(&decls, key_field, "ts")
}

fn decoder() -> JsonDecoder {
    JsonDecoder::new(schema_with_key("user", FieldType::String))
}

fn slot(d: &JsonDecoder, name: &str) -> usize {
    d.schema()
        .index_of(name)
        .unwrap_or_else(|| panic!("no field {name}"))
}

const GOOD: &str =
    r#"{"user":"u1","ts":1000,"dwell":2.5,"n":7,"flag":true,"kind":"view","amount":12.0}"#;

fn decode_ok(payload: &[u8]) -> Result<Decoded, String> {
    decoder()
        .decode(payload)
        .map_err(|e| format!("{} failed: {e:?}", String::from_utf8_lossy(payload)))
}

fn decode_err(payload: &[u8]) -> Result<DecodeError, String> {
    match decoder().decode(payload) {
        Ok(d) => Err(format!(
            "{} decoded to {d:?}, expected an error",
            String::from_utf8_lossy(payload)
        )),
        Err(e) => Ok(e),
    }
}

fn expect_reason(payload: &[u8], reason: DeadLetterReason, needle: &str) -> TestResult {
    let err = decode_err(payload)?;
    if err.reason != reason {
        return Err(format!(
            "{}: reason {:?}, expected {reason:?} ({})",
            String::from_utf8_lossy(payload),
            err.reason,
            err.message
        ));
    }
    if !err.message.contains(needle) {
        return Err(format!(
            "message `{}` does not contain `{needle}`",
            err.message
        ));
    }
    Ok(())
}

#[test]
fn valid_record_fills_every_slot() -> TestResult {
    let d = decoder();
    let got = decode_ok(GOOD.as_bytes())?;
    assert_eq!(got.key, "u1");
    assert_eq!(got.ts, 1000);
    assert_eq!(got.values.len(), 7);
    assert_eq!(got.values[slot(&d, "user")], Value::Str("u1".into()));
    assert_eq!(got.values[slot(&d, "ts")], Value::Num(1000.0));
    assert_eq!(got.values[slot(&d, "dwell")], Value::Num(2.5));
    assert_eq!(got.values[slot(&d, "n")], Value::Num(7.0));
    assert_eq!(got.values[slot(&d, "flag")], Value::Bool(true));
    assert_eq!(got.values[slot(&d, "kind")], Value::Str("view".into()));
    assert_eq!(got.values[slot(&d, "amount")], Value::Num(12.0));
    Ok(())
}

#[test]
fn integers_are_accepted_for_f64_and_whole_floats_for_i64() -> TestResult {
    let d = decoder();
    let got = decode_ok(br#"{"user":"u","ts":5.0,"dwell":3,"n":-4.0,"flag":false,"kind":"k"}"#)?;
    assert_eq!(got.ts, 5);
    assert_eq!(got.values[slot(&d, "dwell")], Value::Num(3.0));
    assert_eq!(got.values[slot(&d, "n")], Value::Num(-4.0));
    Ok(())
}

#[test]
fn malformed_syntax() -> TestResult {
    expect_reason(
        br#"{"user":"u1","ts":1000,}"#,
        DeadLetterReason::Malformed,
        "",
    )?;
    expect_reason(b"not json", DeadLetterReason::Malformed, "")?;
    expect_reason(b"", DeadLetterReason::Malformed, "EOF")?;
    expect_reason(br#"{"user" "u1"}"#, DeadLetterReason::Malformed, "")
}

#[test]
fn truncated_payload() -> TestResult {
    let cut = &GOOD.as_bytes()[..GOOD.len() - 10];
    expect_reason(cut, DeadLetterReason::Malformed, "EOF")
}

/// Found by `fuzz/fuzz_targets/json_decoder.rs`: a field error used to stop the decoder
/// before the syntax error after it, so bytes that are not JSON were called `wrong_type`.
#[test]
fn a_field_error_before_a_syntax_error_is_still_malformed() -> TestResult {
    expect_reason(
        br#"{"user":"u1","ts":170001700000000000,"dwell":3.5,"n":2,"flag":tkind":"view"}"#,
        DeadLetterReason::Malformed,
        "expected ident",
    )?;
    expect_reason(
        br#"{"user":7,"ts":1000"#,
        DeadLetterReason::Malformed,
        "EOF",
    )?;
    // The same field errors in well-formed JSON keep their reason.
    expect_reason(
        br#"{"user":"u1","ts":170001700000000000,"dwell":3.5,"n":2,"flag":true,"kind":"view"}"#,
        DeadLetterReason::WrongType,
        "2^53",
    )
}

/// Found by the fuzz target: the reason came from a substring of serde_json's message, so a
/// string in the payload that read "number out of range" made a non-object `non_finite`.
#[test]
fn a_string_that_reads_like_an_error_does_not_change_the_reason() -> TestResult {
    expect_reason(
        br#""number out of range""#,
        DeadLetterReason::Malformed,
        "expected a JSON object",
    )?;
    expect_reason(
        br#"{"user":"u1","ts":1000,"dwell":1e999}"#,
        DeadLetterReason::NonFinite,
        "number out of range",
    )
}

#[test]
fn trailing_garbage() -> TestResult {
    expect_reason(
        format!("{GOOD} x").as_bytes(),
        DeadLetterReason::Malformed,
        "trailing",
    )?;
    expect_reason(
        format!("{GOOD}{GOOD}").as_bytes(),
        DeadLetterReason::Malformed,
        "trailing",
    )
}

#[test]
fn invalid_utf8() -> TestResult {
    let mut payload = br#"{"user":"u"#.to_vec();
    payload.extend_from_slice(&[0xff, 0xfe]);
    payload.extend_from_slice(br#"","ts":1,"dwell":1,"n":1,"flag":true,"kind":"k"}"#);
    expect_reason(&payload, DeadLetterReason::Malformed, "")?;
    // In a field name, too.
    let mut payload = br#"{"x"#.to_vec();
    payload.push(0xc3);
    payload.extend_from_slice(b"\":1,");
    payload.extend_from_slice(&GOOD.as_bytes()[1..]);
    expect_reason(&payload, DeadLetterReason::Malformed, "")
}

#[test]
fn invalid_utf8_in_an_unknown_field_is_malformed_too() -> TestResult {
    let mut payload = br#"{"note":"a"#.to_vec();
    payload.push(0xff);
    payload.extend_from_slice(b"\",");
    payload.extend_from_slice(&GOOD.as_bytes()[1..]);
    expect_reason(&payload, DeadLetterReason::Malformed, "UTF-8")
}

#[test]
fn integers_beyond_2_pow_53_are_rejected_for_i64_and_timestamps() -> TestResult {
    let d = JsonDecoder::new(schema_with_key("account", FieldType::I64));
    let body = r#""dwell":1,"n":1,"flag":true,"kind":"k""#;
    let decode = |account: &str, ts: &str| {
        d.decode(format!("{{\"account\":{account},\"ts\":{ts},{body}}}").as_bytes())
    };
    // ±2^53 is the edge of the exact range and still accepted.
    let edge = decode("9007199254740992", "-9007199254740992").map_err(|e| e.message)?;
    assert_eq!(
        (edge.key.as_str(), edge.ts),
        ("9007199254740992", -9_007_199_254_740_992)
    );
    for (account, ts) in [
        ("9007199254740993", "1"),
        ("-9007199254740993", "1"),
        ("18446744073709551615", "1"),
        ("1e20", "1"),
        ("1", "9007199254740993"),
        ("1", "1e300"),
    ] {
        match decode(account, ts) {
            Ok(got) => return Err(format!("account {account}, ts {ts} decoded to {got:?}")),
            Err(e) => {
                assert_eq!(e.reason, DeadLetterReason::WrongType, "{e:?}");
                assert!(e.message.contains("2^53"), "{e:?}");
            }
        }
    }
    // f64 fields take any finite number.
    let big = GOOD.replacen("\"dwell\":2.5", "\"dwell\":18446744073709551615", 1);
    decode_ok(big.as_bytes()).map(|_| ())
}

#[test]
fn top_level_not_an_object() -> TestResult {
    expect_reason(
        format!("[{GOOD}]").as_bytes(),
        DeadLetterReason::Malformed,
        "a JSON object",
    )?;
    expect_reason(b"42", DeadLetterReason::Malformed, "a JSON object")?;
    expect_reason(b"\"u1\"", DeadLetterReason::Malformed, "a JSON object")?;
    expect_reason(b"null", DeadLetterReason::Malformed, "a JSON object")
}

#[test]
fn missing_required_field() -> TestResult {
    expect_reason(
        br#"{"user":"u1","ts":1000,"n":7,"flag":true,"kind":"view"}"#,
        DeadLetterReason::MissingField,
        "`dwell`",
    )?;
    // The key and the event time are required too.
    expect_reason(
        br#"{"ts":1000,"dwell":1,"n":7,"flag":true,"kind":"v"}"#,
        DeadLetterReason::MissingField,
        "`user`",
    )?;
    expect_reason(
        br#"{"user":"u","dwell":1,"n":7,"flag":true,"kind":"v"}"#,
        DeadLetterReason::MissingField,
        "`ts`",
    )?;
    expect_reason(b"{}", DeadLetterReason::MissingField, "missing")
}

#[test]
fn null_required_field() -> TestResult {
    expect_reason(
        br#"{"user":"u1","ts":1000,"dwell":null,"n":7,"flag":true,"kind":"view"}"#,
        DeadLetterReason::MissingField,
        "`dwell` is missing or null",
    )?;
    expect_reason(
        br#"{"user":null,"ts":1000,"dwell":1,"n":7,"flag":true,"kind":"view"}"#,
        DeadLetterReason::MissingField,
        "`user`",
    )
}

#[test]
fn wrong_types() -> TestResult {
    let with = |field: &str, value: &str| {
        GOOD.replacen(
            &format!("\"{field}\":"),
            &format!("\"{field}\":{value},\"_{field}\":"),
            1,
        )
    };
    expect_reason(
        with("dwell", "\"2.5\"").as_bytes(),
        DeadLetterReason::WrongType,
        "field `dwell`",
    )?;
    expect_reason(
        with("n", "true").as_bytes(),
        DeadLetterReason::WrongType,
        "field `n`",
    )?;
    expect_reason(
        with("flag", "1").as_bytes(),
        DeadLetterReason::WrongType,
        "field `flag`",
    )?;
    expect_reason(
        with("kind", "3").as_bytes(),
        DeadLetterReason::WrongType,
        "field `kind`",
    )?;
    expect_reason(
        with("user", "[1]").as_bytes(),
        DeadLetterReason::WrongType,
        "field `user`",
    )?;
    expect_reason(
        with("amount", "{\"v\":1}").as_bytes(),
        DeadLetterReason::WrongType,
        "field `amount`",
    )?;
    expect_reason(
        with("ts", "\"2024-01-01\"").as_bytes(),
        DeadLetterReason::WrongType,
        "field `ts`",
    )
}

#[test]
fn fractional_integers_are_wrong_type() -> TestResult {
    let ts = GOOD.replacen("\"ts\":1000", "\"ts\":1000.5", 1);
    expect_reason(ts.as_bytes(), DeadLetterReason::WrongType, "fractional")?;
    let n = GOOD.replacen("\"n\":7", "\"n\":7.25", 1);
    expect_reason(n.as_bytes(), DeadLetterReason::WrongType, "fractional")
}

#[test]
fn out_of_range_numbers_are_non_finite() -> TestResult {
    let big = GOOD.replacen("\"dwell\":2.5", "\"dwell\":1e999", 1);
    expect_reason(big.as_bytes(), DeadLetterReason::NonFinite, "")?;
    let neg = GOOD.replacen("\"amount\":12.0", "\"amount\":-1e400", 1);
    expect_reason(neg.as_bytes(), DeadLetterReason::NonFinite, "")
}

#[test]
fn optional_field_absent_or_null_is_missing() -> TestResult {
    let d = decoder();
    let absent = decode_ok(GOOD.replacen(",\"amount\":12.0", "", 1).as_bytes())?;
    assert_eq!(absent.values[slot(&d, "amount")], Value::Missing);
    let null = decode_ok(
        GOOD.replacen("\"amount\":12.0", "\"amount\":null", 1)
            .as_bytes(),
    )?;
    assert_eq!(null.values[slot(&d, "amount")], Value::Missing);
    Ok(())
}

#[test]
fn unknown_fields_are_ignored_whatever_their_shape() -> TestResult {
    let payload = GOOD.replacen(
        "{",
        r#"{"extra":{"nested":[1,2,{"a":null}],"s":"x\"y"},"more":[true,false],"big":1e5,"#,
        1,
    );
    let got = decode_ok(payload.as_bytes())?;
    assert_eq!(got, decode_ok(GOOD.as_bytes())?);
    Ok(())
}

#[test]
fn escaped_names_and_values() -> TestResult {
    let d = decoder();
    // `\u0075ser` is `user` and `k\u0069nd` is `kind` once unescaped.
    let payload = r#"{"\u0075ser":"a\"b\\c\u00e9\n","ts":1,"dwell":1,"n":1,"flag":true,"k\u0069nd":"\ud83d\ude00"}"#;
    let got = decode_ok(payload.as_bytes())?;
    assert_eq!(got.key, "a\"b\\c\u{e9}\n");
    assert_eq!(got.values[slot(&d, "kind")], Value::Str("\u{1F600}".into()));
    Ok(())
}

#[test]
fn whitespace_is_allowed() -> TestResult {
    let pretty = " {\n  \"user\" : \"u1\" ,\t\"ts\":1000,\"dwell\":2.5,\"n\":7,\"flag\":true,\"kind\":\"view\",\"amount\":12.0 }\n";
    assert_eq!(decode_ok(pretty.as_bytes())?, decode_ok(GOOD.as_bytes())?);
    Ok(())
}

#[test]
fn duplicate_field_takes_the_last_value() -> TestResult {
    let d = decoder();
    let got = decode_ok(GOOD.replacen("{", "{\"dwell\":99,", 1).as_bytes())?;
    assert_eq!(got.values[slot(&d, "dwell")], Value::Num(2.5));
    Ok(())
}

#[test]
fn i64_key_is_rendered_in_decimal() -> Result<(), String> {
    let d = JsonDecoder::new(schema_with_key("account", FieldType::I64));
    let body = r#""ts":1,"dwell":1,"n":1,"flag":true,"kind":"k""#;
    for (json, want) in [
        ("42", "42"),
        ("-7", "-7"),
        ("0", "0"),
        ("9007199254740992", "9007199254740992"),
        ("12.0", "12"),
    ] {
        let payload = format!("{{\"account\":{json},{body}}}");
        let got = d
            .decode(payload.as_bytes())
            .map_err(|e| format!("{payload}: {e:?}"))?;
        assert_eq!(got.key, want, "{payload}");
    }
    let bad = d.decode(format!("{{\"account\":\"42\",{body}}}").as_bytes());
    assert_eq!(bad.map_err(|e| e.reason), Err(DeadLetterReason::WrongType));
    let bad = d.decode(format!("{{\"account\":1.5,{body}}}").as_bytes());
    assert_eq!(bad.map_err(|e| e.reason), Err(DeadLetterReason::WrongType));
    Ok(())
}

#[test]
fn reason_names_are_stable() {
    let names: Vec<&str> = [
        DeadLetterReason::Malformed,
        DeadLetterReason::MissingField,
        DeadLetterReason::WrongType,
        DeadLetterReason::NonFinite,
        DeadLetterReason::Late,
        DeadLetterReason::InferenceFailed,
    ]
    .iter()
    .map(DeadLetterReason::as_str)
    .collect();
    assert_eq!(
        names,
        [
            "malformed",
            "missing_field",
            "wrong_type",
            "non_finite",
            "late",
            "inference_failed"
        ]
    );
}

/// A generated valid event: the values the decoder should produce.
#[derive(Clone, Debug)]
struct Gen {
    user: String,
    ts: i64,
    dwell: f64,
    n: i64,
    flag: bool,
    kind: String,
    amount: Option<f64>,
    extra: Option<String>,
}

fn gen_event() -> impl Strategy<Value = Gen> {
    (
        "\\PC{1,30}",
        -(1i64 << 53)..(1i64 << 53),
        prop_oneof![
            any::<f64>().prop_filter("finite", |x| x.is_finite()),
            -1e6f64..1e6
        ],
        -(1i64 << 53)..(1i64 << 53),
        any::<bool>(),
        "[a-z\"\\\\ \u{e9}\u{1F600}]{0,12}",
        proptest::option::of(-1e12f64..1e12),
        proptest::option::of("\\PC{0,10}"),
    )
        .prop_map(|(user, ts, dwell, n, flag, kind, amount, extra)| Gen {
            user,
            ts,
            dwell,
            n,
            flag,
            kind,
            amount,
            extra,
        })
}

fn to_json(g: &Gen, order: &[usize]) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut parts = vec![
        format!("\"user\":{}", q(&g.user)),
        format!("\"ts\":{}", g.ts),
        format!(
            "\"dwell\":{}",
            serde_json::to_string(&g.dwell).unwrap_or_default()
        ),
        format!("\"n\":{}", g.n),
        format!("\"flag\":{}", g.flag),
        format!("\"kind\":{}", q(&g.kind)),
    ];
    if let Some(a) = g.amount {
        parts.push(format!(
            "\"amount\":{}",
            serde_json::to_string(&a).unwrap_or_default()
        ));
    }
    if let Some(e) = &g.extra {
        parts.push(format!("\"extra\":{}", q(e)));
    }
    let ordered: Vec<&String> = order
        .iter()
        .filter_map(|i| parts.get(*i % parts.len()))
        .collect();
    // `order` may repeat entries: duplicates carry the same value, so the result is unchanged.
    let mut all: Vec<&String> = ordered;
    all.extend(parts.iter());
    format!(
        "{{{}}}",
        all.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
    )
}

proptest! {
    #[test]
    fn valid_events_round_trip(g in gen_event(), order in proptest::collection::vec(0usize..8, 0..8)) {
        let d = decoder();
        let payload = to_json(&g, &order);
        let got = d.decode(payload.as_bytes());
        prop_assert!(got.is_ok(), "{payload}: {got:?}");
        let got = got.map_err(|e| TestCaseError::fail(e.message))?;
        prop_assert_eq!(got.key.as_str(), g.user.as_str());
        prop_assert_eq!(got.ts, g.ts);
        let v = &got.values;
        prop_assert_eq!(&v[slot(&d, "user")], &Value::Str(g.user.as_str().into()));
        prop_assert_eq!(&v[slot(&d, "ts")], &Value::Num(g.ts as f64));
        prop_assert_eq!(&v[slot(&d, "dwell")], &Value::Num(g.dwell));
        prop_assert_eq!(&v[slot(&d, "n")], &Value::Num(g.n as f64));
        prop_assert_eq!(&v[slot(&d, "flag")], &Value::Bool(g.flag));
        prop_assert_eq!(&v[slot(&d, "kind")], &Value::Str(g.kind.as_str().into()));
        prop_assert_eq!(&v[slot(&d, "amount")], &g.amount.map_or(Value::Missing, Value::Num));
    }

    #[test]
    fn any_bytes_decode_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decoder().decode(&bytes);
    }

    #[test]
    fn every_strict_prefix_of_a_valid_event_is_malformed(g in gen_event(), cut in 0.0f64..1.0) {
        let payload = to_json(&g, &[]);
        let at = ((payload.len() as f64) * cut) as usize;
        let err = decoder().decode(&payload.as_bytes()[..at]);
        prop_assert_eq!(err.map(|_| ()).map_err(|e| e.reason), Err(DeadLetterReason::Malformed));
    }
}

/// A decoder for `{user: string, ts: <format>}`.
fn time_decoder(format: FieldType) -> JsonDecoder {
    JsonDecoder::new(schema_of(
        &[("user", STRING), ("ts", FieldDecl::Type(format))],
        "user",
        "ts",
    ))
}

fn decode_ts(format: FieldType, ts_json: &str) -> Result<EventTime, DecodeError> {
    let payload = format!("{{\"user\":\"u\",\"ts\":{ts_json}}}");
    time_decoder(format)
        .decode(payload.as_bytes())
        .map(|d| d.ts)
}

/// The decode error of a record whose event time is `ts_json`, or what it decoded to.
fn ts_err(format: FieldType, ts_json: &str) -> Result<DecodeError, String> {
    match decode_ts(format, ts_json) {
        Ok(ts) => Err(format!("{ts_json} decoded to {ts}, expected an error")),
        Err(e) => Ok(e),
    }
}

#[test]
fn event_time_in_epoch_seconds_is_held_in_milliseconds() -> TestResult {
    let s = FieldType::TimestampS;
    for (json, want) in [
        ("1796040000", 1_796_040_000_000),
        ("1796040000.25", 1_796_040_000_250),
        ("1796040000.001", 1_796_040_000_001),
        ("1.0", 1000),
        ("-1.5", -1500),
        ("1e3", 1_000_000),
    ] {
        assert_eq!(decode_ts(s, json).map_err(|e| e.message)?, want, "{json}");
    }
    for (json, reason, needle) in [
        (
            "\"1796040000\"",
            DeadLetterReason::WrongType,
            "expected epoch seconds (timestamp_s), got a string",
        ),
        ("true", DeadLetterReason::WrongType, "field `ts`"),
        ("1e13", DeadLetterReason::WrongType, "2^53"),
        ("18446744073709551615", DeadLetterReason::WrongType, "2^53"),
        ("1e400", DeadLetterReason::NonFinite, ""),
    ] {
        let err = ts_err(s, json)?;
        assert_eq!(err.reason, reason, "{json}: {err:?}");
        assert!(err.message.contains(needle), "{json}: {err:?}");
    }
    Ok(())
}

#[test]
fn event_time_as_rfc3339_is_held_in_milliseconds() -> TestResult {
    let r = FieldType::TimestampRfc3339;
    let noon = 1_796_040_000_000;
    for (json, want) in [
        ("\"2026-11-30T12:00:00Z\"", noon),
        ("\"2026-11-30T13:00:00+01:00\"", noon),
        ("\"2026-11-30T12:00:00.123456Z\"", noon + 123),
        ("\"1970-01-01T00:00:00Z\"", 0),
        // An escaped string is unescaped first.
        ("\"2026-11-30T12:00:00\\u005a\"", noon),
        // A leap second is the last millisecond of its minute, before the next minute's
        // first (found by fuzz/fuzz_targets/timestamps.rs: it was put after it).
        ("\"2016-12-31T23:59:60Z\"", 1_483_228_799_999),
        ("\"2016-12-31T23:59:60.5Z\"", 1_483_228_799_999),
        ("\"1998-12-31T23:59:60.5-00:30\"", 915_150_599_999),
    ] {
        assert_eq!(decode_ts(r, json).map_err(|e| e.message)?, want, "{json}");
    }
    for (json, needle) in [
        (
            "1796040000000",
            "expected an RFC 3339 string (timestamp_rfc3339), got a number",
        ),
        ("\"2026-11-30T12:00:00\"", "not an RFC 3339 date-time"),
        ("\"2026-11-30\"", "not an RFC 3339 date-time"),
        ("\"30/11/2026 12:00\"", "field `ts`"),
        ("\"\"", "field `ts`"),
        ("null", "missing"),
    ] {
        let err = ts_err(r, json)?;
        let want = if json == "null" {
            DeadLetterReason::MissingField
        } else {
            DeadLetterReason::WrongType
        };
        assert_eq!(err.reason, want, "{json}: {err:?}");
        assert!(err.message.contains(needle), "{json}: {err:?}");
    }
    Ok(())
}

#[test]
fn epoch_millis_refuse_strings_and_fractions_with_their_format_named() -> TestResult {
    let err = ts_err(FieldType::TimestampMs, "\"2026-11-30T12:00:00Z\"")?;
    assert_eq!(err.reason, DeadLetterReason::WrongType);
    assert!(
        err.message
            .contains("integer epoch milliseconds (timestamp_ms)"),
        "{err:?}"
    );
    let err = ts_err(FieldType::TimestampMs, "1.5")?;
    assert!(err.message.contains("fractional"), "{err:?}");
    Ok(())
}

/// A `late` dead letter re-encodes the decoded event; replayed, it must decode to the same time.
fn re_encoded_ts(format: FieldType, ts_json: &str) -> Result<EventTime, String> {
    let d = time_decoder(format);
    let payload = format!("{{\"user\":\"u\",\"ts\":{ts_json}}}");
    let got = d.decode(payload.as_bytes()).map_err(|e| e.message)?;
    let event = Event {
        key: got.key,
        key_group: KeyGroup(0),
        ts: got.ts,
        values: got.values,
        position: SourcePosition {
            partition: 0,
            offset: 0,
        },
        ingested_ms: 0,
    };
    let again = event_json(d.schema(), &event);
    d.decode(&again)
        .map(|back| back.ts)
        .map_err(|e| format!("{}: {}", String::from_utf8_lossy(&again), e.message))
}

proptest! {
    #[test]
    fn the_three_formats_of_one_instant_decode_alike(ms in -62_135_596_800_000i64..253_402_300_799_999) {
        let seconds = serde_json::to_string(&(ms as f64 / 1000.0)).unwrap_or_default();
        let text = weir_features::timestamp::rfc3339_from_millis(ms).unwrap_or_default();
        prop_assert_eq!(decode_ts(FieldType::TimestampMs, &ms.to_string()).map_err(|e| e.message), Ok(ms));
        prop_assert_eq!(decode_ts(FieldType::TimestampS, &seconds).map_err(|e| e.message), Ok(ms), "{}", seconds);
        prop_assert_eq!(decode_ts(FieldType::TimestampRfc3339, &format!("\"{text}\"")).map_err(|e| e.message), Ok(ms), "{}", text);
    }

    #[test]
    fn a_re_encoded_event_decodes_to_the_same_time(ms in -62_135_596_800_000i64..253_402_300_799_999) {
        prop_assert_eq!(re_encoded_ts(FieldType::TimestampMs, &ms.to_string()), Ok(ms));
        let seconds = serde_json::to_string(&(ms as f64 / 1000.0)).unwrap_or_default();
        prop_assert_eq!(re_encoded_ts(FieldType::TimestampS, &seconds), Ok(ms));
        let text = weir_features::timestamp::rfc3339_from_millis(ms).unwrap_or_default();
        prop_assert_eq!(re_encoded_ts(FieldType::TimestampRfc3339, &format!("\"{text}\"")), Ok(ms));
    }

    #[test]
    fn any_text_in_a_timestamp_field_is_a_time_or_wrong_type(text in "\\PC{0,40}") {
        for format in [FieldType::TimestampMs, FieldType::TimestampS, FieldType::TimestampRfc3339] {
            let json = serde_json::to_string(&text).unwrap_or_default();
            if let Err(e) = decode_ts(format, &json) {
                prop_assert_eq!(e.reason, DeadLetterReason::WrongType, "{}: {:?}", json, e);
            }
        }
    }
}
