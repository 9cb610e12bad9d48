//! `deploy/k8s/` kept true to the code. scripts/test.sh validates the manifests against the
//! Kubernetes API schemas (deploy/validate_k8s.py); these tests check what no schema knows:
//! that the ConfigMap's job file compiles with Weir's own compiler, that the container's
//! start script — run here under `/bin/sh` for every pod ordinal, with a stand-in `weir` that
//! records its arguments — passes only flags `weir run --help` lists and writes the hosts file
//! the cluster needs, that the StatefulSet's shape, ports and probes agree with the job and
//! the Service, that the CPU request is the job's CPU budget (`weir_score::budget`), and that
//! deploy/Dockerfile ships the model and ONNX Runtime version the job needs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use weir::config::JobFile;
use weir::CompiledJob;
use weir_score::budget::{plan_cores, CpuSet};
use weir_testkit::clickstream;
use weir_testkit::files::Scratch;

/// The namespace the start script is run for.
const NAMESPACE: &str = "weir-test";

/// A manifest of `deploy/k8s/`, parsed.
struct Manifest {
    file: &'static str,
    doc: Value,
}

impl Manifest {
    fn load(file: &'static str) -> Result<Manifest> {
        let path = clickstream::workspace_dir().join("deploy/k8s").join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let doc = serde_saphyr::from_str(&text).with_context(|| format!("{file} is not YAML"))?;
        Ok(Manifest { file, doc })
    }

    /// The value at a JSON pointer (`/spec/replicas`).
    fn at(&self, pointer: &str) -> Result<&Value> {
        self.doc
            .pointer(pointer)
            .with_context(|| format!("{} has no {pointer}", self.file))
    }

    fn str_at(&self, pointer: &str) -> Result<&str> {
        self.at(pointer)?
            .as_str()
            .with_context(|| format!("{} {pointer} is not a string", self.file))
    }

    fn u64_at(&self, pointer: &str) -> Result<u64> {
        self.at(pointer)?
            .as_u64()
            .with_context(|| format!("{} {pointer} is not a number", self.file))
    }
}

/// The three manifests and the StatefulSet's one container.
struct Deployment {
    config_map: Manifest,
    service: Manifest,
    stateful_set: Manifest,
}

/// The pointer of the StatefulSet's container.
const CONTAINER: &str = "/spec/template/spec/containers/0";

impl Deployment {
    fn load() -> Result<Deployment> {
        let deployment = Deployment {
            config_map: Manifest::load("configmap.yaml")?,
            service: Manifest::load("service.yaml")?,
            stateful_set: Manifest::load("statefulset.yaml")?,
        };
        let containers = deployment
            .stateful_set
            .at("/spec/template/spec/containers")?;
        ensure!(
            containers.as_array().map(Vec::len) == Some(1),
            "statefulset.yaml: these tests expect one container, found {containers}"
        );
        Ok(deployment)
    }

    fn container(&self, pointer: &str) -> Result<&Value> {
        self.stateful_set.at(&format!("{CONTAINER}{pointer}"))
    }

    fn replicas(&self) -> Result<u64> {
        self.stateful_set.u64_at("/spec/replicas")
    }

    /// The container port named `name`.
    fn container_port(&self, name: &str) -> Result<u64> {
        let ports = self.container("/ports")?.as_array().context("ports")?;
        ports
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
            .with_context(|| format!("statefulset.yaml: no container port named {name}"))
    }

    /// The container's `env` entries with a literal value.
    fn env_values(&self) -> Result<BTreeMap<String, String>> {
        let mut values = BTreeMap::new();
        for entry in self.container("/env")?.as_array().context("env")? {
            if let (Some(name), Some(value)) = (entry["name"].as_str(), entry["value"].as_str()) {
                values.insert(name.to_owned(), value.to_owned());
            }
        }
        Ok(values)
    }

    /// The job file of the ConfigMap, as the pod mounts it: `(mount path of the file, text)`.
    fn job_file(&self) -> Result<(PathBuf, String)> {
        let map_name = self.config_map.str_at("/metadata/name")?;
        let volumes = self.stateful_set.at("/spec/template/spec/volumes")?;
        let volume = volumes
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["configMap"]["name"] == map_name))
            .with_context(|| {
                format!("statefulset.yaml mounts no volume of ConfigMap {map_name}")
            })?;
        let mount = self
            .container("/volumeMounts")?
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == volume["name"]))
            .and_then(|m| m["mountPath"].as_str())
            .with_context(|| format!("the container does not mount volume {}", volume["name"]))?;
        let text = self.config_map.str_at("/data/job.toml")?;
        Ok((Path::new(mount).join("job.toml"), text.to_owned()))
    }

    /// The job file parsed, its directory the mount's (as `JobFile::load` would set it).
    fn job(&self) -> Result<JobFile> {
        let (path, text) = self.job_file()?;
        let mut job: JobFile =
            toml::from_str(&text).context("configmap.yaml: job.toml is not a valid job file")?;
        job.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(job)
    }

    fn compiled_job(&self) -> Result<CompiledJob> {
        self.job()?
            .compile()
            .context("configmap.yaml: job.toml does not compile")
    }
}

/// What the start script of pod `ordinal` ran: `weir`'s arguments and the hosts file it wrote.
struct Started {
    args: Vec<String>,
    hosts: Vec<String>,
}

impl Started {
    /// The value after `--flag`.
    fn flag(&self, flag: &str) -> Result<&str> {
        let at = self
            .args
            .iter()
            .position(|a| a == flag)
            .with_context(|| format!("the container does not pass {flag}: {:?}", self.args))?;
        self.args
            .get(at + 1)
            .map(String::as_str)
            .with_context(|| format!("{flag} has no value"))
    }

    /// The `--flags` passed (`weir run <JOB>` then flag-value pairs, or lone switches).
    fn flags(&self) -> Vec<&str> {
        self.args
            .iter()
            .filter(|a| a.starts_with("--"))
            .map(String::as_str)
            .collect()
    }
}

/// Runs the container's command as the pod with this ordinal would, in `dir`: the manifest's
/// literal `env`, the downward-API values a pod gets (its ordinal label, the namespace), the
/// hosts file redirected into `dir`, and a `weir` on `PATH` that records its arguments.
fn start_pod(deployment: &Deployment, ordinal: u64, dir: &Path) -> Result<Started> {
    let command = deployment.container("/command")?;
    ensure!(
        *command == serde_json::json!(["/bin/sh", "-c"]),
        "statefulset.yaml: the container command is {command}, expected a /bin/sh -c script"
    );
    let script = deployment
        .container("/args/0")?
        .as_str()
        .context("args[0] is not a script")?;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    let recorded = dir.join("weir-args");
    let stand_in = bin.join("weir");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n",
            recorded.display()
        ),
    )?;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755))?;
    let mut sh = Command::new("/bin/sh");
    sh.arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    for entry in deployment.container("/env")?.as_array().context("env")? {
        let name = entry["name"]
            .as_str()
            .context("an env entry without a name")?;
        if let Some(value) = entry["value"].as_str() {
            sh.env(name, value);
            continue;
        }
        let field = entry["valueFrom"]["fieldRef"]["fieldPath"].as_str();
        let value = match field {
            Some("metadata.labels['apps.kubernetes.io/pod-index']") => ordinal.to_string(),
            Some("metadata.namespace") => NAMESPACE.to_owned(),
            _ => bail!("env {name}: this test does not know what a pod gets from {entry}"),
        };
        sh.env(name, value);
    }
    let hosts_file = dir.join("hosts");
    sh.env("WEIR_HOSTS", &hosts_file);
    let out = sh.output().context("cannot run /bin/sh")?;
    ensure!(
        out.status.success(),
        "the start script of pod {ordinal} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let args = std::fs::read_to_string(&recorded)
        .context("the start script did not run weir")?
        .lines()
        .map(str::to_owned)
        .collect();
    let hosts = weir::cluster::read_hosts(&hosts_file)?;
    Ok(Started { args, hosts })
}

/// The long flags `weir run --help` lists.
fn weir_run_flags() -> Result<Vec<String>> {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--help"])
        .output()?;
    ensure!(out.status.success(), "weir run --help failed");
    let help = String::from_utf8(out.stdout)?;
    let flags: Vec<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect();
    ensure!(
        flags.iter().any(|f| f == "--processes"),
        "weir run --help lists no --processes: {help}"
    );
    Ok(flags)
}

#[test]
fn the_config_maps_job_compiles_and_is_the_example_job_on_shared_checkpoints() -> Result<()> {
    let deployment = Deployment::load()?;
    let job = deployment.job()?;
    // The example job's schema, features and windows: the model the image ships
    // (deploy/Dockerfile copies jobs/clickstream.toml's) was made for them.
    let example = JobFile::load(&clickstream::job_path())?;
    ensure!(
        job.topology_hash() == example.topology_hash(),
        "configmap.yaml's job differs from jobs/clickstream.toml in its fields, features, \
         windows, trigger or lateness, so the image's model may not fit it"
    );
    let compiled = deployment.compiled_job()?;
    ensure!(
        compiled.runtime.processes as u64 == deployment.replicas()?,
        "[runtime] processes is {} but the StatefulSet has {} replicas",
        compiled.runtime.processes,
        deployment.replicas()?
    );
    // Every process restores from the same checkpoints: a pod's local disk is not shared.
    let checkpoints = compiled
        .checkpoints
        .context("the job has no [checkpoint]: a restarted cluster would start over")?;
    ensure!(
        weir_checkpoint::is_object_store_url(&checkpoints.dir),
        "[checkpoint] dir {} is not on object storage, which every pod shares",
        checkpoints.dir.display()
    );
    Ok(())
}

#[test]
fn every_pod_starts_its_process_of_one_cluster_with_flags_weir_run_has() -> Result<()> {
    let deployment = Deployment::load()?;
    let known = weir_run_flags()?;
    let (job_path, _) = deployment.job_file()?;
    let replicas = deployment.replicas()?;
    let set = &deployment.stateful_set;
    let (name, service) = (
        set.str_at("/metadata/name")?,
        set.str_at("/spec/serviceName")?,
    );
    let port = deployment.container_port("cluster")?;
    let expected_hosts: Vec<String> = (0..replicas)
        .map(|i| format!("{name}-{i}.{service}.{NAMESPACE}.svc.cluster.local:{port}"))
        .collect();
    let mut scratch = Scratch::kept_unless_passed("k8s-start");
    for ordinal in 0..replicas {
        let dir = scratch.path().join(format!("pod-{ordinal}"));
        let started = start_pod(&deployment, ordinal, &dir)?;
        ensure!(
            started.args.first().map(String::as_str) == Some("run")
                && started.args.get(1).map(PathBuf::from) == Some(job_path.clone()),
            "pod {ordinal} runs weir {:?}, expected `weir run {}`",
            started.args,
            job_path.display()
        );
        for flag in started.flags() {
            ensure!(
                known.iter().any(|k| k == flag),
                "the container passes {flag}, which `weir run --help` does not list"
            );
        }
        let processes = started.flag("--processes")?;
        ensure!(
            processes == replicas.to_string(),
            "pod {ordinal} runs --processes {processes}, but the StatefulSet has {replicas} replicas"
        );
        let process = started.flag("--process")?;
        ensure!(
            process == ordinal.to_string(),
            "pod {ordinal} runs --process {process}"
        );
        ensure!(
            Path::new(started.flag("--hosts")?) == dir.join("hosts"),
            "pod {ordinal} passes another --hosts than the file it wrote, $WEIR_HOSTS"
        );
        ensure!(
            started.hosts == expected_hosts,
            "pod {ordinal} wrote the hosts file {:?}, expected {expected_hosts:?}",
            started.hosts
        );
        let metrics = format!("0.0.0.0:{}", deployment.container_port("metrics")?);
        ensure!(
            started.flag("--metrics-addr")? == metrics,
            "a pod must serve metrics and probes on every interface at the metrics port, \
             {metrics}"
        );
    }
    scratch.passed();
    Ok(())
}

#[test]
fn the_cluster_can_form_and_restarts_as_one() -> Result<()> {
    let deployment = Deployment::load()?;
    let (set, service) = (&deployment.stateful_set, &deployment.service);
    ensure!(set.str_at("/spec/serviceName")? == service.str_at("/metadata/name")?);
    ensure!(
        service.str_at("/spec/clusterIP")? == "None",
        "the Service must be headless: its pods' own names are the peer addresses"
    );
    ensure!(
        service.at("/spec/publishNotReadyAddresses")? == true,
        "an unready pod's name must resolve: pods become ready only once all have connected"
    );
    ensure!(
        set.str_at("/spec/podManagementPolicy")? == "Parallel",
        "OrderedReady would start pod 1 only once pod 0 is ready, which needs pod 1"
    );
    ensure!(
        set.str_at("/spec/updateStrategy/type")? == "OnDelete",
        "a rolling update would mix two versions of the job in one cluster"
    );
    let labels = set.at("/spec/template/metadata/labels")?;
    for selector in [
        set.at("/spec/selector/matchLabels")?,
        service.at("/spec/selector")?,
    ] {
        for (key, value) in selector.as_object().context("selector")? {
            ensure!(
                labels[key] == *value,
                "selector {key}={value} misses the pods"
            );
        }
    }
    // The Service's named ports reach the container's.
    for port in service.at("/spec/ports")?.as_array().context("ports")? {
        let name = port["name"]
            .as_str()
            .context("a Service port without a name")?;
        ensure!(port["targetPort"] == name);
        ensure!(port["port"].as_u64() == Some(deployment.container_port(name)?));
    }
    // Probes: startup and liveness are the process alive, readiness the dataflow running.
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = deployment.container(&format!("/{probe}/httpGet"))?;
        ensure!(
            get["path"] == path && get["port"] == "metrics",
            "{probe}: {get}"
        );
    }
    // The hosts file is written at start, beside a read-only root file system.
    let hosts = deployment.env_values()?.remove("WEIR_HOSTS");
    let hosts = hosts.context("the container has no WEIR_HOSTS")?;
    let volumes = set.at("/spec/template/spec/volumes")?;
    let mounts = deployment.container("/volumeMounts")?;
    let writable = mounts.as_array().context("volumeMounts")?.iter().any(|m| {
        let scratch = volumes.as_array().is_some_and(|vs| {
            vs.iter()
                .any(|v| v["name"] == m["name"] && v.get("emptyDir").is_some())
        });
        scratch
            && m["mountPath"]
                .as_str()
                .is_some_and(|dir| Path::new(&hosts).starts_with(dir))
    });
    ensure!(writable, "WEIR_HOSTS {hosts} is not on an emptyDir volume");
    ensure!(
        set.str_at("/spec/template/spec/restartPolicy")? == "Always",
        "the restart policy is the job's supervisor"
    );
    Ok(())
}

/// A Kubernetes CPU quantity (`"4"`, `"500m"`, `2`) in millicores.
fn millicores(quantity: &Value) -> Result<u64> {
    let text = match quantity {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => bail!("{other} is not a CPU quantity"),
    };
    match text.strip_suffix('m') {
        Some(milli) => Ok(milli.parse()?),
        None => Ok(text.parse::<u64>()? * 1000),
    }
}

#[test]
fn the_cpu_request_is_the_jobs_cpu_budget_per_process() -> Result<()> {
    let deployment = Deployment::load()?;
    let job = deployment.compiled_job()?;
    let request = millicores(deployment.container("/resources/requests/cpu")?)?;
    let limit = millicores(deployment.container("/resources/limits/cpu")?)?;
    ensure!(
        request == limit,
        "the CPU limit ({limit}m) is not the request ({request}m): the job's budget is one \
         number of cores"
    );
    ensure!(
        request % 1000 == 0,
        "{request}m is not a whole number of cores"
    );
    let cores = usize::try_from(request / 1000)?;
    // budget.rs's rule: the Timely workers plus the inference threads of the score instances
    // a process hosts, each with intra_threads ONNX Runtime threads. Checked by planning the
    // pinned cores of one process with that many cores, and with one fewer.
    let placement = job.runtime.placement;
    let (score, intra) = (
        job.parallelism.score,
        job.score()?.model.session.intra_threads,
    );
    let pinned = placement.most_on_one_process(score) * intra;
    ensure!(
        pinned < cores,
        "{cores} core(s) leave no core to the {} Timely worker(s) beside {pinned} pinned \
         inference thread(s)",
        job.runtime.workers
    );
    let pins: Vec<usize> = (cores - pinned..cores).collect();
    let fits = plan_cores(&pins, placement, score, intra, &CpuSet::first(cores));
    ensure!(
        fits.is_ok(),
        "the job does not fit the pod's CPU request of {cores} core(s): {:?}",
        fits.err().map(|e| e.to_string())
    );
    let fewer = CpuSet {
        ids: (0..cores).collect(),
        capacity: cores - 1,
    };
    let tight = plan_cores(&pins, placement, score, intra, &fewer);
    ensure!(
        tight.is_err(),
        "the job fits {} core(s) as well: the request of {cores} is more than its budget",
        cores - 1
    );
    Ok(())
}

#[test]
fn the_image_ships_the_jobs_model_and_the_onnx_runtime_weir_is_built_for() -> Result<()> {
    let deployment = Deployment::load()?;
    let job = deployment.job()?;
    let workspace = clickstream::workspace_dir();
    let dockerfile = std::fs::read_to_string(workspace.join("deploy/Dockerfile"))?;
    let model = job
        .model_dir()
        .context("the ConfigMap's job has no [model]")?;
    let example_model = JobFile::load(&clickstream::job_path())?
        .model_dir()
        .context("jobs/clickstream.toml has no [model]")?
        .canonicalize()?;
    let copied = dockerfile.lines().find_map(|line| {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["COPY", from, to] if Path::new(to) == model => Some(workspace.join(from)),
            _ => None,
        }
    });
    let copied = copied.with_context(|| {
        format!(
            "deploy/Dockerfile copies nothing from the build context to the job's [model] \
             path {}",
            model.display()
        )
    })?;
    ensure!(
        copied.canonicalize()? == example_model,
        "deploy/Dockerfile copies {} to {}, but the example job's model is {}",
        copied.display(),
        model.display(),
        example_model.display()
    );
    let setup = std::fs::read_to_string(workspace.join("scripts/setup.sh"))?;
    let version_in = |text: &str, prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|v| v.trim_matches('"').to_owned())
    };
    let setup_version = version_in(&setup, "ORT_VERSION=").context("setup.sh: ORT_VERSION")?;
    let image_version =
        version_in(&dockerfile, "ARG ORT_VERSION=").context("Dockerfile: ARG ORT_VERSION")?;
    ensure!(
        image_version == setup_version,
        "deploy/Dockerfile installs ONNX Runtime {image_version}, scripts/setup.sh \
         {setup_version} (the version the ort crate's API level is chosen for)"
    );
    Ok(())
}
