//! Serde helper: durations in job files are human strings (`"10s"`, `"1m"`, `"250ms"`) held
//! as integer milliseconds.

use serde::{Deserialize, Deserializer};

/// Parses a humantime duration string into milliseconds.
pub fn parse(text: &str) -> Result<i64, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration like \"10s\" or \"1m\": {e}"))?;
    i64::try_from(duration.as_millis()).map_err(|_| format!("duration `{text}` is too long"))
}

/// Deserializes a duration string into milliseconds.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}
