//! One input path of the file source, as opened before the dataflow starts: plain JSON Lines,
//! or gzip / zstd compressed JSON Lines, told apart by the file's first bytes (its magic
//! number), never by its name. A plain JSON Lines file cannot start with either magic (a line
//! starts with `{` or whitespace), so sniffing never misreads one; a name that promises a
//! compression the bytes do not have (`.gz`, `.zst`), or bytes of a compression this source
//! does not read (bzip2, xz, lz4), is refused with what to do instead.
//!
//! A plain regular file has a size and can be split into byte ranges ([`crate::file_ranges`]);
//! a compressed file, or a pipe or other non-regular file, is one stream read from its start
//! to its end, and its offsets count bytes of the decompressed stream.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{OperatorError, Result};

/// Bytes of the read buffer of every input reader.
pub const READ_BUFFER_BYTES: usize = 256 * 1024;

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
/// Compressions that are recognised only to refuse them with a clear message.
const UNSUPPORTED: [(&[u8], &str); 3] = [
    (b"BZh", "bzip2"),
    (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "xz"),
    (&[0x04, 0x22, 0x4d, 0x18], "lz4"),
];

/// How an input file's bytes are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// JSON Lines as they are.
    Plain,
    /// gzip (RFC 1952), one member or several concatenated (as `zcat` reads them).
    Gzip,
    /// Zstandard, one frame or several.
    Zstd,
}

/// An input file, checked and sniffed.
#[derive(Clone, Debug)]
pub struct InputFile {
    /// Its path, as given.
    pub path: PathBuf,
    /// Its encoding.
    pub encoding: Encoding,
    /// Its size when it is a plain regular file (and so can be split into byte ranges);
    /// `None`: read as one stream to its end.
    pub splittable_size: Option<u64>,
}

impl InputFile {
    /// Opens `path` and reads its first bytes to tell its encoding.
    pub fn open(path: &Path) -> Result<InputFile> {
        let file = open_file(path)?;
        let metadata = file
            .metadata()
            .map_err(|source| input_error(path, source))?;
        if metadata.is_dir() {
            return Err(OperatorError::UnreadableInput {
                path: path.to_owned(),
                reason: "it is a directory, not a JSON Lines file".to_owned(),
            });
        }
        if !metadata.is_file() {
            // A pipe or device: its first bytes cannot be read twice, so it is plain.
            return Ok(InputFile {
                path: path.to_owned(),
                encoding: Encoding::Plain,
                splittable_size: None,
            });
        }
        let mut head = [0u8; 8];
        let read = read_head(&file, &mut head).map_err(|source| input_error(path, source))?;
        let encoding = sniff(path, &head[..read])?;
        Ok(InputFile {
            path: path.to_owned(),
            encoding,
            splittable_size: (encoding == Encoding::Plain).then_some(metadata.len()),
        })
    }

    /// The file's bytes, decompressed, from the start of the stream.
    pub fn stream(&self) -> Result<Box<dyn BufRead>> {
        let file = open_file(&self.path)?;
        let error = |source| input_error(&self.path, source);
        Ok(match self.encoding {
            Encoding::Plain => Box::new(BufReader::with_capacity(READ_BUFFER_BYTES, file)),
            Encoding::Gzip => Box::new(BufReader::with_capacity(
                READ_BUFFER_BYTES,
                flate2::read::MultiGzDecoder::new(file),
            )),
            Encoding::Zstd => Box::new(BufReader::with_capacity(
                READ_BUFFER_BYTES,
                zstd::stream::read::Decoder::new(file).map_err(error)?,
            )),
        })
    }
}

/// Opens `path` for reading.
pub fn open_file(path: &Path) -> Result<File> {
    File::open(path).map_err(|source| input_error(path, source))
}

/// The error of an input file that cannot be opened or read.
pub fn input_error(path: &Path, source: std::io::Error) -> OperatorError {
    OperatorError::InputFile {
        path: path.to_owned(),
        source,
    }
}

/// Reads up to `head.len()` bytes from the start of `file` without moving its cursor.
fn read_head(file: &File, head: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < head.len() {
        match file.read_at(&mut head[filled..], filled as u64)? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// The encoding `head` (the file's first bytes) announces, checked against the file's name.
fn sniff(path: &Path, head: &[u8]) -> Result<Encoding> {
    let refuse = |reason: String| OperatorError::UnreadableInput {
        path: path.to_owned(),
        reason,
    };
    if let Some((_, name)) = UNSUPPORTED
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
    {
        return Err(refuse(format!(
            "it is {name}-compressed; the file source reads plain, gzip (.gz) and zstd (.zst) JSON Lines: recompress it with gzip or zstd, or decompress it"
        )));
    }
    let encoding = if head.starts_with(GZIP_MAGIC) {
        Encoding::Gzip
    } else if head.starts_with(ZSTD_MAGIC) {
        Encoding::Zstd
    } else {
        Encoding::Plain
    };
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let named = match extension {
        "gz" | "gzip" => Some(Encoding::Gzip),
        "zst" | "zstd" => Some(Encoding::Zstd),
        _ => None,
    };
    match named {
        Some(named) if named != encoding => Err(refuse(format!(
            "its name ends in .{extension} but its first bytes are not {named:?}'s magic number (a truncated or mislabeled file?); rename it if it is {encoding:?}"
        ))),
        _ => Ok(encoding),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffing_goes_by_the_bytes_and_checks_the_name() {
        let path = |name: &str| PathBuf::from(name);
        let sniffed = |name: &str, head: &[u8]| sniff(&path(name), head).ok();
        assert_eq!(sniffed("a.jsonl", b"{\"a\":1}"), Some(Encoding::Plain));
        assert_eq!(sniffed("a.jsonl", b""), Some(Encoding::Plain));
        assert_eq!(sniffed("a", &[0x1f, 0x8b, 8, 0]), Some(Encoding::Gzip));
        assert_eq!(
            sniffed("a.jsonl.zst", &[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Some(Encoding::Zstd)
        );
        let refused = |name: &str, head: &[u8]| match sniff(&path(name), head) {
            Err(error) => error.to_string(),
            Ok(encoding) => panic!("{name} was read as {encoding:?}"),
        };
        assert!(refused("a.jsonl.gz", b"{\"a\":1}").contains("ends in .gz"));
        assert!(refused("a.zst", &[0x1f, 0x8b, 8]).contains("ends in .zst"));
        assert!(refused("a.jsonl", b"BZh91AY").contains("bzip2-compressed"));
    }
}
