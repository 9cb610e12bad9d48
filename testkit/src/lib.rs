//! Weir's test kit: the fixtures that the tests and benchmarks of every crate would otherwise
//! write out by hand. A dev-dependency only; it links nothing but the pure feature engine, so
//! feature tests that use it build fast.
//!
//! - [`schema`]: a record schema in one line, e.g. `schema("k", "ts", &[("x", F64)])`.
//! - [`event`]: an [`Event`](weir_features::record::Event) builder.
//! - [`spec`]: `FeatureSpec` shorthands (`spec`, `ratio`, `over`, `specs_toml`).
//! - [`row`]: a [`FeatureRow`](weir_features::row::FeatureRow) with neutral defaults.
//! - [`clickstream`]: the clickstream job's schema and `[[features]]`, read from
//!   `jobs/clickstream.toml`, and its text pointed at a test's topics.
//! - [`files`]: scratch directories, JSON Lines files and job-file snippets.
//! - [`job_toml`]: a minimal valid job file as text, for the job-file tests.
//! - [`cluster`]: free localhost ports and a hosts file for a cluster of test processes.
//! - [`s3_server`]: moto's S3 server on a free port, and a proxy that makes it fail requests.
//! - [`registry_files`]: a fixture model as a registry version's objects, for uploading.
//! - [`scrape`]: `GET` on a job's metrics server, and the samples and types of a scrape.
//! - [`netns`]: two hosts as Linux network namespaces, and root-namespace servers reachable
//!   from them.

pub mod clickstream;
pub mod cluster;
pub mod event;
pub mod files;
pub mod job_toml;
pub mod netns;
pub mod registry_files;
pub mod row;
pub mod s3_server;
pub mod schema;
pub mod scrape;
pub mod spec;
