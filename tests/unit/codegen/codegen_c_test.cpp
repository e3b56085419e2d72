/** \file codegen_c_test.cpp
 * The C++ expression printer against the scalar evaluator: random expressions, nested reductions,
 * the masked-row conventions and every cast, compiled with the run-time compiler and evaluated on
 * the same values as rf::Evaluator. Generated code must mean exactly what the spec means.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "codegen/CodeGen_C.h"
#include "ir/Eval.h"
#include "runtime/Jit.h"

using namespace rf;

namespace {

const int kAtoms = 4;

/** A random real expression over symbols a0..a3 and a small table T[i] read at index arithmetic. */
class Gen {
public:
    explicit Gen(uint64_t seed) : rng_(seed) {}
    Expr real(int depth) {
        if (depth == 0 || pick(4) == 0) return leaf();
        Expr x = real(depth - 1), y = real(depth - 1);
        switch (pick(14)) {
        case 0: return make_add(x, y);
        case 1: return make_sub(x, y);
        case 2: return make_mul(x, y);
        case 3: return make_div(x, y);
        case 4: return make_neg(x);
        case 5: return make_call(Func::exp, make_mul(make_const(0.25), x));
        case 6: return make_call(Func::tanh, x);
        case 7: return make_call(Func::sigmoid, x);
        case 8: return make_max(x, y);
        case 9: return make_min(x, y);
        case 10: return make_select(make_cmp(CmpOp::LT, x, y), x, y);
        case 11: return make_pow(make_call(Func::abs, x), make_const(pick(2) ? 2.0 : 0.5));
        case 12: return make_cast(pick(2) ? DType::bf16 : DType::f8e4m3, x);
        default: {
            Expr a = make_index("k");
            Expr body = make_mul(table(make_mod(make_add(a, make_int(pick(5))), make_int(5))), x);
            ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod};
            return make_reduce(ops[pick(4)], {a}, {make_int(3)}, body);
        }
        }
    }

private:
    int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
    Expr table(Expr idx) { return make_load("T", {idx}, DType::f64, SType::Real); }
    Expr leaf() {
        switch (pick(4)) {
        case 0: return make_const(std::uniform_real_distribution<double>(-2, 2)(rng_));
        case 1: return table(make_int(pick(5)));
        default: return make_symbol("a" + std::to_string(pick(kAtoms)));
        }
    }
    std::mt19937_64 rng_;
};

CEmitContext context(const std::string &real) {
    CEmitContext ctx;
    ctx.real = real;
    ctx.var = [](Expr v) { return "atoms[" + v->name.substr(1) + "]"; };
    ctx.load = [](Expr, const std::vector<std::string> &idx) { return "table[" + idx[0] + "]"; };
    return ctx;
}

// The helpers' text pasted, not #included: the JIT cache is keyed by the source text, so an edit of
// redfuse_cpu.h must change it (an #include line kept serving the code compiled before the edit).
std::string header() {
    std::ifstream in(std::string(REDFUSE_SOURCE_DIR) + "/src/runtime/kernels/redfuse_cpu.h");
    std::stringstream text;
    text << in.rdbuf();
    return "#include <algorithm>\n#include <cstdint>\n#include <limits>\n" + text.str() + "\n";
}

JitOptions jit_options() {
    JitOptions o;
    o.flags = {"-O1"};
    o.cache_dir = (std::filesystem::temp_directory_path() / "redfuse_codegen_test_cache").string();
    return o;
}

}  // namespace

TEST(CodeGenC, RandomExpressionsMatchTheEvaluator) {
    ArenaScope arena;
    Gen gen(42);
    std::vector<Expr> exprs;
    for (int i = 0; i < 300; i++) exprs.push_back(gen.real(4));
    std::ostringstream src;
    src << header() << "extern \"C\" void eval_all(const double *atoms, const double *table, double *out) {\n";
    CEmitContext ctx = context("double");
    for (size_t i = 0; i < exprs.size(); i++) src << "  out[" << i << "] = " << emit_c(exprs[i], ctx) << ";\n";
    src << "}\n";
    auto so = jit_compile(src.str(), jit_options());
    auto fn = reinterpret_cast<void (*)(const double *, const double *, double *)>(so->symbol("eval_all"));

    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 20; trial++) {
        double atoms[kAtoms], table[5];
        for (double &a : atoms) a = std::uniform_real_distribution<double>(-3, 3)(rng);
        for (double &t : table) t = std::uniform_real_distribution<double>(-2, 2)(rng);
        if (trial == 0) atoms[0] = -INFINITY;  // masked values flow through sub/div/max
        std::vector<double> out(exprs.size());
        fn(atoms, table, out.data());
        EvalEnv env;
        env.var_value = [&](Expr v) { return atoms[std::stoi(v->name.substr(1))]; };
        env.load_value = [&](Expr, const int64_t *idx) { return table[idx[0]]; };
        Evaluator ev(env);
        for (size_t i = 0; i < exprs.size(); i++) {
            double want = ev.eval(exprs[i]), got = out[i];
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(got)) << to_string(exprs[i]);
                continue;
            }
            if (std::isinf(want)) {
                EXPECT_EQ(got, want) << to_string(exprs[i]);
                continue;
            }
            EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::fabs(want))) << to_string(exprs[i]);
        }
    }
}

TEST(CodeGenC, CastsRoundExactlyLikeTheReference) {
    ArenaScope arena;
    const DType types[] = {DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2, DType::i8, DType::i32};
    std::ostringstream src;
    src << header() << "extern \"C\" void casts(const double *atoms, double *out) {\n";
    CEmitContext ctx = context("double");
    for (size_t t = 0; t < std::size(types); t++)
        src << "  out[" << t << "] = " << emit_c(make_cast(types[t], make_symbol("a0")), ctx) << ";\n";
    src << "}\n";
    auto so = jit_compile(src.str(), jit_options());
    auto fn = reinterpret_cast<void (*)(const double *, double *)>(so->symbol("casts"));
    std::mt19937_64 rng(3);
    std::vector<double> values = {0.0, -0.0, 1.0, 0.5, 2.5, -2.5, 448.0, 449.0, 464.0, 1e9, -1e9, 65520.0, 1e-9,
                                  INFINITY, -INFINITY, 1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 127.5, -128.5};
    for (int i = 0; i < 20000; i++) {
        double mag = std::ldexp(1.0, static_cast<int>(rng() % 60) - 30);
        values.push_back(std::uniform_real_distribution<double>(-1, 1)(rng) * mag);
    }
    for (double v : values) {
        double out[std::size(types)];
        fn(&v, out);
        for (size_t t = 0; t < std::size(types); t++) {
            double want = round_to_dtype(v, types[t]);
            EXPECT_TRUE(out[t] == want || (std::isnan(out[t]) && std::isnan(want)))
                << dtype_name(types[t]) << "(" << v << "): " << out[t] << " vs " << want;
        }
    }
}

TEST(CodeGenC, Int8CastsStayInTheRealTypeAndRoundLikeTheReference) {
    // f32(i8(x)) (a quantization feeding an int8 GEMM) prints without the float64 round trip of
    // cast_i8 / cast_f32 in float and in double code, with the same integer: ties to even, clamped
    // to [-128, 127], NaN to 0, infinities clamped.
    ArenaScope arena;
    Expr q = make_cast(DType::f32, make_cast(DType::i8, make_symbol("a0")));
    std::ostringstream src;
    src << header() << "extern \"C\" void q(const double *atoms, double *out) {\n";
    for (const char *real : {"float", "double"}) {
        std::string text = emit_c(q, context(real));
        EXPECT_NE(text.find("rfk::round_i8<" + std::string(real) + ">"), std::string::npos) << text;
        EXPECT_EQ(text.find("cast_i8"), std::string::npos) << text;
        src << "  out[" << (std::string(real) == "float" ? 0 : 1) << "] = " << text << ";\n";
    }
    src << "}\n";
    auto so = jit_compile(src.str(), jit_options());
    auto fn = reinterpret_cast<void (*)(const double *, double *)>(so->symbol("q"));
    std::vector<double> values = {0.0, -0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 126.5, 127.5, 128.0, -128.5, -129.0, 1e9, -1e9, 3.4e38,
                                  INFINITY, -INFINITY, NAN, 0.49999997, 12.25, -7.75};
    std::mt19937_64 rng(11);
    for (int i = 0; i < 5000; i++) values.push_back(static_cast<float>(std::uniform_real_distribution<double>(-300, 300)(rng)));
    for (double v : values) {
        double out[2];
        fn(&v, out);
        double want = round_to_dtype(round_to_dtype(v, DType::i8), DType::f32);
        EXPECT_EQ(out[0], want) << "float f32(i8(" << v << "))";
        EXPECT_EQ(out[1], want) << "double f32(i8(" << v << "))";
    }
}

TEST(CodeGenC, Int8CastOfAQuotientDividesPlainlyWithTheSameInteger) {
    // i8(round(a / b)) and i8(a / b) (the int8 quantizer) print the division as a plain `/`, not
    // through div's 0/0 = 0 select: the NaN of 0/0 becomes 0 in round_i8 all the same. Every pair
    // of these operands, zeros of both signs, infinities and NaN included, gives the reference's
    // integer (exact quotients, so float and double agree).
    ArenaScope arena;
    Expr quotient = make_div(make_symbol("a0"), make_symbol("a1"));
    std::ostringstream src;
    src << header() << "extern \"C\" void q(const double *atoms, double *out) {\n";
    int slot = 0;
    for (Expr arg : {make_call(Func::round, quotient), quotient})
        for (const char *real : {"float", "double"}) {
            std::string text = emit_c(make_cast(DType::f32, make_cast(DType::i8, arg)), context(real));
            EXPECT_EQ(text.find("rfk::div"), std::string::npos) << text;
            EXPECT_NE(text.find("rfk::round_i8<" + std::string(real) + ">"), std::string::npos) << text;
            src << "  out[" << slot++ << "] = " << text << ";\n";
        }
    src << "}\n";
    auto so = jit_compile(src.str(), jit_options());
    auto fn = reinterpret_cast<void (*)(const double *, double *)>(so->symbol("q"));
    const std::vector<double> numerators = {0.0, -0.0, 3.0, -5.0, 254.0, 1e9, INFINITY, -INFINITY, NAN};
    const std::vector<double> denominators = {0.0, -0.0, 2.0, -4.0, 1.0, INFINITY, NAN};
    for (double a : numerators)
        for (double b : denominators) {
            double atoms[2] = {a, b}, out[4];
            fn(atoms, out);
            double quotient_value = a == 0 && b == 0 ? 0.0 : a / b;  // the spec's division: 0/0 = 0
            double want = round_to_dtype(round_to_dtype(quotient_value, DType::i8), DType::f32);
            for (int i = 0; i < 4; i++) EXPECT_EQ(out[i], want) << "slot " << i << ": i8(" << a << " / " << b << ")";
        }
}

TEST(CodeGenC, IndexArithmeticAndNestedArgmax) {
    ArenaScope arena;
    Expr i = make_symbol("a0");  // real symbol converted to an index below
    Expr k = make_index("k");
    Expr idx = make_cast(DType::i64, i);
    Expr e1 = make_add(make_idiv(make_sub(idx, make_int(7)), make_int(3)), make_mod(make_neg(idx), make_int(4)));
    Expr arg = make_reduce(ReduceOp::ArgMax, {k}, {make_int(5)},
                           make_load("T", {make_mod(make_add(k, make_int(2)), make_int(5))}, DType::f64, SType::Real));
    std::ostringstream src;
    CEmitContext ctx = context("double");
    src << header() << "extern \"C\" void f(const double *atoms, const double *table, double *out) {\n"
        << "  out[0] = (double)" << emit_c(e1, ctx) << ";\n  out[1] = (double)" << emit_c(arg, ctx) << ";\n}\n";
    auto so = jit_compile(src.str(), jit_options());
    auto fn = reinterpret_cast<void (*)(const double *, const double *, double *)>(so->symbol("f"));
    double table[5] = {1, 5, 5, 2, -1};
    for (double v : {-9.0, -1.0, 0.0, 3.0, 11.0}) {
        double out[2];
        fn(&v, table, out);
        EvalEnv env;
        env.var_value = [&](Expr) { return v; };
        env.load_value = [&](Expr, const int64_t *ix) { return table[ix[0]]; };
        Evaluator ev(env);
        EXPECT_EQ(out[0], ev.eval(e1)) << v;
        EXPECT_EQ(out[1], ev.eval(arg)) << v;  // first maximum: k = 4 reads T[1] = 5 after k = ... ties -> lowest k
    }
}

TEST(CodeGenC, NamesAreSanitized) {
    EXPECT_EQ(c_identifier("O.sum"), "v_O_x2esum");
    EXPECT_EQ(c_identifier("δ0@old", "s_"), "s__xce_xb40_x40old");
    std::string weird = c_identifier("a\"; system(\"rm -rf /\"); //");
    for (char ch : weird) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') << weird;
}
