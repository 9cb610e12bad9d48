//! The file sink's output file, written on a thread of its own: the [`SinkWriter`] of the
//! sink's one writer instance ([`crate::file_sink`] encodes lines on every worker and hands
//! their batches here). Writing through the page cache was ~11 % of run F's CPU, all of it on
//! the one worker that hosts the writer instance, which then finished last (BENCHMARKS.md,
//! fix 21). On a thread of its own it runs wherever a core is free and the worker goes on with
//! its operators. A regular file is written around the page cache where its file system
//! allows (`direct_file.rs`, fix 67); anything else through a `BufWriter`.
//!
//! Lines are flushed (made visible to the file's readers, not yet durable) before every sync
//! and whenever the queue has been empty for [`IDLE_FLUSH`]: a live job's scores reach a
//! reader of the file within that time, while a bounded run's batches, which come closer
//! together, are written in whole stages.
//!
//! Durability follows the sink's marks ([`crate::epoch_sink`]): a mark counts the batches
//! handed over; a sync request for a mark is queued behind those batches, so when the thread
//! has flushed and fsynced it, everything up to the mark is on disk. A write or sync that
//! fails counts its lines as delivery failures and makes every later mark fail, so no
//! checkpoint epoch after lost output passes. The queue is bounded: a worker that produces
//! faster than the disk takes blocks on it, as it blocked on its own writes before.
//!
//! Every [`SYNC_AHEAD_BYTES`] written, the writer asks a second thread, the syncer, to
//! `fdatasync` the file while it goes on writing, so that a mark's fsync, and above all the
//! one that ends a run, finds little left to flush. What a flush costs follows the bytes
//! written since the last one (the virtual disk's cache flush and the file system's journal:
//! BENCHMARKS.md, fix 55): with only `sync_file_range` started every 8 MiB, as RocksDB's
//! `bytes_per_sync` does, the pages were on disk but the final fsync of run F's 69 MB output
//! still took 55-90 ms with both workers idle. The writer never waits for the syncer (a sync
//! asked for while one runs is folded into the next), so a slow flush does not hold batches
//! back. The syncer's file handle shares the writer's open file description, whose fsync
//! error is reported to one caller only: a failure the syncer sees fails the writer's later
//! marks through the shared state.
//!
//! An output that is not a file or a block device (`--output /dev/stdout`: a pipe, a socket,
//! a terminal) cannot be fsynced (`fdatasync` fails with `EINVAL`); its lines are its
//! reader's once written, so a mark there passes once they are flushed, and nothing is synced.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};

use crate::direct_file::DirectFile;
use crate::epoch_sink::SinkWriter;
use crate::metrics::{JobMetrics, SinkFlow};

/// Batches queued for the thread at most (each up to ~1024 lines).
const QUEUED_BATCHES: usize = 16;

/// How long the writer's queue stays empty before it flushes the lines written since the last
/// flush (a bounded run's batches come closer together than this).
const IDLE_FLUSH: std::time::Duration = std::time::Duration::from_millis(10);

/// Bytes written between two of the syncer's `fdatasync`s (at most: a sync asked for while
/// one runs waits for it to end).
const SYNC_AHEAD_BYTES: usize = 8 << 20;

/// One batch's lines, encoded on the worker that produced the batch, on its way to the writer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EncodedLines {
    /// The bytes of its lines, newlines included.
    pub bytes: Vec<u8>,
    /// How many lines.
    pub count: u64,
}

/// Where the writes count: the sink's line counter and its flow.
pub struct WriteCounters {
    /// The job counter of written lines (rows or dead letters).
    pub lines: fn(&JobMetrics) -> &Counter,
    /// Job counters (delivery failures too).
    pub metrics: Arc<JobMetrics>,
    /// The sink instance's records in (counted as batches are handed over), out and bytes
    /// (counted by the thread as it writes them).
    pub flow: SinkFlow,
}

enum Command {
    Write(EncodedLines),
    /// Flush and fsync everything before; then everything through this mark is durable.
    Sync(u64),
}

/// What the thread has made durable.
#[derive(Default)]
struct Synced {
    /// Every batch through this mark is flushed and fsynced.
    through: u64,
    /// A write or sync failed: output is lost.
    failed: bool,
    /// The thread has ended (its queue closed); nothing more becomes durable.
    ended: bool,
}

#[derive(Default)]
struct Shared {
    synced: Mutex<Synced>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Synced> {
        self.synced.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The output file and its thread.
pub struct FileWriter {
    queue: Option<SyncSender<Command>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Batches handed to the thread so far (the current mark).
    sent: u64,
    /// The highest mark a sync was asked for.
    sync_asked: u64,
    metrics: Arc<JobMetrics>,
    /// Counts the lines handed over (the thread counts the ones it writes).
    flow: SinkFlow,
}

impl FileWriter {
    /// Starts the threads that write and sync `file` (at `path`, for messages), counting
    /// into `counters`; an output that cannot be fsynced (a pipe, socket or terminal) is
    /// only written and flushed.
    pub fn start(file: File, path: PathBuf, counters: WriteCounters) -> std::io::Result<Self> {
        let fsync = can_fsync(&file)?;
        if !fsync {
            let path = path.display();
            tracing::info!(%path, "the output is not a file: its lines are flushed, not fsynced");
        }
        Self::start_with(file, path, counters, fsync)
    }

    /// [`FileWriter::start`], fsyncing `file` or not as `fsync` says.
    fn start_with(
        file: File,
        path: PathBuf,
        counters: WriteCounters,
        fsync: bool,
    ) -> std::io::Result<Self> {
        let (queue, commands) = sync_channel(QUEUED_BATCHES);
        let shared = Arc::new(Shared::default());
        let (metrics, flow) = (counters.metrics.clone(), counters.flow.clone());
        let syncer = fsync
            .then(|| {
                let handle = file.try_clone()?;
                Syncer::start(handle, path.clone(), metrics.clone(), shared.clone())
            })
            .transpose()?;
        let thread = {
            let shared = shared.clone();
            let out = Output::of(file)?;
            std::thread::Builder::new()
                .name("weir:file-writer".to_owned())
                .spawn(move || write_loop(out, &path, &counters, &commands, &shared, syncer))?
        };
        Ok(FileWriter {
            queue: Some(queue),
            shared,
            thread: Some(thread),
            sent: 0,
            sync_asked: 0,
            metrics,
            flow,
        })
    }

    /// Hands one batch to the thread (blocking while its queue is full).
    fn send(&mut self, batch: EncodedLines) {
        let count = batch.count;
        self.flow.written(count);
        let sent = self
            .queue
            .as_ref()
            .is_some_and(|q| q.send(Command::Write(batch)).is_ok());
        if sent {
            self.sent += 1;
        } else {
            // The thread is gone (it cannot be, short of a panic): the lines are lost.
            JobMetrics::add(&self.metrics.delivery_failures, count);
            self.shared.lock().failed = true;
        }
    }

    /// Everything handed over so far, durable; whether it is (blocking).
    fn sync_all(&mut self) -> bool {
        let mark = self.sent;
        self.ask_sync(mark);
        let mut synced = self.shared.lock();
        while synced.through < mark && !synced.failed && !synced.ended {
            synced = self
                .shared
                .changed
                .wait(synced)
                .unwrap_or_else(PoisonError::into_inner);
        }
        !synced.failed && synced.through >= mark
    }

    fn ask_sync(&mut self, mark: u64) {
        if self.sync_asked >= mark {
            return;
        }
        self.sync_asked = mark;
        let asked = self
            .queue
            .as_ref()
            .is_some_and(|q| q.send(Command::Sync(mark)).is_ok());
        if !asked {
            self.shared.lock().failed = true;
        }
    }
}

impl SinkWriter<EncodedLines> for FileWriter {
    fn write(&mut self, batch: &mut Vec<EncodedLines>) {
        for lines in batch.drain(..) {
            self.send(lines);
        }
    }

    fn flush(&mut self, _end_of_input: bool) -> bool {
        self.sync_all()
    }

    /// A mark covering every batch handed over so far.
    fn mark(&mut self) -> u64 {
        self.sent
    }

    /// `Some(true)` once every batch through `mark` is fsynced, `Some(false)` if output was
    /// lost, `None` while the sync is on its way (asked for here when it was not yet).
    fn durable_through(&mut self, mark: u64) -> Option<bool> {
        {
            let synced = self.shared.lock();
            if synced.failed {
                return Some(false);
            }
            if synced.through >= mark {
                return Some(true);
            }
            if synced.ended {
                return Some(false);
            }
        }
        self.ask_sync(mark);
        None
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has written what is queued.
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write_loop(
    mut out: Output,
    path: &std::path::Path,
    counters: &WriteCounters,
    commands: &Receiver<Command>,
    shared: &Shared,
    syncer: Option<Syncer>,
) {
    let metrics = &counters.metrics;
    // Output lost: every later batch counts as lost too, unwritten (a gap in the file
    // would not be noticed by its reader).
    let mut failed = false;
    // Bytes written since the syncer was last asked for a sync.
    let mut unsynced = 0;
    // Lines written since the last flush: a queue idle for IDLE_FLUSH flushes them, so that
    // the file's readers (a live job's scores) see them without waiting for a mark. A flush
    // that fails fails the next write or mark.
    let mut unflushed = false;
    loop {
        let next = if unflushed {
            commands.recv_timeout(IDLE_FLUSH)
        } else {
            commands.recv().map_err(|_| RecvTimeoutError::Disconnected)
        };
        let command = match next {
            Ok(command) => command,
            Err(RecvTimeoutError::Timeout) => {
                let _ = out.flush();
                unflushed = false;
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match command {
            Command::Write(batch) if failed || shared.lock().failed => {
                failed = true;
                JobMetrics::add(&metrics.delivery_failures, batch.count);
            }
            Command::Write(batch) => match out.write_all(&batch.bytes) {
                Ok(()) => {
                    JobMetrics::add((counters.lines)(metrics), batch.count);
                    counters.flow.acknowledged(batch.count, batch.bytes.len());
                    unsynced += batch.bytes.len();
                    unflushed = true;
                    // Flushed first, so the sync covers these bytes; a flush that fails
                    // fails the next write or mark.
                    if let Some(syncer) = &syncer {
                        if unsynced >= SYNC_AHEAD_BYTES && out.flush().is_ok() {
                            syncer.ask();
                            unsynced = 0;
                            unflushed = false;
                        }
                    }
                }
                Err(error) => {
                    JobMetrics::add(&metrics.delivery_failures, batch.count);
                    tracing::error!(%error, path = %path.display(), "write failed");
                    failed = true;
                }
            },
            Command::Sync(mark) => {
                unflushed = false;
                if !failed {
                    let durable = out.flush().and_then(|()| match syncer {
                        Some(_) => out.file().sync_data(),
                        None => Ok(()),
                    });
                    if let Err(error) = durable {
                        JobMetrics::add(&metrics.delivery_failures, 1);
                        tracing::error!(%error, path = %path.display(), "flush failed");
                        failed = true;
                    }
                }
                let mut synced = shared.lock();
                synced.failed |= failed;
                synced.through = synced.through.max(mark);
                shared.changed.notify_all();
            }
        }
    }
    drop(syncer);
    shared.lock().ended = true;
    shared.changed.notify_all();
}

/// Where the writer thread's bytes go.
enum Output {
    /// A regular file: staged, and written around the page cache where its file system
    /// allows (`direct_file.rs`).
    File(DirectFile),
    /// Anything else: a pipe, socket, terminal or device.
    Other(BufWriter<File>),
}

impl Output {
    fn of(file: File) -> std::io::Result<Self> {
        Ok(if file.metadata()?.is_file() {
            Output::File(DirectFile::new(file)?)
        } else {
            Output::Other(BufWriter::new(file))
        })
    }

    fn file(&self) -> &File {
        match self {
            Output::File(out) => out.get_ref(),
            Output::Other(out) => out.get_ref(),
        }
    }
}

impl Write for Output {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::File(out) => out.write(bytes),
            Output::Other(out) => out.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::File(out) => out.flush(),
            Output::Other(out) => out.flush(),
        }
    }
}

/// Whether `file` takes an fsync: not a pipe, socket or character device (a terminal,
/// `/dev/null`), which refuse it.
fn can_fsync(file: &File) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = file.metadata()?.file_type();
        Ok(!(kind.is_fifo() || kind.is_socket() || kind.is_char_device()))
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok(true)
    }
}

/// The syncer: a thread that `fdatasync`s the output file when the writer asks, while the
/// writer goes on. Dropping it waits for the sync under way.
struct Syncer {
    asks: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the syncer of `file` (a handle of the writer's file, at `path`), which records
    /// a failed sync in `shared` and counts it in `metrics`.
    fn start(
        file: File,
        path: PathBuf,
        metrics: Arc<JobMetrics>,
        shared: Arc<Shared>,
    ) -> std::io::Result<Self> {
        // One sync waiting at most: asking while one waits adds nothing, since the waiting
        // one starts after everything written so far.
        let (asks, asked) = sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("weir:file-sync".to_owned())
            .spawn(move || {
                for () in asked {
                    if let Err(error) = file.sync_data() {
                        JobMetrics::add(&metrics.delivery_failures, 1);
                        tracing::error!(%error, path = %path.display(), "sync failed");
                        shared.lock().failed = true;
                        shared.changed.notify_all();
                        return;
                    }
                }
            })?;
        Ok(Syncer {
            asks: Some(asks),
            thread: Some(thread),
        })
    }

    /// Asks for a sync of what is written so far, without waiting for it.
    fn ask(&self) {
        if let Some(asks) = &self.asks {
            // Full: a sync is waiting to start and covers these bytes. Disconnected: the
            // syncer failed, and the writer's next batch or mark learns it.
            let _ = asks.try_send(());
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.asks = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{File, OpenOptions};
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::{EncodedLines, FileWriter, WriteCounters};
    use crate::epoch_sink::SinkWriter;
    use crate::metrics::{JobMetrics, Operator};

    fn counters(metrics: &Arc<JobMetrics>) -> WriteCounters {
        WriteCounters {
            lines: |m| &m.rows_written,
            metrics: metrics.clone(),
            flow: metrics.sink_flow(Operator::ScoreSink, 0),
        }
    }

    fn writer(file: File, metrics: &Arc<JobMetrics>) -> FileWriter {
        FileWriter::start(file, PathBuf::from("test"), counters(metrics)).expect("a writer thread")
    }

    /// A pipe as a `File`, and a thread that reads it to its end and returns what it read.
    #[cfg(unix)]
    fn drained_pipe() -> (File, std::thread::JoinHandle<Vec<u8>>) {
        use std::io::Read;
        let (mut reader, pipe) = std::io::pipe().expect("a pipe");
        let drain = std::thread::spawn(move || {
            let mut read = Vec::new();
            reader.read_to_end(&mut read).expect("the pipe read");
            read
        });
        (File::from(std::os::fd::OwnedFd::from(pipe)), drain)
    }

    fn lines(text: &str) -> Vec<EncodedLines> {
        vec![EncodedLines {
            bytes: text.as_bytes().to_vec(),
            count: text.matches('\n').count() as u64,
        }]
    }

    fn wait_durable(file: &mut FileWriter, mark: u64) -> bool {
        loop {
            if let Some(durable) = file.durable_through(mark) {
                return durable;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A writer of `out.jsonl` in a scratch directory of its own (`name`): the directory, the
    /// file's path, its counters and the writer.
    fn scratch_writer(name: &str) -> (PathBuf, PathBuf, Arc<JobMetrics>, FileWriter) {
        let dir = std::env::temp_dir().join(format!("weir-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let path = dir.join("out.jsonl");
        let metrics = Arc::new(JobMetrics::default());
        let file = writer(File::create(&path).expect("the output"), &metrics);
        (dir, path, metrics, file)
    }

    #[test]
    fn lines_reach_the_file_when_the_queue_goes_idle_without_a_mark() {
        // A live job's scores: written in a stage that only a flush hands to the file, so
        // without the idle flush a reader would not see them before the next checkpoint.
        let (dir, path, _metrics, mut file) = scratch_writer("idle-flush");
        file.write(&mut lines("first score\n"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut read = String::new();
        while read.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            read = std::fs::read_to_string(&path).expect("read back");
        }
        assert_eq!(read, "first score\n");
        drop(file);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn marks_become_durable_in_order_and_the_file_holds_every_batch() {
        let (dir, path, metrics, mut file) = scratch_writer("file-writer");
        assert_eq!(file.durable_through(0), Some(true), "nothing written yet");
        file.write(&mut lines("a\nb\n"));
        let first = file.mark();
        file.write(&mut lines("c\n"));
        assert!(wait_durable(&mut file, first));
        assert!(file.flush(true));
        let mark = file.mark();
        assert_eq!(file.durable_through(mark), Some(true));
        drop(file);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read back"),
            "a\nb\nc\n"
        );
        assert_eq!(metrics.rows_written.get(), 3);
        assert_eq!(metrics.delivery_failures.get(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Past [`super::SYNC_AHEAD_BYTES`] the thread flushes and asks the syncer for a sync
    /// between batches: the file still holds every batch in order, and the marks pass.
    #[test]
    fn writes_past_the_sync_ahead_interval_keep_every_byte_in_order() {
        let (dir, path, metrics, mut file) = scratch_writer("writeback");
        // Batches of 1 MiB plus a bit, so that the interval falls inside a batch.
        let batches: Vec<String> = (0..20)
            .map(|i| {
                format!(
                    "{}\n",
                    char::from(b'a' + i as u8).to_string().repeat(1 << 20)
                )
            })
            .collect();
        for batch in &batches {
            file.write(&mut lines(batch));
        }
        let mark = file.mark();
        assert!(wait_durable(&mut file, mark));
        drop(file);
        assert!(std::fs::read(&path).expect("read back") == batches.concat().into_bytes());
        assert_eq!(metrics.rows_written.get(), 20);
        assert_eq!(metrics.delivery_failures.get(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A sync the syncer asks for and that fails fails the writer too, though the failure is
    /// reported to the syncer's handle only (a pipe, made to be fsynced here, takes writes and
    /// refuses `fdatasync`): later marks fail, the failure is counted, and batches after it
    /// are counted as lost.
    #[cfg(unix)]
    #[test]
    fn a_failed_sync_ahead_fails_every_later_mark() {
        let (pipe, drain) = drained_pipe();
        let metrics = Arc::new(JobMetrics::default());
        let counters = counters(&metrics);
        let mut file = FileWriter::start_with(pipe, PathBuf::from("test"), counters, true)
            .expect("a writer thread");
        let batch = "x".repeat(super::SYNC_AHEAD_BYTES) + "\n";
        file.write(&mut lines(&batch));
        // The syncer's failure reaches the shared state while the writer waits for more.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while metrics.delivery_failures.get() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            metrics.delivery_failures.get(),
            1,
            "the failed sync counted"
        );
        file.write(&mut lines("after\n"));
        let mark = file.mark();
        assert!(!wait_durable(&mut file, mark), "a later mark fails");
        drop(file);
        drain.join().expect("the pipe drained");
        assert_eq!(
            metrics.rows_written.get(),
            1,
            "the batch before the failure"
        );
        assert_eq!(
            metrics.delivery_failures.get(),
            2,
            "and the line after it lost"
        );
    }

    /// An output that cannot be fsynced (`--output /dev/stdout` into a pipe) gets every line,
    /// past the sync-ahead interval too, and its marks pass once the lines are flushed.
    #[cfg(unix)]
    #[test]
    fn a_pipe_gets_every_line_and_its_marks_pass_unsynced() {
        let (pipe, drain) = drained_pipe();
        let metrics = Arc::new(JobMetrics::default());
        let mut file = writer(pipe, &metrics);
        let big = "x".repeat(super::SYNC_AHEAD_BYTES) + "\n";
        file.write(&mut lines(&big));
        let mark = file.mark();
        assert!(wait_durable(&mut file, mark), "a mark passes");
        file.write(&mut lines("after\n"));
        assert!(file.flush(true), "the end passes");
        drop(file);
        let read = drain.join().expect("the pipe drained");
        assert!(
            read == (big + "after\n").into_bytes(),
            "every byte, in order"
        );
        assert_eq!(metrics.rows_written.get(), 2);
        assert_eq!(metrics.delivery_failures.get(), 0);
    }

    /// `/dev/full` takes the open and refuses every write (ENOSPC): small batches fail at
    /// the sync (they were buffered), large ones at once; every later line is lost too.
    #[test]
    fn a_failed_write_fails_every_later_mark_and_counts_the_lines() {
        let full = OpenOptions::new().write(true).open("/dev/full");
        let Ok(full) = full else {
            return; // not a Linux host
        };
        let metrics = Arc::new(JobMetrics::default());
        let mut file = writer(full, &metrics);
        file.write(&mut lines("small\n"));
        let mark = file.mark();
        assert!(!wait_durable(&mut file, mark), "the sync fails");
        let big = "x".repeat(64 * 1024) + "\n";
        file.write(&mut lines(&big));
        file.write(&mut lines("after\n"));
        assert!(!file.flush(true));
        let mark = file.mark();
        assert_eq!(file.durable_through(mark), Some(false));
        drop(file);
        assert_eq!(
            metrics.rows_written.get(),
            1,
            "the buffered line counted as written"
        );
        assert!(
            metrics.delivery_failures.get() >= 2,
            "the lines after the failure are lost"
        );
    }
}
