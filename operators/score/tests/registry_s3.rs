//! A model registry on S3 (`ModelSource::ObjectStore`, issue #17 item 1) through the score
//! operator, on a real S3-compatible server (moto, `weir_testkit::s3_server`):
//! - it starts on the newest complete version, hot-reloads a version uploaded while it runs,
//!   obeys a `CONTROL` pin written to the bucket, and removes its local cache when dropped;
//! - a version with only its manifest is not served (and is, once its model arrives); a
//!   registry with no complete version fails the start naming its URL;
//! - while the server answers every request with 503 (`FlakyProxy::set_down`), syncs fail
//!   and are counted and the job keeps scoring with what it has; the first good sync after
//!   brings the version uploaded meanwhile.
//!
//! Polls every 50 ms; every wait is "until it happened", bounded by a tick budget that only
//! fails a broken build. Run: `cargo test -p weir-score --test registry_s3` (needs moto in
//! .cache/venv and ONNX Runtime, both from scripts/setup.sh).

mod support;

use std::path::Path;
use std::time::Duration;

use weir_checkpoint::{S3Client, S3Options};
use weir_score::counters::ScoreCounters;
use weir_score::inference_thread::InferenceThread;
use weir_score::registry::{ModelSource, RemoteRegistry};
use weir_score::registry_mirror::SYNC_RETRIES;
use weir_testkit::registry_files::version_objects;
use weir_testkit::s3_server::{aws_options, FlakyProxy, S3Server};

use support::{config, step, with_score_dataflow, Driver};

const POLL: Duration = Duration::from_millis(50);

/// `s3://<bucket>/models` on a fresh bucket, and a client to publish into it.
fn bucket(server: &S3Server, bucket: &str) -> (String, S3Client) {
    server.create_bucket(bucket);
    let url = format!("s3://{bucket}/models");
    let options = S3Options {
        config: aws_options(&server.address()),
        ..S3Options::default()
    };
    let client = S3Client::open(&url, &options, "test-s3").expect("open the bucket");
    (url, client)
}

/// The registry at `url`, model `pp`, reached at `address` (moto's or a proxy's).
fn remote(url: &str, address: &str) -> RemoteRegistry {
    let options = S3Options {
        config: aws_options(address),
        retries: SYNC_RETRIES,
    };
    RemoteRegistry::with_options(url, "pp", POLL, options)
}

/// Uploads the `logreg` fixture as `pp/<version>/` with its manifest's version replaced:
/// `model.onnx` unless `manifest_only`, then `manifest.json`.
fn upload(client: &S3Client, version: &str, manifest_only: bool) -> anyhow::Result<()> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logreg");
    let [model, manifest] = version_objects(&fixture, "pp", version)?;
    for (key, bytes) in [(!manifest_only).then_some(model), Some(manifest)]
        .into_iter()
        .flatten()
    {
        client.put(&key, bytes)?;
    }
    Ok(())
}

/// The version of the last score so far.
fn last_version(driver: &Driver) -> Option<String> {
    driver
        .scores()
        .last()
        .map(|(_, s)| s.model.version.to_string())
}

/// Steps until the last score is of `version` (within 60 s: a sync after a failed one may
/// first wait out its retries' backoff); the tick it was.
fn until_serving(driver: &mut Driver, version: &str) -> anyhow::Result<u64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let tick = step(driver);
        if last_version(driver).as_deref() == Some(version) {
            return Ok(tick);
        }
    }
    anyhow::bail!(
        "never served {version} in 60 s; still {:?}",
        last_version(driver)
    )
}

/// The versions of `scores` in the order they served, each run once.
fn runs(scores: &[(u64, weir_features::row::ScoredRow)]) -> Vec<String> {
    let mut runs: Vec<String> = Vec::new();
    for (_, s) in scores {
        if runs.last().map(String::as_str) != Some(&*s.model.version) {
            runs.push(s.model.version.to_string());
        }
    }
    runs
}

#[test]
fn starts_on_the_newest_hot_reloads_an_upload_and_obeys_a_control_pin() -> anyhow::Result<()> {
    let server = S3Server::shared();
    let (url, client) = bucket(&server, "registry-reload");
    upload(&client, "v1", false)?;
    upload(&client, "v2", false)?;
    let remote = remote(&url, &server.address());
    let cfg = config(ModelSource::ObjectStore(remote.clone()), None);
    let counters = cfg.counters.clone();
    let (result, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<()> {
        for _ in 0..5 {
            step(driver);
        }
        anyhow::ensure!(
            last_version(driver).as_deref() == Some("v2"),
            "started on {:?}, not the newest",
            last_version(driver)
        );
        upload(&client, "v3", false)?;
        until_serving(driver, "v3")?;
        client.put("pp/CONTROL", b"pin v1 # v3 misbehaves\n".to_vec())?;
        until_serving(driver, "v1")?;
        Ok(())
    })?;
    result?;
    assert_eq!(runs(&out.scores), ["v2", "v3", "v1"]);
    assert_eq!(ScoreCounters::get(&counters.reloads), 2);
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 0);
    assert_eq!(ScoreCounters::get(&counters.registry_sync_failures), 0);
    // The cache lives as long as the registry's last clone.
    let cache = remote.cache_root().expect("the mirror started");
    assert!(cache.join("pp/v3/model.onnx").is_file());
    drop(remote);
    assert!(!cache.exists(), "{} was left behind", cache.display());
    Ok(())
}

#[test]
fn a_version_with_only_its_manifest_is_not_served() -> anyhow::Result<()> {
    let server = S3Server::shared();
    let (url, client) = bucket(&server, "registry-incomplete");
    // Nothing complete yet: the start fails, naming the registry.
    upload(&client, "v1", true)?;
    let cfg = config(
        ModelSource::ObjectStore(remote(&url, &server.address())),
        None,
    );
    let error = match InferenceThread::spawn(cfg.inference_setup(0), 0, 4, || {}) {
        Ok(thread) => anyhow::bail!("started on {:?}", thread.initial_tag()),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains(&format!("{url}/pp")) && error.contains("no complete version"),
        "{error}"
    );

    upload(&client, "v1", false)?;
    upload(&client, "v2", true)?;
    let cfg = config(
        ModelSource::ObjectStore(remote(&url, &server.address())),
        None,
    );
    let counters = cfg.counters.clone();
    let (result, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<()> {
        // Many polls with v2 incomplete: v1 serves throughout.
        for _ in 0..40 {
            step(driver);
            std::thread::sleep(Duration::from_millis(5));
        }
        anyhow::ensure!(
            last_version(driver).as_deref() == Some("v1"),
            "served {:?} with v2 incomplete",
            last_version(driver)
        );
        // Its model arrives: now it is served.
        client.put(
            "pp/v2/model.onnx",
            std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logreg/model.onnx"),
            )?,
        )?;
        until_serving(driver, "v2")?;
        Ok(())
    })?;
    result?;
    assert_eq!(runs(&out.scores), ["v1", "v2"]);
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 0);
    Ok(())
}

#[test]
fn failed_syncs_are_counted_and_scoring_goes_on_until_a_good_one() -> anyhow::Result<()> {
    let server = S3Server::shared();
    let (url, client) = bucket(&server, "registry-flaky");
    upload(&client, "v1", false)?;
    let proxy = FlakyProxy::start(&server.address(), 0, 0x5eed);
    let cfg = config(
        ModelSource::ObjectStore(remote(&url, &proxy.address())),
        None,
    );
    let counters = cfg.counters.clone();
    let failures = move || ScoreCounters::get(&counters.registry_sync_failures);
    let (result, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<()> {
        until_serving(driver, "v1")?;
        proxy.set_down(true);
        // Published while the registry cannot be read (straight to the server).
        upload(&client, "v2", false)?;
        // A failed sync spends its retries' backoff (about 2 s): wait on the clock, not on a
        // number of ticks, which a fast machine runs through before the third failure.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while failures() < 3 {
            step(driver);
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "syncs through a down server did not fail 3 times in 60 s ({} did)",
                failures()
            );
        }
        anyhow::ensure!(proxy.failed() > 0, "the proxy refused nothing");
        anyhow::ensure!(
            last_version(driver).as_deref() == Some("v1"),
            "served {:?} while the registry was down",
            last_version(driver)
        );
        let scored = driver.scored();
        step(driver);
        anyhow::ensure!(
            driver.scored() > scored,
            "scoring stopped while syncs failed"
        );
        proxy.set_down(false);
        until_serving(driver, "v2")?;
        Ok(())
    })?;
    result?;
    assert_eq!(runs(&out.scores), ["v1", "v2"]);
    Ok(())
}
