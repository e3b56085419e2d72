/** \file Programs.h
 * Hand-built Programs for the interpreter tests, written with the IR constructors so the tests do
 * not depend on the parser (each mirrors an examples/ spec in lifted form).
 */
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "ir/Expr.h"
#include "ir/Program.h"

namespace rf::test {

inline Expr idx(const char *n) { return make_index(n); }
inline Expr sz(const char *n) { return make_size(n); }
inline Expr ld(const std::string &t, std::vector<Expr> i, DType d = DType::f64) {
    return make_load(t, std::move(i), d, SType::Real);
}
inline Expr red(ReduceOp op, Expr axis, Expr extent, Expr body, int64_t k = 0) {
    return make_reduce(op, {axis}, {extent}, body, k);
}
inline void add_input(Program &p, const std::string &n, std::vector<Expr> dims, DType d) {
    InputDecl in;
    in.name = n;
    in.dims = std::move(dims);
    in.dtype = d;
    p.inputs.push_back(in);
}
inline void add_def(Program &p, const std::string &n, std::vector<Expr> vars, std::vector<Expr> extents, Expr body,
                    SType st = SType::Real) {
    TensorDef d;
    d.name = n;
    d.vars = std::move(vars);
    d.extents = std::move(extents);
    d.body = body;
    d.stype = st;
    p.defs.push_back(d);
}
inline void add_output(Program &p, const std::string &n, DType d) {
    OutputDecl o;
    o.name = n;
    o.dtype = d;
    p.outputs.push_back(o);
}
inline void add_sizes(Program &p, std::vector<std::string> names) {
    for (auto &n : names) p.sizes.push_back({n, std::nullopt, {}});
}

/** softmax.rf: m = max, s = sum exp(x - m), Y = exp(x - m) / s. */
inline Program softmax_program(DType in = DType::f32) {
    Program p;
    p.file = "softmax";
    add_sizes(p, {"R", "C"});
    Expr r = idx("r"), c = idx("c"), R = sz("R"), C = sz("C");
    add_input(p, "X", {R, C}, in);
    Expr x = ld("X", {r, c}, in), m = ld("m", {r});
    add_def(p, "m", {r}, {R}, red(ReduceOp::Max, c, C, x));
    add_def(p, "s", {r}, {R}, red(ReduceOp::Sum, c, C, make_call(Func::exp, make_sub(x, m))));
    add_def(p, "Y", {r, c}, {R, C}, make_div(make_call(Func::exp, make_sub(x, m)), ld("s", {r})));
    add_output(p, "Y", DType::f32);
    return p;
}

/** attention.rf with an optional mask on the logits: S.sum = QK^T (lifted), then m, l, O.
 *  mask(i, j) returns a Bool expression or nullptr for none. Q has Hq heads, K/V have Hkv; the K
 *  head of query head h is h / (Hq / Hkv) (GQA; plain attention when Hq == Hkv). */
inline Program attention_program(Expr (*mask)(Expr, Expr) = nullptr) {
    Program p;
    p.file = "attention";
    add_sizes(p, {"B", "Hq", "Hkv", "M", "N", "D"});
    Expr b = idx("b"), h = idx("h"), i = idx("i"), j = idx("j"), d = idx("d"), e = idx("e");
    Expr B = sz("B"), Hq = sz("Hq"), Hkv = sz("Hkv"), M = sz("M"), N = sz("N"), D = sz("D");
    add_input(p, "Q", {B, Hq, M, D}, DType::f32);
    add_input(p, "K", {B, Hkv, N, D}, DType::f32);
    add_input(p, "V", {B, Hkv, N, D}, DType::f32);
    Expr kh = make_idiv(h, make_idiv(Hq, Hkv));
    Expr qk = red(ReduceOp::Sum, d, D, make_mul(ld("Q", {b, h, i, d}, DType::f32), ld("K", {b, kh, j, d}, DType::f32)));
    add_def(p, "S.sum", {b, h, i, j}, {B, Hq, M, N}, qk);
    Expr s = make_mul(ld("S.sum", {b, h, i, j}), make_call(Func::rsqrt, D));
    if (mask) s = make_select(mask(i, j), s, make_const(-INFINITY));
    Expr m = ld("m", {b, h, i});
    add_def(p, "m", {b, h, i}, {B, Hq, M}, red(ReduceOp::Max, j, N, s));
    Expr p_ij = make_call(Func::exp, make_sub(s, m));
    add_def(p, "l", {b, h, i}, {B, Hq, M}, red(ReduceOp::Sum, j, N, p_ij));
    add_def(p, "O.sum", {b, h, i, e}, {B, Hq, M, D},
            red(ReduceOp::Sum, j, N, make_mul(p_ij, ld("V", {b, kh, j, e}, DType::f32))));
    add_def(p, "O", {b, h, i, e}, {B, Hq, M, D}, make_div(ld("O.sum", {b, h, i, e}), ld("l", {b, h, i})));
    add_def(p, "lse", {b, h, i}, {B, Hq, M}, make_add(m, make_call(Func::log, ld("l", {b, h, i}))));
    add_output(p, "O", DType::f32);
    add_output(p, "lse", DType::f32);
    return p;
}

/** moe_routing.rf: m, s, then top-k of the softmax probabilities. */
inline Program moe_program(int64_t k) {
    Program p;
    p.file = "moe";
    add_sizes(p, {"T", "E"});
    Expr t = idx("t"), e = idx("e"), r = idx("r"), T = sz("T"), E = sz("E");
    add_input(p, "X", {T, E}, DType::f32);
    Expr x = ld("X", {t, e}, DType::f32), m = ld("m", {t});
    add_def(p, "m", {t}, {T}, red(ReduceOp::Max, e, E, x));
    add_def(p, "s", {t}, {T}, red(ReduceOp::Sum, e, E, make_call(Func::exp, make_sub(x, m))));
    TensorDef d;
    d.name = "W";
    d.index_name = "I";
    d.vars = {t, r};
    d.extents = {T, make_int(k)};
    d.body = red(ReduceOp::TopK, e, E, make_div(make_call(Func::exp, make_sub(x, m)), ld("s", {t})), k);
    p.defs.push_back(d);
    add_output(p, "W", DType::f32);
    add_output(p, "I", DType::i32);
    return p;
}

}  // namespace rf::test
