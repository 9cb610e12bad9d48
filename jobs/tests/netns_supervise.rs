//! Issue #17 acceptance: a job over two hosts that are Linux network namespaces (2 hosts × 2
//! workers, Timely's TCP between 127.200.0.1 and 127.200.0.2 over a veth pair), checkpoints
//! on an S3-compatible server (moto, in the root namespace, reached from each namespace
//! through `NetnsPair::forward`), each host's process under its own `weir supervise` (the
//! Kubernetes model). After the second checkpoint on S3:
//!
//! - host 1's `weir run` is SIGKILLed: host 0's process exits by itself naming its lost peer
//!   (status 4), both supervisors restart their processes;
//! - or host 1's link goes down (a partition: no process dies, no connection is closed):
//!   both processes exit 4 naming the other once their data stays unacknowledged for
//!   `cluster::PEER_SILENCE_LIMIT` (TCP_USER_TIMEOUT), and restart once the link is back.
//!
//! Either way both restarted processes restore the checkpoint from S3 and read only the rest
//! of the input, and the final output equals an uninterrupted run's (as sets: the restored
//! file sink appends, so rows after the checkpoint may appear twice).
//!
//! Input and output are JSON Lines files (namespaces share the filesystem), not Kafka: the
//! broker's advertised 127.0.0.1:9092 would need the same forward, which the test does not
//! need. Skips, loudly, only when not root (network namespaces need CAP_SYS_ADMIN); as root
//! any namespace failure fails it. The namespaces are deleted when a test ends, failed or
//! not.
//!
//! Run: `cargo test -p weir --test netns_supervise` (as root; needs iproute2, moto in
//! .cache/venv and the ONNX Runtime library, from scripts/setup.sh).

mod launch_support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use launch_support::{
    dead_letter_counts, input_files, job_file, log_tail, records_read_at_end, same_records,
    score_counts, second_commit, started_pid, wait_for,
};
use weir::cluster::PEER_SILENCE_LIMIT;
use weir_checkpoint::{ObjectStoreSnapshotStore, S3Options, SnapshotStore};
use weir_testkit::files::Scratch;
use weir_testkit::netns::{self, NetnsPair, ADDRESSES};
use weir_testkit::s3_server::{aws_env, aws_options, S3Server};

/// Records per input file: enough that the run goes on for seconds after its second
/// checkpoint (1 s apart), so the kill or the cut comes mid-input. At 100 000 a fast machine
/// finished 0.13 s after the second commit, before the link went down.
const EVENTS: u64 = 400_000;
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// Timely's port on each host (each namespace has all its ports free).
const CLUSTER_PORT: u16 = 2101;

/// `weir supervise -- weir run job --workers 2 --processes 2 --process <host> --hosts FILE`
/// on `host`, its output into `log`.
fn supervised(
    hosts: &NetnsPair,
    host: usize,
    job: &Path,
    hosts_file: &Path,
    s3: &str,
    log: &Path,
) -> Result<Child> {
    let out = fs::File::create(log)?;
    let weir = env!("CARGO_BIN_EXE_weir");
    let host_index = host.to_string();
    let hosts_path = hosts_file.display().to_string();
    let job = job.display().to_string();
    hosts
        .command(host, weir)
        .args([
            "supervise",
            "--backoff",
            "300ms",
            "--max-restarts",
            "3",
            "--",
        ])
        .args([weir, "run", &job, "--workers", "2", "--processes", "2"])
        .args(["--process", &host_index, "--hosts", &hosts_path])
        .envs(aws_env(s3))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("cannot start weir supervise in a namespace")
}

/// The skip check: true (after a loud message) when namespaces cannot be made here.
fn skipped(test: &str) -> bool {
    let Some(reason) = netns::unavailable() else {
        return false;
    };
    eprintln!(
        "\n!!!!! SKIPPED {test}: network namespaces are unavailable here ({reason}); this two-host test of issue #17 did NOT run !!!!!\n"
    );
    true
}

/// Two supervised hosts running the job, and what the test compares them with.
struct TwoHosts {
    /// Deleted (and what runs inside killed) on drop, also when the test fails.
    pair: NetnsPair,
    store: ObjectStoreSnapshotStore,
    /// moto, killed when the last test drops it.
    _server: Arc<S3Server>,
    reference: PathBuf,
    output: PathBuf,
    logs: [PathBuf; 2],
    supervisors: Vec<Child>,
}

impl TwoHosts {
    /// Writes the input, runs the uninterrupted reference (one process, 4 workers, root
    /// namespace, no checkpoints), then starts both hosts' supervisors with checkpoints in
    /// `bucket` on moto.
    fn start(dir: &Path, bucket: &str) -> Result<TwoHosts> {
        let inputs = input_files(dir, 2, EVENTS)?;
        let reference = dir.join("reference.jsonl");
        let job = job_file(dir, "reference", &inputs, &reference, None)?;
        let log = dir.join("reference.log");
        let mut run = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", &job.display().to_string(), "--workers", "4"])
            .stdout(fs::File::create(&log)?)
            .stderr(fs::File::create(dir.join("reference.err"))?)
            .spawn()?;
        let status = wait_for(&mut run, RUN_LIMIT, &log)?;
        ensure!(status.success(), "the reference run exited {status}");

        let server = S3Server::shared();
        server.create_bucket(bucket);
        let url = format!("s3://{bucket}/jobs/clickstream");
        let store = ObjectStoreSnapshotStore::open_with(
            &url,
            &S3Options {
                config: aws_options(&server.address()),
                ..S3Options::default()
            },
        )?;
        let pair = NetnsPair::create()?;
        let s3_port: u16 = server
            .address()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("moto's port")?;
        for host in 0..2 {
            pair.forward(host, s3_port)?;
        }
        let hosts_file = dir.join("hosts.txt");
        fs::write(
            &hosts_file,
            ADDRESSES.map(|a| format!("{a}:{CLUSTER_PORT}\n")).concat(),
        )?;
        let output = dir.join("supervised.jsonl");
        let job = job_file(dir, "supervised", &inputs, &output, Some((&url, "1s")))?;
        let logs = [dir.join("host0.log"), dir.join("host1.log")];
        let mut supervisors = Vec::new();
        for (host, log) in logs.iter().enumerate() {
            // Inside the namespace moto is at the same 127.0.0.1:<port> (forwarded).
            let s3 = server.address();
            supervisors.push(supervised(&pair, host, &job, &hosts_file, &s3, log)?);
        }
        Ok(TwoHosts {
            pair,
            store,
            _server: server,
            reference,
            output,
            logs,
            supervisors,
        })
    }

    /// Waits for the second valid checkpoint on S3.
    fn wait_for_checkpoints(&mut self) -> Result<()> {
        let started = Instant::now();
        while second_commit(&self.store as &dyn SnapshotStore).is_none() {
            for (supervisor, log) in self.supervisors.iter_mut().zip(&self.logs) {
                ensure!(
                    supervisor.try_wait()?.is_none(),
                    "a supervisor ended before the first checkpoints: {}",
                    log_tail(log)
                );
            }
            ensure!(
                started.elapsed() < RUN_LIMIT,
                "no checkpoint on S3: {}\n{}",
                log_tail(&self.logs[0]),
                log_tail(&self.logs[1])
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Waits until `host`'s log holds `text`.
    fn wait_for_log(&self, host: usize, text: &str, limit: Duration) -> Result<()> {
        let started = Instant::now();
        while !fs::read_to_string(&self.logs[host]).is_ok_and(|t| t.contains(text)) {
            ensure!(
                started.elapsed() < limit,
                "no `{text}` within {limit:?}: {}",
                log_tail(&self.logs[host])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Waits for both supervisors to exit 0; both restarted processes must have restored
    /// from S3 and read only part of the input, and the output must equal the reference's.
    fn finish_as_the_reference(&mut self) -> Result<()> {
        for (supervisor, log) in self.supervisors.iter_mut().zip(&self.logs) {
            let status = wait_for(supervisor, RUN_LIMIT, log)?;
            ensure!(
                status.success(),
                "a supervisor exited {status}: {}",
                log_tail(log)
            );
        }
        for log in &self.logs {
            let text = fs::read_to_string(log)?;
            ensure!(
                text.contains("restoring from checkpoint")
                    && text.contains("every process finished"),
                "a restarted process did not restore from S3 and finish: {}",
                log_tail(log)
            );
        }
        let read = records_read_at_end(&self.logs[0]).context("no cluster total")?;
        ensure!(
            read < 2 * EVENTS,
            "the restarted cluster read all {read} records: it did not resume mid-input"
        );
        same_records(
            "scores after the supervised restart",
            &score_counts(&self.reference)?,
            &score_counts(&self.output)?,
        )?;
        same_records(
            "dead letters after the supervised restart",
            &dead_letter_counts(&self.reference)?,
            &dead_letter_counts(&self.output)?,
        )
    }
}

#[test]
fn a_host_killed_mid_run_is_restarted_by_the_supervisors_from_the_s3_checkpoint() -> Result<()> {
    if skipped("netns_supervise (a host killed)") {
        return Ok(());
    }
    let mut scratch = Scratch::kept_unless_passed("netns-kill");
    let mut hosts = TwoHosts::start(scratch.path(), "weir-netns-kill")?;
    hosts.wait_for_checkpoints()?;
    let weir = env!("CARGO_BIN_EXE_weir");
    let victim = started_pid(&hosts.logs[1], weir, 0).context("host 1 logged no pid")?;
    let killed = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -KILL {victim} failed");
    hosts.finish_as_the_reference()?;
    let host0 = fs::read_to_string(&hosts.logs[0])?;
    let host1 = fs::read_to_string(&hosts.logs[1])?;
    ensure!(
        host0.contains(&format!(
            "lost peer process 1 at {}:{CLUSTER_PORT}",
            ADDRESSES[1]
        )) && host0.contains("failed (exit status 4); restart 1 of at most 3"),
        "host 0's process did not exit naming its lost peer and restart: {}",
        log_tail(&hosts.logs[0])
    );
    ensure!(
        host1.contains("failed (killed by signal 9 (SIGKILL)); restart 1 of at most 3"),
        "host 1's supervisor did not restart the killed process: {}",
        log_tail(&hosts.logs[1])
    );
    drop(hosts);
    scratch.passed();
    Ok(())
}

#[test]
fn hosts_cut_off_from_each_other_exit_on_the_silent_peer_and_restart_once_reconnected() -> Result<()>
{
    if skipped("netns_supervise (a partition)") {
        return Ok(());
    }
    let mut scratch = Scratch::kept_unless_passed("netns-partition");
    let mut hosts = TwoHosts::start(scratch.path(), "weir-netns-partition")?;
    hosts.wait_for_checkpoints()?;
    // No process dies and no connection is closed: only the link goes. Without the sockets'
    // TCP_USER_TIMEOUT, Linux retransmits for about 15 minutes (tcp_retries2) before the
    // connection breaks, far past `limit`. (The error then reported is the pending soft one,
    // e.g. `No route to host`, else ETIMEDOUT.)
    let cut = hosts.pair.set_link(1, false);
    let limit = PEER_SILENCE_LIMIT + Duration::from_secs(30);
    let lost = [
        format!("lost peer process 1 at {}:{CLUSTER_PORT}", ADDRESSES[1]),
        format!("lost peer process 0 at {}:{CLUSTER_PORT}", ADDRESSES[0]),
    ];
    let noticed = cut.map_err(anyhow::Error::from).and_then(|()| {
        hosts.wait_for_log(0, &lost[0], limit)?;
        hosts.wait_for_log(1, &lost[1], limit)
    });
    hosts.pair.set_link(1, true)?;
    noticed?;
    hosts.finish_as_the_reference()?;
    for host in 0..2 {
        let text = fs::read_to_string(&hosts.logs[host])?;
        ensure!(
            text.contains("failed (exit status 4); restart 1 of at most 3"),
            "host {host}'s process did not exit 4 and restart: {}",
            log_tail(&hosts.logs[host])
        );
    }
    drop(hosts);
    scratch.passed();
    Ok(())
}
