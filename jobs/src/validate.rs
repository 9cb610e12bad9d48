//! `weir validate job.toml`: every check `weir run` makes before it starts ([`crate::preflight`],
//! the job file's compilation with the CPU budget, the checkpoint store), run to the end
//! instead of stopping at the first failure, one line per check. A check that needs what an
//! earlier one could not give (the models need the compiled settings) is reported as skipped,
//! with the reason; the checks that need only the job file (the brokers and topics) still run.

use std::fmt;
use std::path::PathBuf;

use anyhow::Result;

use crate::checkpointing::{self, RestoreChoice};
use crate::config::{CompiledJob, JobFile};
use crate::plan::SourceInput;
use crate::preflight;

/// `weir validate`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// The job file (TOML).
    pub job: PathBuf,
    /// Kafka bootstrap servers (overrides [kafka] bootstrap.servers).
    #[arg(long)]
    pub brokers: Option<String>,
    /// Path of libonnxruntime.so (as for `weir run`).
    #[arg(long)]
    pub ort_lib: Option<PathBuf>,
}

/// What one check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed; what it saw.
    Passed(String),
    /// Passed, with something the user should know.
    Warning(String),
    /// A problem that would stop `weir run` (or break the job).
    Failed(String),
    /// Not run, and why.
    Skipped(String),
}

/// One check and its outcome.
#[derive(Clone, Debug)]
pub struct Finding {
    /// What was checked: `job file`, `settings`, `brokers and topics`, `ONNX Runtime`,
    /// `models`, `input files`, `checkpoints`.
    pub check: &'static str,
    /// What it found.
    pub outcome: Outcome,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (label, text) = match &self.outcome {
            Outcome::Passed(text) => ("ok", text),
            Outcome::Warning(text) => ("warning", text),
            Outcome::Failed(text) => ("FAILED", text),
            Outcome::Skipped(text) => ("skipped", text),
        };
        write!(f, "{label:<8} {:<19} {text}", self.check)
    }
}

/// Every finding on the job file `args.job`.
pub fn validate(args: &ValidateArgs) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut note = |check, outcome| findings.push(Finding { check, outcome });
    let job = match JobFile::load_with_brokers(&args.job, args.brokers.as_deref()) {
        Ok(job) => {
            note(
                "job file",
                Outcome::Passed(format!("{} read", args.job.display())),
            );
            job
        }
        Err(error) => {
            note("job file", failed(&error));
            return findings;
        }
    };
    let compiled = job.clone().compile();
    note(
        "settings",
        match &compiled {
            Ok(c) => Outcome::Passed(format!(
                "job `{}`: {} worker(s) × {} process(es), parallelism source={} window={} \
                 score={} sink={}, CPU budget fits",
                c.name,
                c.runtime.workers,
                c.runtime.processes,
                c.parallelism.source,
                c.parallelism.window,
                c.parallelism.score,
                c.parallelism.sink
            )),
            Err(error) => failed(error),
        },
    );
    note("brokers and topics", topics(&job, compiled.as_ref().ok()));
    let Ok(compiled) = compiled else {
        let reason = "the settings do not compile";
        for check in ["models", "input files", "checkpoints"] {
            note(check, Outcome::Skipped(reason.to_owned()));
        }
        return findings;
    };
    if compiled.score.is_none() {
        note(
            "models",
            Outcome::Warning(
                "no [model] section: a features-only job (`weir features`); `weir run` needs one"
                    .to_owned(),
            ),
        );
    } else {
        match weir_score::init_onnx_runtime(args.ort_lib.as_deref()) {
            Ok(library) => {
                note(
                    "ONNX Runtime",
                    Outcome::Passed(format!("{} loaded", library.display())),
                );
                note("models", models(&compiled));
            }
            Err(error) => {
                note("ONNX Runtime", failed(&error.into()));
                note(
                    "models",
                    Outcome::Skipped("ONNX Runtime is not loaded".to_owned()),
                );
            }
        }
    }
    note(
        "input files",
        match (&compiled.source.input, preflight::input_files(&compiled)) {
            (SourceInput::Kafka(_), _) => Outcome::Skipped("the source is Kafka".to_owned()),
            (_, Ok(())) => Outcome::Passed("every input file exists".to_owned()),
            (_, Err(error)) => failed(&error),
        },
    );
    note("checkpoints", checkpoints(&compiled));
    findings
}

/// Prints `findings` and a closing line; an error when any check failed.
pub fn report(findings: &[Finding]) -> Result<()> {
    for finding in findings {
        println!("{finding}");
    }
    let problems = findings
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Failed(_)))
        .count();
    if problems > 0 {
        anyhow::bail!("{problems} problem(s) found");
    }
    println!("the job file is valid");
    Ok(())
}

fn failed(error: &anyhow::Error) -> Outcome {
    Outcome::Failed(format!("{error:#}"))
}

/// The brokers answer and list the job's topics (from the job file alone); with the compiled
/// settings also whether the source has more instances than partitions.
fn topics(job: &JobFile, compiled: Option<&CompiledJob>) -> Outcome {
    let Some(check) = job.topic_check() else {
        return Outcome::Skipped("the job uses no Kafka".to_owned());
    };
    let partitions = match preflight::topic_partitions(&check) {
        Ok(partitions) => partitions,
        Err(error) => return failed(&error),
    };
    let listed: Vec<String> = partitions
        .iter()
        .map(|(topic, n)| format!("{topic} ({n} partition(s))"))
        .collect();
    let brokers = check
        .properties
        .get("bootstrap.servers")
        .map_or("(no bootstrap.servers)", String::as_str);
    let seen = format!("{brokers}: {}", listed.join(", "));
    match compiled.and_then(|c| preflight::idle_source_instances(c, &partitions)) {
        Some(warning) => Outcome::Warning(format!("{seen}; {warning}")),
        None => Outcome::Passed(seen),
    }
}

/// The models load and fit the features.
fn models(job: &CompiledJob) -> Outcome {
    match preflight::models(job) {
        Ok(versions) => {
            let versions: Vec<String> = versions
                .iter()
                .map(|(name, version)| format!("{name} {version}"))
                .collect();
            Outcome::Passed(format!(
                "{} loaded; the job's {} features are its inputs",
                versions.join(", "),
                job.features.names().len()
            ))
        }
        Err(error) => failed(&error),
    }
}

/// The checkpoint store opens and what a run would restore.
fn checkpoints(job: &CompiledJob) -> Outcome {
    let mut run = job.clone();
    match checkpointing::prepare(&mut run, RestoreChoice::Auto) {
        Ok(None) => Outcome::Skipped("no [checkpoint] section".to_owned()),
        Ok(Some(plan)) => Outcome::Passed(match (&plan.restore, &run.source.input) {
            (Some(manifest), SourceInput::Files { split, .. })
                if run.topology_hash != job.topology_hash =>
            {
                format!(
                    "a run would restore checkpoint {}, reading the files in the {split} it was written with",
                    manifest.epoch.0
                )
            }
            (Some(manifest), _) => {
                format!("a run would restore checkpoint {}", manifest.epoch.0)
            }
            (None, _) => "no checkpoint yet: a run would start fresh".to_owned(),
        }),
        Err(error) => failed(&error),
    }
}
