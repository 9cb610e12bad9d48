//! The checks a run makes before any worker starts, one function each: input files, models
//! against the job's features, the Kafka topics. `run` calls them in order and stops at the
//! first failure; `weir validate` ([`crate::validate`]) calls every one and lists each
//! problem.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use weir_kafka::admin::TopicMetadata;
use weir_kafka::KafkaEdgeError;
use weir_score::reload::check_registry_tag;
use weir_score::{ModelManifest, ModelSession};

use crate::config::CompiledJob;
use crate::plan::{SourceInput, TopicCheck};

/// Every input file of a file source exists and is in a format the file source reads.
pub fn input_files(job: &CompiledJob) -> Result<()> {
    if let SourceInput::Files { paths, .. } = &job.source.input {
        for path in paths {
            if !path.is_file() {
                bail!("input file {} does not exist", path.display());
            }
            // A compression the source does not read, or a name that contradicts the bytes.
            weir_operators::input_file::InputFile::open(path)?;
        }
    }
    Ok(())
}

/// Every model the run starts with loads and fits the job's features (needs ONNX Runtime
/// loaded). Returns the model's version by model name.
pub fn models(job: &CompiledJob) -> Result<BTreeMap<String, String>> {
    let score = job.score()?;
    let check = score.preflight_session();
    // A registry version must load and its manifest match its directory, as on the
    // inference threads (which pass over a newest version that does not, like this).
    // The directories loaded there are not loaded again below.
    let loaded = std::cell::RefCell::new(Vec::new());
    let (model_dir, second) = score.initial_models(|target| {
        let session = ModelSession::load(&target.dir, job.features.names(), &check)?;
        check_registry_tag(score.model_name(), target, &session)?;
        loaded.borrow_mut().push(target.dir.clone());
        Ok(())
    })?;
    let loaded = loaded.into_inner();
    let dirs = std::iter::once(model_dir).chain(second.map(|s| s.dir));
    let mut versions = BTreeMap::new();
    for model_dir in dirs {
        if !loaded.contains(&model_dir) {
            ModelSession::load(&model_dir, job.features.names(), &check).with_context(|| {
                format!(
                    "model {} does not fit job `{}`",
                    model_dir.display(),
                    job.name
                )
            })?;
        }
        let model = ModelManifest::load(&model_dir)?;
        // The primary's version, also when the second version has the same model name.
        versions.entry(model.name).or_insert(model.version);
    }
    Ok(versions)
}

/// The brokers answer and list every topic of `check`: partitions by topic.
pub fn topic_partitions(check: &TopicCheck) -> Result<BTreeMap<String, usize>> {
    let metadata =
        TopicMetadata::connect(&check.properties).context("cannot create a Kafka client")?;
    let mut partitions = BTreeMap::new();
    for topic in &check.topics {
        let count = metadata.partitions(topic).map_err(topic_unavailable)?;
        partitions.insert(topic.clone(), count);
    }
    Ok(partitions)
}

/// A topic the broker does not list: what to run to create it.
fn topic_unavailable(error: KafkaEdgeError) -> anyhow::Error {
    match error {
        KafkaEdgeError::Topic {
            topic,
            brokers,
            detail,
        } => anyhow!("topic `{topic}` is not available on {brokers}: {detail}; create the job's topics with `weir topics <job.toml> --partitions N`"),
        other => other.into(),
    }
}

/// What to say when a Kafka source has more instances than its topic (in `partitions`, from
/// [`topic_partitions`]) has partitions: the extra ones read nothing (partition `p` goes to
/// instance `p % parallelism`).
pub fn idle_source_instances(
    job: &CompiledJob,
    partitions: &BTreeMap<String, usize>,
) -> Option<String> {
    let kafka = job.source.kafka()?;
    let count = *partitions.get(&kafka.topic)?;
    let discovery = kafka.partition_discovery.filter(|_| !job.source.bounded);
    idle_source_warning(job.parallelism.source, count, &kafka.topic, discovery)
}

fn idle_source_warning(
    parallelism: usize,
    partitions: usize,
    topic: &str,
    discovery: Option<Duration>,
) -> Option<String> {
    if parallelism <= partitions {
        return None;
    }
    let until = match discovery {
        Some(every) => format!(
            " until the topic gets more partitions (looked for every {} s)",
            every.as_secs_f64()
        ),
        None => String::new(),
    };
    Some(format!(
        "source parallelism {parallelism} is more than the {partitions} partition(s) of topic \
         `{topic}`: {} source instance(s) read nothing{until}; set [parallelism] source (or \
         --parallelism source=N) to at most {partitions}, or add partitions",
        parallelism - partitions
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::idle_source_warning;

    #[test]
    fn more_source_instances_than_partitions_are_named() {
        assert_eq!(idle_source_warning(4, 4, "clicks", None), None);
        assert_eq!(idle_source_warning(2, 8, "clicks", None), None);
        let warning = idle_source_warning(6, 4, "clicks", Some(Duration::from_millis(10_000)))
            .unwrap_or_default();
        assert!(
            warning.starts_with(
                "source parallelism 6 is more than the 4 partition(s) of topic `clicks`: 2 \
                 source instance(s) read nothing until the topic gets more partitions (looked \
                 for every 10 s)"
            ),
            "{warning}"
        );
        let bounded = idle_source_warning(6, 4, "clicks", None).unwrap_or_default();
        assert!(
            bounded.contains("read nothing; set [parallelism] source"),
            "{bounded}"
        );
    }
}
