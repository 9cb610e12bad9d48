//! Kafka record headers from `(key, value)` pairs: what the score and dead-letter sinks send
//! with each record ([`crate::sink`], [`crate::delivery`]), and what the benchmarks' raw
//! baselines send to match them.

use rdkafka::message::{Header, OwnedHeaders};

/// `pairs` as one record's headers, in their order.
pub fn headers_of<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> OwnedHeaders {
    let pairs = pairs.into_iter();
    let room = pairs.size_hint().0;
    pairs.fold(
        OwnedHeaders::new_with_capacity(room),
        |headers, (key, value)| {
            headers.insert(Header {
                key,
                value: Some(value),
            })
        },
    )
}
