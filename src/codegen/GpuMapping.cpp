/** \file GpuMapping.cpp
 * The facts of GpuMapping.h.
 */
#include "codegen/GpuMapping.h"

#include "codegen/CodeGen_C.h"
#include "tile/StmtVisitor.h"

namespace rf::gpu_mapping {

using namespace tile;

/** Element type of a buffer in GPU memory: temporaries are float (fp32 running states, docs/design.md §4). */
const char *gpu_storage_type(const Buffer &b) {
    return b.role == Buffer::Role::Temp ? "float" : c_storage_type(b.dtype);
}

std::string gpu_widen(DType t, const std::string &stored) {
    switch (t) {
    case DType::bf16: return "rf_bf16_to_float(" + stored + ")";
    case DType::f16: return "rf_f16_to_float(" + stored + ")";
    case DType::f8e4m3: return "rf_f8e4m3_to_float(" + stored + ")";
    case DType::f8e5m2: return "rf_f8e5m2_to_float(" + stored + ")";
    default: return stored;
    }
}

std::string class_type(LocalClass c) {
    switch (c) {
    case LocalClass::Index: return "int64_t";
    case LocalClass::Int8: return "int8_t";
    default: return "float";
    }
}
int64_t class_bytes(LocalClass c) { return c == LocalClass::Index ? 8 : c == LocalClass::Int8 ? 1 : 4; }

/** The value of an integer expression of constants only (dims of private arrays), else false. */
bool const_int(Expr e, int64_t &out) {
    switch (e->kind) {
    case Kind::Const: out = static_cast<int64_t>(e->value); return true;
    case Kind::Add: case Kind::Mul: {
        int64_t acc = e->kind == Kind::Add ? 0 : 1;
        for (Expr a : e->args) {
            int64_t v;
            if (!const_int(a, v)) return false;
            acc = e->kind == Kind::Add ? acc + v : acc * v;
        }
        out = acc;
        return true;
    }
    default: return false;
    }
}

/** Locals declared anywhere in s. */
void declared_in(const StmtP &s, std::set<std::string> &out) {
    for_each_stmt(s, [&](const StmtP &c) {
        if (c->kind == StmtKind::Decl) out.insert(c->name);
        if (c->kind == StmtKind::For) out.insert(c->var->name);
    });
}

/** True when s writes a scalar local that is not in `inner` (a race if s were spread over threads). */
bool writes_outer_scalar(const StmtP &s, const std::set<std::string> &inner) {
    return any_stmt(s, [&](const StmtP &c) {
        switch (c->kind) {
        case StmtKind::Assign: case StmtKind::Accum: case StmtKind::ArgSelect:
            if (c->target->kind == Kind::Var && !inner.count(c->target->name)) return true;
            return c->target2 && c->target2->kind == Kind::Var && !inner.count(c->target2->name);
        default: return false;
        }
    });
}

/** True when every array declared in s has a constant size (private arrays need one). */
bool private_arrays_ok(const StmtP &s) {
    return !any_stmt(s, [](const StmtP &c) {
        if (c->kind != StmtKind::Decl) return false;
        int64_t v;
        for (Expr d : c->dims)
            if (!const_int(d, v)) return true;
        return false;
    });
}

}  // namespace rf::gpu_mapping
