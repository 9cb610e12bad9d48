//! Simple predicates on one field (`type == 'click'`, `amount >= 100`), used by conditional
//! aggregates such as `count_if`. Parsed once from the job file, evaluated per record.

use crate::key_table::same_key;
use crate::record::Value;
use crate::schema::{FieldType, RecordSchema};
use crate::vocab::Key;

/// Comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// The constant a field is compared with.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// A number.
    Num(f64),
    /// A quoted string.
    Str(Key),
    /// `true` / `false`.
    Bool(bool),
}

/// `field op literal`, compiled against a schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Predicate {
    /// Slot of the field in the record.
    pub slot: usize,
    /// Operator.
    pub op: CmpOp,
    /// Constant.
    pub literal: Literal,
}

impl Predicate {
    /// Parses `field op literal` (strings in single or double quotes) against `schema`.
    pub fn parse(text: &str, schema: &RecordSchema) -> Result<Predicate, String> {
        let ops = [
            ("==", CmpOp::Eq),
            ("!=", CmpOp::Ne),
            ("<=", CmpOp::Le),
            (">=", CmpOp::Ge),
            ("<", CmpOp::Lt),
            (">", CmpOp::Gt),
        ];
        let (at, token, op) = ops
            .iter()
            .filter_map(|(token, op)| text.find(token).map(|at| (at, *token, *op)))
            .min_by_key(|(at, token, _)| (*at, usize::MAX - token.len()))
            .ok_or_else(|| {
                format!(
                    "`{text}` has no comparison; write e.g. \"type == 'click'\" or \"amount > 10\""
                )
            })?;
        let field = text[..at].trim();
        let literal = text[at + token.len()..].trim();
        let slot = schema.index_of(field).ok_or_else(|| {
            format!(
                "predicate `{text}` uses field `{field}`, which is not declared in [source.fields]"
            )
        })?;
        let ty = schema.fields()[slot].ty;
        let literal = parse_literal(literal, ty).map_err(|e| format!("predicate `{text}`: {e}"))?;
        if matches!(literal, Literal::Str(_) | Literal::Bool(_))
            && !matches!(op, CmpOp::Eq | CmpOp::Ne)
        {
            return Err(format!(
                "predicate `{text}`: strings and booleans only support == and !="
            ));
        }
        Ok(Predicate { slot, op, literal })
    }

    /// Evaluates the predicate on a record's values; a missing field never matches.
    #[inline]
    pub fn matches(&self, values: &[Value]) -> bool {
        let Some(value) = values.get(self.slot) else {
            return false;
        };
        match (value, &self.literal) {
            (Value::Num(x), Literal::Num(c)) => compare(*x, *c, self.op),
            (Value::Str(s), Literal::Str(c)) => same_key(s, c) == (self.op == CmpOp::Eq),
            (Value::Bool(b), Literal::Bool(c)) => (b == c) == (self.op == CmpOp::Eq),
            _ => false,
        }
    }
}

fn compare(x: f64, c: f64, op: CmpOp) -> bool {
    match op {
        CmpOp::Eq => x == c,
        CmpOp::Ne => x != c,
        CmpOp::Lt => x < c,
        CmpOp::Le => x <= c,
        CmpOp::Gt => x > c,
        CmpOp::Ge => x >= c,
    }
}

fn parse_literal(text: &str, ty: FieldType) -> Result<Literal, String> {
    match ty {
        FieldType::String => {
            let quoted = (text.starts_with('\'') && text.ends_with('\''))
                || (text.starts_with('"') && text.ends_with('"'));
            if text.len() < 2 || !quoted {
                return Err(format!("string field needs a quoted literal, got `{text}`"));
            }
            let (quote, inner) = (&text[..1], &text[1..text.len() - 1]);
            // `kind == 'a' or kind == 'b'` would otherwise parse as one literal and never match.
            if inner.contains(quote) {
                return Err(format!(
                    "the literal `{text}` contains its own quote character; a predicate is one \
                     `field op literal` (no and/or), and a quote inside a string needs the other quote"
                ));
            }
            Ok(Literal::Str(Key::from(inner)))
        }
        FieldType::Bool => match text {
            "true" => Ok(Literal::Bool(true)),
            "false" => Ok(Literal::Bool(false)),
            _ => Err(format!("boolean field needs true or false, got `{text}`")),
        },
        FieldType::F64
        | FieldType::I64
        | FieldType::TimestampMs
        | FieldType::TimestampS
        | FieldType::TimestampRfc3339 => text
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .map(Literal::Num)
            .ok_or_else(|| format!("numeric field needs a finite number, got `{text}`")),
    }
}
