/** \file Printer.cpp
 * The stable textual form of expressions: the spec language's own syntax with minimal
 * parentheses, so printed formulas read like the user's input and golden tests stay stable.
 */
#include <charconv>
#include <cmath>
#include <sstream>

#include "ir/Expr.h"

namespace rf {

namespace {
enum Prec { P_OR = 1, P_AND, P_NOT, P_CMP, P_ADD, P_MUL, P_UNARY, P_ATOM };

std::string number(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15) {
        std::ostringstream os;
        os << static_cast<long long>(v);
        return os.str();
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, res.ptr);
}

bool is_negative_const(Expr e) { return e->kind == Kind::Const && (e->value < 0 || std::signbit(e->value)); }

// A Mul whose leading factor is a negative constant: printed as a subtraction inside sums.
bool is_negated_term(Expr e) {
    return (e->kind == Kind::Mul && is_negative_const(e->args[0])) || is_negative_const(e) || e->kind == Kind::Neg;
}

bool is_reciprocal(Expr e) { return e->kind == Kind::Pow && e->args[1]->is_const(-1.0); }

class Printer {
public:
    std::string print(Expr e, int ctx) {
        int p = prec(e);
        std::string s = body(e);
        return p < ctx ? "(" + s + ")" : s;
    }

private:
    int prec(Expr e) {
        switch (e->kind) {
        case Kind::Or: return P_OR;
        case Kind::And: return P_AND;
        case Kind::Not: return P_NOT;
        case Kind::Cmp: return P_CMP;
        case Kind::Add: case Kind::Sub: return P_ADD;
        case Kind::Mul: case Kind::Div: case Kind::IDiv: case Kind::Mod: return P_MUL;
        case Kind::Neg: return P_UNARY;
        case Kind::Const: return is_negative_const(e) ? P_UNARY : P_ATOM;
        case Kind::Pow: return is_reciprocal(e) ? P_MUL : P_ATOM;
        default: return P_ATOM;
        }
    }

    std::string negated(Expr e) {
        // Print -e's magnitude: the term without its leading minus sign.
        if (e->kind == Kind::Neg) return print(e->args[0], P_MUL + 1);
        if (e->kind == Kind::Const) return number(-e->value);
        std::vector<Expr> rest(e->args.begin() + 1, e->args.end());
        double c = -e->args[0]->value;
        std::string s;
        if (c != 1.0) s = number(c) + " * ";
        return s + product(rest, false);
    }

    std::string product(const std::vector<Expr> &factors, bool has_prefix) {
        std::string s;
        bool first = !has_prefix;
        std::vector<Expr> denominators;
        for (Expr f : factors) {
            if (is_reciprocal(f)) {
                denominators.push_back(f->args[0]);
                continue;
            }
            if (!first) s += " * ";
            // A later factor that is itself a division binds tighter than it reads: P * (j / P).
            s += print(f, first ? P_MUL : P_MUL + 1);
            first = false;
        }
        if (first) s += "1";
        for (Expr d : denominators) s += " / " + print(d, P_MUL + 1);
        return s;
    }

    std::string body(Expr e) {
        const auto &a = e->args;
        switch (e->kind) {
        case Kind::Const:
            if (e->stype == SType::Bool) return e->value != 0 ? "true" : "false";
            return number(e->value);
        case Kind::Var: return e->name;
        case Kind::Load: {
            std::string s = e->name + "[";
            for (size_t i = 0; i < a.size(); i++) s += (i ? ", " : "") + print(a[i], 0);
            return s + "]";
        }
        case Kind::Add: {
            std::string s = print(a[0], P_ADD);
            for (size_t i = 1; i < a.size(); i++) {
                if (is_negated_term(a[i])) s += " - " + negated(a[i]);
                else s += " + " + print(a[i], P_ADD);
            }
            return s;
        }
        case Kind::Sub: return print(a[0], P_ADD) + " - " + print(a[1], P_ADD + 1);
        case Kind::Mul: {
            if (a[0]->is_const(-1.0) && a.size() >= 2) {
                std::vector<Expr> rest(a.begin() + 1, a.end());
                return "-" + (rest.size() == 1 ? print(rest[0], P_UNARY) : "(" + product(rest, false) + ")");
            }
            return product(a, false);
        }
        case Kind::Div: return print(a[0], P_MUL) + " / " + print(a[1], P_MUL + 1);
        case Kind::IDiv: return print(a[0], P_MUL) + " / " + print(a[1], P_MUL + 1);
        case Kind::Mod: return print(a[0], P_MUL) + " % " + print(a[1], P_MUL + 1);
        case Kind::Neg: return "-" + print(a[0], P_UNARY);
        case Kind::Pow:
            if (is_reciprocal(e)) return "1 / " + print(a[0], P_MUL + 1);
            if (a[1]->is_const(0.5)) return "sqrt(" + print(a[0], 0) + ")";
            if (a[1]->is_const(-0.5)) return "rsqrt(" + print(a[0], 0) + ")";
            return "pow(" + print(a[0], 0) + ", " + print(a[1], 0) + ")";
        case Kind::Call: return std::string(func_name(e->func)) + "(" + print(a[0], 0) + ")";
        case Kind::Min: return "min(" + print(a[0], 0) + ", " + print(a[1], 0) + ")";
        case Kind::Max: return "max(" + print(a[0], 0) + ", " + print(a[1], 0) + ")";
        case Kind::Select:
            return "select(" + print(a[0], 0) + ", " + print(a[1], 0) + ", " + print(a[2], 0) + ")";
        case Kind::Cmp: return print(a[0], P_CMP + 1) + " " + cmp_name(e->cmp) + " " + print(a[1], P_CMP + 1);
        case Kind::And: return print(a[0], P_AND) + " and " + print(a[1], P_AND + 1);
        case Kind::Or: return print(a[0], P_OR) + " or " + print(a[1], P_OR + 1);
        case Kind::Not: return "not " + print(a[0], P_NOT);
        case Kind::Cast: return std::string(dtype_name(e->dtype)) + "(" + print(a[0], 0) + ")";
        case Kind::Reduce: {
            std::string s = std::string(reduce_name(e->rop)) + "(";
            for (size_t i = 0; i < e->num_axes(); i++) s += (i ? ", " : "") + e->axis(i)->name;
            if (e->rop == ReduceOp::TopK) s += ", " + std::to_string(e->k);
            return s + ": " + print(e->body(), 0) + ")";
        }
        }
        return "?";
    }
};
}  // namespace

std::string to_string(Expr e) { return Printer().print(e, 0); }

}  // namespace rf
