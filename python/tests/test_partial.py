"""Partial states in one process (docs/sharding.md): Kernel.partial on slices and on shards,
redfuse.merge in any order and grouping, Kernel.finalize equal to the kernel's own outputs."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import redfuse

from sharding_cases import cases, close, example, splits

CASES = cases()


def outputs(x):
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("parts", [1, 2, 4])
def test_slices_merge_to_the_whole(name, parts):
    spec, inputs, tol = CASES[name]
    k = redfuse.compile(spec, target="cpu")
    want = outputs(k(*inputs))
    n = k.partial(*inputs, axis_slice=(0, 1)).kernel._partials[("", 0)].layout  # the layout is cached
    axis_len = None
    for x, t in zip(inputs, k.inputs):
        if t.name in n["sharded_inputs"]:
            axis_len = x.shape[n["sharded_inputs"][t.name]]
    states = [k.partial(*inputs, axis_slice=r) for r in splits(axis_len, parts)]
    for order in itertools.islice(itertools.permutations(range(parts)), 3):
        got = outputs(k.finalize(redfuse.merge([states[i] for i in order])))
        for g, w in zip(got, want):
            assert close(g, w, tol) == "", f"{name}, order {order}: {close(g, w, tol)}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_shards_with_offsets_and_nested_merges(name):
    spec, inputs, tol = CASES[name]
    k = redfuse.compile(spec, target="cpu")
    want = outputs(k(*inputs))
    lay = k.partial(*inputs, axis_slice=(0, 1)).kernel._partials[("", 0)].layout
    dims = {t.name: lay["sharded_inputs"].get(t.name) for t in k.inputs}
    length = next(x.shape[dims[t.name]] for x, t in zip(inputs, k.inputs) if dims[t.name] is not None)
    ranges = splits(length, 3)
    states = []
    for lo, hi in ranges:
        shard = [x.narrow(dims[t.name], lo, hi - lo) if dims[t.name] is not None else x for x, t in zip(inputs, k.inputs)]
        states.append(k.partial(*shard, axis_offset=lo, axis_size=length))
    nested = redfuse.merge([states[2], redfuse.merge([states[0], states[1]])])
    for g, w in zip(outputs(k.finalize(nested)), want):
        assert close(g, w, tol) == ""


def test_causal_shards_fully_masked_for_early_queries_have_no_nan():
    spec, (q, kk, v), tol = CASES["attention_causal"]
    k = redfuse.compile(spec, target="cpu")
    late = k.partial(q, kk, v, axis_slice=(20, 23))  # queries 0..19 see nothing of it
    assert not any(torch.isnan(t.double()).any() for t in late.tensors.values())
    early = k.partial(q, kk, v, axis_slice=(0, 20))
    got = k.finalize(redfuse.merge([late, early]))
    assert close(got, k(q, kk, v), tol) == ""


def test_numpy_states_and_layout_fields():
    x = np.random.default_rng(1).standard_normal((4, 31)).astype(np.float32) + 50
    k = redfuse.compile(example("softmax_entropy"), target="cpu")
    st = k.partial(x, axis_slice=(0, 10))
    assert isinstance(st, redfuse.State) and st.n == 10
    assert {"m.acc", "s.acc", "s.tag0", "t.S0", "t.S1", "t.tag0"} <= set(st.tensors)
    whole = k.finalize(redfuse.merge([st, k.partial(x, axis_slice=(10, 31))]))
    np.testing.assert_allclose(whole, k(x), rtol=1e-5, atol=1e-5)


def test_top_k_indices_are_global_with_ties_to_the_lowest():
    x = torch.zeros(3, 10)  # every value ties: the lowest global indices win
    k = redfuse.compile(example("moe_routing"), target="cpu")
    st = redfuse.merge([k.partial(x, axis_slice=(5, 10)), k.partial(x, axis_slice=(0, 5))])
    w, i = k.finalize(st)
    assert i.tolist() == [[0, 1, 2, 3]] * 3


def test_errors_are_clear():
    k = redfuse.compile(example("variance"), target="cpu")
    x = torch.randn(5, 37)
    with pytest.raises(TypeError, match="exactly one"):
        k.partial(x)
    with pytest.raises(ValueError, match="axis_slice"):
        k.partial(x, axis_slice=(5, 3))
    with pytest.raises(ValueError, match="axis_size"):
        k.partial(x[:, :10], axis_offset=0)  # the mean's / C needs the whole length
    st = k.partial(x, axis_slice=(0, 10))
    with pytest.raises(ValueError, match="covers 10 positions"):
        k.finalize(st)
    bad = redfuse.State(k, {**st.tensors, "var.sum.S0": st.tensors["var.sum.S0"][:2]}, st.n, st.axis)
    with pytest.raises(ValueError, match="shape"):
        redfuse.merge([bad, st])
    with pytest.raises(redfuse.SpecError, match="reads 'X' along the sharded axis"):
        redfuse.compile(example("softmax"), target="cpu").partial(x, axis_slice=(0, 3))
    with pytest.raises(redfuse.SpecError, match="needs 2 passes"):
        kq = redfuse.compile(example("quant_gemm_int8"), target="cpu")
        kq.partial(*[torch.zeros(tuple(2 if not str(d).isdigit() else int(d) for d in t.shape), dtype=getattr(torch, {"f32": "float32", "bf16": "bfloat16", "i8": "int8"}.get(t.dtype, "float32"))) for t in kq.inputs], axis_slice=(0, 1))


def test_a_state_rebuilt_from_its_tensors_finalizes():
    spec, (q, kk, v), tol = CASES["attention"]
    k = redfuse.compile(spec, target="cpu")
    n = kk.shape[2]
    st = redfuse.merge([k.partial(q, kk, v, axis_slice=(0, 3)), k.partial(q, kk, v, axis_slice=(3, n))])
    sent = {key: t.clone() for key, t in st.tensors.items()}  # what a transport carries
    again = redfuse.State(k, sent, st.n)
    assert close(k.finalize(again), k(q, kk, v), tol) == ""
    assert again.sizes == {} and st.sizes["N"] == n
