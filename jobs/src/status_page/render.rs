//! The status page's HTML, rendered on the server from a [`StatusSnapshot`]: the whole page
//! ([`page`]) and the live part the page's script fetches and swaps in place ([`live`]).
//! Plain HTML and CSS bars (no chart library, nothing fetched from elsewhere); the style
//! and the script are `assets/` files embedded at build time.

use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use weir_features::vocab::Watermark;
use weir_operators::metrics::{Operator, PartitionView};
use weir_score::drift::VersionView;

use super::snapshot::{ModelView, StageView, StatusSnapshot};
use super::LIVE_PATH;

const STYLE: &str = include_str!("assets/status.css");
const SCRIPT: &str = include_str!("assets/refresh.js");

/// The whole page: the live part inside the frame that refreshes it.
pub fn page(status: &StatusSnapshot) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>weir · {job}</title><style>{STYLE}</style></head>\n\
         <body data-refreshes=\"0\" data-live=\"{LIVE_PATH}\"><header><h1>weir · {job}</h1>\
         <nav><a href=\"/metrics\">/metrics</a> <a href=\"/healthz\">/healthz</a> \
         <a href=\"/readyz\">/readyz</a></nav></header>\n<main id=\"live\">{live}</main>\n\
         <footer id=\"refresh-state\">refreshed in place every second</footer>\
         <script>{SCRIPT}</script></body></html>\n",
        job = escape(&status.job),
        live = live(status),
    )
}

/// The part of the page that changes.
pub fn live(status: &StatusSnapshot) -> String {
    let mut html = format!(
        "<p class=\"meta\">process {} of {} · read at <time id=\"read-at\">{}</time> · \
         {} dead letters</p>\n",
        status.process,
        status.processes,
        utc(status.now_ms),
        status.dead_letters,
    );
    dataflow(&mut html, &status.stages);
    partitions(&mut html, &status.partitions, status.holding_back);
    checkpoints(&mut html, status);
    models(&mut html, &status.models, status.drift_alert);
    html
}

fn dataflow(html: &mut String, stages: &[StageView]) {
    html.push_str("<section id=\"dataflow\"><h2>Dataflow</h2><ol class=\"flow\">");
    for stage in stages {
        let rate = stage.per_second.map_or("–".to_owned(), |(i, o)| {
            format!("{} in/s · {} out/s", count(i), count(o))
        });
        let _ = write!(
            html,
            "<li class=\"stage\" data-stage=\"{name}\"><h3>{name}</h3>\
             <p class=\"parallelism\">parallelism {p}</p><p class=\"rate\">{rate}</p>\
             <p class=\"total\">{i} in · {o} out</p></li>",
            name = stage_name(stage.operator),
            p = stage.parallelism,
            i = stage.records.0,
            o = stage.records.1,
        );
    }
    html.push_str("</ol></section>\n");
}

fn stage_name(operator: Operator) -> &'static str {
    match operator {
        Operator::ScoreSink => "sink",
        Operator::DeadLetterSink => "dead-letter sink",
        other => other.as_str(),
    }
}

fn partitions(html: &mut String, partitions: &[PartitionView], holding: Option<i32>) {
    html.push_str(
        "<section id=\"partitions\"><h2>Partitions</h2><table><thead><tr><th>partition</th>\
         <th>lag (records)</th><th>watermark</th><th>behind the clock</th><th>state</th></tr>\
         </thead><tbody>",
    );
    if partitions.is_empty() {
        html.push_str("<tr><td colspan=\"5\">no partition assigned yet</td></tr>");
    }
    for p in partitions {
        let holds = holding == Some(p.partition);
        let (watermark, state) = match p.watermark {
            Watermark::MIN => ("no event yet".to_owned(), "waiting"),
            Watermark::MAX => ("finished".to_owned(), "finished"),
            wm => (utc(wm.0.max(0) as u64), "reading"),
        };
        let state = match (holds, p.idle) {
            (true, _) => "holding the watermark back",
            (false, true) => "idle",
            (false, false) => state,
        };
        let _ = write!(
            html,
            "<tr data-partition=\"{n}\"{class}><td>{n}</td><td>{lag}</td><td>{watermark}</td>\
             <td>{delay:.1} s</td><td>{state}</td></tr>",
            n = p.partition,
            class = if holds { " class=\"holding\"" } else { "" },
            lag = p.lag,
            delay = p.delay_seconds,
        );
    }
    html.push_str("</tbody></table></section>\n");
}

fn checkpoints(html: &mut String, status: &StatusSnapshot) {
    let (committed, recent) = &status.checkpoints;
    let _ = write!(
        html,
        "<section id=\"checkpoints\"><h2>Checkpoints</h2><p>{committed} committed by this \
         process · {} restored at start</p><table><thead><tr><th>epoch</th><th>age</th>\
         <th>duration</th><th>size</th></tr></thead><tbody>",
        status.restores
    );
    if recent.is_empty() {
        html.push_str("<tr><td colspan=\"4\">none committed yet</td></tr>");
    }
    for commit in recent {
        let age = status.now_ms.saturating_sub(commit.committed_ms);
        let _ = write!(
            html,
            "<tr data-epoch=\"{e}\"><td>{e}</td><td>{age:.1} s</td><td>{d} ms</td><td>{size}</td></tr>",
            e = commit.epoch,
            age = age as f64 / 1e3,
            d = commit.duration_ms,
            size = bytes(commit.bytes),
        );
    }
    html.push_str("</tbody></table></section>\n");
}

fn models(html: &mut String, models: &[ModelView], drift_alert: Option<f64>) {
    html.push_str("<section id=\"models\"><h2>Models</h2>");
    if models.is_empty() {
        html.push_str("<p>no model served in this process</p>");
    }
    for model in models {
        let (name, version) = (escape(&model.tag.name), escape(&model.tag.version));
        let serving: Vec<String> = model
            .serving
            .iter()
            .map(|(instance, role)| format!("instance {instance} ({})", escape(role)))
            .collect();
        let serving = match serving.is_empty() {
            true => "not served now".to_owned(),
            false => format!("served by {}", serving.join(", ")),
        };
        let _ = write!(
            html,
            "<article class=\"model\" data-model=\"{name}\" data-version=\"{version}\">\
             <h3>{name} version {version}</h3><p class=\"serving\">{serving}</p>"
        );
        match &model.scores {
            Some(scores) => histogram(html, scores, drift_alert),
            None => html.push_str("<p class=\"drift\">no scores yet</p>"),
        }
        html.push_str("</article>");
    }
    html.push_str("</section>\n");
}

fn histogram(html: &mut String, scores: &VersionView, drift_alert: Option<f64>) {
    let psi = scores
        .psi
        .map_or("PSI – (too few scores yet)".to_owned(), |psi| {
            format!("PSI <b class=\"psi\">{psi:.4}</b>")
        });
    let threshold = drift_alert.map_or(String::new(), |t| format!(" (alert over {t})"));
    let alert = if scores.drift_alert {
        " <span class=\"alert\">drift alert</span>"
    } else {
        ""
    };
    let errors = scores.error_rate.map_or(String::new(), |r| {
        format!(" · error rate {:.2} %", r * 100.0)
    });
    let _ = write!(
        html,
        "<p class=\"drift\">{psi}{threshold}{alert} · {} rows in the drift window{errors}</p>\
         <table class=\"histogram\"><thead><tr><th>score ≥</th><th>live ▮ against baseline ▯\
         </th></tr></thead><tbody>",
        scores.rows
    );
    let total: u64 = scores.live.iter().sum();
    let live: Vec<f64> = scores
        .live
        .iter()
        .map(|n| *n as f64 / total.max(1) as f64)
        .collect();
    let widest = live
        .iter()
        .chain(&scores.baseline_share)
        .fold(f64::EPSILON, |a, b| a.max(*b));
    for ((edge, live), base) in scores
        .lower_edges
        .iter()
        .zip(&live)
        .zip(&scores.baseline_share)
    {
        let _ = write!(
            html,
            "<tr><td>{edge}</td><td><div class=\"bars\"><span class=\"bar live\" \
             style=\"width:{lw:.1}%\"></span><span class=\"bar baseline\" style=\"width:{bw:.1}%\">\
             </span></div><span class=\"shares\">{l:.1} % · {b:.1} %</span></td></tr>",
            lw = live / widest * 100.0,
            bw = base / widest * 100.0,
            l = live * 100.0,
            b = base * 100.0,
        );
    }
    html.push_str("</tbody></table>");
}

/// `ms` since the Unix epoch as RFC 3339 UTC.
fn utc(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// A rate, without decimals once it is large.
fn count(per_second: f64) -> String {
    if per_second >= 100.0 {
        format!("{per_second:.0}")
    } else {
        format!("{per_second:.1}")
    }
}

/// A size in bytes, KiB or MiB.
fn bytes(n: u64) -> String {
    match n {
        0..1_024 => format!("{n} B"),
        1_024..1_048_576 => format!("{:.1} KiB", n as f64 / 1_024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{bytes, escape};

    #[test]
    fn names_are_escaped_and_sizes_read_in_units() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(
            [bytes(512), bytes(2_048), bytes(3 << 20)],
            ["512 B", "2.0 KiB", "3.0 MiB"]
        );
    }
}
