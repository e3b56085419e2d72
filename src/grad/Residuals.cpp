/** \file Residuals.cpp
 * What the backward reads of the forward, and how: each forward definition E the backward loads is
 * resolved once, in this order of preference:
 *  1. E is a stabilizer with a normalizer l (ShiftLaw): the backward is exact for any value of the
 *     stabilizer (the outputs ignore it, so the adjoints of every other atom are those at m + t,
 *     where each downstream T is T·exp(-k_T·t)). It is evaluated at t = log(l)/k_l: m becomes the
 *     residual L = m + log(l)/k_l (one value per row: attention's row log-sum-exp), l becomes 1, and
 *     every other downstream T is recomputed there (or solved from an output, 3). The N×N
 *     probabilities are never saved: they are recomputed as exp(S - L).
 *  2. E is a forward output: the backward reads it as an input (the forward writes it anyway).
 *  3. E is read only by one element-wise output O = E[v]·c with c a product of non-zero factors
 *     (powers with negative exponents, exponentials, non-zero constants): E[idx] = O[idx] / c[idx]
 *     (O.sum = O·l; at the orbit point of 1, O.sum = O).
 *  4. E is a row statistic (no definition reads it along a reduction axis): saved as a residual.
 *  5. Otherwise E is recomputed in the backward (QKᵀ: re-read Q and K rather than store N×N).
 * The forward-with-residuals program is the forward plus L and the saved statistics as outputs.
 */
#include "grad/GradInternal.h"
#include "spec/Print.h"
#include "sym/Simplify.h"

namespace rf::grad {

namespace {

enum class How : uint8_t { Residual, One, Input, Solve, Recompute };

struct Choice {
    How how = How::Recompute;
    std::string name;   // the tensor the backward loads (Residual, Input, Recompute)
    Expr solved = nullptr;  // Solve: E over O's variables
    std::vector<Expr> vars;  // Solve: O's variables
};

struct Resolver {
    const Program &p;
    const std::vector<ShiftLaw> &laws;
    Names &names;
    Resolved out;
    std::map<std::string, Choice> chosen;
    std::vector<TensorDef> recomputed;

    const ShiftLaw *law_with_normalizer(const std::string &e, double *k) const {
        for (const auto &l : laws) {
            if (l.normalizer.empty()) continue;
            if (l.stabilizer == e) return &l;
            auto it = l.k.find(e);
            if (it != l.k.end()) {
                if (k) *k = it->second;
                return &l;
            }
        }
        return nullptr;
    }

    bool is_output(const std::string &e) const {
        for (const auto &o : p.outputs)
            if (o.name == e) return true;
        return false;
    }

    const OutputDecl *output(const std::string &e) const {
        for (const auto &o : p.outputs)
            if (o.name == e) return &o;
        return nullptr;
    }

    bool row_statistic(const std::string &e) const {
        for (const auto &d : p.defs) {
            if (!d.is_reduction()) continue;
            bool along = any_of(d.body, [&](Expr n) {
                if (n->kind != Kind::Load || n->name != e) return false;
                for (size_t i = 0; i < d.body->num_axes(); i++)
                    for (Expr a : n->args)
                        if (mentions(a, d.body->axis(i)->name)) return true;
                return false;
            });
            if (along) return false;
        }
        return true;
    }

    static bool nonzero_factor(Expr f) {
        if (f->kind == Kind::Const) return f->value != 0;
        if (f->kind == Kind::Call) return f->func == Func::exp;
        return f->kind == Kind::Pow && f->args[1]->kind == Kind::Const && f->args[1]->value < 0;
    }

    /** Case 3: E = O / c when O = E[v]·c is E's only reader. */
    std::optional<Choice> solve_from_output(const std::string &e) {
        const TensorDef *reader = nullptr;
        for (const auto &d : p.defs)
            if (d.name != e && mentions(d.body, e)) {
                if (reader) return std::nullopt;
                reader = &d;
            }
        if (!reader || !is_output(reader->name) || reader->is_reduction()) return std::nullopt;
        const TensorDef *ed = p.find_def(e);
        if (ed->vars.size() != reader->vars.size()) return std::nullopt;
        Expr le = make_load(e, reader->vars, DType::f64, SType::Real);
        Expr c = simplify(substitute(reader->body, le, make_const(1)));
        if (mentions(c, e) || !provably_equal(reader->body, make_mul(le, c))) return std::nullopt;
        std::vector<Expr> fs = c->kind == Kind::Mul ? c->args : std::vector<Expr>{c};
        for (Expr f : fs)
            if (!nonzero_factor(f)) return std::nullopt;
        Choice ch;
        ch.how = How::Solve;
        ch.vars = reader->vars;
        ch.solved = resolve(make_mul(make_load(reader->name, reader->vars, DType::f64, SType::Real),
                                     make_pow(c, make_const(-1))));
        return ch;
    }

    InputDecl input_for(const TensorDef &d, const std::string &name, DType t) {
        InputDecl in;
        in.name = name;
        in.dims = d.extents;
        in.dtype = t;
        in.loc = d.loc;
        return in;
    }

    /** The dtype of a saved real residual: f32, or f64 when the forward has a float64 input (a
     *  float64 spec's backward must not lose its precision through a float32 residual). */
    DType residual_dtype() const {
        for (const InputDecl &in : p.inputs)
            if (in.dtype == DType::f64) return DType::f64;
        return DType::f32;
    }

    Choice decide(const std::string &e) {
        const TensorDef &d = *p.find_def(e);
        double k = 0;
        const ShiftLaw *law = law_with_normalizer(e, &k);
        Choice ch;
        if (law && law->stabilizer == e) {
            ch.how = How::Residual;
            ch.name = names.fresh("L");
            TensorDef l;
            l.name = ch.name;
            l.vars = d.vars;
            l.extents = d.extents;
            l.loc = d.loc;
            Expr norm = make_load(law->normalizer, d.vars, DType::f64, SType::Real);
            Expr lg = make_call(Func::log, norm);
            if (law->k_normalizer != 1) lg = make_div(lg, make_const(law->k_normalizer));
            l.body = make_add(make_load(e, d.vars, DType::f64, SType::Real), lg);
            out.forward.defs.push_back(l);
            out.forward.outputs.push_back({ch.name, residual_dtype(), d.loc});
            out.backward.inputs.push_back(input_for(d, ch.name, residual_dtype()));
            out.notes.push_back("residual " + ch.name + " = " + print_spec_expr(l.body) + " (the stabilizer '" +
                                spec_identifier(e) + "' at the point where '" + spec_identifier(law->normalizer) +
                                "' is 1)");
            return ch;
        }
        if (law && law->normalizer == e) {
            ch.how = How::One;
            return ch;
        }
        bool scaled = law && k != 0;
        if (!scaled && is_output(e)) {
            const OutputDecl *o = output(e);
            ch.how = How::Input;
            ch.name = e;
            out.backward.inputs.push_back(input_for(d, e, o->dtype));
            return ch;
        }
        if (std::optional<Choice> s = solve_from_output(e)) return *s;
        if (!scaled && row_statistic(e) && !d.is_topk()) {
            // The forward outputs the definition itself; both specs spell its name spec_identifier(e).
            ch.how = How::Input;
            ch.name = spec_identifier(e);
            out.forward.outputs.push_back({e, d.stype == SType::Int ? DType::i32 : residual_dtype(), d.loc});
            out.backward.inputs.push_back(input_for(d, ch.name, d.stype == SType::Int ? DType::i32 : residual_dtype()));
            out.notes.push_back("residual " + ch.name + ": the row statistic '" + spec_identifier(e) + "'");
            return ch;
        }
        ch.how = How::Recompute;
        ch.name = e;
        TensorDef r = d;
        r.body = resolve(d.body);
        // A recomputed top-k whose indices are a forward output: the backward already takes those
        // indices as an input (the same values), so the recomputed copy gets a name of its own.
        if (r.is_topk() && is_output(r.index_name)) r.index_name = names.fresh(r.index_name + "_recomputed");
        recomputed.push_back(r);
        out.notes.push_back("'" + spec_identifier(e) + "' is recomputed in the backward, not saved");
        return ch;
    }

    const Choice &choice(const std::string &e) {
        auto it = chosen.find(e);
        if (it != chosen.end()) return it->second;
        // A top-k's two tensors are one definition. Its indices follow its values: recomputed with
        // them (the recomputed definition's index tensor), else saved beside them as an integer
        // residual. (Aliasing the indices to the values' choice read the values where the
        // routing select(c == I[r,k], ...) needs the indices: scripts/fuzz_specs.py --commands
        // grad, seed 101 #1.)
        const TensorDef *d = p.find_def(e);
        if (d->is_topk() && e == d->index_name && !is_output(e)) {
            Choice values = choice(d->name);
            Choice c = values;
            if (values.how == How::Recompute) {
                for (const TensorDef &r : recomputed)
                    if (r.name == d->name) c.name = r.index_name;
            } else {
                c.how = How::Input;
                c.name = e;
                out.forward.outputs.push_back({e, DType::i32, d->loc});
                out.backward.inputs.push_back(input_for(*d, e, DType::i32));
                out.notes.push_back("residual '" + spec_identifier(e) + "': the indices of the top-k '" +
                                    spec_identifier(d->name) + "'");
            }
            return chosen[e] = c;
        }
        Choice c = decide(e);
        return chosen[e] = c;
    }

    Expr resolve(Expr e) {
        return substitute(e, [&](Expr n) -> Expr {
            if (n->kind != Kind::Load || !p.find_def(n->name)) return nullptr;
            const Choice &c = choice(n->name);
            switch (c.how) {
            case How::One: return make_const(1);
            case How::Solve: {
                std::map<std::string, Expr> ren;
                for (size_t i = 0; i < c.vars.size(); i++) ren[c.vars[i]->name] = n->args[i];
                return rename_vars(c.solved, ren);
            }
            default:
                if (c.name == n->name) return n;
                return make_load(c.name, n->args, n->dtype, n->stype);
            }
        });
    }
};

}  // namespace

Resolved resolve_residuals(const Program &p, RawBackward raw, const std::vector<ShiftLaw> &laws, Names &names) {
    Resolver r{p, laws, names, {}, {}, {}};
    r.out.forward = p;
    r.out.backward.file = p.file;
    r.out.backward.sizes = p.sizes;
    r.out.backward.inputs = p.inputs;
    for (const std::string &o : raw.adjoint_inputs) {
        const TensorDef *d = p.find_def(o);
        r.out.backward.inputs.push_back(r.input_for(*d, raw.adjoint_of.at(o), r.output(o)->dtype));
    }
    std::vector<TensorDef> defs;
    for (TensorDef d : raw.defs) {
        d.body = simplify_keeping_roundings(r.resolve(d.body));
        defs.push_back(d);
    }
    r.out.backward.defs = r.recomputed;
    for (auto &d : defs) r.out.backward.defs.push_back(d);
    for (const auto &[x, g] : raw.gradients) {
        // A gradient has its input's dtype (PyTorch's convention for parameter gradients): the
        // kernel accumulates in f32 or wider and rounds once at the store, so a bf16 dW costs no
        // f32 copy. An fp8 input's gradient is f32 (fp8 is a storage format, not a gradient's).
        DType t = p.find_input(x)->dtype;
        bool own = t == DType::f64 || t == DType::f32 || t == DType::bf16 || t == DType::f16;
        r.out.backward.outputs.push_back({g, own ? t : DType::f32, p.find_input(x)->loc});
    }
    r.out.notes.insert(r.out.notes.begin(), raw.notes.begin(), raw.notes.end());
    return r.out;
}

}  // namespace rf::grad
