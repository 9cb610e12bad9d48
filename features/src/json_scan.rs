//! The JSON decoder's fast path ([`crate::decode::JsonDecoder`]): one pass over a payload's
//! bytes that fills the schema's value slots for the records a source sees nearly always —
//! one object, names and strings without escapes, values of their fields' types — and gives
//! up (`None`) on anything else, which the serde path then decodes or classifies as a dead
//! letter. So every error, and every rare shape of valid JSON (escapes, deep nesting, numbers
//! beyond 64 bits), is the serde path's, and this path only has to be exact where it answers:
//! it answers only for text that is one JSON object serde_json reads to the same values
//! (`json_scan_agreement.rs` compares the two on generated and mutated payloads, and the
//! `json_decoder` fuzz target on arbitrary bytes). Numbers become [`JsonNumber`]s exactly as
//! serde_json's parser makes them (fractions and exponents correctly rounded, as its
//! `float_roundtrip` feature does), and the same functions as the serde path turn them into
//! values. Run F (BENCHMARKS.md, fix 20): the serde visitor was ~30 % of a features run's CPU.

use crate::field_value::{bool_value, number_value, string_value};
use crate::record::Value;
use crate::schema::RecordSchema;
use crate::timestamp::JsonNumber;

/// Nesting of an unknown field's value this path skips; deeper ones go to the serde path
/// (whose own limit is 128).
const MAX_DEPTH: u32 = 32;

/// Digits of an integer that fit a `u64` whatever they are (19 nines < 2^64).
const MAX_SAFE_DIGITS: usize = 19;

/// The longest number text parsed here (longer ones are rare and left to serde_json).
const MAX_NUMBER_BYTES: usize = 64;

/// Decodes `text`, one JSON object, into `values` (schema slot order, every slot
/// [`Value::Missing`] on entry; fields the object lacks stay so). `None`: the payload is not
/// of the shapes this path reads, or not valid; `values` may then hold part of it.
pub(crate) fn decode_object(schema: &RecordSchema, text: &str, values: &mut [Value]) -> Option<()> {
    let mut scan = Scanner { text, at: 0 };
    scan.skip_ws();
    scan.eat(b'{')?;
    scan.skip_ws();
    if scan.eat(b'}').is_none() {
        loop {
            scan.eat(b'"')?;
            let name = scan.string()?;
            scan.skip_ws();
            scan.eat(b':')?;
            scan.skip_ws();
            match schema.slot_of(name) {
                Some(slot) => {
                    let ty = schema.fields()[slot].ty;
                    let value = match scan.peek()? {
                        b'"' => {
                            scan.at += 1;
                            string_value(ty, scan.string()?).ok()?
                        }
                        b'-' | b'0'..=b'9' => number_value(ty, scan.number()?).ok()?,
                        b'n' => scan.literal(b"null").map(|()| Value::Missing)?,
                        b't' => bool_value(ty, scan.literal(b"true").map(|()| true)?).ok()?,
                        b'f' => bool_value(ty, scan.literal(b"false").map(|()| false)?).ok()?,
                        _ => return None,
                    };
                    *values.get_mut(slot)? = value;
                }
                None => scan.skip_value(0)?,
            }
            scan.skip_ws();
            match scan.peek()? {
                b',' => {
                    scan.at += 1;
                    scan.skip_ws();
                }
                b'}' => {
                    scan.at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    scan.skip_ws();
    (scan.at == text.len()).then_some(())
}

/// A byte JSON allows in a string only escaped: a quote, a backslash, a control character.
/// The fast path's string scan stops at one (its closing quote, or an escape it leaves to
/// serde), and the writers escape text that holds one.
#[inline]
pub(crate) fn needs_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// `byte` in each of a word's eight lanes (byte positions; the text's first byte is the
/// lowest lane of a little-endian load).
const fn lanes(byte: u8) -> u64 {
    u64::from_ne_bytes([byte; 8])
}

/// The high bit of every lane of `word` whose byte is below `bound` (at most 0x80), and
/// possibly of lanes above the lowest such one (a borrow carries upward), never below it.
#[inline]
fn lanes_below(word: u64, bound: u8) -> u64 {
    word.wrapping_sub(lanes(bound)) & !word & lanes(0x80)
}

/// The high bit of each lane of `word` that [`needs_escape`] holds for, exact up to and
/// including the lowest one: its `trailing_zeros() / 8` is the first such byte's index.
/// (Each test below may flag lanes above its own first hit, none below, so their union's
/// lowest flag is the first byte any of them holds for.)
#[inline]
pub(crate) fn special_bytes(word: u64) -> u64 {
    lanes_below(word ^ lanes(b'"'), 1)
        | lanes_below(word ^ lanes(b'\\'), 1)
        | lanes_below(word, 0x20)
}

/// A position in a payload's text.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// A string's contents after its opening quote, up to and past its closing one: `None`
    /// for an escape or a control character (serde_json refuses the latter). Eight bytes at a
    /// time while eight are left ([`special_bytes`]), then byte by byte.
    #[inline]
    fn string(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut end = start;
        loop {
            let Some(word) = bytes.get(end..end + 8) else {
                end += bytes.get(end..)?.iter().position(|&b| needs_escape(b))?;
                break;
            };
            let found = special_bytes(u64::from_le_bytes(word.try_into().ok()?));
            if found != 0 {
                end += (found.trailing_zeros() / 8) as usize;
                break;
            }
            end += 8;
        }
        if bytes[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        // `"` is ASCII, so both ends are character boundaries of the (UTF-8) text.
        self.text.get(start..end)
    }

    /// Exactly `word` (`null`, `true`, `false`).
    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.text.as_bytes().get(self.at..end)? == word).then(|| self.at = end)
    }

    /// One or more digits, read on from `value`: `value` followed by those digits, as an
    /// integer modulo 2^64 (exact while the whole is at most [`MAX_SAFE_DIGITS`] digits).
    #[inline]
    fn digits(&mut self, mut value: u64) -> Option<u64> {
        let start = self.at;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            value = value.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
            self.at += 1;
        }
        (self.at > start).then_some(value)
    }

    /// A number's text by JSON's grammar: its integer part's digits (without the sign), its
    /// fraction's, and their value, read in the same pass.
    fn number_text(&mut self) -> Option<NumberText<'a>> {
        let start = self.at;
        let negative = self.eat(b'-').is_some();
        let int_start = self.at;
        let mut significand = match self.peek()? {
            b'0' => {
                self.at += 1;
                0
            }
            b'1'..=b'9' => self.digits(0)?,
            _ => return None,
        };
        let int_end = self.at;
        let mut fraction = "";
        if self.eat(b'.').is_some() {
            let fraction_start = self.at;
            significand = self.digits(significand)?;
            fraction = self.text.get(fraction_start..self.at)?;
        }
        let mut exponent = false;
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digits(0)?;
            exponent = true;
        }
        Some(NumberText {
            text: self.text.get(start..self.at)?,
            digits: self.text.get(int_start..int_end)?,
            fraction,
            significand,
            negative,
            exponent,
        })
    }

    /// A number as serde_json's parser gives it to a visitor; `None` for integers beyond 64
    /// bits (it reads them as floats), long ones, and non-finite ones (an error there).
    fn number(&mut self) -> Option<JsonNumber> {
        let n = self.number_text()?;
        if n.text.len() > MAX_NUMBER_BYTES {
            return None;
        }
        if n.float() {
            let x = match exact_decimal(&n) {
                Some(x) => x,
                None => n.text.parse().ok()?,
            };
            return x.is_finite().then_some(JsonNumber::F64(x));
        }
        let significand = if n.digits.len() <= MAX_SAFE_DIGITS {
            // Read while scanning, without an overflow test per digit (a 13-digit
            // millisecond time was a chain of 13 checked multiplications): none can overflow.
            n.significand
        } else {
            n.digits.bytes().try_fold(0_u64, |acc, d| {
                acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })?
        };
        if !n.negative {
            return Some(JsonNumber::U64(significand));
        }
        // serde_json: a negative integer is an i64 unless it underflows or is `-0`, which
        // it makes an f64.
        let negated = (significand as i64).wrapping_neg();
        Some(if negated < 0 {
            JsonNumber::I64(negated)
        } else {
            JsonNumber::F64(-(significand as f64))
        })
    }

    /// Skips an unknown field's value, validating its grammar as serde_json does when it
    /// ignores one (numbers of any size are accepted).
    fn skip_value(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.string().map(|_| ())
            }
            b'-' | b'0'..=b'9' => self.number_text().map(|_| ()),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            open @ (b'[' | b'{') if depth < MAX_DEPTH => {
                let close = if open == b'[' { b']' } else { b'}' };
                self.at += 1;
                self.skip_ws();
                if self.eat(close).is_some() {
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.eat(b'"')?;
                        self.string()?;
                        self.skip_ws();
                        self.eat(b':')?;
                        self.skip_ws();
                    }
                    self.skip_value(depth + 1)?;
                    self.skip_ws();
                    match self.peek()? {
                        b',' => {
                            self.at += 1;
                            self.skip_ws();
                        }
                        b if b == close => {
                            self.at += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }
}

/// A number's text, split as [`Scanner::number`] needs it.
struct NumberText<'a> {
    text: &'a str,
    /// The integer part's digits, without the sign.
    digits: &'a str,
    /// The fraction's digits, after the point (empty without one).
    fraction: &'a str,
    /// The integer part's and the fraction's digits as one integer (an integer's value),
    /// modulo 2^64: exact up to [`MAX_SAFE_DIGITS`] digits in all.
    significand: u64,
    negative: bool,
    /// Has an exponent.
    exponent: bool,
}

impl NumberText<'_> {
    /// Has a fraction or an exponent.
    fn float(&self) -> bool {
        self.exponent || !self.fraction.is_empty()
    }
}

/// Most significant digits [`exact_decimal`] reads: any such integer is below 2^53, so it
/// is an exact `f64`.
const EXACT_DIGITS: usize = 15;

/// 10^0 ..= 10^15, each an exact `f64`.
const POWERS_OF_TEN: [f64; EXACT_DIGITS + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// A decimal without an exponent and with at most [`EXACT_DIGITS`] digits (`4496.3`, the
/// measurements most records carry) as the nearest `f64`, without the general parser: its
/// digits as an integer and 10 to the number of fraction digits are both exact `f64`s, so
/// their IEEE quotient is the correctly rounded value, the one `str::parse` (and serde_json
/// with `float_roundtrip`) gives (Clinger's fast path). `None` for any other number.
#[inline]
fn exact_decimal(n: &NumberText) -> Option<f64> {
    let digits = n.digits.len() + n.fraction.len();
    if n.exponent || digits > EXACT_DIGITS {
        return None;
    }
    let x = n.significand as f64 / POWERS_OF_TEN[n.fraction.len()];
    Some(if n.negative { -x } else { x })
}
