//! The model registry: where the scoring stage finds the version to serve, and when to
//! change it (DESIGN.md §6, hot reload).
//!
//! Layout: `<root>/<name>/<version>/{model.onnx, manifest.json}` plus an optional control
//! file `<root>/<name>/CONTROL`. Without a control file (or with `latest` in it) the served
//! version is the newest directory, by [`version_order`]; `pin <version>` (alias `rollback
//! <version>`) serves that version until the file changes. Directories whose name starts with
//! `.` are ignored, so a new version can be written to `.incoming` and renamed into place.
//! Each inference thread polls [`Registry::target`] and reloads when the [`Target`]'s
//! fingerprint changes (`crate::pool`).

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Result, ScoreError};
use crate::manifest::MANIFEST_FILE;
use crate::session::MODEL_FILE;

/// File name of the control file in a model's registry directory.
pub const CONTROL_FILE: &str = "CONTROL";

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
}

/// What the control file asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// Serve the newest version (also: no control file, or an empty one).
    Latest,
    /// Serve this version (`pin <version>` or `rollback <version>`).
    Pin(String),
}

/// The version the registry says to serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Version (directory name).
    pub version: String,
    /// The version's directory.
    pub dir: PathBuf,
    /// Changes whenever the version or its files change (name, sizes, modification times).
    pub fingerprint: String,
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
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter(|name| !name.starts_with('.'))
            .collect();
        versions.sort_by(|a, b| version_order(a, b));
        Ok(versions)
    }

    /// Reads the control file (`Latest` when there is none).
    pub fn control(&self) -> Result<Control> {
        let path = self.dir.join(CONTROL_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Control::Latest),
            Err(e) => return Err(self.problem(format!("cannot read {}: {e}", path.display()))),
        };
        parse_control(&text)
            .map_err(|problem| self.problem(format!("{}: {problem}", path.display())))
    }

    /// The version to serve now, per the control file and the version directories.
    pub fn target(&self) -> Result<Target> {
        let versions = self.versions()?;
        let version = match self.control()? {
            Control::Pin(v) if versions.contains(&v) => v,
            Control::Pin(v) => {
                return Err(self.problem(format!(
                    "{} pins version `{v}`, which is not in {} (versions: {versions:?})",
                    CONTROL_FILE,
                    self.dir.display()
                )))
            }
            Control::Latest => versions.last().cloned().ok_or_else(|| {
                self.problem(format!(
                    "{} holds no version directory; add <version>/model.onnx and \
                     <version>/manifest.json",
                    self.dir.display()
                ))
            })?,
        };
        let dir = self.dir.join(&version);
        let fingerprint = fingerprint(&version, &dir);
        Ok(Target {
            version,
            dir,
            fingerprint,
        })
    }

    fn problem(&self, problem: String) -> ScoreError {
        ScoreError::Registry {
            dir: self.dir.clone(),
            problem,
        }
    }
}

/// Parses a control file: blank lines and `#` comments are skipped; the one remaining line
/// is `latest`, `pin <version>` or `rollback <version>`.
pub fn parse_control(text: &str) -> std::result::Result<Control, String> {
    let mut lines = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty());
    let Some(line) = lines.next() else {
        return Ok(Control::Latest);
    };
    if let Some(extra) = lines.next() {
        return Err(format!(
            "holds more than one command (`{line}`, then `{extra}`); keep one"
        ));
    }
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("latest"), None, _) => Ok(Control::Latest),
        (Some("pin" | "rollback"), Some(v), None) => Ok(Control::Pin(v.to_owned())),
        _ => Err(format!(
            "unknown command `{line}`; write `latest`, `pin <version>` or `rollback <version>`"
        )),
    }
}

/// Orders version names "naturally": runs of digits compare as numbers (`v9 < v10`), other
/// runs as text, so dates (`2026-11-30.2`) and counters (`7`, `12`) both sort as expected.
pub fn version_order(a: &str, b: &str) -> Ordering {
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
    format!("{version}|{}|{}", stamp(MANIFEST_FILE), stamp(MODEL_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(version_order("007", "7"), Ordering::Equal);
    }

    #[test]
    fn control_file_commands() {
        assert_eq!(parse_control(""), Ok(Control::Latest));
        assert_eq!(
            parse_control("# nothing\n\n latest \n"),
            Ok(Control::Latest)
        );
        assert_eq!(parse_control("pin v3"), Ok(Control::Pin("v3".into())));
        assert_eq!(
            parse_control("rollback 2026-11-30.1 # bad canary\n"),
            Ok(Control::Pin("2026-11-30.1".into()))
        );
        assert!(parse_control("pin").is_err());
        assert!(parse_control("pin a b").is_err());
        assert!(parse_control("latest\npin v1").is_err());
        assert!(parse_control("use v1").is_err());
    }
}
