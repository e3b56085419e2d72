"""The TVM peer: every workload written as a Relax graph of standard operators (the same unfused
math as the PyTorch eager peer) and compiled by TVM's default pipeline for the llvm target
(`tvm.compile(mod, target)` -> relax.backend.cpu_generic: LegalizeOps to TE/TIR, FuseOps, FuseTIR, no
schedule search). The target names the host CPU (`llvm_get_system_cpu`, e.g. znver5) so LLVM may use
AVX-512. What this pipeline produces is unscheduled TIR: serial loops, no threads, no tiling — that is
TVM without MetaSchedule tuning, the configuration the issue asks for.

Imported lazily by peers.py: when apache-tvm is not installed, the TVM column says why.
"""
import numpy as np

import tvm
from tvm import relax
from tvm.relax import op as R

RELAX_DTYPE = {"f32": "float32", "bf16": "bfloat16"}


def target(num_cores):
    from tvm.target import codegen
    cpu = codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": int(num_cores)})


def _T(shape, dtype):
    return relax.TensorType(list(shape), dtype)


def _build(params, body):
    """params: [(name, shape, dtype)]; body(bb, vars) -> relax expr (tensor or tuple)."""
    bb = relax.BlockBuilder()
    vs = [relax.Var(n, _T(s, d)) for n, s, d in params]
    with bb.function("main", vs):
        with bb.dataflow():
            out = body(bb, vs)
            if isinstance(out, (list, tuple)):
                out = bb.emit_output(relax.Tuple([o for o in out]))
            else:
                out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def module(case):
    """The Relax module of a case and the names of its inputs, in parameter order."""
    w, z, dt = case["workload"], case["sizes"], RELAX_DTYPE[case["dtype"]]
    f32 = "float32"
    if w in ("softmax", "softmax_fusion_study"):
        def body(bb, v):
            return bb.emit(R.nn.softmax(v[0], axis=-1))
        return _build([("X", (z["R"], z["C"]), dt)], body), ["X"]
    if w == "attention":
        B, H, D, N = z["B"], z["H"], z["D"], z["N"]
        M = z.get("M", N)
        causal = case["variant"] == "causal"

        def body(bb, v):
            Q, K, V = v
            # products accumulate in f32 and round to the input dtype, as PyTorch's bf16 matmul does
            S = bb.emit(R.astype(R.matmul(Q, R.permute_dims(K, [0, 1, 3, 2]), out_dtype=f32), dt))
            S = bb.emit(R.multiply(S, relax.const(1.0 / np.sqrt(D), dt)))
            if causal:
                mask = np.triu(np.full((M, N), -np.inf, dtype=np.float32), 1)
                S = bb.emit(R.add(S, R.astype(relax.const(mask, f32), dt)))
            P = bb.emit(R.nn.softmax(S, axis=-1))
            return bb.emit(R.astype(R.matmul(P, V, out_dtype=f32), dt))
        return _build([("Q", (B, H, M, D), dt), ("K", (B, H, N, D), dt), ("V", (B, H, N, D), dt)], body), \
            ["Q", "K", "V"]
    if w == "decode_gqa":
        B, Hq, Hkv, N, D = z["B"], z["Hq"], z["Hkv"], z["N"], z["D"]
        G = Hq // Hkv

        def body(bb, v):
            Q, K, V = v
            q = bb.emit(R.reshape(Q, [B, Hkv, G, D]))
            S = bb.emit(R.astype(R.matmul(q, R.permute_dims(K, [0, 1, 3, 2]), out_dtype=f32), dt))
            S = bb.emit(R.multiply(S, relax.const(1.0 / np.sqrt(D), dt)))
            P = bb.emit(R.nn.softmax(S, axis=-1))
            O = bb.emit(R.astype(R.matmul(P, V, out_dtype=f32), dt))
            return bb.emit(R.reshape(O, [B, Hq, D]))
        return _build([("Q", (B, Hq, D), dt), ("K", (B, Hkv, N, D), dt), ("V", (B, Hkv, N, D), dt)], body), \
            ["Q", "K", "V"]
    if w == "moe_routing":
        T, E, k = z["T"], z["E"], z["k"]

        def body(bb, v):
            P = bb.emit(R.nn.softmax(v[0], axis=-1))
            WI = bb.emit(R.topk(P, k, axis=-1, ret_type="both", largest=True, dtype="int32"))
            return [bb.emit(relax.TupleGetItem(WI, 0)), bb.emit(relax.TupleGetItem(WI, 1))]
        return _build([("X", (T, E), dt)], body), ["X"]
    if w == "variance":
        def body(bb, v):
            return [bb.emit(R.mean(v[0], axis=[-1])), bb.emit(R.variance(v[0], axis=[-1]))]
        return _build([("X", (z["R"], z["C"]), dt)], body), ["X"]
    if w == "layernorm":
        Rn, C = z["R"], z["C"]

        def body(bb, v):
            return bb.emit(R.nn.layer_norm(v[0], v[1], v[2], axes=[-1], epsilon=1e-5))
        return _build([("X", (Rn, C), dt), ("gamma", (C,), dt), ("beta", (C,), dt)], body), \
            ["X", "gamma", "beta"]
    if w == "rmsnorm_gemm":
        M, N, K = z["M"], z["N"], z["K"]

        def body(bb, v):
            X, g, Wt = v
            Xn = bb.emit(R.nn.rms_norm(X, g, axes=[-1], epsilon=1e-6))
            Y = bb.emit(R.matmul(Xn, R.permute_dims(Wt, [1, 0]), out_dtype=f32))
            return bb.emit(R.astype(Y, dt))
        return _build([("X", (M, K), dt), ("g", (K,), dt), ("Wt", (N, K), dt)], body), ["X", "g", "Wt"]
    if w == "quant_gemm_int8":
        M, N, K = z["M"], z["N"], z["K"]

        def body(bb, v):
            A, Wq, sw = v
            Af = bb.emit(R.astype(A, f32))
            a = bb.emit(R.max(R.abs(Af), axis=[-1], keepdims=True))
            q = bb.emit(R.astype(R.round(R.divide(R.multiply(Af, relax.const(127.0, f32)), a)), "int8"))
            C = bb.emit(R.matmul(q, R.permute_dims(Wq, [1, 0]), out_dtype="int32"))
            Cf = bb.emit(R.multiply(R.multiply(R.astype(C, f32), R.divide(a, relax.const(127.0, f32))), sw))
            return bb.emit(R.astype(Cf, dt))
        return _build([("A", (M, K), dt), ("Wq", (N, K), "int8"), ("sw", (N,), f32)], body), ["A", "Wq", "sw"]
    if w == "linear_cross_entropy":
        T, D, V = z["T"], z["D"], z["V"]

        def body(bb, v):
            Hd, Wv, y = v
            L = bb.emit(R.matmul(Hd, R.permute_dims(Wv, [1, 0]), out_dtype=f32))
            m = bb.emit(R.max(L, axis=[-1], keepdims=True))
            s = bb.emit(R.sum(R.exp(R.subtract(L, m)), axis=[-1], keepdims=True))
            lse = bb.emit(R.add(R.log(s), m))
            zt = bb.emit(R.gather_elements(L, R.expand_dims(y, [-1]), axis=1))
            return bb.emit(R.reshape(R.subtract(lse, zt), [T]))
        return _build([("Hd", (T, D), dt), ("Wv", (V, D), dt), ("y", (T,), "int32")], body), ["Hd", "Wv", "y"]
    if w == "moment_of_inertia":
        S, N = z["S"], z["N"]

        def body(bb, v):
            wt, P = v
            W = bb.emit(R.sum(wt, axis=[-1]))
            c = bb.emit(R.divide(R.sum(R.multiply(R.expand_dims(wt, [-1]), P), axis=[1]), R.expand_dims(W, [-1])))
            d = bb.emit(R.subtract(P, R.expand_dims(c, [1])))
            return bb.emit(R.sum(R.multiply(wt, R.sum(R.multiply(d, d), axis=[-1])), axis=[-1]))
        return _build([("w", (S, N), dt), ("P", (S, N, 3), dt)], body), ["w", "P"]
    raise KeyError(w)


def prepare(case, inp, num_cores):
    """Compiles the case; returns (run, to_torch_outputs). `inp` holds torch tensors."""
    import torch
    mod, names = module(case)
    ex = tvm.compile(mod, target=target(num_cores))
    dev = tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    from tvm_ffi import from_dlpack
    args = [from_dlpack(inp[n].contiguous()) for n in names]
    fn = vm["main"]

    def run(_inp=None):
        return fn(*args)

    def outputs(res):
        items = list(res) if not hasattr(res, "shape") else [res]
        return tuple(torch.from_dlpack(x) for x in items)
    return run, outputs
