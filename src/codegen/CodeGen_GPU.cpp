/** \file CodeGen_GPU.cpp
 * The tile IR → OpenCL C / CUDA printer (the mapping is described in CodeGen_GPU.h and docs/gpu.md).
 */
#include "codegen/CodeGen_GPU.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "codegen/GpuGemm.h"
#include "codegen/GpuInlineOps.h"
#include "codegen/GpuMapping.h"
#include "codegen/GpuPlacement.h"
#include "codegen/GpuVectorLoads.h"
#include "ir/Eval.h"
#include "support/Error.h"

namespace rf {

extern const char *const kEmbeddedGpuHeader;  // generated from src/runtime/kernels/redfuse_gpu.h

const std::string &gpu_runtime_header() {
    static const std::string text = kEmbeddedGpuHeader;
    return text;
}

namespace {

using namespace tile;
using namespace gpu_mapping;

struct LocalInfo {
    std::string c;      ///< C name
    bool shared = false;
    bool array = false;
    LocalClass cls = LocalClass::Tile;
};

struct SharedSlot {
    std::string c, type;
    Expr bytes;  ///< multiple of 16
};

class GpuKernelPrinter {
public:
    GpuKernelPrinter(const Module &m, const Kernel &k, const StmtP &loop, std::string name, const GpuCodegenOptions &o)
        : m_(m), k_(k), loop_(loop), name_(std::move(name)), o_(o), T_(o.threads), W_(o.threads), place_(k, o) {
        for (const Buffer &b : m.buffers)
            if (!bufs_.count(b.name) || b.role == Buffer::Role::Temp) bufs_[b.name] = &b;
    }

    GpuLaunch print(std::ostringstream &out) {
        addressed(loop_);
        std::ostringstream body;
        os_ = &body;
        Expr var = loop_->var;
        std::string v = cname(var->name);
        Expr iterations = make_sub(loop_->end, loop_->begin), groups = iterations;
        bool cuda = o_.dialect == Dialect::Cuda;
        // Fusion level "thread": one iteration (a row, or a (row, segment) pair) per thread, its
        // running state private to the thread, no barriers; segments meet in the second launch
        // with the derived merge. Needs every array of the body to have a constant size.
        bool per_thread = private_arrays_ok(loop_) &&
                          (o_.fusion_level == "thread" ||
                           (o_.fusion_level == "auto" && o_.longest_axis <= 256 && place_.estimate(iterations) >= 4.0 * T_));
        // Fusion level "warp": one iteration per warp of 32 threads, the block level's mapping with
        // the warp as the group (warp barriers, shuffle reductions whose result every lane holds).
        // Not with a cooperative GEMM (the block GEMM needs the whole work-group). OpenCL 1.2 has
        // no sub-groups: there the warp is a work-group of 32.
        bool warp = !per_thread && !access_of(loop_).gemm &&
                    (o_.fusion_level == "warp" || (o_.fusion_level == "auto" && cuda && o_.longest_axis <= 8192 &&
                                                   place_.estimate(iterations) >= 1024));
        if (per_thread) {
            groups = make_idiv(make_add(iterations, make_int(T_ - 1)), make_int(T_));
            pad(1) << "const int64_t w_ = RF_GID * " << T_ << " + RF_LID;\n";
            pad(1) << "if (w_ >= " << int_expr(iterations) << ") return;\n";
            pad(1) << "const int64_t " << v << " = " << int_expr(loop_->begin) << " + w_;\n";
            scope_[var->name] = {v, false, false, LocalClass::Index};
            private_list(loop_->body, 1);
        } else {
            if (warp) {
                W_ = 32;
                if (cuda) {
                    warps_ = T_ / 32;
                    lane_ = "rf_lane";
                    bar_ = "__syncwarp();";
                    groups = make_idiv(make_add(iterations, make_int(warps_ - 1)), make_int(warps_));
                    pad(1) << "const int rf_lane = (int)(RF_LID & 31);\n";
                    pad(1) << "const int64_t w_ = RF_GID * " << warps_ << " + (RF_LID >> 5);\n";
                    // Whole warps leave: nothing below synchronises more than one warp.
                    pad(1) << "if (w_ >= " << int_expr(iterations) << ") return;\n";
                    pad(1) << "const int64_t " << v << " = " << int_expr(loop_->begin) << " + w_;\n";
                } else {
                    T_ = 32;
                }
            }
            if (warps_ == 1) pad(1) << "const int64_t " << v << " = " << int_expr(loop_->begin) << " + RF_GID;\n";
            // The reduction scratch of distributed vector loops: one float per thread of the group.
            slots_.push_back({"rf_red", "float", make_int(int64_t{W_} * 4)});
            scope_[var->name] = {v, false, false, LocalClass::Index};
            place_.replicate(loop_->body);
            uniform_list(loop_->body, 1);
        }

        out << "// " << safe_comment(k_.what) << "\n";
        // Block and warp launches without a GEMM are memory-bound: ask for 1024 resident threads
        // per SM (at most 64 registers each; ptxas's own choice spilled a few). GEMM launches and
        // states per thread take the registers they need (up to 255).
        int min_blocks = per_thread || access_of(loop_).gemm ? 1 : std::max(1, 1024 / T_);
        if (cuda) out << "extern \"C\" __global__ void __launch_bounds__(" << T_ << ", " << min_blocks << ") " << name_ << "(";
        else out << "__kernel __attribute__((reqd_work_group_size(" << T_ << ", 1, 1))) void " << name_ << "(";
        for (size_t i = 0; i < m_.buffers.size(); i++) {
            const Buffer &b = m_.buffers[i];
            bool in = b.role == Buffer::Role::Input;
            out << (i ? ", " : "") << (cuda ? "" : "__global ") << (in ? "const " : "") << gpu_storage_type(b) << " *"
                << (in && cuda ? "__restrict__ " : "") << buf_id(i);
        }
        for (const std::string &s : m_.sizes) out << ", int64_t " << c_identifier(s);
        if (!cuda) out << ", __local char *rf_smem";
        out << ") {\n";
        if (cuda) out << "    extern __shared__ __align__(16) unsigned char rf_smem[];\n";
        for (size_t i = 0; i < m_.buffers.size(); i++) {
            const Buffer &b = m_.buffers[i];
            for (size_t d = 0; d < b.dims.size(); d++) {
                std::string st = "1";
                for (size_t q = d + 1; q < b.dims.size(); q++) st += " * (int64_t)(" + int_expr(b.dims[q]) + ")";
                out << "    const int64_t " << buf_id(i) << "_s" << d << " = " << st << "; (void)" << buf_id(i) << "_s" << d << ";\n";
            }
        }
        // Slots one after the other, each a multiple of 16 bytes (sizes are run-time arguments);
        // at warp level each warp of the work-group has its own set.
        Expr per_group = make_int(0);
        for (const SharedSlot &s : slots_) per_group = make_add(per_group, s.bytes);
        if (warps_ > 1) out << "    int64_t rf_off = (int64_t)(RF_LID >> 5) * (" << int_expr(per_group) << ");\n";
        else out << "    int64_t rf_off = 0;\n";
        for (const SharedSlot &s : slots_)
            out << "    RF_SHARED " << s.type << " *" << s.c << " = (RF_SHARED " << s.type << " *)(rf_smem + rf_off); (void)" << s.c
                << "; rf_off += " << int_expr(s.bytes) << ";\n";
        out << body.str() << "}\n\n";
        return {name_, groups, T_, make_mul(per_group, make_int(warps_))};
    }

private:
    // ---- Names and expressions.
    std::string buf_id(size_t i) const { return "rf_b" + std::to_string(i); }
    size_t buf_index(const Buffer *b) const { return static_cast<size_t>(b - &m_.buffers[0]); }
    std::string cname(const std::string &local) {
        std::string base = c_identifier(local.substr(1), "l_"), n = base;
        for (int i = 2; used_.count(n); i++) n = base + "_" + std::to_string(i);
        used_.insert(n);
        return n;
    }
    const LocalInfo &info(const std::string &name) {
        auto it = scope_.find(name);
        RF_INTERNAL_ASSERT(it != scope_.end()) << "GPU printer: unknown local " << name << " in " << k_.name;
        return it->second;
    }

    CEmitContext ctx() {
        CEmitContext c;
        c.real = "float";
        c.dialect = o_.dialect;
        c.var = [this](Expr v) -> std::string {
            if (v->role == VarRole::Size) return c_identifier(v->name);
            const LocalInfo &li = info(v->name);
            return li.shared ? li.c + "[0]" : li.c;
        };
        c.load = [this](Expr l, const std::vector<std::string> &idx) -> std::string {
            if (auto it = vector_operand_.find(l); it != vector_operand_.end()) return it->second;
            if (!l->name.empty() && l->name[0] == '$') {
                const LocalInfo &li = info(l->name);
                return li.array ? li.c + "[" + idx[0] + "]" : li.shared ? li.c + "[0]" : li.c;
            }
            auto it = bufs_.find(l->name);
            RF_INTERNAL_ASSERT(it != bufs_.end()) << "load of unknown buffer " << l->name;
            return element(it->second, buf_id(buf_index(it->second)) + "[" + offset(it->second, idx) + "]");
        };
        return c;
    }
    static std::string element(const Buffer *b, const std::string &at) { return b->role == Buffer::Role::Temp ? at : gpu_widen(b->dtype, at); }
    std::string offset(const Buffer *b, const std::vector<std::string> &idx) { return row_major_offset(buf_id(buf_index(b)), idx); }
    std::string expr(Expr e) { return emit_c(e, ctx()); }
    std::string int_expr(Expr e) {
        CEmitContext c = ctx();
        return emit_c(e, c);
    }
    std::string lvalue(Expr t) {
        const LocalInfo &li = info(t->name);
        if (t->kind == Kind::Var || !li.array) return li.shared ? li.c + "[0]" : li.c;
        return li.c + "[" + int_expr(t->args[0]) + "]";
    }
    LocalClass target_class(Expr t) { return info(t->name).cls; }
    std::string cast_to(LocalClass c, Expr v) {
        if (c == LocalClass::Index) return "(int64_t)(" + expr(v) + ")";
        if (c == LocalClass::Int8) return "(int8_t)(" + expr(v) + ")";
        return "(float)(" + expr(v) + ")";
    }
    std::ostringstream &pad(int ind) {
        for (int i = 0; i < ind; i++) *os_ << "    ";
        return *os_;
    }
    static std::string combine(ReduceOp op, const std::string &a, const std::string &b) {
        switch (op) {
        case ReduceOp::Sum: return a + " + " + b;
        case ReduceOp::Prod: return a + " * " + b;
        case ReduceOp::Max: return "rf_max(" + a + ", " + b + ")";
        default: return "rf_min(" + a + ", " + b + ")";
        }
    }
    static std::string identity(ReduceOp op) {
        switch (op) {
        case ReduceOp::Sum: return "0.0f";
        case ReduceOp::Prod: return "1.0f";
        case ReduceOp::Max: return "(-RF_INF)";
        default: return "RF_INF";
        }
    }

    // ---- Uniform (work-group) context.
    /** Declares the locals of `list`'s direct Decls as shared slots. */
    void declare_shared(const StmtP &d) {
        std::string c = cname(d->name);
        Expr n = make_int(1);
        for (Expr e : d->dims) {
            substitute(e, [&](Expr x) -> Expr {
                RF_INTERNAL_ASSERT(!(x->kind == Kind::Var && x->role != VarRole::Size))
                    << "GPU printer: the size of " << d->name << " depends on " << x->name << " in " << k_.name;
                return nullptr;
            });
            n = make_mul(n, e);
        }
        Expr bytes = make_mul(make_idiv(make_add(make_mul(n, make_int(class_bytes(d->cls))), make_int(15)), make_int(16)), make_int(16));
        slots_.push_back({c, class_type(d->cls), bytes});
        scope_[d->name] = {c, true, !d->dims.empty(), d->cls};
        solo_decls_.insert(d.get());
    }

    /** A group-level list. Statements that need every thread are cooperative; the others run on
     *  every thread at once when they write only replicated (register) locals, else on thread 0
     *  followed by a barrier. */
    void uniform_list(const std::vector<StmtP> &list, int ind) {
        auto saved = scope_;
        std::vector<StmtP> solo;
        auto flush = [&]() {
            if (solo.empty()) return;
            guard(solo, ind);
            pad(ind) << "if (" << lane_ << " == 0) {\n";
            for (const StmtP &s : solo) private_stmt(s, ind + 1);
            pad(ind) << "}\n";
            barrier(ind);
            solo.clear();
        };
        for (const StmtP &s : list) {
            if (s->kind == StmtKind::Decl && !place_.replicated(s->name)) declare_shared(s);
            if (place_.coop(s)) {
                flush();
                coop_stmt(s, ind);
            } else if (s->kind == StmtKind::Comment || place_.replicable(s)) {
                flush();
                for (const std::string &r : access_of(s).reads)
                    if (in_memory(r)) pending_.insert(r);
                private_stmt(s, ind);
            } else {
                solo.push_back(s);
            }
        }
        flush();
        scope_ = saved;
    }

    /** True for a shared local or a buffer other threads may write (what a read must be guarded for). */
    bool in_memory(const std::string &name) {
        auto it = scope_.find(name);
        if (it != scope_.end()) return it->second.shared;
        auto b = bufs_.find(name);
        return b != bufs_.end() && b->second->role != Buffer::Role::Input;
    }
    /** Locals the printer addresses as arrays whatever their size (top-k lists, shift states,
     *  row copies, GEMM operands). */
    void addressed(const StmtP &s) {
        switch (s->kind) {
        case StmtKind::TopKInsert:
            for (const char *part : {"_v", "_i", "_n"}) addressed_.insert(s->name + part);
            break;
        case StmtKind::PolyShift: addressed_.insert(s->target->name); break;
        case StmtKind::CopyRow: addressed_.insert(s->value->name); break;
        case StmtKind::Gemm:
            for (Expr e : {s->gemm->a_base, s->gemm->b_base, s->gemm->c_base}) addressed_.insert(e->name);
            break;
        default: break;
        }
        for (const StmtP &c : s->body) addressed(c);
        for (const StmtP &c : s->else_body) addressed(c);
    }
    /** Every thread reads e (a condition, loop bounds) into a private value. */
    void note_reads(Expr e) {
        std::set<std::string> names;
        visit(e, [&](Expr x) {
            if (x->kind == Kind::Load || x->kind == Kind::Var) names.insert(x->name);
        });
        for (const std::string &r : names)
            if (in_memory(r)) pending_.insert(r);
    }
    void barrier(int ind) {
        pad(ind) << bar_ << "\n";
        pending_.clear();
    }
    /** A barrier before `list` when it writes what replicated statements read since the last one. */
    void guard(const std::vector<StmtP> &list, int ind) {
        for (const StmtP &s : list)
            for (const std::string &w : access_of(s).writes)
                if (pending_.count(w)) return barrier(ind);
    }

    void coop_stmt(const StmtP &s, int ind) {
        switch (s->kind) {
        case StmtKind::Block: uniform_list(s->body, ind); return;
        case StmtKind::If: {
            pad(ind) << "{\n";
            pad(ind + 1) << "const bool c_ = " << expr(s->cond) << ";\n";
            note_reads(s->cond);
            std::set<std::string> before = pending_;
            pad(ind + 1) << "if (c_) {\n";
            uniform_list(s->body, ind + 2);
            std::set<std::string> then_reads = before;
            std::swap(then_reads, pending_);
            if (!s->else_body.empty()) {
                pad(ind + 1) << "} else {\n";
                uniform_list(s->else_body, ind + 2);
            }
            pending_.insert(then_reads.begin(), then_reads.end());
            pad(ind + 1) << "}\n";
            pad(ind) << "}\n";
            return;
        }
        case StmtKind::Decl: {
            guard({s}, ind);
            const LocalInfo &li = info(s->name);
            std::string n = "1";
            for (Expr e : s->dims) n += " * (int64_t)(" + int_expr(e) + ")";
            // Bounds in a constant and a braced body: PoCL 3.1 skipped this loop when its bound was
            // written inline after a barrier inside an outer loop (found with printf; see docs/gpu.md).
            pad(ind) << "{ const int64_t n_ = " << n << "; for (int64_t q_ = " << lane_ << "; q_ < n_; q_ += " << W_ << ") { " << li.c
                     << "[q_] = " << cast_to(li.cls, s->value) << "; } }\n";
            barrier(ind);
            return;
        }
        case StmtKind::Gemm:
            RF_INTERNAL_ASSERT(W_ == T_) << "GPU printer: a cooperative GEMM below block level in " << k_.name;
            guard({s}, ind);
            if (!gemm_scratch_ && cuda_gemm_on_tensor_cores(operand(s->gemm->a_base).dtype, operand(s->gemm->b_base).dtype, o_)) {
                gemm_scratch_ = true;
                slots_.push_back({"rf_gemm_scratch", "unsigned char", make_int(kCudaGemmScratchBytes)});
            }
            *os_ << gpu_gemm(*s->gemm, operand(s->gemm->a_base), operand(s->gemm->b_base), operand(s->gemm->c_base),
                             [this](Expr e) { return int_expr(e); }, expr(s->gemm->alpha), o_, ind);
            pending_.clear();  // the GEMM ends with a barrier
            return;
        case StmtKind::CopyRow: {
            guard({s}, ind);
            std::vector<std::string> idx;
            for (Expr a : s->target->args) idx.push_back(int_expr(a));
            const Buffer *b = out_buffer(s->target->name);
            pad(ind) << "{ const int64_t n_ = " << int_expr(s->end) << "; for (int64_t q_ = " << lane_ << "; q_ < n_; q_ += " << W_ << ") { "
                     << buf_id(buf_index(b)) << "[" << offset(b, idx) << " + q_] = " << info(s->value->name).c << "["
                     << int_expr(s->value->args[0]) << " + q_]; } }\n";
            barrier(ind);
            return;
        }
        case StmtKind::For: break;
        default: RF_INTERNAL_ASSERT(false) << "GPU printer: statement is not cooperative";
        }
        std::string v = cname(s->var->name);
        if (s->loop == LoopKind::Simd && place_.simd_spreadable(s)) return spread_simd(s, v, ind);
        if (s->loop == LoopKind::Independent && place_.independent_spread(s)) return spread_independent(s, v, ind);
        // A loop every thread runs in step (its body has cooperative parts).
        pad(ind) << "{\n";
        pad(ind + 1) << "const int64_t b_" << v << " = " << int_expr(s->begin) << ", e_" << v << " = " << int_expr(s->end) << ";\n";
        note_reads(s->begin);
        note_reads(s->end);
        pad(ind + 1) << "for (int64_t " << v << " = b_" << v << "; " << v << " < e_" << v << "; ++" << v << ") {\n";
        auto saved = scope_;
        scope_[s->var->name] = {v, false, false, LocalClass::Index};
        uniform_list(s->body, ind + 2);
        // Reads at the end of an iteration against writes at the start of the next one.
        if (!pending_.empty()) barrier(ind + 2);
        scope_ = saved;
        pad(ind + 1) << "}\n";
        pad(ind) << "}\n";
    }

    /** A vector loop over the threads; each reduction into a scalar becomes a private partial
     *  combined by a tree (shared memory or warp shuffles) whose result every thread reads. */
    void spread_simd(const StmtP &s, const std::string &v, int ind) {
        guard({s}, ind);
        auto saved = scope_;
        std::vector<std::pair<ReduceOp, Expr>> reds;  // (op, target)
        std::map<std::string, std::string> partial;   // target local -> private partial
        pad(ind) << "{\n";
        for (const StmtP &c : s->body) {
            if (c->kind != StmtKind::Accum || partial.count(c->target->name)) continue;
            std::string p = "p" + std::to_string(reds.size()) + "_" + v;
            partial[c->target->name] = p;
            reds.push_back({c->op, c->target});
            pad(ind + 1) << "float " << p << " = " << identity(c->op) << ";\n";
        }
        pad(ind + 1) << "const int64_t b_" << v << " = " << int_expr(s->begin) << ", e_" << v << " = " << int_expr(s->end) << ";\n";
        for (const auto &[t, p] : partial) scope_[t] = {p, false, false, LocalClass::Tile};
        VectorPlan vp = plan_vector_loads(s, bufs_);
        if (vp.width) {
            vector_iterations(s, v, vp, ind + 1);
        } else {
            pad(ind + 1) << "for (int64_t " << v << " = b_" << v << " + " << lane_ << "; " << v << " < e_" << v << "; " << v << " += " << W_
                         << ") {\n";
            scope_[s->var->name] = {v, false, false, LocalClass::Index};
            for (const StmtP &c : s->body) private_stmt(c, ind + 2);
            pad(ind + 1) << "}\n";
        }
        scope_ = saved;
        for (size_t r = 0; r < reds.size(); r++) {
            auto [op, target] = reds[r];
            std::string t = lvalue(target), all = tree(op, "p" + std::to_string(r) + "_" + v, ind + 1);
            // A replicated target: every thread combines the same value into its copy.
            if (info(target->name).shared) pad(ind + 1) << "if (" << lane_ << " == 0) ";
            else pad(ind + 1);
            *os_ << t << " = " << combine(op, t, all) << ";\n";
            if (r + 1 < reds.size() && !warp_shuffles()) barrier(ind + 1);  // rf_red is reused
        }
        barrier(ind + 1);
        pad(ind) << "}\n";
    }

    /** The iterations of a spread vector loop in chunks of V consecutive ones per thread (chunk c
     *  at b + (lane + c·W)·V): when the chunk is whole (and, on CUDA, every contiguous operand's
     *  chunk is aligned) each operand is read with one vector load and the body runs V times on
     *  registers; else element by element. */
    void vector_iterations(const StmtP &s, const std::string &v, const VectorPlan &vp, int ind) {
        int V = vp.width;
        std::string c = "c_" + v, b = "b_" + v, e = "e_" + v;
        pad(ind) << "for (int64_t " << c << " = " << b << " + (int64_t)" << lane_ << " * " << V << "; " << c << " < " << e << "; " << c
                 << " += " << int64_t{W_} * V << ") {\n";
        // Operand addresses at the chunk's first iteration.
        scope_[s->var->name] = {c, false, false, LocalClass::Index};
        std::vector<std::string> address;
        std::string whole = c + " + " + std::to_string(V) + " <= " + e;
        for (const VectorLoad &l : vp.loads) {
            std::vector<std::string> idx;
            for (Expr a : l.load->args) idx.push_back(int_expr(a));
            address.push_back(buf_id(buf_index(l.buffer)) + "[" + offset(l.buffer, idx) + "]");
            whole += " && " + chunk_aligned_text(o_.dialect, l, V, address.back());
        }
        pad(ind + 1) << "if (" << whole << ") {\n";
        for (size_t k = 0; k < vp.loads.size(); k++) {
            std::string dest = "x" + std::to_string(k) + "_" + v;
            pad(ind + 2) << "float " << dest << "[" << V << "];\n";
            pad(ind + 2) << vector_load_text(o_.dialect, vp.loads[k], V, address[k], dest) << "\n";
            vector_operand_[vp.loads[k].load] = dest + "[u_]";
        }
        pad(ind + 2) << "for (int u_ = 0; u_ < " << V << "; ++u_) {\n";
        pad(ind + 3) << "const int64_t " << v << " = " << c << " + u_;\n";
        scope_[s->var->name] = {v, false, false, LocalClass::Index};
        for (const StmtP &st : s->body) private_stmt(st, ind + 3);
        vector_operand_.clear();
        pad(ind + 2) << "}\n";
        pad(ind + 1) << "} else {\n";
        pad(ind + 2) << "for (int64_t " << v << " = " << c << "; " << v << " < " << c << " + " << V << " && " << v << " < " << e << "; ++" << v
                     << ") {\n";
        for (const StmtP &st : s->body) private_stmt(st, ind + 3);
        pad(ind + 2) << "}\n";
        pad(ind + 1) << "}\n";
        pad(ind) << "}\n";
    }

    bool warp_shuffles() const { return o_.dialect == Dialect::Cuda && W_ == 32; }

    /** The combination under op of every thread's `value`, returned as an expression that every
     *  thread of the group can read until the next barrier (every thread passes every barrier). */
    std::string tree(ReduceOp op, const std::string &value, int ind) {
        std::string v = "v_" + value;
        if (warp_shuffles()) {
            // A butterfly of shuffles: every lane ends with the warp's value, no memory, no barrier.
            pad(ind) << "float " << v << " = " << value << ";\n";
            pad(ind) << "for (int o_ = 16; o_ > 0; o_ >>= 1) " << v << " = " << combine(op, v, "__shfl_xor_sync(0xffffffffu, " + v + ", o_)")
                     << ";\n";
            return v;
        }
        if (o_.dialect == Dialect::Cuda) {
            // Warp shuffles, then one value per warp through shared memory: two barriers instead of
            // log2(T) + 1. The combine is the same (NaN-propagating) one, so the result is that of
            // the tree up to the order of the partial sums.
            pad(ind) << "{\n";
            pad(ind + 1) << "float " << v << " = " << value << ";\n";
            pad(ind + 1) << "for (int o_ = 16; o_ > 0; o_ >>= 1) " << v << " = " << combine(op, v, "__shfl_xor_sync(0xffffffffu, " + v + ", o_)")
                         << ";\n";
            pad(ind + 1) << "if ((RF_LID & 31) == 0) rf_red[RF_LID >> 5] = " << v << ";\n";
            pad(ind + 1) << "RF_BARRIER();\n";
            pad(ind + 1) << "if (RF_LID < 32) {\n";
            pad(ind + 2) << "float w_ = RF_LID < " << T_ / 32 << " ? rf_red[RF_LID] : " << identity(op) << ";\n";
            pad(ind + 2) << "for (int o_ = 16; o_ > 0; o_ >>= 1) w_ = " << combine(op, "w_", "__shfl_xor_sync(0xffffffffu, w_, o_)") << ";\n";
            pad(ind + 2) << "if (RF_LID == 0) rf_red[0] = w_;\n";
            pad(ind + 1) << "}\n";
            pad(ind + 1) << "RF_BARRIER();\n";
            pad(ind) << "}\n";
            return "rf_red[0]";
        }
        pad(ind) << "rf_red[" << lane_ << "] = " << value << ";\n";
        pad(ind) << bar_ << "\n";
        pad(ind) << "for (int s_ = " << W_ / 2 << "; s_ > 0; s_ >>= 1) {\n";
        pad(ind + 1) << "if (" << lane_ << " < s_) rf_red[" << lane_ << "] = " << combine(op, "rf_red[" + lane_ + "]", "rf_red[" + lane_ + " + s_]")
                     << ";\n";
        pad(ind + 1) << bar_ << "\n";
        pad(ind) << "}\n";
        return "rf_red[0]";
    }

    /** Independent iterations (rows of a block x free state indices) spread over the threads. */
    void spread_independent(const StmtP &s, const std::string &v, int ind) {
        guard({s}, ind);
        StmtP in = place_.only_child_loop(s);
        int at = place_.row_reduction(in ? in->body : s->body);
        double rows = place_.estimate(make_sub(s->end, s->begin)) * (in ? std::max(1.0, place_.estimate(make_sub(in->end, in->begin))) : 1.0);
        int G = 1;
        while (G < 32 && 2 * G <= W_ && rows * 2 * G <= W_) G *= 2;
        if (at >= 0 && G >= 2) return grouped_rows(s, in, v, at, G, ind);
        auto saved = scope_;
        pad(ind) << "{\n";
        pad(ind + 1) << "const int64_t b_" << v << " = " << int_expr(s->begin) << ", n_" << v << " = " << int_expr(s->end) << " - b_" << v << ";\n";
        std::string total = "n_" + v, vin;
        if (in) {
            vin = cname(in->var->name);
            pad(ind + 1) << "const int64_t b_" << vin << " = " << int_expr(in->begin) << ", n_" << vin << " = " << int_expr(in->end) << " - b_"
                         << vin << ";\n";
            total += " * n_" + vin;
        }
        pad(ind + 1) << "for (int64_t f_" << v << " = " << lane_ << "; f_" << v << " < " << total << "; f_" << v << " += " << W_ << ") {\n";
        if (in) {
            pad(ind + 2) << "const int64_t " << v << " = b_" << v << " + f_" << v << " / n_" << vin << ";\n";
            pad(ind + 2) << "const int64_t " << vin << " = b_" << vin << " + f_" << v << " % n_" << vin << ";\n";
            scope_[s->var->name] = {v, false, false, LocalClass::Index};
            scope_[in->var->name] = {vin, false, false, LocalClass::Index};
            for (const StmtP &c : in->body) private_stmt(c, ind + 2);
        } else {
            pad(ind + 2) << "const int64_t " << v << " = b_" << v << " + f_" << v << ";\n";
            scope_[s->var->name] = {v, false, false, LocalClass::Index};
            for (const StmtP &c : s->body) private_stmt(c, ind + 2);
        }
        scope_ = saved;
        pad(ind + 1) << "}\n";
        barrier(ind + 1);
        pad(ind) << "}\n";
    }

    /** Row reductions with G threads per row (Placement::row_reduction): every thread runs the same
     *  number of rounds (threads past the last row repeat it without writing), so the reductions
     *  within each group of G (shuffles, or a tree in shared memory) see every thread. */
    void grouped_rows(const StmtP &s, const StmtP &in, const std::string &v, int at, int G, int ind) {
        auto saved = scope_;
        const std::vector<StmtP> &body = in ? in->body : s->body;
        const StmtP &loop = body[static_cast<size_t>(at)];
        std::string n = "n_" + v, t = "t_" + v, sub = "s_" + v, act = "a_" + v, f = "f_" + v, vin;
        pad(ind) << "{\n";
        pad(ind + 1) << "const int64_t b_" << v << " = " << int_expr(s->begin) << ", " << n << " = " << int_expr(s->end) << " - b_" << v << ";\n";
        std::string total = n;
        if (in) {
            vin = cname(in->var->name);
            pad(ind + 1) << "const int64_t b_" << vin << " = " << int_expr(in->begin) << ", n_" << vin << " = " << int_expr(in->end) << " - b_"
                         << vin << ";\n";
            total += " * n_" + vin;
        }
        pad(ind + 1) << "const int64_t " << t << " = " << total << ";\n";
        pad(ind + 1) << "const int " << sub << " = (int)(" << lane_ << " % " << G << ");\n";
        pad(ind + 1) << "for (int64_t r_" << v << " = 0; r_" << v << " < " << t << "; r_" << v << " += " << W_ / G << ") {\n";
        pad(ind + 2) << "const bool " << act << " = r_" << v << " + " << lane_ << " / " << G << " < " << t << ";\n";
        pad(ind + 2) << "const int64_t " << f << " = " << act << " ? r_" << v << " + " << lane_ << " / " << G << " : " << t << " - 1;\n";
        if (in) {
            pad(ind + 2) << "const int64_t " << v << " = b_" << v << " + " << f << " / n_" << vin << ";\n";
            pad(ind + 2) << "const int64_t " << vin << " = b_" << vin << " + " << f << " % n_" << vin << ";\n";
            scope_[in->var->name] = {vin, false, false, LocalClass::Index};
        } else {
            pad(ind + 2) << "const int64_t " << v << " = b_" << v << " + " << f << ";\n";
        }
        scope_[s->var->name] = {v, false, false, LocalClass::Index};
        std::string first = "if (" + act + " && " + sub + " == 0) ";
        for (int i = 0; i < at; i++) {
            const StmtP &c = body[static_cast<size_t>(i)];
            if (c->kind == StmtKind::Decl || c->kind == StmtKind::Comment) {
                private_stmt(c, ind + 2);
            } else {
                pad(ind + 2) << first << "{\n";
                private_stmt(c, ind + 3);
                pad(ind + 2) << "}\n";
            }
        }
        // The vector loop over the group, one partial per target.
        std::vector<std::pair<ReduceOp, std::string>> reds;  // (op, target C name)
        std::map<std::string, std::string> partial;
        for (const StmtP &c : loop->body) {
            if (partial.count(c->target->name)) continue;
            std::string p = "p" + std::to_string(reds.size()) + "_" + v;
            partial[c->target->name] = p;
            reds.push_back({c->op, lvalue(c->target)});
            pad(ind + 2) << "float " << p << " = " << identity(c->op) << ";\n";
        }
        std::string j = cname(loop->var->name);
        auto outer = scope_;
        pad(ind + 2) << "for (int64_t " << j << " = " << int_expr(loop->begin) << " + " << sub << "; " << j << " < " << int_expr(loop->end) << "; " << j
                     << " += " << G << ") {\n";
        scope_[loop->var->name] = {j, false, false, LocalClass::Index};
        for (const auto &[target, p] : partial) scope_[target] = {p, false, false, LocalClass::Tile};
        for (const StmtP &c : loop->body) private_stmt(c, ind + 3);
        scope_ = outer;
        pad(ind + 2) << "}\n";
        for (size_t r = 0; r < reds.size(); r++) {
            std::string p = "p" + std::to_string(r) + "_" + v;
            auto [op, target] = reds[r];
            if (o_.dialect == Dialect::Cuda) {
                pad(ind + 2) << "for (int o_ = " << G / 2 << "; o_ > 0; o_ >>= 1) " << p << " = "
                             << combine(op, p, "__shfl_xor_sync(0xffffffffu, " + p + ", o_)") << ";\n";
            } else {
                pad(ind + 2) << "rf_red[" << lane_ << "] = " << p << ";\n";
                pad(ind + 2) << bar_ << "\n";
                pad(ind + 2) << "for (int h_ = " << G / 2 << "; h_ > 0; h_ >>= 1) {\n";
                pad(ind + 3) << "if (" << sub << " < h_) rf_red[" << lane_ << "] = " << combine(op, "rf_red[" + lane_ + "]", "rf_red[" + lane_ + " + h_]")
                             << ";\n";
                pad(ind + 3) << bar_ << "\n";
                pad(ind + 2) << "}\n";
                pad(ind + 2) << p << " = rf_red[" << lane_ << " - " << sub << "];\n";
                pad(ind + 2) << bar_ << "\n";
            }
            pad(ind + 2) << target << " = " << combine(op, target, p) << ";\n";
        }
        pad(ind + 2) << first << "{\n";
        for (size_t i = static_cast<size_t>(at) + 1; i < body.size(); i++) private_stmt(body[i], ind + 3);
        pad(ind + 2) << "}\n";
        pad(ind + 1) << "}\n";
        scope_ = saved;
        barrier(ind + 1);
        pad(ind) << "}\n";
    }

    // ---- Private (one thread) context: the tile IR printed as sequential C.
    void private_list(const std::vector<StmtP> &list, int ind) {
        auto saved = scope_;
        for (const StmtP &s : list) private_stmt(s, ind);
        scope_ = saved;
    }

    void private_stmt(const StmtP &s, int ind) {
        switch (s->kind) {
        case StmtKind::Block: pad(ind) << "{\n"; private_list(s->body, ind + 1); pad(ind) << "}\n"; return;
        case StmtKind::Comment: pad(ind) << "// " << safe_comment(s->name) << "\n"; return;
        case StmtKind::For: {
            std::string v = cname(s->var->name);
            pad(ind) << "for (int64_t " << v << " = " << int_expr(s->begin) << "; " << v << " < " << int_expr(s->end) << "; ++" << v << ") {\n";
            auto saved = scope_;
            scope_[s->var->name] = {v, false, false, LocalClass::Index};
            private_list(s->body, ind + 1);
            scope_ = saved;
            pad(ind) << "}\n";
            return;
        }
        case StmtKind::If:
            pad(ind) << "if (" << expr(s->cond) << ") {\n";
            private_list(s->body, ind + 1);
            if (!s->else_body.empty()) {
                pad(ind) << "} else {\n";
                private_list(s->else_body, ind + 1);
            }
            pad(ind) << "}\n";
            return;
        case StmtKind::Decl: {
            auto it = scope_.find(s->name);
            bool shared_here = it != scope_.end() && it->second.shared && declared_shared_now(s);
            if (!shared_here) {
                std::string c = cname(s->name);
                std::string T = class_type(s->cls);
                int64_t n = 1, v;
                for (Expr d : s->dims) {
                    RF_INTERNAL_ASSERT(const_int(d, v)) << "GPU printer: private array " << s->name << " of run-time size";
                    n *= v;
                }
                // A one-element array (a row block of 1's state) is a scalar: its index is 0 in any
                // valid run, and a register the compiler cannot lose to a dynamic index.
                bool array = !s->dims.empty() && (n != 1 || addressed_.count(s->name));
                if (!array) pad(ind) << T << " " << c << " = " << (s->value ? cast_to(s->cls, s->value) : "0") << ";\n";
                else pad(ind) << T << " " << c << "[" << n << "];\n";
                scope_[s->name] = {c, false, array, s->cls};
                if (!array || !s->value) return;
            } else if (s->dims.empty()) {
                pad(ind) << info(s->name).c << "[0] = " << (s->value ? cast_to(s->cls, s->value) : "0") << ";\n";
                return;
            }
            if (!s->value) return;
            const LocalInfo &li = info(s->name);
            std::string n = "1";
            for (Expr e : s->dims) n += " * (int64_t)(" + int_expr(e) + ")";
            pad(ind) << "for (int64_t q_ = 0; q_ < " << n << "; ++q_) " << li.c << "[q_] = " << cast_to(li.cls, s->value) << ";\n";
            return;
        }
        case StmtKind::Assign:
            pad(ind) << lvalue(s->target) << " = " << cast_to(target_class(s->target), s->value) << ";\n";
            return;
        case StmtKind::Accum: {
            std::string t = lvalue(s->target);
            pad(ind) << t << " = " << combine(s->op, t, "(float)(" + expr(s->value) + ")") << ";\n";
            return;
        }
        case StmtKind::ArgSelect: {
            bool mx = s->op == ReduceOp::ArgMax || s->op == ReduceOp::Max;
            pad(ind) << "{ const float v_ = " << expr(s->value) << "; const float i_ = (float)(" << expr(s->index) << "); if (rf_better("
                     << (mx ? 1 : 0) << ", v_, i_, " << lvalue(s->target) << ", " << lvalue(s->target2) << ")) { " << lvalue(s->target)
                     << " = v_; " << lvalue(s->target2) << " = i_; } }\n";
            return;
        }
        case StmtKind::TopKInsert: return topk_insert(s, ind);
        case StmtKind::PolyShift: return poly_shift(s, ind);
        case StmtKind::Gemm: {
            GpuCodegenOptions serial = o_;
            serial.threads = 1;
            *os_ << gpu_gemm(*s->gemm, operand(s->gemm->a_base), operand(s->gemm->b_base), operand(s->gemm->c_base),
                             [this](Expr e) { return int_expr(e); }, expr(s->gemm->alpha), serial, ind);
            return;
        }
        case StmtKind::CopyRow: {
            std::vector<std::string> idx;
            for (Expr a : s->target->args) idx.push_back(int_expr(a));
            const Buffer *b = out_buffer(s->target->name);
            pad(ind) << "for (int64_t q_ = 0; q_ < " << int_expr(s->end) << "; ++q_) " << buf_id(buf_index(b)) << "[" << offset(b, idx)
                     << " + q_] = " << info(s->value->name).c << "[" << int_expr(s->value->args[0]) << " + q_];\n";
            return;
        }
        case StmtKind::Store: {
            pad(ind) << "{ const float v_ = " << expr(s->value) << ";";
            std::vector<std::string> idx;
            for (Expr a : s->target->args) idx.push_back(int_expr(a));
            for (const Buffer &b : m_.buffers) {
                if (b.name != s->target->name || b.role == Buffer::Role::Input) continue;
                std::string st = b.role == Buffer::Role::Temp ? "f32" : dtype_name(b.dtype);
                *os_ << " " << buf_id(buf_index(&b)) << "[" << offset(&b, idx) << "] = rf_store_" << st << "(v_);";
            }
            *os_ << " }\n";
            return;
        }
        }
    }

    /** A Decl printed in a solo group of a uniform list was given a shared slot by that list. */
    bool declared_shared_now(const StmtP &s) { return solo_decls_.count(s.get()) > 0; }

    void topk_insert(const StmtP &s, int ind) {
        TopKText t{info(s->name + "_v").c, info(s->name + "_i").c, info(s->name + "_n").c, int_expr(s->args[0]), int_expr(s->args2[0]),
                   int_expr(s->k), expr(s->value), int_expr(s->index)};
        *os_ << gpu_topk_insert(t, ind);
    }
    void poly_shift(const StmtP &s, int ind) {
        RF_INTERNAL_ASSERT(s->target->kind == Kind::Load) << "shift state is not an array element";
        std::vector<std::string> from, to;
        for (Expr e : s->args) from.push_back(expr(e));
        for (Expr e : s->args2) to.push_back(expr(e));
        *os_ << gpu_poly_shift(s->alphas, info(s->target->name).c, int_expr(s->target->args[0]), from, to, ind);
    }

    const Buffer *out_buffer(const std::string &name) {
        for (const Buffer &x : m_.buffers)
            if (x.name == name && x.role == Buffer::Role::Output) return &x;
        RF_INTERNAL_ASSERT(false) << "row copy to a non-output " << name;
        return nullptr;
    }

    /** A GEMM operand: its address and element type. */
    GemmOperand operand(Expr base) {
        GemmOperand op;
        std::vector<std::string> idx;
        for (Expr a : base->args) idx.push_back(int_expr(a));
        if (!base->name.empty() && base->name[0] == '$') {
            const LocalInfo &li = info(base->name);
            op.dtype = li.cls == LocalClass::Int8 ? DType::i8 : DType::f32;
            op.space = li.shared ? "RF_SHARED" : "";
            op.type = class_type(li.cls);
            op.address = "&" + li.c + "[" + idx[0] + "]";
            return op;
        }
        const Buffer *b = bufs_.at(base->name);
        op.dtype = b->role == Buffer::Role::Temp ? DType::f32 : b->dtype;
        op.space = "RF_GLOBAL";
        op.type = gpu_storage_type(*b);
        op.address = "&" + buf_id(buf_index(b)) + "[" + offset(b, idx) + "]";
        op.is_const = b->role == Buffer::Role::Input;
        return op;
    }

    const Module &m_;
    const Kernel &k_;
    StmtP loop_;
    std::string name_;
    const GpuCodegenOptions &o_;
    int T_;                           ///< threads of the work-group
    int W_;                           ///< threads of a group (one iteration): T_ at block level, 32 at warp level
    int warps_ = 1;                   ///< groups per work-group (CUDA warp level: T_ / 32)
    std::string lane_ = "RF_LID";     ///< the thread's index in its group
    std::string bar_ = "RF_BARRIER();";  ///< the group's barrier
    Placement place_;
    /** Shared locals and buffers that replicated statements read since the last barrier: a thread
     *  must not overwrite them until every thread has read them. */
    std::set<std::string> pending_;
    std::set<std::string> addressed_;
    std::map<Expr, std::string> vector_operand_;  ///< loads read by a vector load: the register holding the value
    std::ostringstream *os_ = nullptr;
    std::map<std::string, const Buffer *> bufs_;
    std::map<std::string, LocalInfo> scope_;
    std::set<std::string> used_;
    std::set<const Stmt *> solo_decls_;
    bool gemm_scratch_ = false;  ///< the tensor-core GEMM's staging buffer has a slot
    std::vector<SharedSlot> slots_;
};

/** The top-level parallel loops of a kernel body, in order. */
void launches_of(const StmtP &s, std::vector<StmtP> &out) {
    if (s->kind == StmtKind::For && s->loop == LoopKind::Parallel) {
        out.push_back(s);
        return;
    }
    if (s->kind == StmtKind::Comment) return;
    RF_INTERNAL_ASSERT(s->kind == StmtKind::Block) << "GPU printer: a kernel statement outside a parallel loop";
    for (const StmtP &c : s->body) launches_of(c, out);
}

}  // namespace

GpuModule generate_gpu(const Module &m, const GpuCodegenOptions &o) {
    RF_INTERNAL_ASSERT(o.threads >= 32 && o.threads <= 1024 && (o.threads & (o.threads - 1)) == 0)
        << "work-group size " << o.threads << " is not a power of two in [32, 1024]";
    GpuModule g;
    g.module = m;
    g.dialect = o.dialect;
    std::ostringstream os;
    os << "// Generated by redfuse. Do not edit.\n";
    os << gpu_runtime_header() << "\n";
    if (o.dialect == Dialect::Cuda && o.tensor_cores) os << cuda_gemm_header() << "\n";
    for (const Kernel &k : m.kernels) {
        std::vector<StmtP> loops;
        launches_of(k.body, loops);
        for (size_t i = 0; i < loops.size(); i++) {
            std::string name = k.name + (loops.size() > 1 ? "_" + std::to_string(i) : std::string());
            g.launches.push_back(GpuKernelPrinter(m, k, loops[i], name, o).print(os));
        }
    }
    g.source = os.str();
    return g;
}

}  // namespace rf
