//! The model registry: where the scoring stage finds the versions to serve, and when to
//! change them (DESIGN.md §6, hot reload).
//!
//! Layout: `<root>/<name>/<version>/{model.onnx, manifest.json}` plus an optional control
//! file `<root>/<name>/CONTROL`, one directive per line (`#` comments and blank lines are
//! ignored):
//!
//! - the primary version: `latest` (also: no control file, an empty one, or no such line)
//!   serves the newest directory by [`version_order`]; `pin <version>` (alias `rollback
//!   <version>`) serves that version until the file changes;
//! - at most one second version of the same model: `canary <version> <share>` scores that
//!   share of the keys (`5%` or `0.05`) instead of the primary, `shadow <version>` scores
//!   every row beside it. Without such a line the job file's fixed `[model] shadow`/`canary`
//!   directory, if any, is the second version.
//!
//! A registry on S3 (`s3://bucket/prefix`) is mirrored into a local directory of this layout
//! (`crate::registry_mirror`, `crate::registry_sync`), and read from there like any other.
//!
//! Directories whose name starts with `.` are ignored, so a new version can be written to
//! `.incoming` and renamed into place. Each inference thread resolves [`Registry::plan`]
//! every poll and applies what changed (`crate::reload`): a [`Target`] whose fingerprint
//! changed is loaded anew, a new role or share of the same second version is applied as is.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::control::{parse_control, Control, Primary, SecondVersion, CONTROL_FILE};
use crate::error::{Result, ScoreError};
use crate::manifest::MANIFEST_FILE;
pub use crate::registry_mirror::RemoteRegistry;
use crate::secondary::SecondaryRole;
use crate::session::MODEL_FILE;

/// Where the primary model comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    /// One fixed model directory (`[model] path`): loaded at start, never reloaded.
    Dir(PathBuf),
    /// A registry (`[model] registry` + `name`), polled every `poll` for a new target.
    Registry {
        /// The registry root (holds one directory per model name).
        root: PathBuf,
        /// The model name (a directory under `root`, equal to the manifests' `name`).
        name: String,
        /// How often each inference thread looks for a new version or control command.
        poll: Duration,
    },
    /// A registry on an object store (`[model] registry = "s3://bucket/prefix"` + `name`),
    /// mirrored into a local cache that is read as a [`ModelSource::Registry`]
    /// (`crate::registry_mirror`).
    ObjectStore(RemoteRegistry),
}

/// A version the registry says to serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Version (directory name).
    pub version: String,
    /// The version's directory.
    pub dir: PathBuf,
    /// Changes whenever the version or its files change (name, sizes, modification times).
    pub fingerprint: String,
}

/// Everything the registry says to serve now.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The primary version.
    pub primary: Target,
    /// Older versions, newest first, when the primary is the newest (`latest`): what a
    /// starting job may serve instead when the newest does not load (`crate::reload`); names
    /// only, so a poll does not look at every version's files. Empty when `CONTROL` pins the
    /// primary.
    pub fallbacks: Vec<String>,
    /// The second version named by the control file, and its role.
    pub second: Option<(SecondaryRole, Target)>,
}

/// One model's directory in a registry.
#[derive(Clone, Debug)]
pub struct Registry {
    dir: PathBuf,
    name: String,
}

impl Registry {
    /// The registry directory of model `name` under `root`.
    pub fn new(root: &Path, name: &str) -> Self {
        Registry {
            dir: root.join(name),
            name: name.to_owned(),
        }
    }

    /// The model's directory, `<root>/<name>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The model name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Version directories, oldest first by [`version_order`] (hidden ones left out).
    pub fn versions(&self) -> Result<Vec<String>> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| {
            self.problem(format!(
                "cannot list {}: {e}; create it and put versions in <version>/ subdirectories",
                self.dir.display()
            ))
        })?;
        let mut versions: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            // A symlink to a directory is a version too (the object-store mirror's versions
            // are: `crate::registry_sync`).
            .filter(|entry| {
                entry.file_type().is_ok_and(|t| t.is_dir())
                    || entry.file_type().is_ok_and(|t| t.is_symlink()) && entry.path().is_dir()
            })
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter(|name| !name.starts_with('.'))
            .collect();
        versions.sort_by(|a, b| version_order(a, b));
        Ok(versions)
    }

    /// Reads the control file (all defaults when there is none).
    pub fn control(&self) -> Result<Control> {
        let path = self.dir.join(CONTROL_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Control::default()),
            Err(e) => return Err(self.problem(format!("cannot read {}: {e}", path.display()))),
        };
        parse_control(&text)
            .map_err(|problem| self.problem(format!("{} {problem}", path.display())))
    }

    /// The versions to serve now, per the control file and the version directories.
    pub fn plan(&self) -> Result<Plan> {
        let versions = self.versions()?;
        let control = self.control()?;
        let (primary, fallbacks) = match control.primary {
            Primary::Pin(v) => (self.existing(&versions, v, "pins version")?, Vec::new()),
            Primary::Latest => {
                let mut older = versions.clone();
                let newest = older.pop().ok_or_else(|| {
                    self.problem(format!(
                        "{} holds no version directory; add <version>/model.onnx and \
                         <version>/manifest.json",
                        self.dir.display()
                    ))
                })?;
                (newest, older.into_iter().rev().collect())
            }
        };
        let second = match control.second {
            Some(SecondVersion { version, role }) => {
                let what = match role {
                    SecondaryRole::Canary { .. } => "names as its canary version",
                    SecondaryRole::Shadow => "names as its shadow version",
                };
                let version = self.existing(&versions, version, what)?;
                Some((role, self.target(version)))
            }
            None => None,
        };
        Ok(Plan {
            primary: self.target(primary),
            fallbacks,
            second,
        })
    }

    /// `version`, when it is one of `versions`; else an error saying what the control file
    /// `does` with it.
    fn existing(&self, versions: &[String], version: String, does: &str) -> Result<String> {
        if versions.contains(&version) {
            return Ok(version);
        }
        Err(self.problem(format!(
            "{CONTROL_FILE} {does} `{version}`, which is not in {} (versions: {versions:?}); \
             publish it first (write it under .incoming/, then rename it) or fix {CONTROL_FILE}",
            self.dir.display()
        )))
    }

    /// The version directory `version` of this model, with its current fingerprint.
    pub fn target(&self, version: String) -> Target {
        let dir = self.dir.join(&version);
        let fingerprint = fingerprint(&version, &dir);
        Target {
            version,
            dir,
            fingerprint,
        }
    }

    fn problem(&self, problem: String) -> ScoreError {
        ScoreError::Registry {
            dir: self.dir.clone(),
            problem,
        }
    }
}

/// Orders version names "naturally": runs of digits compare as numbers (`v9 < v10`), other
/// runs as text, so dates (`2026-11-30.2`) and counters (`7`, `12`) both sort as expected.
/// Names equal as numbers (`v7`, `v07`) then order by their text, so which one is newest never
/// depends on the order the file system lists them in.
pub fn version_order(a: &str, b: &str) -> Ordering {
    natural_order(a, b).then_with(|| a.cmp(b))
}

fn natural_order(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        match (a.is_empty(), b.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let (ra, rest_a) = split_run(a);
        let (rb, rest_b) = split_run(b);
        let digits = |s: &str| s.as_bytes()[0].is_ascii_digit();
        let ord = if digits(ra) && digits(rb) {
            let (ta, tb) = (ra.trim_start_matches('0'), rb.trim_start_matches('0'));
            ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb))
        } else {
            ra.cmp(rb)
        };
        if ord != Ordering::Equal {
            return ord;
        }
        (a, b) = (rest_a, rest_b);
    }
}

/// The leading run of digits or of non-digits of a non-empty string, and the rest.
fn split_run(s: &str) -> (&str, &str) {
    let digit = s.as_bytes()[0].is_ascii_digit();
    let end = s
        .bytes()
        .position(|c| c.is_ascii_digit() != digit)
        .unwrap_or(s.len());
    s.split_at(end)
}

fn fingerprint(version: &str, dir: &Path) -> String {
    let stamp = |file: &str| {
        std::fs::metadata(dir.join(file)).map_or("missing".to_owned(), |m| {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{}@{mtime}", m.len())
        })
    };
    // A version that is a symlink (the object-store mirror's) changes with its target, also
    // when the new files have the old sizes and a coarse clock gives them the old times.
    let target = std::fs::read_link(dir).map_or(String::new(), |t| t.display().to_string());
    format!(
        "{version}|{target}|{}|{}",
        stamp(MANIFEST_FILE),
        stamp(MODEL_FILE)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlinked_version_is_listed_and_fingerprinted_by_its_target() -> Result<()> {
        let scratch = tempfile::tempdir().map_err(|e| ScoreError::Thread(e.to_string()))?;
        let io = |e: std::io::Error| ScoreError::Thread(e.to_string());
        let dir = scratch.path().join("pp");
        for data in [".a", ".b"] {
            std::fs::create_dir_all(dir.join(data)).map_err(io)?;
            for file in [MODEL_FILE, MANIFEST_FILE] {
                std::fs::write(dir.join(data).join(file), "same").map_err(io)?;
            }
        }
        std::os::unix::fs::symlink(".a", dir.join("v1")).map_err(io)?;
        let registry = Registry::new(scratch.path(), "pp");
        assert_eq!(registry.versions()?, ["v1"]);
        let before = registry.target("v1".into()).fingerprint;
        std::os::unix::fs::symlink(".b", dir.join(".next")).map_err(io)?;
        std::fs::rename(dir.join(".next"), dir.join("v1")).map_err(io)?;
        assert_ne!(registry.target("v1".into()).fingerprint, before);
        Ok(())
    }

    #[test]
    fn natural_version_order() {
        let mut v = vec![
            "v10",
            "v9",
            "2026-11-30.10",
            "2026-11-30.2",
            "1",
            "01a",
            "v9b",
        ];
        v.sort_by(|a, b| version_order(a, b));
        assert_eq!(
            v,
            vec![
                "1",
                "01a",
                "2026-11-30.2",
                "2026-11-30.10",
                "v9",
                "v9b",
                "v10"
            ]
        );
        // Equal as numbers: the text decides, whatever order they are listed in.
        assert_eq!(version_order("007", "7"), Ordering::Less);
        assert_eq!(version_order("v7", "v07"), Ordering::Greater);
        assert_eq!(version_order("v7", "v7"), Ordering::Equal);
    }
}
