//! Key-group shards of one window instance's state (DESIGN.md §5, incremental checkpoints).
//! Pipeline position: inside the window operator, which owns the key groups `lo..hi` (in
//! every run, `weir features` included).
//!
//! The instance's range is cut at multiples of a *shard width* `ceil(G / shards)` key groups
//! ([`SHARDS`] when the run writes checkpoints, else [`SHARDS_WITHOUT_CHECKPOINTS`]), the same
//! cuts for every parallelism, and each piece keeps its own [`KeyedFeatures`]. Records
//! go to the shard of their key group; firing and expiry run shard by shard (every shard sees
//! the same watermark, so the rows are those of one undivided state). At a checkpoint only the
//! shards that changed since their last snapshot are encoded and written; the others are still
//! described by their older files. A restore at another parallelism re-splits stored shards by
//! key group.

use crate::error::Result;
use crate::job_features::JobFeatures;
use crate::keyed_features::KeyedFeatures;
use crate::record::Event;
use crate::row::FeatureRow;
use crate::vocab::{Key, KeyGroup, Watermark};
use crate::window_state::Applied;

/// Number of shards the key groups of a job are cut into (fewer when `G` is smaller): 8 key
/// groups per shard at the default `G` of 4096. More shards make incremental snapshots finer
/// but cost throughput (every shard's maps are separate; firing visits every shard each tick):
/// at 100 k keys, 512 shards ran as fast as 128, 1024 and 4096 were 20-25 % slower
/// (`cargo bench --bench checkpoint -- throughput`).
pub const SHARDS: u32 = 512;

/// Shards of a run that writes no checkpoints: nothing is snapshotted, so fine shards only
/// cost. A shard's panes hold that shard's keys only (at 512 shards and 50 k keys, a
/// one-minute pane of a shard holds ~2 keys, each pane a tree entry and a table of its
/// own), and firing visits every shard each tick. A few shards remain so that a tick that
/// closes many windows still fires in parts (`Fired::complete`). Run F (BENCHMARKS.md, fix
/// 15): tumbling 1 m on 2 workers 0.60 → 0.51 s at 8 shards against 512.
pub const SHARDS_WITHOUT_CHECKPOINTS: u32 = 8;

/// One shard: the state of key groups `lo..hi`.
#[derive(Debug)]
struct Shard {
    lo: u32,
    hi: u32,
    state: KeyedFeatures,
}

/// The encoded state of one shard that changed since its last snapshot.
#[derive(Debug)]
pub struct ShardSnapshot {
    /// Position of the shard in [`StateShards::ranges`].
    pub index: usize,
    /// First key group (inclusive).
    pub lo: u32,
    /// End key group (exclusive).
    pub hi: u32,
    /// [`KeyedFeatures::encode`] of the shard.
    pub bytes: Vec<u8>,
}

/// The window state of the key groups `lo..hi` of a job with `G` key groups, in shards.
#[derive(Debug)]
pub struct StateShards {
    key_groups: u32,
    width: u32,
    first_chunk: u32,
    shards: Vec<Shard>,
}

/// Key groups per shard for a job with `key_groups` groups cut into `shards`.
fn shard_width(key_groups: u32, shards: u32) -> u32 {
    key_groups.div_ceil(shards.max(1)).max(1)
}

impl StateShards {
    /// Empty state for the key groups `lo..hi` (empty when `lo >= hi`) of a job whose
    /// `key_groups` are cut into `shards` (fewer when `key_groups` is smaller).
    pub fn new(
        job: &JobFeatures,
        allowed_lateness_ms: i64,
        (lo, hi): (u32, u32),
        key_groups: u32,
        shards: u32,
    ) -> Self {
        let width = shard_width(key_groups, shards);
        let mut shards = Vec::new();
        let mut at = lo;
        while at < hi {
            let end = ((at / width + 1) * width).min(hi);
            shards.push(Shard {
                lo: at,
                hi: end,
                state: KeyedFeatures::new(job, allowed_lateness_ms),
            });
            at = end;
        }
        StateShards {
            key_groups,
            width,
            first_chunk: lo / width,
            shards,
        }
    }

    /// The key-group range of every shard, in order.
    pub fn ranges(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.shards.iter().map(|s| (s.lo, s.hi))
    }

    /// Number of shards.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// True when the instance owns no key group.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Open (key, window) slots over all shards.
    pub fn open_slots(&self) -> usize {
        self.shards.iter().map(|s| s.state.open_slots()).sum()
    }

    /// See [`KeyedFeatures::set_processing_time`].
    pub fn set_processing_time(&mut self, now_ms: i64) {
        self.shards
            .iter_mut()
            .for_each(|s| s.state.set_processing_time(now_ms));
    }

    /// Applies one record to its key group's shard. Records are routed to the instance that
    /// owns their key group; one from outside the range (a routing bug) is kept in the nearest
    /// shard rather than lost.
    #[inline]
    pub fn apply(&mut self, job: &JobFeatures, event: &Event, watermark: Watermark) -> Applied {
        let chunk = (event.key_group.0 / self.width).saturating_sub(self.first_chunk) as usize;
        debug_assert!(
            chunk < self.shards.len(),
            "key group {} routed to an instance without it",
            event.key_group.0
        );
        let last = self.shards.len().saturating_sub(1);
        match self.shards.get_mut(chunk.min(last)) {
            Some(shard) => shard.state.apply(job, event, watermark),
            None => Applied::Updated,
        }
    }

    /// Fires every shard (see [`KeyedFeatures::fire`]).
    pub fn fire(&mut self, job: &JobFeatures, watermark: Watermark, rows: &mut Vec<FeatureRow>) {
        for index in 0..self.shards.len() {
            self.fire_shard(index, job, watermark, rows);
        }
    }

    /// Fires the shard at `index` (nothing when there is none): the window operator fires a
    /// tick's shards in parts, each at the same watermark, so that the operators after it
    /// take a large tick's rows a part at a time.
    pub fn fire_shard(
        &mut self,
        index: usize,
        job: &JobFeatures,
        watermark: Watermark,
        rows: &mut Vec<FeatureRow>,
    ) {
        if let Some(shard) = self.shards.get_mut(index) {
            shard.state.fire(job, watermark, rows);
        }
    }

    /// Expires quiet keys in every shard (see [`KeyedFeatures::expire`]); returns the number
    /// of keys expired.
    pub fn expire(
        &mut self,
        job: &JobFeatures,
        now_ms: i64,
        ttl_ms: i64,
        rows: &mut Vec<FeatureRow>,
    ) -> usize {
        self.shards
            .iter_mut()
            .map(|s| s.state.expire(job, now_ms, ttl_ms, rows))
            .sum()
    }

    /// Encodes every shard that changed since its last snapshot (all of them the first time
    /// and after [`StateShards::mark_all_changed`]), and marks them unchanged.
    pub fn changed_snapshots(&mut self) -> Result<Vec<ShardSnapshot>> {
        let mut out = Vec::new();
        for (index, shard) in self.shards.iter_mut().enumerate() {
            if shard.state.take_changed() {
                out.push(ShardSnapshot {
                    index,
                    lo: shard.lo,
                    hi: shard.hi,
                    bytes: shard.state.encode()?,
                });
            }
        }
        Ok(out)
    }

    /// Makes the next [`StateShards::changed_snapshots`] encode every shard (the previous
    /// snapshots were not all written).
    pub fn mark_all_changed(&mut self) {
        self.shards.iter_mut().for_each(|s| s.state.mark_changed());
    }

    /// Loads a stored snapshot of the key groups `lo..hi` (encoded by
    /// [`KeyedFeatures::encode`]): its keys in this instance's range join their shards, the
    /// others are dropped (they belong to other instances after a rescale). `now_ms` and
    /// `watermark`: the processing time the restored run starts at and the checkpoint's window
    /// watermark ([`KeyedFeatures::resume`]).
    pub fn restore(
        &mut self,
        job: &JobFeatures,
        (lo, hi): (u32, u32),
        bytes: &[u8],
        (now_ms, watermark): (i64, Option<i64>),
    ) -> Result<()> {
        let mut stored = KeyedFeatures::decode(job, bytes)?;
        stored.resume(now_ms, watermark);
        // Shards are disjoint: one that covers the stored range is the only one it touches.
        if let Some(shard) = self.shards.iter_mut().find(|s| s.lo <= lo && hi <= s.hi) {
            return shard.state.absorb(stored);
        }
        let key_groups = self.key_groups;
        for shard in self.shards.iter_mut().filter(|s| s.lo < hi && lo < s.hi) {
            let mut part = stored.clone();
            let (from, to) = (shard.lo, shard.hi);
            let keep = move |key: &Key| {
                let kg = KeyGroup::of(key.as_bytes(), key_groups).0;
                from <= kg && kg < to
            };
            part.retain_keys(&keep);
            shard.state.absorb(part)?;
        }
        Ok(())
    }
}
