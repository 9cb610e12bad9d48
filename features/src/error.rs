//! Errors of the feature engine's configuration: schema, feature and window definitions.
//! (Bad *records* are not errors here: they become dead letters, see `dead_letter`.)

/// An invalid schema, feature or window definition, with a message that says how to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeatureError {
    /// The record schema is inconsistent.
    #[error("invalid schema: {0}")]
    Schema(String),
    /// A feature definition does not fit the schema or is malformed.
    #[error("invalid feature `{feature}`: {message}")]
    Feature {
        /// Name of the offending feature.
        feature: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A window definition is invalid.
    #[error("invalid window: {0}")]
    Window(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, FeatureError>;
