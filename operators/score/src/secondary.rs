//! The second model version beside the primary: its role (shadow or canary with a share)
//! and, from the job file, its directory.
//!
//! A leaf of the scoring stage's vocabulary: the job file (`[model] shadow` / `canary`), the
//! registry's `CONTROL` file (`crate::control`), hot reload (`crate::reload`) and the model
//! set (`crate::model_set`) all speak of the second version in these terms.

use std::path::PathBuf;

/// What the second model version does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SecondaryRole {
    /// Scores every row beside the primary; its score goes in `ScoredBatch::shadow`.
    Shadow,
    /// Scores the keys in `share` (0 < share <= 1) instead of the primary.
    Canary {
        /// Share of keys, by [`canary_bucket`](crate::canary::canary_bucket).
        share: f64,
    },
}

impl std::fmt::Display for SecondaryRole {
    /// `shadow`, or `canary at 5%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecondaryRole::Shadow => f.write_str("shadow"),
            SecondaryRole::Canary { share } => {
                write!(f, "canary at {}%", (share * 10_000.0).round() / 100.0)
            }
        }
    }
}

/// A second model version and its role.
#[derive(Clone, Debug, PartialEq)]
pub struct SecondaryModel {
    /// Shadow or canary.
    pub role: SecondaryRole,
    /// Its model directory.
    pub dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::SecondaryRole;

    #[test]
    fn roles_read_as_in_the_control_file() {
        assert_eq!(SecondaryRole::Shadow.to_string(), "shadow");
        assert_eq!(
            SecondaryRole::Canary { share: 0.05 }.to_string(),
            "canary at 5%"
        );
        assert_eq!(
            SecondaryRole::Canary { share: 0.125 }.to_string(),
            "canary at 12.5%"
        );
    }
}
