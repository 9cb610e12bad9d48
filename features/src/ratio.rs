//! The `ratio` aggregate: `numerator / denominator`, where both are other features of the
//! same window. It keeps no state of its own; the window stage computes it from its inputs'
//! values when a window fires, inputs first (ratios of ratios allowed, cycles rejected).

use crate::aggregate::AggKind;
use crate::error::{FeatureError, Result};
use crate::feature_spec::FeatureSpec;

/// `numerator / denominator`; missing (NaN) when either is missing, the denominator is 0,
/// or the quotient overflows.
pub fn divide(numerator: f64, denominator: f64) -> f64 {
    let q = numerator / denominator;
    if denominator == 0.0 || !q.is_finite() {
        f64::NAN
    } else {
        q
    }
}

/// Resolved ratio inputs: per feature, the indices of its numerator and denominator
/// (`None` for other kinds); and the ratio features in an order where each comes after the
/// ratios it reads.
pub(crate) type Resolved = (Vec<Option<(usize, usize)>>, Vec<usize>);

/// Checks `numerator`/`denominator` of every spec and orders the ratios.
pub(crate) fn resolve(specs: &[FeatureSpec]) -> Result<Resolved> {
    let mut inputs = Vec::with_capacity(specs.len());
    for spec in specs {
        let fail = |message: String| FeatureError::Feature {
            feature: spec.name.clone(),
            message,
        };
        if spec.agg != AggKind::Ratio {
            if spec.numerator.is_some() || spec.denominator.is_some() {
                return Err(fail(
                    "`numerator`/`denominator` only apply to agg = \"ratio\"".to_owned(),
                ));
            }
            inputs.push(None);
            continue;
        }
        if spec.filter.is_some() {
            return Err(fail(
                "ratio takes no `where`; put it on the numerator and denominator features"
                    .to_owned(),
            ));
        }
        let find = |role: &str, name: &Option<String>| -> Result<usize> {
            let name = name.as_deref().ok_or_else(|| {
                fail(format!(
                    "ratio needs `{role} = \"<feature name>\"` (another feature of the same window)"
                ))
            })?;
            if name == spec.name {
                return Err(fail(format!("the {role} is the ratio itself")));
            }
            let at = specs
                .iter()
                .position(|s| s.name == name)
                .ok_or_else(|| fail(format!("the {role} `{name}` is not a feature of this job")))?;
            if specs[at].window != spec.window {
                return Err(fail(format!(
                    "the {role} `{name}` is computed over window {}, the ratio over {}; \
                     both must use the same window",
                    window_name(&specs[at].window),
                    window_name(&spec.window)
                )));
            }
            Ok(at)
        };
        inputs.push(Some((
            find("numerator", &spec.numerator)?,
            find("denominator", &spec.denominator)?,
        )));
    }
    let order = order(specs, &inputs)?;
    Ok((inputs, order))
}

fn window_name(window: &Option<String>) -> String {
    window
        .as_deref()
        .map_or_else(|| "(default)".to_owned(), |w| format!("`{w}`"))
}

/// Depth-first topological order of the ratio features; an error names a feature on a cycle.
fn order(specs: &[FeatureSpec], inputs: &[Option<(usize, usize)>]) -> Result<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Visiting,
        Done,
    }
    let mut marks = vec![Mark::New; inputs.len()];
    let mut order = Vec::new();
    // Explicit stack of (feature, inputs pushed yet?) so deep chains cannot overflow.
    for root in 0..inputs.len() {
        let mut stack = vec![(root, false)];
        while let Some((i, expanded)) = stack.pop() {
            match (marks[i], expanded) {
                (Mark::Done, _) => {}
                (Mark::Visiting, true) => {
                    marks[i] = Mark::Done;
                    if inputs[i].is_some() {
                        order.push(i);
                    }
                }
                (Mark::Visiting, false) => {
                    return Err(FeatureError::Feature {
                        feature: specs[i].name.clone(),
                        message: "its numerator/denominator chain leads back to itself \
                                  (ratio cycle)"
                            .to_owned(),
                    })
                }
                (Mark::New, _) => {
                    marks[i] = Mark::Visiting;
                    stack.push((i, true));
                    if let Some((n, d)) = inputs[i] {
                        stack.push((n, false));
                        stack.push((d, false));
                    }
                }
            }
        }
    }
    Ok(order)
}
