//! `[model]` tests: the single-directory and registry forms, shadow/canary, batching bounds,
//! and the CPU budget of pinned inference threads (docs/JOB_FILE.md, `[model]`).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use weir::config::JobFile;
use weir::model_config::ModelSection;
use weir_operators::Placement;
use weir_score::budget::{available_cores, cpu_set};
use weir_score::registry::{ModelSource, Target};
use weir_score::secondary::SecondaryRole;
use weir_score::ScoreError;
use weir_testkit::files::scratch_dir;
use weir_testkit::job_toml::minimal_job;

/// A minimal valid job; each test edits its `[model]` section and `[runtime]`.
fn job(runtime: &str, model: &str) -> String {
    minimal_job().runtime(runtime).model(model).text()
}

fn parse(text: &str) -> Result<JobFile> {
    let mut job: JobFile = toml::from_str(text)?;
    job.base_dir = Path::new("/jobs").to_path_buf();
    Ok(job)
}

fn rejected(text: &str, needles: &[&str]) -> Result<()> {
    let error = match parse(text)?.compile() {
        Ok(_) => bail!("accepted:\n{text}"),
        Err(e) => format!("{e:#}"),
    };
    for needle in needles {
        assert!(error.contains(needle), "`{needle}` not in: {error}");
    }
    Ok(())
}

/// The job's `[model]` section (these jobs all have one).
fn model(job: &JobFile) -> &ModelSection {
    job.model.as_ref().expect("the job has a [model] section")
}

#[test]
fn single_directory_form_still_works() -> Result<()> {
    let job = parse(&job("workers = 1", r#"path = "model""#))?;
    assert_eq!(job.model_dir().as_deref(), Some(Path::new("/jobs/model")));
    assert_eq!(
        model(&job).source(&job.base_dir),
        ModelSource::Dir("/jobs/model".into())
    );
    assert_eq!(model(&job).max_batch_rows, 256);
    assert_eq!(model(&job).max_batch_delay, 2);
    assert_eq!(model(&job).max_in_flight, 16);
    assert!(model(&job).secondary(&job.base_dir).is_none());
    job.compile()?;
    Ok(())
}

#[test]
fn registry_form_with_canary() -> Result<()> {
    let job = parse(&job(
        "workers = 1",
        r#"registry = "models"
name = "pp"
poll = "500ms"
canary = "models/pp/next"
canary_share = 0.05
max_batch_delay = "5ms"
max_in_flight = 2"#,
    ))?;
    assert_eq!(
        model(&job).source(&job.base_dir),
        ModelSource::Registry {
            root: "/jobs/models".into(),
            name: "pp".into(),
            poll: Duration::from_millis(500),
        }
    );
    assert_eq!(
        job.model_dir().as_deref(),
        Some(Path::new("/jobs/models/pp"))
    );
    let canary = model(&job).secondary(&job.base_dir);
    assert_eq!(
        canary.map(|c| (c.role, c.dir)),
        Some((
            SecondaryRole::Canary { share: 0.05 },
            "/jobs/models/pp/next".into()
        ))
    );
    let settings = model(&job).score_settings(&job.base_dir, Placement::new(1, 1), 1)?;
    assert_eq!(settings.batching.max_batch_delay, Duration::from_millis(5));
    assert_eq!(settings.batching.max_in_flight, 2);
    assert!(settings.cores.is_none());
    job.compile()?;
    Ok(())
}

/// At start a registry's `CONTROL` line names the second version, over the job file's.
#[test]
fn a_control_second_version_overrides_the_job_files_at_start() -> Result<()> {
    let root = scratch_dir("initial");
    for version in ["v1", "v2", "v3"] {
        std::fs::create_dir_all(root.join("models/pp").join(version))?;
    }
    let mut job = parse(&job(
        "workers = 1",
        "registry = \"models\"\nname = \"pp\"\nshadow = \"next\"",
    ))?;
    job.base_dir = root.clone();
    let control = root.join("models/pp/CONTROL");

    std::fs::write(&control, "pin v1\n")?;
    let (primary, second) = model(&job).initial_models(&job.base_dir, |_| Ok(()))?;
    assert_eq!(primary, root.join("models/pp/v1"));
    let second = second.map(|s| (s.role, s.dir));
    assert_eq!(second, Some((SecondaryRole::Shadow, root.join("next"))));

    std::fs::write(&control, "pin v1\ncanary v3 5%\n")?;
    let (primary, second) = model(&job).initial_models(&job.base_dir, |_| Ok(()))?;
    assert_eq!(primary, root.join("models/pp/v1"));
    let second = second.map(|s| (s.role, s.dir));
    let canary = SecondaryRole::Canary { share: 0.05 };
    assert_eq!(second, Some((canary, root.join("models/pp/v3"))));

    // Under `latest`, versions the loader refuses are passed over for the newest it accepts,
    // as the inference threads do; when none loads, the start fails.
    std::fs::write(&control, "")?;
    let refuse_newer = |target: &Target| match target.version.as_str() {
        "v1" => Ok(()),
        other => Err(ScoreError::Batch(format!("{other} does not load"))),
    };
    let (primary, _) = model(&job).initial_models(&job.base_dir, refuse_newer)?;
    assert_eq!(primary, root.join("models/pp/v1"));
    let refuse_all = |target: &Target| Err(ScoreError::Batch(format!("{} is bad", target.version)));
    let error = match model(&job).initial_models(&job.base_dir, refuse_all) {
        Ok(models) => bail!("started with no loadable version: {models:?}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("no version loads") && error.contains("v3 is bad"),
        "{error}"
    );

    // A CONTROL second version that does not load stops the start here, before a cluster
    // connects, as the inference threads would stop it.
    std::fs::write(&control, "pin v1\nshadow v2\n")?;
    let refuse_v2 = |target: &Target| match target.version.as_str() {
        "v2" => Err(ScoreError::Batch("v2 does not load".into())),
        _ => Ok(()),
    };
    let error = match model(&job).initial_models(&job.base_dir, refuse_v2) {
        Ok(models) => bail!("started with a second version that does not load: {models:?}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("CONTROL's shadow version `v2`") && error.contains("v2 does not load"),
        "{error}"
    );

    std::fs::write(&control, "canary v4 5%\n")?;
    let error = match model(&job).initial_models(&job.base_dir, |_| Ok(())) {
        Ok(models) => bail!("a missing canary version was accepted: {models:?}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("canary version `v4`, which is not in"),
        "{error}"
    );
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn model_section_rules() -> Result<()> {
    let one = "workers = 1";
    rejected(
        &job(one, "path = \"m\"\nregistry = \"models\"\nname = \"pp\""),
        &["both path and registry"],
    )?;
    rejected(&job(one, "registry = \"models\""), &["needs name"])?;
    rejected(
        &job(one, "max_batch_rows = 0\npath = \"m\""),
        &["max_batch_rows"],
    )?;
    rejected(
        &job(one, "max_in_flight = 0\npath = \"m\""),
        &["max_in_flight"],
    )?;
    rejected(
        &job(one, "path = \"m\"\ncanary = \"c\""),
        &["canary_share in (0, 1]"],
    )?;
    rejected(
        &job(one, "path = \"m\"\ncanary = \"c\"\ncanary_share = 1.5"),
        &["canary_share 1.5 must be above 0 and at most 100% (1.0)"],
    )?;
    rejected(
        &job(one, "path = \"m\"\ncanary = \"c\"\ncanary_share = 0.00004"),
        &["canary_share 0.00004 is below the canary split's resolution of 0.01%"],
    )?;
    rejected(
        &job(
            one,
            "path = \"m\"\nshadow = \"s\"\ncanary = \"c\"\ncanary_share = 0.1",
        ),
        &["both shadow and canary"],
    )?;
    let typo = parse(&job(one, "path = \"m\"\nscael = 1")).map(|_| ());
    assert!(
        format!("{typo:?}").contains("unknown field `scael`"),
        "{typo:?}"
    );
    Ok(())
}

#[test]
fn oversubscribed_pinned_threads_are_refused() -> Result<()> {
    let cores = available_cores();
    let ids = &cpu_set().ids;
    // Every core is a Timely worker already: one more pinned inference thread does not fit.
    let text = job(
        &format!("workers = {cores}\n[parallelism]\nscore = 1"),
        &format!("path = \"m\"\ncores = [{}]", ids[0]),
    );
    rejected(
        &text,
        &[
            "refusing to start",
            "oversubscribes the CPU",
            &format!("{} > {cores}", cores + 1),
        ],
    )?;
    // A core id this process may not run on.
    let outside = ids.iter().max().map_or(0, |max| max + 1);
    rejected(
        &job("workers = 1", &format!("path = \"m\"\ncores = [{outside}]")),
        &[&format!(
            "contains core {outside}, which this process may not run on"
        )],
    )?;
    Ok(())
}

#[test]
fn score_parallelism_is_the_inference_pool_size() -> Result<()> {
    // Two score instances need two pinned cores (intra_threads = 1): one listed is refused.
    let ids = &cpu_set().ids;
    let mut job = parse(&job(
        "workers = 2",
        &format!("path = \"m\"\ncores = [{}]", ids[0]),
    ))?;
    job.override_parallelism("score=2")?;
    let error = match job.compile() {
        Ok(_) => bail!("accepted one core for two score instances"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("score parallelism 2 × intra_threads 1 needs exactly 2"),
        "{error}"
    );
    // In a cluster the budget and the list are per process: 2 processes × 1 worker with 2
    // score instances pin one core on each, the same list on both.
    let cores = available_cores();
    if cores >= 2 {
        let mut cluster = parse(&self::job(
            "workers = 1\nprocesses = 2",
            &format!("path = \"m\"\ncores = [{}]", ids[ids.len() - 1]),
        ))?;
        cluster.override_parallelism("score=2")?;
        cluster.compile()?;
        // 1 worker + 2 pinned on each process cannot fit 2 cores.
        let mut crowded = parse(&self::job(
            "workers = 1\nprocesses = 2",
            &format!("path = \"m\"\ncores = [{}, {}]", ids[0], ids[1]),
        ))?;
        crowded.override_parallelism("score=2")?;
        let error = match crowded.compile() {
            Ok(_) => bail!("accepted two cores for one score instance per process"),
            Err(e) => format!("{e:#}"),
        };
        assert!(
            error.contains("score parallelism 2 over 2 processes = 1 per process × intra_threads 1 needs exactly 1"),
            "{error}"
        );
    }
    // And score parallelism stays within the workers.
    let mut job = parse(&self::job("workers = 1", "path = \"m\""))?;
    job.override_parallelism("score=2")?;
    assert!(job.compile().is_err());
    Ok(())
}
