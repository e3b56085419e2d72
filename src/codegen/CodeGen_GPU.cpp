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
#include "codegen/GpuMapping.h"
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
        : m_(m), k_(k), loop_(loop), name_(std::move(name)), o_(o), T_(o.threads) {
        for (const Buffer &b : m.buffers)
            if (!bufs_.count(b.name) || b.role == Buffer::Role::Temp) bufs_[b.name] = &b;
    }

    GpuLaunch print(std::ostringstream &out) {
        // The reduction scratch of distributed vector loops: T floats.
        slots_.push_back({"rf_red", "float", make_int(int64_t{T_} * 4)});
        std::ostringstream body;
        os_ = &body;
        Expr var = loop_->var;
        std::string v = cname(var->name);
        Expr iterations = make_sub(loop_->end, loop_->begin), groups = iterations;
        // Fusion level "thread": one iteration (a row, or a (row, segment) pair) per thread, its
        // running state private to the thread, no barriers; segments meet in the second launch
        // with the derived merge. Needs every array of the body to have a constant size.
        bool per_thread = private_arrays_ok(loop_) &&
                          (o_.fusion_level == "thread" ||
                           (o_.fusion_level == "auto" && o_.longest_axis <= 256 && estimate(iterations) >= 4.0 * T_));
        if (per_thread) {
            groups = make_idiv(make_add(iterations, make_int(T_ - 1)), make_int(T_));
            pad(1) << "const int64_t w_ = RF_GID * " << T_ << " + RF_LID;\n";
            pad(1) << "if (w_ >= " << int_expr(iterations) << ") return;\n";
            pad(1) << "const int64_t " << v << " = " << int_expr(loop_->begin) << " + w_;\n";
            scope_[var->name] = {v, false, false, LocalClass::Index};
            private_list(loop_->body, 1);
        } else {
            pad(1) << "const int64_t " << v << " = " << int_expr(loop_->begin) << " + RF_GID;\n";
            scope_[var->name] = {v, false, false, LocalClass::Index};
            uniform_list(loop_->body, 1);
        }

        bool cuda = o_.dialect == Dialect::Cuda;
        out << "// " << safe_comment(k_.what) << "\n";
        if (cuda) out << "extern \"C\" __global__ void __launch_bounds__(" << T_ << ") " << name_ << "(";
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
        // Slots one after the other, each a multiple of 16 bytes (sizes are run-time arguments).
        Expr offset = make_int(0);
        out << "    int64_t rf_off = 0;\n";
        for (const SharedSlot &s : slots_) {
            out << "    RF_SHARED " << s.type << " *" << s.c << " = (RF_SHARED " << s.type << " *)(rf_smem + rf_off); (void)" << s.c
                << "; rf_off += " << int_expr(s.bytes) << ";\n";
            offset = make_add(offset, s.bytes);
        }
        out << body.str() << "}\n\n";
        return {name_, groups, T_, offset};
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
            if (!l->name.empty() && l->name[0] == '$') return info(l->name).c + "[" + idx[0] + "]";
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
        if (t->kind == Kind::Var) return li.shared ? li.c + "[0]" : li.c;
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

    // ---- The mapping decisions.
    /** A simd loop whose iterations can be spread over the threads: its writes are array elements,
     *  global stores, and reductions into scalars declared outside (combined by a tree). */
    bool simd_spreadable(const StmtP &s) {
        if (s->loop != LoopKind::Simd) return false;
        std::set<std::string> inner;
        declared_in(s, inner);
        for (const StmtP &c : s->body) {
            if (c->kind == StmtKind::Accum && c->target->kind == Kind::Var) {
                if (inner.count(c->target->name)) return false;
                continue;
            }
            if (c->kind == StmtKind::Gemm || c->kind == StmtKind::TopKInsert || c->kind == StmtKind::PolyShift ||
                c->kind == StmtKind::ArgSelect || c->kind == StmtKind::Accum)
                return false;
            if (writes_outer_scalar(c, inner)) return false;
        }
        return private_arrays_ok(s);
    }
    /** Rough trip count at the bound sizes ($nbv: the row block; unknown locals: 1). */
    double estimate(Expr e) {
        Expr r = substitute(e, [&](Expr x) -> Expr {
            if (x->kind == Kind::Var && x->name == "$nbv") return make_int(k_.schedule.row_block);
            return nullptr;
        });
        EvalEnv env;
        env.var_value = [&](Expr v) -> double {
            auto it = o_.sizes.find(v->name);
            return it != o_.sizes.end() ? static_cast<double>(it->second) : 1.0;
        };
        env.load_value = [](Expr, const int64_t *) { return 1.0; };
        try {
            return Evaluator(env).eval(r);
        } catch (const std::exception &) {
            return 1;
        }
    }
    bool independent_spread(const StmtP &s) {
        if (s->loop != LoopKind::Independent) return false;
        std::set<std::string> inner;
        declared_in(s, inner);
        for (const StmtP &c : s->body)
            if (writes_outer_scalar(c, inner)) return false;
        if (!private_arrays_ok(s)) return false;
        bool inner_coop = false;
        for (const StmtP &c : s->body) inner_coop = inner_coop || coop(c);
        // More than one independent iteration: one per thread, with serial (private) vector loops.
        // Cheaper than running them in step with a tree per iteration (and far fewer barriers,
        // which PoCL's work-group compiler pays for dearly inside loops); a single row (row
        // block 1) keeps its vector loops spread over the threads instead.
        return !inner_coop || estimate(make_sub(s->end, s->begin)) * inner_extent(s) >= 2;
    }
    /** The extent of a directly nested independent loop (flattened with its parent), else 1. */
    double inner_extent(const StmtP &s) {
        const StmtP in = only_child_loop(s);
        return in ? std::max(1.0, estimate(make_sub(in->end, in->begin))) : 1;  // tile bounds are locals: unknown
    }
    /** The single loop that is s's whole body (comments aside) and whose iterations are independent
     *  too (an independent loop, or a vector loop without reductions: element-wise maps and stores),
     *  if its bounds do not depend on s's variable; the two are then spread as one flat range (rows
     *  x columns over all threads). */
    StmtP only_child_loop(const StmtP &s) {
        StmtP found;
        for (const StmtP &c : s->body) {
            if (c->kind == StmtKind::Comment) continue;
            if (found || c->kind != StmtKind::For) return nullptr;
            bool elementwise = c->loop == LoopKind::Simd;
            for (const StmtP &b : c->body)
                elementwise = elementwise && b->kind != StmtKind::Accum && b->kind != StmtKind::For && b->kind != StmtKind::Gemm;
            if (c->loop != LoopKind::Independent && !elementwise) return nullptr;
            found = c;
        }
        if (!found) return nullptr;
        bool uses = false;
        auto mark = [&](Expr e) {
            substitute(e, [&](Expr x) -> Expr {
                if (x == s->var) uses = true;
                return nullptr;
            });
        };
        mark(found->begin);
        mark(found->end);
        return uses ? nullptr : found;
    }
    /** True when s needs every thread (spread loops, tree reductions, GEMMs, shared array inits). */
    bool coop(const StmtP &s) {
        switch (s->kind) {
        case StmtKind::For:
            RF_INTERNAL_ASSERT(s->loop != LoopKind::Parallel) << "GPU printer: nested parallel loop in " << k_.name;
            if (s->loop == LoopKind::Simd && simd_spreadable(s)) return true;
            if (s->loop == LoopKind::Independent && independent_spread(s)) return true;
            [[fallthrough]];
        case StmtKind::If: case StmtKind::Block:
            for (const StmtP &c : s->body)
                if (coop(c)) return true;
            for (const StmtP &c : s->else_body)
                if (coop(c)) return true;
            return false;
        case StmtKind::Gemm: case StmtKind::CopyRow: return true;
        case StmtKind::Decl: return !s->dims.empty() && s->value != nullptr;
        default: return false;
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

    void uniform_list(const std::vector<StmtP> &list, int ind) {
        auto saved = scope_;
        std::vector<StmtP> solo;
        auto flush = [&]() {
            if (solo.empty()) return;
            bool only_comments = true;
            for (const StmtP &s : solo) only_comments = only_comments && s->kind == StmtKind::Comment;
            if (only_comments) {
                for (const StmtP &s : solo) private_stmt(s, ind);
            } else {
                pad(ind) << "if (RF_LID == 0) {\n";
                for (const StmtP &s : solo) private_stmt(s, ind + 1);
                pad(ind) << "}\n";
                pad(ind) << "RF_BARRIER();\n";
            }
            solo.clear();
        };
        for (const StmtP &s : list) {
            if (s->kind == StmtKind::Decl) declare_shared(s);
            if (!coop(s)) {
                solo.push_back(s);
                continue;
            }
            flush();
            coop_stmt(s, ind);
        }
        flush();
        scope_ = saved;
    }

    void coop_stmt(const StmtP &s, int ind) {
        switch (s->kind) {
        case StmtKind::Block: uniform_list(s->body, ind); return;
        case StmtKind::If:
            pad(ind) << "{\n";
            pad(ind + 1) << "const bool c_ = " << expr(s->cond) << ";\n";
            pad(ind + 1) << "RF_BARRIER();\n";
            pad(ind + 1) << "if (c_) {\n";
            uniform_list(s->body, ind + 2);
            if (!s->else_body.empty()) {
                pad(ind + 1) << "} else {\n";
                uniform_list(s->else_body, ind + 2);
            }
            pad(ind + 1) << "}\n";
            pad(ind) << "}\n";
            return;
        case StmtKind::Decl: {
            const LocalInfo &li = info(s->name);
            std::string n = "1";
            for (Expr e : s->dims) n += " * (int64_t)(" + int_expr(e) + ")";
            // Bounds in a constant and a braced body: PoCL 3.1 skipped this loop when its bound was
            // written inline after a barrier inside an outer loop (found with printf; see docs/gpu.md).
            pad(ind) << "{ const int64_t n_ = " << n << "; for (int64_t q_ = RF_LID; q_ < n_; q_ += " << T_ << ") { " << li.c
                     << "[q_] = " << cast_to(li.cls, s->value) << "; } }\n";
            pad(ind) << "RF_BARRIER();\n";
            return;
        }
        case StmtKind::Gemm:
            if (!gemm_scratch_ && cuda_gemm_on_tensor_cores(operand(s->gemm->a_base).dtype, operand(s->gemm->b_base).dtype, o_)) {
                gemm_scratch_ = true;
                slots_.push_back({"rf_gemm_scratch", "unsigned char", make_int(kCudaGemmScratchBytes)});
            }
            *os_ << gpu_gemm(*s->gemm, operand(s->gemm->a_base), operand(s->gemm->b_base), operand(s->gemm->c_base),
                             [this](Expr e) { return int_expr(e); }, expr(s->gemm->alpha), o_, ind);
            return;
        case StmtKind::CopyRow: {
            std::vector<std::string> idx;
            for (Expr a : s->target->args) idx.push_back(int_expr(a));
            const Buffer *b = out_buffer(s->target->name);
            pad(ind) << "{ const int64_t n_ = " << int_expr(s->end) << "; for (int64_t q_ = RF_LID; q_ < n_; q_ += " << T_ << ") { "
                     << buf_id(buf_index(b)) << "[" << offset(b, idx) << " + q_] = " << info(s->value->name).c << "["
                     << int_expr(s->value->args[0]) << " + q_]; } }\n";
            pad(ind) << "RF_BARRIER();\n";
            return;
        }
        case StmtKind::For: break;
        default: RF_INTERNAL_ASSERT(false) << "GPU printer: statement is not cooperative";
        }
        std::string v = cname(s->var->name);
        if (s->loop == LoopKind::Simd && simd_spreadable(s)) return spread_simd(s, v, ind);
        if (s->loop == LoopKind::Independent && independent_spread(s)) return spread_independent(s, v, ind);
        // A loop every thread runs in step (its body has cooperative parts).
        pad(ind) << "{\n";
        pad(ind + 1) << "const int64_t b_" << v << " = " << int_expr(s->begin) << ", e_" << v << " = " << int_expr(s->end) << ";\n";
        pad(ind + 1) << "RF_BARRIER();\n";
        pad(ind + 1) << "for (int64_t " << v << " = b_" << v << "; " << v << " < e_" << v << "; ++" << v << ") {\n";
        auto saved = scope_;
        scope_[s->var->name] = {v, false, false, LocalClass::Index};
        uniform_list(s->body, ind + 2);
        scope_ = saved;
        pad(ind + 1) << "}\n";
        pad(ind) << "}\n";
    }

    /** A vector loop over the threads; each reduction into a scalar becomes a private partial
     *  combined by a tree in shared memory (PoCL has no sub-group functions). */
    void spread_simd(const StmtP &s, const std::string &v, int ind) {
        auto saved = scope_;
        std::vector<std::pair<ReduceOp, std::string>> reds;  // (op, target lvalue)
        std::map<std::string, std::string> partial;             // target local -> private partial
        pad(ind) << "{\n";
        for (const StmtP &c : s->body) {
            if (c->kind != StmtKind::Accum || partial.count(c->target->name)) continue;
            std::string p = "p" + std::to_string(reds.size()) + "_" + v;
            partial[c->target->name] = p;
            reds.push_back({c->op, lvalue(c->target)});
            pad(ind + 1) << "float " << p << " = " << identity(c->op) << ";\n";
        }
        pad(ind + 1) << "const int64_t b_" << v << " = " << int_expr(s->begin) << ", e_" << v << " = " << int_expr(s->end) << ";\n";
        pad(ind + 1) << "for (int64_t " << v << " = b_" << v << " + RF_LID; " << v << " < e_" << v << "; " << v << " += " << T_ << ") {\n";
        scope_[s->var->name] = {v, false, false, LocalClass::Index};
        for (const auto &[t, p] : partial) scope_[t] = {p, false, false, LocalClass::Tile};
        for (const StmtP &c : s->body) private_stmt(c, ind + 2);
        scope_ = saved;
        pad(ind + 1) << "}\n";
        for (size_t r = 0; r < reds.size(); r++) {
            std::string p = "p" + std::to_string(r) + "_" + v;
            tree(reds[r].first, p, ind + 1);
            pad(ind + 1) << "if (RF_LID == 0) " << reds[r].second << " = " << combine(reds[r].first, reds[r].second, "rf_red[0]") << ";\n";
        }
        pad(ind + 1) << "RF_BARRIER();\n";
        pad(ind) << "}\n";
    }

    /** rf_red[0] = op over the threads' `value`s (a tree; every thread passes every barrier). */
    void tree(ReduceOp op, const std::string &value, int ind) {
        if (o_.dialect == Dialect::Cuda) {
            // Warp shuffles, then one value per warp through shared memory: two barriers instead of
            // log2(T) + 1. The combine is the same (NaN-propagating) one, so the result is that of
            // the tree up to the order of the partial sums.
            std::string v = "v_", w = "w_";
            pad(ind) << "{\n";
            pad(ind + 1) << "float " << v << " = " << value << ";\n";
            pad(ind + 1) << "for (int o_ = 16; o_ > 0; o_ >>= 1) " << v << " = " << combine(op, v, "__shfl_xor_sync(0xffffffffu, " + v + ", o_)")
                         << ";\n";
            pad(ind + 1) << "if ((RF_LID & 31) == 0) rf_red[RF_LID >> 5] = " << v << ";\n";
            pad(ind + 1) << "RF_BARRIER();\n";
            pad(ind + 1) << "if (RF_LID < 32) {\n";
            pad(ind + 2) << "float " << w << " = RF_LID < " << T_ / 32 << " ? rf_red[RF_LID] : " << identity(op) << ";\n";
            pad(ind + 2) << "for (int o_ = 16; o_ > 0; o_ >>= 1) " << w << " = " << combine(op, w, "__shfl_xor_sync(0xffffffffu, " + w + ", o_)")
                         << ";\n";
            pad(ind + 2) << "if (RF_LID == 0) rf_red[0] = " << w << ";\n";
            pad(ind + 1) << "}\n";
            pad(ind + 1) << "RF_BARRIER();\n";
            pad(ind) << "}\n";
            return;
        }
        pad(ind) << "rf_red[RF_LID] = " << value << ";\n";
        pad(ind) << "RF_BARRIER();\n";
        pad(ind) << "for (int s_ = " << T_ / 2 << "; s_ > 0; s_ >>= 1) {\n";
        pad(ind + 1) << "if (RF_LID < s_) rf_red[RF_LID] = " << combine(op, "rf_red[RF_LID]", "rf_red[RF_LID + s_]") << ";\n";
        pad(ind + 1) << "RF_BARRIER();\n";
        pad(ind) << "}\n";
    }

    /** Independent iterations (rows of a block x free state indices) spread over the threads. */
    void spread_independent(const StmtP &s, const std::string &v, int ind) {
        auto saved = scope_;
        StmtP in = only_child_loop(s);
        pad(ind) << "{\n";
        pad(ind + 1) << "const int64_t b_" << v << " = " << int_expr(s->begin) << ", n_" << v << " = " << int_expr(s->end) << " - b_" << v << ";\n";
        std::string total = "n_" + v, vin;
        if (in) {
            vin = cname(in->var->name);
            pad(ind + 1) << "const int64_t b_" << vin << " = " << int_expr(in->begin) << ", n_" << vin << " = " << int_expr(in->end) << " - b_"
                         << vin << ";\n";
            total += " * n_" + vin;
        }
        pad(ind + 1) << "for (int64_t f_" << v << " = RF_LID; f_" << v << " < " << total << "; f_" << v << " += " << T_ << ") {\n";
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
        pad(ind + 1) << "RF_BARRIER();\n";
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
                if (s->dims.empty()) {
                    pad(ind) << T << " " << c << " = " << (s->value ? cast_to(s->cls, s->value) : "0") << ";\n";
                } else {
                    int64_t n = 1, v;
                    for (Expr d : s->dims) {
                        RF_INTERNAL_ASSERT(const_int(d, v)) << "GPU printer: private array " << s->name << " of run-time size";
                        n *= v;
                    }
                    pad(ind) << T << " " << c << "[" << n << "];\n";
                }
                scope_[s->name] = {c, false, !s->dims.empty(), s->cls};
                if (s->dims.empty() || !s->value) return;
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

    /** Sorted insertion into a top-k list (the values of rfk::topk_insert), printed inline because
     *  OpenCL 1.2 cannot pass a pointer of unknown address space to a helper. */
    void topk_insert(const StmtP &s, int ind) {
        std::string V = info(s->name + "_v").c, I = info(s->name + "_i").c, N = info(s->name + "_n").c;
        std::string o = int_expr(s->args[0]), cnt = int_expr(s->args2[0]);
        pad(ind) << "{ const int64_t o_ = " << o << ", k_ = " << int_expr(s->k) << "; const int64_t len_ = (int64_t)" << N << "[" << cnt
                 << "]; const float val_ = " << expr(s->value) << ", idx_ = (float)(" << int_expr(s->index) << ");\n";
        pad(ind + 1) << "if (!(len_ == k_ && !rf_better(1, val_, idx_, " << V << "[o_ + k_ - 1], " << I << "[o_ + k_ - 1]))) {\n";
        pad(ind + 2) << "int64_t pos_ = len_ < k_ ? len_ : k_ - 1;\n";
        pad(ind + 2) << "while (pos_ > 0 && rf_better(1, val_, idx_, " << V << "[o_ + pos_ - 1], " << I << "[o_ + pos_ - 1])) { " << V
                     << "[o_ + pos_] = " << V << "[o_ + pos_ - 1]; " << I << "[o_ + pos_] = " << I << "[o_ + pos_ - 1]; pos_--; }\n";
        pad(ind + 2) << V << "[o_ + pos_] = val_; " << I << "[o_ + pos_] = idx_;\n";
        pad(ind + 2) << "if (len_ < k_) " << N << "[" << cnt << "] = (float)(len_ + 1);\n";
        pad(ind + 1) << "}\n";
        pad(ind) << "}\n";
    }

    /** The shift-form state moved from reference `args` to `args2`, unrolled at generation time:
     *  S_b(c') = Σ_{a ≥ b} Π_i C(a_i, b_i) (c'_i − c_i)^(a_i − b_i) S_a(c) (brief §1.1 form 4). */
    void poly_shift(const StmtP &s, int ind) {
        const auto &al = s->alphas;
        size_t nd = s->args.size();
        RF_INTERNAL_ASSERT(s->target->kind == Kind::Load) << "shift state is not an array element";
        std::string base = info(s->target->name).c, at = int_expr(s->target->args[0]);
        pad(ind) << "{\n";
        std::string same = "true";
        for (size_t i = 0; i < nd; i++) {
            pad(ind + 1) << "const float f" << i << "_ = " << expr(s->args[i]) << ", t" << i << "_ = " << expr(s->args2[i]) << ";\n";
            same += " && f" + std::to_string(i) + "_ == t" + std::to_string(i) + "_";
        }
        pad(ind + 1) << "if (!(" << same << ")) {\n";
        for (size_t i = 0; i < nd; i++) pad(ind + 2) << "const float d" << i << "_ = t" << i << "_ - f" << i << "_;\n";
        for (size_t a = 0; a < al.size(); a++) pad(ind + 2) << "const float s" << a << "_ = " << base << "[" << at << " + " << a << "];\n";
        static const int binom[5][5] = {{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 2, 1, 0, 0}, {1, 3, 3, 1, 0}, {1, 4, 6, 4, 1}};
        for (size_t b = 0; b < al.size(); b++) {
            std::string sum;
            for (size_t a = 0; a < al.size(); a++) {
                std::string term;
                int coef = 1;
                bool ok = true;
                for (size_t i = 0; i < nd && ok; i++) {
                    int hi = al[a][i], lo = al[b][i];
                    if (hi < lo || hi > 4) { ok = hi >= lo && false; break; }
                    coef *= binom[hi][lo];
                    for (int p = 0; p < hi - lo; p++) term += " * d" + std::to_string(i) + "_";
                }
                if (!ok) continue;
                sum += (sum.empty() ? "" : " + ") + std::to_string(coef) + ".0f" + term + " * s" + std::to_string(a) + "_";
            }
            pad(ind + 2) << base << "[" << at << " + " << b << "] = " << (sum.empty() ? "0.0f" : sum) << ";\n";
        }
        pad(ind + 1) << "}\n";
        pad(ind) << "}\n";
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
    int T_;
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
