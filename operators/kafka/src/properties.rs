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
