//! Exactly-once sinks after a rescale to fewer sink instances. Each sink instance fences its
//! own `transactional.id` when it starts ([`crate::delivery`]), which aborts the transaction
//! the killed run left open under that id. The ids of instances the restored run no longer
//! has would have no such producer: a transaction left open there keeps the partitions' last
//! stable offset below it, so `read_committed` readers wait until `transaction.timeout.ms`
//! aborts it. Before the dataflow starts, the job initialises transactions once under each
//! removed id ([`fence_removed_instances`]), which fences the old producer and aborts its
//! transaction at once.

use std::collections::BTreeMap;
use std::ops::Range;

use rdkafka::producer::{BaseProducer, Producer};

use crate::delivery::{transactional_id, SINK_NAMES, TRANSACTION_TIMEOUT};
use crate::error::{KafkaEdgeError, Result};
use crate::properties::client_config;

/// The sink instances a restore leaves without a producer: those the restored checkpoint's
/// run had (`restored`, its manifest's sink parallelism) beyond the new `parallelism`.
pub fn removed_instances(restored: usize, parallelism: usize) -> Range<usize> {
    parallelism..restored.max(parallelism)
}

/// Fences every sink's `transactional.id` of the instances in `removed` (the restored
/// checkpoint's sink instances beyond the new parallelism) of job `job`, with the sinks'
/// producer `properties`. Returns the ids it fenced. Fails on the first id the broker does
/// not let it initialise: without the fence the job would start but its readers stall.
pub fn fence_removed_instances(
    properties: &BTreeMap<String, String>,
    job: &str,
    removed: Range<usize>,
) -> Result<Vec<String>> {
    let mut fenced = Vec::new();
    for instance in removed {
        for sink in SINK_NAMES {
            let id = transactional_id(job, sink, instance);
            let producer: BaseProducer = client_config(properties, &[("transactional.id", &id)])
                .create()
                .map_err(|source| KafkaEdgeError::Client {
                    role: "producer",
                    source,
                })?;
            producer
                .init_transactions(TRANSACTION_TIMEOUT)
                .map_err(|source| KafkaEdgeError::Request {
                    what: format!(
                        "init_transactions for transactional.id `{id}` of sink instance \
                         {instance}, which this run no longer has (fencing the producer of the \
                         run it restores, whose open transaction would hold read_committed \
                         readers back)"
                    ),
                    source,
                })?;
            fenced.push(id);
        }
    }
    Ok(fenced)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{fence_removed_instances, removed_instances};
    use crate::mock_broker::MockBroker;

    #[test]
    fn only_a_rescale_to_fewer_instances_removes_ids() {
        assert_eq!(removed_instances(4, 2), 2..4);
        assert!(removed_instances(2, 2).is_empty());
        assert!(
            removed_instances(1, 3).is_empty(),
            "a rescale up removes none"
        );
        assert!(
            removed_instances(0, 2).is_empty(),
            "no sink parallelism recorded"
        );
    }

    /// What the mock cluster can show: a transactional producer is initialised under every
    /// sink's id of each removed instance, and only those. That this fences the old producer
    /// and aborts its open transaction is Kafka's `InitProducerId` contract (the same one the
    /// kept instances' own start relies on); the mock cluster does not implement it (it
    /// hands a new producer id a fresh epoch and never fences the old one), and tansu has no
    /// transactions, so it is not observable here.
    #[test]
    fn every_sink_s_id_of_each_removed_instance_is_initialised() {
        let broker = MockBroker::start(1).expect("mock cluster");
        let properties =
            BTreeMap::from([("bootstrap.servers".to_owned(), broker.bootstrap_servers())]);
        let fenced =
            fence_removed_instances(&properties, "job", removed_instances(3, 1)).expect("fence");
        assert_eq!(
            fenced,
            [
                "weir.job.scores.1",
                "weir.job.dead-letters.1",
                "weir.job.scores.2",
                "weir.job.dead-letters.2"
            ]
        );
    }
}
