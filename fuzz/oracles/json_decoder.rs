//! The check of the `json_decoder` fuzz target, shared with the stable test that replays the
//! committed seeds (`features/tests/fuzz_seeds.rs`): the source's JSON decoder
//! (`weir_features::decode::JsonDecoder`) on arbitrary bytes, with a schema declaring every
//! field type, required and optional. It must never panic, and it must agree with serde_json
//! on what JSON is: a payload serde_json cannot parse is `malformed` (unless what it refuses is
//! a number beyond f64, which is JSON text), and a payload the decoder accepts is a JSON
//! object whose key and event time are the ones decoded.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;
use weir_features::dead_letter::DeadLetterReason;
use weir_features::decode::JsonDecoder;
use weir_features::schema::{FieldDecl, FieldType, RecordSchema};

fn decoder() -> &'static JsonDecoder {
    static DECODER: OnceLock<JsonDecoder> = OnceLock::new();
    DECODER.get_or_init(|| {
        let optional = |t| FieldDecl::Full {
            ty: t,
            required: false,
        };
        let fields = BTreeMap::from([
            ("user".to_owned(), FieldDecl::Type(FieldType::String)),
            ("ts".to_owned(), FieldDecl::Type(FieldType::TimestampMs)),
            ("amount".to_owned(), FieldDecl::Type(FieldType::F64)),
            ("count".to_owned(), optional(FieldType::I64)),
            ("flag".to_owned(), optional(FieldType::Bool)),
            ("kind".to_owned(), optional(FieldType::String)),
            ("seen_s".to_owned(), optional(FieldType::TimestampS)),
            ("seen_at".to_owned(), optional(FieldType::TimestampRfc3339)),
        ]);
        let schema = RecordSchema::new(&fields, "user", "ts").expect("a valid schema");
        JsonDecoder::new(schema)
    })
}

/// serde_json's `Value` refuses two things that are valid JSON text (RFC 8259 §6, §8.2):
/// numbers beyond f64 and escapes of lone UTF-16 surrogates (as "lone leading surrogate" or
/// "unexpected end of hex escape", depending on what follows). The decoder skips both in
/// undeclared fields, so there either answer is right.
fn representable_only_by_the_decoder(payload: &[u8], refused: &serde_json::Error) -> bool {
    let message = refused.to_string();
    // `\uD800` to `\uDFFF`.
    let surrogate_escape = payload.windows(4).any(|w| {
        w[..2] == *b"\\u" && matches!(w[2], b'd' | b'D') && b"89abcdefABCDEF".contains(&w[3])
    });
    message.starts_with("number out of range")
        || (surrogate_escape
            && (message.starts_with("lone leading surrogate")
                || message.starts_with("unexpected end of hex escape")))
}

/// Decodes `payload` and checks the answer against serde_json's (panics on a disagreement).
pub fn check(payload: &[u8]) {
    let decoded = decoder().decode(payload);
    let parsed = serde_json::from_slice::<Value>(payload);
    match (&decoded, &parsed) {
        (Ok(decoded), Ok(Value::Object(object))) => {
            assert_eq!(
                object.get("user").and_then(Value::as_str),
                Some(decoded.key.as_str())
            );
            // Whole floats (`17.0`) are accepted for integer fields.
            let ts = object.get("ts").and_then(Value::as_f64);
            assert_eq!(ts, Some(decoded.ts as f64));
        }
        (_, Err(refused)) if representable_only_by_the_decoder(payload, refused) => {}
        (Ok(decoded), _) => panic!("accepted {decoded:?} from bytes that are not a JSON object"),
        (Err(error), Err(refused)) => assert_eq!(
            error.reason,
            DeadLetterReason::Malformed,
            "{error:?}; serde_json: {refused}"
        ),
        (Err(_), Ok(_)) => {}
    }
}
