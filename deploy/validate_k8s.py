"""Validates every manifest in deploy/k8s/ against the Kubernetes API schemas (CI step
`k8s-manifests` of scripts/test.sh).

kubernetes-validate (scripts/requirements.txt) ships the schemas, so this runs offline and
needs no cluster. Validation is strict: a field the API does not define is an error, as it
is for `kubectl apply --validate=strict`. Unlike the package's command line, a resource
whose kind has no schema and a file without any resource fail too, so a typo in `kind` or
`apiVersion` cannot pass unchecked.

    .cache/venv/bin/python deploy/validate_k8s.py [FILE.yaml ...]

Kubernetes versions checked (both on every run):
- 1.32, the oldest the manifests are written for: statefulset.yaml reads the pod's ordinal
  from the apps.kubernetes.io/pod-index label, GA in 1.32 (beta, on by default, since 1.28);
- 1.37, the newest whose schemas the pinned kubernetes-validate ships.
"""

import sys
from pathlib import Path

import kubernetes_validate
from kubernetes_validate import utils

KUBERNETES_VERSIONS = ["1.32", "1.37"]
MANIFESTS = Path(__file__).resolve().parent / "k8s"


def problems_of(path: Path) -> list[str]:
    """Every problem of one manifest file, for every checked version."""
    resources = utils.resources_from_file(str(path))
    if not resources:
        return [f"{path}: no Kubernetes resource in the file"]
    problems = []
    for resource in resources:
        name = f"{path}: {resource.get('kind')}/{resource.get('metadata', {}).get('name')}"
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(resource, version, strict=True)
            except utils.ValidationError as e:
                field = ".".join(str(p) for p in e.path) or "(top level)"
                problems.append(f"{name} is invalid in Kubernetes {version}: {field}: {e.message}")
            except utils.SchemaNotFoundError as e:
                problems.append(f"{name}: {e.message}")
    return problems


def main(args: list[str]) -> int:
    files = [Path(a) for a in args] or sorted(MANIFESTS.glob("*.yaml"))
    if not files:
        print(f"no manifests in {MANIFESTS}", file=sys.stderr)
        return 1
    problems = [p for f in files for p in problems_of(f)]
    for problem in problems:
        print(f"ERROR {problem}", file=sys.stderr)
    versions = ", ".join(KUBERNETES_VERSIONS)
    print(f"{len(files)} manifest file(s) checked against Kubernetes {versions} (strict, "
          f"kubernetes-validate {kubernetes_validate.__version__}): {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
