//! Job-file tests: the example job (`jobs/clickstream.toml`) loads and compiles, the CLI
//! overrides apply, and every invalid field is rejected with a message that names the problem
//! (docs/JOB_FILE.md lists the rules these tests pin down).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use weir::config::JobFile;
use weir::model_config::ModelSection;
use weir_features::aggregate::AggKind;
use weir_features::window::WindowSpec;
use weir_testkit::clickstream;
use weir_testkit::files::scratch_dir;
use weir_testkit::job_toml::minimal_job;

/// A minimal valid job with a string `kind` and an optional `amount`, counted and summed; each
/// negative test changes exactly one thing in it.
fn valid() -> String {
    minimal_job()
        .field("kind = \"string\"")
        .field("amount = { type = \"f64\", required = false }")
        .feature("name = \"amount_sum\"\nagg = \"sum\"\nfield = \"amount\"")
        .text()
}

/// [`valid`] with `from` replaced by `to` (the replacement must apply).
fn edited(from: &str, to: &str) -> String {
    let valid = valid();
    assert!(
        valid.contains(from),
        "test bug: `{from}` is not in the base job"
    );
    valid.replacen(from, to, 1)
}

/// Parses and compiles a job from TOML text; the error chain rendered with `{:#}`.
fn compile_text(text: &str) -> Result<weir::CompiledJob, String> {
    let job: JobFile = toml::from_str(text).map_err(|e| format!("{:#}", anyhow::Error::from(e)))?;
    job.compile().map_err(|e| format!("{e:#}"))
}

/// Asserts that `text` is rejected with a message containing every one of `needles`.
fn assert_rejected(text: &str, needles: &[&str]) -> Result<()> {
    match compile_text(text) {
        Ok(_) => bail!("job was accepted, expected an error containing {needles:?}"),
        Err(message) => {
            for needle in needles {
                if !message.contains(needle) {
                    bail!("error `{message}` does not contain `{needle}`");
                }
            }
            Ok(())
        }
    }
}

/// Writes `text` to a fresh directory under the system temp dir and returns the file path.
fn write_temp(text: &str) -> Result<PathBuf> {
    let path = scratch_dir("job-file-test").join("job.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// The job's `[model]` section (these jobs all have one).
fn model(job: &JobFile) -> &ModelSection {
    job.model.as_ref().expect("the job has a [model] section")
}

#[test]
fn clickstream_example_loads_and_compiles() -> Result<()> {
    let path = clickstream::job_path();
    let job = JobFile::load(&path)?;
    assert_eq!(job.name, "clickstream");
    assert_eq!(job.runtime.workers, 2);
    assert_eq!(job.runtime.tick, 100);
    assert_eq!(job.watermark.max_out_of_orderness, 5_000);
    assert_eq!(job.watermark.idle_timeout, 30_000);
    assert_eq!(job.window, WindowSpec::Tumbling { size: 60_000 });
    assert_eq!(
        job.base_dir,
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    );
    // The model path is relative to the job file's directory.
    assert_eq!(
        job.model_dir(),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/model"))
    );
    let compiled = job.compile()?;
    let names = compiled.features.names();
    assert_eq!(
        names,
        [
            "events",
            "views",
            "clicks",
            "purchases",
            "dwell_mean",
            "dwell_max",
            "amount_sum",
            "amount_max"
        ]
    );
    let primary = &compiled.features.groups()[0].features;
    assert_eq!(primary.features()[1].agg, AggKind::CountIf);
    assert!(primary.features()[1].filter.is_some());
    // Absent [parallelism] means every stage runs on every worker.
    let p = compiled.parallelism;
    assert_eq!((p.source, p.window, p.score, p.sink), (2, 2, 2, 2));
    // key and event_time fields are found in the schema.
    let schema = &compiled.schema;
    assert_eq!(schema.fields()[schema.key_index()].name, "user");
    assert_eq!(schema.fields()[schema.event_time_index()].name, "ts");
    Ok(())
}

#[test]
fn defaults_apply_when_sections_are_absent() -> Result<()> {
    let job: JobFile = toml::from_str(&valid())?;
    assert_eq!(job.runtime.workers, 1);
    assert_eq!(job.runtime.tick, 100);
    assert_eq!(job.runtime.key_groups, 4096);
    assert_eq!(job.runtime.max_lag_ms(), Some(2_000));
    assert_eq!(job.watermark.max_out_of_orderness, 5_000);
    assert_eq!(job.watermark.idle_timeout, 30_000);
    assert_eq!(job.watermark.allowed_lateness, 0);
    assert_eq!(job.source.max_batch, 512);
    assert!(!job.source.bounded);
    assert_eq!(model(&job).max_batch_rows, 256);
    assert_eq!(model(&job).intra_threads, 1);
    assert_eq!(model(&job).warmup_batches, 2);
    let compiled = job.compile()?;
    let p = compiled.parallelism;
    assert_eq!((p.source, p.window, p.score, p.sink), (1, 1, 1, 1));
    Ok(())
}

#[test]
fn parallelism_override_sets_stages() -> Result<()> {
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.runtime.workers = 4;
    job.override_parallelism("source=2, window=4,score=1,sink=1")?;
    let p = job.compile()?.parallelism;
    assert_eq!((p.source, p.window, p.score, p.sink), (2, 4, 1, 1));
    Ok(())
}

#[test]
fn load_reports_missing_file_and_path() {
    let missing = std::env::temp_dir().join("weir-job-file-test-does-not-exist/job.toml");
    let err = JobFile::load(&missing)
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(err.contains("cannot read job file"), "{err}");
    assert!(err.contains("weir-job-file-test-does-not-exist"), "{err}");
}

#[test]
fn unknown_top_level_field_is_rejected_with_the_path() -> Result<()> {
    let path = write_temp(&format!("colour = \"blue\"\n{}", valid()))?;
    let err = JobFile::load(&path)
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(err.contains("invalid job file"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("unknown field `colour`"), "{err}");
    Ok(())
}

#[test]
fn unknown_fields_in_sections_are_rejected() -> Result<()> {
    assert_rejected(
        &edited("topic = \"in\"", "topic = \"in\"\ntopik = \"x\""),
        &["unknown field `topik`"],
    )?;
    assert_rejected(
        &edited("[window]", "[runtime]\nworker = 2\n\n[window]"),
        &["unknown field `worker`"],
    )?;
    assert_rejected(
        &edited("size = \"10s\"", "size = \"10s\"\nslide = \"5s\""),
        &["unknown field `slide`"],
    )?;
    assert_rejected(
        &edited("agg = \"count\"", "agg = \"count\"\nfiled = \"x\""),
        &["unknown field `filed`"],
    )?;
    assert_rejected(
        &edited("path = \"model\"", "path = \"model\"\nthreads = 2"),
        &["unknown field `threads`"],
    )?;
    assert_rejected(
        &edited("[window]", "[parallelism]\nscorer = 1\n\n[window]"),
        &["unknown field `scorer`"],
    )?;
    Ok(())
}

#[test]
fn unknown_field_option_in_a_field_declaration_is_rejected() -> Result<()> {
    // A typo in `required` must not silently leave the field required.
    assert_rejected(
        &edited(
            "amount = { type = \"f64\", required = false }",
            "amount = { type = \"f64\", requird = false }",
        ),
        &["unknown field `requird`, expected `type` or `required`"],
    )
}

#[test]
fn unknown_field_type_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("kind = \"string\"", "kind = \"text\""),
        &["unknown variant `text`, expected one of `string`, `f64`, `i64`, `bool`, `timestamp_ms`, `timestamp_s`, `timestamp_rfc3339`"],
    )?;
    assert_rejected(
        &edited("kind = \"string\"", "kind = 5"),
        &["expected a field type"],
    )
}

#[test]
fn missing_required_sections_are_rejected() -> Result<()> {
    // Without [sink] (which `weir features` does not need), compiling for a run still
    // needs the score and dead-letter topics.
    assert_rejected(
        &edited("[sink]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n", ""),
        &["[sink] kind = \"kafka\" needs topic", "dead_letter_topic"],
    )?;
    assert_rejected(
        &edited("dead_letter_topic = \"dlq\"\n", ""),
        &["[sink] kind = \"kafka\" needs topic", "dead_letter_topic"],
    )
}

#[test]
fn bad_duration_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("size = \"10s\"", "size = \"10 parsecs\""),
        &["`10 parsecs` is not a duration like"],
    )?;
    assert_rejected(
        &edited("size = \"10s\"", "size = 10"),
        &["expected a string"],
    )?;
    assert_rejected(
        &edited(
            "[window]",
            "[watermark]\nidle_timeout = \"soon\"\n\n[window]",
        ),
        &["`soon` is not a duration"],
    )
}

#[test]
fn zero_durations_are_rejected() -> Result<()> {
    assert_rejected(
        &edited("size = \"10s\"", "size = \"0s\""),
        &["[window]", "tumbling window size must be > 0"],
    )?;
    assert_rejected(
        &edited("[window]", "[runtime]\ntick = \"0s\"\n\n[window]"),
        &["[runtime] tick must be positive"],
    )?;
    assert_rejected(
        &edited("[window]", "[watermark]\nidle_timeout = \"0s\"\n\n[window]"),
        &["idle_timeout positive"],
    )
}

#[test]
fn max_lag_is_zero_for_no_bound_or_at_least_one_tick() -> Result<()> {
    assert_rejected(
        &edited("[window]", "[runtime]\nmax_lag = \"50ms\"\n\n[window]"),
        &["[runtime] max_lag must be at least one tick (100 ms) or \"0s\" for no bound"],
    )?;
    let unbounded: JobFile = toml::from_str(&edited(
        "[window]",
        "[runtime]\nmax_lag = \"0s\"\n\n[window]",
    ))?;
    assert_eq!(unbounded.runtime.max_lag_ms(), None);
    unbounded.compile()?;
    let one_tick: JobFile = toml::from_str(&edited(
        "[window]",
        "[runtime]\nmax_lag = \"100ms\"\n\n[window]",
    ))?;
    assert_eq!(one_tick.runtime.max_lag_ms(), Some(100));
    one_tick.compile()?;
    Ok(())
}

#[test]
fn zero_workers_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("[window]", "[runtime]\nworkers = 0\n\n[window]"),
        &["workers must be at least 1"],
    )
}

#[test]
fn key_groups_outside_their_range_are_rejected() -> Result<()> {
    for groups in [0, (1 << 20) + 1] {
        assert_rejected(
            &edited(
                "[window]",
                &format!("[runtime]\nkey_groups = {groups}\n\n[window]"),
            ),
            &["key_groups must be between 1 and 1048576"],
        )?;
    }
    let most = edited("[window]", "[runtime]\nkey_groups = 1048576\n\n[window]");
    if let Err(message) = compile_text(&most) {
        bail!("2^20 key groups were rejected: {message}");
    }
    Ok(())
}

#[test]
fn parallelism_above_workers_is_rejected() -> Result<()> {
    assert_rejected(
        &edited(
            "[window]",
            "[runtime]\nworkers = 2\n\n[parallelism]\nwindow = 3\n\n[window]",
        ),
        &["parallelism window=3 is invalid", "number of workers (2)"],
    )?;
    assert_rejected(
        &edited("[window]", "[parallelism]\nscore = 0\n\n[window]"),
        &["parallelism score=0 is invalid"],
    )
}

#[test]
fn parallelism_override_above_workers_is_rejected() -> Result<()> {
    let mut job: JobFile = toml::from_str(&valid())?;
    job.override_parallelism("sink=2")?;
    let err = job
        .compile()
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(err.contains("parallelism sink=2 is invalid"), "{err}");
    Ok(())
}

#[test]
fn unknown_stage_in_parallelism_flag_is_rejected() -> Result<()> {
    let mut job: JobFile = toml::from_str(&valid())?;
    let err = job
        .override_parallelism("source=1,scoring=2")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(err.contains("unknown stage `scoring`"), "{err}");
    assert!(err.contains("source, window, score, sink"), "{err}");
    Ok(())
}

#[test]
fn malformed_parallelism_flag_is_rejected() -> Result<()> {
    let mut job: JobFile = toml::from_str(&valid())?;
    let err = job
        .override_parallelism("window")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(err.contains("must look like stage=n"), "{err}");
    let err = job
        .override_parallelism("window=many")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(err.contains("`many` is not a number"), "{err}");
    Ok(())
}

#[test]
fn key_field_not_declared_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("key = \"user\"", "key = \"account\""),
        &[
            "[source]",
            "key field `account` is not declared in [source.fields]",
        ],
    )
}

#[test]
fn event_time_field_not_declared_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("event_time = \"ts\"", "event_time = \"time\""),
        &["event_time field `time` is not declared"],
    )
}

#[test]
fn key_field_of_wrong_type_or_optional_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("user = \"string\"", "user = \"f64\""),
        &["key field `user` must be a required"],
    )?;
    assert_rejected(
        &edited(
            "user = \"string\"",
            "user = { type = \"string\", required = false }",
        ),
        &["key field `user` must be a required"],
    )
}

#[test]
fn event_time_not_timestamp_ms_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("ts = \"timestamp_ms\"", "ts = \"i64\""),
        &["event_time field `ts` must be a required timestamp field (\"timestamp_ms\", \"timestamp_s\" or \"timestamp_rfc3339\")"],
    )
}

#[test]
fn feature_on_unknown_field_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("field = \"amount\"", "field = \"amount_usd\""),
        &[
            "[[features]]",
            "invalid feature `amount_sum`",
            "field `amount_usd` is not declared",
        ],
    )
}

#[test]
fn feature_without_a_field_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("field = \"amount\"\n", ""),
        &["invalid feature `amount_sum`", "needs `field"],
    )
}

#[test]
fn count_with_a_field_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("agg = \"count\"", "agg = \"count\"\nfield = \"amount\""),
        &["takes no field"],
    )
}

#[test]
fn count_if_without_where_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("agg = \"count\"", "agg = \"count_if\""),
        &["invalid feature `events`", "count_if needs `where"],
    )
}

#[test]
fn bad_predicate_is_rejected() -> Result<()> {
    assert_rejected(
        &edited(
            "agg = \"count\"",
            "agg = \"count_if\"\nwhere = \"kind < 'view'\"",
        ),
        &["invalid feature `events`", "only support == and !="],
    )?;
    assert_rejected(
        &edited(
            "agg = \"count\"",
            "agg = \"count_if\"\nwhere = \"kind = 'view'\"",
        ),
        &["has no comparison"],
    )
}

#[test]
fn unknown_aggregate_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("agg = \"count\"", "agg = \"median\""),
        &["unknown variant `median`"],
    )
}

#[test]
fn duplicate_feature_names_are_rejected() -> Result<()> {
    assert_rejected(
        &edited("name = \"amount_sum\"", "name = \"events\""),
        &["invalid feature `events`", "used by two features"],
    )
}

#[test]
fn no_features_is_rejected() -> Result<()> {
    let features = "[[features]]\nname = \"events\"\nagg = \"count\"\n\n\
                    [[features]]\nname = \"amount_sum\"\nagg = \"sum\"\nfield = \"amount\"\n";
    let text = edited(features, "").replacen("name = \"t\"", "name = \"t\"\nfeatures = []", 1);
    assert_rejected(&text, &["[[features]]", "defines no [[features]]"])
}

#[test]
fn sum_on_a_string_field_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("field = \"amount\"", "field = \"kind\""),
        &[
            "invalid feature `amount_sum`",
            "needs a numeric field, `kind` is not",
        ],
    )
}

#[test]
fn missing_bootstrap_servers_is_rejected() -> Result<()> {
    assert_rejected(
        &edited(
            "\"bootstrap.servers\" = \"127.0.0.1:9092\"",
            "\"client.id\" = \"x\"",
        ),
        &["bootstrap.servers", "--brokers"],
    )
}

#[test]
fn bootstrap_servers_in_source_kafka_is_enough() -> Result<()> {
    let text = edited("\"bootstrap.servers\" = \"127.0.0.1:9092\"", "").replacen(
        "[source.fields]",
        "[source.kafka]\n\"bootstrap.servers\" = \"b:9092\"\n\n[source.fields]",
        1,
    );
    compile_text(&text).map(|_| ()).map_err(anyhow::Error::msg)
}

#[test]
fn zero_batch_sizes_are_rejected() -> Result<()> {
    assert_rejected(
        &edited("event_time = \"ts\"", "event_time = \"ts\"\nmax_batch = 0"),
        &["[source] max_batch"],
    )?;
    assert_rejected(
        &edited("path = \"model\"", "path = \"model\"\nmax_batch_rows = 0"),
        &["[model] max_batch_rows"],
    )
}

#[test]
fn bad_start_position_is_rejected() -> Result<()> {
    assert_rejected(
        &edited("topic = \"in\"", "topic = \"in\"\nstart = \"beginning\""),
        &["start `beginning` is not earliest, latest, per-partition offsets like 0:1200,1:900 or an RFC 3339 time like 2026-11-30T12:00:00Z"],
    )
}

#[test]
fn schedule_trigger_is_parsed_and_checked() -> Result<()> {
    let scheduled = edited(
        "[model]",
        "[trigger]\non = \"schedule\"\nevery = \"30s\"\n\n[model]",
    );
    let job = compile_text(&scheduled).map_err(anyhow::Error::msg)?;
    assert_eq!(
        job.features.trigger(),
        weir_features::job_features::Trigger::Schedule { every: 30_000 }
    );
    let default = compile_text(&valid()).map_err(anyhow::Error::msg)?;
    assert_eq!(
        default.features.trigger(),
        weir_features::job_features::Trigger::Close
    );
    assert_rejected(
        &edited("[model]", "[trigger]\non = \"schedule\"\n\n[model]"),
        &["every"],
    )?;
    assert_rejected(
        &edited("[model]", "[trigger]\non = \"hourly\"\n\n[model]"),
        &["unknown variant `hourly`"],
    )?;
    let over_range = scheduled.replace(
        "kind = \"tumbling\"\nsize = \"10s\"",
        "kind = \"over_range\"\nrange = \"10s\"",
    );
    assert_rejected(&over_range, &["[trigger]", "over_range"])
}

#[test]
fn a_file_source_s_range_size_is_part_of_its_topology() -> Result<()> {
    let mut kafka = JobFile::load(&clickstream::job_path())?;
    let before = kafka.topology_hash();
    kafka.source.range_bytes = Some(kafka.source.split().range_bytes * 2);
    assert_eq!(
        kafka.topology_hash(),
        before,
        "a Kafka source has no ranges"
    );

    let mut file = JobFile::load(&clickstream::job_path())?;
    file.use_input_files(vec![PathBuf::from("events.jsonl")]);
    let ranged = file.topology_hash();
    assert_ne!(ranged, before, "file offsets are byte positions in ranges");
    let default_range_bytes = file.source.split().range_bytes;
    file.source.range_bytes = Some(default_range_bytes * 2);
    assert_ne!(
        file.topology_hash(),
        ranged,
        "other ranges: a checkpoint's offsets mean other lines"
    );
    // Set to the default's range size, every file larger than a range is split, where the
    // default keeps files of up to 512 KiB whole: other ranges too.
    file.source.range_bytes = Some(default_range_bytes);
    assert_ne!(file.topology_hash(), ranged, "small files are split");
    Ok(())
}
