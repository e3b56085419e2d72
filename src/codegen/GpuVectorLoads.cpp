/** \file GpuVectorLoads.cpp
 * Which loads of a spread vector loop are read V elements at a time, and their text (see
 * GpuVectorLoads.h).
 */
#include "codegen/GpuVectorLoads.h"

#include <set>

#include "codegen/GpuMapping.h"
#include "codegen/GpuPlacement.h"
#include "tile/StmtVisitor.h"

namespace rf::gpu_mapping {

using namespace tile;

namespace {

/** True when e mentions only sizes, constants and locals outside `bound` (what the loop changes). */
bool invariant(Expr e, const std::set<std::string> &bound) {
    bool ok = true;
    visit(e, [&](Expr x) {
        if (x->kind == Kind::Var && x->role != VarRole::Size && (x->name.empty() || x->name[0] != '$' || bound.count(x->name))) ok = false;
        if (x->kind == Kind::Load && bound.count(x->name)) ok = false;
        if (x->kind == Kind::Reduce) ok = false;  // binds its own axis variables
    });
    return ok;
}

/** True when e is j + (something invariant): unit stride along the loop. */
bool unit_stride(Expr e, Expr j, const std::set<std::string> &bound) {
    if (e == j) return true;
    if (e->kind != Kind::Add) return false;
    int hits = 0;
    for (Expr a : e->args) {
        if (a == j) hits++;
        else if (!invariant(a, bound)) return false;
    }
    return hits == 1;
}

void stores_of(const StmtP &s, std::vector<Expr> &out) {
    for_each_stmt(s, [&](const StmtP &c) {
        if (c->kind == StmtKind::Store || c->kind == StmtKind::CopyRow) out.push_back(c->target);
    });
}

/** The expressions that may load: bounds, conditions, right-hand sides and the target's indices. */
void exprs_of(const StmtP &s, std::vector<Expr> &out) {
    for_each_stmt(s, [&](const StmtP &c) {
        for (Expr e : {c->begin, c->end, c->cond, c->value, c->index, c->k})
            if (e) out.push_back(e);
        if (c->target)
            for (Expr a : c->target->args) out.push_back(a);
    });
}

}  // namespace

VectorPlan plan_vector_loads(const StmtP &loop, const std::map<std::string, const Buffer *> &bufs) {
    std::set<std::string> bound;
    declared_in(loop, bound);
    Access a = access_of(loop);
    bound.insert(a.writes.begin(), a.writes.end());
    std::vector<Expr> stores, roots;
    stores_of(loop, stores);
    for (const StmtP &c : loop->body) exprs_of(c, roots);
    VectorPlan plan;
    std::set<Expr> seen;
    int widest = 0;
    for (Expr root : roots)
        visit(root, [&](Expr x) {
            if (x->kind != Kind::Load || x->name.empty() || x->name[0] == '$' || seen.count(x) || x->args.empty()) return;
            auto it = bufs.find(x->name);
            if (it == bufs.end()) return;
            const Buffer *b = it->second;
            int bytes = b->role == Buffer::Role::Temp ? 4 : dtype_bytes(b->dtype);
            bool floating = b->role == Buffer::Role::Temp || b->dtype == DType::f32 || b->dtype == DType::bf16 || b->dtype == DType::f16;
            if (!floating) return;
            for (size_t i = 0; i + 1 < x->args.size(); i++)
                if (!invariant(x->args[i], bound)) return;
            // The last index is row-major contiguous (stride 1 in every buffer of the printer).
            std::set<std::string> others = bound;
            others.erase(loop->var->name);
            if (!unit_stride(x->args.back(), loop->var, others)) return;
            // Stores into the buffer: only to this very element (read before written, per element).
            for (Expr t : stores)
                if (t->name == x->name && t != x) return;
            seen.insert(x);
            plan.loads.push_back({x, b, bytes});
            widest = std::max(widest, bytes);
        });
    if (!plan.loads.empty()) plan.width = widest == 4 ? 4 : 8;
    return plan;
}

std::string vector_load_text(Dialect d, const VectorLoad &l, int width, const std::string &address, const std::string &dest) {
    std::string out = "{ ";
    bool temp = l.buffer->role == Buffer::Role::Temp;
    auto widen = [&](const std::string &raw) { return temp ? raw : gpu_widen(l.buffer->dtype, raw); };
    if (d == Dialect::OpenCL) {
        // vloadN needs only the element's alignment.
        std::string scalar = l.bytes == 4 ? "float" : "ushort";  // the storage types float and uint16_t
        out += "const " + scalar + std::to_string(width) + " t_ = vload" + std::to_string(width) + "(0, &" + address + ");";
        for (int u = 0; u < width; u++) out += " " + dest + "[" + std::to_string(u) + "] = " + widen("t_.s" + std::to_string(u)) + ";";
        return out + " }";
    }
    static const char *const lane[] = {"x", "y", "z", "w"};
    if (l.bytes == 4) {
        out += "const float4 t_ = *(const float4 *)(&" + address + ");";
        for (int u = 0; u < 4; u++) out += " " + dest + "[" + std::to_string(u) + "] = t_." + lane[u] + ";";
        return out + " }";
    }
    // 16-bit elements, two per 32-bit word, the lower address in the low half (little endian).
    std::string type = width == 8 ? "uint4" : "uint2";
    out += "const " + type + " t_ = *(const " + type + " *)(&" + address + ");";
    for (int u = 0; u < width; u++) {
        std::string word = std::string("t_.") + lane[u / 2];
        out += " " + dest + "[" + std::to_string(u) + "] = " + widen("(uint16_t)(" + word + (u % 2 ? " >> 16" : " & 0xffffu") + ")") + ";";
    }
    return out + " }";
}

std::string chunk_aligned_text(Dialect d, const VectorLoad &l, int width, const std::string &address) {
    if (d == Dialect::OpenCL) return "1";
    return "(((size_t)(&" + address + ") & " + std::to_string(width * l.bytes - 1) + ") == 0)";
}

}  // namespace rf::gpu_mapping
