//! Checkpoint epochs in the dataflow (DESIGN.md §5): which ticks are epochs, and what the
//! stateful operators tell the committer about an epoch. Every source, window and sink
//! instance has a *checkpoint stream* of [`CheckpointPart`]s into the committer
//! ([`crate::committer`]); an instance holds a capability at epoch `E` until its part of `E`
//! is durable (a source's offsets are out, a window's snapshot file is written, a sink's
//! output is flushed), so the committer's input frontier passing `E` means the whole epoch is
//! durable and its manifest can be committed.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;

use weir_checkpoint::{Manifest, SnapshotEntry, SnapshotStore, SourcePositions};
use weir_features::vocab::Tick;

/// Which ticks are checkpoint epochs: every `every_ticks`-th tick (`tick % every_ticks == 0`),
/// or none when checkpoints are off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochClock {
    every_ticks: Option<u64>,
}

impl EpochClock {
    /// No checkpoints.
    pub const OFF: EpochClock = EpochClock { every_ticks: None };

    /// An epoch every `interval_ms` of processing time with ticks of `tick_ms`.
    pub fn every(interval_ms: u64, tick_ms: u64) -> EpochClock {
        EpochClock {
            every_ticks: Some((interval_ms / tick_ms.max(1)).max(1)),
        }
    }

    /// Whether checkpoints are on.
    pub fn enabled(&self) -> bool {
        self.every_ticks.is_some()
    }

    /// Whether `tick` is an epoch.
    pub fn is_epoch(&self, tick: Tick) -> bool {
        self.every_ticks.is_some_and(|k| tick.is_multiple_of(k))
    }

    /// The last epoch before `tick` (`None` when checkpoints are off or `tick` is 0).
    pub fn last_before(&self, tick: Tick) -> Option<Tick> {
        let k = self.every_ticks?;
        Some(tick.checked_sub(1)? / k * k)
    }

    /// The first epoch at or after `tick` (`None` when checkpoints are off or it would
    /// overflow).
    pub fn first_at_or_after(&self, tick: Tick) -> Option<Tick> {
        let k = self.every_ticks?;
        tick.div_ceil(k).checked_mul(k)
    }

    /// The epochs `E` with `from <= E < to`, ascending.
    pub fn epochs_in(&self, from: Tick, to: Tick) -> impl Iterator<Item = Tick> {
        let k = self.every_ticks.unwrap_or(u64::MAX);
        let first = if self.every_ticks.is_some() {
            from.div_ceil(k).saturating_mul(k)
        } else {
            u64::MAX
        };
        (0..)
            .map(move |i: u64| first.saturating_add(i.saturating_mul(k)))
            .take_while(move |&e| e < to)
    }
}

/// What one instance contributes to the manifest of an epoch (sent at that epoch's tick).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CheckpointPart {
    /// A source instance's resume positions: partition → (next offset, watermark), and the
    /// partitions it has read to their end.
    Offsets {
        /// Source name (topic or files).
        source: String,
        /// Its partitions.
        positions: SourcePositions,
    },
    /// A snapshot file written for the epoch.
    Snapshot(SnapshotEntry),
    /// A window instance's combined watermark after the epoch's tick: where event time
    /// stood, so that a restore judges lateness as the uninterrupted run would have.
    Watermark(i64),
    /// A sink lost output of ticks from this part's time on (a failed delivery, or records
    /// still unacknowledged when its input ended): no epoch at or after it may commit.
    OutputLost,
}

/// A stream of checkpoint parts (empty batches never travel; the capabilities are the point).
pub type CheckpointStream<'scope> = Stream<'scope, Tick, Vec<CheckpointPart>>;

/// Checkpointing as seen by one stateful operator: the epoch clock, the store its snapshot
/// files go to, and the manifest of the checkpoint it starts from.
#[derive(Clone)]
pub struct OperatorCheckpoints {
    /// Which ticks are epochs.
    pub clock: EpochClock,
    /// Where snapshot files are written and restored from (`None` when checkpoints are off).
    pub store: Option<Arc<dyn SnapshotStore>>,
    /// The checkpoint to start from, if any (its files are in `store`).
    pub restore: Option<Arc<Manifest>>,
}

impl OperatorCheckpoints {
    /// Checkpoints off, nothing restored.
    pub fn off() -> Self {
        OperatorCheckpoints {
            clock: EpochClock::OFF,
            store: None,
            restore: None,
        }
    }
}

impl std::fmt::Debug for OperatorCheckpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorCheckpoints")
            .field("clock", &self.clock)
            .field("store", &self.store.is_some())
            .field("restore", &self.restore.as_ref().map(|m| m.epoch))
            .finish()
    }
}
