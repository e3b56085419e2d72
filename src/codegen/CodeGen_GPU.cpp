/** \file CodeGen_GPU.cpp
 * The tile IR → OpenCL C / CUDA printer (the mapping is described in CodeGen_GPU.h and docs/gpu.md):
 * the launch, group-level statements (cooperative, replicated or on one thread) and private
 * statements. Spread loops and their reductions are in GpuSpread.cpp.
 */
#include "codegen/CodeGen_GPU.h"

#include <algorithm>
#include <functional>

#include "codegen/GpuInlineOps.h"
#include "codegen/GpuKernelPrinter.h"
#include "ir/Eval.h"
#include "support/Error.h"
#include "tile/StmtVisitor.h"

namespace rf {

extern const char *const kEmbeddedGpuHeader;  // generated from src/runtime/kernels/redfuse_gpu.h

const std::string &gpu_runtime_header() {
    static const std::string text = kEmbeddedGpuHeader;
    return text;
}

namespace gpu_printer {

namespace {
/** A row copy's element for output b: a float as it is into an f32 output, rounded into a bf16 one. */
std::string rounded(const Buffer *b, const std::string &v) {
    return b->dtype == DType::f32 ? v : "rf_store_" + std::string(dtype_name(b->dtype)) + "(" + v + ")";
}
}  // namespace

GpuLaunch GpuKernelPrinter::print(std::ostringstream &out) {
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
                      (o_.fusion_level == FusionLevel::Thread ||
                       (o_.fusion_level == FusionLevel::Auto && o_.longest_axis <= 256 && place_.estimate(iterations) >= 4.0 * T_));
    // Fusion level "warp": one iteration per warp of 32 threads, the block level's mapping with
    // the warp as the group (warp barriers, shuffle reductions whose result every lane holds).
    // Not with a cooperative GEMM (the block GEMM needs the whole work-group). OpenCL 1.2 has
    // no sub-groups: there the warp is a work-group of 32.
    bool warp = !per_thread && !access_of(loop_).gemm &&
                (o_.fusion_level == FusionLevel::Warp || (o_.fusion_level == FusionLevel::Auto && cuda && o_.longest_axis <= 8192 &&
                                               place_.estimate(iterations) >= 1024));
    if (per_thread) {
        groups = make_idiv(make_add(iterations, make_int(T_ - 1)), make_int(T_));
        pad(1) << "const int64_t w_ = RF_GID * " << T_ << " + RF_LID;\n";
        pad(1) << "if (w_ >= " << int_expr(iterations) << ") return;\n";
        pad(1) << "const int64_t " << v << " = " << int_expr(loop_->begin) << " + w_;\n";
        scope_[var->name] = {v, false, false, LocalClass::Index};
        print_list(loop_->body, 1);
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
    // states per thread take the registers they need (up to 255). A running state of more than
    // 48 replicated locals (two exponential-polynomial states next to two softmaxes: the
    // symmetric KL, 56) does not fit next to a tile's values in 64 registers (it spilled at the
    // warp level): 512 resident threads, at most 128 registers each.
    const int resident = place_.replicated_count() > 48 ? 512 : 1024;
    int min_blocks = per_thread || access_of(loop_).gemm ? 1 : std::max(1, resident / T_);
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

std::string GpuKernelPrinter::cname(const std::string &local) {
    std::string base = c_identifier(local.substr(1), "l_"), n = base;
    for (int i = 2; used_.count(n); i++) n = base + "_" + std::to_string(i);
    used_.insert(n);
    return n;
}

const LocalInfo &GpuKernelPrinter::info(const std::string &name) {
    auto it = scope_.find(name);
    RF_INTERNAL_ASSERT(it != scope_.end()) << "GPU printer: unknown local " << name << " in " << k_.name;
    return it->second;
}

CEmitContext GpuKernelPrinter::ctx() {
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

std::string GpuKernelPrinter::lvalue(Expr t) {
    const LocalInfo &li = info(t->name);
    if (t->kind == Kind::Var || !li.array) return li.shared ? li.c + "[0]" : li.c;
    return li.c + "[" + int_expr(t->args[0]) + "]";
}

std::string GpuKernelPrinter::cast_to(LocalClass c, Expr v) {
    if (c == LocalClass::Index) return "(int64_t)(" + expr(v) + ")";
    if (c == LocalClass::Int8) return "(int8_t)(" + expr(v) + ")";
    return "(float)(" + expr(v) + ")";
}

std::string GpuKernelPrinter::combine(ReduceOp op, const std::string &a, const std::string &b) {
    switch (op) {
    case ReduceOp::Sum: return a + " + " + b;
    case ReduceOp::Prod: return a + " * " + b;
    case ReduceOp::Max: return "rf_max(" + a + ", " + b + ")";
    default: return "rf_min(" + a + ", " + b + ")";
    }
}

std::string GpuKernelPrinter::identity(ReduceOp op) {
    switch (op) {
    case ReduceOp::Sum: return "0.0f";
    case ReduceOp::Prod: return "1.0f";
    case ReduceOp::Max: return "(-RF_INF)";
    default: return "RF_INF";
    }
}

/** Declares the locals of `list`'s direct Decls as shared slots. */
void GpuKernelPrinter::declare_shared(const StmtP &d) {
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
void GpuKernelPrinter::uniform_list(const std::vector<StmtP> &list, int ind) {
    auto saved = scope_;
    std::vector<StmtP> solo;
    auto flush = [&]() {
        if (solo.empty()) return;
        guard(solo, ind);
        pad(ind) << "if (" << lane_ << " == 0) {\n";
        for (const StmtP &s : solo) print_stmt(s, ind + 1);
        pad(ind) << "}\n";
        barrier(ind);
        solo.clear();
    };
    // A shared array's initialisation (spread over the threads); consecutive ones share a barrier
    // when the next does not read the one before.
    auto shared_init = [&](const StmtP &s) { return s->kind == StmtKind::Decl && !s->dims.empty() && s->value && !place_.replicated(s->name); };
    for (size_t i = 0; i < list.size(); i++) {
        const StmtP &s = list[i];
        if (s->kind == StmtKind::Decl && !place_.replicated(s->name)) {
            declare_shared(s);
            if (!s->dims.empty() && !s->value) continue;  // a shared array without a value: nothing to run
        }
        if (place_.coop(s)) {
            flush();
            next_init_independent_ = shared_init(s) && i + 1 < list.size() && shared_init(list[i + 1]) &&
                                     !access_of(list[i + 1]).reads.count(s->name);
            coop_stmt(s, ind);
            next_init_independent_ = false;
        } else if (s->kind == StmtKind::Comment || place_.replicable(s)) {
            flush();
            for (const std::string &r : access_of(s).reads)
                if (in_memory(r)) pending_.insert(r);
            // A running state's copies are RF_STATE (volatile in OpenCL: see redfuse_gpu.h).
            state_decl_ = s->kind == StmtKind::Decl && s->cls == LocalClass::State;
            print_stmt(s, ind);
            state_decl_ = false;
        } else {
            solo.push_back(s);
        }
    }
    flush();
    scope_ = saved;
}

/** True for a shared local or a buffer other threads may write (what a read must be guarded for). */
bool GpuKernelPrinter::in_memory(const std::string &name) {
    auto it = scope_.find(name);
    if (it != scope_.end()) return it->second.shared;
    auto b = bufs_.find(name);
    return b != bufs_.end() && b->second->role != Buffer::Role::Input;
}

/** Locals the printer addresses as arrays whatever their size (top-k lists, shift states,
 *  row copies, GEMM operands). */
void GpuKernelPrinter::addressed(const StmtP &root) {
    for_each_stmt(root, [&](const StmtP &s) {
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
    });
}

/** Every thread reads e (a condition, loop bounds) into a private value. */
void GpuKernelPrinter::note_reads(Expr e) {
    std::set<std::string> names;
    visit(e, [&](Expr x) {
        if (x->kind == Kind::Load || x->kind == Kind::Var) names.insert(x->name);
    });
    for (const std::string &r : names)
        if (in_memory(r)) pending_.insert(r);
}

/** A barrier before `list` when it writes what replicated statements read since the last one. */
void GpuKernelPrinter::guard(const std::vector<StmtP> &list, int ind) {
    for (const StmtP &s : list)
        for (const std::string &w : access_of(s).writes)
            if (pending_.count(w)) return barrier(ind);
}

void GpuKernelPrinter::coop_stmt(const StmtP &s, int ind) {
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
        if (!next_init_independent_) barrier(ind);
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
        RF_INTERNAL_ASSERT(!s->scale) << "GPU printer: scaled row copies are made for the CPU only";
        guard({s}, ind);
        std::vector<std::string> idx;
        for (Expr a : s->target->args) idx.push_back(int_expr(a));
        const Buffer *b = out_buffer(s->target->name);
        pad(ind) << "{ const int64_t n_ = " << int_expr(s->end) << "; for (int64_t q_ = " << lane_ << "; q_ < n_; q_ += " << W_ << ") { "
                 << buf_id(buf_index(b)) << "[" << offset(b, idx) << " + q_] = "
                 << rounded(b, info(s->value->name).c + "[" + int_expr(s->value->args[0]) + " + q_]") << "; } }\n";
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

void GpuKernelPrinter::print_list(const std::vector<StmtP> &list, int ind) {
    auto saved = scope_;
    for (const StmtP &s : list) print_stmt(s, ind);
    scope_ = saved;
}

void GpuKernelPrinter::print_block(const StmtP &s, int ind) {
    pad(ind) << "{\n";
    print_list(s->body, ind + 1);
    pad(ind) << "}\n";
}

void GpuKernelPrinter::print_for(const StmtP &s, int ind) {
    std::string v = cname(s->var->name);
    pad(ind) << "for (int64_t " << v << " = " << int_expr(s->begin) << "; " << v << " < " << int_expr(s->end) << "; ++" << v << ") {\n";
    auto saved = scope_;
    scope_[s->var->name] = {v, false, false, LocalClass::Index};
    print_list(s->body, ind + 1);
    scope_ = saved;
    pad(ind) << "}\n";
}

void GpuKernelPrinter::print_decl(const StmtP &s, int ind) {
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
        if (state_decl_) T = "RF_STATE " + T;
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
}

void GpuKernelPrinter::print_assign(const StmtP &s, int ind) {
    pad(ind) << lvalue(s->target) << " = " << cast_to(target_class(s->target), s->value) << ";\n";
}

void GpuKernelPrinter::print_accum(const StmtP &s, int ind) {
    std::string t = lvalue(s->target);
    pad(ind) << t << " = " << combine(s->op, t, "(float)(" + expr(s->value) + ")") << ";\n";
}

void GpuKernelPrinter::print_arg_select(const StmtP &s, int ind) {
    bool mx = s->op == ReduceOp::ArgMax || s->op == ReduceOp::Max;
    pad(ind) << "{ const float v_ = " << expr(s->value) << "; const float i_ = (float)(" << expr(s->index) << "); if (rf_better("
             << (mx ? 1 : 0) << ", v_, i_, " << lvalue(s->target) << ", " << lvalue(s->target2) << ")) { " << lvalue(s->target)
             << " = v_; " << lvalue(s->target2) << " = i_; } }\n";
}

void GpuKernelPrinter::print_gemm(const StmtP &s, int ind) {
    GpuCodegenOptions serial = o_;
    serial.threads = 1;
    *os_ << gpu_gemm(*s->gemm, operand(s->gemm->a_base), operand(s->gemm->b_base), operand(s->gemm->c_base),
                     [this](Expr e) { return int_expr(e); }, expr(s->gemm->alpha), serial, ind);
}

void GpuKernelPrinter::print_copy_row(const StmtP &s, int ind) {
    std::vector<std::string> idx;
    for (Expr a : s->target->args) idx.push_back(int_expr(a));
    const Buffer *b = out_buffer(s->target->name);
    pad(ind) << "for (int64_t q_ = 0; q_ < " << int_expr(s->end) << "; ++q_) " << buf_id(buf_index(b)) << "[" << offset(b, idx)
             << " + q_] = " << rounded(b, info(s->value->name).c + "[" + int_expr(s->value->args[0]) + " + q_]") << ";\n";
}

void GpuKernelPrinter::print_store(const StmtP &s, int ind) {
    pad(ind) << "{ const float v_ = " << expr(s->value) << ";";
    std::vector<std::string> idx;
    for (Expr a : s->target->args) idx.push_back(int_expr(a));
    for (const Buffer &b : m_.buffers) {
        if (b.name != s->target->name || b.role == Buffer::Role::Input) continue;
        std::string st = b.role == Buffer::Role::Temp ? "f32" : dtype_name(b.dtype);
        *os_ << " " << buf_id(buf_index(&b)) << "[" << offset(&b, idx) << "] = rf_store_" << st << "(v_);";
    }
    *os_ << " }\n";
}

void GpuKernelPrinter::print_topk_insert(const StmtP &s, int ind) {
    TopKText t{info(s->name + "_v").c, info(s->name + "_i").c, info(s->name + "_n").c, int_expr(s->args[0]), int_expr(s->args2[0]),
               int_expr(s->k), expr(s->value), int_expr(s->index)};
    *os_ << gpu_topk_insert(t, ind);
}

void GpuKernelPrinter::print_poly_shift(const StmtP &s, int ind) {
    RF_INTERNAL_ASSERT(s->target->kind == Kind::Load) << "shift state is not an array element";
    std::vector<std::string> from, to;
    for (Expr e : s->args) from.push_back(expr(e));
    for (Expr e : s->args2) to.push_back(expr(e));
    *os_ << gpu_poly_shift(s->alphas, info(s->target->name).c, int_expr(s->target->args[0]), from, to, ind);
}

const Buffer *GpuKernelPrinter::out_buffer(const std::string &name) {
    for (const Buffer &x : m_.buffers)
        if (x.name == name && x.role == Buffer::Role::Output) return &x;
    RF_INTERNAL_ASSERT(false) << "row copy to a non-output " << name;
    return nullptr;
}

/** A GEMM operand: its address and element type. */
GemmOperand GpuKernelPrinter::operand(Expr base) {
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

}  // namespace gpu_printer

namespace {

using namespace tile;

/** The top-level parallel loops of a kernel body, in order. */
void launches_of(const StmtP &s, std::vector<StmtP> &out) {
    struct Walk : StmtVisitor {
        std::vector<StmtP> &out;
        explicit Walk(std::vector<StmtP> &out) : out(out) {}
        void visit(const StmtP &s) override {
            if (s->kind == StmtKind::For && s->loop == LoopKind::Parallel) {
                out.push_back(s);
                return;
            }
            if (s->kind == StmtKind::Comment) return;
            RF_INTERNAL_ASSERT(s->kind == StmtKind::Block) << "GPU printer: a kernel statement outside a parallel loop";
            visit_children(s);
        }
    } walk(out);
    walk.visit(s);
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
    if (o.dialect == Dialect::Cuda && o.tensor_cores) {
        // Every tile GEMM's M is the rows of a block ($nbv <= row_block) or 1. With at most 32 of
        // them, 64-row warp tiles would spend half their mma on rows past M (attention's 32-row
        // blocks: half the tensor-core work, and 128 accumulators a thread where 64 do): 32-row warp
        // tiles instead. Any M still works with either (the tiles repeat over M).
        int64_t rows = 1;
        for (const Kernel &k : m.kernels) rows = std::max<int64_t>(rows, k.schedule.row_block);
        if (rows <= 32) os << "#define RF_GEMM_WARP_M 32\n";
        os << cuda_gemm_header() << "\n";
    }
    for (const Kernel &k : m.kernels) {
        std::vector<StmtP> loops;
        launches_of(k.body, loops);
        for (size_t i = 0; i < loops.size(); i++) {
            std::string name = k.name + (loops.size() > 1 ? "_" + std::to_string(i) : std::string());
            g.launches.push_back(gpu_printer::GpuKernelPrinter(m, k, loops[i], name, o).print(os));
        }
    }
    g.source = os.str();
    return g;
}

const char *to_string(FusionLevel level) {
    switch (level) {
    case FusionLevel::Auto: return "auto";
    case FusionLevel::Block: return "block";
    case FusionLevel::Warp: return "warp";
    case FusionLevel::Thread: return "thread";
    }
    return "?";
}

FusionLevel parse_fusion_level(const std::string &name) {
    std::vector<std::string> valid;
    for (FusionLevel l : {FusionLevel::Auto, FusionLevel::Block, FusionLevel::Warp, FusionLevel::Thread}) {
        if (name == to_string(l)) return l;
        valid.push_back(to_string(l));
    }
    std::string list;
    for (const std::string &v : valid) list += (list.empty() ? "" : ", ") + v;
    throw UserError({}, "unknown fusion level '" + name + "' (valid: " + list + ")");
}

}  // namespace rf
