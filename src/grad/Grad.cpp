/** \file Grad.cpp
 * derive_backward: the passes of src/grad/ in order — stabilizers and their shift laws
 * (Stabilizer.cpp), reverse mode in gather form (Reverse.cpp, Gather.cpp, Rounding.cpp), residuals
 * (Residuals.cpp), empty rows (EmptyRows.cpp) — then both programs printed as specs (spec/Print.h) and parsed back, so what
 * `redfuse grad` writes is exactly what the other commands read.
 */
#include "grad/Grad.h"

#include "grad/GradInternal.h"
#include "spec/Frontend.h"
#include "spec/Print.h"

namespace rf {

namespace grad {

Names::Names(const Program &p) {
    for (const auto &s : p.sizes) taken_.insert(s.name);
    for (const auto &i : p.inputs) taken_.insert(i.name);
    for (const auto &d : p.defs) {
        taken_.insert(spec_identifier(d.name));
        taken_.insert(d.name);
        if (d.is_topk()) taken_.insert(d.index_name);
        for (Expr v : d.vars) taken_.insert(v->name);
        visit(d.body, [&](Expr n) {
            if (n->kind == Kind::Var) taken_.insert(n->name);
        });
    }
}

std::string Names::fresh(const std::string &base) {
    std::string b = spec_identifier(base), n = b;
    for (int k = 2; taken_.count(n); k++) n = b + std::to_string(k);
    taken_.insert(n);
    return n;
}

}  // namespace grad

namespace {

std::vector<std::string> chosen_inputs(const Program &p, const GradOptions &o) {
    std::vector<std::string> wrt;
    if (o.wrt.empty()) {
        for (const auto &in : p.inputs)
            if (is_float(in.dtype)) wrt.push_back(in.name);
        return wrt;
    }
    for (const std::string &x : o.wrt) {
        const InputDecl *in = p.find_input(x);
        if (!in) throw UserError({}, "--wrt: '" + spec_identifier(x) + "' is not an input of the spec");
        if (!is_float(in->dtype))
            throw UserError(in->loc, "--wrt: '" + x + "' is an integer input (" + dtype_name(in->dtype) +
                                         "); integer inputs get no gradient");
        for (const std::string &y : wrt)
            if (y == x) throw UserError(in->loc, "--wrt: '" + x + "' is listed twice");
        wrt.push_back(x);
    }
    return wrt;
}

Program reparse(const std::string &text, const std::string &what) {
    try {
        return parse_program(text, what);
    } catch (const UserError &e) {
        throw InternalError("the derived " + what + " does not parse (line " + std::to_string(e.loc().line) +
                            "): " + e.what() + "\n" + text);
    }
}

}  // namespace

GradResult derive_backward(const Program &forward, const GradOptions &options) {
    std::vector<std::string> wrt = chosen_inputs(forward, options);
    if (wrt.empty()) throw UserError({}, "the spec has no float input to differentiate with respect to");
    grad::Names names(forward);
    std::vector<grad::ShiftLaw> laws = grad::cancelling_stabilizers(forward);
    grad::RawBackward raw = grad::reverse_mode(forward, wrt, laws, options.straight_through, names);
    if (raw.adjoint_inputs.empty())
        throw UserError({}, "no float output of the spec depends on the inputs differentiated; there is nothing to derive");
    GradResult out;
    for (const auto &o : raw.adjoint_inputs) out.adjoints.push_back({o, raw.adjoint_of.at(o)});
    out.gradients = raw.gradients;
    grad::Resolved res = grad::resolve_residuals(forward, std::move(raw), laws, names);
    grad::guard_empty_reciprocals(res.backward, res.forward);

    std::vector<std::string> header = {"Backward pass derived by `redfuse grad`; an ordinary spec.",
                                       "Inputs: the forward's inputs, the adjoints of its outputs and its residuals."};
    for (const auto &n : res.notes) header.push_back(n);
    out.notes = res.notes;
    out.backward_spec = print_spec(res.backward, header);
    out.forward_spec = print_spec(res.forward, {"Forward pass with the residuals its backward reads, by `redfuse grad`."});
    out.backward = reparse(out.backward_spec, "backward spec");
    out.forward = reparse(out.forward_spec, "forward spec");
    return out;
}

}  // namespace rf
