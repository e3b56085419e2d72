/** \file Print.cpp
 * print_spec: Program -> `.rf` text. The expression printer keeps the tree's exact shape (binary
 * Sub/Div/Neg as the parser made them, n-ary Add/Mul of canonical forms as left-associated chains,
 * a sum's negative terms as subtractions after the others) and parenthesizes by the language's precedence (language.md §4), so parsing the text gives back
 * the same nodes for frontend programs and equal values for derived ones.
 */
#include "spec/Print.h"

#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "support/Error.h"

namespace rf {

namespace {

enum Prec { P_OR = 1, P_AND, P_NOT, P_CMP, P_ADD, P_MUL, P_UNARY, P_ATOM };

/** A real constant with a `.` or an exponent so it parses as Real (`2.0`, `1e-05`); Int constants
 *  print as integers. Negative values print with their sign (the parser folds `-literal`). */
std::string number(Expr e) {
    double v = e->value;
    RF_INTERNAL_ASSERT(!std::isnan(v)) << "a NaN constant has no spelling in the spec language";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (e->stype == SType::Int) {
        RF_INTERNAL_ASSERT(v == std::floor(v)) << "non-integral Int constant " << v;
        return std::to_string(static_cast<long long>(v));
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    std::string s(buf, res.ptr);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

class SpecPrinter {
public:
    explicit SpecPrinter(const std::map<std::string, std::string> *rename) : rename_(rename) {}

    std::string print(Expr e, int ctx) {
        std::string s = body(e);
        return prec(e) < ctx ? "(" + s + ")" : s;
    }

    std::string name(const std::string &n) const {
        if (!rename_) return n;
        auto it = rename_->find(n);
        return it == rename_->end() ? n : it->second;
    }

private:
    static int prec(Expr e) {
        switch (e->kind) {
        case Kind::Or: return P_OR;
        case Kind::And: return P_AND;
        case Kind::Not: return P_NOT;
        case Kind::Cmp: return P_CMP;
        case Kind::Add: case Kind::Sub: return P_ADD;
        case Kind::Mul: case Kind::Div: case Kind::IDiv: case Kind::Mod: return P_MUL;
        case Kind::Neg: return P_UNARY;
        case Kind::Const: return (e->value < 0 || std::signbit(e->value)) && e->stype != SType::Bool ? P_UNARY : P_ATOM;
        default: return P_ATOM;
        }
    }

    // a op b op c, left-associated: the first operand at the operator's level, the others one tighter.
    std::string chain(const std::vector<Expr> &a, const char *op, int p) {
        std::string s = print(a[0], p);
        for (size_t i = 1; i < a.size(); i++) s += std::string(" ") + op + " " + print(a[i], p + 1);
        return s;
    }

    /** The negation of a term with a negative coefficient (c·x with c < 0, or a constant c < 0), else null. */
    static Expr negated(Expr t) {
        if (t->kind == Kind::Const && t->stype == SType::Real && t->value < 0) return make_const(-t->value);
        if (t->kind != Kind::Mul || t->args.empty()) return nullptr;
        Expr c = t->args[0];
        if (c->kind != Kind::Const || c->stype != SType::Real || !(c->value < 0)) return nullptr;
        std::vector<Expr> rest(t->args.begin() + 1, t->args.end());
        if (c->value != -1) rest.insert(rest.begin(), make_const(-c->value));
        return rest.size() == 1 ? rest[0] : make_mul(rest);
    }

    /** An n-ary sum with its negative terms as subtractions after the others (x + -1·m as x - m), so
     *  the masking convention of `-` ((-inf) - (-inf) = -inf, language.md §8) holds in derived
     *  programs as in the user's: the backward's exp(S - L) over a fully masked row is 0, not NaN. */
    std::string sum(const std::vector<Expr> &a) {
        std::vector<Expr> pos;
        std::vector<Expr> neg;
        for (Expr t : a) {
            if (Expr n = negated(t)) neg.push_back(n);
            else pos.push_back(t);
        }
        if (neg.empty() || pos.empty()) return chain(a, "+", P_ADD);
        std::string s = chain(pos, "+", P_ADD);
        for (Expr n : neg) s += " - " + print(n, P_ADD + 1);
        return s;
    }

    std::string call(const char *f, const std::vector<Expr> &a) {
        std::string s = std::string(f) + "(";
        for (size_t i = 0; i < a.size(); i++) s += (i ? ", " : "") + print(a[i], 0);
        return s + ")";
    }

    std::string body(Expr e) {
        const auto &a = e->args;
        switch (e->kind) {
        case Kind::Const:
            // The language has no Bool literal: a constant condition is a decided comparison.
            if (e->stype == SType::Bool) return e->value != 0 ? "0 == 0" : "0 != 0";
            return number(e);
        case Kind::Var:
            RF_INTERNAL_ASSERT(e->role != VarRole::Symbol) << "analysis symbol '" << e->name << "' in a spec";
            return e->name;
        case Kind::Load: {
            if (a.empty()) return name(e->name);
            std::string s = name(e->name) + "[";
            for (size_t i = 0; i < a.size(); i++) s += (i ? ", " : "") + print(a[i], 0);
            return s + "]";
        }
        case Kind::Add: return sum(a);
        case Kind::Sub: return chain(a, "-", P_ADD);
        case Kind::Mul: return chain(a, "*", P_MUL);
        case Kind::Div: case Kind::IDiv: return chain(a, "/", P_MUL);
        case Kind::Mod: return chain(a, "%", P_MUL);
        case Kind::Neg: return "-" + print(a[0], P_UNARY + 1);
        case Kind::Pow: return call("pow", a);
        case Kind::Call: return call(func_name(e->func), a);
        case Kind::Min: return call("min", a);
        case Kind::Max: return call("max", a);
        case Kind::Select: return call("select", a);
        case Kind::Cmp: return print(a[0], P_CMP + 1) + " " + cmp_name(e->cmp) + " " + print(a[1], P_CMP + 1);
        case Kind::And: return chain(a, "and", P_AND);
        case Kind::Or: return chain(a, "or", P_OR);
        case Kind::Not: return "not " + print(a[0], P_NOT);
        case Kind::Cast: return call(dtype_name(e->dtype), a);
        case Kind::Reduce: {
            RF_INTERNAL_ASSERT(e->rop != ReduceOp::TopK) << "top-k is only the whole right-hand side of a definition";
            std::string s = std::string(reduce_name(e->rop)) + "(";
            for (size_t i = 0; i < e->num_axes(); i++) s += (i ? ", " : "") + e->axis(i)->name;
            return s + ": " + print(e->body(), 0) + ")";
        }
        }
        return "?";
    }

    const std::map<std::string, std::string> *rename_;
};

/** Identifiers for every global name of p: lifted names such as `O.sum` become `O_sum` (then
 *  `O_sum2`, ... when that is taken). Index variable names are avoided too. */
std::map<std::string, std::string> global_names(const Program &p) {
    std::set<std::string> taken;
    std::vector<std::string> globals;
    for (const auto &s : p.sizes) globals.push_back(s.name);
    for (const auto &i : p.inputs) globals.push_back(i.name);
    for (const auto &d : p.defs) {
        globals.push_back(d.name);
        if (d.is_topk()) globals.push_back(d.index_name);
        for (Expr v : d.vars) taken.insert(v->name);
    }
    for (const auto &g : globals)
        if (spec_identifier(g) == g) taken.insert(g);
    std::map<std::string, std::string> out;
    for (const auto &g : globals) {
        std::string base = spec_identifier(g);
        if (base == g) {
            out[g] = g;
            continue;
        }
        std::string n = base;
        for (int k = 2; taken.count(n); k++) n = base + std::to_string(k);
        taken.insert(n);
        out[g] = n;
    }
    return out;
}

std::string lhs(const SpecPrinter &pr, const TensorDef &d, const std::string &n, bool with_extents, SpecPrinter &ep) {
    if (d.vars.empty()) {
        // `name = expr` reading no tensor parses as a pure scalar, which cannot be an output: a
        // 0-dimensional definition of a constant (the zero gradient of an unused scalar input,
        // `redfuse grad`) keeps its brackets.
        bool reads_tensor = false;
        visit(d.body, [&](Expr e) { reads_tensor = reads_tensor || e->kind == Kind::Load; });
        return pr.name(n) + (reads_tensor ? "" : "[]");
    }
    std::string s = pr.name(n) + "[";
    for (size_t i = 0; i < d.vars.size(); i++) {
        s += (i ? ", " : "") + d.vars[i]->name;
        if (with_extents) s += ":" + ep.print(d.extents[i], 0);
    }
    return s + "]";
}

}  // namespace

bool is_reserved_spec_name(const std::string &n) {
    static const std::set<std::string> reserved = {
        "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "round", "floor", "ceil",
        "sum", "prod", "max", "min", "argmax", "argmin", "topk", "pow", "select", "size", "input", "output",
        "and", "or", "not", "inf", "f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i8", "i32", "i64"};
    return reserved.count(n) > 0;
}

std::string spec_identifier(const std::string &name) {
    std::string s;
    for (char c : name) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        s += ok ? c : '_';
    }
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) s = "_" + s;
    if (is_reserved_spec_name(s)) s += "_";
    return s;
}

std::string print_spec_expr(Expr e) { return SpecPrinter(nullptr).print(e, 0); }

std::string print_spec(const Program &p, const std::vector<std::string> &header) {
    std::map<std::string, std::string> names = global_names(p);
    SpecPrinter pr(&names);
    std::string out;
    for (const auto &h : header) out += h.empty() ? "#\n" : "# " + h + "\n";
    for (const auto &s : p.sizes)
        out += "size " + pr.name(s.name) + (s.default_value ? " = " + std::to_string(*s.default_value) : "") + "\n";
    for (const auto &in : p.inputs) {
        out += "input " + pr.name(in.name);
        if (!in.dims.empty()) {
            out += "[";
            for (size_t i = 0; i < in.dims.size(); i++) out += (i ? ", " : "") + pr.print(in.dims[i], 0);
            out += "]";
        }
        out += std::string(" : ") + dtype_name(in.dtype) + "\n";
    }
    for (const auto &d : p.defs) {
        if (d.is_topk()) {
            Expr r = d.body;
            out += lhs(pr, d, d.name, false, pr) + ", " + lhs(pr, d, d.index_name, false, pr) + " = topk(" +
                   r->axis(0)->name + ", " + pr.print(d.extents.back(), 0) + ": " + pr.print(r->body(), 0) + ")\n";
            continue;
        }
        out += lhs(pr, d, d.name, true, pr) + " = " + pr.print(d.body, 0) + "\n";
    }
    for (const auto &o : p.outputs) out += "output " + pr.name(o.name) + " : " + dtype_name(o.dtype) + "\n";
    return out;
}

}  // namespace rf
