//! Issue 16's status page acceptance, in a real browser on the real broker: a job reads a
//! two-partition topic that a producer keeps writing to, with per-stage parallelism
//! source=2, window=2, score=1, sink=1 and checkpoints every 200 ms; once it has committed a
//! checkpoint and scored enough rows for a PSI, headless Chromium (Debian's `chromium`,
//! installed by `scripts/setup.sh`) loads `/` from the metrics port and the test reads the DOM
//! after the page's script has swapped the live part in at least once: every stage with its
//! parallelism and rates, both partitions with lag and watermark and the one holding the
//! watermark back marked, a committed checkpoint, the model version served with its
//! histogram against the baseline and its PSI.
//!
//! Without `chromium` on the PATH the test fails (it does not skip): CI installs it.
//! `WEIR_STATUS_PAGE_SCREENSHOT=docs/status-page.png` also saves a screenshot of the page
//! (how the README's was taken).

#[path = "../../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use serde_json::json;

use weir::pipeline::Mode;
use weir::run::{run_job_with, RunOptions};
use weir::JobFile;
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

const USERS: u64 = 30;
/// Event time between two events.
const EVENT_STEP_MS: i64 = 100;
/// Events per produced batch (20 s of event time).
const BATCH: usize = 200;

/// Events `from..from + n` of the run: users in turn, a mix of types and amounts.
fn events(from: usize, n: usize, t0: i64) -> Vec<(String, Vec<u8>)> {
    (from..from + n)
        .map(|i| {
            let user = format!("u{}", (i as u64 * 7919) % USERS);
            let kind = ["view", "view", "click", "purchase"][i % 4];
            let mut event = json!({
                "user": user,
                "ts": t0 + i as i64 * EVENT_STEP_MS,
                "type": kind,
                "dwell_ms": (i * 37) % 4_000,
            });
            if kind == "purchase" {
                event["amount"] = json!(((i * 13) % 300) as f64 + 0.5);
            }
            (user, event.to_string().into_bytes())
        })
        .collect()
}

/// Keeps producing batches to `topic` until `stop`, so the partitions stay active and the
/// rates are live.
fn keep_producing(topic: String, t0: i64, stop: Arc<AtomicBool>) -> JoinHandle<Result<()>> {
    std::thread::spawn(move || {
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            kafka::produce(&topic, &events(sent, BATCH, t0))?;
            sent += BATCH;
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(())
    })
}

/// `GET path`: the status code and the body.
fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    Ok(weir_testkit::scrape::get(addr, path)?)
}

/// Runs headless Chromium on `url` with `args` (a fresh profile in `profile`) and returns its
/// stdout.
fn chromium(profile: &Path, url: &str, args: &[&str]) -> Result<String> {
    let output = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => bail!(
            "`chromium` is not installed, and this test loads the status page in it: run \
             scripts/setup.sh (it installs Debian's chromium) or apt-get install chromium"
        ),
        Err(error) => return Err(error).context("cannot run chromium"),
    };
    ensure!(
        output.status.success(),
        "chromium {args:?} {url} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

/// The text of the element that starts at the first `marker` in `dom`, up to its `</end>`.
fn element<'a>(dom: &'a str, marker: &str, end: &str) -> Result<&'a str> {
    let start = dom
        .find(marker)
        .with_context(|| format!("no {marker} in the page:\n{dom}"))?;
    let rest = &dom[start..];
    let close = format!("</{end}>");
    let stop = rest
        .find(&close)
        .with_context(|| format!("{marker} is not closed by {close}"))?;
    Ok(&rest[..stop])
}

#[test]
fn the_status_page_shows_the_running_job_in_a_browser() -> Result<()> {
    let dir = scratch_dir("status-page");
    let input = kafka::unique_topic("status-page-in");
    kafka::create_topic(&input, 2)?;
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.name = "status-page".to_owned();
    job.kafka = kafka::properties();
    job.source.topic = input.clone();
    job.sink.topic = kafka::unique_topic("status-page-scores");
    job.sink.dead_letter_topic = kafka::unique_topic("status-page-dlq");
    kafka::create_topic(&job.sink.topic, 1)?;
    kafka::create_topic(&job.sink.dead_letter_topic, 1)?;
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/model");
    job.model = toml::from_str(&format!(
        "path = {model:?}\ndrift_alert = 0.2\ndrift_window = \"1h\"\ndrift_min_rows = 50"
    ))?;
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(
        &dir.join("ckpt"),
        "200ms",
    ))?);
    job.override_parallelism("source=2,window=2,score=1,sink=1")?;
    let compiled = job.compile()?;

    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let t0 = now - 3_600_000;
    let stop_producing = Arc::new(AtomicBool::new(false));
    let producer = keep_producing(input, t0, stop_producing.clone());
    let addr = weir_testkit::cluster::free_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let options = RunOptions {
        metrics_addr: Some(addr),
        ..RunOptions::default()
    };
    let flag = stop.clone();
    let run = std::thread::spawn(move || run_job_with(compiled, Mode::Score, flag, &options));

    let checked = (|| {
        // Wait (on the live part the page fetches) for a checkpoint and a PSI.
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            ensure!(!run.is_finished(), "the job stopped by itself");
            if let Ok((200, live)) = http_get(addr, "/status/live") {
                if live.contains("data-epoch=") && live.contains("class=\"psi\"") {
                    break;
                }
                ensure!(
                    Instant::now() < deadline,
                    "no checkpoint or PSI on the page in 45 s:\n{live}"
                );
            }
            ensure!(Instant::now() < deadline, "the status page never answered");
            std::thread::sleep(Duration::from_millis(200));
        }
        let url = format!("http://{addr}/");
        // Virtual time runs the page's 1 s refresh timer a few times before the DOM is dumped.
        let dom = chromium(
            &dir.join("chromium"),
            &url,
            &["--dump-dom", "--virtual-time-budget=3500"],
        )?;
        if let Ok(path) = std::env::var("WEIR_STATUS_PAGE_SCREENSHOT") {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
            chromium(
                &dir.join("chromium"),
                &url,
                &[
                    &format!("--screenshot={}", path.display()),
                    "--window-size=1200,1150",
                    "--virtual-time-budget=2500",
                ],
            )?;
        }
        check_page(&dom)
    })();
    stop.store(true, Ordering::SeqCst);
    stop_producing.store(true, Ordering::SeqCst);
    let finished = run.join().map_err(|_| anyhow::anyhow!("the job panicked"));
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("the producer panicked"))??;
    checked?;
    finished?.map(|_| ())
}

/// What the page must show once its script has refreshed it.
fn check_page(dom: &str) -> Result<()> {
    let body = element(dom, "<body", "header")?;
    let refreshes: u32 = body
        .split_once("data-refreshes=\"")
        .and_then(|(_, rest)| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .context("no data-refreshes on <body>")?;
    ensure!(
        refreshes >= 1,
        "the page's script never swapped the live part in:\n{dom}"
    );
    ensure!(
        dom.contains("<footer id=\"refresh-state\" class=\"\">"),
        "a refresh failed:\n{dom}"
    );
    for (stage, parallelism) in [
        ("source", 2),
        ("window", 2),
        ("score", 1),
        ("sink", 1),
        ("dead-letter sink", 1),
    ] {
        let stage = element(dom, &format!("data-stage=\"{stage}\""), "li")?;
        ensure!(
            stage.contains(&format!("parallelism {parallelism}<")),
            "{stage}"
        );
        ensure!(
            stage.contains(" in/s · ") && stage.contains(" out/s"),
            "{stage}"
        );
    }
    for stage in ["source", "score", "sink"] {
        let stage = element(dom, &format!("data-stage=\"{stage}\""), "li")?;
        ensure!(
            !stage.contains(">0 in · 0 out<"),
            "nothing counted: {stage}"
        );
    }
    let partitions = element(dom, "<section id=\"partitions\"", "section")?;
    for partition in ["0", "1"] {
        let row = element(partitions, &format!("data-partition=\"{partition}\""), "tr")?;
        // Watermarks are an hour behind the clock, in RFC 3339.
        ensure!(row.contains("Z</td>") && row.contains(" s</td>"), "{row}");
    }
    let holding = partitions.matches("class=\"holding\"").count();
    ensure!(
        holding == 1 && partitions.contains("holding the watermark back"),
        "{holding} partitions marked as holding the watermark back:\n{partitions}"
    );
    let checkpoints = element(dom, "<section id=\"checkpoints\"", "section")?;
    let commit = element(checkpoints, "data-epoch=", "tr")?;
    ensure!(
        commit.contains(" ms</td>") && (commit.contains(" B</td>") || commit.contains("iB</td>")),
        "{commit}"
    );
    let model = element(
        dom,
        "data-model=\"purchase_propensity\" data-version=\"tiny-1\"",
        "article",
    )?;
    ensure!(model.contains("served by instance 0 (primary)"), "{model}");
    let psi: f64 = element(model, "class=\"psi\">", "b")?
        .trim_start_matches("class=\"psi\">")
        .parse()
        .context("the PSI is not a number")?;
    ensure!(psi.is_finite() && psi >= 0.0, "PSI {psi}");
    ensure!(model.contains("(alert over 0.2)"), "{model}");
    ensure!(
        model.matches("class=\"bar live\"").count() == 10
            && model.matches("class=\"bar baseline\"").count() == 10,
        "the histogram does not have the baseline's 10 bins:\n{model}"
    );
    Ok(())
}
