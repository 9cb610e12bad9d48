//! The registry's control file, `<root>/<name>/CONTROL`: what a platform engineer writes to
//! change the served versions at run time (DESIGN.md §6, hot reload; docs/MODEL_MANIFEST.md).
//!
//! Read by the registry (`crate::registry`) every poll of every inference thread. One
//! directive per line; `#` starts a comment, blank lines are ignored:
//!
//! ```text
//! pin v3            # or: latest / rollback v3 (the primary version; no line = latest)
//! canary v4 5%      # v4 scores 5 % of the keys instead of the primary (also: 0.05)
//! shadow v4         # or: v4 scores every row beside the primary
//! ```
//!
//! At most one primary line and at most one `canary`/`shadow` line. An error names the line
//! and says what to write instead; the registry reports it as a registry error, and a running
//! job keeps serving what it served.

use crate::canary::CANARY_BUCKETS;
use crate::secondary::SecondaryRole;

/// File name of the control file in a model's registry directory.
pub const CONTROL_FILE: &str = "CONTROL";

/// What the control file asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Control {
    /// Which version serves as the primary.
    pub primary: Primary,
    /// A second version of the same model (a `canary` or `shadow` line), if any.
    pub second: Option<SecondVersion>,
}

/// The control file's choice of primary version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Primary {
    /// Serve the newest version (also: no control file, or no such line).
    #[default]
    Latest,
    /// Serve this version (`pin <version>` or `rollback <version>`).
    Pin(String),
}

/// A `canary <version> <share>` or `shadow <version>` line.
#[derive(Clone, Debug, PartialEq)]
pub struct SecondVersion {
    /// The version directory.
    pub version: String,
    /// Canary (with its share) or shadow.
    pub role: SecondaryRole,
}

/// The directives a control file understands, for error messages.
const DIRECTIVES: &str = "`latest`, `pin <version>`, `rollback <version>`, \
                          `canary <version> <share>` or `shadow <version>`";

/// Parses a control file: one directive per line, blank lines and `#` comments skipped; at
/// most one of `latest` / `pin <version>` / `rollback <version>` (the primary) and at most
/// one of `canary <version> <share>` / `shadow <version>` (the second version). An error
/// names the line (`line 2: ...`) and says what to write instead.
pub fn parse_control(text: &str) -> Result<Control, String> {
    let mut control = Control::default();
    let mut primary_line: Option<(usize, &str)> = None;
    let mut second_line: Option<(usize, &str)> = None;
    // Editors that save a byte order mark put it before the first directive.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (at, raw) in text.lines().enumerate() {
        let n = at + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(directive) = words.first() else {
            continue;
        };
        let problem = |p: String| format!("line {n}: {p}");
        match *directive {
            "latest" | "pin" | "rollback" => {
                if let Some((m, first)) = primary_line {
                    return Err(problem(format!(
                        "`{line}` after `{first}` (line {m}); keep one of `latest`, \
                         `pin <version>` and `rollback <version>`"
                    )));
                }
                control.primary = parse_primary(line, &words).map_err(problem)?;
                primary_line = Some((n, line));
            }
            "canary" | "shadow" => {
                if let Some((m, first)) = second_line {
                    return Err(problem(format!(
                        "`{line}` after `{first}` (line {m}); run one second version at a \
                         time: keep one `canary` or `shadow` line"
                    )));
                }
                control.second = Some(parse_second(line, &words).map_err(problem)?);
                second_line = Some((n, line));
            }
            _ => {
                return Err(problem(format!(
                    "unknown directive `{line}`; write {DIRECTIVES}"
                )))
            }
        }
    }
    Ok(control)
}

/// `latest`, `pin <version>` or `rollback <version>`, split into `words`.
fn parse_primary(line: &str, words: &[&str]) -> Result<Primary, String> {
    match words {
        ["latest"] => Ok(Primary::Latest),
        ["latest", ..] => Err(format!("`{line}`: `latest` takes nothing after it")),
        [_, version] => Ok(Primary::Pin((*version).to_owned())),
        [directive] => Err(format!("`{line}` needs a version, e.g. `{directive} v3`")),
        [directive, ..] => Err(format!("`{line}` takes one version, e.g. `{directive} v3`")),
        [] => Err(format!("unknown directive `{line}`; write {DIRECTIVES}")),
    }
}

/// `canary <version> <share>` or `shadow <version>`, split into `words`.
fn parse_second(line: &str, words: &[&str]) -> Result<SecondVersion, String> {
    let second = |version: &str, role| SecondVersion {
        version: version.to_owned(),
        role,
    };
    match words {
        ["shadow", version] => Ok(second(version, SecondaryRole::Shadow)),
        ["shadow"] => Err(format!("`{line}` needs a version, e.g. `shadow v4`")),
        ["shadow", version, ..] => Err(format!(
            "`{line}`: a shadow takes only a version (it scores every row beside the \
             primary); for a share of the keys write `canary {version} 5%`"
        )),
        ["canary", version, share] => {
            let share = parse_share(share).map_err(|p| format!("`{line}`: {p}"))?;
            Ok(second(version, SecondaryRole::Canary { share }))
        }
        ["canary"] => Err(format!(
            "`{line}` needs a version and a share, e.g. `canary v4 5%`"
        )),
        ["canary", version] => Err(format!(
            "`{line}` needs a share, e.g. `canary {version} 5%`"
        )),
        _ => Err(format!(
            "`{line}` takes a version and a share, e.g. `canary v4 5%`"
        )),
    }
}

/// A canary share: a percentage (`5%`, `12.5%`, `100%`) or a fraction below 1 (`0.05`); see
/// [`check_share`]. A bare number from 1 to 100 is refused as ambiguous (`1` could mean 1 %
/// or every key).
pub fn parse_share(word: &str) -> Result<f64, String> {
    let (number, percent) = match word.strip_suffix('%') {
        Some(number) => (number, true),
        None => (word, false),
    };
    let value: f64 = number.parse().map_err(|_| {
        format!(
            "the share `{word}` is not a number; write a percentage (`5%`) or a fraction (`0.05`)"
        )
    })?;
    let share = if percent { value / 100.0 } else { value };
    if !percent && (1.0..=100.0).contains(&value) {
        return Err(format!(
            "the share `{word}` is ambiguous; write `{word}%` for a percentage, `100%` for \
             every key, or a fraction below 1 such as `0.05`"
        ));
    }
    check_share(share).map_err(|problem| format!("the share `{word}` {problem}"))?;
    Ok(share)
}

/// A canary share must be above 0, at most 1 (every key) and at least the canary split's
/// resolution (1 / [`CANARY_BUCKETS`], 0.01 %): a smaller one would load the canary and give
/// it no key. The error completes "the share ... ".
pub fn check_share(share: f64) -> Result<(), String> {
    if !(share > 0.0 && share <= 1.0) {
        return Err(
            "must be above 0 and at most 100% (1.0); to stop the canary, remove it".to_owned(),
        );
    }
    if share * (CANARY_BUCKETS as f64) < 1.0 {
        return Err(format!(
            "is below the canary split's resolution of {}%, so no key would be in it",
            100.0 / CANARY_BUCKETS as f64
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(version: &str) -> Primary {
        Primary::Pin(version.into())
    }

    fn canary(version: &str, share: f64) -> Option<SecondVersion> {
        Some(SecondVersion {
            version: version.into(),
            role: SecondaryRole::Canary { share },
        })
    }

    /// The error of `text`, which must not parse.
    fn error(text: &str) -> String {
        match parse_control(text) {
            Ok(control) => panic!("{text:?} parsed as {control:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn primary_directives_keep_their_one_line_forms() {
        assert_eq!(parse_control(""), Ok(Control::default()));
        assert_eq!(
            parse_control("# nothing\n\n latest \n"),
            Ok(Control::default())
        );
        assert_eq!(parse_control("pin v3").map(|c| c.primary), Ok(pin("v3")));
        assert_eq!(
            parse_control("rollback 2026-11-30.1 # bad canary\n"),
            Ok(Control {
                primary: pin("2026-11-30.1"),
                second: None
            })
        );
    }

    #[test]
    fn a_second_version_beside_the_primary() {
        let text = "# rollout of v4\npin v3\n\ncanary v4 5%   # ramp to 50% tomorrow\n";
        assert_eq!(
            parse_control(text),
            Ok(Control {
                primary: pin("v3"),
                second: canary("v4", 0.05)
            })
        );
        // A fraction, the second version first, and no primary line (= latest).
        assert_eq!(
            parse_control("canary v4 0.05\nlatest"),
            Ok(Control {
                primary: Primary::Latest,
                second: canary("v4", 0.05)
            })
        );
        assert_eq!(
            parse_control("shadow v4").map(|c| c.second),
            Ok(Some(SecondVersion {
                version: "v4".into(),
                role: SecondaryRole::Shadow
            }))
        );
        assert_eq!(
            parse_control("canary v4 100%").map(|c| c.second),
            Ok(canary("v4", 1.0))
        );
        assert_eq!(
            parse_control("canary v4 12.5%").map(|c| c.second),
            Ok(canary("v4", 0.125))
        );
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_directive() {
        assert_eq!(
            parse_control("\u{feff}pin v3\n").map(|c| c.primary),
            Ok(pin("v3"))
        );
    }

    #[test]
    fn shares_as_percentages_and_fractions_agree() {
        for (percent, fraction) in [("5%", "0.05"), ("50%", "0.5"), ("0.01%", "0.0001")] {
            assert_eq!(parse_share(percent), parse_share(fraction), "{percent}");
        }
    }

    #[test]
    fn errors_name_the_line_and_what_to_write() {
        let cases = [
            ("pin", "line 1: `pin` needs a version, e.g. `pin v3`"),
            ("pin a b", "line 1: `pin a b` takes one version"),
            ("latest now", "`latest` takes nothing after it"),
            (
                "latest\npin v1",
                "line 2: `pin v1` after `latest` (line 1); keep one",
            ),
            (
                "use v1",
                "line 1: unknown directive `use v1`; write `latest`",
            ),
            (
                "pin v3\ncanary v4",
                "line 2: `canary v4` needs a share, e.g. `canary v4 5%`",
            ),
            ("canary", "needs a version and a share"),
            ("canary v4 5% now", "takes a version and a share"),
            ("shadow", "`shadow` needs a version, e.g. `shadow v4`"),
            (
                "shadow v4 5%",
                "for a share of the keys write `canary v4 5%`",
            ),
            (
                "shadow v4\n\ncanary v5 5%",
                "line 3: `canary v5 5%` after `shadow v4` (line 1); run one second version",
            ),
            ("canary v4 five", "the share `five` is not a number"),
            ("canary v4 5", "the share `5` is ambiguous; write `5%`"),
            ("canary v4 1", "the share `1` is ambiguous; write `1%`"),
            ("canary v4 1.0", "`100%` for every key"),
            ("canary v4 0%", "must be above 0 and at most 100%"),
            ("canary v4 150%", "must be above 0 and at most 100%"),
            ("canary v4 -0.1", "must be above 0 and at most 100%"),
            ("canary v4 NaN", "must be above 0 and at most 100%"),
            (
                "canary v4 0.001%",
                "below the canary split's resolution of 0.01%",
            ),
            (
                "canary v4 0.008%",
                "below the canary split's resolution of 0.01%",
            ),
        ];
        for (text, expected) in cases {
            let error = error(text);
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }
}
