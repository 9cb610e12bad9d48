//! The naive window oracle of `tests/oracle_windows.rs`: seeded random event streams with
//! bounded disorder, and a brute-force recomputation of every (key, window) of a tumbling,
//! hopping or session window with plain loops over the events — none of the engine's window,
//! pane, session or aggregate code.
//!
//! - Aligned windows: every `k` with `k·slide <= ts < k·slide + size` is tried directly.
//! - Sessions: the documented rule of `features/src/sessions.rs`, applied per key in arrival
//!   order (the rule depends on arrival order only through `max_length` cuts), keeping each
//!   session's member list; touched sessions are found by scanning all of the key's sessions.
//! - In-order sessions ([`Kind::GreedySession`]): the textbook greedy split of each key's
//!   events sorted by time, independent of the documented rule.
//! - Features are computed from a window's member list: counts, sums (values are integers, so
//!   every sum and mean is exact in any order), min/max, two-pass variances (the engine uses
//!   Welford with Chan merges, so variances and standard deviations are compared with the
//!   relative tolerance [`VARIANCE_TOLERANCE`]), first/last by (event time, arrival), exact
//!   distinct counts with a `BTreeSet`, and the ratio of two counts.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};

/// One generated event. Arrival order is its index in the generated stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Ev {
    /// Key index (`u{key:03}` in JSON).
    pub key: usize,
    /// Event time, ms.
    pub ts: i64,
    /// `view`, `click` or `purchase`.
    pub kind: &'static str,
    /// One of [`PAGES`] pages (`p00`…).
    pub page: usize,
    /// Required numeric field (integer-valued).
    pub dwell: f64,
    /// Optional numeric field (integer-valued, may be negative); absent on ~40 % of records.
    pub amount: Option<f64>,
}

/// Number of distinct pages (well below the 256 values up to which `distinct` is exact).
pub const PAGES: usize = 40;
/// Start of the generated event time.
pub const T0: i64 = 1_767_225_600_000;
/// Event times are multiples of this, so ties of `first`/`last` happen often.
pub const TIME_GRAIN: i64 = 500;

impl Ev {
    /// The JSON Lines payload of the event.
    pub fn to_json(&self) -> String {
        let amount = self
            .amount
            .map_or(String::new(), |a| format!(",\"amount\":{a}"));
        format!(
            "{{\"user\":\"{}\",\"ts\":{},\"type\":\"{}\",\"page\":\"p{:02}\",\"dwell\":{}{amount}}}",
            key_name(self.key),
            self.ts,
            self.kind,
            self.page,
            self.dwell
        )
    }
}

/// The JSON key of key index `key`.
pub fn key_name(key: usize) -> String {
    format!("u{key:03}")
}

/// `n` events over `keys` keys in arrival order. A base clock advances by 0 or
/// [`TIME_GRAIN`] ms per event; each event's time is the clock minus a multiple of
/// [`TIME_GRAIN`] of at most `max_disorder` ms. So within any subsequence (a partition, a key)
/// an event is at most `max_disorder` behind the largest time seen before it: with
/// `max_out_of_orderness >= max_disorder` no record is late.
pub fn generate(seed: u64, keys: usize, n: usize, max_disorder: i64) -> Vec<Ev> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut clock = T0;
    let steps = max_disorder / TIME_GRAIN;
    (0..n)
        .map(|_| {
            if rng.random_bool(0.5) {
                clock += TIME_GRAIN;
            }
            let behind = if rng.random_bool(0.3) {
                rng.random_range(0..=steps) * TIME_GRAIN
            } else {
                0
            };
            let kind = ["view", "view", "click", "purchase"][rng.random_range(0..4)];
            Ev {
                key: rng.random_range(0..keys),
                ts: clock - behind,
                kind,
                page: rng.random_range(0..PAGES),
                dwell: f64::from(rng.random_range(1..10_000)),
                amount: rng
                    .random_bool(0.6)
                    .then(|| f64::from(rng.random_range(-500..5_000))),
            }
        })
        .collect()
}

/// A window kind as the oracle sees it.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Windows `[k·slide, k·slide + size)` (tumbling: `slide == size`).
    Aligned {
        /// Window length, ms.
        size: i64,
        /// Distance between starts, ms.
        slide: i64,
    },
    /// Per-key sessions.
    Session {
        /// Inactivity gap, ms.
        gap: i64,
        /// Longest session, ms.
        max_length: i64,
    },
    /// Per-key sessions by the textbook greedy split, valid for streams in time order only:
    /// an event extends the key's latest session when it is at most `gap` after the
    /// session's last event and the session stays within `max_length`, else it starts one.
    GreedySession {
        /// Inactivity gap, ms.
        gap: i64,
        /// Longest session, ms.
        max_length: i64,
    },
}

/// (key name, window start, window end).
pub type WindowId = (String, i64, i64);

/// Membership of every (key, window): indices into the event list, in arrival order.
pub fn windows(events: &[Ev], kind: Kind) -> BTreeMap<WindowId, Vec<usize>> {
    match kind {
        Kind::Aligned { size, slide } => aligned_windows(events, size, slide),
        Kind::Session { gap, max_length } => session_windows(events, gap, max_length),
        Kind::GreedySession { gap, max_length } => greedy_sessions(events, gap, max_length),
    }
}

fn aligned_windows(events: &[Ev], size: i64, slide: i64) -> BTreeMap<WindowId, Vec<usize>> {
    let mut out: BTreeMap<WindowId, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let lowest = (e.ts - size).div_euclid(slide);
        for k in lowest..=e.ts.div_euclid(slide) {
            let start = k * slide;
            if start <= e.ts && e.ts < start + size {
                out.entry((key_name(e.key), start, start + size))
                    .or_default()
                    .push(i);
            }
        }
    }
    out
}

struct Session {
    start: i64,
    end: i64,
    members: Vec<usize>,
}

/// The documented session rule (`features/src/sessions.rs`), per key in arrival order.
fn session_windows(events: &[Ev], gap: i64, max_length: i64) -> BTreeMap<WindowId, Vec<usize>> {
    let mut per_key: BTreeMap<usize, Vec<Session>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let sessions = per_key.entry(e.key).or_default();
        let (lo, hi) = (e.ts, e.ts + gap);
        let mut touched: Vec<usize> = Vec::new();
        for (j, s) in sessions.iter().enumerate() {
            // Touching spans (one ends where the other starts) merge too.
            if s.start <= hi && lo <= s.end {
                touched.push(j);
            }
        }
        let mut union = (lo, hi);
        for &j in &touched {
            union = (union.0.min(sessions[j].start), union.1.max(sessions[j].end));
        }
        if !touched.is_empty() && union.1 - union.0 <= max_length {
            // Merge: all touched sessions and the event become one session.
            let mut members = vec![i];
            for &j in touched.iter().rev() {
                members.extend(sessions.remove(j).members);
            }
            members.sort_unstable();
            sessions.push(Session {
                start: union.0,
                end: union.1,
                members,
            });
        } else {
            // Join the touched session with the latest start that stays within max_length.
            let mut best: Option<usize> = None;
            for &j in &touched {
                let s = &sessions[j];
                let fits = s.end.max(hi) - s.start.min(lo) <= max_length;
                if fits && best.is_none_or(|b| sessions[b].start <= s.start) {
                    best = Some(j);
                }
            }
            match best {
                Some(j) => {
                    let s = &mut sessions[j];
                    (s.start, s.end) = (s.start.min(lo), s.end.max(hi));
                    s.members.push(i);
                }
                None => sessions.push(Session {
                    start: lo,
                    end: hi,
                    members: vec![i],
                }),
            }
        }
        sessions.sort_by_key(|s| s.start);
    }
    let mut out = BTreeMap::new();
    for (key, sessions) in per_key {
        for s in sessions {
            out.insert((key_name(key), s.start, s.end), s.members);
        }
    }
    out
}

/// The greedy split of in-order events (each key's events sorted by time first, ties in
/// arrival order).
fn greedy_sessions(events: &[Ev], gap: i64, max_length: i64) -> BTreeMap<WindowId, Vec<usize>> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| (events[i].key, events[i].ts, i));
    let mut out = BTreeMap::new();
    let mut open: Option<(usize, i64, i64, Vec<usize>)> = None;
    for i in order {
        let e = &events[i];
        match &mut open {
            Some((key, start, last, members))
                if *key == e.key && e.ts <= *last + gap && e.ts + gap - *start <= max_length =>
            {
                *last = e.ts;
                members.push(i);
            }
            _ => {
                if let Some((key, start, last, members)) = open.take() {
                    out.insert((key_name(key), start, last + gap), members);
                }
                open = Some((e.key, e.ts, e.ts, vec![i]));
            }
        }
    }
    if let Some((key, start, last, members)) = open {
        out.insert((key_name(key), start, last + gap), members);
    }
    out
}

/// The job's `[[features]]` (TOML), in order; [`features`] computes the same list.
pub const FEATURES_TOML: &str = r#"
[[features]]
name = "events"
agg = "count"

[[features]]
name = "clicks"
agg = "count_if"
where = "type == 'click'"

[[features]]
name = "big_amounts"
agg = "count"
where = "amount >= 1000"

[[features]]
name = "amount_sum"
agg = "sum"
field = "amount"

[[features]]
name = "purchase_sum"
agg = "sum"
field = "amount"
where = "type == 'purchase'"

[[features]]
name = "amount_mean"
agg = "mean"
field = "amount"

[[features]]
name = "amount_min"
agg = "min"
field = "amount"

[[features]]
name = "amount_max"
agg = "max"
field = "amount"

[[features]]
name = "amount_var_pop"
agg = "var_pop"
field = "amount"

[[features]]
name = "amount_var_samp"
agg = "var_samp"
field = "amount"

[[features]]
name = "dwell_stddev_pop"
agg = "stddev_pop"
field = "dwell"

[[features]]
name = "dwell_stddev_samp"
agg = "stddev_samp"
field = "dwell"

[[features]]
name = "dwell_first"
agg = "first"
field = "dwell"

[[features]]
name = "dwell_last"
agg = "last"
field = "dwell"

[[features]]
name = "amount_first"
agg = "first"
field = "amount"

[[features]]
name = "amount_last"
agg = "last"
field = "amount"

[[features]]
name = "distinct_pages"
agg = "distinct"
field = "page"

[[features]]
name = "click_rate"
agg = "ratio"
numerator = "clicks"
denominator = "events"
"#;

/// Names of the features of [`FEATURES_TOML`], in order.
pub const FEATURE_NAMES: [&str; 18] = [
    "events",
    "clicks",
    "big_amounts",
    "amount_sum",
    "purchase_sum",
    "amount_mean",
    "amount_min",
    "amount_max",
    "amount_var_pop",
    "amount_var_samp",
    "dwell_stddev_pop",
    "dwell_stddev_samp",
    "dwell_first",
    "dwell_last",
    "amount_first",
    "amount_last",
    "distinct_pages",
    "click_rate",
];

/// Relative tolerance of variances and standard deviations (two-pass here, Welford with Chan
/// merges of panes/sessions in the engine). Every other feature must match bit for bit.
pub const VARIANCE_TOLERANCE: f64 = 1e-9;

/// Whether feature `index` is compared with [`VARIANCE_TOLERANCE`] rather than exactly.
pub fn is_variance(index: usize) -> bool {
    (8..=11).contains(&index)
}

/// The features of one window (NaN = missing) from its members, in arrival order.
pub fn features(events: &[Ev], members: &[usize]) -> Vec<f64> {
    let evs: Vec<&Ev> = members.iter().map(|&i| &events[i]).collect();
    let amounts: Vec<f64> = evs.iter().filter_map(|e| e.amount).collect();
    let dwells: Vec<f64> = evs.iter().map(|e| e.dwell).collect();
    let count = evs.len() as f64;
    let clicks = evs.iter().filter(|e| e.kind == "click").count() as f64;
    let big = amounts.iter().filter(|&&a| a >= 1000.0).count() as f64;
    let purchases: Vec<f64> = evs
        .iter()
        .filter(|e| e.kind == "purchase")
        .filter_map(|e| e.amount)
        .collect();
    let distinct: BTreeSet<usize> = evs.iter().map(|e| e.page).collect();
    // The value at the smallest (largest) time; ties: the first (last) to arrive.
    let first = |field: &dyn Fn(&Ev) -> Option<f64>| {
        let mut best: Option<(i64, f64)> = None;
        for e in &evs {
            if let Some(x) = field(e) {
                if best.is_none_or(|(t, _)| e.ts < t) {
                    best = Some((e.ts, x));
                }
            }
        }
        best.map_or(f64::NAN, |(_, x)| x)
    };
    let last = |field: &dyn Fn(&Ev) -> Option<f64>| {
        let mut best: Option<(i64, f64)> = None;
        for e in &evs {
            if let Some(x) = field(e) {
                if best.is_none_or(|(t, _)| e.ts >= t) {
                    best = Some((e.ts, x));
                }
            }
        }
        best.map_or(f64::NAN, |(_, x)| x)
    };
    vec![
        count,
        clicks,
        big,
        sum(&amounts),
        sum(&purchases),
        if amounts.is_empty() {
            f64::NAN
        } else {
            sum(&amounts) / amounts.len() as f64
        },
        amounts.iter().copied().reduce(f64::min).unwrap_or(f64::NAN),
        amounts.iter().copied().reduce(f64::max).unwrap_or(f64::NAN),
        variance(&amounts, 0),
        variance(&amounts, 1),
        variance(&dwells, 0).sqrt(),
        variance(&dwells, 1).sqrt(),
        first(&|e| Some(e.dwell)),
        last(&|e| Some(e.dwell)),
        first(&|e| e.amount),
        last(&|e| e.amount),
        distinct.len() as f64,
        clicks / count,
    ]
}

/// Sum in arrival order; missing when empty.
fn sum(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum()
}

/// Two-pass variance with divisor `n - ddof`; missing when `n <= ddof`.
fn variance(xs: &[f64], ddof: usize) -> f64 {
    if xs.len() <= ddof {
        return f64::NAN;
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (xs.len() - ddof) as f64
}

/// Whether an engine value matches the oracle's for feature `index` (NaN = missing on both).
pub fn feature_matches(index: usize, expected: f64, got: f64) -> bool {
    if expected.is_nan() || got.is_nan() {
        return expected.is_nan() && got.is_nan();
    }
    if is_variance(index) {
        (expected - got).abs() <= VARIANCE_TOLERANCE * expected.abs().max(1.0)
    } else {
        expected.to_bits() == got.to_bits() || expected == got
    }
}

/// [`FEATURES_TOML`] over the secondary window `window`: every name (and ratio input) gets
/// the suffix `_<window>`, every feature `window = "<window>"`.
pub fn features_over(window: &str) -> String {
    let mut out = String::new();
    for line in FEATURES_TOML.lines() {
        let renamed = ["name", "numerator", "denominator"]
            .iter()
            .find_map(|field| {
                let value = line
                    .strip_prefix(&format!("{field} = \""))?
                    .strip_suffix('"')?;
                Some(format!("{field} = \"{value}_{window}\""))
            });
        match renamed {
            Some(line) if line.starts_with("name") => {
                out.push_str(&format!("{line}\nwindow = \"{window}\"\n"));
            }
            Some(line) => out.push_str(&format!("{line}\n")),
            None => out.push_str(&format!("{line}\n")),
        }
    }
    out
}

/// The schedule trigger's rows, recomputed naively: for every multiple `T` of `every` and
/// every key, each group's window as of `T` — an aligned group's window ending at the latest
/// end `<= T`, a session group's latest session ending in `(T - every, T]` — and a row
/// `(key, T - every, T)` with the groups' features side by side (empty-window features for a
/// group without such a window) when at least one group has one.
pub fn scheduled_rows(events: &[Ev], groups: &[Kind], every: i64) -> BTreeMap<WindowId, Vec<f64>> {
    let memberships: Vec<BTreeMap<WindowId, Vec<usize>>> =
        groups.iter().map(|&kind| windows(events, kind)).collect();
    let keys: BTreeSet<String> = events.iter().map(|e| key_name(e.key)).collect();
    let latest = events.iter().map(|e| e.ts).max().unwrap_or(T0);
    let mut rows = BTreeMap::new();
    let mut at = T0.div_euclid(every) * every;
    while at <= latest + 10 * every + 240_000 {
        for key in &keys {
            let mut values = Vec::new();
            let mut any = false;
            for (kind, windows) in groups.iter().zip(&memberships) {
                let members = match *kind {
                    Kind::Aligned { size, slide } => {
                        // Windows are [k·slide, k·slide + size): the latest end <= T.
                        let end = (at - size).div_euclid(slide) * slide + size;
                        windows.get(&(key.clone(), end - size, end))
                    }
                    Kind::Session { .. } | Kind::GreedySession { .. } => windows
                        .iter()
                        .filter(|((k, _, end), _)| k == key && *end > at - every && *end <= at)
                        .max_by_key(|((_, _, end), _)| *end)
                        .map(|(_, members)| members),
                };
                any |= members.is_some();
                values.extend(features(events, members.map_or(&[][..], Vec::as_slice)));
            }
            if any {
                rows.insert((key.clone(), at - every, at), values);
            }
        }
        at += every;
    }
    rows
}
