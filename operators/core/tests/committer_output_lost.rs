//! The committer's side of lost output (DESIGN.md §5): once a sink reports
//! `CheckpointPart::OutputLost` at some tick, no epoch at or after that tick is committed, even
//! when its snapshots and offsets are all there. A restart then replays from the last epoch
//! whose output is durable. (The sink's side is in `epoch_sink.rs`.)

use std::collections::BTreeMap;
use std::sync::Arc;

use timely::dataflow::operators::{Input, Probe};
use timely::dataflow::ProbeHandle;

use weir_checkpoint::{KeyGroupRange, LocalDirStore, SnapshotStore, SourceOffset, SourcePositions};
use weir_features::vocab::{Epoch, Tick, Watermark};
use weir_operators::committer::{CommitCheckpoints, CommitterConfig};
use weir_operators::epochs::{CheckpointPart, EpochClock};
use weir_operators::metrics::JobMetrics;
use weir_operators::window_features::WINDOW_OPERATOR;

const KEY_GROUPS: u32 = 16;

/// The parts one epoch would get from a window instance and a source instance.
fn epoch_parts(store: &dyn SnapshotStore, tick: Tick) -> Vec<CheckpointPart> {
    let range = KeyGroupRange::new(0, KEY_GROUPS).expect("key-group range");
    let entry = store
        .write_snapshot(Epoch(tick), WINDOW_OPERATOR, range, b"state")
        .expect("snapshot written");
    let offsets = BTreeMap::from([(
        0,
        SourceOffset {
            next_offset: tick as i64 * 10,
            watermark: Watermark::MIN,
        },
    )]);
    vec![
        CheckpointPart::Snapshot(entry),
        CheckpointPart::Offsets {
            source: "clicks".to_owned(),
            positions: SourcePositions::open(offsets),
        },
    ]
}

/// Epochs every 2 ticks with complete parts at ticks 2, 4 and 6; `lost_at`: a sink reports
/// lost output at that tick. Returns the committed epochs.
fn committed_epochs(lost_at: Option<Tick>) -> Vec<u64> {
    let dir = std::env::temp_dir().join(format!(
        "weir-committer-lost-{}-{}",
        std::process::id(),
        lost_at.unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let store: Arc<dyn SnapshotStore> =
        Arc::new(LocalDirStore::open(&dir).expect("checkpoint dir"));
    let config = CommitterConfig {
        store: store.clone(),
        epochs: EpochClock::every(2, 1),
        key_groups: KEY_GROUPS,
        parallelism: BTreeMap::from([(WINDOW_OPERATOR.to_owned(), 1)]),
        stateful_operators: vec![WINDOW_OPERATOR.to_owned()],
        serving: Arc::default(),
        model_versions: BTreeMap::new(),
        topology_hash: 7,
        tick_ms: 1,
        retain: 10,
        restored_positions: BTreeMap::new(),
        inputs: Vec::new(),
        worker: 0,
        metrics: Arc::new(JobMetrics::default()),
        on_commit: None,
    };
    let epochs = timely::execute_directly(move |worker| {
        let probe = ProbeHandle::<Tick>::new();
        let mut input = worker.dataflow::<Tick, _, _>(|scope| {
            let (input, stream) = scope.new_input::<Vec<CheckpointPart>>();
            stream.probe_with(&probe).commit_checkpoints(config);
            input
        });
        for tick in 1..=6 {
            input.advance_to(tick);
            if lost_at == Some(tick) {
                input.send(CheckpointPart::OutputLost);
            }
            if tick % 2 == 0 {
                for part in epoch_parts(store.as_ref(), tick) {
                    input.send(part);
                }
            }
        }
        input.advance_to(8);
        while probe.less_than(&8) {
            worker.step();
        }
        // One more round for the committer, downstream of the probe.
        for _ in 0..10 {
            worker.step();
        }
        let listed = store.list_epochs().expect("epochs");
        listed
            .into_iter()
            .filter(|e| store.read_manifest(*e).is_ok())
            .map(|e| e.0)
            .collect::<Vec<_>>()
    });
    let _ = std::fs::remove_dir_all(&dir);
    epochs
}

#[test]
fn every_complete_epoch_commits_without_loss() {
    assert_eq!(committed_epochs(None), vec![2, 4, 6]);
}

#[test]
fn no_epoch_at_or_after_lost_output_commits() {
    assert_eq!(committed_epochs(Some(3)), vec![2]);
    assert_eq!(
        committed_epochs(Some(4)),
        vec![2],
        "the epoch of the loss itself committed"
    );
}
