//! One sync of a remote model directory into the local cache (`weir_score::registry_sync`),
//! against an in-memory remote, read back through the registry (`Registry`) as the inference
//! threads read it: complete versions and `CONTROL` are mirrored, re-uploads and deletions
//! follow, an incomplete version is left out, a failed sync changes nothing the next one does
//! not catch up on, and a file that vanishes mid-copy leaves no half version.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use weir_score::registry::Registry;
use weir_score::registry_sync::{sync, RemoteFile, RemoteModel, SyncState};
use weir_score::{Result, ScoreError};

/// An in-memory remote: key → (bytes, stamp); `fail` makes every call fail.
#[derive(Default)]
struct Fake {
    objects: Mutex<BTreeMap<String, (Vec<u8>, String)>>,
    fail: Mutex<bool>,
    stamps: Mutex<u64>,
}

impl Fake {
    fn put(&self, key: &str, bytes: &str) {
        let mut n = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
        *n += 1;
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), (bytes.as_bytes().to_vec(), format!("s{n}")));
    }
    fn delete(&self, key: &str) {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
    fn version(&self, version: &str, content: &str) {
        self.put(&format!("{version}/model.onnx"), content);
        self.put(&format!("{version}/manifest.json"), content);
    }
    fn check(&self) -> Result<()> {
        if *self.fail.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(ScoreError::Registry {
                dir: "s3://fake".into(),
                problem: "injected".into(),
            });
        }
        Ok(())
    }
}

impl RemoteModel for Fake {
    fn location(&self) -> String {
        "s3://fake/models/pp".into()
    }
    fn list(&self) -> Result<Vec<RemoteFile>> {
        self.check()?;
        let objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        Ok(objects
            .iter()
            .map(|(key, (_, stamp))| RemoteFile {
                key: key.clone(),
                stamp: stamp.clone(),
            })
            .collect())
    }
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>> {
        self.check()?;
        Ok(self
            .objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned())
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| format!("<{e}>"))
}

fn hidden(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the cache directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with('.'))
        .collect();
    names.sort();
    names
}

#[test]
fn complete_versions_and_control_are_mirrored() -> Result<()> {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dir = scratch.path().join("pp");
    let remote = Fake::default();
    let mut state = SyncState::default();
    remote.version("v1", "one");
    remote.put("v2/manifest.json", "two");
    remote.put(".incoming/model.onnx", "hidden");
    remote.put("README", "top-level files are not versions");
    let changes = sync(&remote, &dir, &mut state)?;
    assert_eq!(changes.added, ["v1"]);
    assert!(!changes.control);
    let registry = Registry::new(scratch.path(), "pp");
    assert_eq!(registry.versions()?, ["v1"], "v2 lacks model.onnx");
    assert_eq!(read(&dir, "v1/model.onnx"), "one");

    // Unchanged: nothing is downloaded again.
    assert!(sync(&remote, &dir, &mut state)?.is_empty());

    // v2 complete, v1 re-uploaded, CONTROL written.
    remote.put("v2/model.onnx", "two");
    remote.put("v2/sub/extra.bin", "nested files come along");
    let before = registry.target("v1".into()).fingerprint;
    remote.put("v1/model.onnx", "one again");
    remote.put("CONTROL", "pin v1\n");
    let changes = sync(&remote, &dir, &mut state)?;
    assert_eq!(changes.added, ["v2"]);
    assert_eq!(changes.replaced, ["v1"]);
    assert!(changes.control);
    assert_eq!(registry.versions()?, ["v1", "v2"]);
    assert_eq!(read(&dir, "v1/model.onnx"), "one again");
    assert_eq!(read(&dir, "v2/sub/extra.bin"), "nested files come along");
    assert_eq!(read(&dir, "CONTROL"), "pin v1\n");
    assert_eq!(registry.plan()?.primary.version, "v1");
    assert_ne!(registry.target("v1".into()).fingerprint, before);

    // Deleted remotely: v1 and CONTROL go, and so does v2 once it lacks a file; the
    // replaced and removed directories are gone a sync later.
    remote.delete("v1/model.onnx");
    remote.delete("v1/manifest.json");
    remote.delete("CONTROL");
    let changes = sync(&remote, &dir, &mut state)?;
    assert_eq!(changes.removed, ["v1"]);
    assert!(changes.control);
    assert!(!dir.join("CONTROL").exists());
    assert_eq!(registry.plan()?.primary.version, "v2");
    remote.delete("v2/model.onnx");
    assert_eq!(sync(&remote, &dir, &mut state)?.removed, ["v2"]);
    sync(&remote, &dir, &mut state)?;
    assert_eq!(hidden(&dir), Vec::<String>::new());
    assert_eq!(state.versions().count(), 0);
    Ok(())
}

#[test]
fn a_failed_sync_changes_nothing_and_the_next_catches_up() -> Result<()> {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dir = scratch.path().join("pp");
    let remote = Fake::default();
    let mut state = SyncState::default();
    remote.version("v1", "one");
    sync(&remote, &dir, &mut state)?;
    remote.version("v2", "two");
    *remote.fail.lock().unwrap_or_else(|p| p.into_inner()) = true;
    assert!(sync(&remote, &dir, &mut state).is_err());
    let registry = Registry::new(scratch.path(), "pp");
    assert_eq!(registry.versions()?, ["v1"]);
    *remote.fail.lock().unwrap_or_else(|p| p.into_inner()) = false;
    assert_eq!(sync(&remote, &dir, &mut state)?.added, ["v2"]);
    assert_eq!(registry.versions()?, ["v1", "v2"]);
    Ok(())
}

#[test]
fn a_file_deleted_while_copying_fails_the_sync_without_a_half_version() -> Result<()> {
    /// Lists a version whose model.onnx is gone by the time it is read.
    struct Vanishing(Fake);
    impl RemoteModel for Vanishing {
        fn location(&self) -> String {
            self.0.location()
        }
        fn list(&self) -> Result<Vec<RemoteFile>> {
            let listed = self.0.list()?;
            self.0.delete("v1/model.onnx");
            Ok(listed)
        }
        fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>> {
            self.0.get(key)
        }
    }
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dir = scratch.path().join("pp");
    let remote = Vanishing(Fake::default());
    remote.0.version("v1", "one");
    let mut state = SyncState::default();
    let error = sync(&remote, &dir, &mut state)
        .expect_err("a failed sync")
        .to_string();
    assert!(
        error.contains("s3://fake/models/pp/v1/model.onnx") && error.contains("deleted"),
        "{error}"
    );
    assert_eq!(Registry::new(scratch.path(), "pp").versions()?.len(), 0);
    assert_eq!(hidden(&dir), Vec::<String>::new());
    Ok(())
}
