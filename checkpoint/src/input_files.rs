//! Fingerprints of a file run's input files ([`InputFingerprint`]): each manifest of a run
//! over files records them, and a restore compares them with the files as they are, so a
//! checkpoint is not resumed over replaced inputs.
//!
//! Pipeline position: computed once per process when a checkpointed file job starts
//! (`jobs`' checkpointing), written into every manifest by the committer, compared when a
//! checkpoint is restored.
//!
//! Why: a checkpoint keeps the ranges read to their end as spans of ids
//! ([`crate::SourcePositions::finished`]), not where each ended, so the ranges themselves
//! cannot show that a file changed. A fingerprint is the file's size and a hash of its first
//! and last [`SAMPLE_BYTES`]: a file written again (another export, a regenerated sample)
//! differs there in all but contrived cases, and it costs two short reads per file. A change
//! that keeps the size and both ends goes unseen. The modification time is not used: copying
//! the inputs to another host changes it without changing them.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// Bytes hashed at each end of an input file.
pub const SAMPLE_BYTES: u64 = 64 * 1024;

/// What a manifest records of one input file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFingerprint {
    /// The file, as the job names it.
    pub path: String,
    /// Its size in bytes (compressed, for a compressed file).
    pub size: u64,
    /// xxh3 of its first and last [`SAMPLE_BYTES`] (each the whole file when it is shorter),
    /// in hex.
    pub ends_xxh3: String,
}

impl InputFingerprint {
    /// The fingerprint of the file at `path` as it is now.
    pub fn of(path: &Path) -> io::Result<InputFingerprint> {
        let file = File::open(path)?;
        let size = file.metadata()?.len();
        let sample = size.min(SAMPLE_BYTES);
        let mut ends = vec![0u8; 2 * sample as usize];
        let (head, tail) = ends.split_at_mut(sample as usize);
        file.read_exact_at(head, 0)?;
        file.read_exact_at(tail, size - sample)?;
        Ok(InputFingerprint {
            path: path.display().to_string(),
            size,
            ends_xxh3: format!("{:016x}", xxh3_64(&ends)),
        })
    }

    /// How the file now (`now`) differs from this recorded fingerprint, if it does.
    pub fn difference(&self, now: &InputFingerprint) -> Option<String> {
        if self.size != now.size {
            return Some(format!(
                "{} was {} bytes and is {} bytes now",
                self.path, self.size, now.size
            ));
        }
        (self.ends_xxh3 != now.ends_xxh3).then(|| {
            format!(
                "{} has the same size ({} bytes) but other bytes in its first or last {} KiB",
                self.path,
                self.size,
                SAMPLE_BYTES / 1024
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_again_differs_at_its_size_or_its_ends() -> io::Result<()> {
        let dir = std::env::temp_dir().join(format!("weir-input-fp-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("events.jsonl");
        let lines: String = (0..20_000).map(|i| format!("{{\"n\":{i:05}}}\n")).collect();
        std::fs::write(&path, &lines)?;
        let recorded = InputFingerprint::of(&path)?;
        assert_eq!(recorded.size, lines.len() as u64);
        assert_eq!(recorded.difference(&InputFingerprint::of(&path)?), None);
        let changed = |text: String| -> io::Result<Option<String>> {
            std::fs::write(&path, text)?;
            Ok(recorded.difference(&InputFingerprint::of(&path)?))
        };
        let longer = changed(format!("{lines}{{\"n\":1}}\n"))?;
        assert!(longer.is_some_and(|d| d.contains("is 240008 bytes now")));
        let head = changed(lines.replacen("00000", "00001", 1))?;
        assert!(head.is_some_and(|d| d.contains("same size")));
        let tail = changed(lines.replace("19999", "29999"))?;
        assert!(tail.is_some());
        // The middle of a file longer than both samples is not read.
        assert_eq!(changed(lines.replace("10000", "10001"))?, None);
        // A file shorter than a sample is hashed whole.
        std::fs::write(&path, "{\"n\":1}\n")?;
        let short = InputFingerprint::of(&path)?;
        std::fs::write(&path, "{\"n\":2}\n")?;
        assert!(short.difference(&InputFingerprint::of(&path)?).is_some());
        std::fs::remove_dir_all(&dir)
    }
}
