//! `deploy/grafana/weir.json` against a real scrape (issue #16 item 3): every metric the
//! dashboard's queries use — each panel's targets and each query variable — is a sample name
//! of the `/metrics` text of a job running on the real broker, and each query treats it as its
//! type requires: a counter's (or histogram's) samples only under `rate(`/`increase(`, a gauge
//! never there, `_bucket` only in `histogram_quantile(…, sum by (le …) (rate(…)))`. Every panel
//! and target reads the `${datasource}` variable.
//!
//! The job is the clickstream job with the model that fails on huge amounts
//! (`tests/fixtures/failing_model`, its manifest has a baseline), drift and error-rate alerts
//! on, checkpoints every 200 ms, two input partitions, a malformed record and a window the
//! model fails on: every family the dashboard shows has samples. The checker itself is tested
//! on a planted wrong name and misused types.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use support::kafka::{create_topic, produce, produce_to, unique_topic};
use weir::pipeline::Mode;
use weir::run::{run_job_with, RunOptions};
use weir::JobFile;
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};
use weir_testkit::scrape::{self, Exposition};

const USERS: usize = 20;
const EVENTS: usize = 1_200;
/// Event-time gap between events: 5 minutes of input, about 100 one-minute user windows.
const GAP_MS: i64 = 250;
const WINDOW_MS: i64 = 60_000;

fn dashboard() -> Result<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/weir.json");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// Every PromQL expression of the dashboard, with where it is: each target's `expr` of each
/// panel (a collapsed row's panels too) and each query variable's query.
fn expressions(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, found: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("(untitled)");
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or_default();
                let at = format!("panel {title:?} target {}", target["refId"]);
                found.push((at, expr.to_owned()));
            }
            walk(&panel["panels"], found);
        }
    }
    let mut found = Vec::new();
    walk(&dashboard["panels"], &mut found);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] == "query" {
            let query = &variable["query"];
            let query = query["query"]
                .as_str()
                .or(query.as_str())
                .unwrap_or_default();
            found.push((format!("variable {}", variable["name"]), query.to_owned()));
        }
    }
    found
}

/// The `weir_…` metric names in `expr` (`weir_[a-z0-9_]+` not inside a longer identifier),
/// each with its byte offset.
fn metric_names(expr: &str) -> Vec<(usize, &str)> {
    let bytes = expr.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut names = Vec::new();
    let mut from = 0;
    while let Some(found) = expr[from..].find("weir_") {
        let start = from + found;
        let len = expr[start..]
            .bytes()
            .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
            .count();
        if start == 0 || !ident(bytes[start - 1]) {
            names.push((start, &expr[start..start + len]));
        }
        from = start + len;
    }
    names
}

/// What is wrong with the dashboard against `scrape`: one line per problem.
fn problems(dashboard: &Value, scrape: &Exposition) -> Vec<String> {
    let mut problems = Vec::new();
    for (at, expr) in expressions(dashboard) {
        let names = metric_names(&expr);
        if names.is_empty() && !expr.starts_with("vector(") {
            problems.push(format!("{at}: no weir_ metric in {expr:?}"));
        }
        for (offset, name) in names {
            if !scrape.has_sample(name) {
                problems.push(format!("{at}: {name} is not in the scrape"));
                continue;
            }
            if at.starts_with("variable") {
                continue;
            }
            let before = expr[..offset].trim_end();
            let under_rate = before.ends_with("rate(") || before.ends_with("increase(");
            let counted = matches!(scrape.type_of(name), Some("counter" | "histogram"));
            if counted && !under_rate {
                problems.push(format!(
                    "{at}: {name} is a counter sample outside rate()/increase()"
                ));
            }
            if !counted && under_rate {
                problems.push(format!("{at}: {name} is a gauge inside rate()/increase()"));
            }
            if name.ends_with("_bucket")
                && !(expr.starts_with("histogram_quantile(") && expr.contains("sum by (le"))
            {
                problems.push(format!(
                    "{at}: {name} outside histogram_quantile(q, sum by (le, …) (rate(…)))"
                ));
            }
        }
    }
    fn check_datasources(panels: &Value, problems: &mut Vec<String>) {
        let wanted = json!({"type": "prometheus", "uid": "${datasource}"});
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("(untitled)");
            let targets = panel["targets"].as_array().into_iter().flatten();
            if panel["type"] != "row" && panel["datasource"] != wanted {
                problems.push(format!("panel {title:?} does not read ${{datasource}}"));
            }
            if targets.clone().any(|t| t["datasource"] != wanted) {
                problems.push(format!(
                    "a target of {title:?} does not read ${{datasource}}"
                ));
            }
            check_datasources(&panel["panels"], problems);
        }
    }
    check_datasources(&dashboard["panels"], &mut problems);
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for wanted in ["datasource", "job", "instance"] {
        if !variables.contains(&wanted) {
            problems.push(format!("no ${wanted} variable"));
        }
    }
    problems
}

#[test]
fn the_checker_reports_a_planted_wrong_name_and_misused_types() {
    let scrape = Exposition::parse(
        "# TYPE weir_scores counter\nweir_scores_total{model=\"m\",version=\"1\"} 3\n\
         # TYPE weir_checkpoint_age_seconds gauge\nweir_checkpoint_age_seconds 1.5\n# EOF\n",
    );
    let ds = json!({"type": "prometheus", "uid": "${datasource}"});
    let target = |expr: &str| json!({"refId": "A", "datasource": ds, "expr": expr});
    let panel = |expr: &str| json!({"type": "timeseries", "title": expr, "datasource": ds, "targets": [target(expr)]});
    let variables =
        json!({"list": [{"name": "datasource"}, {"name": "job"}, {"name": "instance"}]});
    let good = json!({"templating": variables, "panels": [
        panel("sum by (model) (rate(weir_scores_total[5m]))"),
        panel("max(weir_checkpoint_age_seconds)"),
    ]});
    assert_eq!(problems(&good, &scrape), Vec::<String>::new());
    let planted = json!({"templating": variables, "panels": [
        panel("sum(rate(weir_scores_totl[5m]))"),
        panel("sum(weir_scores_total)"),
        panel("rate(weir_checkpoint_age_seconds[5m])"),
    ]});
    let found = problems(&planted, &scrape);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].contains("weir_scores_totl is not in the scrape"),
        "{}",
        found[0]
    );
    assert!(found[1].contains("outside rate()"), "{}", found[1]);
    assert!(found[2].contains("gauge inside rate()"), "{}", found[2]);
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One clickstream event; user 0's first event has an amount the failing model fails on.
fn event(i: usize, ts: i64) -> (String, Vec<u8>) {
    let user = format!("u{}", i % USERS);
    let kind = ["view", "click", "purchase"][i % 3];
    let amount = if i == 0 { 1e7 } else { (i % 200) as f64 };
    let value =
        json!({"user": user, "ts": ts, "type": kind, "dwell_ms": i % 5_000, "amount": amount});
    (user, value.to_string().into_bytes())
}

#[test]
fn every_metric_the_dashboard_queries_is_in_a_real_scrape() -> Result<()> {
    let dashboard = dashboard()?;
    let label = "grafana";
    let input = unique_topic(&format!("{label}-in"));
    create_topic(&input, 2)?;
    let t0 = now_ms() - 3_600_000;
    let t0 = t0 - t0.rem_euclid(WINDOW_MS);
    let mut records: Vec<(String, Vec<u8>)> = (0..EVENTS)
        .map(|i| event(i, t0 + i as i64 * GAP_MS))
        .collect();
    records.push(("bad".to_owned(), b"not json".to_vec()));
    produce(&input, &records)?;
    // One event per partition 20 windows later: every window of the input closes.
    let closer_ts = t0 + EVENTS as i64 * GAP_MS + 20 * WINDOW_MS;
    for partition in [0, 1] {
        let closer = json!({"user": format!("closer-{partition}"), "ts": closer_ts, "type": "view", "dwell_ms": 1});
        produce_to(
            &input,
            partition,
            &[(
                format!("closer-{partition}"),
                closer.to_string().into_bytes(),
            )],
        )?;
    }

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.name = format!("{label}-dashboard");
    job.kafka = support::kafka::properties();
    job.source.topic = input;
    job.source.bounded = false;
    job.sink.topic = unique_topic(&format!("{label}-scores"));
    job.sink.dead_letter_topic = unique_topic(&format!("{label}-dlq"));
    create_topic(&job.sink.topic, 1)?;
    create_topic(&job.sink.dead_letter_topic, 1)?;
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/failing_model");
    job.model = toml::from_str(&format!(
        "path = {model:?}\ndrift_alert = 0.2\nerror_rate_alert = 0.05\ndrift_min_rows = 10"
    ))?;
    let checkpoints = scratch_dir(&format!("{label}-ckpt"));
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(&checkpoints, "200ms"))?);
    let addr = weir_testkit::cluster::free_addr()?;
    let options = RunOptions {
        metrics_addr: Some(addr),
        ..RunOptions::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let compiled = job.compile()?;
    let flag = stop.clone();
    let run = std::thread::spawn(move || run_job_with(compiled, Mode::Score, flag, &options));

    // Scrape until every name the dashboard uses has samples (some appear only once the
    // first windows are scored or the first checkpoint is committed), or time out.
    let deadline = Instant::now() + Duration::from_secs(180);
    let (found, scrape) = loop {
        ensure!(
            !run.is_finished(),
            "the job stopped by itself: {:?}",
            run.join().ok()
        );
        if let Ok((200, body)) = scrape::get(addr, "/metrics") {
            let scrape = Exposition::parse(&body);
            let found = problems(&dashboard, &scrape);
            if found.is_empty() || Instant::now() > deadline {
                break (found, scrape);
            }
        }
        ensure!(
            Instant::now() < deadline,
            "the metrics server never answered on {addr}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    stop.store(true, Ordering::SeqCst);
    let summary = run
        .join()
        .map_err(|_| anyhow::anyhow!("the job panicked"))??;
    ensure!(
        found.is_empty(),
        "the dashboard does not match the scrape:\n{}\nsamples scraped: {:?}",
        found.join("\n"),
        scrape.sample_names().collect::<Vec<_>>()
    );
    ensure!(summary.inference_errors > 0, "{}", summary.render());
    Ok(())
}
