//! How the processes of a cluster start and stop together (2 `weir run` processes over TCP on
//! localhost):
//! - a run whose processes would start from different checkpoints refuses to run
//!   (`start_agreement`): here process 0 sees a committed checkpoint in its directory and
//!   process 1 sees none in its own (a checkpoint directory local to each host instead of one
//!   shared mount). Both exit with status 2 and name what each would have done; without the
//!   check, process 0 restores and process 1 starts fresh, and both finish "successfully";
//! - a run whose processes run other builds of the binary, other copies of the job file or
//!   other flags refuses to run too, and names each difference with every process's value;
//! - a process killed mid-run takes the other down, with status 4 naming it
//!   (`cluster::PEER_LOST_EXIT`), instead of leaving it waiting for the dead one's progress
//!   forever (a supervisor then restarts the whole job);
//! - a process whose peer never starts gives up after `[runtime] connect_timeout` (exit 2)
//!   instead of waiting in Timely's connect forever;
//! - a run that finishes prints, in every process, the same cluster totals: what every
//!   process's instances read, scored and delivered (`cluster_totals`), which match the
//!   score files of both processes together; a bounded run stopped by a signal in one
//!   process exits 1 in every process (its output is incomplete everywhere).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use weir::checkpointing::topology_hash;
use weir::config::JobFile;
use weir_checkpoint::{LocalDirStore, Manifest, SnapshotStore};
use weir_features::vocab::Epoch;
use weir_testkit::clickstream;
use weir_testkit::cluster::hosts_file;
use weir_testkit::files::{write_lines, Scratch};

const EPOCH: u64 = 17_000_000_000;

/// One process of the 2-process cluster, reading `input` (in `scratch`), with checkpoints in
/// `checkpoints` if given.
fn spawn(
    scratch: &Path,
    process: usize,
    hosts: &Path,
    input: &str,
    checkpoints: Option<&Path>,
) -> Result<Child> {
    spawn_job(
        &clickstream::job_path(),
        scratch,
        process,
        hosts,
        input,
        checkpoints,
    )
}

/// [`spawn`] for another job file.
fn spawn_job(
    job: &Path,
    scratch: &Path,
    process: usize,
    hosts: &Path,
    input: &str,
    checkpoints: Option<&Path>,
) -> Result<Child> {
    let this_binary = Variant {
        binary: Path::new(env!("CARGO_BIN_EXE_weir")),
        flags: &[],
    };
    spawn_variant(
        job,
        scratch,
        process,
        hosts,
        input,
        checkpoints,
        &this_binary,
    )
}

/// Another binary or more `weir run` flags for one process.
struct Variant<'a> {
    binary: &'a Path,
    flags: &'a [&'a str],
}

/// [`spawn_job`] with `variant`.
fn spawn_variant(
    job: &Path,
    scratch: &Path,
    process: usize,
    hosts: &Path,
    input: &str,
    checkpoints: Option<&Path>,
    variant: &Variant,
) -> Result<Child> {
    let log = fs::File::create(scratch.join(format!("process-{process}.log")))?;
    let mut command = Command::new(variant.binary);
    command
        .arg("run")
        .arg(job)
        .arg("--bounded")
        .args(["--workers", "1", "--processes", "2"])
        .args(["--process", &process.to_string()])
        .arg("--hosts")
        .arg(hosts)
        .arg("--input-file")
        .arg(scratch.join(input))
        .arg("--output-file")
        .arg(scratch.join(format!("scores-{process}.jsonl")))
        .arg("--dead-letter-file")
        .arg(scratch.join(format!("dead-{process}.jsonl")))
        .args(variant.flags);
    if let Some(dir) = checkpoints {
        command.arg("--checkpoint-dir").arg(dir);
    }
    command
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start the weir binary")
}

/// A fresh scratch directory for `label`, removed on drop, holding `lines` clickstream events
/// as JSON Lines in `events.jsonl` and the 2-process cluster's hosts file (returned).
fn with_events(label: &str, lines: i64) -> Result<(Scratch, PathBuf)> {
    let scratch = Scratch::new(&format!("cluster-{label}"));
    let events = (0..lines).map(|i| {
        format!(
            "{{\"user\":\"u{}\",\"ts\":{},\"type\":\"view\",\"dwell_ms\":5.0}}",
            i % 997,
            1_700_000_000_000_i64 + i * 10
        )
    });
    write_lines(&scratch.path().join("events.jsonl"), events)?;
    let hosts = hosts_file(scratch.path(), 2)?;
    Ok((scratch, hosts))
}

/// Waits until process 0 (`children[0]`) has written scores: the cluster is connected and
/// running. Kills every child and fails if process 0 exits first or 60 s pass.
fn wait_for_first_scores(scratch: &Path, children: &mut [&mut Child]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let scores = scratch.join("scores-0.jsonl");
    while fs::metadata(&scores).map_or(0, |m| m.len()) == 0 {
        if Instant::now() > deadline || children[0].try_wait()?.is_some() {
            children.iter_mut().for_each(|c| drop(c.kill()));
            bail!(
                "process 0 wrote no scores while both ran:\n{}",
                fs::read_to_string(scratch.join("process-0.log"))?
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn wait(child: &mut Child, deadline: Instant) -> Result<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("a cluster process did not exit within its deadline");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for process `process` (`child`) to exit, as [`wait`], and reads its log.
fn finish(
    scratch: &Path,
    process: usize,
    child: &mut Child,
    deadline: Instant,
) -> Result<(ExitStatus, String)> {
    let status = wait(child, deadline)?;
    let log = fs::read_to_string(scratch.join(format!("process-{process}.log")))?;
    Ok((status, log))
}

/// Waits for every process of `children` to exit (within 120 s in all) with status `code` and a
/// log holding each of `expected`; returns their logs.
fn every_exits_with(
    scratch: &Path,
    children: &mut [Child],
    code: i32,
    expected: &[&str],
) -> Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut logs = Vec::new();
    for (process, child) in children.iter_mut().enumerate() {
        let (status, log) = finish(scratch, process, child, deadline)?;
        ensure!(
            status.code() == Some(code),
            "process {process} exited with {status}, not {code}:\n{log}"
        );
        for expected in expected {
            ensure!(
                log.contains(expected),
                "process {process}'s log lacks `{expected}`:\n{log}"
            );
        }
        logs.push(log);
    }
    Ok(logs)
}

#[test]
fn processes_that_would_restore_different_checkpoints_refuse_to_run() -> Result<()> {
    let (scratch, hosts) = with_events("start", 40)?;

    // Process 0's directory holds a committed (empty) checkpoint of this very job.
    // The job as the processes run it: reading the file (a file source's topology includes its
    // ranges).
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.use_input_files(vec![scratch.path().join("events.jsonl")]);
    let (with_checkpoint, empty) = (scratch.path().join("ckpt-0"), scratch.path().join("ckpt-1"));
    let mut manifest = Manifest::new(Epoch(EPOCH), job.runtime.key_groups);
    manifest.topology_hash = topology_hash(&job);
    manifest.tick_ms = job.runtime.tick as u64;
    LocalDirStore::open(&with_checkpoint)?.commit_manifest(&manifest)?;

    let mut children = [
        spawn(
            scratch.path(),
            0,
            &hosts,
            "events.jsonl",
            Some(&with_checkpoint),
        )?,
        spawn(scratch.path(), 1, &hosts, "events.jsonl", Some(&empty))?,
    ];
    let restores = format!(
        "process 0 (1 workers, topology {:016x}) restores checkpoint {EPOCH}",
        manifest.topology_hash
    );
    let expected = [
        "would start from different points",
        &restores,
        "process 1 (1 workers",
        "starts fresh (no checkpoint chosen)",
    ];
    every_exits_with(scratch.path(), &mut children, 2, &expected)?;
    // Neither process ran the job.
    for process in 0..2 {
        let scores = scratch.path().join(format!("scores-{process}.jsonl"));
        let written = fs::read_to_string(&scores).unwrap_or_default();
        ensure!(
            written.is_empty(),
            "process {process} wrote scores:\n{written}"
        );
    }
    Ok(())
}

#[test]
fn a_process_killed_mid_run_stops_the_other() -> Result<()> {
    // Enough lines that the run lasts several seconds in a debug build (~50 k records/s).
    let (scratch, hosts) = with_events("kill", 600_000)?;
    let mut survivor = spawn(scratch.path(), 0, &hosts, "events.jsonl", None)?;
    let mut victim = spawn(scratch.path(), 1, &hosts, "events.jsonl", None)?;
    let log = scratch.path().join("process-0.log");
    // Kill process 1 once process 0 has produced output (the cluster is connected and running).
    wait_for_first_scores(scratch.path(), &mut [&mut survivor, &mut victim])?;
    victim.kill()?;
    victim.wait()?;
    let status = wait(&mut survivor, Instant::now() + Duration::from_secs(30))?;
    let text = fs::read_to_string(&log)?;
    ensure!(
        status.code() == Some(weir::cluster::PEER_LOST_EXIT),
        "process 0 exited {status}, not {} (lost peer), after its peer was killed:\n{text}",
        weir::cluster::PEER_LOST_EXIT
    );
    ensure!(
        !text.contains("events in:"),
        "process 0 printed a summary as if the run had finished:\n{text}"
    );
    ensure!(
        text.contains("lost peer process 1 at 127.0.0.1:"),
        "process 0's log does not name the other process:\n{text}"
    );
    Ok(())
}

#[test]
fn processes_with_another_binary_job_file_or_flags_refuse_to_run_and_name_each_difference(
) -> Result<()> {
    let (scratch, hosts) = with_events("disagree", 40)?;
    // The same job, but process 1's copy of the file was edited (a comment: the topology is
    // the same, the file is not), it was given other per-stage parallelism, and it runs
    // another build of the binary (this one with bytes appended, which still runs).
    let (job_0, job_1) = (
        scratch.path().join("job-0.toml"),
        scratch.path().join("job-1.toml"),
    );
    fs::write(&job_0, clickstream::job_text())?;
    fs::write(
        &job_1,
        format!("{}\n# edited on host 1\n", clickstream::job_text()),
    )?;
    let other_build = scratch.path().join("weir-other-build");
    let mut bytes = fs::read(env!("CARGO_BIN_EXE_weir"))?;
    bytes.extend_from_slice(b"another build");
    fs::write(&other_build, bytes)?;
    fs::set_permissions(
        &other_build,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let variant = Variant {
        binary: &other_build,
        flags: &["--parallelism", "source=1"],
    };
    let mut children = [
        spawn_job(&job_0, scratch.path(), 0, &hosts, "events.jsonl", None)?,
        spawn_variant(
            &job_1,
            scratch.path(),
            1,
            &hosts,
            "events.jsonl",
            None,
            &variant,
        )?,
    ];
    let expected = [
        "they differ in job file: process 0 has content hash ",
        "they differ in weir binary: process 0 has weir 0.1.0, executable xxh3 ",
        "they differ in parallelism: process 0 has source=2,window=2,score=2,sink=2, process 1 has source=1,window=2,score=2,sink=2",
        "every process must run the same binary, job file and flags",
    ];
    let logs = every_exits_with(scratch.path(), &mut children, 2, &expected)?;
    for (process, log) in logs.iter().enumerate() {
        // The same topology and key groups: not named as differences.
        for unexpected in ["differ in topology", "differ in key groups"] {
            ensure!(
                !log.contains(unexpected),
                "process {process}'s log names `{unexpected}`:\n{log}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_process_whose_peer_never_starts_gives_up() -> Result<()> {
    let (scratch, hosts) = with_events("alone", 40)?;
    let text =
        clickstream::job_text().replace("[runtime]\n", "[runtime]\nconnect_timeout = \"1s\"\n");
    ensure!(text.contains("connect_timeout"), "job template changed");
    let job = scratch.path().join("job.toml");
    fs::write(&job, text)?;
    // Only process 1 starts: it keeps trying to reach process 0, which never comes up.
    let mut alone = spawn_job(&job, scratch.path(), 1, &hosts, "events.jsonl", None)?;
    let status = wait(&mut alone, Instant::now() + Duration::from_secs(60))?;
    let log = fs::read_to_string(scratch.path().join("process-1.log"))?;
    ensure!(
        status.code() == Some(2),
        "the process exited with {status}, not 2:\n{log}"
    );
    ensure!(
        log.contains("did not all connect within [runtime] connect_timeout = 1000 ms"),
        "the log does not say why:\n{log}"
    );
    Ok(())
}

/// The number after `label` in `line` (`"… 12 windows scored …"` with label `" windows scored"`).
fn count_before(line: &str, label: &str) -> Result<u64> {
    let head = line
        .split(label)
        .next()
        .filter(|head| head.len() < line.len())
        .with_context(|| format!("`{label}` not in `{line}`"))?;
    let number = head.rsplit([' ', '(']).next().unwrap_or_default();
    number
        .parse()
        .with_context(|| format!("no count before `{label}` in `{line}`"))
}

#[test]
fn a_finished_run_prints_the_cluster_totals_in_every_process() -> Result<()> {
    let (scratch, hosts) = with_events("totals", 3_000)?;
    let mut children = [
        spawn(scratch.path(), 0, &hosts, "events.jsonl", None)?,
        spawn(scratch.path(), 1, &hosts, "events.jsonl", None)?,
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut totals = Vec::new();
    for (process, child) in children.iter_mut().enumerate() {
        let (status, log) = finish(scratch.path(), process, child, deadline)?;
        ensure!(
            status.success(),
            "process {process} exited with {status}:\n{log}"
        );
        ensure!(
            log.contains(&format!(
                "cluster:         2 processes; the lines above count process {process}'s"
            )),
            "process {process}'s summary is not labelled as its own:\n{log}"
        );
        let total = log
            .lines()
            .find(|line| line.starts_with("cluster total:"))
            .with_context(|| format!("process {process} printed no cluster total:\n{log}"))?;
        totals.push(total.to_owned());
    }
    ensure!(
        totals[0] == totals[1],
        "the processes disagree on the totals:\n{}\n{}",
        totals[0],
        totals[1]
    );
    let written: u64 = (0..2)
        .map(|process| {
            let scores = scratch.path().join(format!("scores-{process}.jsonl"));
            fs::read_to_string(scores).map_or(0, |text| text.lines().count() as u64)
        })
        .sum();
    let line = &totals[0];
    ensure!(written > 0, "no scores written");
    ensure!(
        count_before(line, " windows scored")? == written
            && count_before(line, " delivered)")? == written,
        "the totals do not match the {written} score records written: {line}"
    );
    ensure!(
        count_before(line, " events in")? == 3_000,
        "not every event counted once: {line}"
    );
    Ok(())
}

#[test]
fn a_bounded_run_stopped_in_one_process_fails_in_every_process() -> Result<()> {
    // Long enough that process 0 is still reading when it is stopped (see the kill test).
    let (scratch, hosts) = with_events("stopped", 600_000)?;
    let mut children = [
        spawn(scratch.path(), 0, &hosts, "events.jsonl", None)?,
        spawn(scratch.path(), 1, &hosts, "events.jsonl", None)?,
    ];
    let [first, second] = &mut children;
    wait_for_first_scores(scratch.path(), &mut [first, second])?;
    // Only process 0 is told to stop: its source stops, process 1's reads to its end.
    let signal = Command::new("kill")
        .args(["-TERM", &children[0].id().to_string()])
        .status()?;
    ensure!(signal.success(), "kill -TERM failed");
    let expected = [
        "source instances stopped before the end of their input",
        "stopped by a signal before the end of the bounded input",
    ];
    every_exits_with(scratch.path(), &mut children, 1, &expected)?;
    Ok(())
}
