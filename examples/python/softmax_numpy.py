"""Compile a spec once and call it from Python on NumPy arrays at several sizes (no rebuild).
Run with the project's venv: `$(scripts/python_setup.sh | tail -1)/bin/python examples/python/softmax_numpy.py`."""
import pathlib

import numpy as np

import redfuse

spec = pathlib.Path(__file__).resolve().parents[1] / "softmax.rf"
k = redfuse.compile(str(spec))
print(k)
for rows, cols in [(4, 100), (64, 4097)]:
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    y = k(x)
    ref = np.exp(x - x.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    print(f"X[{rows}, {cols}]: max |error| {np.abs(y - ref).max():.2e}")
    assert np.abs(y - ref).max() < 1e-5
print("builds:", redfuse.stats()["builds"])
