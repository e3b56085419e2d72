/** \file CodeGen_C.cpp
 * The expression printer of CodeGen_C.h. Nested reductions become immediately invoked lambdas with
 * their own loops, so any expression of the language prints as one C++ expression.
 */
#include "codegen/CodeGen_C.h"

#include <charconv>
#include <optional>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "support/Error.h"

namespace rf {

std::string c_identifier(const std::string &name, const std::string &prefix) {
    std::string out = prefix;
    for (unsigned char ch : name) {
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_') {
            out += static_cast<char>(ch);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "_x%02x", ch);
            out += buf;
        }
    }
    return out;
}

std::string row_major_offset(const std::string &buf, const std::vector<std::string> &idx) {
    if (idx.empty()) return "0";
    std::string s;
    for (size_t d = 0; d < idx.size(); d++) {
        s += (d ? " + " : "") + idx[d];
        if (d + 1 < idx.size()) s += " * " + buf + "_s" + std::to_string(d);
    }
    return s;
}

std::string safe_comment(const std::string &s) {
    std::string out;
    for (char ch : s) out += (ch >= 32 && ch < 127 && ch != '\\') ? ch : '?';
    size_t at;
    while ((at = out.find("*/")) != std::string::npos) out.replace(at, 2, "* /");
    return out;
}

const char *c_storage_type(DType t) {
    switch (t) {
    case DType::f64: return "double";
    case DType::f32: return "float";
    case DType::f16: case DType::bf16: return "uint16_t";
    case DType::f8e4m3: case DType::f8e5m2: return "uint8_t";
    case DType::i8: return "int8_t";
    case DType::i32: return "int32_t";
    default: return "int64_t";
    }
}

std::string c_real_literal(double v, const std::string &real) {
    if (std::isnan(v)) return "std::numeric_limits<" + real + ">::quiet_NaN()";
    if (std::isinf(v)) return std::string(v < 0 ? "-" : "") + "std::numeric_limits<" + real + ">::infinity()";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    std::string s(buf, res.ptr);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return "(" + real + ")" + s;
}

namespace {

class Printer {
public:
    explicit Printer(const CEmitContext &ctx) : ctx_(ctx) {}

    std::string print(Expr e) {
        switch (e->stype) {
        case SType::Int: return integer(e);
        case SType::Bool: return boolean(e);
        default: return real(e);
        }
    }

private:
    const std::string &R() const { return ctx_.real; }
    bool gpu() const { return ctx_.dialect != Dialect::Cpp; }
    /** A semantics helper of the runtime header: rfk::name<T> (C++) or rf_name (GPU, float). */
    std::string helper(const std::string &name) const { return gpu() ? "rf_" + name : "rfk::" + name + "<" + R() + ">"; }
    /** A C math function: std::name (C++), name (OpenCL's overloaded built-ins), namef (CUDA float). */
    std::string math(const std::string &name) const {
        if (ctx_.dialect == Dialect::Cpp) return "std::" + name;
        return ctx_.dialect == Dialect::Cuda && R() == "float" ? name + "f" : name;
    }
    std::string lit(double v) const {
        if (gpu() && std::isinf(v)) return v < 0 ? "(-RF_INF)" : "RF_INF";
        if (gpu() && std::isnan(v)) return "RF_NAN";
        return c_real_literal(v, R());
    }
    std::string imin() const { return gpu() ? "rf_imin" : "std::min<int64_t>"; }
    std::string imax() const { return gpu() ? "rf_imax" : "std::max<int64_t>"; }
    std::string ihelper(const std::string &name) const { return (gpu() ? "rf_" : "rfk::") + name; }

    /** A real-typed operand: Int sub-expressions are converted. */
    std::string as_real(Expr e) { return e->stype == SType::Real ? real(e) : "((" + R() + ")(" + print(e) + "))"; }
    std::string as_int(Expr e) { return e->stype == SType::Int ? integer(e) : "((int64_t)(" + print(e) + "))"; }

    std::string var(Expr e) {
        auto it = bound_.find(e);
        if (it != bound_.end()) return it->second;
        RF_INTERNAL_ASSERT(ctx_.var) << "no name for variable " << e->name;
        return ctx_.var(e);
    }

    std::string load(Expr e) {
        std::vector<std::string> idx;
        for (Expr a : e->args) idx.push_back(as_int(a));
        RF_INTERNAL_ASSERT(ctx_.load) << "no addressing for tensor " << e->name;
        std::string text = ctx_.load(e, idx);
        return e->stype == SType::Int ? "((int64_t)(" + text + "))" : "((" + R() + ")(" + text + "))";
    }

    std::string integer(Expr e) {
        const auto &a = e->args;
        switch (e->kind) {
        case Kind::Const: return "(int64_t)" + std::to_string(static_cast<long long>(e->value));
        case Kind::Var: return "((int64_t)" + var(e) + ")";
        case Kind::Load: return load(e);
        case Kind::Add: case Kind::Mul: {
            std::string op = e->kind == Kind::Add ? " + " : " * ";
            std::string s = "(" + as_int(a[0]);
            for (size_t i = 1; i < a.size(); i++) s += op + as_int(a[i]);
            return s + ")";
        }
        case Kind::Sub: return "(" + as_int(a[0]) + " - " + as_int(a[1]) + ")";
        case Kind::Neg: return "(-" + as_int(a[0]) + ")";
        case Kind::IDiv: return ihelper("floordiv") + "(" + as_int(a[0]) + ", " + as_int(a[1]) + ")";
        case Kind::Mod: return ihelper("mod") + "(" + as_int(a[0]) + ", " + as_int(a[1]) + ")";
        case Kind::Min: return imin() + "(" + as_int(a[0]) + ", " + as_int(a[1]) + ")";
        case Kind::Max: return imax() + "(" + as_int(a[0]) + ", " + as_int(a[1]) + ")";
        case Kind::Select: return "(" + boolean(a[0]) + " ? " + as_int(a[1]) + " : " + as_int(a[2]) + ")";
        case Kind::Cast: return "((int64_t)" + ihelper("cast_") + std::string(dtype_name(e->dtype)) + "(" + as_double(a[0]) + "))";
        case Kind::Reduce: return reduce(e);
        default: return "((int64_t)(" + real(e) + "))";
        }
    }

    /** f32(i8(x)) or f64(i8(x)) on the CPU, in the real type of the code around it: rounding x
     *  (ties to even), clamping to [-128, 127] and NaN → 0 are exact in float as in double, and an
     *  int8 value converts exactly to either, so the float64 round trip of cast_i8 and cast_f32 is
     *  not needed; without it a quantization loop vectorizes (vrndscaleps instead of a scalar
     *  vcvttss2si per element). */
    std::optional<std::string> int8_in_real_type(Expr e) {
        if (gpu() || (e->dtype != DType::f32 && e->dtype != DType::f64)) return std::nullopt;
        Expr q = e->args[0];
        if (q->kind != Kind::Cast || q->dtype != DType::i8 || q->args[0]->stype != SType::Real) return std::nullopt;
        return "(" + helper("round_i8") + "(" + int8_argument(q->args[0]) + "))";
    }

    /** The argument of round_i8, with a division in it (directly or under round) printed as a plain
     *  `/`: div's rule 0/0 = 0 only replaces the NaN of a / b, which round_i8 maps to 0 as well
     *  (round_even(NaN) = NaN -> 0; round_even(0) = 0 -> 0). Without div's select GCC keeps the
     *  quantization loop's selects in vector masks instead of moving them through general
     *  registers: with round_i8 clamping before it rounds, quant->GEMM's quantization of 16 x 4096
     *  values (i8(round(x * 127 / a))) went 25 -> 14 us (AMD Zen 4, a timer around the emitted loop). */
    std::string int8_argument(Expr x) {
        auto plain = [&](Expr d) { return "(" + as_real(d->args[0]) + " / " + as_real(d->args[1]) + ")"; };
        if (x->kind == Kind::Div) return plain(x);
        if (x->kind == Kind::Call && x->func == Func::round && x->args[0]->kind == Kind::Div)
            return helper("round_even") + "(" + plain(x->args[0]) + ")";
        return as_real(x);
    }

    /** The argument of a rounding cast: double on the CPU, the compute type on the GPU. */
    std::string as_double(Expr e) { return gpu() ? as_real(e) : "((double)(" + print(e) + "))"; }

    std::string boolean(Expr e) {
        const auto &a = e->args;
        switch (e->kind) {
        case Kind::Const: return e->value != 0 ? "true" : "false";
        case Kind::Cmp: {
            // Compare in the wider of the operand types: Int with Int stays exact.
            bool ints = a[0]->stype == SType::Int && a[1]->stype == SType::Int;
            std::string x = ints ? as_int(a[0]) : as_real(a[0]), y = ints ? as_int(a[1]) : as_real(a[1]);
            return "(" + x + " " + cmp_name(e->cmp) + " " + y + ")";
        }
        case Kind::And: return "(" + boolean(a[0]) + " && " + boolean(a[1]) + ")";
        case Kind::Or: return "(" + boolean(a[0]) + " || " + boolean(a[1]) + ")";
        case Kind::Not: return "(!" + boolean(a[0]) + ")";
        case Kind::Select: return "(" + boolean(a[0]) + " ? " + boolean(a[1]) + " : " + boolean(a[2]) + ")";
        default: return "(" + print(e) + " != 0)";
        }
    }

    std::string real(Expr e) {
        const auto &a = e->args;
        switch (e->kind) {
        case Kind::Const: return lit(e->value);
        case Kind::Var: return "((" + R() + ")" + var(e) + ")";
        case Kind::Load: return load(e);
        case Kind::Add: case Kind::Mul: {
            std::string op = e->kind == Kind::Add ? " + " : " * ";
            std::string s = "(" + as_real(a[0]);
            for (size_t i = 1; i < a.size(); i++) s += op + as_real(a[i]);
            return s + ")";
        }
        case Kind::Sub: return helper("sub") + "(" + as_real(a[0]) + ", " + as_real(a[1]) + ")";
        case Kind::Div: return helper("div") + "(" + as_real(a[0]) + ", " + as_real(a[1]) + ")";
        case Kind::Neg: return "(-" + as_real(a[0]) + ")";
        case Kind::Pow: {
            Expr ex = a[1];
            if (ex->is_const(-1)) return helper("div") + "((" + R() + ")1, " + as_real(a[0]) + ")";
            // A function, not a lambda: an immediately invoked lambda stops GCC vectorizing the loop.
            if (ex->is_const(2)) return helper("sq") + "(" + as_real(a[0]) + ")";
            if (ex->is_const(0.5)) return math("sqrt") + "(" + as_real(a[0]) + ")";
            if (ex->is_const(-0.5)) return helper("rsqrt") + "(" + as_real(a[0]) + ")";
            return math("pow") + "(" + as_real(a[0]) + ", " + as_real(ex) + ")";
        }
        case Kind::Call: {
            std::string x = as_real(a[0]);
            switch (e->func) {
            // CPU: an inline polynomial that vectorizes; GPU: exp2 with log2(e) folded in (one MUFU op).
            case Func::exp: return (gpu() ? "rf_exp(" : "rfk::exp_f(") + x + ")";
            // CPU: the same inline polynomial scheme as exp (std::exp2 would be a scalar libm call).
            case Func::exp2: return (gpu() ? math("exp2") + "(" : "rfk::exp2_f(") + x + ")";
            case Func::log: return math("log") + "(" + x + ")";
            case Func::log2: return math("log2") + "(" + x + ")";
            case Func::sqrt: return math("sqrt") + "(" + x + ")";
            case Func::rsqrt: return helper("rsqrt") + "(" + x + ")";
            case Func::abs: return math("fabs") + "(" + x + ")";
            // CPU: an inline polynomial and exp_f that vectorize (std::tanh is a scalar libm call).
            case Func::tanh: return (gpu() ? math("tanh") + "(" : "rfk::tanh_f(") + x + ")";
            case Func::sigmoid: return helper("sigmoid") + "(" + x + ")";
            case Func::round: return helper("round_even") + "(" + x + ")";
            case Func::floor: return math("floor") + "(" + x + ")";
            case Func::ceil: return math("ceil") + "(" + x + ")";
            }
            break;
        }
        case Kind::Min: return helper("min") + "(" + as_real(a[0]) + ", " + as_real(a[1]) + ")";
        case Kind::Max: return helper("max") + "(" + as_real(a[0]) + ", " + as_real(a[1]) + ")";
        case Kind::Select: return "(" + boolean(a[0]) + " ? " + as_real(a[1]) + " : " + as_real(a[2]) + ")";
        case Kind::Cast:
            if (std::optional<std::string> q = int8_in_real_type(e)) return *q;
            return "((" + R() + ")" + ihelper("cast_") + std::string(dtype_name(e->dtype)) + "(" + as_double(a[0]) + "))";
        case Kind::Reduce: return reduce(e);
        case Kind::Cmp: case Kind::And: case Kind::Or: case Kind::Not:
            return "((" + R() + ")" + boolean(e) + ")";
        case Kind::IDiv: case Kind::Mod: return "((" + R() + ")" + integer(e) + ")";
        }
        internal_error("cannot print " + to_string(e) + " as C++", __FILE__, __LINE__);
    }

    /** A short nested reduction over one axis of constant extent (x, y, z coordinates), written out
     *  term by term in the evaluator's order: no lambda, so the loop around it still vectorizes. */
    std::string unrolled(Expr e) {
        const int64_t kMaxUnroll = 16;
        if (e->num_axes() != 1 || !e->extents[0]->is_const() || e->stype != SType::Real) return "";
        int64_t n = static_cast<int64_t>(e->extents[0]->value);
        if (n < 1 || n > kMaxUnroll) return "";
        const char *f = nullptr;
        switch (e->rop) {
        case ReduceOp::Sum: case ReduceOp::Prod: break;
        case ReduceOp::Max: f = "max"; break;
        case ReduceOp::Min: f = "min"; break;
        default: return "";
        }
        const std::string fn = f ? helper(f) : std::string();
        std::string acc;
        for (int64_t k = 0; k < n; k++) {
            bound_[e->axis(0)] = std::to_string(k);
            std::string term = as_real(e->body());
            if (k == 0) acc = e->rop == ReduceOp::Sum ? "((" + R() + ")0 + " + term + ")" : e->rop == ReduceOp::Prod ? "((" + R() + ")1 * " + term + ")" : fn + "(" + lit(e->rop == ReduceOp::Max ? -INFINITY : INFINITY) + ", " + term + ")";
            else if (e->rop == ReduceOp::Sum) acc = "(" + acc + " + " + term + ")";
            else if (e->rop == ReduceOp::Prod) acc = "(" + acc + " * " + term + ")";
            else acc = fn + "(" + acc + ", " + term + ")";
        }
        bound_.erase(e->axis(0));
        return acc;
    }

    /** A nested reduction as an immediately invoked lambda: loops over its axes, row-major. */
    std::string reduce(Expr e) {
        RF_INTERNAL_ASSERT(e->rop != ReduceOp::TopK) << "top-k cannot be nested in an expression";
        if (std::string u = unrolled(e); !u.empty()) return u;
        bool int_result = e->stype == SType::Int;
        std::string T = int_result ? "int64_t" : R();
        std::vector<std::string> names;
        std::string loops, close;
        for (size_t i = 0; i < e->num_axes(); i++) {
            std::string n = c_identifier(e->axis(i)->name, "ax_") + "_" + std::to_string(depth_);
            names.push_back(n);
            bound_[e->axis(i)] = n;
            loops += "for (int64_t " + n + " = 0; " + n + " < " + as_int(e->extents[i]) + "; ++" + n + ") { ";
            close += "} ";
        }
        depth_++;
        std::string body = print(e->body());
        depth_--;
        for (size_t i = 0; i < e->num_axes(); i++) bound_.erase(e->axis(i));
        std::string flat = "0";
        for (size_t i = 0; i < names.size(); i++)
            flat = i == 0 ? names[0] : "(" + flat + ") * " + as_int(e->extents[i]) + " + " + names[i];
        std::string vtype = e->body()->stype == SType::Int ? "int64_t" : R();
        // OpenCL C has no lambdas: a GNU statement expression there (clang, PoCL's compiler, has them).
        const bool stmt_expr = ctx_.dialect == Dialect::OpenCL;
        const std::string ret = stmt_expr ? "" : "return ";
        std::string s = stmt_expr ? "({ " : "([&]() -> " + T + " { ";
        switch (e->rop) {
        case ReduceOp::Sum: s += T + " acc_ = 0; " + loops + "acc_ += " + body + "; " + close + ret + "acc_; "; break;
        case ReduceOp::Prod: s += T + " acc_ = 1; " + loops + "acc_ *= " + body + "; " + close + ret + "acc_; "; break;
        case ReduceOp::Max: case ReduceOp::Min: {
            bool mx = e->rop == ReduceOp::Max;
            std::string init = int_result ? std::string(mx ? "(-9223372036854775807 - 1)" : "9223372036854775807")
                                          : lit(mx ? -INFINITY : INFINITY);
            std::string f = int_result ? (mx ? imax() : imin()) : helper(mx ? "max" : "min");
            s += T + " acc_ = " + init + "; " + loops + "acc_ = " + f + "(acc_, " + body + "); " + close + ret + "acc_; ";
            break;
        }
        case ReduceOp::ArgMax: case ReduceOp::ArgMin: {
            std::string cmp = e->rop == ReduceOp::ArgMax ? ">" : "<";
            s += vtype + " best_ = 0; int64_t at_ = 0; bool have_ = false; " + loops + vtype + " v_ = " + body +
                 "; if (!have_ || v_ " + cmp + " best_) { best_ = v_; at_ = " + flat + "; have_ = true; } " + close +
                 ret + "at_; ";
            break;
        }
        default: break;
        }
        return s + (stmt_expr ? "})" : "}())");
    }

    const CEmitContext &ctx_;
    std::unordered_map<Expr, std::string> bound_;
    int depth_ = 0;
};

}  // namespace

std::string emit_c(Expr e, const CEmitContext &ctx) { return Printer(ctx).print(e); }

}  // namespace rf
