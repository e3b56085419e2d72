/** \file LowerPass.cpp
 * Lowers one chain pass to a kernel body: running states per member (plan interpreter semantics,
 * src/interp/PlanInterp.cpp, including its guards), tiles of the cascade axis, segment merges with
 * the derived merge, finalization (with the literal recompute of rows whose final δ is not finite)
 * and the per-row epilogue.
 */
#include "tile/LowerPass.h"

#include <cmath>
#include <functional>
#include <optional>
#include <limits>

#include "ir/Eval.h"
#include "support/Error.h"

namespace rf::tile {

// ---- Small constructors.
Expr local_var(const std::string &name, SType t) { return make_var(name, VarRole::Symbol, t); }
Expr local_at(const std::string &name, Expr index, SType t) { return make_load(name, {index}, DType::f64, t); }
Expr int_c(int64_t v) { return make_int(v); }
Expr real_c(double v) { return make_const(v); }
Expr product(const std::vector<Expr> &v) {
    if (v.empty()) return int_c(1);
    return v.size() == 1 ? v[0] : make_mul(v);
}
Expr flatten(const std::vector<Expr> &indices, const std::vector<Expr> &extents) {
    Expr flat = int_c(0);
    for (size_t i = 0; i < indices.size(); i++)
        flat = i == 0 ? indices[0] : make_add(make_mul(flat, extents[i]), indices[i]);
    return flat;
}
Expr unravel(Expr flat, const std::vector<Expr> &extents, size_t i) {
    std::vector<Expr> inner(extents.begin() + static_cast<long>(i) + 1, extents.end());
    Expr q = inner.empty() ? flat : make_idiv(flat, product(inner));
    return i == 0 ? q : make_mod(q, extents[i]);
}
Expr is_finite(Expr v) { return make_cmp(CmpOp::LT, make_call(Func::abs, v), real_c(INFINITY)); }

namespace {

Expr sanitize(Expr v) { return make_select(is_finite(v), v, real_c(0)); }
Expr any(const std::vector<Expr> &c) {
    if (c.empty()) return make_bool(false);
    Expr r = c[0];
    for (size_t i = 1; i < c.size(); i++) r = make_or(r, c[i]);
    return r;
}
Expr add_i(Expr a, Expr b) { return make_add(a, b); }
Expr mul_i(Expr a, Expr b) { return make_mul(a, b); }

enum class Form { SumShift, Select, ArgSelect, TopK, Prod, Mult, Poly };

struct MemberInfo {
    int k = 0;
    const TensorDef *def = nullptr;
    const MemberAnalysis *a = nullptr;
    std::vector<Expr> extra_vars, extra_ext;  ///< the def's vars after the row (without a top-k axis)
    Expr X = nullptr;                         ///< number of extra points
    Form form = Form::SumShift;
    ReduceOp op = ReduceOp::Sum;              ///< the operation performed on state values
    bool sel = false;                         ///< additive / monotone: selection over Gsel
    Expr K = nullptr;                         ///< top-k capacity
    size_t nd = 0;                            ///< number of δ atoms
};

class PassLowering {
public:
    explicit PassLowering(const PassContext &ctx) : ctx_(ctx), p_(*ctx.program), c_(*ctx.chain) {}

    PassKernel run() {
        prepare();
        return ctx_.schedule.segments > 1 ? multi_segment() : single_segment();
    }

    void prepare() {
        const TensorDef *first = p_.find_def(c_.members[0]);
        // Rows are taken in blocks of nb along the innermost row variable: row r_last = $rbase + $rr
        // for $rr < $nbv (the valid rows of the block). Tile GEMMs then cover the whole block.
        nb_ = c_.n_row == 0 ? 1 : std::max<int64_t>(1, ctx_.schedule.row_block);
        for (size_t i = 0; i < c_.n_row; i++) {
            row_ext_.push_back(first->extents[i]);
            block_ext_.push_back(first->extents[i]);
            if (i + 1 == c_.n_row) {
                row_vars_.push_back(make_add(local_var("$rbase", SType::Int), rr()));
                block_ext_.back() = make_idiv(make_add(first->extents[i], int_c(nb_ - 1)), int_c(nb_));
            } else {
                row_vars_.push_back(make_index("$r" + std::to_string(i)));
            }
        }
        axis_ext_ = c_.axis_extents;
        L_ = product(axis_ext_);
        for (size_t k = 0; k < ctx_.pass->members.size(); k++) members_.push_back(info(static_cast<int>(k)));
        for (const std::string &d : ctx_.tile_prologues) prologue_local(d);
        for (const MemberInfo &m : members_) {
            names_[m.def->name] = m.k;
            if (m.def->is_topk()) names_[m.def->index_name] = m.k;
        }
    }

private:
    // ---- Members and their state.
    MemberInfo info(int k) {
        MemberInfo m;
        m.k = k;
        m.def = p_.find_def(ctx_.pass->members[static_cast<size_t>(k)]);
        m.a = &ctx_.pass->members_exec[static_cast<size_t>(k)];
        size_t nv = m.def->vars.size() - (m.def->is_topk() ? 1 : 0);
        for (size_t i = c_.n_row; i < nv; i++) {
            m.extra_vars.push_back(m.def->vars[i]);
            m.extra_ext.push_back(m.def->extents[i]);
        }
        m.X = product(m.extra_ext);
        const MemberAnalysis &a = *m.a;
        m.sel = a.relation == Relation::Additive || a.relation == Relation::Monotone;
        m.op = a.op;
        if (m.sel && !a.increasing) m.op = mirrored(a.op);
        m.nd = a.delta_syms.size();
        if (m.def->is_topk()) m.K = m.def->extents.back();
        if (a.relation == Relation::Multiplicative) m.form = Form::Mult;
        else if (a.relation == Relation::Polynomial) m.form = Form::Poly;
        else if (m.op == ReduceOp::TopK) m.form = Form::TopK;
        else if (m.op == ReduceOp::ArgMax || m.op == ReduceOp::ArgMin) m.form = Form::ArgSelect;
        else if (m.op == ReduceOp::Max || m.op == ReduceOp::Min) m.form = Form::Select;
        else if (m.op == ReduceOp::Prod) m.form = Form::Prod;
        else m.form = Form::SumShift;
        return m;
    }

    static std::string field(const std::string &P, int k, const char *f) { return P + std::to_string(k) + f; }
    static Expr rr() { return make_index("$rr"); }
    /** The state slot of extra point x of the current row of the block. */
    Expr sl(const MemberInfo &m, Expr x) { return nb_ == 1 ? x : add_i(mul_i(rr(), m.X), x); }
    /** for $rr in [0, $nbv): body — one row of the block at a time. */
    StmtP rows_of_block(std::vector<StmtP> body) { return for_loop(rr(), int_c(0), local_var("$nbv", SType::Int), std::move(body)); }
    Expr acc(const std::string &P, const MemberInfo &m, Expr x) { return local_at(field(P, m.k, "_acc"), sl(m, x)); }
    Expr idx(const std::string &P, const MemberInfo &m, Expr x) { return local_at(field(P, m.k, "_idx"), sl(m, x)); }
    Expr seen(const std::string &P, const MemberInfo &m, Expr x) { return local_at(field(P, m.k, "_seen"), sl(m, x)); }
    Expr tag(const std::string &P, const MemberInfo &m, Expr x, size_t i) {
        // A shifted sum keeps its reference point in slot 0 (nd = 0): one slot per x at least.
        int64_t width = static_cast<int64_t>(std::max<size_t>(1, m.nd));
        return local_at(field(P, m.k, "_tag"), add_i(mul_i(sl(m, x), int_c(width)), int_c(static_cast<int64_t>(i))));
    }
    Expr count(const std::string &P) { return local_var(P + "_n", SType::Int); }
    Expr seen_b(const std::string &P, const MemberInfo &m, Expr x) { return make_cmp(CmpOp::NE, seen(P, m, x), real_c(0)); }

    /** (local name, element count) of every field of a state instance, in a fixed order. */
    std::vector<std::pair<std::string, Expr>> fields(const std::string &P) {
        std::vector<std::pair<std::string, Expr>> f;
        for (const MemberInfo &m0 : members_) {
            MemberInfo m = m0;
            m.X = nb_ == 1 ? m0.X : mul_i(m0.X, int_c(nb_));  // every row of the block
            f.push_back({field(P, m.k, "_acc"), m.X});
            f.push_back({field(P, m.k, "_seen"), m.X});
            if (m.form == Form::ArgSelect) f.push_back({field(P, m.k, "_idx"), m.X});
            if (m.form == Form::SumShift || m.form == Form::Mult || m.form == Form::Poly)
                f.push_back({field(P, m.k, "_tag"), mul_i(m.X, int_c(static_cast<int64_t>(std::max<size_t>(1, m.nd))))});
            if (m.form == Form::Poly)
                f.push_back({field(P, m.k, "_S"), mul_i(m.X, int_c(static_cast<int64_t>(m.a->alphas.size())))});
            if (m.form == Form::TopK) {
                f.push_back({field(P, m.k, "_tk_v"), mul_i(m.X, m.K)});
                f.push_back({field(P, m.k, "_tk_i"), mul_i(m.X, m.K)});
                f.push_back({field(P, m.k, "_tk_n"), m.X});
            }
        }
        return f;
    }

    double acc_init(const MemberInfo &m) {
        switch (m.form) {
        case Form::Mult: case Form::Poly: return reduce_identity(m.a->op);
        case Form::SumShift: return 0;
        case Form::Prod: return 1;
        default: return reduce_identity(m.op);
        }
    }

    void init_state(std::vector<StmtP> &out, const std::string &P) {
        out.push_back(decl(P + "_n", LocalClass::Index, {}, int_c(0)));
        for (auto &[name, n] : fields(P)) {
            double v = 0;
            for (const MemberInfo &m : members_)
                if (name == field(P, m.k, "_acc")) v = acc_init(m);
            if (name.size() > 4 && name.substr(name.size() - 4) == "_idx") v = std::numeric_limits<double>::max();
            out.push_back(decl(name, LocalClass::State, {n}, real_c(v)));
        }
    }

    // ---- Expression translation.
    /** How loads of pass members are read: from the running state P (optionally as estimates of
     *  the final value, optionally with non-finite values replaced by 0), or from the buffers. */
    struct Mode {
        std::string P;  ///< empty: final values from the buffers
        bool estimate = false, sanitize = false;
    };

    /** Binds a member's own variables: row vars, extra vars (from the flat extra index x) and, when
     *  j is given, the reduction axes (from the flat axis index j). */
    Expr bind(Expr e, const MemberInfo &m, Expr x, Expr j, const Mode &mode) {
        std::map<std::string, Expr> vars;
        for (size_t i = 0; i < c_.n_row; i++) vars[m.def->vars[i]->name] = row_vars_[i];
        for (size_t i = 0; i < m.extra_vars.size(); i++) vars[m.extra_vars[i]->name] = unravel(x, m.extra_ext, i);
        if (j && m.def->body->kind == Kind::Reduce)
            for (size_t i = 0; i < m.def->body->num_axes(); i++) vars[m.def->body->axis(i)->name] = unravel(j, axis_ext_, i);
        return translate(e, vars, j, mode);
    }

    Expr translate(Expr e, const std::map<std::string, Expr> &vars, Expr j, const Mode &mode) {
        return substitute(e, [&](Expr n) -> Expr {
            if (n->kind == Kind::Var && n->role == VarRole::Index) {
                auto it = vars.find(n->name);
                return it == vars.end() ? nullptr : it->second;
            }
            if (n->kind != Kind::Load) return nullptr;
            bool prologue = ctx_.tile_prologues.count(n->name) > 0;
            auto it = names_.find(n->name);
            if (!prologue && (it == names_.end() || mode.P.empty())) return nullptr;
            std::vector<Expr> args;
            for (Expr a : n->args) args.push_back(translate(a, vars, j, mode));
            if (prologue) {
                // Computed per tile: read the tile array; outside the tile loop (a literal recompute),
                // evaluate the prologue's definition in place.
                if (j) return local_at(prologue_local(n->name), add_i(mul_i(rr(), int_c(ctx_.schedule.tile)), make_sub(j, local_var("$tb", SType::Int))));
                const TensorDef *d = p_.find_def(n->name);
                std::map<std::string, Expr> dv;
                for (size_t i = 0; i < d->vars.size(); i++) dv[d->vars[i]->name] = args[i];
                return translate(d->body, dv, nullptr, mode);
            }
            const MemberInfo &m = members_[static_cast<size_t>(it->second)];
            std::vector<Expr> extra(args.begin() + static_cast<long>(c_.n_row),
                                    args.begin() + static_cast<long>(c_.n_row + m.extra_ext.size()));
            if (m.form == Form::TopK)
                throw UserError(m.def->loc, "the CPU backend cannot read the top-k member '" + m.def->name +
                                                "' inside its own pass yet");
            Expr v = current_value(m, flatten(extra, m.extra_ext), mode);
            return mode.sanitize ? sanitize(v) : v;
        });
    }

    std::string prologue_local(const std::string &def) {
        auto it = prologue_ids_.find(def);
        if (it != prologue_ids_.end()) return it->second;
        std::string name = "$pro" + std::to_string(prologue_ids_.size());
        prologue_ids_[def] = name;
        return name;
    }

    /** δ of member m at x, from the running state P (or the final values when P is empty). */
    std::vector<Expr> deltas(const MemberInfo &m, Expr x, const Mode &mode) {
        std::vector<Expr> d;
        for (Expr e : m.a->delta_exprs) {
            Expr v = bind(e, m, x, nullptr, mode);
            d.push_back(mode.sanitize ? sanitize(v) : v);
        }
        return d;
    }

    Expr with_deltas(Expr e, const MemberInfo &m, const std::vector<Expr> &now, const std::vector<Expr> &old) {
        for (size_t i = 0; i < now.size(); i++) e = substitute(e, m.a->delta_syms[i], now[i]);
        for (size_t i = 0; i < old.size() && i < m.a->old_syms.size(); i++) e = substitute(e, m.a->old_syms[i], old[i]);
        return e;
    }

    Expr alpha(const MemberInfo &m, Expr x, const std::vector<Expr> &now, const std::vector<Expr> &old, const Mode &mode) {
        return bind(with_deltas(m.a->alpha, m, now, old), m, x, nullptr, mode);
    }

    std::vector<Expr> tags(const std::string &P, const MemberInfo &m, Expr x) {
        std::vector<Expr> t;
        for (size_t i = 0; i < m.nd; i++) t.push_back(tag(P, m, x, i));
        return t;
    }

    Expr differs(const std::vector<Expr> &a, const std::vector<Expr> &b) {
        std::vector<Expr> c;
        for (size_t i = 0; i < a.size(); i++) c.push_back(make_cmp(CmpOp::NE, a[i], b[i]));
        return any(c);
    }

    /** Σ_α Π_i (c'_i - c_i)^α_i S_α: the shift-form state's value at a new reference point. */
    Expr poly_value(const std::string &P, const MemberInfo &m, Expr x, const std::vector<Expr> &now) {
        const auto &al = m.a->alphas;
        std::vector<Expr> terms;
        std::vector<Expr> t = tags(P, m, x);
        for (size_t b = 0; b < al.size(); b++) {
            std::vector<Expr> f{local_at(field(P, m.k, "_S"), add_i(mul_i(sl(m, x), int_c(static_cast<int64_t>(al.size()))), int_c(static_cast<int64_t>(b))))};
            for (size_t i = 0; i < now.size(); i++)
                for (int q = 0; q < al[b][i]; q++) f.push_back(make_sub(now[i], t[i]));
            terms.push_back(f.size() == 1 ? f[0] : make_mul(f));
        }
        return terms.size() == 1 ? terms[0] : make_add(terms);
    }

    /** The value member m would have if the axis ended now (PlanInterp's member_value/finalize). */
    Expr current_value(const MemberInfo &m, Expr x, const Mode &mode) {
        Expr v = value_of(mode.P, m, x, Mode{mode.P, false, false});
        if (mode.estimate && m.a->op == ReduceOp::Sum)
            v = make_select(make_cmp(CmpOp::GT, count(mode.P), int_c(0)), make_div(make_mul(v, L_), count(mode.P)), v);
        return v;
    }

    /** The value of member m at x from the state P, its own dependencies read as `raw` says (running
     *  values of this pass, or the final values in the buffers): PlanInterp's finalize. */
    Expr value_of(const std::string &P, const MemberInfo &m, Expr x, const Mode &raw) {
        const MemberAnalysis &a = *m.a;
        Expr n = count(P);
        Expr v = nullptr;
        switch (m.form) {
        case Form::SumShift:
            v = make_select(seen_b(P, m, x), make_add(acc(P, m, x), make_mul(n, tag(P, m, x, 0))), real_c(0));
            break;
        case Form::ArgSelect: v = make_select(seen_b(P, m, x), idx(P, m, x), real_c(0)); break;
        case Form::Select: case Form::Prod: v = acc(P, m, x); break;
        case Form::Mult: {
            std::vector<Expr> d = deltas(m, x, raw), safe;
            for (Expr e : d) safe.push_back(sanitize(e));
            std::vector<Expr> t = tags(P, m, x);
            Expr al = alpha(m, x, safe, t, raw);
            if (a.op == ReduceOp::Prod) al = make_pow(al, n);
            Expr s = make_select(differs(safe, t), make_mul(acc(P, m, x), al), acc(P, m, x));
            Expr h = bind(with_deltas(a.H_def, m, d, {}), m, x, nullptr, raw);
            if (a.op == ReduceOp::Prod) h = make_pow(h, n);
            Expr empty = make_or(make_not(seen_b(P, m, x)), make_cmp(CmpOp::EQ, acc(P, m, x), real_c(0)));
            v = make_select(empty, real_c(0), make_mul(s, h));
            break;
        }
        case Form::Poly:
            v = make_select(seen_b(P, m, x), poly_value(P, m, x, deltas(m, x, raw)), real_c(0));
            break;
        case Form::TopK: RF_INTERNAL_ASSERT(false) << "top-k value read in its pass";
        }
        // φ maps the selected G to the member's value; an arg-selection's value is the index itself.
        if (m.sel && m.form != Form::ArgSelect) v = apply_phi(m, x, v, raw);
        return v;
    }

    Expr apply_phi(const MemberInfo &m, Expr x, Expr u, const Mode &mode) {
        const MemberAnalysis &a = *m.a;
        if (a.phi_literal) return bind(substitute(a.phi_literal, a.u_sym, u), m, x, nullptr, mode);
        Expr phi = substitute(a.phi, a.u_sym, u);
        return bind(with_deltas(phi, m, deltas(m, x, mode), {}), m, x, nullptr, mode);
    }

    // ---- Loops.
    /** for x in [0, X): body(x) */
    StmtP over_extra(const MemberInfo &m, const std::function<std::vector<StmtP>(Expr)> &body) {
        Expr x = make_index("$x" + std::to_string(m.k) + "_" + std::to_string(uid_++));
        return for_loop(x, int_c(0), m.X, body(x));
    }

    Expr jvar() { return make_index("$jj" + std::to_string(uid_++)); }

    // ---- Tile GEMMs (the recognize_gemm pass, done while the loop structure is known).
    /** Where a load's indices put the GEMM variables: the dimension holding exactly `v` (or the
     *  block's row `$rbase + $rr`), -1 when v does not occur, -2 when it occurs in another form. */
    static int dim_of(Expr load, Expr v) {
        int at = -1;
        for (size_t i = 0; i < load->args.size(); i++) {
            Expr a = load->args[i];
            bool exact = a == v || (v == rr() && a == make_add(local_var("$rbase", SType::Int), rr()));
            if (exact) {
                if (at != -1) return -2;
                at = static_cast<int>(i);
            } else if (mentions(a, v->name)) {
                return -2;
            }
        }
        return at;
    }

    /** When every use of the block's row in e is floor((rbase + rr) / G) — GQA: the KV head of a
     *  query head — the divisor G (then a block of rows aligned to G shares the operand); else null. */
    Expr group_divisor(Expr e) {
        Expr row = make_add(local_var("$rbase", SType::Int), rr());
        Expr G = nullptr;
        bool ok = true;
        Expr rest = substitute(e, [&](Expr n) -> Expr {
            if (n->kind != Kind::IDiv || n->args[0] != row) return nullptr;
            if (G && G != n->args[1]) ok = false;
            G = n->args[1];
            return int_c(0);
        });
        if (!ok || !G || mentions(rest, "$rr") || mentions(G, "$rr")) return nullptr;
        return G;
    }

    /** e with floor((rbase + rr) / G) replaced by floor(rbase / G): valid when G % nb == 0. */
    Expr grouped(Expr e, Expr G) {
        return substitute(e, make_idiv(make_add(local_var("$rbase", SType::Int), rr()), G),
                          make_idiv(local_var("$rbase", SType::Int), G));
    }

    /** Runs `block` when G is a multiple of the block (every row of the block shares the operand),
     *  else `rows` (one GEMV per row). */
    StmtP when_grouped(Expr G, StmtP block, StmtP rows) {
        return if_then(make_cmp(CmpOp::EQ, make_mod(G, int_c(nb_)), int_c(0)), {block}, {rows});
    }

    /** The element stride of dimension d of a global buffer: the product of the later extents. */
    Expr stride(Expr load, int d) {
        const TensorDef *def = p_.find_def(load->name);
        const InputDecl *in = p_.find_input(load->name);
        const std::vector<Expr> &dims = in ? in->dims : def->extents;
        std::vector<Expr> later(dims.begin() + d + 1, dims.end());
        return product(later);
    }

    /** A global f32/bf16 load, possibly widened by a cast to f32/f64 (bf16 → float is exact). */
    Expr gemm_operand(Expr e) {
        while (e->kind == Kind::Cast && (e->dtype == DType::f32 || e->dtype == DType::f64)) e = e->args[0];
        if (e->kind != Kind::Load || e->name.empty() || e->name[0] == '$') return nullptr;
        if (e->dtype != DType::f32 && e->dtype != DType::bf16) return nullptr;
        return e;
    }

    Expr at_origin(Expr load, const std::map<Expr, Expr> &to) {
        std::vector<Expr> args;
        for (Expr a : load->args) {
            Expr r = a;
            for (auto &[v, o] : to) {
                if (a == v) r = o;
                if (v == rr() && a == make_add(local_var("$rbase", SType::Int), rr())) r = local_var("$rbase", SType::Int);
            }
            args.push_back(r);
        }
        return make_load(load->name, args, load->dtype, load->stype);
    }

    /** S[rr][j] = alpha · Σ_d A[rr, d] · B[j, d] for a tile of j: one GEMM over the row block. */
    StmtP prologue_gemm(Expr v, Expr j, const std::string &local) {
        Expr alpha = real_c(1);
        Expr red = v;
        if (v->kind == Kind::Mul) {
            red = nullptr;
            std::vector<Expr> rest;
            for (Expr a : v->args) {
                if (a->kind == Kind::Reduce && !red) red = a;
                else rest.push_back(a);
            }
            if (!red) return nullptr;
            alpha = rest.size() == 1 ? rest[0] : make_mul(rest);
            if (mentions(alpha, j->name) || mentions(alpha, "$rr")) return nullptr;
        }
        if (red->kind != Kind::Reduce || red->rop != ReduceOp::Sum || red->num_axes() != 1) return nullptr;
        Expr body = red->body(), d = red->axis(0);
        if (body->kind != Kind::Mul || body->args.size() != 2) return nullptr;
        Expr l0 = gemm_operand(body->args[0]), l1 = gemm_operand(body->args[1]);
        if (!l0 || !l1) return nullptr;
        if (mentions(l0, j->name)) std::swap(l0, l1);
        Expr A = l0, B = l1;
        if (mentions(A, j->name)) return nullptr;
        // B shared by the block (attention: K[b, h, j, d]) gives one GEMM over the block; B that
        // depends on the row (GQA decode: K[b, hq / G, j, d]) gives one GEMV per row.
        bool per_row = mentions(B, "$rr");
        int ak = dim_of(A, d), bk = dim_of(B, d), bj = dim_of(B, j), ar = per_row ? -1 : dim_of(A, rr());
        if (per_row && (mentions(A->args[static_cast<size_t>(std::max(ak, 0))], "$rr") || dim_of(B, d) < 0)) return nullptr;
        if (ak != static_cast<int>(A->args.size()) - 1 || bk != static_cast<int>(B->args.size()) - 1 || bj < 0 || ar == -2) return nullptr;
        if (A->dtype == DType::bf16 && B->dtype == DType::f32) return nullptr;  // no such kernel
        GemmInfo g;
        g.M = per_row ? int_c(1) : local_var("$nbv", SType::Int);
        g.N = make_sub(local_var("$te", SType::Int), local_var("$tb", SType::Int));
        g.K = red->extents[0];
        if (per_row) {
            // Row rr's operands as they are (their indices already hold $rbase + $rr).
            g.a_base = substitute(A, d, int_c(0));
            g.b_base = substitute(substitute(B, d, int_c(0)), j, local_var("$tb", SType::Int));
            g.c_base = local_at(local, mul_i(rr(), int_c(ctx_.schedule.tile)));
        } else {
            g.a_base = at_origin(A, {{d, int_c(0)}, {rr(), int_c(0)}});
            g.b_base = at_origin(B, {{d, int_c(0)}, {j, local_var("$tb", SType::Int)}});
            g.c_base = local_at(local, int_c(0));
        }
        g.a_si = ar >= 0 ? stride(A, ar) : int_c(0);
        g.a_sk = int_c(1);
        g.b_sj = stride(B, bj);
        g.b_sk = int_c(1);
        g.c_si = int_c(ctx_.schedule.tile);
        g.alpha = alpha;
        g.trans_b = true;
        g.accumulate = false;
        if (!per_row) return gemm(g);
        StmtP rows = rows_of_block({gemm(g)});
        Expr G = group_divisor(B);
        int ar_block = dim_of(A, rr());
        if (!G || nb_ == 1 || ar_block == -2) return rows;
        GemmInfo gb = g;
        gb.M = local_var("$nbv", SType::Int);
        gb.a_base = at_origin(A, {{d, int_c(0)}, {rr(), int_c(0)}});
        gb.a_si = ar_block >= 0 ? stride(A, ar_block) : int_c(0);
        gb.b_base = at_origin(grouped(B, G), {{d, int_c(0)}, {j, local_var("$tb", SType::Int)}});
        gb.c_base = local_at(local, int_c(0));
        return when_grouped(G, gemm(gb), rows);
    }

    struct MemberGemm {
        Expr F = nullptr;  ///< the factor shared by every extra point (over $rr, $jh)
        Expr W = nullptr;  ///< the load that carries the extra axis
        int w_x = -1, w_j = -1;
        bool nn = true;    ///< W[j][x] (x contiguous) rather than W[x][j]
        bool int8 = false; ///< F is an i8-rounded value and W an i8 load: exact int32 GEMM
        bool per_row = false;  ///< W depends on the row (GQA decode's V[b, hq / G, j, e]): a GEMV per row
    };

    static Expr strip_widening(Expr e) {
        while (e->kind == Kind::Cast && (e->dtype == DType::f32 || e->dtype == DType::f64)) e = e->args[0];
        return e;
    }

    static Expr jh() { return make_index("$jh"); }
    static Expr xg() { return make_index("$xg"); }

    /** The term of a member as the update loop sums it, over $rr and $jh (for sharing). */
    Expr term_of(const std::string &P, const MemberInfo &m, Expr x) {
        if (m.form == Form::Mult) {
            if (!m.a->H_def->is_const(1)) return nullptr;
            return bind(m.def->body->body(), m, x, jh(), Mode{P, false, true});
        }
        if (m.form == Form::SumShift && !m.sel && m.a->relation != Relation::Polynomial)
            return bind(m.def->body->body(), m, x, jh(), Mode{P, false, false});
        return nullptr;
    }

    /** Recognizes Σ_j F(j)·W(j, x) over one axis and one extra variable. */
    std::optional<MemberGemm> gemm_form(const std::string &P, const MemberInfo &m) {
        if (m.extra_vars.size() != 1 || axis_ext_.size() != 1) return std::nullopt;
        // A few columns (x, y, z) are better as vector loops over the tile than as a GEMM call.
        if (m.X->is_const() && m.X->value < 16) return std::nullopt;
        Expr t = term_of(P, m, xg());
        if (!t || t->kind != Kind::Mul) return std::nullopt;
        MemberGemm g;
        std::vector<Expr> f;
        for (Expr a : t->args) {
            if (!mentions(a, "$xg")) {
                f.push_back(a);
                continue;
            }
            if (g.W) return std::nullopt;  // two factors carry the extra axis
            g.W = gemm_operand(a);
            if (!g.W) {
                Expr w = strip_widening(a);
                if (w->kind != Kind::Load || w->dtype != DType::i8 || w->name.empty() || w->name[0] == '$') return std::nullopt;
                g.W = w;
                g.int8 = true;
            }
        }
        if (!g.W || f.empty()) return std::nullopt;
        g.per_row = mentions(g.W, "$rr");
        g.F = f.size() == 1 ? f[0] : make_mul(f);
        if (g.int8) {
            // Quantized activations times int8 weights: F must itself be an i8-rounded value.
            Expr q = strip_widening(g.F);
            if (q->kind != Kind::Cast || q->dtype != DType::i8) return std::nullopt;
        }
        g.w_x = dim_of(g.W, xg());
        g.w_j = dim_of(g.W, jh());
        int last = static_cast<int>(g.W->args.size()) - 1;
        if (g.w_x < 0 || g.w_j < 0) return std::nullopt;
        if (g.w_x == last) g.nn = true;
        else if (g.w_j == last) g.nn = false;
        else return std::nullopt;
        if (g.int8 && g.nn) return std::nullopt;  // the int8 kernel takes W[x][j] (K contiguous)
        return g;
    }

    void plan_gemms(const std::string &P) {
        gemm_of_.clear();
        shared_.clear();
        for (const MemberInfo &m : members_)
            if (auto g = gemm_form(P, m)) {
                gemm_of_[m.k] = *g;
                if (!shared_.count(g->F)) shared_[g->F] = {"$f" + std::to_string(uid_++), false};
                if (g->int8) int8_arrays_.insert(shared_.at(g->F).first);
            }
    }

    /** A member without extra axes whose term is some GEMM's shared factor (l = Σ exp(S - m)). */
    Expr shared_term(const std::string &P, const MemberInfo &m) {
        if (!m.extra_vars.empty()) return nullptr;
        Expr t = term_of(P, m, int_c(0));
        return t && shared_.count(t) ? t : nullptr;
    }

    Expr shared_at(Expr F) {
        return local_at(shared_.at(F).first, add_i(mul_i(rr(), int_c(ctx_.schedule.tile)), make_sub(jh(), local_var("$tb", SType::Int))));
    }

    /** Computes the tile array of a shared factor once, before its first use. */
    bool materialize(Expr F, std::vector<StmtP> &out) {
        auto it = shared_.find(F);
        if (it == shared_.end()) return false;
        if (!it->second.second) {
            it->second.second = true;
            out.push_back(rows_of_block({for_loop(jh(), local_var("$tb", SType::Int), local_var("$te", SType::Int),
                                                  {assign(shared_at(F), F)}, LoopKind::Simd)}));
        }
        return true;
    }

    /** The rescale of a multiplicative member at x before new terms are added; δ locals into d. */
    /** δ of a multiplicative member once per row when it does not depend on the extra point
     *  (δ = -m for every output column of attention): declared into `out` before the loop over x,
     *  and used by rescale/after_terms instead of recomputing it per column. */
    void hoist_deltas(const std::string &P, const MemberInfo &m, std::vector<StmtP> &out) {
        hoisted_.erase(m.k);
        if (m.form != Form::Mult || m.extra_vars.empty()) return;
        std::vector<Expr> probe = deltas(m, xg(), Mode{P, false, true});
        for (Expr e : probe)
            if (mentions(e, "$xg")) return;
        std::string dn = "$dh" + std::to_string(uid_++);
        std::vector<Expr> locals;
        for (size_t i = 0; i < probe.size(); i++) {
            out.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, probe[i]));
            locals.push_back(local_var(dn + "_" + std::to_string(i)));
        }
        hoisted_[m.k] = locals;
    }

    std::vector<StmtP> rescale(const std::string &P, const MemberInfo &m, Expr x, std::vector<Expr> &d) {
        std::vector<StmtP> s;
        if (m.form != Form::Mult) return s;
        const MemberAnalysis &a = *m.a;
        Mode san{P, false, true};
        if (auto it = hoisted_.find(m.k); it != hoisted_.end()) {
            d = it->second;
        } else {
            std::string dn = "$d" + std::to_string(uid_++);
            std::vector<Expr> dv = deltas(m, x, san);
            for (size_t i = 0; i < dv.size(); i++) {
                s.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, dv[i]));
                d.push_back(local_var(dn + "_" + std::to_string(i)));
            }
        }
        std::vector<Expr> t = tags(P, m, x);
        Expr al = alpha(m, x, d, t, san);
        if (a.op == ReduceOp::Prod) al = make_pow(al, local_var("$nold", SType::Int));
        Expr cond = make_and(seen_b(P, m, x), differs(d, t));
        if (a.op == ReduceOp::Sum) cond = make_and(cond, make_cmp(CmpOp::NE, acc(P, m, x), real_c(0)));
        s.push_back(if_then(cond, {assign(acc(P, m, x), make_mul(acc(P, m, x), al))}));
        return s;
    }

    std::vector<StmtP> after_terms(const std::string &P, const MemberInfo &m, Expr x, const std::vector<Expr> &d) {
        std::vector<StmtP> s;
        for (size_t i = 0; i < d.size(); i++) s.push_back(assign(tag(P, m, x, i), d[i]));
        s.push_back(assign(seen(P, m, x), real_c(1)));
        return s;
    }

    /** A member summing a shared tile array (no shift: the terms are the array's values). */
    std::vector<StmtP> shared_update(const std::string &P, const MemberInfo &m, Expr x, Expr F) {
        std::vector<Expr> d;
        std::vector<StmtP> s = rescale(P, m, x, d);
        std::string tn = "$t" + std::to_string(uid_++);
        s.push_back(decl(tn, LocalClass::Tile, {}, real_c(0)));
        s.push_back(for_loop(jh(), local_var("$tb", SType::Int), local_var("$te", SType::Int),
                             {accum(ReduceOp::Sum, local_var(tn), shared_at(F))}, LoopKind::Simd));
        s.push_back(accum(ReduceOp::Sum, acc(P, m, x), local_var(tn)));
        for (const StmtP &q : after_terms(P, m, x, d)) s.push_back(q);
        return s;
    }

    /** acc[rr][x] += Σ_j F[rr][j] · W(j, x) as one GEMM over the block and the tile. */
    std::vector<StmtP> member_gemm(const std::string &P, const MemberInfo &m, const MemberGemm &g) {
        std::vector<StmtP> out;
        materialize(g.F, out);
        std::vector<StmtP> pre;
        hoist_deltas(P, m, pre);
        pre.push_back(over_extra(m, [&](Expr x) {
            std::vector<Expr> d;
            return rescale(P, m, x, d);
        }));
        if (m.form == Form::Mult) out.push_back(rows_of_block(pre));
        std::string tmp = "$g" + std::to_string(uid_++);
        out.push_back(decl(tmp, LocalClass::Tile, {mul_i(int_c(nb_), m.X)}, g.nn ? real_c(0) : nullptr));
        GemmInfo gi;
        gi.M = g.per_row ? int_c(1) : local_var("$nbv", SType::Int);
        gi.N = m.X;
        gi.K = make_sub(local_var("$te", SType::Int), local_var("$tb", SType::Int));
        gi.a_base = local_at(shared_.at(g.F).first, g.per_row ? mul_i(rr(), int_c(ctx_.schedule.tile)) : int_c(0));
        gi.a_si = int_c(ctx_.schedule.tile);
        gi.a_sk = int_c(1);
        gi.b_base = g.per_row ? substitute(substitute(g.W, xg(), int_c(0)), jh(), local_var("$tb", SType::Int))
                              : at_origin(g.W, {{xg(), int_c(0)}, {jh(), local_var("$tb", SType::Int)}});
        gi.b_sj = stride(g.W, g.w_x);
        gi.b_sk = stride(g.W, g.w_j);
        gi.c_base = local_at(tmp, g.per_row ? mul_i(rr(), m.X) : int_c(0));
        gi.c_si = m.X;
        gi.alpha = real_c(1);
        gi.trans_b = !g.nn;
        gi.accumulate = g.nn;
        if (!g.per_row) {
            out.push_back(gemm(gi));
        } else {
            StmtP rows = rows_of_block({gemm(gi)});
            Expr G = group_divisor(g.W);
            if (G && nb_ > 1) {
                GemmInfo gb = gi;
                gb.M = local_var("$nbv", SType::Int);
                gb.a_base = local_at(shared_.at(g.F).first, int_c(0));
                gb.b_base = at_origin(grouped(g.W, G), {{xg(), int_c(0)}, {jh(), local_var("$tb", SType::Int)}});
                gb.c_base = local_at(tmp, int_c(0));
                out.push_back(when_grouped(G, gemm(gb), rows));
            } else {
                out.push_back(rows);
            }
        }
        std::vector<StmtP> post;
        hoist_deltas(P, m, post);
        post.push_back(over_extra(m, [&](Expr x) {
            std::vector<Expr> d;
            std::vector<StmtP> s;
            if (m.form == Form::Mult) {
                // δ again for the tag (hoisted when it does not depend on x); the rescale happened above.
                if (auto it = hoisted_.find(m.k); it != hoisted_.end()) d = it->second;
                else
                    for (size_t i = 0; i < m.nd; i++) d.push_back(deltas(m, x, Mode{P, false, true})[i]);
            }
            s.push_back(accum(ReduceOp::Sum, acc(P, m, x), local_at(tmp, add_i(mul_i(rr(), m.X), x))));
            for (const StmtP &q : after_terms(P, m, x, d)) s.push_back(q);
            return s;
        }));
        out.push_back(rows_of_block(post));
        hoisted_.erase(m.k);
        return out;
    }

    // ---- Per-tile update (PlanInterp::update).
    std::vector<StmtP> update_tile(const std::string &P) {
        std::vector<StmtP> out;
        Expr j0 = local_var("$tb", SType::Int), j1 = local_var("$te", SType::Int);
        for (const auto &[def, local] : prologue_ids_) {
            if (!ctx_.tile_prologues.count(def)) continue;
            const TensorDef *d = p_.find_def(def);
            Expr j = jvar();
            std::map<std::string, Expr> vars;
            for (size_t i = 0; i < c_.n_row; i++) vars[d->vars[i]->name] = row_vars_[i];
            for (size_t i = c_.n_row; i < d->vars.size(); i++) vars[d->vars[i]->name] = unravel(j, axis_ext_, i - c_.n_row);
            Expr v = translate(d->body, vars, nullptr, Mode{});
            if (StmtP g = prologue_gemm(v, j, local)) {
                out.push_back(g);
                continue;
            }
            out.push_back(rows_of_block({for_loop(j, j0, j1, {assign(local_at(local, add_i(mul_i(rr(), int_c(ctx_.schedule.tile)), make_sub(j, j0))), v)}, LoopKind::Simd)}));
        }
        plan_gemms(P);
        for (const MemberInfo &m : members_) {
            const MemberAnalysis &a = *m.a;
            Mode run{P, false, false}, san{P, false, true};
            out.push_back(comment("member " + std::to_string(m.k) + ": " + relation_name(a.relation)));
            if (auto it = gemm_of_.find(m.k); it != gemm_of_.end()) {
                for (const StmtP &s : member_gemm(P, m, it->second)) out.push_back(s);
                continue;
            }
            if (Expr t = shared_term(P, m); t && materialize(t, out)) {
                out.push_back(rows_of_block({over_extra(m, [&](Expr x) { return shared_update(P, m, x, t); })}));
                continue;
            }
            switch (m.form) {
            case Form::SumShift: case Form::Select: case Form::Prod: case Form::ArgSelect: case Form::TopK: {
                Expr body = m.sel ? (a.Gsel_literal ? a.Gsel_literal : a.Gsel) : m.def->body->body();
                out.push_back(rows_of_block({over_extra(m, [&](Expr x) { return plain_update(P, m, x, body, run); })}));
                break;
            }
            case Form::Mult:
            {
                std::vector<StmtP> body;
                hoist_deltas(P, m, body);
                body.push_back(over_extra(m, [&](Expr x) { return mult_update(P, m, x, san); }));
                out.push_back(rows_of_block(body));
                hoisted_.erase(m.k);
            }
                break;
            case Form::Poly:
                out.push_back(rows_of_block({over_extra(m, [&](Expr x) {
                    std::vector<StmtP> s;
                    std::vector<Expr> c = deltas(m, x, Mode{P, true, true});
                    std::vector<Expr> cv;
                    std::string tagn = "$c" + std::to_string(uid_++);
                    for (size_t i = 0; i < c.size(); i++) {
                        s.push_back(decl(tagn + "_" + std::to_string(i), LocalClass::State, {}, c[i]));
                        cv.push_back(local_var(tagn + "_" + std::to_string(i)));
                    }
                    s.push_back(if_then(seen_b(P, m, x), {shift_at(P, m, x, tags(P, m, x), cv)}));
                    std::vector<StmtP> loop;
                    std::vector<std::string> accs;
                    for (size_t b = 0; b < a.basis.size(); b++) {
                        accs.push_back("$t" + std::to_string(uid_++));
                        s.push_back(decl(accs.back(), LocalClass::Tile, {}, real_c(0)));
                    }
                    Expr j = jvar();
                    for (size_t b = 0; b < a.basis.size(); b++)
                        loop.push_back(accum(ReduceOp::Sum, local_var(accs[b]), bind(with_deltas(a.basis[b], m, cv, {}), m, x, j, san)));
                    s.push_back(for_loop(j, j0, j1, loop, LoopKind::Simd));
                    Expr nb = int_c(static_cast<int64_t>(a.alphas.size()));
                    for (size_t b = 0; b < a.basis.size(); b++)
                        s.push_back(accum(ReduceOp::Sum, local_at(field(P, m.k, "_S"), add_i(mul_i(sl(m, x), nb), int_c(static_cast<int64_t>(b)))), local_var(accs[b])));
                    for (size_t i = 0; i < cv.size(); i++) s.push_back(assign(tag(P, m, x, i), cv[i]));
                    s.push_back(assign(seen(P, m, x), real_c(1)));
                    return s;
                })}));
                break;
            }
        }
        return out;
    }

    StmtP shift_at(const std::string &P, const MemberInfo &m, Expr x, std::vector<Expr> from, std::vector<Expr> to) {
        // PolyShift works on the S slots of one extra point: name + offset carried in args via a
        // Load of the first slot (the printer takes its address).
        auto s = std::const_pointer_cast<Stmt>(poly_shift(field(P, m.k, "_S"), m.a->alphas, std::move(from), std::move(to)));
        s->target = local_at(field(P, m.k, "_S"), mul_i(sl(m, x), int_c(static_cast<int64_t>(m.a->alphas.size()))));
        return s;
    }

    /** Independent members (sum, product, max/min, arg-selection, top-k) and selections over Gsel. */
    std::vector<StmtP> plain_update(const std::string &P, const MemberInfo &m, Expr x, Expr body_expr, const Mode &run) {
        std::vector<StmtP> s;
        Expr j0 = local_var("$tb", SType::Int), j1 = local_var("$te", SType::Int);
        Expr j = jvar();
        Expr v = bind(body_expr, m, x, j, run);
        switch (m.form) {
        case Form::SumShift: {
            // Σ v = Σ (v - ref) + n·ref with ref the first term: small partial sums keep the mean exact.
            Expr first = bind(body_expr, m, x, j0, run);
            s.push_back(if_then(make_not(seen_b(P, m, x)),
                                {assign(tag(P, m, x, 0), make_select(is_finite(first), first, real_c(0))),
                                 assign(acc(P, m, x), real_c(0)), assign(seen(P, m, x), real_c(1))}));
            std::string t = "$t" + std::to_string(uid_++);
            s.push_back(decl(t, LocalClass::Tile, {}, real_c(0)));
            std::vector<StmtP> loop{accum(ReduceOp::Sum, local_var(t), make_sub(v, tag(P, m, x, 0)))};
            if (auto it = ctx_.term_store.find(m.def->name); it != ctx_.term_store.end()) {
                if (it->second[0] == '$') {
                    loop.push_back(assign(local_at(it->second, add_i(mul_i(rr(), L_), j)), v));
                } else {
                    std::vector<Expr> at(row_vars_.begin(), row_vars_.end());
                    at.push_back(j);
                    loop.push_back(store(make_load(it->second, at, DType::f64, SType::Real), v));
                }
            }
            s.push_back(for_loop(j, j0, j1, loop, LoopKind::Simd));
            s.push_back(accum(ReduceOp::Sum, acc(P, m, x), local_var(t)));
            break;
        }
        case Form::Prod: {
            std::string t = "$t" + std::to_string(uid_++);
            s.push_back(decl(t, LocalClass::Tile, {}, real_c(1)));
            s.push_back(for_loop(j, j0, j1, {accum(ReduceOp::Prod, local_var(t), v)}, LoopKind::Simd));
            s.push_back(accum(ReduceOp::Prod, acc(P, m, x), local_var(t)));
            s.push_back(assign(seen(P, m, x), real_c(1)));
            break;
        }
        case Form::Select: {
            std::string t = "$t" + std::to_string(uid_++);
            s.push_back(decl(t, LocalClass::Tile, {}, real_c(reduce_identity(m.op))));
            s.push_back(for_loop(j, j0, j1, {accum(m.op, local_var(t), v)}, LoopKind::Simd));
            Expr best = m.op == ReduceOp::Max ? make_max(acc(P, m, x), local_var(t)) : make_min(acc(P, m, x), local_var(t));
            s.push_back(assign(acc(P, m, x), best));
            s.push_back(assign(seen(P, m, x), real_c(1)));
            break;
        }
        case Form::ArgSelect: {
            // The tile's best value first (a vector reduction); the index scan runs only when the
            // tile can win (ties keep the earlier, lower index).
            ReduceOp vop = m.op == ReduceOp::ArgMax ? ReduceOp::Max : ReduceOp::Min;
            std::string t = "$t" + std::to_string(uid_++);
            s.push_back(decl(t, LocalClass::Tile, {}, real_c(reduce_identity(vop))));
            s.push_back(for_loop(j, j0, j1, {accum(vop, local_var(t), v)}, LoopKind::Simd));
            Expr tv = local_var(t), cur = acc(P, m, x);
            Expr wins = make_or(make_not(seen_b(P, m, x)),
                                make_or(make_and(make_cmp(CmpOp::NE, tv, tv), make_cmp(CmpOp::EQ, cur, cur)),
                                        make_cmp(vop == ReduceOp::Max ? CmpOp::GT : CmpOp::LT, tv, cur)));
            Expr j2 = jvar();
            Expr v2 = bind(body_expr, m, x, j2, run);
            s.push_back(if_then(wins, {for_loop(j2, j0, j1, {arg_select(m.op, cur, idx(P, m, x), v2, j2)})}));
            s.push_back(assign(seen(P, m, x), real_c(1)));
            break;
        }
        case Form::TopK: {
            Expr val = (m.sel && !m.a->increasing) ? make_neg(v) : v;  // bottom-k of G as top-k of -G
            s.push_back(for_loop(j, j0, j1, {topk_insert(field(P, m.k, "_tk"), mul_i(sl(m, x), m.K), sl(m, x), m.K, ReduceOp::TopK, val, j)}));
            s.push_back(assign(seen(P, m, x), real_c(1)));
            break;
        }
        default: RF_INTERNAL_ASSERT(false) << "not a plain member";
        }
        return s;
    }

    /** s = s·α(δ, tag) + Σ U(x, δ): the multiplicative update with PlanInterp's guards. */
    std::vector<StmtP> mult_update(const std::string &P, const MemberInfo &m, Expr x, const Mode &san) {
        const MemberAnalysis &a = *m.a;
        Expr j0 = local_var("$tb", SType::Int), j1 = local_var("$te", SType::Int);
        std::vector<Expr> d;
        std::vector<StmtP> s = rescale(P, m, x, d);
        std::vector<Expr> t = tags(P, m, x);
        // The update term is the body as written divided by the deferred factors (keeps 0/0 = 0);
        // U itself where H_def is 0 or not finite.
        Expr j = jvar();
        Expr body = bind(m.def->body->body(), m, x, j, san);
        Expr term;
        if (a.H_def->is_const(1)) {
            term = body;
        } else {
            std::string ih = "$ih" + std::to_string(uid_++);
            s.push_back(decl(ih, LocalClass::State, {}, make_div(real_c(1), bind(with_deltas(a.H_def, m, d, {}), m, x, nullptr, san))));
            Expr u = bind(with_deltas(a.U, m, d, {}), m, x, j, san);
            Expr ihv = local_var(ih);
            term = make_select(make_and(is_finite(ihv), make_cmp(CmpOp::NE, ihv, real_c(0))), make_mul(body, ihv), u);
        }
        std::string tn = "$t" + std::to_string(uid_++);
        s.push_back(decl(tn, LocalClass::Tile, {}, real_c(a.op == ReduceOp::Prod ? 1 : 0)));
        s.push_back(for_loop(j, j0, j1, {accum(a.op == ReduceOp::Prod ? ReduceOp::Prod : ReduceOp::Sum, local_var(tn), term)}, LoopKind::Simd));
        s.push_back(accum(a.op == ReduceOp::Prod ? ReduceOp::Prod : ReduceOp::Sum, acc(P, m, x), local_var(tn)));
        for (size_t i = 0; i < d.size(); i++) s.push_back(assign(t[i], d[i]));
        s.push_back(assign(seen(P, m, x), real_c(1)));
        return s;
    }

    // ---- Merge B into A (PlanInterp::merge), member by member in order.
    std::vector<StmtP> merge(const std::string &A, const std::string &B) {
        std::vector<StmtP> out;
        Expr nA = local_var("$nA", SType::Int);
        out.push_back(decl("$nA", LocalClass::Index, {}, count(A)));
        out.push_back(assign(count(A), make_add(count(A), count(B))));
        std::vector<StmtP> per_row;
        for (const MemberInfo &m : members_) {
            const MemberAnalysis &a = *m.a;
            per_row.push_back(over_extra(m, [&](Expr x) {
                std::vector<StmtP> s;
                Expr sa = seen_b(A, m, x), sb = seen_b(B, m, x);
                switch (m.form) {
                case Form::Mult: {
                    std::string dn = "$d" + std::to_string(uid_++);
                    std::vector<Expr> d, dv = deltas(m, x, Mode{A, false, true});
                    for (size_t i = 0; i < dv.size(); i++) {
                        s.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, dv[i]));
                        d.push_back(local_var(dn + "_" + std::to_string(i)));
                    }
                    bool prod = a.op == ReduceOp::Prod;
                    auto moved = [&](const std::string &P, Expr n) {
                        Expr al = alpha(m, x, d, tags(P, m, x), Mode{A, false, true});
                        if (prod) al = make_pow(al, n);
                        Expr keep = make_not(differs(d, tags(P, m, x)));
                        if (!prod) keep = make_or(keep, make_cmp(CmpOp::EQ, acc(P, m, x), real_c(0)));
                        return make_select(seen_b(P, m, x), make_select(keep, acc(P, m, x), make_mul(acc(P, m, x), al)),
                                           real_c(prod ? 1 : 0));
                    };
                    Expr va = moved(A, nA), vb = moved(B, count(B));
                    s.push_back(assign(acc(A, m, x), prod ? make_mul(va, vb) : make_add(va, vb)));
                    for (size_t i = 0; i < d.size(); i++) s.push_back(assign(tag(A, m, x, i), d[i]));
                    break;
                }
                case Form::Poly: {
                    std::string cn = "$c" + std::to_string(uid_++);
                    std::vector<Expr> c, cvv = deltas(m, x, Mode{A, true, true});
                    for (size_t i = 0; i < cvv.size(); i++) {
                        s.push_back(decl(cn + "_" + std::to_string(i), LocalClass::State, {}, cvv[i]));
                        c.push_back(local_var(cn + "_" + std::to_string(i)));
                    }
                    Expr nb = int_c(static_cast<int64_t>(a.alphas.size()));
                    s.push_back(if_then(sa, {shift_at(A, m, x, tags(A, m, x), c)}));
                    s.push_back(if_then(sb, {shift_at(B, m, x, tags(B, m, x), c)}));
                    Expr q = make_index("$q" + std::to_string(uid_++));
                    Expr slot = add_i(mul_i(sl(m, x), nb), q);
                    Expr sA = local_at(field(A, m.k, "_S"), slot), sB = local_at(field(B, m.k, "_S"), slot);
                    s.push_back(for_loop(q, int_c(0), nb, {assign(sA, make_add(make_select(sa, sA, real_c(0)), make_select(sb, sB, real_c(0))))}));
                    for (size_t i = 0; i < c.size(); i++) s.push_back(assign(tag(A, m, x, i), c[i]));
                    break;
                }
                case Form::SumShift:
                    // Move B to A's reference point: Σ = T_A + T_B + n_B (ref_B - ref_A).
                    s.push_back(if_then(make_and(sa, sb),
                                        {assign(acc(A, m, x), make_add({acc(A, m, x), acc(B, m, x),
                                                                        make_mul(count(B), make_sub(tag(B, m, x, 0), tag(A, m, x, 0)))}))},
                                        {if_then(sb, {assign(acc(A, m, x), acc(B, m, x)), assign(tag(A, m, x, 0), tag(B, m, x, 0))})}));
                    break;
                case Form::Prod: s.push_back(if_then(sb, {accum(ReduceOp::Prod, acc(A, m, x), acc(B, m, x))})); break;
                case Form::Select: {
                    Expr best = m.op == ReduceOp::Max ? make_max(acc(A, m, x), acc(B, m, x)) : make_min(acc(A, m, x), acc(B, m, x));
                    s.push_back(if_then(sb, {if_then(sa, {assign(acc(A, m, x), best)}, {assign(acc(A, m, x), acc(B, m, x))})}));
                    break;
                }
                case Form::ArgSelect:
                    s.push_back(if_then(sb, {if_then(sa, {arg_select(m.op, acc(A, m, x), idx(A, m, x), acc(B, m, x), idx(B, m, x))},
                                                     {assign(acc(A, m, x), acc(B, m, x)), assign(idx(A, m, x), idx(B, m, x))})}));
                    break;
                case Form::TopK: {
                    Expr q = make_index("$q" + std::to_string(uid_++));
                    Expr slot = add_i(mul_i(sl(m, x), m.K), q);
                    s.push_back(for_loop(q, int_c(0), make_cast(DType::i64, local_at(field(B, m.k, "_tk_n"), sl(m, x))),
                                         {topk_insert(field(A, m.k, "_tk"), mul_i(sl(m, x), m.K), sl(m, x), m.K, ReduceOp::TopK,
                                                      local_at(field(B, m.k, "_tk_v"), slot), local_at(field(B, m.k, "_tk_i"), slot))}));
                    break;
                }
                }
                s.push_back(assign(seen(A, m, x), make_select(make_or(sa, sb), real_c(1), real_c(0))));
                return s;
            }));
        }
        out.push_back(rows_of_block(per_row));
        return out;
    }

    // ---- Finalize and store (PlanInterp::write_outputs).
    std::vector<StmtP> finalize(const std::string &P) {
        std::vector<StmtP> out;
        Mode fin{};  // member loads read the buffers (earlier members are written first)
        std::vector<Expr> row_idx(row_vars_.begin(), row_vars_.end());
        for (const MemberInfo &m : members_) {
            const MemberAnalysis &a = *m.a;
            std::string lit = "$lit" + std::to_string(m.k);
            Expr deps_literal = make_bool(false);
            for (const std::string &dep : a.deps)
                if (auto it = names_.find(dep); it != names_.end() && it->second < m.k)
                    deps_literal = make_or(deps_literal, make_cmp(CmpOp::NE, local_var("$lit" + std::to_string(it->second), SType::Int), int_c(0)));
            out.push_back(decl(lit, LocalClass::Index, {}, make_select(deps_literal, int_c(1), int_c(0))));
            if (m.form == Form::Mult || m.form == Form::Poly) {
                out.push_back(over_extra(m, [&](Expr x) {
                    std::vector<Expr> bad;
                    for (Expr d : deltas(m, x, fin)) bad.push_back(make_not(is_finite(d)));
                    return std::vector<StmtP>{if_then(any(bad), {assign(local_var(lit, SType::Int), int_c(1))})};
                }));
            }
            auto target = [&](const std::string &name, Expr x, Expr slot) {
                std::vector<Expr> i = row_idx;
                for (size_t q = 0; q < m.extra_ext.size(); q++) i.push_back(unravel(x, m.extra_ext, q));
                if (slot) i.push_back(slot);
                return make_load(name, i, DType::f64, SType::Real);
            };
            std::vector<StmtP> normal;
            if (m.form == Form::TopK) {
                normal.push_back(over_extra(m, [&](Expr x) {
                    Expr sl = make_index("$sl" + std::to_string(uid_++));
                    Expr slot = add_i(mul_i(this->sl(m, x), m.K), sl);
                    Expr u = local_at(field(P, m.k, "_tk_v"), slot);
                    if (m.sel && !a.increasing) u = make_neg(u);
                    Expr value = m.sel ? apply_phi(m, x, u, fin) : u;
                    return std::vector<StmtP>{for_loop(sl, int_c(0), m.K,
                                                       {store(target(m.def->name, x, sl), value),
                                                        store(target(m.def->index_name, x, sl), local_at(field(P, m.k, "_tk_i"), slot))})};
                }));
            } else {
                normal.push_back(over_extra(m, [&](Expr x) {
                    return std::vector<StmtP>{store(target(m.def->name, x, nullptr), final_value(P, m, x))};
                }));
            }
            if (m.def->is_topk()) {
                for (const StmtP &s : normal) out.push_back(s);
                continue;
            }
            std::vector<StmtP> literal{over_extra(m, [&](Expr x) {
                return std::vector<StmtP>{store(target(m.def->name, x, nullptr), bind(m.def->body, m, x, nullptr, fin))};
            })};
            out.push_back(if_then(make_cmp(CmpOp::NE, local_var(lit, SType::Int), int_c(0)), literal, normal));
        }
        return {rows_of_block(out)};
    }

    Expr final_value(const std::string &P, const MemberInfo &m, Expr x) { return value_of(P, m, x, Mode{}); }

    // ---- Epilogue: element-wise definitions of this row.
    std::vector<StmtP> epilogue() {
        std::vector<StmtP> out;
        if (ctx_.epilogues.empty()) return out;
        epilogue_arrays_.clear();
        for (const TensorDef *d : ctx_.epilogues) {
            std::vector<Expr> ext(d->extents.begin() + static_cast<long>(c_.n_row), d->extents.end());
            Expr x = make_index("$e" + std::to_string(uid_++));
            std::map<std::string, Expr> vars;
            std::vector<Expr> idx(row_vars_.begin(), row_vars_.end());
            for (size_t i = 0; i < c_.n_row; i++) vars[d->vars[i]->name] = row_vars_[i];
            for (size_t i = c_.n_row; i < d->vars.size(); i++) {
                Expr u = unravel(x, ext, i - c_.n_row);
                vars[d->vars[i]->name] = u;
                idx.push_back(u);
            }
            Expr v = translate(d->body, vars, nullptr, Mode{});
            for (const auto &[member, target] : ctx_.term_store) {
                bool local = target[0] == '$';
                if (!local && target != d->name) continue;
                if (local && ctx_.term_reader != d->name) continue;
                // The member's term at this element was kept during the sweep: read it back.
                const MemberInfo &m = members_[static_cast<size_t>(names_.at(member))];
                Expr term = bind(m.def->body->body(), m, int_c(0), x, Mode{});
                Expr kept = local ? local_at(target, add_i(mul_i(rr(), L_), x)) : make_load(d->name, idx, DType::f64, SType::Real);
                v = substitute(v, term, kept);
            }
            out.push_back(comment("epilogue: definition " + std::to_string(d - &p_.defs[0])));
            if (ctx_.row_outputs.count(d->name)) {
                std::string buf = "$ep" + std::to_string(uid_++);
                Expr X = product(ext);
                epilogue_arrays_.push_back(decl(buf, LocalClass::Tile, {mul_i(int_c(nb_), X)}, nullptr));
                out.push_back(for_loop(x, int_c(0), X, {assign(local_at(buf, add_i(mul_i(rr(), X), x)), v)}, LoopKind::Simd));
                std::vector<Expr> first(row_vars_.begin(), row_vars_.end());
                for (size_t i = c_.n_row; i < d->vars.size(); i++) first.push_back(int_c(0));
                out.push_back(copy_row(make_load(d->name, first, DType::f64, SType::Real), local_at(buf, mul_i(rr(), X)), X));
                continue;
            }
            out.push_back(for_loop(x, int_c(0), product(ext), {store(make_load(d->name, idx, DType::f64, SType::Real), v)}, LoopKind::Simd));
        }
        std::vector<StmtP> all = epilogue_arrays_;
        all.push_back(rows_of_block(out));
        return all;
    }

    // ---- Kernel shapes.
    std::vector<StmtP> row_decls(Expr flat_row) {
        std::vector<StmtP> s;
        for (size_t i = 0; i + 1 < c_.n_row; i++)
            s.push_back(decl(row_vars_[i]->name, LocalClass::Index, {}, unravel(flat_row, block_ext_, i)));
        Expr base = c_.n_row == 0 ? int_c(0) : mul_i(unravel(flat_row, block_ext_, c_.n_row - 1), int_c(nb_));
        s.push_back(decl("$rbase", LocalClass::Index, {}, base));
        Expr valid = c_.n_row == 0 ? int_c(1) : make_min(int_c(nb_), make_sub(row_ext_.back(), local_var("$rbase", SType::Int)));
        s.push_back(decl("$nbv", LocalClass::Index, {}, valid));
        return s;
    }

    /** Tiles of [lo, hi) with the update of state P. */
    StmtP tiles(const std::string &P, Expr lo, Expr hi) {
        Expr T = int_c(ctx_.schedule.tile);
        Expr t = make_index("$tile");
        std::vector<StmtP> body;
        Expr j0 = add_i(lo, mul_i(t, T));
        body.push_back(decl("$tb", LocalClass::Index, {}, j0));
        body.push_back(decl("$te", LocalClass::Index, {}, make_min(add_i(local_var("$tb", SType::Int), T), hi)));
        body.push_back(decl("$nold", LocalClass::Index, {}, count(P)));
        body.push_back(assign(count(P), add_i(count(P), make_sub(local_var("$te", SType::Int), local_var("$tb", SType::Int)))));
        // Prologue tile arrays are declared before the update that fills them.
        std::vector<StmtP> upd = update_tile(P);
        for (const auto &[def, local] : prologue_ids_) body.push_back(decl(local, LocalClass::Tile, {int_c(nb_ * ctx_.schedule.tile)}, nullptr));
        for (const auto &[F, arr] : shared_)
            body.push_back(decl(arr.first, int8_arrays_.count(arr.first) ? LocalClass::Int8 : LocalClass::Tile,
                                {int_c(nb_ * ctx_.schedule.tile)}, nullptr));
        for (const StmtP &s : upd) body.push_back(s);
        Expr ntiles = make_idiv(add_i(make_sub(hi, lo), int_c(ctx_.schedule.tile - 1)), T);
        return for_loop(t, int_c(0), ntiles, body);
    }

    PassKernel single_segment() {
        Expr row = make_index("$row");
        std::vector<StmtP> body = row_decls(row);
        for (const StmtP &s : row_statements()) body.push_back(s);
        return {for_loop(row, int_c(0), product(block_ext_), body, LoopKind::Parallel), nullptr};
    }

public:
    /** One row of a single-segment pass (row variables already declared by the caller). */
    std::vector<StmtP> row_statements() {
        std::vector<StmtP> body;
        for (const auto &[member, target] : ctx_.term_store)
            if (target[0] == '$') body.push_back(decl(target, LocalClass::Tile, {mul_i(int_c(nb_), L_)}, nullptr));
        init_state(body, "$A");
        body.push_back(tiles("$A", int_c(0), L_));
        for (const StmtP &s : finalize("$A")) body.push_back(s);
        for (const StmtP &s : epilogue()) body.push_back(s);
        return body;
    }
    std::vector<StmtP> row_decls_public(Expr flat_row) { return row_decls(flat_row); }
    Expr rows() const { return product(block_ext_); }

private:

    PassKernel multi_segment() {
        Expr S = int_c(ctx_.schedule.segments);
        Expr rows = product(block_ext_);
        Expr SS = int_c(1);  // the count n
        std::vector<std::pair<std::string, Expr>> f = fields("$A");
        for (auto &[name, n] : f) SS = add_i(SS, n);
        const std::string &buf = ctx_.scratch_buffer;
        auto save_or_load = [&](const std::string &P, Expr base, bool save) {
            std::vector<StmtP> s;
            Expr off = base;
            Expr slot0 = make_load(buf, {off}, DType::f64, SType::Real);
            if (save) s.push_back(store(slot0, count(P)));
            else s.push_back(assign(count(P), make_cast(DType::i64, slot0)));
            off = add_i(off, int_c(1));
            for (auto &[name, n] : fields(P)) {
                Expr q = make_index("$q" + std::to_string(uid_++));
                Expr g = make_load(buf, {add_i(off, q)}, DType::f64, SType::Real);
                s.push_back(for_loop(q, int_c(0), n, {save ? store(g, local_at(name, q)) : assign(local_at(name, q), g)}));
                off = add_i(off, n);
            }
            return s;
        };
        // Phase 1: every (row, segment) pair sweeps its part of the axis.
        Expr w = make_index("$w");
        std::vector<StmtP> p1;
        p1.push_back(decl("$rowflat", LocalClass::Index, {}, make_idiv(w, S)));
        p1.push_back(decl("$seg", LocalClass::Index, {}, make_mod(w, S)));
        for (const StmtP &s : row_decls(local_var("$rowflat", SType::Int))) p1.push_back(s);
        init_state(p1, "$A");
        Expr seg = local_var("$seg", SType::Int);
        p1.push_back(decl("$lo", LocalClass::Index, {}, make_idiv(mul_i(seg, L_), S)));
        p1.push_back(decl("$hi", LocalClass::Index, {}, make_idiv(mul_i(add_i(seg, int_c(1)), L_), S)));
        p1.push_back(tiles("$A", local_var("$lo", SType::Int), local_var("$hi", SType::Int)));
        for (const StmtP &s : save_or_load("$A", mul_i(w, SS), true)) p1.push_back(s);
        // Phase 2: per row, merge the segment states in order, finalize, epilogue.
        Expr row = make_index("$row");
        std::vector<StmtP> p2;
        for (const StmtP &s : row_decls(row)) p2.push_back(s);
        init_state(p2, "$A");
        init_state(p2, "$B");
        for (const StmtP &s : save_or_load("$A", mul_i(mul_i(row, S), SS), false)) p2.push_back(s);
        Expr sv = make_index("$s");
        std::vector<StmtP> m = save_or_load("$B", mul_i(add_i(mul_i(row, S), sv), SS), false);
        for (const StmtP &s : merge("$A", "$B")) m.push_back(s);
        p2.push_back(for_loop(sv, int_c(1), S, m));
        for (const StmtP &s : finalize("$A")) p2.push_back(s);
        for (const StmtP &s : epilogue()) p2.push_back(s);
        StmtP body = block({for_loop(w, int_c(0), mul_i(rows, S), p1, LoopKind::Parallel),
                            for_loop(row, int_c(0), rows, p2, LoopKind::Parallel)});
        return {body, mul_i(mul_i(rows, S), SS)};
    }

    const PassContext &ctx_;
    const Program &p_;
    const ChainPlan &c_;
    std::vector<MemberInfo> members_;
    std::map<std::string, int> names_;
    std::vector<Expr> row_ext_, block_ext_, row_vars_, axis_ext_;
    int64_t nb_ = 1;
    Expr L_ = nullptr;
    std::map<std::string, std::string> prologue_ids_;
    std::map<int, MemberGemm> gemm_of_;
    std::map<int, std::vector<Expr>> hoisted_;
    std::vector<StmtP> epilogue_arrays_;  ///< row buffers of streamed epilogue outputs  ///< member -> δ locals declared once per row
    std::set<std::string> int8_arrays_;
    std::map<Expr, std::pair<std::string, bool>> shared_;  ///< factor -> (tile array, computed yet)
    int uid_ = 0;
};

}  // namespace

PassKernel lower_pass(const PassContext &ctx) {
    PassLowering l(ctx);
    return l.run();
}

StmtP lower_onchip_rows(const std::vector<PassContext> &passes) {
    // Every pass of the chain on the same row, one after the other, while the row is in cache. The
    // locals of pass i are renamed apart ($p<i>_...); the row variables are shared.
    std::vector<StmtP> body;
    Expr row = make_index("$row"), rows = nullptr;
    for (size_t i = 0; i < passes.size(); i++) {
        PassLowering l(passes[i]);
        l.prepare();
        if (i == 0) {
            body = l.row_decls_public(row);
            rows = l.rows();
        }
        std::string pfx = "$p" + std::to_string(i) + "_";
        auto rename = [&](const std::string &n) {
            if (n.empty() || n[0] != '$' || n == "$row" || n == "$rbase" || n == "$nbv" ||
                (n.size() >= 3 && n[1] == 'r' && isdigit(static_cast<unsigned char>(n[2]))))
                return n;
            return pfx + n.substr(1);
        };
        body.push_back(comment("pass " + std::to_string(i)));
        body.push_back(rename_locals(block(l.row_statements()), rename));
    }
    return for_loop(row, int_c(0), rows, body, LoopKind::Parallel);
}

}  // namespace rf::tile
