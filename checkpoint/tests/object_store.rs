//! The object-store backend against a real S3-compatible server (moto's server mode, started
//! by the test; see `weir_testkit::s3_server`): the store contract of `store.rs` and
//! `incremental.rs` — round trip, a snapshot without its manifest is uncommitted, a commit
//! refuses missing files, an overwritten snapshot falls back, retention never deletes what a
//! kept manifest lists — then the same checkpoints through a proxy that answers 30 % of the
//! requests with 503, and a server that is down: the commit fails naming the object, and the
//! previous checkpoint stays the one to restore.
//!
//! Run: `cargo test -p weir-checkpoint --test object_store` (needs moto in .cache/venv, which
//! scripts/setup.sh installs).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::incremental::{commit, payload as shard_payload, restored, three_epochs};
use common::{payload, write_epoch, G};
use weir_checkpoint::{
    inspect, open_store, CheckpointError, Epoch, EpochStatus, KeyGroupRange, Manifest,
    ObjectStoreSnapshotStore, Retries, S3Options, SnapshotStore, MANIFEST_FILE,
};
use weir_testkit::s3_server::{aws_options, FlakyProxy, S3Server};

/// A bucket of its own on the shared server, and a store on `s3://<bucket>/<prefix>` reached
/// through `address` (the server's or a proxy's).
struct Bucket {
    server: Arc<S3Server>,
    name: String,
}

impl Bucket {
    fn new(name: &str) -> Bucket {
        let server = S3Server::shared();
        server.create_bucket(name);
        Bucket {
            server,
            name: name.to_owned(),
        }
    }

    fn store(&self) -> anyhow::Result<ObjectStoreSnapshotStore> {
        self.store_via(&self.server.address(), Retries::default())
    }

    fn store_via(
        &self,
        address: &str,
        retries: Retries,
    ) -> anyhow::Result<ObjectStoreSnapshotStore> {
        let options = S3Options {
            config: aws_options(address),
            retries,
        };
        let url = format!("s3://{}/jobs/clicks", self.name);
        Ok(ObjectStoreSnapshotStore::open_with(&url, &options)?)
    }
}

/// Short waits, enough tries that a 30 % failure rate is ridden out (0.3^9 per request).
fn quick_retries() -> Retries {
    Retries {
        max_retries: 8,
        first_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        timeout: Duration::from_secs(20),
    }
}

fn names(store: &dyn SnapshotStore, epoch: u64) -> anyhow::Result<Vec<String>> {
    Ok(store
        .stored_files(Epoch(epoch))?
        .into_iter()
        .map(|f| f.name)
        .collect())
}

#[test]
fn round_trip_with_the_local_layout() -> anyhow::Result<()> {
    let bucket = Bucket::new("round-trip");
    let store = bucket.store()?;
    assert_eq!(store.latest_valid()?, None);
    let written = write_epoch(&store, 5)?;
    assert_eq!(store.read_manifest(Epoch(5))?, written);
    assert_eq!(store.latest_valid()?, Some(written.clone()));
    for (i, range) in [
        (0, KeyGroupRange::new(0, 8)?),
        (1, KeyGroupRange::new(8, 16)?),
    ] {
        let snapshot = store.read_snapshot(Epoch(5), "window", range)?;
        assert_eq!(snapshot.payload, payload(5, "window", i));
    }
    assert_eq!(
        names(&store, 5)?,
        [
            "MANIFEST",
            "score/kg-0-16",
            "window/kg-0-8",
            "window/kg-8-16"
        ]
    );
    assert_eq!(
        store
            .snapshot_location(Epoch(5), "window", KeyGroupRange::new(0, 8)?)
            .to_str(),
        Some("s3://round-trip/jobs/clicks/5/window/kg-0-8")
    );
    // Epoch 50 must not be listed as part of epoch 5.
    write_epoch(&store, 50)?;
    assert_eq!(store.list_epochs()?, [Epoch(5), Epoch(50)]);
    assert_eq!(names(&store, 5)?.len(), 4);
    let statuses: Vec<EpochStatus> = inspect(&store)?.into_iter().map(|s| s.status).collect();
    assert_eq!(statuses, [EpochStatus::Valid, EpochStatus::Valid]);
    Ok(())
}

#[test]
fn a_snapshot_without_its_manifest_is_uncommitted() -> anyhow::Result<()> {
    let bucket = Bucket::new("uncommitted");
    let store = bucket.store()?;
    let older = write_epoch(&store, 1)?;
    store.write_snapshot(Epoch(2), "window", KeyGroupRange::new(0, 8)?, b"half")?;
    let err = store.verify_epoch(Epoch(2)).err();
    assert!(
        matches!(err, Some(CheckpointError::NotCommitted { .. })),
        "{err:?}"
    );
    let err = store.read_manifest(Epoch(7)).err();
    assert!(
        matches!(err, Some(CheckpointError::NoSuchEpoch { .. })),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, Some(older));
    Ok(())
}

#[test]
fn commit_refuses_missing_files_and_an_overwritten_snapshot_falls_back() -> anyhow::Result<()> {
    let bucket = Bucket::new("refusals");
    let store = bucket.store()?;
    let older = write_epoch(&store, 1)?;
    let newer = write_epoch(&store, 2)?;
    let mut manifest = Manifest::new(Epoch(3), G);
    manifest.parallelism.insert("window".into(), 2);
    let first = store.write_snapshot(Epoch(3), "window", KeyGroupRange::new(0, 8)?, b"a")?;
    let mut second = first.clone();
    second.range = KeyGroupRange::new(8, 16)?;
    manifest.files = vec![first, second];
    let err = store.commit_manifest(&manifest).err();
    assert!(
        matches!(&err, Some(CheckpointError::SnapshotMissing { path, .. })
            if path.to_str() == Some("s3://refusals/jobs/clicks/3/window/kg-8-16")),
        "{err:?}"
    );
    assert!(matches!(
        store.read_manifest(Epoch(3)),
        Err(CheckpointError::NotCommitted { .. })
    ));
    // Epoch 2's first window file overwritten with other bytes of the same length.
    let range = KeyGroupRange::of_instance(0, 2, G);
    let mut other = payload(2, "window", 0);
    other[0] ^= 0x20;
    store.write_snapshot(Epoch(2), "window", range, &other)?;
    let err = store.verify_epoch(Epoch(2)).err();
    assert!(
        matches!(err, Some(CheckpointError::ChecksumMismatch { .. })),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, Some(older));
    // Rewritten as committed, it is valid again.
    store.write_snapshot(Epoch(2), "window", range, &payload(2, "window", 0))?;
    assert_eq!(store.latest_valid()?, Some(newer));
    Ok(())
}

#[test]
fn retention_never_deletes_what_a_kept_manifest_lists() -> anyhow::Result<()> {
    let bucket = Bucket::new("retention");
    let store = bucket.store()?;
    let [_, _, third] = three_epochs(&store, &[1], &[1, 2])?;
    let pruned = store.prune(1)?;
    assert_eq!(pruned.kept, [Epoch(3)]);
    assert_eq!(pruned.deleted, [Epoch(2)]);
    assert_eq!(pruned.retired, [Epoch(1)]);
    assert_eq!(names(&store, 1)?, ["window/kg-0-16"]);
    assert_eq!(store.latest_valid()?, Some(third.clone()));
    assert_eq!(
        restored(&store, &third)?,
        [
            shard_payload(1, 0),
            shard_payload(3, 1),
            shard_payload(3, 2),
            shard_payload(1, 3)
        ]
    );
    commit(&store, 4, &[0, 1, 2, 3], Some(&third))?;
    // An uncommitted leftover older than the newest commit goes; a newer one may be in
    // progress and stays.
    write_epoch(&store, 5)?;
    store.delete_file(Epoch(5), MANIFEST_FILE)?;
    store.write_snapshot(Epoch(9), "window", KeyGroupRange::new(0, 8)?, b"x")?;
    write_epoch(&store, 6)?;
    let pruned = store.prune(1)?;
    assert_eq!(pruned.kept, [Epoch(6)]);
    assert_eq!(pruned.deleted, [Epoch(1), Epoch(3), Epoch(4), Epoch(5)]);
    assert_eq!(store.list_epochs()?, [Epoch(6), Epoch(9)]);
    Ok(())
}

#[test]
fn concurrent_writers_of_one_epoch() -> anyhow::Result<()> {
    let bucket = Bucket::new("concurrent");
    let store = bucket.store()?;
    let p = 8;
    let entries = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p)
            .map(|i| {
                let store = &store;
                scope.spawn(move || {
                    let range = KeyGroupRange::of_instance(i, p, G);
                    store.write_snapshot(Epoch(9), "window", range, &payload(9, "window", i))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("writer panicked"))?
                    .map_err(Into::into)
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut manifest = Manifest::new(Epoch(9), G);
    manifest.parallelism.insert("window".into(), p);
    manifest.files = entries;
    store.commit_manifest(&manifest)?;
    assert_eq!(store.latest_valid()?.map(|m| m.files.len()), Some(p));
    Ok(())
}

#[test]
fn checkpoints_commit_and_restore_through_a_server_failing_30_percent() -> anyhow::Result<()> {
    let bucket = Bucket::new("flaky");
    let proxy = FlakyProxy::start(&bucket.server.address(), 300, 0x5eed);
    let store = bucket.store_via(&proxy.address(), quick_retries())?;
    let mut previous: Option<Manifest> = None;
    for epoch in 1..=6 {
        let changed = [(epoch % 4) as u32];
        let manifest = commit(&store, epoch, &changed, previous.as_ref())?;
        store.prune(2)?;
        previous = Some(manifest);
    }
    let last = previous.ok_or_else(|| anyhow::anyhow!("no epoch"))?;
    assert_eq!(store.latest_valid()?, Some(last.clone()));
    // Shards as last written: shard s by the last epoch e <= 6 with e % 4 == s, else epoch 1.
    assert_eq!(
        restored(&store, &last)?,
        [
            shard_payload(4, 0),
            shard_payload(5, 1),
            shard_payload(6, 2),
            shard_payload(3, 3)
        ]
    );
    assert_eq!(
        store.list_epochs()?,
        [Epoch(2), Epoch(3), Epoch(4), Epoch(5), Epoch(6)],
        "5 and 6 kept, 2 to 4 retired (they hold shards 5 and 6 list), 1 deleted"
    );
    assert!(
        proxy.failed() >= 20 && proxy.forwarded() > proxy.failed(),
        "the proxy answered {} requests with 503 and forwarded {}",
        proxy.failed(),
        proxy.forwarded()
    );
    // The same checkpoint read back directly from the server.
    assert_eq!(bucket.store()?.latest_valid()?, Some(last));
    Ok(())
}

#[test]
fn a_server_that_is_down_fails_the_commit_and_keeps_the_previous_checkpoint() -> anyhow::Result<()>
{
    let bucket = Bucket::new("down");
    let proxy = FlakyProxy::start(&bucket.server.address(), 0, 1);
    let store = bucket.store_via(&proxy.address(), quick_retries())?;
    let older = write_epoch(&store, 1)?;
    // Epoch 2's snapshots are durable; then the server goes down before its commit.
    let mut manifest = older.clone();
    manifest.epoch = Epoch(2);
    manifest.files.clear();
    for (i, range) in [KeyGroupRange::new(0, 8)?, KeyGroupRange::new(8, 16)?]
        .into_iter()
        .enumerate()
    {
        let entry = store.write_snapshot(Epoch(2), "window", range, &payload(2, "window", i))?;
        manifest.files.push(entry);
    }
    manifest.parallelism.remove("score");
    proxy.set_down(true);
    let err = store
        .commit_manifest(&manifest)
        .err()
        .ok_or_else(|| anyhow::anyhow!("commit succeeded with the server down"))?;
    let text = err.to_string();
    assert!(matches!(err, CheckpointError::Io { .. }), "{err:?}");
    assert!(
        text.contains("s3://down/jobs/clicks/2") && text.contains("503"),
        "{text}"
    );
    let err = store
        .write_snapshot(Epoch(3), "window", KeyGroupRange::new(0, 8)?, b"x")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("cannot write s3://down/jobs/clicks/3/window/kg-0-8"),
        "{err}"
    );
    // While down, a restore cannot decide and says so instead of starting fresh.
    assert!(matches!(
        store.latest_valid(),
        Err(CheckpointError::Io { .. })
    ));
    proxy.set_down(false);
    assert_eq!(store.latest_valid()?, Some(older));
    assert!(matches!(
        store.verify_epoch(Epoch(2)),
        Err(CheckpointError::NotCommitted { .. })
    ));
    // The next attempt commits.
    store.commit_manifest(&manifest)?;
    assert_eq!(store.latest_valid()?.map(|m| m.epoch), Some(Epoch(2)));
    Ok(())
}

#[test]
fn open_store_picks_the_backend_from_the_location() -> anyhow::Result<()> {
    let range = KeyGroupRange::new(0, 8)?;
    let s3 = open_store(Path::new("s3://bucket/some/prefix/"))?;
    assert_eq!(
        s3.snapshot_location(Epoch(4), "window", range).to_str(),
        Some("s3://bucket/some/prefix/4/window/kg-0-8")
    );
    let root = open_store(Path::new("s3://bucket"))?;
    assert_eq!(
        root.snapshot_location(Epoch(4), "window", range).to_str(),
        Some("s3://bucket/4/window/kg-0-8")
    );
    let scratch = weir_testkit::files::Scratch::new("open-store");
    let dir = scratch.path().join("ckpt");
    let local = open_store(&dir)?;
    assert_eq!(
        local.snapshot_location(Epoch(4), "window", range),
        dir.join("4/window/kg-0-8")
    );
    assert!(dir.is_dir());
    for bad in ["s3://", "s3:///prefix", "s3://bucket/a/../b"] {
        let err = open_store(Path::new(bad)).err();
        assert!(
            matches!(&err, Some(CheckpointError::InvalidLocation { location, .. }) if location == bad),
            "{bad}: {err:?}"
        );
    }
    Ok(())
}

#[test]
fn a_refused_connection_names_the_object_and_the_cause() -> anyhow::Result<()> {
    let closed = weir_testkit::cluster::free_port()?;
    let options = S3Options {
        config: aws_options(&format!("127.0.0.1:{closed}")),
        retries: quick_retries(),
    };
    let store = ObjectStoreSnapshotStore::open_with("s3://nowhere/ckpt", &options)?;
    let err = store
        .write_snapshot(Epoch(1), "window", KeyGroupRange::new(0, 8)?, b"x")
        .err()
        .ok_or_else(|| anyhow::anyhow!("a write to a closed port succeeded"))?;
    let text = err.to_string();
    assert!(
        text.starts_with("checkpoint I/O error: cannot write s3://nowhere/ckpt/1/window/kg-0-8: ")
            && text.contains("after 8 retries")
            && text.to_lowercase().contains("connection refused"),
        "{text}"
    );
    Ok(())
}
