/** \file RowCopies.cpp
 * The CPU tile pass that turns a loop storing consecutive elements of a float tile array into a row
 * of an f32 or bf16 output into one row copy (CopyRow: a vector conversion per 16 values, streamed
 * past the caches when the output is larger than them) instead of a rounded scalar store each.
 */
#include <map>
#include <string>

#include "tile/LoopFacts.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

/* Rule: for x in [0, n): store Out[i_1, ..., i_k, x] = $a[b + x]
 *   ⇒  copy Out[i_1, ..., i_k, 0 .. n) = $a[b .. b + n)
 * Preconditions: the loop is serial or independent (each iteration one store, nothing else); Out is
 * an output stored in f32 or bf16 and no temporary shares its name (a store writes every buffer of
 * the tensor, the copy only the output); x is Out's last (contiguous) index and no other index reads
 * it; $a is a float tile array (the kernel's compute type is f32) or a one-dimensional float
 * temporary, and b does not read x. Both forms
 * round each float once to the output's type (round to nearest even for bf16, NaN kept), so the
 * values are the same; the copy's non-temporal stores change only when the bytes reach memory.
 * Where: the finalize stores of sums fed by tile GEMMs (dK, dV, dW of the derived backward: one
 * scalar rounding store per element, 32.8 M of them for linear + cross-entropy's dW). */

class RowCopies : public StmtMutator {
public:
    RowCopies(const Module &m, const std::map<std::string, LocalClass> &arrays) : m_(m), arrays_(arrays) {}

    StmtP mutate_for(const StmtP &s) override {
        if (StmtP copy = as_copy(s)) return copy;
        return mutate_default(s);
    }

private:
    StmtP as_copy(const StmtP &s) const {
        if (s->loop != LoopKind::Serial && s->loop != LoopKind::Independent) return nullptr;
        if (!s->begin->is_const(0) || s->body.size() != 1 || s->body[0]->kind != StmtKind::Store) return nullptr;
        const Stmt &st = *s->body[0];
        Expr x = s->var, t = st.target, v = st.value;
        if (!output_row_dtype(t->name) || t->args.empty() || t->args.back() != x) return nullptr;
        for (size_t i = 0; i + 1 < t->args.size(); i++)
            if (mentions(t->args[i], x->name)) return nullptr;
        if (v->kind != Kind::Load || v->name.empty() || v->args.size() != 1 || !float_source(v->name)) return nullptr;
        Expr base = loop_facts::offset_beside(v->args[0], x);
        if (!base) return nullptr;
        std::vector<Expr> at(t->args.begin(), t->args.end() - 1);
        at.push_back(int_c(0));
        return copy_row(make_load(t->name, at, t->dtype, t->stype), make_load(v->name, {base}, v->dtype, v->stype), s->end);
    }

    /** A float tile array, or a float temporary of one dimension (row-reduced partial sums). */
    bool float_source(const std::string &name) const {
        if (name[0] == '$') {
            auto a = arrays_.find(name);
            return a != arrays_.end() && a->second == LocalClass::Tile;
        }
        const Buffer *b = m_.find(name);
        return b && b->role == Buffer::Role::Temp && b->dtype == DType::f32 && b->dims.size() == 1;
    }

    bool output_row_dtype(const std::string &name) const {
        bool output = false;
        for (const Buffer &b : m_.buffers) {
            if (b.name != name) continue;
            if (b.role != Buffer::Role::Output || (b.dtype != DType::f32 && b.dtype != DType::bf16)) return false;
            output = true;
        }
        return output;
    }

    const Module &m_;
    const std::map<std::string, LocalClass> &arrays_;
};

}  // namespace

Module copy_rows_out(const Module &in) {
    Module m = in;
    if (m.compute != DType::f32) return m;  // tile arrays are double: the copies take floats
    for (Kernel &k : m.kernels) {
        // Local arrays by name; a name declared twice with different classes or shapes is left alone.
        const std::map<std::string, LocalClass> arrays = loop_facts::declared_locals(k.body).arrays;
        k.body = RowCopies(m, arrays).mutate(k.body);
    }
    return m;
}

}  // namespace rf::tile
