"""The manifest's preprocessing, in Python: the twin of operators/score/src/preprocess.rs.

Both the export scripts (to train on exactly what the job will feed the model) and the
fixture generator (to compute expected scores) use this one function. Per value, in a fixed
order: missing (None/NaN) -> ``default``; ``categories`` -> index of the value in
``values`` (exact match) or ``unknown``; ``clip`` -> clamp to ``[min, max]`` (absent bounds
are open); ``scale`` -> ``(x - mean) / std``; all in float64, then narrowed to float32.
Keep the two implementations in step (docs/MODEL_MANIFEST.md, "Preprocessing").
"""

from __future__ import annotations

import math

import numpy as np


def preprocess_value(v, feature: dict) -> tuple[float, bool]:
    """One value through one feature's steps; returns (value, default_used)."""
    used = v is None or (isinstance(v, float) and math.isnan(v))
    x = float(feature["default"]) if used else float(v)
    cats = feature.get("categories")
    if cats:
        values = [float(c) for c in cats["values"]]
        x = float(values.index(x)) if x in values else float(cats["unknown"])
    clip = feature.get("clip")
    if clip:
        if clip.get("min") is not None:
            x = max(x, float(clip["min"]))
        if clip.get("max") is not None:
            x = min(x, float(clip["max"]))
    scale = feature.get("scale")
    if scale:
        x = (x - float(scale["mean"])) * (1.0 / float(scale["std"]))
    return x, used


def preprocess(rows, features: list[dict]) -> tuple[np.ndarray, int]:
    """Rows of raw job values (None = missing) -> float32 model input, defaults used."""
    out = np.empty((len(rows), len(features)), dtype=np.float64)
    used = 0
    for r, row in enumerate(rows):
        for c, (v, f) in enumerate(zip(row, features)):
            out[r, c], was_default = preprocess_value(v, f)
            used += was_default
    return out.astype(np.float32), used
