//! Counts by model version (scores and inference errors per `model`/`version`, resolved per
//! batch, never per row) and which version each score instance serves (refreshed from
//! [`ServingModels`](crate::serving::ServingModels) before each scrape).

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};

use weir_features::row::ModelTag;

/// The `model` and `version` labels of a model version.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ModelLabels(pub ModelTag);

impl EncodeLabelSet for ModelLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("model", self.0.name.as_str()).encode(encoder.encode_label())?;
        ("version", self.0.version.as_str()).encode(encoder.encode_label())
    }
}

/// The labels of what a score instance serves: its `instance`, the `model`, `version` and
/// `role` (`primary`, `canary` or `shadow`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ServingLabels {
    /// The score instance.
    pub instance: u32,
    /// The model's name.
    pub model: String,
    /// The version served.
    pub version: String,
    /// `primary`, `canary` or `shadow`.
    pub role: String,
}

impl ServingLabels {
    /// The labels of one entry of a [`ServingModels`](crate::serving::ServingModels) table:
    /// `fraud` → primary, `fraud:canary` → canary.
    pub fn of_entry(instance: usize, key: &str, version: &str) -> Self {
        let (model, role) = key.split_once(':').unwrap_or((key, "primary"));
        ServingLabels {
            instance: instance as u32,
            model: model.to_owned(),
            version: version.to_owned(),
            role: role.to_owned(),
        }
    }
}

impl EncodeLabelSet for ServingLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("instance", self.instance).encode(encoder.encode_label())?;
        ("model", self.model.as_str()).encode(encoder.encode_label())?;
        ("version", self.version.as_str()).encode(encoder.encode_label())?;
        ("role", self.role.as_str()).encode(encoder.encode_label())
    }
}
