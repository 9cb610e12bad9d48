#!/usr/bin/env python3
"""Build `tests/fixtures/failing_model/`: a clickstream model that ONNX Runtime fails on some rows.

Run from the repository root with the project venv (created by scripts/setup.sh):

    .cache/venv/bin/python scripts/make_failing_model.py

The graph takes the clickstream job's 8 features ([N, 8] float32, `input`) and returns a
logistic score ([N, 1] float32, `probabilities`, column 0). A row whose `amount_max` (column 7)
is above 1e6 makes it gather index 1000 of a 2-element tensor, which ONNX Runtime refuses at
run time ("indices element out of data bounds"): the whole call fails, as a model with a
data-dependent bug does. `tests/bad_records.rs` uses it for "model failure on a row".
"""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "failing_model"
FEATURES = ["events", "views", "clicks", "purchases", "dwell_mean", "dwell_max", "amount_sum", "amount_max"]
FAILS_ABOVE = 1e6


def graph():
    weights = np.array([[0.05], [0.02], [0.1], [0.8], [0.0001], [0.00005], [0.001], [0.002]], dtype=np.float32)
    inits = [
        numpy_helper.from_array(weights, "w"),
        numpy_helper.from_array(np.array([-2.0], dtype=np.float32), "b"),
        numpy_helper.from_array(np.array([7], dtype=np.int64), "amount_max_column"),
        numpy_helper.from_array(np.array([FAILS_ABOVE], dtype=np.float32), "fails_above"),
        numpy_helper.from_array(np.array([1000], dtype=np.int64), "out_of_bounds"),
        numpy_helper.from_array(np.zeros(2, dtype=np.float32), "two_zeros"),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "w"], ["linear"]),
        helper.make_node("Add", ["linear", "b"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["score"]),
        helper.make_node("Gather", ["input", "amount_max_column"], ["amount_max"], axis=1),
        helper.make_node("Greater", ["amount_max", "fails_above"], ["fails"]),
        helper.make_node("Cast", ["fails"], ["fails_i64"], to=TensorProto.INT64),
        helper.make_node("Mul", ["fails_i64", "out_of_bounds"], ["index"]),
        helper.make_node("Gather", ["two_zeros", "index"], ["zero"], axis=0),
        helper.make_node("Add", ["score", "zero"], ["probabilities"]),
    ]
    g = helper.make_graph(
        nodes,
        "fails_on_large_amounts",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", len(FEATURES)])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 1])],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    model = graph()
    onnx.save(model, OUT / "model.onnx")
    session = ort.InferenceSession(str(OUT / "model.onnx"))
    fine = np.zeros((3, len(FEATURES)), dtype=np.float32)
    scores = session.run(None, {"input": fine})[0]
    assert scores.shape == (3, 1) and np.all(np.isfinite(scores)), scores
    failing = fine.copy()
    failing[1, 7] = 2 * FAILS_ABOVE
    try:
        session.run(None, {"input": failing})
    except Exception as error:  # onnxruntime raises its own exception types
        assert "out of" in str(error) or "bounds" in str(error), error
    else:
        raise SystemExit("the model must fail on a row with amount_max above 1e6")
    # The baseline score histogram (drift reference) over seeded rows of plausible features.
    rng = np.random.default_rng(42)
    rows = np.abs(rng.normal(loc=[5, 3, 1, 0.2, 800, 1500, 40, 30], scale=[3, 2, 1, 0.4, 300, 600, 50, 40], size=(2000, len(FEATURES)))).astype(np.float32)
    edges = [round(i / 10, 1) for i in range(11)]
    counts, _ = np.histogram(session.run(None, {"input": rows})[0][:, 0], bins=edges)
    manifest = {
        "format_version": 1,
        "name": "fails_on_large_amounts",
        "version": "1",
        "input": {"name": "input", "type": "float32"},
        "output": {"name": "probabilities", "type": "float32", "column": 0},
        "features": [{"name": n, "type": "float32", "default": 0.0} for n in FEATURES],
        "baseline": {"bin_edges": edges, "counts": [int(c) for c in counts]},
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
