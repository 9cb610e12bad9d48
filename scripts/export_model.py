#!/usr/bin/env python3
"""Train the purchase-propensity model on a generated clickstream and export it to ONNX.

Three model kinds share the pipeline below (``--model``): ``xgboost`` (gradient-boosted
trees, onnxmltools), ``lightgbm`` (LightGBM trees, onnxmltools) and ``mlp`` (a small
scikit-learn MLPClassifier, skl2onnx). All three read the same features and produce the same
outputs (``label`` int64 [N], ``probabilities`` float32 [N, 2]), so one job runs any of them
unchanged.

Training features come from the job's own feature code (no training/serving skew):

  1. ``weir gen --seed S --events N --out <tmp>/events.jsonl``
  2. ``weir features <job.toml> --input <tmp>/events.jsonl --output <tmp>/features.jsonl``
     (one row per (user, 1-minute window): ``{"key", "window_start", "window_end",
     "features": [...]}`` in the order of the job file's ``[[features]]``, ``null`` = missing)
  3. label of a row: the user has a purchase with ``window_end <= ts < window_end + 60000``
     (read from events.jsonl; malformed lines are skipped, as the job dead-letters them)
  4. preprocessing is fitted on the earlier 75% of windows (by window start) and written to
     the manifest: missing -> per-feature default (0.0); with ``--preprocess`` (the default
     for ``mlp``) also ``clip`` to the training 0.1/99.9 percentiles and ``scale`` to zero
     mean and unit variance. The rows go through ``scripts/weir_preprocess.py`` — the twin of
     the job's ``preprocess.rs`` — and the model is trained on the result
  5. the model is converted to ONNX (input ``input`` float32 [N, F]), checked with
     ``onnx.checker``, and the held-out windows are scored with onnxruntime: the script exits
     non-zero unless max |p_ort - p_framework| <= 1e-5 (1e-4 for ``mlp``, float32 matmuls;
     for ``lightgbm`` on all but 0.1 % of rows: its thresholds are doubles, ONNX's float32)
  6. ``model.onnx`` and ``manifest.json`` (format: docs/MODEL_MANIFEST.md) go to ``--out``;
     the baseline is the histogram of held-out ONNX scores over 10 equal bins of [0, 1].
     (The held-out AUC is printed, not stored: the manifest reader rejects unknown fields.)

Run with the project venv, e.g.:

  .cache/venv/bin/python scripts/export_model.py --out /tmp/model
  .cache/venv/bin/python scripts/export_model.py --model mlp --out /tmp/mlp

docs/GENERATOR.md records the command that made tests/fixtures/model/.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import math
import subprocess
import sys
import tempfile
import tomllib
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from weir_preprocess import preprocess  # noqa: E402  (the twin of preprocess.rs)

LABEL_HORIZON_MS = 60_000
MAX_ABS_DIFF = {"xgboost": 1e-5, "lightgbm": 1e-5, "mlp": 1e-4}
# Share of held-out rows allowed beyond MAX_ABS_DIFF. LightGBM keeps its split thresholds as
# doubles and ONNX's TreeEnsemble compares in float32, so an input within one float32 rounding
# of a threshold can take the other branch: with `--large`'s 500 trees of 63 leaves, 8 of
# 13 170 held-out rows (seed 42) differ by up to 0.03. XGBoost's thresholds are float32, as
# ONNX's are.
MAX_SHARE_BEYOND = {"xgboost": 0.0, "lightgbm": 0.001, "mlp": 0.0}
HELDOUT_FRACTION = 0.25
MODEL_NAME = "purchase_propensity"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weir", type=Path, help="weir binary (default: target/release/weir, else target/debug/weir)")
    p.add_argument("--job", type=Path, default=REPO / "jobs" / "clickstream.toml", help="job file with [[features]]")
    p.add_argument("--seed", type=int, default=42, help="seed of the clickstream and of training")
    p.add_argument("--events", type=int, default=200_000, help="number of generated events")
    p.add_argument("--out", type=Path, required=True, help="directory for model.onnx and manifest.json")
    p.add_argument("--version", default=None, help="model version (default: UTC date-time, e.g. 20260101T120000Z)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--tiny", dest="size", action="store_const", const="tiny",
                      help="a smaller model (the committed test fixtures)")
    size.add_argument("--large", dest="size", action="store_const", const="large",
                      help="a production-sized model (benchmark S at production size, scripts/bench.sh SP)")
    p.add_argument("--model", choices=["xgboost", "lightgbm", "mlp"], default="xgboost", help="model kind")
    p.add_argument("--preprocess", action=argparse.BooleanOptionalAction, default=None,
                   help="fit clip + scale into the manifest (default: on for mlp, off for trees)")
    p.add_argument("--keep", type=Path, help="keep events.jsonl and features.jsonl in this directory")
    return p.parse_args()


def find_weir(given: Path | None) -> Path:
    candidates = [given] if given else [REPO / "target" / "release" / "weir", REPO / "target" / "debug" / "weir"]
    for c in candidates:
        if c.is_file():
            return c
    sys.exit(f"weir binary not found at {', '.join(map(str, candidates))}; build it with `cargo build --release -p weir`")


def run(cmd: list[str | Path]) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def feature_names(job: Path) -> list[str]:
    with job.open("rb") as f:
        spec = tomllib.load(f)
    names = [feature["name"] for feature in spec.get("features", [])]
    if not names:
        sys.exit(f"{job} has no [[features]] entries")
    return names


def read_features(path: Path, n_features: int) -> tuple[list[str], np.ndarray, list[list[float | None]]]:
    """Returns keys, [window_start, window_end] per row, and the raw feature vectors.

    A (key, window) may be emitted more than once when late records revise it; the final
    revision (the largest ``revision``) is the one kept, as a consumer of the scores would.
    """
    latest: dict[tuple[str, int], dict] = {}
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            row = json.loads(line)
            if len(row["features"]) != n_features:
                sys.exit(f"{path}:{lineno}: {len(row['features'])} features, the job file names {n_features}")
            slot = (row["key"], row["window_start"])
            if slot not in latest or row.get("revision", 0) >= latest[slot].get("revision", 0):
                latest[slot] = row
    if not latest:
        sys.exit(f"{path} has no rows")
    rows = sorted(latest.values(), key=lambda r: (r["window_start"], r["key"]))
    keys = [r["key"] for r in rows]
    bounds = np.array([(r["window_start"], r["window_end"]) for r in rows], dtype=np.int64)
    return keys, bounds, [r["features"] for r in rows]


def valid_event(line: bytes) -> dict | None:
    """The event if the job would accept it, else None (the generator's malformed records)."""
    try:
        event = json.loads(line.decode("utf-8"), parse_constant=lambda _: None)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(event, dict):
        return None
    ts, user, dwell = event.get("ts"), event.get("user"), event.get("dwell_ms")
    if not isinstance(user, str) or not isinstance(ts, int) or isinstance(ts, bool):
        return None
    if not isinstance(dwell, (int, float)) or isinstance(dwell, bool) or not math.isfinite(dwell):
        return None
    return event


def purchase_times(events: Path) -> dict[str, list[int]]:
    times: dict[str, list[int]] = defaultdict(list)
    with events.open("rb") as f:
        for line in f:
            event = valid_event(line.rstrip(b"\n"))
            if event is not None and event.get("type") == "purchase":
                times[event["user"]].append(event["ts"])
    for ts in times.values():
        ts.sort()
    return times


def labels(keys: list[str], bounds: np.ndarray, purchases: dict[str, list[int]]) -> np.ndarray:
    y = np.zeros(len(keys), dtype=np.int64)
    for i, (key, end) in enumerate(zip(keys, bounds[:, 1])):
        ts = purchases.get(key, [])
        j = bisect.bisect_left(ts, int(end))
        y[i] = j < len(ts) and ts[j] < end + LABEL_HORIZON_MS
    return y


def fit_preprocessing(names: list[str], raw_train: list[list[float | None]], on: bool) -> list[dict]:
    """Manifest feature entries: default 0.0; with `on`, clip to the training 0.1/99.9
    percentiles and scale the clipped values to zero mean, unit variance."""
    features = [{"name": n, "type": "float32", "default": 0.0} for n in names]
    if not on:
        return features
    filled = np.array([[0.0 if v is None else v for v in row] for row in raw_train], dtype=np.float64)
    for c, feature in enumerate(features):
        col = filled[:, c]
        lo, hi = (float(v) for v in np.percentile(col, [0.1, 99.9]))
        if hi > lo:
            feature["clip"] = {"min": lo, "max": hi}
            col = np.clip(col, lo, hi)
        std = float(col.std())
        if std > 0:
            feature["scale"] = {"mean": float(col.mean()), "std": std}
    return features


# Each kind's capacity by `--tiny` / (neither) / `--large`: trees and their depth (xgboost),
# trees and their leaves (lightgbm), hidden layer sizes (mlp). `large` is the size of models
# teams serve in production (hundreds of trees of depth 6, a few hundred hidden units), so
# that ONNX Runtime's share of a scoring job is what it is there.
SIZES = {
    "tiny": {"xgboost": (8, 3), "lightgbm": (8, 8), "mlp": (8,)},
    None: {"xgboost": (40, 4), "lightgbm": (40, 15), "mlp": (32, 16)},
    "large": {"xgboost": (500, 6), "lightgbm": (500, 63), "mlp": (256, 128)},
}

# Learning rate of the boosted trees: many trees learn in smaller steps.
LEARNING_RATE = {"tiny": 0.3, None: 0.3, "large": 0.05}


def fit_model(kind: str, x: np.ndarray, y: np.ndarray, size: str | None, seed: int):
    capacity = SIZES[size][kind]
    if kind == "xgboost":
        import xgboost

        trees, depth = capacity
        model = xgboost.XGBClassifier(
            n_estimators=trees,
            max_depth=depth,
            learning_rate=LEARNING_RATE[size],
            base_score=0.5,
            tree_method="hist",
            random_state=seed,
            n_jobs=2,
        )
    elif kind == "lightgbm":
        import lightgbm

        trees, leaves = capacity
        model = lightgbm.LGBMClassifier(
            n_estimators=trees,
            num_leaves=leaves,
            learning_rate=LEARNING_RATE[size],
            random_state=seed,
            n_jobs=2,
            verbose=-1,
        )
    else:
        from sklearn.neural_network import MLPClassifier

        model = MLPClassifier(
            hidden_layer_sizes=capacity,
            max_iter=200,
            early_stopping=True,
            random_state=seed,
        )
    return model.fit(x, y)


def to_onnx(kind: str, model, n_features: int):
    import onnx
    from onnxmltools.convert.common.data_types import FloatTensorType

    initial_types = [("input", FloatTensorType([None, n_features]))]
    if kind == "xgboost":
        from onnxmltools import convert_xgboost

        onx = convert_xgboost(model, name=MODEL_NAME, initial_types=initial_types)
    elif kind == "lightgbm":
        from onnxmltools import convert_lightgbm

        onx = convert_lightgbm(model, name=MODEL_NAME, initial_types=initial_types, zipmap=False)
    else:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import FloatTensorType as SkFloat

        onx = convert_sklearn(
            model,
            name=MODEL_NAME,
            initial_types=[("input", SkFloat([None, n_features]))],
            options={id(model): {"zipmap": False}},
            target_opset={"": 17, "ai.onnx.ml": 3},
        )
    outputs = {o.name: o for o in onx.graph.output}
    if set(outputs) != {"label", "probabilities"}:
        sys.exit(f"unexpected ONNX outputs {sorted(outputs)}; expected label and probabilities")
    elem = {o: outputs[o].type.tensor_type.elem_type for o in outputs}
    if elem != {"label": onnx.TensorProto.INT64, "probabilities": onnx.TensorProto.FLOAT}:
        sys.exit(f"ONNX outputs are not plain int64/float tensors: {elem}")
    # Name the batch axis (converters leave it anonymous) so readers see it as dynamic.
    for value in [*onx.graph.input, *onx.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    onx.graph.name = MODEL_NAME
    onx.doc_string = f"{MODEL_NAME}: P(purchase in the next minute) from 1-minute window features"
    onnx.checker.check_model(onx, full_check=True)
    return onx


def dump_manifest(manifest: dict) -> str:
    """JSON with one top-level field (and one feature) per line, for readable diffs."""
    lines = []
    for key, value in manifest.items():
        if key == "features":
            inner = ",\n".join(f"    {json.dumps(f)}" for f in value)
            lines.append(f'  "features": [\n{inner}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main() -> int:
    args = parse_args()
    import onnxruntime as ort
    from sklearn.metrics import roc_auc_score

    weir = find_weir(args.weir)
    names = feature_names(args.job)
    with tempfile.TemporaryDirectory(prefix="weir-export-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        events, features_path = work / "events.jsonl", work / "features.jsonl"
        run([weir, "gen", "--seed", str(args.seed), "--events", str(args.events), "--out", events])
        run([weir, "features", args.job, "--input", events, "--output", features_path])
        keys, bounds, raw = read_features(features_path, len(names))
        y = labels(keys, bounds, purchase_times(events))
    starts = np.unique(bounds[:, 0])
    cut = starts[int(len(starts) * (1 - HELDOUT_FRACTION))]
    train, held = bounds[:, 0] < cut, bounds[:, 0] >= cut
    preprocess_on = args.model == "mlp" if args.preprocess is None else args.preprocess
    features = fit_preprocessing(names, [r for r, t in zip(raw, train) if t], preprocess_on)
    x, _ = preprocess(raw, features)
    if y[train].min() == y[train].max() or y[held].min() == y[held].max():
        sys.exit("training or held-out split has a single class; generate more --events")
    print(f"model={args.model} rows={len(y)} train={train.sum()} heldout={held.sum()} positive_rate={y.mean():.4f}")

    model = fit_model(args.model, x[train], y[train], args.size, args.seed)
    onx = to_onnx(args.model, model, len(names))

    session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    label, probabilities = session.run(["label", "probabilities"], {"input": x[held]})
    p_ort = probabilities[:, 1].astype(np.float64)
    p_framework = model.predict_proba(x[held])[:, 1].astype(np.float64)
    gaps = np.abs(p_ort - p_framework)
    diff = float(np.max(gaps))
    beyond = float(np.mean(gaps > MAX_ABS_DIFF[args.model]))
    auc = float(roc_auc_score(y[held], p_ort))
    print(f"heldout_auc={auc:.4f} heldout_max_abs_diff={diff:.3g} heldout_share_beyond={beyond:.2g}")
    if beyond > MAX_SHARE_BEYOND[args.model]:
        print(f"ONNX and {args.model} disagree by up to {diff} (> {MAX_ABS_DIFF[args.model]} on "
              f"{beyond:.2%} of held-out rows, at most {MAX_SHARE_BEYOND[args.model]:.2%} allowed)",
              file=sys.stderr)
        return 1
    clear = np.abs(p_ort - 0.5) > 1e-6  # rows whose label cannot depend on a tie rule
    if not np.array_equal(label[clear], (p_ort[clear] > 0.5).astype(np.int64)):
        print("ONNX label output disagrees with its probabilities", file=sys.stderr)
        return 1

    edges = np.linspace(0.0, 1.0, 11)
    counts, _ = np.histogram(p_ort, bins=edges)
    version = args.version or datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    manifest = {
        "format_version": 1,
        "name": MODEL_NAME,
        "version": version,
        "input": {"name": "input", "type": "float32"},
        "output": {"name": "probabilities", "type": "float32", "column": 1},
        "features": features,
        "baseline": {"bin_edges": [round(float(e), 10) for e in edges], "counts": [int(c) for c in counts]},
        "trained": {
            "rows": int(train.sum()),
            "seed": args.seed,
            "heldout_max_abs_diff": diff,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model.onnx").write_bytes(onx.SerializeToString())
    (args.out / "manifest.json").write_text(dump_manifest(manifest))
    size = (args.out / "model.onnx").stat().st_size
    print(f"wrote {args.out / 'model.onnx'} ({size} bytes) and manifest.json, version {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
