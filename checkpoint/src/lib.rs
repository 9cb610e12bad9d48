//! # weir-checkpoint
//!
//! Durable state for Weir (DESIGN.md §5), without Timely: stateful operators hand their
//! key-group snapshots to a [`SnapshotStore`], one worker commits the epoch's [`Manifest`]
//! (source offsets, key groups, parallelism, model versions, topology hash, file list), and a
//! restarted job restores from [`SnapshotStore::latest_valid`], possibly at a new parallelism
//! ([`range::overlapping`]).
//!
//! Pipeline position: beside `operators` — the dataflow calls this crate when a frontier
//! passes a checkpoint epoch and when a job starts; nothing here knows about Timely or Kafka.
//!
//! Layout of a store (see [`LocalDirStore`]; [`ObjectStoreSnapshotStore`] keeps the same keys
//! under `s3://bucket/prefix`, and [`open_store`] picks one from a location):
//!
//! ```text
//! ckpt/<epoch>/<operator>/kg-<lo>-<hi>   snapshot of key groups lo..hi (half-open), see format
//! ckpt/<epoch>/MANIFEST                  written last; its atomic rename (or PUT) commits the epoch
//! ```
//!
//! Checkpoints are incremental: an operator writes only the key-group shards that changed
//! since its last snapshot, as sections of one bundle file per instance and epoch
//! ([`SnapshotStore::write_bundle`]), and the manifest lists the older files' sections for the
//! others ([`SnapshotEntry::stored_in`]).
//!
//! [`S3Client`] (`s3.rs`) is the one S3 client construction of the workspace: the object
//! store above and the scoring stage's model registry mirror both open their buckets with it.

pub mod bundle;
mod durable;
pub mod error;
pub mod format;
pub mod input_files;
pub mod inspect;
mod local;
mod location;
pub mod manifest;
pub mod object;
pub mod positions;
pub mod range;
pub mod s3;
pub mod store;

pub use error::{CheckpointError, Result};
pub use input_files::InputFingerprint;
pub use inspect::{inspect, EpochStatus, EpochSummary};
pub use local::LocalDirStore;
pub use location::{is_object_store_url, open_store};
pub use manifest::Manifest;
pub use object::ObjectStoreSnapshotStore;
pub use positions::{SourceOffset, SourcePositions};
pub use range::{KeyGroupRange, Section, SnapshotEntry};
pub use s3::{ObjectInfo, Retries, S3Client, S3Options};
pub use store::{Pruned, SnapshotStore, StoredFile, MANIFEST_FILE};
pub use weir_features::vocab::{Epoch, Watermark};
