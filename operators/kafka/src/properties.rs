//! librdkafka client properties: the job file's `[kafka]` map passed through unchanged, with
//! Weir's defaults underneath. Only standard Kafka protocol features are used, so the same job
//! runs against Apache Kafka, Redpanda or any compatible broker.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

/// Builds a client config: `defaults` first, then the user's `properties` on top.
pub fn client_config(
    properties: &BTreeMap<String, String>,
    defaults: &[(&str, &str)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in defaults {
        config.set(*key, *value);
    }
    for (key, value) in properties {
        config.set(key, value);
    }
    config
}

/// The bootstrap servers, for error messages.
pub fn brokers(properties: &BTreeMap<String, String>) -> String {
    properties
        .get("bootstrap.servers")
        .cloned()
        .unwrap_or_else(|| "<bootstrap.servers unset>".to_owned())
}

#[cfg(test)]
mod tests {
    use rdkafka::consumer::BaseConsumer;

    use super::*;

    /// librdkafka refuses a client whose `builtin.features` names a feature it was built
    /// without (its documented way to check a build's support).
    fn client_with_features(features: &str) -> rdkafka::error::KafkaResult<BaseConsumer> {
        let properties = BTreeMap::from([("builtin.features".to_owned(), features.to_owned())]);
        client_config(&properties, &[]).create()
    }

    #[test]
    fn librdkafka_is_built_for_secured_clusters_and_compression() {
        let needed = "ssl,sasl_plain,sasl_scram,sasl_gssapi,sasl_oauthbearer,zstd,lz4,gzip";
        if let Err(error) = client_with_features(needed) {
            panic!("librdkafka lacks one of {needed}: {error} (rdkafka features in Cargo.toml)");
        }
        // The check itself can fail.
        assert!(client_with_features("no_such_feature").is_err());
    }
}
