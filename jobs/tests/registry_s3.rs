//! `[model] registry = "s3://bucket/prefix"` (issue #17 item 1) at the job's level: the job
//! file's form (used as given, nothing contacted until the run), and `weir run` of the
//! clickstream job over a JSON Lines file (no Kafka) with its model in a real S3-compatible
//! server (moto, reached through the `AWS_*` environment as the checkpoint store is): it
//! scores with the newest complete version and leaves no cache behind in its `TMPDIR`; with
//! the server unreachable the start fails naming the registry's URL. Hot reload, `CONTROL`
//! and failing syncs are tested on the score stage (operators/score/tests/registry_s3.rs).
//!
//! Run: `cargo test -p weir --test registry_s3` (needs moto in .cache/venv and ONNX Runtime,
//! both from scripts/setup.sh).

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use weir::config::JobFile;
use weir::gen::{Clickstream, ClickstreamConfig};
use weir_checkpoint::{S3Client, S3Options};
use weir_score::registry::ModelSource;
use weir_testkit::clickstream::{self, workspace_dir};
use weir_testkit::cluster::free_port;
use weir_testkit::files::Scratch;
use weir_testkit::job_toml::minimal_job;
use weir_testkit::registry_files::version_objects;
use weir_testkit::s3_server::{aws_env, aws_options, S3Server};

#[test]
fn an_s3_registry_is_used_as_given_and_checked_at_compile() -> Result<()> {
    let text = |registry: &str| {
        minimal_job()
            .model(&format!(
                "registry = \"{registry}\"\nname = \"pp\"\npoll = \"1s\""
            ))
            .text()
    };
    let mut job: JobFile = toml::from_str(&text("s3://models-bucket/prod/"))?;
    job.base_dir = "/jobs".into();
    let model = job.model.as_ref().context("[model]")?;
    let ModelSource::ObjectStore(remote) = model.source(&job.base_dir) else {
        anyhow::bail!("not an object store: {:?}", model.source(&job.base_dir));
    };
    assert_eq!(remote.url(), "s3://models-bucket/prod");
    assert_eq!(remote.name(), "pp");
    assert_eq!(remote.poll(), std::time::Duration::from_secs(1));
    assert_eq!(
        job.model_dir().as_deref(),
        Some(Path::new("s3://models-bucket/prod/pp"))
    );
    // Compiling contacts nothing (there is no server here).
    job.compile()?;

    let mut job: JobFile = toml::from_str(&text("s3:///prod"))?;
    job.base_dir = "/jobs".into();
    let error = format!("{:#}", job.compile().err().context("accepted s3:///prod")?);
    assert!(
        error.contains("[model] registry") && error.contains("names no bucket"),
        "{error}"
    );
    Ok(())
}

/// Uploads `tests/fixtures/model` as `<prefix>/pp/<version>/` (its manifest renamed to
/// model `pp`, version `version`).
fn upload(client: &S3Client, version: &str) -> Result<()> {
    let fixture = workspace_dir().join("tests/fixtures/model");
    for (key, bytes) in version_objects(&fixture, "pp", version)? {
        client.put(&key, bytes)?;
    }
    Ok(())
}

/// The clickstream job over `input` into `output`, its model in the registry at `url`.
fn job_text(input: &Path, output: &Path, url: &str) -> String {
    let text = clickstream::job_text();
    let model = format!(
        "path = \"{}\"",
        workspace_dir().join("tests/fixtures/model").display()
    );
    let source = "[source]\ntopic = \"clicks\"\nstart = \"earliest\"\nbounded = false\n";
    let sink = "[sink]\ntopic = \"scores\"\ndead_letter_topic = \"clicks-dlq\"\n";
    assert!(
        text.contains(&model) && text.contains(source) && text.contains(sink),
        "jobs/clickstream.toml changed its [model] path, [source] or [sink]"
    );
    text.replace(
        &model,
        &format!("registry = \"{url}\"\nname = \"pp\"\npoll = \"200ms\""),
    )
    .replace(
        source,
        &format!(
            "[source]\nkind = \"file\"\npaths = [\"{}\"]\n",
            input.display()
        ),
    )
    .replace(
        sink,
        &format!("[sink]\nkind = \"file\"\npath = \"{}\"\n", output.display()),
    )
}

/// `weir run <job> --bounded` with `env`, its temporary directory `tmp`.
fn run(job: &Path, env: Vec<(&'static str, String)>, tmp: &Path) -> Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(job)
        .arg("--bounded")
        .envs(env)
        .env("TMPDIR", tmp)
        .env("RUST_LOG", "info")
        .output()
        .context("cannot start the weir binary")
}

#[test]
fn a_job_scores_with_the_newest_version_of_an_s3_registry() -> Result<()> {
    let server = S3Server::shared();
    server.create_bucket("weir-registry-job");
    let url = "s3://weir-registry-job/models";
    let client = S3Client::open(
        url,
        &S3Options {
            config: aws_options(&server.address()),
            ..S3Options::default()
        },
        "test-s3",
    )?;
    upload(&client, "v1")?;
    upload(&client, "v2")?;
    // v3 is not complete: only its manifest.
    client.put(
        "pp/v3/manifest.json",
        fs::read(workspace_dir().join("tests/fixtures/model/manifest.json"))?,
    )?;

    let mut scratch = Scratch::kept_unless_passed("registry-s3");
    let dir = scratch.path().to_path_buf();
    let input = dir.join("clicks.jsonl");
    let mut lines = Vec::new();
    for event in Clickstream::new(ClickstreamConfig {
        seed: 17,
        events: 5_000,
        users: 50,
        ..ClickstreamConfig::default()
    })? {
        lines.extend_from_slice(&event.payload);
        lines.push(b'\n');
    }
    fs::write(&input, lines)?;
    let output = dir.join("scores.jsonl");
    let job = dir.join("job.toml");
    fs::write(&job, job_text(&input, &output, url))?;
    let tmp = dir.join("tmp");
    fs::create_dir(&tmp)?;

    let out = run(&job, aws_env(&server.address()), &tmp)?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "weir run failed:\n{log}");
    let text = fs::read_to_string(&output)?;
    let mut scored = 0;
    for line in text.lines() {
        let record: Value = serde_json::from_str(line)?;
        ensure!(
            record["model"]["name"] == "pp" && record["model"]["version"] == "v2",
            "scored by another version than the newest complete one: {line}"
        );
        scored += 1;
    }
    ensure!(scored > 0, "nothing scored:\n{log}");
    ensure!(
        log.contains("mirrored into a local cache") && log.contains(&*tmp.to_string_lossy()),
        "no cache made in TMPDIR {}:\n{log}",
        tmp.display()
    );
    // Only the mirror's cache: ONNX Runtime leaves a file of its own there.
    let left: Vec<_> = fs::read_dir(&tmp)?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("weir-registry-"))
        .collect();
    ensure!(
        left.is_empty(),
        "the registry cache was left in TMPDIR: {left:?}"
    );

    // Nothing answers at the endpoint: the start fails, naming the registry.
    let closed = format!("127.0.0.1:{}", free_port()?);
    let out = run(&job, aws_env(&closed), &tmp)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "started without its registry: {stderr}"
    );
    ensure!(
        stderr.contains(&format!("[model] registry = \"{url}\"")) && stderr.contains(url),
        "the error does not name the registry: {stderr}"
    );
    scratch.passed();
    Ok(())
}
