//! `[sink] delivery` (issue #15 item 2): `at_least_once` by default; `exactly_once` needs
//! checkpoints (one transaction per epoch) and a `transaction.timeout.ms` of at least twice the
//! checkpoint interval, checked when the job is compiled, before anything connects.

use anyhow::{bail, Result};

use weir::plan::SinkPlan;
use weir::JobFile;
use weir_kafka::{transactional_id, DeliveryGuarantee};
use weir_testkit::job_toml::minimal_job;

/// The minimal job with `delivery` in `[sink]` and `extra` sections after it.
fn job(delivery: Option<&str>, extra: &str) -> String {
    let text = minimal_job().text();
    let sink = "dead_letter_topic = \"dlq\"";
    assert!(text.contains(sink), "test bug: the minimal job changed");
    let line = delivery.map_or(String::new(), |d| format!("\ndelivery = \"{d}\""));
    format!(
        "{}\n{extra}\n",
        text.replacen(sink, &format!("{sink}{line}"), 1)
    )
}

fn compile(text: &str) -> Result<weir::CompiledJob, String> {
    let job: JobFile = toml::from_str(text).map_err(|e| format!("{:#}", anyhow::Error::from(e)))?;
    job.compile().map_err(|e| format!("{e:#}"))
}

fn delivery(text: &str) -> Result<DeliveryGuarantee> {
    match compile(text) {
        Ok(job) => match job.sinks {
            SinkPlan::Kafka { delivery, .. } => Ok(delivery),
            SinkPlan::File { .. } => bail!("not a Kafka sink"),
        },
        Err(message) => bail!("rejected: {message}"),
    }
}

fn rejected(text: &str, needle: &str) -> Result<()> {
    match compile(text) {
        Ok(_) => bail!("accepted, expected an error containing `{needle}`"),
        Err(message) if message.contains(needle) => Ok(()),
        Err(message) => bail!("error `{message}` does not contain `{needle}`"),
    }
}

#[test]
fn at_least_once_is_the_default() -> Result<()> {
    assert_eq!(delivery(&job(None, ""))?, DeliveryGuarantee::AtLeastOnce);
    assert_eq!(
        delivery(&job(Some("at_least_once"), ""))?,
        DeliveryGuarantee::AtLeastOnce
    );
    rejected(&job(Some("twice"), ""), "exactly_once")
}

#[test]
fn exactly_once_needs_checkpoints_and_a_transaction_timeout_longer_than_two_intervals() -> Result<()>
{
    rejected(&job(Some("exactly_once"), ""), "add a [checkpoint] section")?;
    let checkpoint =
        |interval: &str| format!("[checkpoint]\ndir = \"ckpt\"\ninterval = \"{interval}\"");
    // librdkafka's default transaction.timeout.ms is 60 s.
    rejected(
        &job(Some("exactly_once"), &checkpoint("31s")),
        "transaction.timeout.ms = 60000 ms is less than twice the checkpoint interval (31000 ms)",
    )?;
    assert_eq!(
        delivery(&job(Some("exactly_once"), &checkpoint("30s")))?,
        DeliveryGuarantee::ExactlyOnce
    );
    let longer = format!(
        "{}\n\n[sink.kafka]\n\"transaction.timeout.ms\" = \"300000\"",
        checkpoint("2m")
    );
    assert_eq!(
        delivery(&job(Some("exactly_once"), &longer))?,
        DeliveryGuarantee::ExactlyOnce
    );
    Ok(())
}

#[test]
fn the_transactional_id_names_job_sink_and_instance() {
    assert_eq!(
        transactional_id("clickstream", "scores", 1),
        "weir.clickstream.scores.1"
    );
    assert_ne!(
        transactional_id("clickstream", "scores", 0),
        transactional_id("clickstream", "dead-letters", 0)
    );
}
