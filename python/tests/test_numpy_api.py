"""The Python API on NumPy arrays: every example through the CPU kernel against the plan
interpreter (float64, itself checked against the reference in the C++ tests), sizes bound from
shapes without rebuilding, strided inputs, names, threads, and every bad input as an exception."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import redfuse
from helpers import in_two_threads, spec_sizes

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.rf"))
SOFTMAX = str(ROOT / "examples" / "softmax.rf")


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (the spec's storage format for bf16)."""
    b = x.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bits_to_float(t: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return (t.astype(np.uint32) << 16).view(np.float32)
    return t.astype(np.float64)


def random_input(spec: redfuse.TensorSpec, shape, rng) -> np.ndarray:
    # U[0.5, 1.5): positive values keep logs, square roots and divisions defined in every example.
    x = rng.uniform(0.5, 1.5, size=shape)
    if spec.dtype == "bf16":
        return bf16_bits(x)
    if spec.dtype in ("f8e4m3", "f8e5m2"):
        # Codes of small positive normal values: exponent bits 0b0110..0b0111 (about 0.25 .. 1).
        return rng.integers(0x30, 0x3F, size=shape, dtype=np.uint8)
    if spec.dtype.startswith("i"):
        return rng.integers(0, 2, size=shape).astype(np.dtype({"i8": np.int8, "i32": np.int32, "i64": np.int64}[spec.dtype]))
    return x.astype({"f64": np.float64, "f32": np.float32, "f16": np.float16}[spec.dtype])


def default_shape(spec: redfuse.TensorSpec, sizes: dict) -> tuple:
    return tuple(int(eval(d, {}, dict(sizes))) for d in spec.shape)  # dims are size names or simple index arithmetic


def spec_defaults(path: pathlib.Path) -> dict:
    return spec_sizes(path.read_text())


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_cpu_matches_the_plan_interpreter(path):
    cpu = redfuse.compile(str(path), target="cpu")
    interp = redfuse.compile(str(path), target="interp")
    sizes = spec_defaults(path)
    rng = np.random.default_rng(7)
    try:
        args = [random_input(s, default_shape(s, sizes), rng) for s in cpu.inputs]
    except (NameError, SyntaxError):
        pytest.skip("a dimension that is not a size expression")
    got, want = cpu(*args), interp(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for out, g, w in zip(cpu.outputs, got, want):
        assert g.shape == w.shape
        if out.is_index:
            np.testing.assert_array_equal(g, w, err_msg=f"{path.stem}: {out.name}")
            continue
        gf, wf = bits_to_float(g, out.dtype), bits_to_float(w, out.dtype)
        scale = max(1.0, float(np.nanmax(np.abs(wf)))) if wf.size else 1.0
        tol = {"bf16": 2e-2, "f16": 4e-3, "f8e4m3": 0.13, "f8e5m2": 0.26, "i8": 1.0, "i32": 1.0}.get(out.dtype, 2e-4)
        assert np.nanmax(np.abs(gf - wf)) <= tol * scale, f"{path.stem}: {out.name}"


def test_new_sizes_reuse_the_built_kernel():
    k = redfuse.compile(SOFTMAX)
    builds = redfuse.stats()["builds"]
    for r, c in [(1, 1), (3, 7), (33, 4099)]:
        x = np.random.default_rng(r).standard_normal((r, c)).astype(np.float32)
        ref = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(k(x), ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert redfuse.stats()["builds"] == builds


def test_by_name_and_strided_inputs():
    k = redfuse.compile(SOFTMAX)
    x = np.random.default_rng(1).standard_normal((40, 9)).astype(np.float32)
    np.testing.assert_array_equal(k(X=x.T.copy()), k(np.ascontiguousarray(x.T)))
    np.testing.assert_allclose(k(x.T), k(np.ascontiguousarray(x.T)), rtol=0, atol=0)  # strides {1, 9}
    np.testing.assert_allclose(k(x[::2]), k(np.ascontiguousarray(x[::2])), rtol=0, atol=0)


def test_metadata_and_reports():
    k = redfuse.compile(str(ROOT / "examples" / "attention.rf"))
    assert [t.name for t in k.inputs] == ["Q", "K", "V"]
    assert k.inputs[0].shape == ("B", "H", "M", "D") and k.inputs[0].dtype == "bf16"
    assert [t.name for t in k.outputs] == ["O"]
    assert k.analysis["chains"][0]["fused"] is True
    assert "multiplicative" in k.explain()
    assert "redfuse_run" in k.source("cpu")
    assert "fused" in repr(k)
    with pytest.raises(ValueError, match="built for cpu"):
        redfuse.compile(str(ROOT / "examples" / "attention.rf"), target="cpu").source("opencl")


def test_two_threads_calling_one_kernel():
    k = redfuse.compile(SOFTMAX)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((5 + i, 100 + 31 * i)).astype(np.float32) for i in range(16)]
    alone = [k(x) for x in xs]
    together = in_two_threads(k, xs)
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


def test_bad_inputs_are_exceptions():
    k = redfuse.compile(str(ROOT / "examples" / "attention.rf"))
    q = np.zeros((1, 2, 5, 4), np.uint16)
    kv = np.zeros((1, 2, 7, 4), np.uint16)
    with pytest.raises(TypeError, match="takes 3 input"):
        k(q, kv)
    with pytest.raises(TypeError, match="unknown input"):
        k(Q=q, K=kv, W=kv)
    with pytest.raises(TypeError, match="input 'Q' has dtype float32; the spec declares bf16"):
        k(q.astype(np.float32), kv, kv)
    with pytest.raises(ValueError, match=r"input 'K' dimension 3 \(size D\) is 5"):
        k(q, np.zeros((1, 2, 7, 5), np.uint16), kv)
    with pytest.raises(ValueError, match="dimension"):
        k(q, kv, np.zeros((1, 2, 8, 4), np.uint16))
    with pytest.raises(TypeError, match="NumPy array"):
        k([1.0], kv, kv)


def test_the_cpp_hot_path_matches_the_general_one():
    # After its first NumPy call a kernel takes the C++ path (numpy_call.cpp): the same results on
    # every layout the general path takes, and the general path's errors for what it refuses.
    k = redfuse.compile(SOFTMAX)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((12, 40)).astype(np.float32)
    first = k(x)
    assert k._np_fast is not None
    other = redfuse.compile(SOFTMAX)

    def general(a):  # the general path alone (it sets the C++ path up again after each call)
        other._np_fast = None
        return other(a)

    np.testing.assert_array_equal(k(x), first)
    readonly = x.copy()
    readonly.setflags(write=False)
    for a in (x.T, x[::-1], x[:, ::3], np.asfortranarray(x), readonly, x[3:4], np.ascontiguousarray(x.T)[::2]):
        np.testing.assert_array_equal(k(a), general(a))
    with pytest.raises(ValueError, match="every extent must be at least 1"):  # empty: the general path's error
        k(np.zeros((0, 5), np.float32))
    class Sub(np.ndarray):
        pass

    np.testing.assert_array_equal(k(x.view(Sub)), first)  # a subclass: the general path
    with pytest.raises(TypeError, match="has dtype float64"):
        k(x.astype(np.float64))
    with pytest.raises(TypeError, match="has dtype >f4"):
        k(x.astype(">f4"))
    att = redfuse.compile(str(ROOT / "examples" / "attention.rf"))
    q = np.zeros((1, 2, 5, 4), np.uint16)
    kv = np.zeros((1, 2, 7, 4), np.uint16)
    assert att(q, kv, kv).shape == (1, 2, 5, 4) and att._np_fast is not None
    with pytest.raises(ValueError, match=r"input 'K' dimension 3 \(size D\) is 5"):
        att(q, np.zeros((1, 2, 7, 5), np.uint16), kv)
    with pytest.raises(TypeError, match="NumPy array"):
        att([1.0], kv, kv)
    with pytest.raises(TypeError, match="takes 3 input"):
        att(q, kv)


def test_schedule_options():
    x = np.random.default_rng(5).standard_normal((7, 300)).astype(np.float32)
    fused = redfuse.compile(SOFTMAX, target="cpu")
    unfused = redfuse.compile(SOFTMAX, target="cpu", unfused=True)
    forced = redfuse.compile(SOFTMAX, target="cpu", strategy="multi_pass", threads=1)
    # The strategy is forced when lowering (the analysis still says what the planner chose).
    assert fused.analysis["chains"][0]["strategy"] != "multi_pass" and forced.source() != fused.source()
    assert unfused.source() != fused.source()
    for k in (unfused, forced):
        np.testing.assert_allclose(k(x), fused(x), rtol=1e-5, atol=1e-8)
    with pytest.raises(redfuse.SpecError, match="unknown strategy 'fastest'"):
        redfuse.compile(SOFTMAX, strategy="fastest")
    with pytest.raises(ValueError, match="threads must be a positive int"):
        redfuse.compile(SOFTMAX, threads=0)


def test_analysis_of_kernels_that_are_gone():
    """compile(f).analysis on temporaries, one after another: each kernel frees its arena with itself,
    and its texts must not leave nodes in another arena (this loop segfaulted in rf::substitute)."""
    texts = [redfuse.compile(str(p), target="interp").analysis["chains"] for p in EXAMPLES]
    again = [redfuse.compile(str(p), target="interp").analysis["chains"] for p in EXAMPLES]
    assert texts == again


def test_forced_tile_segments_and_row_block():
    """tile, segments and row_block force the schedule (the command line's --tile, --segments,
    --row-block): the code changes, the results agree up to the order of rounding."""
    x = np.random.default_rng(6).standard_normal((37, 1000)).astype(np.float32)
    fused = redfuse.compile(SOFTMAX, target="cpu")
    want = fused(x)
    forced = {"tile": redfuse.compile(SOFTMAX, target="cpu", tile=96),
              "segments": redfuse.compile(SOFTMAX, target="cpu", segments=3),
              "row_block": redfuse.compile(SOFTMAX, target="cpu", row_block=5),
              "all": redfuse.compile(SOFTMAX, target="cpu", tile=64, segments=2, row_block=3)}
    for name, k in forced.items():
        assert k.source() != fused.source(), name
        np.testing.assert_allclose(k(x), want, rtol=1e-5, atol=1e-8, err_msg=name)
    # A 96-wide tile: its loop bound is in the code (tile_begin + 96).
    assert "(int64_t)96" in forced["tile"].source() and "(int64_t)96" not in fused.source()
    for bad in ({"tile": 0}, {"tile": 1 << 21}, {"segments": 4097}, {"row_block": -1}, {"row_block": 2.0}, {"tile": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            redfuse.compile(SOFTMAX, **bad)


def test_bad_specs_are_spec_errors_with_their_place():
    with pytest.raises(redfuse.SpecError) as e:
        redfuse.compile("size R\ninput X[R] : f32\nY[r] = X[r] +\noutput Y\n")
    assert (e.value.line, e.value.column) == (3, 14)
    assert "expected an expression" in e.value.message
    with pytest.raises(redfuse.SpecError, match="cannot read spec file"):
        redfuse.compile("no/such/spec.rf")
    with pytest.raises(redfuse.SpecError, match="unknown target"):
        redfuse.compile(SOFTMAX, target="tpu")
