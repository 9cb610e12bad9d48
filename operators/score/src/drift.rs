//! Score drift and inference-error rate per model version, over a sliding window of wall-clock
//! time: the live score histogram in the bins of the manifest's `baseline`, its population
//! stability index (PSI) against the baseline, and the share of rows whose inference failed.
//! `[model] drift_alert` and `[model] error_rate_alert` set an alert gauge while the value is
//! over the threshold and log once per crossing (up and down).
//!
//! [`VersionWindow`] is the logic without clock or metrics (`now_ms` is passed in);
//! [`DriftMonitor`] holds one per model version, shared by the score instances of a process,
//! and is fed once per scored batch by `crate::model_set`.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use weir_features::row::ModelTag;
use weir_operators::metrics::ModelLabels;

use crate::manifest::Baseline;
use crate::psi::{psi, shares, ScoreBins};

/// Slices a window is cut into: the window slides by `window / SLICES`.
const SLICES: u64 = 10;

/// The thresholds and the window (`[model] drift_alert`, `error_rate_alert`,
/// `drift_window`, `drift_min_scores`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlertSettings {
    /// PSI above which `weir_model_drift_alert` is 1 (`None`: never).
    pub drift_alert: Option<f64>,
    /// Failed share of rows above which `weir_inference_error_rate_alert` is 1 (`None`:
    /// never).
    pub error_rate_alert: Option<f64>,
    /// The sliding window both are computed over.
    pub window: Duration,
    /// Rows a window needs before either value is computed (fewer: no alert either way).
    pub min_rows: u64,
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            drift_alert: None,
            error_rate_alert: None,
            window: Duration::from_secs(300),
            min_rows: 100,
        }
    }
}

/// One slice of a window: score counts per baseline bin, rows, failed rows.
#[derive(Clone, Debug)]
struct Slice {
    start_ms: u64,
    bins: Vec<u64>,
    rows: u64,
    failed: u64,
}

/// One model version's sliding window against its baseline.
#[derive(Clone, Debug)]
pub struct VersionWindow {
    bins: ScoreBins,
    baseline_share: Vec<f64>,
    slice_ms: u64,
    slices: VecDeque<Slice>,
}

impl VersionWindow {
    /// A window of `window` over the bins of `baseline`.
    pub fn new(baseline: &Baseline, window: Duration) -> Self {
        VersionWindow {
            bins: ScoreBins::of(baseline),
            baseline_share: shares(&baseline.counts),
            slice_ms: (window.as_millis() as u64 / SLICES).max(1),
            slices: VecDeque::new(),
        }
    }

    /// The bin of `score` ([`ScoreBins::bin_of`]).
    pub fn bin_of(&self, score: f64) -> usize {
        self.bins.bin_of(score)
    }

    /// The slice for `now_ms`, after dropping slices older than the window.
    fn slice(&mut self, now_ms: u64) -> &mut Slice {
        let start_ms = now_ms - now_ms % self.slice_ms;
        let oldest = start_ms.saturating_sub(self.slice_ms * (SLICES - 1));
        while self.slices.front().is_some_and(|s| s.start_ms < oldest) {
            self.slices.pop_front();
        }
        if self.slices.back().is_none_or(|s| s.start_ms != start_ms) {
            self.slices.push_back(Slice {
                start_ms,
                bins: vec![0; self.baseline_share.len()],
                rows: 0,
                failed: 0,
            });
        }
        let last = self.slices.len() - 1;
        &mut self.slices[last]
    }

    /// Counts a batch's successful `scores` (bin indices from [`VersionWindow::bin_of`]) and
    /// `failed` rows at `now_ms`.
    pub fn observe(&mut self, bins: impl IntoIterator<Item = usize>, failed: u64, now_ms: u64) {
        let slice = self.slice(now_ms);
        for bin in bins {
            slice.bins[bin] += 1;
            slice.rows += 1;
        }
        slice.rows += failed;
        slice.failed += failed;
    }

    /// Rows in the window (scored and failed).
    pub fn rows(&self) -> u64 {
        self.slices.iter().map(|s| s.rows).sum()
    }

    /// The failed share of the window's rows (`None` without rows).
    pub fn error_rate(&self) -> Option<f64> {
        let rows = self.rows();
        let failed: u64 = self.slices.iter().map(|s| s.failed).sum();
        (rows > 0).then(|| failed as f64 / rows as f64)
    }

    /// The window's scores per baseline bin.
    pub fn counts(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.baseline_share.len()];
        for slice in &self.slices {
            for (sum, n) in counts.iter_mut().zip(&slice.bins) {
                *sum += n;
            }
        }
        counts
    }

    /// The PSI of the window's scores against the baseline (`None` without scores).
    pub fn psi(&self) -> Option<f64> {
        psi(&self.counts(), &self.baseline_share)
    }

    /// The lower edge of each bin, as label values.
    fn bin_labels(&self) -> impl Iterator<Item = String> + '_ {
        self.bins.lower_edges().iter().map(|e| e.to_string())
    }
}

/// An alert's state: on while the value is over the threshold; logs once per crossing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlertLatch {
    on: bool,
}

impl AlertLatch {
    /// Updates the latch with `value` against `threshold`; returns `Some(new state)` when it
    /// crossed.
    pub fn update(&mut self, value: f64, threshold: f64) -> Option<bool> {
        let on = value > threshold;
        (on != self.on).then(|| {
            self.on = on;
            on
        })
    }

    /// Whether the alert is on.
    pub fn is_on(&self) -> bool {
        self.on
    }
}

/// A score bin's labels: the version's and the bin's lower edge.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct BinLabels {
    /// The model version.
    pub version: ModelLabels,
    /// The bin's lower edge.
    pub bin: String,
}

impl EncodeLabelSet for BinLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.version.encode(encoder)?;
        ("bin", self.bin.as_str()).encode(encoder.encode_label())
    }
}

/// One model version's live score distribution against its baseline, as
/// [`DriftMonitor::views`] reads it back (the status page).
#[derive(Clone, Debug, PartialEq)]
pub struct VersionView {
    /// The model version.
    pub tag: ModelTag,
    /// The lower edge of each baseline bin.
    pub lower_edges: Vec<f64>,
    /// Scores per bin in the sliding window.
    pub live: Vec<u64>,
    /// The baseline's share of each bin (smoothed as in the PSI).
    pub baseline_share: Vec<f64>,
    /// Rows in the window (scored and failed).
    pub rows: u64,
    /// The window's PSI (`None` until the window holds `drift_min_scores` rows).
    pub psi: Option<f64>,
    /// The window's failed share (`None` until the window holds `drift_min_scores` rows).
    pub error_rate: Option<f64>,
    /// Whether the drift alert is on.
    pub drift_alert: bool,
    /// Whether the error-rate alert is on.
    pub error_rate_alert: bool,
}

/// One version's window, alerts and resolved gauges.
#[derive(Debug)]
struct Tracked {
    tag: ModelTag,
    window: VersionWindow,
    bins: Vec<Counter>,
    drift: AlertLatch,
    errors: AlertLatch,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Drift and error-rate monitoring of every model version this process scores with.
#[derive(Debug, Default)]
pub struct DriftMonitor {
    settings: AlertSettings,
    versions: Mutex<Vec<Tracked>>,
    score_bins: Family<BinLabels, Counter>,
    baseline: Family<BinLabels, FloatGauge>,
    psi: Family<ModelLabels, FloatGauge>,
    drift_alert: Family<ModelLabels, Gauge>,
    error_rate: Family<ModelLabels, FloatGauge>,
    error_alert: Family<ModelLabels, Gauge>,
}

impl DriftMonitor {
    /// A monitor with `settings`.
    pub fn new(settings: AlertSettings) -> Self {
        DriftMonitor {
            settings,
            ..DriftMonitor::default()
        }
    }

    /// Counts the rows of a batch that version `tag` (whose manifest has `baseline`) scored,
    /// at `now_ms`: the rows of `scores` that pass `in_part`, of which those that pass `failed`
    /// failed (the others scored). One lock per batch.
    pub fn observe(
        &self,
        tag: &ModelTag,
        baseline: &Baseline,
        scores: &[f32],
        failed: impl Fn(usize) -> bool,
        in_part: impl Fn(usize) -> bool,
        now_ms: u64,
    ) {
        let mut versions = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match versions.iter().position(|t| t.tag == *tag) {
            Some(index) => index,
            None => {
                versions.push(self.track(tag, baseline));
                versions.len() - 1
            }
        };
        let tracked = &mut versions[index];
        let mut failed_rows = 0;
        let window = &tracked.window;
        let bins: Vec<usize> = scores
            .iter()
            .enumerate()
            .filter(|(row, _)| in_part(*row))
            .filter(|(row, score)| {
                let ok = !failed(*row) && score.is_finite();
                failed_rows += u64::from(!ok);
                ok
            })
            .map(|(_, score)| window.bin_of(f64::from(*score)))
            .collect();
        for bin in &bins {
            tracked.bins[*bin].inc();
        }
        tracked.window.observe(bins, failed_rows, now_ms);
        self.evaluate(tracked);
    }

    /// Starts tracking a version: resolves its gauges and sets its baseline shares.
    fn track(&self, tag: &ModelTag, baseline: &Baseline) -> Tracked {
        let window = VersionWindow::new(baseline, self.settings.window);
        let version = ModelLabels(tag.clone());
        let mut bins = Vec::new();
        for (label, share) in window.bin_labels().zip(&window.baseline_share) {
            let labels = BinLabels {
                version: version.clone(),
                bin: label,
            };
            bins.push(self.score_bins.get_or_create(&labels).clone());
            self.baseline.get_or_create(&labels).set(*share);
        }
        if self.settings.drift_alert.is_some() {
            self.drift_alert.get_or_create(&version).set(0);
        }
        if self.settings.error_rate_alert.is_some() {
            self.error_alert.get_or_create(&version).set(0);
        }
        Tracked {
            tag: tag.clone(),
            window,
            bins,
            drift: AlertLatch::default(),
            errors: AlertLatch::default(),
        }
    }

    /// Updates a version's PSI and error rate, and their alerts.
    fn evaluate(&self, tracked: &mut Tracked) {
        let labels = ModelLabels(tracked.tag.clone());
        if tracked.window.rows() < self.settings.min_rows {
            return;
        }
        let tag = &tracked.tag;
        if let Some(psi) = tracked.window.psi() {
            self.psi.get_or_create(&labels).set(psi);
            if let Some(threshold) = self.settings.drift_alert {
                if let Some(on) = tracked.drift.update(psi, threshold) {
                    self.drift_alert.get_or_create(&labels).set(i64::from(on));
                    if on {
                        tracing::warn!(model = %tag.name, version = %tag.version, psi, threshold, "score drift: the PSI of the recent scores against the manifest's baseline is over [model] drift_alert");
                    } else {
                        tracing::info!(model = %tag.name, version = %tag.version, psi, threshold, "score drift back under [model] drift_alert");
                    }
                }
            }
        }
        if let Some(rate) = tracked.window.error_rate() {
            self.error_rate.get_or_create(&labels).set(rate);
            if let Some(threshold) = self.settings.error_rate_alert {
                if let Some(on) = tracked.errors.update(rate, threshold) {
                    self.error_alert.get_or_create(&labels).set(i64::from(on));
                    if on {
                        tracing::warn!(model = %tag.name, version = %tag.version, rate, threshold, "inference error rate over [model] error_rate_alert");
                    } else {
                        tracing::info!(model = %tag.name, version = %tag.version, rate, threshold, "inference error rate back under [model] error_rate_alert");
                    }
                }
            }
        }
    }

    /// Whether either alert of `tag` is on: (drift, error rate).
    pub fn alerts(&self, tag: &ModelTag) -> (bool, bool) {
        let versions = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
        versions
            .iter()
            .find(|t| t.tag == *tag)
            .map_or((false, false), |t| (t.drift.is_on(), t.errors.is_on()))
    }

    /// The thresholds and window this monitor uses.
    pub fn settings(&self) -> AlertSettings {
        self.settings
    }

    /// Every version scored so far, in the order first scored.
    pub fn views(&self) -> Vec<VersionView> {
        let versions = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
        versions
            .iter()
            .map(|t| {
                let rows = t.window.rows();
                let enough = rows >= self.settings.min_rows;
                VersionView {
                    tag: t.tag.clone(),
                    lower_edges: t.window.bins.lower_edges().to_vec(),
                    live: t.window.counts(),
                    baseline_share: t.window.baseline_share.clone(),
                    rows,
                    psi: t.window.psi().filter(|_| enough),
                    error_rate: t.window.error_rate().filter(|_| enough),
                    drift_alert: t.drift.is_on(),
                    error_rate_alert: t.errors.is_on(),
                }
            })
            .collect()
    }

    /// Registers the families.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "model_score_bin",
            "Scores by model version and baseline bin (its lower edge), since the start",
            self.score_bins.clone(),
        );
        r.register(
            "model_baseline_share",
            "The manifest's baseline share of each bin (smoothed as in the PSI)",
            self.baseline.clone(),
        );
        r.register(
            "model_drift_psi",
            "PSI of the scores in [model] drift_window against the manifest's baseline",
            self.psi.clone(),
        );
        r.register(
            "model_drift_alert",
            "1 while the PSI is over [model] drift_alert",
            self.drift_alert.clone(),
        );
        r.register(
            "inference_error_rate",
            "Share of rows in [model] drift_window whose inference failed",
            self.error_rate.clone(),
        );
        r.register(
            "inference_error_rate_alert",
            "1 while the inference error rate is over [model] error_rate_alert",
            self.error_alert.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline() -> Baseline {
        Baseline {
            bin_edges: vec![0.0, 0.25, 0.5, 0.75, 1.0],
            counts: vec![25, 25, 25, 25],
        }
    }

    #[test]
    fn scores_fall_in_the_baseline_bins_and_outliers_in_the_end_bins() {
        let w = VersionWindow::new(&baseline(), Duration::from_secs(10));
        assert_eq!(w.bin_of(-3.0), 0);
        assert_eq!(w.bin_of(0.0), 0);
        assert_eq!(w.bin_of(0.25), 1);
        assert_eq!(w.bin_of(0.7), 2);
        assert_eq!(w.bin_of(1.0), 3);
        assert_eq!(w.bin_of(9.0), 3);
    }

    #[test]
    fn psi_is_near_zero_for_the_baseline_and_large_for_a_shift() {
        let mut same = VersionWindow::new(&baseline(), Duration::from_secs(10));
        same.observe((0..400).map(|i| i % 4), 0, 1_000);
        assert!(same.psi().unwrap_or(f64::NAN) < 0.001);
        let mut shifted = VersionWindow::new(&baseline(), Duration::from_secs(10));
        shifted.observe((0..400).map(|_| 3), 0, 1_000);
        let psi = shifted.psi().unwrap_or(0.0);
        assert!(psi > 1.0, "{psi}");
    }

    #[test]
    fn the_window_forgets_slices_older_than_its_length() {
        let mut w = VersionWindow::new(&baseline(), Duration::from_secs(10));
        w.observe([3; 100], 50, 1_000);
        assert_eq!(w.rows(), 150);
        assert_eq!(w.error_rate(), Some(50.0 / 150.0));
        w.observe((0..100).map(|i| i % 4), 0, 10_500);
        assert_eq!(
            w.rows(),
            250,
            "9.5 s later the first slice is still in the window"
        );
        w.observe((0..100).map(|i| i % 4), 0, 11_000);
        assert_eq!(w.rows(), 200, "10 s later it is not");
        assert_eq!(w.error_rate(), Some(0.0));
    }

    #[test]
    fn a_versions_view_holds_its_live_bins_and_a_psi_once_the_window_has_enough_rows() {
        let monitor = DriftMonitor::new(AlertSettings {
            drift_alert: Some(0.2),
            min_rows: 8,
            ..AlertSettings::default()
        });
        let tag = ModelTag {
            name: "fraud".into(),
            version: "v3".into(),
        };
        let scores = [0.9_f32, 0.8, 0.1, 0.95];
        monitor.observe(&tag, &baseline(), &scores, |_| false, |_| true, 1_000);
        let view = &monitor.views()[0];
        assert_eq!((view.tag.clone(), view.rows), (tag.clone(), 4));
        assert_eq!(view.lower_edges, [0.0, 0.25, 0.5, 0.75]);
        assert_eq!(view.live, [1, 0, 0, 3]);
        assert_eq!(view.psi, None, "4 rows, fewer than 8");
        monitor.observe(&tag, &baseline(), &scores, |_| false, |_| true, 1_100);
        let view = &monitor.views()[0];
        assert!(view.psi.is_some_and(|psi| psi > 0.2) && view.drift_alert);
        assert_eq!(view.error_rate, Some(0.0));
    }

    #[test]
    fn an_alert_crosses_once_each_way() {
        let mut latch = AlertLatch::default();
        assert_eq!(latch.update(0.1, 0.2), None);
        assert_eq!(latch.update(0.3, 0.2), Some(true));
        assert_eq!(latch.update(0.5, 0.2), None);
        assert_eq!(latch.update(0.1, 0.2), Some(false));
        assert!(!latch.is_on());
    }
}
