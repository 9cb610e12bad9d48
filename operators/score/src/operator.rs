//! The scoring operator (DESIGN.md §6): feature rows are exchanged to the score instances,
//! scored in micro-batches (everything that arrived for one tick, cut at `max_batch_rows`)
//! with the instance's own validated, warmed ONNX Runtime session, and emitted at the tick
//! they arrived with. A failed batch never stops the job: each of its rows becomes a score
//! record with an error and no score, plus a dead letter.

use std::path::PathBuf;
use std::sync::Arc;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::Stream;

use weir_features::dead_letter::{DeadLetter, DeadLetterReason};
use weir_features::encode::unscored_row_json;
use weir_features::row::{FeatureRow, ModelTag, ScoredRow};
use weir_features::vocab::Tick;
use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::{instance_for_key_group, Placement};

use crate::error::Result;
use crate::session::{ModelSession, SessionOptions};

type VecBuilder<D> = timely::container::CapacityContainerBuilder<Vec<D>>;

/// Configuration of the scoring stage.
#[derive(Clone, Debug)]
pub struct ScoreConfig {
    /// Model directory (`model.onnx` + `manifest.json`).
    pub model_dir: PathBuf,
    /// The job's feature names in the order rows carry them.
    pub job_features: Vec<String>,
    /// Session threads, warm-up and batch size.
    pub session: SessionOptions,
    /// Number of score instances.
    pub parallelism: usize,
    /// Worker layout.
    pub placement: Placement,
    /// Key groups of the job (rows are routed by key group).
    pub key_groups: u32,
    /// Source name, for dead letters.
    pub source_name: String,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
}

/// The outputs of the scoring stage.
pub struct ScoreStreams<'scope> {
    /// One score record per feature row (with an error field when inference failed).
    pub scores: Stream<'scope, Tick, Vec<ScoredRow>>,
    /// Dead letters for failed inferences.
    pub dead_letters: Stream<'scope, Tick, Vec<DeadLetter>>,
}

/// Extension trait: `rows.score(config)`.
pub trait Score<'scope> {
    /// Scores every feature row; loads (and warms) the model on each score instance.
    fn score(self, config: ScoreConfig) -> Result<ScoreStreams<'scope>>;
}

impl<'scope> Score<'scope> for Stream<'scope, Tick, Vec<FeatureRow>> {
    fn score(self, config: ScoreConfig) -> Result<ScoreStreams<'scope>> {
        let worker = self.scope().index();
        let session = match config.placement.instance_on(worker, config.parallelism) {
            Some(_) => Some(ModelSession::load(
                &config.model_dir,
                &config.job_features,
                &config.session,
            )?),
            None => None,
        };
        let (placement, key_groups, parallelism) =
            (config.placement, config.key_groups, config.parallelism);
        let route = move |row: &FeatureRow| {
            placement.worker_of(instance_for_key_group(
                row.key_group,
                key_groups,
                parallelism,
            )) as u64
        };
        let mut builder = OperatorBuilder::new("Score".to_owned(), self.scope());
        let mut rows_in = builder.new_input(self, Exchange::new(route));
        let (scores_out, scores) = builder.new_output::<Vec<ScoredRow>>();
        let (dead_out, dead_letters) = builder.new_output::<Vec<DeadLetter>>();
        let mut scores_out = OutputBuilder::<_, VecBuilder<ScoredRow>>::from(scores_out);
        let mut dead_out = OutputBuilder::<_, VecBuilder<DeadLetter>>::from(dead_out);

        builder.build(move |capabilities| {
            drop(capabilities);
            let mut scorer = session.map(|session| BatchScorer::new(session, config.clone()));
            move |_frontiers| {
                let mut scores_handle = scores_out.activate();
                let mut dead_handle = dead_out.activate();
                rows_in.for_each(|cap, batch| {
                    let Some(scorer) = scorer.as_mut() else {
                        return;
                    };
                    let mut scored = Vec::with_capacity(batch.len());
                    let mut dead = Vec::new();
                    scorer.score(batch, &mut scored, &mut dead);
                    scores_handle.session(&cap).give_container(&mut scored);
                    if !dead.is_empty() {
                        dead_handle.session(&cap).give_container(&mut dead);
                    }
                });
            }
        });
        Ok(ScoreStreams {
            scores,
            dead_letters,
        })
    }
}

/// One score instance: its session and reused buffers.
struct BatchScorer {
    session: ModelSession,
    tag: ModelTag,
    config: ScoreConfig,
    values: Vec<f64>,
    out: Vec<f32>,
}

impl BatchScorer {
    fn new(session: ModelSession, config: ScoreConfig) -> Self {
        let tag = ModelTag {
            name: session.name().to_owned(),
            version: session.version().to_owned(),
        };
        BatchScorer {
            session,
            tag,
            config,
            values: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Scores `rows` in chunks of at most `max_batch_rows`, draining them.
    fn score(
        &mut self,
        rows: &mut Vec<FeatureRow>,
        scored: &mut Vec<ScoredRow>,
        dead: &mut Vec<DeadLetter>,
    ) {
        let chunk = self.config.session.max_batch_rows.max(1);
        let mut rows = std::mem::take(rows).into_iter().peekable();
        while rows.peek().is_some() {
            let batch: Vec<FeatureRow> = rows.by_ref().take(chunk).collect();
            self.values.clear();
            for row in &batch {
                self.values.extend_from_slice(&row.values);
            }
            let result = self
                .session
                .score_batch(&self.values, batch.len(), &mut self.out);
            let inference_ts_ms = unix_ms() as i64;
            match result {
                Ok(stats) => {
                    JobMetrics::add(&self.config.metrics.scores, batch.len() as u64);
                    JobMetrics::add(
                        &self.config.metrics.defaults_used,
                        stats.defaults_used as u64,
                    );
                    for (row, score) in batch.into_iter().zip(self.out.iter()) {
                        let score = Some(f64::from(*score));
                        scored.push(ScoredRow {
                            row,
                            model: self.tag.clone(),
                            score,
                            error: None,
                            inference_ts_ms,
                        });
                    }
                }
                Err(error) => {
                    let error = error.to_string();
                    tracing::warn!(%error, rows = batch.len(), "inference failed; emitting error records");
                    JobMetrics::add(&self.config.metrics.inference_errors, batch.len() as u64);
                    for row in batch {
                        self.config
                            .metrics
                            .dead_letter(DeadLetterReason::InferenceFailed);
                        dead.push(self.dead_letter(&row, &error));
                        let error = Some(error.clone());
                        scored.push(ScoredRow {
                            row,
                            model: self.tag.clone(),
                            score: None,
                            error,
                            inference_ts_ms,
                        });
                    }
                }
            }
        }
    }

    fn dead_letter(&self, row: &FeatureRow, error: &str) -> DeadLetter {
        DeadLetter {
            reason: DeadLetterReason::InferenceFailed,
            error: format!("model {} {}: {error}", self.tag.name, self.tag.version),
            topic: self.config.source_name.clone(),
            position: row.last,
            timestamp: Some(row.window_end),
            key: Some(row.key.as_bytes().to_vec()),
            raw: unscored_row_json(row, &self.config.job_features),
        }
    }
}
