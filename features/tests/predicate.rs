//! Predicate tests: parsing of `field op literal` (every operator, quoting, whitespace) with
//! clear errors for what is not supported, and evaluation on records, missing values included.

use weir_features::aggregate::AggKind;
use weir_features::feature::{FeatureSet, FeatureSpec};
use weir_features::predicate::{CmpOp, Literal, Predicate};
use weir_features::record::Value;
use weir_features::row::RowValues;
use weir_features::schema::RecordSchema;
use weir_features::vocab::Key;
use weir_testkit::schema::{BOOL_OPTIONAL, F64_OPTIONAL, I64, STRING_OPTIONAL};
use weir_testkit::spec::spec;

/// Slots (by name): amount, flag, kind, n, ts, user.
fn schema() -> RecordSchema {
    let others = [
        ("kind", STRING_OPTIONAL),
        ("amount", F64_OPTIONAL),
        ("n", I64),
        ("flag", BOOL_OPTIONAL),
    ];
    weir_testkit::schema::schema("user", "ts", &others)
}

const AMOUNT: usize = 0;
const FLAG: usize = 1;
const KIND: usize = 2;
const N: usize = 3;
const TS: usize = 4;

fn parse(text: &str) -> Result<Predicate, String> {
    Predicate::parse(text, &schema())
}

fn parse_ok(text: &str) -> Predicate {
    parse(text).unwrap_or_else(|e| panic!("`{text}` should parse: {e}"))
}

fn parse_err(text: &str) -> String {
    match parse(text) {
        Ok(p) => panic!("`{text}` parsed to {p:?}, expected an error"),
        Err(e) => e,
    }
}

/// A record with the given amount, flag and kind (None = missing) and n = 3, ts = 1000.
fn record(amount: Option<f64>, flag: Option<bool>, kind: Option<&str>) -> Vec<Value> {
    vec![
        amount.map_or(Value::Missing, Value::Num),
        flag.map_or(Value::Missing, Value::Bool),
        kind.map_or(Value::Missing, |k| Value::Str(Key::from(k))),
        Value::Num(3.0),
        Value::Num(1000.0),
        Value::Str(Key::from("u1")),
    ]
}

#[test]
fn slots_follow_field_names() {
    let s = schema();
    for (name, slot) in [
        ("amount", AMOUNT),
        ("flag", FLAG),
        ("kind", KIND),
        ("n", N),
        ("ts", TS),
    ] {
        assert_eq!(s.index_of(name), Some(slot), "{name}");
    }
}

#[test]
fn every_operator_parses() {
    for (text, op) in [
        ("amount == 10", CmpOp::Eq),
        ("amount != 10", CmpOp::Ne),
        ("amount < 10", CmpOp::Lt),
        ("amount <= 10", CmpOp::Le),
        ("amount > 10", CmpOp::Gt),
        ("amount >= 10", CmpOp::Ge),
    ] {
        assert_eq!(
            parse_ok(text),
            Predicate {
                slot: AMOUNT,
                op,
                literal: Literal::Num(10.0)
            },
            "{text}"
        );
    }
}

#[test]
fn whitespace_is_optional_and_trimmed() {
    let want = Predicate {
        slot: AMOUNT,
        op: CmpOp::Le,
        literal: Literal::Num(-2.5),
    };
    assert_eq!(parse_ok("amount<=-2.5"), want);
    assert_eq!(parse_ok("  amount   <=   -2.5  "), want);
    assert_eq!(parse_ok("amount\t<=\t-2.5e0"), want);
}

#[test]
fn numeric_literals_on_every_numeric_type() {
    assert_eq!(parse_ok("n >= 3").literal, Literal::Num(3.0));
    assert_eq!(parse_ok("ts < 1700000000000").literal, Literal::Num(1.7e12));
    assert_eq!(parse_ok("amount > 1e3").literal, Literal::Num(1000.0));
    assert_eq!(parse_ok("amount == -0.5").literal, Literal::Num(-0.5));
}

#[test]
fn string_literals_in_either_quote() {
    let single = parse_ok("kind == 'view'");
    assert_eq!(
        single,
        Predicate {
            slot: KIND,
            op: CmpOp::Eq,
            literal: Literal::Str("view".into())
        }
    );
    assert_eq!(parse_ok("kind == \"view\""), single);
    assert_eq!(parse_ok("kind != ''").literal, Literal::Str("".into()));
    // The other quote, operators and spaces are plain characters inside a literal.
    assert_eq!(
        parse_ok("kind == \"it's\"").literal,
        Literal::Str("it's".into())
    );
    assert_eq!(
        parse_ok("kind == 'a >= b != c'").literal,
        Literal::Str("a >= b != c".into())
    );
    assert_eq!(
        parse_ok("kind == ' padded '").literal,
        Literal::Str(" padded ".into())
    );
    assert_eq!(
        parse_ok("kind == 'caf\u{e9}'").literal,
        Literal::Str("caf\u{e9}".into())
    );
}

#[test]
fn boolean_literals() {
    assert_eq!(
        parse_ok("flag == true"),
        Predicate {
            slot: FLAG,
            op: CmpOp::Eq,
            literal: Literal::Bool(true)
        }
    );
    assert_eq!(parse_ok("flag != false").literal, Literal::Bool(false));
    assert!(parse_err("flag == yes").contains("true or false"));
    assert!(parse_err("flag < true").contains("only support == and !="));
}

#[test]
fn unknown_field_is_an_error() {
    let e = parse_err("colour == 'red'");
    assert!(
        e.contains("field `colour`") && e.contains("not declared in [source.fields]"),
        "{e}"
    );
    assert!(parse_err("== 'red'").contains("field ``"));
}

#[test]
fn no_operator_is_an_error() {
    for text in ["kind = 'view'", "kind", "", "kind is 'view'", "amount =< 3"] {
        let e = parse_err(text);
        assert!(
            e.contains("has no comparison") || e.contains("not declared"),
            "`{text}`: {e}"
        );
    }
    assert!(parse_err("kind = 'view'").contains("write e.g."));
}

#[test]
fn ordering_operators_on_strings_are_errors() {
    for op in ["<", "<=", ">", ">="] {
        let e = parse_err(&format!("kind {op} 'm'"));
        assert!(
            e.contains("strings and booleans only support == and !="),
            "{op}: {e}"
        );
    }
}

#[test]
fn unquoted_or_badly_quoted_strings_are_errors() {
    for literal in ["view", "'view", "view'", "'view\"", "'", "\"", "42"] {
        let e = parse_err(&format!("kind == {literal}"));
        assert!(e.contains("needs a quoted literal"), "{literal}: {e}");
    }
}

#[test]
fn compound_predicates_are_errors() {
    // Would otherwise read as the single literal "a' or kind == 'b" and never match.
    let e = parse_err("kind == 'a' or kind == 'b'");
    assert!(e.contains("no and/or"), "{e}");
    assert!(parse_err("amount > 1 and amount < 5").contains("finite number"));
}

#[test]
fn bad_numbers_are_errors() {
    for literal in ["ten", "'10'", "NaN", "inf", "-inf", "1e999", ""] {
        let e = parse_err(&format!("amount > {literal}"));
        assert!(e.contains("needs a finite number"), "{literal}: {e}");
    }
}

#[test]
fn numeric_comparisons_evaluate() {
    let cases = [
        ("amount == 10", [false, true, false]),
        ("amount != 10", [true, false, true]),
        ("amount < 10", [true, false, false]),
        ("amount <= 10", [true, true, false]),
        ("amount > 10", [false, false, true]),
        ("amount >= 10", [false, true, true]),
    ];
    for (text, want) in cases {
        let p = parse_ok(text);
        let got: Vec<bool> = [9.5, 10.0, 10.5]
            .iter()
            .map(|x| p.matches(&record(Some(*x), None, None)))
            .collect();
        assert_eq!(got, want, "{text}");
    }
    assert!(parse_ok("n == 3").matches(&record(None, None, None)));
    assert!(parse_ok("ts >= 1000").matches(&record(None, None, None)));
    assert!(!parse_ok("ts > 1000").matches(&record(None, None, None)));
}

#[test]
fn string_and_boolean_comparisons_evaluate() {
    let eq = parse_ok("kind == 'view'");
    let ne = parse_ok("kind != 'view'");
    assert!(eq.matches(&record(None, None, Some("view"))));
    assert!(!eq.matches(&record(None, None, Some("View"))));
    assert!(!eq.matches(&record(None, None, Some("view "))));
    assert!(!ne.matches(&record(None, None, Some("view"))));
    assert!(ne.matches(&record(None, None, Some("click"))));
    let t = parse_ok("flag == true");
    assert!(t.matches(&record(None, Some(true), None)));
    assert!(!t.matches(&record(None, Some(false), None)));
    assert!(parse_ok("flag != true").matches(&record(None, Some(false), None)));
}

#[test]
fn missing_values_never_match_whatever_the_operator() {
    let missing = record(None, None, None);
    for text in [
        "amount == 0",
        "amount != 0",
        "amount < 1e300",
        "amount >= -1e300",
        "kind == ''",
        "kind != 'view'",
        "flag == false",
        "flag != true",
    ] {
        assert!(
            !parse_ok(text).matches(&missing),
            "{text} matched a missing value"
        );
    }
    // A slot beyond the record (a record shorter than the schema) does not match either.
    assert!(!parse_ok("amount != 0").matches(&[]));
}

fn filtered(name: &str, agg: AggKind, field: Option<&str>, filter: &str) -> FeatureSpec {
    spec(name, agg, field, Some(filter))
}

/// Features filtered by the same, by opposite and by numeric predicates, updated together:
/// each counts exactly the records its own predicate passes (the feature set evaluates each
/// distinct predicate once per record and shares the result).
#[test]
fn features_sharing_predicates_count_their_own_records() {
    use AggKind::*;
    let specs = [
        filtered("clicks", CountIf, None, "kind == 'click'"),
        filtered("not_clicks", CountIf, None, "kind != 'click'"),
        filtered("click_amount", Sum, Some("amount"), "kind == 'click'"),
        filtered("big", CountIf, None, "amount >= 10"),
        filtered("big_max", Max, Some("amount"), "amount >= 10"),
        filtered("flagged", CountIf, None, "flag == true"),
    ];
    let features = FeatureSet::compile(&specs, &schema()).unwrap_or_else(|e| panic!("{e}"));
    let mut accs = features.empty();
    let records = [
        record(Some(12.0), Some(true), Some("click")),
        record(Some(3.0), None, Some("view")),
        record(None, Some(false), Some("click")),
        // A missing kind passes neither `==` nor `!=`.
        record(Some(20.0), Some(true), None),
        record(Some(5.0), Some(true), Some("clicks")),
    ];
    for values in &records {
        features.add(&mut accs, values, 0);
    }
    let mut out = RowValues::new();
    features.values(accs.view(), &mut out);
    assert_eq!(out[..], [2.0, 2.0, 12.0, 2.0, 20.0, 3.0]);
}

#[test]
fn more_than_64_distinct_predicates_are_refused() {
    let specs: Vec<FeatureSpec> = (0..65)
        .map(|i| {
            filtered(
                &format!("n{i}"),
                AggKind::CountIf,
                None,
                &format!("n == {i}"),
            )
        })
        .collect();
    let err = FeatureSet::compile(&specs, &schema())
        .err()
        .map(|e| e.to_string());
    let err = err.unwrap_or_else(|| panic!("65 predicates compiled"));
    assert!(
        err.contains("at most 64 distinct `where` predicates"),
        "{err}"
    );
    assert!(err.contains("n64"), "{err}");
    // The same predicate used by many features counts once.
    let shared: Vec<FeatureSpec> = (0..100)
        .map(|i| filtered(&format!("n{i}"), AggKind::CountIf, None, "n == 1"))
        .collect();
    assert!(FeatureSet::compile(&shared, &schema()).is_ok());
}
