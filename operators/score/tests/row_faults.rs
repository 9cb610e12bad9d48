//! Rows a model fails on alone (DESIGN.md §6, "a failed inference"): a row that makes ONNX
//! Runtime fail its run, or whose output is NaN or ±inf in any column, gets an error record, an
//! `inference_failed` dead letter with the reason and an inference error in the metrics, and
//! every other row of its batch is scored: the failed run is split and retried in halves,
//! within a bounded number of runs. Primary, shadow and canary versions alike.
//!
//! The model is `tests/fixtures/row_faults` (made by `tests/fixtures/make_row_faults.py`):
//! column 1 (scored) is `ln(clicks_5m)`, column 0 is `sqrt(dwell_s)`, and `cart_adds` above
//! 100 makes the run fail.

mod common;
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{fixture, job_features, opts};
use weir_features::dead_letter::DeadLetterReason;
use weir_features::row::FeatureRow;
use weir_operators::metrics::JobMetrics;
use weir_score::canary::key_bucket;
use weir_score::counters::ScoreCounters;
use weir_score::inference_batch::InferenceBatch;
use weir_score::model_set::ModelSet;
use weir_score::records::{scored_batches, RecordContext};
use weir_score::secondary::SecondaryRole;
use weir_score::ModelSession;
use weir_testkit::files::Scratch;

/// Rows in the batch: `⌈log2 ROWS⌉ = 4`.
const ROWS: usize = 16;
/// Rows whose run fails (`cart_adds` above 100).
const RUN_FAILS: [usize; 2] = [3, 10];
/// Row whose score is `ln(0) = -inf`.
const SCORE_INF: usize = 7;
/// Row whose unscored column is `sqrt(-1) = NaN`.
const OTHER_COLUMN_NAN: usize = 12;

fn faulty() -> BTreeSet<usize> {
    BTreeSet::from([RUN_FAILS[0], RUN_FAILS[1], SCORE_INF, OTHER_COLUMN_NAN])
}

/// Feature values of row `i`: `clicks_5m = i + 1`, `dwell_s = 4`, `cart_adds = 0`, but for
/// the faulty rows.
fn values(i: usize) -> [f64; 3] {
    let mut values = [i as f64 + 1.0, 4.0, 0.0];
    match i {
        _ if RUN_FAILS.contains(&i) => values[2] = 500.0,
        SCORE_INF => values[0] = 0.0,
        OTHER_COLUMN_NAN => values[1] = -1.0,
        _ => {}
    }
    values
}

fn rows() -> Vec<FeatureRow> {
    (0..ROWS)
        .map(|i| {
            let mut row = support::row(&format!("k{i}"), 1, i);
            row.values = values(i).into_iter().collect();
            row
        })
        .collect()
}

/// The batch of [`rows`], with their keys' canary buckets when `buckets`.
fn batch(rows: &[FeatureRow], buckets: bool) -> InferenceBatch {
    let mut batch = InferenceBatch::default();
    for row in rows {
        batch.push_row(&row.values, buckets.then(|| key_bucket(&row.key)));
    }
    batch
}

fn session(dir: &std::path::Path) -> anyhow::Result<ModelSession> {
    Ok(ModelSession::load(dir, &job_features(), &opts())?)
}

fn context(metrics: &Arc<JobMetrics>) -> RecordContext {
    RecordContext {
        job_features: job_features(),
        source_name: "clicks".into(),
        metrics: metrics.clone(),
    }
}

#[test]
fn a_session_names_the_rows_whose_output_is_not_a_number_in_any_column() -> anyhow::Result<()> {
    let mut s = session(&fixture("row_faults"))?;
    let mut out = Vec::new();
    let values = [2.0, 4.0, 0.0, 0.0, 4.0, 0.0, 2.0, -1.0, 0.0];
    let stats = s.score_batch(&values, 3, &mut out)?;
    assert_eq!(out.len(), 3);
    assert!((out[0] - 2f32.ln()).abs() < 1e-6, "{out:?}");
    let rows: Vec<(usize, &str)> = stats.non_finite.iter().collect();
    assert_eq!(
        rows,
        [
            (
                1,
                "model output `probabilities` is -inf at column 1 of 2; a score must be a \
                 finite number"
            ),
            (
                2,
                "model output `probabilities` is NaN at column 0 of 2; a score must be a \
                 finite number"
            ),
        ]
    );
    let error = s.score_batch(&[2.0, 4.0, 500.0], 1, &mut out).err();
    let error = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.contains("scoring 1 row with model `row_faults` version `1`")
            && error.contains("out of data bounds"),
        "{error}"
    );
    Ok(())
}

#[test]
fn only_rows_that_fail_alone_get_errors_and_dead_letters_within_the_split_bound(
) -> anyhow::Result<()> {
    let metrics = Arc::new(JobMetrics::default());
    let counters = Arc::new(ScoreCounters::default());
    let mut models = ModelSet::new(
        session(&fixture("row_faults"))?,
        None,
        metrics.clone(),
        counters.clone(),
    );
    let rows = rows();
    let mut batch = batch(&rows, false);
    models.score(&mut batch);

    // Runs that fail: all 16, both 8s, the 4s and 2s holding row 3 or row 10: 7 runs split
    // in two, 14 runs more than the first; the bound is 2 runs per halving per failing row.
    let split_runs = ScoreCounters::get(&counters.split_runs);
    assert_eq!(split_runs, 14);
    assert!(split_runs <= (2 * RUN_FAILS.len() * 4) as u64);

    let runs = vec![rows[..5].to_vec(), rows[5..].to_vec()];
    let outcome = scored_batches(runs, &batch, &context(&metrics));
    let views: Vec<_> = outcome.scored.iter().flat_map(|b| b.views()).collect();
    assert_eq!(views.len(), ROWS);
    for (i, view) in views.iter().enumerate() {
        if faulty().contains(&i) {
            assert_eq!(view.score, None, "row {i}");
            assert!(view.error.is_some(), "row {i} has no error");
        } else {
            let score = view.score.unwrap_or(f64::NAN);
            assert!(
                (score - (i as f64 + 1.0).ln()).abs() < 1e-6,
                "row {i}: {score}"
            );
            assert_eq!(view.error, None, "row {i}");
        }
    }
    let error_of = |i: usize| views[i].error.unwrap_or_default();
    for i in RUN_FAILS {
        assert!(
            error_of(i).contains("scoring 1 row") && error_of(i).contains("out of data bounds"),
            "row {i}: {}",
            error_of(i)
        );
    }
    assert!(error_of(SCORE_INF).contains("is -inf at column 1 of 2"));
    assert!(error_of(OTHER_COLUMN_NAN).contains("is NaN at column 0 of 2"));

    let dead = &outcome.dead;
    let dead_keys: BTreeSet<String> = dead
        .iter()
        .map(|d| String::from_utf8_lossy(d.key.as_deref().unwrap_or_default()).into_owned())
        .collect();
    let faulty_keys: BTreeSet<String> = faulty().iter().map(|i| format!("k{i}")).collect();
    assert_eq!(dead_keys, faulty_keys);
    for letter in dead {
        assert_eq!(letter.reason, DeadLetterReason::InferenceFailed);
        assert!(
            letter.error.starts_with("model row_faults 1: "),
            "{}",
            letter.error
        );
    }
    let inf_letter = dead
        .iter()
        .find(|d| d.key.as_deref() == Some(b"k7".as_slice()));
    let inf_error = inf_letter.map(|d| d.error.as_str()).unwrap_or_default();
    assert!(inf_error.contains("is -inf"), "{inf_error}");

    assert_eq!(
        JobMetrics::get(&metrics.scores),
        (ROWS - faulty().len()) as u64
    );
    assert_eq!(
        JobMetrics::get(&metrics.inference_errors),
        faulty().len() as u64
    );
    assert_eq!(
        metrics.dead_letters_by_reason(),
        [(DeadLetterReason::InferenceFailed, faulty().len() as u64)]
    );
    Ok(())
}

#[test]
fn shadow_and_canary_versions_fail_rows_alone_too() -> anyhow::Result<()> {
    let mut scratch = Scratch::kept_unless_passed("row-faults-second-version");
    let second = scratch.path().join("row_faults_2");
    support::write_version("row_faults", &second, "row_faults", "2")?;
    let metrics = Arc::new(JobMetrics::default());
    let counters = Arc::new(ScoreCounters::default());
    let mut models = ModelSet::new(
        session(&fixture("row_faults"))?,
        Some((SecondaryRole::Shadow, session(&second)?)),
        metrics.clone(),
        counters.clone(),
    );
    let rows = rows();

    // A shadow fails the same rows alone; the primary scores are its own.
    let mut shadowed = batch(&rows, false);
    models.score(&mut shadowed);
    let failed: BTreeSet<usize> = shadowed
        .scores
        .shadow_row_errors
        .iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(failed, faulty());
    assert_eq!(
        ScoreCounters::get(&counters.shadow_errors),
        faulty().len() as u64
    );
    assert_eq!(ScoreCounters::get(&counters.split_runs), 2 * 14);
    let outcome = scored_batches(vec![rows.clone()], &shadowed, &context(&metrics));
    assert_eq!(
        outcome.dead.len(),
        faulty().len(),
        "the primary's failed rows only"
    );
    for (i, view) in outcome.scored[0].views().enumerate() {
        let shadow = view.shadow.expect("a shadow ran");
        assert_eq!(shadow.model.version.as_str(), "2");
        assert_eq!(shadow.score.is_none(), faulty().contains(&i), "row {i}");
        assert_eq!(shadow.error.is_some(), faulty().contains(&i), "row {i}");
        assert_eq!(shadow.score, view.score, "row {i}: the same model");
    }

    // A canary at half the keys: each faulty row fails under the version its key sees, and
    // its error and dead letter name that version.
    models.set_secondary_role(SecondaryRole::Canary { share: 0.5 });
    let mut split = batch(&rows, true);
    models.score(&mut split);
    assert_eq!(split.canary.len(), ROWS);
    let in_canary = |i: usize| split.canary[i];
    assert!(
        faulty().iter().any(|i| in_canary(*i)) && faulty().iter().any(|i| !in_canary(*i)),
        "the keys put faulty rows in both versions: {:?}",
        split.canary
    );
    let failed: BTreeSet<usize> = split.scores.row_errors.iter().map(|(r, _)| r).collect();
    assert_eq!(failed, faulty());
    let outcome = scored_batches(vec![rows.clone()], &split, &context(&metrics));
    for (i, view) in outcome.scored[0].views().enumerate() {
        let version = if in_canary(i) { "2" } else { "1" };
        assert_eq!(view.model.version.as_str(), version, "row {i}");
        assert_eq!(view.error.is_some(), faulty().contains(&i), "row {i}");
        if !faulty().contains(&i) {
            let score = view.score.unwrap_or(f64::NAN);
            assert!(
                (score - (i as f64 + 1.0).ln()).abs() < 1e-6,
                "row {i}: {score}"
            );
        }
    }
    for letter in &outcome.dead {
        let key = String::from_utf8_lossy(letter.key.as_deref().unwrap_or_default()).into_owned();
        let i: usize = key.trim_start_matches('k').parse()?;
        let version = if in_canary(i) { "2" } else { "1" };
        assert!(
            letter
                .error
                .starts_with(&format!("model row_faults {version}: ")),
            "{key}: {}",
            letter.error
        );
    }
    assert_eq!(outcome.dead.len(), faulty().len());
    scratch.passed();
    Ok(())
}
