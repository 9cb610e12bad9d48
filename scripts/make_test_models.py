#!/usr/bin/env python3
"""Build the tiny ONNX models and manifests used by `operators/score/tests/`.

Run from the repository root with the project venv (created by scripts/setup.sh):

    .cache/venv/bin/python scripts/make_test_models.py

Writes `operators/score/tests/fixtures/<case>/{model.onnx,manifest.json[,expected.json]}`.
Everything is seeded, so re-running reproduces the committed files' numbers (the .onnx
bytes may differ across skl2onnx versions). `expected.json` holds raw job rows (null =
missing), the scores ONNX Runtime (Python) gives after the manifest's preprocessing, and
how many defaults were used, so the Rust tests compare against an independent computation.

Cases:
  logreg           3-feature logistic regression, output [N, 2], column 1; one scaled feature
  linear_1d        hand-built graph with a 1-D [N] output (column 0)
  wrong_input_name logreg model, manifest names input `features` (model says `input`)
  wrong_width      model trained on 4 columns, manifest lists 3 features
  bad_column       logreg model, manifest asks for column 2 of a [N, 2] output
  wrong_input_type hand-built graph with a float64 input
  preprocessed     hand-built linear graph, [N] output; features with categories, clip and
                   scale (expected scores computed through scripts/weir_preprocess.py)

`--case NAME` rewrites only that case (the other fixtures' bytes stay as committed).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType
from sklearn.linear_model import LogisticRegression

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from weir_preprocess import preprocess  # noqa: E402  (the twin of preprocess.rs)

FIXTURES = ROOT / "operators" / "score" / "tests" / "fixtures"
SEED = 42
EDGES = [round(i / 10, 1) for i in range(11)]
FEATURES = [
    {"name": "clicks_5m", "type": "float32", "default": 0.0, "scale": None},
    {"name": "dwell_s", "type": "float32", "default": 30.0, "scale": {"mean": 30.0, "std": 12.5}},
    {"name": "cart_adds", "type": "float32", "default": 0.0, "scale": None},
]
# Raw rows as the job would pass them; None = missing.
JOB_ROWS = [
    [0.0, 30.0, 0.0],
    [3.0, 55.5, 1.0],
    [None, 12.0, 2.0],
    [7.0, None, None],
    [None, None, None],
    [1.5, 90.0, 0.0],
    [12.0, 5.0, 4.0],
]


def run_ort(model_path, x, output):
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return sess.run([output], {sess.get_inputs()[0].name: x})[0]


def manifest(name, features, input_name, output_name, column, scores, trained=None):
    counts, _ = np.histogram(np.clip(scores, 0.0, 1.0), bins=EDGES)
    m = {
        "format_version": 1,
        "name": name,
        "version": "2026-11-30.1",
        "input": {"name": input_name, "type": "float32"},
        "output": {"name": output_name, "type": "float32", "column": column},
        "features": features,
        "baseline": {"bin_edges": EDGES, "counts": [int(c) for c in counts]},
    }
    if trained:
        m["trained"] = trained
    return m


def write_case(case, model_bytes, manifest_obj, expected=None):
    d = FIXTURES / case
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "model.onnx").write_bytes(model_bytes)
    (d / "manifest.json").write_text(json.dumps(manifest_obj, indent=2) + "\n")
    if expected is not None:
        (d / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


def training_data(rng, n, width):
    raw = np.column_stack([
        rng.poisson(3.0, n),
        rng.normal(30.0, 12.5, n),
        rng.poisson(0.5, n),
        rng.normal(0.0, 1.0, n),
    ])[:, :width].astype(np.float64)
    logit = 0.35 * raw[:, 0] + 0.04 * (raw[:, 1] - 30.0) + 1.1 * raw[:, 2] - 2.0
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    return raw, y


def logreg(width, rng):
    raw, y = training_data(rng, 2000, width)
    feats = FEATURES + [{"name": "noise", "type": "float32", "default": 0.0, "scale": None}]
    x, _ = preprocess(raw.tolist(), feats[:width])
    train, held = slice(0, 1500), slice(1500, None)
    clf = LogisticRegression(random_state=SEED).fit(x[train], y[train])
    onx = convert_sklearn(
        clf,
        initial_types=[("input", FloatTensorType([None, width]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    return clf, onx.SerializeToString(), x[held]


PRE_FEATURES = [
    {"name": "clicks_5m", "type": "float32", "default": 2.0,
     "categories": {"values": [0.0, 1.0, 2.0, 5.0], "unknown": -1.0}},
    {"name": "dwell_s", "type": "float32", "default": 30.0, "clip": {"min": 0.0, "max": 60.0},
     "scale": {"mean": 30.0, "std": 12.5}},
    {"name": "cart_adds", "type": "float32", "default": 0.0, "clip": {"max": 3.0}},
]
PRE_ROWS = [
    [0.0, 30.0, 0.0],
    [5.0, 75.0, 9.0],
    [4.0, -10.0, 2.0],
    [None, None, None],
    [1.0, 59.5, 3.5],
    [2.0, 12.0, None],
]


def preprocessed_case():
    """score = x . w + b over the preprocessed columns, so every step shows in the score."""
    w = np.array([1.0, 0.5, 0.25], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Add", ["z", "b"], ["score"])],
        "preprocessed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
        [
            helper.make_tensor("w", TensorProto.FLOAT, [3], w.tolist()),
            helper.make_tensor("b", TensorProto.FLOAT, [], [0.125]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x, used = preprocess(PRE_ROWS, PRE_FEATURES)
    tmp = FIXTURES / "pre.tmp.onnx"
    FIXTURES.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(model.SerializeToString())
    scores = run_ort(tmp, x, "score")
    tmp.unlink()
    expected = {"rows": PRE_ROWS, "scores": [float(s) for s in scores], "defaults_used": used,
                "inputs": [[float(v) for v in row] for row in x]}
    m = manifest("preprocessed", PRE_FEATURES, "x", "score", 0, np.zeros(0))
    write_case("preprocessed", model.SerializeToString(), m, expected)


def main():
    p = argparse.ArgumentParser(description="Build the score tests' fixture models.")
    p.add_argument("--case", choices=["preprocessed"], help="rewrite only this case")
    if p.parse_args().case == "preprocessed":
        preprocessed_case()
        print(f"wrote {FIXTURES.relative_to(ROOT)}/preprocessed")
        return
    rng = np.random.default_rng(SEED)
    clf, model, heldout = logreg(3, rng)
    tmp = FIXTURES / "logreg.tmp.onnx"
    FIXTURES.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(model)
    held_scores = run_ort(tmp, heldout, "probabilities")[:, 1]
    diff = float(np.max(np.abs(held_scores - clf.predict_proba(heldout)[:, 1])))
    trained = {"rows": 1500, "seed": SEED, "heldout_max_abs_diff": diff}
    x, used = preprocess(JOB_ROWS, FEATURES)
    scores = run_ort(tmp, x, "probabilities")[:, 1]
    expected = {"rows": JOB_ROWS, "scores": [float(s) for s in scores], "defaults_used": used}
    m = manifest("purchase_propensity", FEATURES, "input", "probabilities", 1, held_scores, trained)
    write_case("logreg", model, m, expected)

    bad = json.loads(json.dumps(m))
    bad["input"]["name"] = "features"
    write_case("wrong_input_name", model, bad)
    bad = json.loads(json.dumps(m))
    bad["output"]["column"] = 2
    write_case("bad_column", model, bad)
    tmp.unlink()

    _, model4, _ = logreg(4, np.random.default_rng(SEED + 1))
    write_case("wrong_width", model4, m)

    # 1-D output: sigmoid(x . w + b) -> [N]
    w = np.array([0.5, -0.25, 1.0], dtype=np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["z"]),
            helper.make_node("Add", ["z", "b"], ["zb"]),
            helper.make_node("Sigmoid", ["zb"], ["score"]),
        ],
        "linear_1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
        [
            helper.make_tensor("w", TensorProto.FLOAT, [3], w.tolist()),
            helper.make_tensor("b", TensorProto.FLOAT, [], [-0.5]),
        ],
    )
    lin = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lin.ir_version = 8
    onnx.checker.check_model(lin)
    feats = [dict(f, scale=None) for f in FEATURES]
    x, used = preprocess(JOB_ROWS, feats)
    scores = 1.0 / (1.0 + np.exp(-(x.astype(np.float64) @ w.astype(np.float64) - 0.5)))
    (FIXTURES / "lin.tmp.onnx").write_bytes(lin.SerializeToString())
    ort_scores = run_ort(FIXTURES / "lin.tmp.onnx", x, "score")
    (FIXTURES / "lin.tmp.onnx").unlink()
    assert np.max(np.abs(ort_scores - scores)) < 1e-6
    expected = {"rows": JOB_ROWS, "scores": [float(s) for s in ort_scores], "defaults_used": used}
    write_case("linear_1d", lin.SerializeToString(),
               manifest("linear_1d", feats, "x", "score", 0, ort_scores), expected)

    # float64 input
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)],
        "wrong_input_type",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 3])],
        [helper.make_tensor_value_info("s", TensorProto.DOUBLE, ["N"])],
    )
    dbl = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    dbl.ir_version = 8
    onnx.checker.check_model(dbl)
    write_case("wrong_input_type", dbl.SerializeToString(),
               manifest("wrong_input_type", feats, "x", "s", 0, ort_scores))
    preprocessed_case()
    print(f"wrote fixtures under {FIXTURES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
