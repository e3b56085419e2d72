/** \file GemmOperands.cpp
 * The GEMM operand helpers of GemmOperands.h.
 */
#include "tile/GemmOperands.h"

#include "tile/LowerPass.h"

namespace rf::tile::gemm_operands {

int dim_of(Expr load, Expr v, const Rows &r) {
    int at = -1;
    for (size_t i = 0; i < load->args.size(); i++) {
        Expr a = load->args[i];
        bool exact = a == v || (v == r.rr && a == r.row);
        if (exact) {
            if (at != -1) return -2;
            at = static_cast<int>(i);
        } else if (mentions(a, v->name)) {
            return -2;
        }
    }
    return at;
}

Expr group_divisor(Expr e, const Rows &r) {
    Expr G = nullptr;
    bool ok = true;
    Expr rest = substitute(e, [&](Expr n) -> Expr {
        if (n->kind != Kind::IDiv || n->args[0] != r.row) return nullptr;
        if (G && G != n->args[1]) ok = false;
        G = n->args[1];
        return int_c(0);
    });
    if (!ok || !G || mentions(rest, r.rr->name) || mentions(G, r.rr->name)) return nullptr;
    return G;
}

Expr grouped(Expr e, Expr G, const Rows &r) { return substitute(e, make_idiv(r.row, G), make_idiv(r.rbase, G)); }

StmtP when_grouped(Expr G, const Rows &r, StmtP block, StmtP rows) {
    return if_then(make_cmp(CmpOp::EQ, make_mod(G, int_c(r.nb)), int_c(0)), {block}, {rows});
}

Expr stride(const std::vector<Expr> &dims, int d) {
    std::vector<Expr> later(dims.begin() + d + 1, dims.end());
    return product(later);
}

Expr operand(Expr e) {
    while (e->kind == Kind::Cast && (e->dtype == DType::f32 || e->dtype == DType::f64)) e = e->args[0];
    if (e->kind != Kind::Load || e->name.empty() || e->name[0] == '$') return nullptr;
    if (e->dtype != DType::f32 && e->dtype != DType::bf16) return nullptr;
    return e;
}

std::optional<std::pair<Expr, Expr>> split_factor(Expr t, const std::string &var) {
    if (t->kind != Kind::Mul) return std::nullopt;
    std::vector<Expr> rest;
    Expr carrier = nullptr;
    for (Expr a : t->args) {
        if (!mentions(a, var)) {
            rest.push_back(a);
            continue;
        }
        if (carrier) return std::nullopt;  // two factors read var
        carrier = a;
    }
    if (!carrier || rest.empty()) return std::nullopt;
    return std::make_pair(rest.size() == 1 ? rest[0] : make_mul(rest), carrier);
}

Expr at_origin(Expr load, const std::map<Expr, Expr> &to, const Rows &r) {
    std::vector<Expr> args;
    for (Expr a : load->args) {
        Expr x = a;
        for (auto &[v, o] : to) {
            if (a == v) x = o;
            if (v == r.rr && a == r.row) x = r.rbase;
        }
        args.push_back(x);
    }
    return make_load(load->name, args, load->dtype, load->stype);
}

}  // namespace rf::tile::gemm_operands
