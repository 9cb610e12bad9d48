//! What `JobFile::compile` produces: one typed plan per stage of the pipeline, checked once,
//! with processing-time spans as `Duration`, event-time spans as `EventTime`, paths resolved
//! against the job file and Kafka client properties merged once. The wiring (`pipeline.rs`)
//! and the run (`run.rs`, `checkpointing.rs`) read these; none of them reads the job file
//! again.
//!
//! | plan | stage |
//! |---|---|
//! | [`RuntimePlan`] | process shape, tick, key groups, pacing (every stage) |
//! | [`SourcePlan`] | Kafka or file source, watermarks |
//! | [`WindowPlan`] | window operator: lateness, state TTL |
//! | [`ScorePlan`] | score operator: model, batching, pinned cores |
//! | [`SinkPlan`] | score and dead-letter sinks |
//! | [`CheckpointSettings`] | checkpoint store and epochs |
//! | [`TopicCheck`] | the topics `weir run` checks before it starts |
//! | [`MetricsPlan`] | where `/metrics`, `/healthz` and `/readyz` are served |

pub mod checkpoints;
pub mod metrics;
pub mod millis;
pub mod runtime;
pub mod score;
pub mod sinks;
pub mod source;
pub mod topics;
pub mod windows;

pub use checkpoints::CheckpointSettings;
pub use metrics::MetricsPlan;
pub use runtime::RuntimePlan;
pub use score::ScorePlan;
pub use sinks::SinkPlan;
pub use source::{KafkaInput, SourceInput, SourcePlan};
pub use topics::TopicCheck;
pub use windows::WindowPlan;
