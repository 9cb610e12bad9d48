//! What a sink does with a record librdkafka did not deliver (DESIGN.md §7), decided from its
//! error code alone — at `send` (librdkafka's own checks, e.g. a record over the producer's
//! `message.max.bytes`) and in the delivery report (the broker's answer, after librdkafka's
//! internal retries until `message.timeout.ms`):
//!
//! - [`DeliveryClass::Refused`]: this record can never be written (too large, invalid,
//!   refused by a broker policy). A score becomes an `undeliverable` dead letter; a dead letter
//!   is cut and resent once as `undeliverable` ([`crate::delivery`]). Codes librdkafka reports
//!   only after giving up that are neither transient nor about the topic land here too: the
//!   record is kept, counted and replayable in the dead-letter topic instead of holding every
//!   later checkpoint.
//! - [`DeliveryClass::Retriable`]: the record was not written *this time* (a timeout, a broker
//!   or leader away, too few in-sync replicas). It is sent again, unchanged, for as long as it
//!   takes; the epoch waits for it (checkpoints pause while the cluster is unavailable, and
//!   nothing is lost). A timed-out record is one of these: librdkafka already retried it until
//!   `message.timeout.ms`, and dropping it would lose output the checkpoint has counted on.
//! - [`DeliveryClass::Unwritable`]: the topic or the producer cannot be written at all (the
//!   topic does not exist, no authorization, a fatal or fenced producer). No record of the
//!   sink can get through, so the job stops ([`crate::delivery`]) with its last checkpoint
//!   intact.

use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};

/// What to do with an undelivered record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryClass {
    /// The record itself is refused for good: dead-letter it (`undeliverable`).
    Refused,
    /// A transient failure: send the record again.
    Retriable,
    /// The destination cannot be written: stop the job.
    Unwritable,
}

/// The class of `error`, an error of `send` or of a delivery report.
pub fn classify(error: &KafkaError) -> DeliveryClass {
    match error.rdkafka_error_code() {
        Some(code) => classify_code(code),
        // Not a broker or librdkafka code (e.g. a configuration error): nothing a resend fixes.
        None => DeliveryClass::Unwritable,
    }
}

/// The class of a librdkafka or broker error code.
pub fn classify_code(code: Code) -> DeliveryClass {
    match code {
        // Transient: librdkafka's own retriable set for produce requests, and its timeouts.
        Code::MessageTimedOut
        | Code::OperationTimedOut
        | Code::TimedOutQueue
        | Code::RequestTimedOut
        | Code::BrokerTransportFailure
        | Code::AllBrokersDown
        | Code::Resolve
        | Code::LeaderNotAvailable
        | Code::NotLeaderForPartition
        | Code::BrokerNotAvailable
        | Code::ReplicaNotAvailable
        | Code::NetworkException
        | Code::NotEnoughReplicas
        | Code::NotEnoughReplicasAfterAppend
        | Code::ISRInsufficient
        | Code::KafkaStorageError
        | Code::FencedLeaderEpoch
        | Code::UnknownLeaderEpoch
        | Code::PreferredLeaderNotAvailable
        | Code::ThrottlingQuotaExceeded
        | Code::Retry
        | Code::QueueFull => DeliveryClass::Retriable,
        // The topic or the producer: no record of this sink can be written.
        Code::UnknownTopic
        | Code::UnknownPartition
        | Code::UnknownTopicOrPartition
        | Code::UnknownTopicId
        | Code::InvalidTopic
        | Code::TopicAuthorizationFailed
        | Code::ClusterAuthorizationFailed
        | Code::TransactionalIdAuthorizationFailed
        | Code::Authentication
        | Code::SaslAuthenticationFailed
        | Code::SSL
        | Code::Fatal
        // A producer in a state that takes no record (a failed transaction) or being closed.
        | Code::State
        | Code::BrokerDestroy
        | Code::Fenced
        | Code::ProducerFenced
        | Code::InvalidProducerEpoch
        | Code::InvalidProducerIdMapping
        | Code::InvalidTransactionalState
        | Code::OutOfOrderSequenceNumber
        | Code::InvalidRequiredAcks
        | Code::UnsupportedVersion
        | Code::UnsupportedCompressionType
        | Code::UnsupportedFeature
        | Code::NotConfigured
        | Code::PurgeQueue
        | Code::PurgeInflight => DeliveryClass::Unwritable,
        // This record: too large (MsgSizeTooLarge, RecordListTooLarge = MessageBatchTooLarge,
        // InvalidMessageSize), invalid (InvalidMessage = corrupt, InvalidRecord: refused by a
        // broker-side validation such as a schema or a compacted topic's missing key,
        // InvalidTimestamp), a policy; and anything else librdkafka gave up on.
        _ => DeliveryClass::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_the_broker_cannot_take_are_refused() {
        for code in [
            Code::MessageSizeTooLarge,
            Code::MessageBatchTooLarge,
            Code::InvalidMessageSize,
            Code::InvalidMessage,
            Code::InvalidRecord,
            Code::InvalidTimestamp,
            Code::PolicyViolation,
        ] {
            let error = KafkaError::MessageProduction(code);
            assert_eq!(classify(&error), DeliveryClass::Refused, "{code:?}");
        }
    }

    #[test]
    fn a_timed_out_or_unreplicated_record_is_retried() {
        for code in [
            Code::MessageTimedOut,
            Code::RequestTimedOut,
            Code::NotEnoughReplicas,
            Code::NotLeaderForPartition,
            Code::AllBrokersDown,
        ] {
            let error = KafkaError::MessageProduction(code);
            assert_eq!(classify(&error), DeliveryClass::Retriable, "{code:?}");
        }
    }

    #[test]
    fn a_missing_or_forbidden_topic_or_a_fenced_producer_is_unwritable() {
        for code in [
            Code::UnknownTopic,
            Code::UnknownTopicOrPartition,
            Code::TopicAuthorizationFailed,
            Code::ProducerFenced,
            Code::Fatal,
            Code::State,
        ] {
            let error = KafkaError::MessageProduction(code);
            assert_eq!(classify(&error), DeliveryClass::Unwritable, "{code:?}");
        }
        let config = KafkaError::ClientCreation("bad".to_owned());
        assert_eq!(classify(&config), DeliveryClass::Unwritable);
    }
}
