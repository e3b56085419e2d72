/** \file CpuKernelPrinter.cpp
 * The CPU backend's statement printer: one tile-IR kernel as a C++ function (its parallel row loops,
 * vector loops and their row primitives, tile GEMM calls); CodeGen_CPU.cpp puts the kernels of a
 * module into one translation unit with its C ABI.
 */
#include "codegen/CpuKernelPrinter.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "codegen/CodeGen_C.h"
#include "codegen/CodeGen_CPU.h"
#include "codegen/CpuGemmCall.h"
#include "codegen/CpuExp2Rows.h"
#include "codegen/StmtPrinter.h"
#include "support/Error.h"
#include "sym/Simplify.h"
#include "tile/StmtVisitor.h"

namespace rf {

namespace {

using namespace tile;

std::string local_name(const std::string &n) { return c_identifier(n.substr(1), "l_"); }

class KernelPrinter : public codegen::StmtPrinter {
public:
    KernelPrinter(const Module &m, const Kernel &k, std::ostringstream &os, bool round_tile_products, bool half_accuracy_exp2)
        : m_(m), k_(k), os_(os), round_tile_products_(round_tile_products),
          exp2_accuracy_(half_accuracy_exp2 ? "<rfk::Exp2Accuracy::Half>" : "") {
        for (const Buffer &b : m.buffers)
            if (!bufs_.count(b.name) || b.role == Buffer::Role::Temp) bufs_[b.name] = &b;  // reads prefer temporaries
    }

    void print() {
        collect_locals(k_.body);
        os_ << "// " << safe_comment(k_.what) << "\n";
        os_ << "static void " << k_.name << "(const int64_t *rf_sizes, void *const *rf_bufs, int rf_threads) {\n";
        os_ << "    rfk::input_epoch.fetch_add(1, std::memory_order_relaxed);  // packings kept from inputs expire\n";
        for (size_t i = 0; i < m_.sizes.size(); i++)
            os_ << "    const int64_t " << c_identifier(m_.sizes[i]) << " = rf_sizes[" << i << "]; (void)" << c_identifier(m_.sizes[i]) << ";\n";
        for (size_t i = 0; i < m_.buffers.size(); i++) {
            const Buffer &b = m_.buffers[i];
            std::string id = buf_id(i);
            os_ << "    " << c_storage_type(b.dtype) << " *__restrict " << id << " = (" << c_storage_type(b.dtype) << " *)rf_bufs[" << i
                << "]; (void)" << id << ";\n";
            // Row-major strides.
            for (size_t d = 0; d < b.dims.size(); d++) {
                std::string st = "1";
                for (size_t q = d + 1; q < b.dims.size(); q++) st += " * (int64_t)(" + int_expr(b.dims[q]) + ")";
                os_ << "    const int64_t " << id << "_s" << d << " = " << st << "; (void)" << id << "_s" << d << ";\n";
            }
        }
        top_arrays(k_.body, 1);
        // Row copies outside parallel loops go through this copier (a parallel loop's workers have theirs).
        const bool copies = has_row_copy(k_.body);
        if (copies) os_ << "    rfk::RowStream rs_;\n";
        simd_ = false;
        print_stmt(k_.body, 1);
        if (copies) os_ << "    rs_.flush();\n";
        os_ << "}\n\n";
    }

private:
    std::string buf_id(size_t i) const { return "rf_b" + std::to_string(i); }
    /** The kernel prologue's sizes, buffer pointers and strides, as a parameter list (declare) or as
     *  the matching arguments. */
    std::string region_params(bool declare) const {
        std::vector<std::string> items;
        for (const std::string &size : m_.sizes) items.push_back(std::string(declare ? "const int64_t " : "") + c_identifier(size));
        for (size_t i = 0; i < m_.buffers.size(); i++) {
            const Buffer &b = m_.buffers[i];
            items.push_back((declare ? std::string(c_storage_type(b.dtype)) + " *__restrict " : std::string()) + buf_id(i));
            for (size_t d = 0; d < b.dims.size(); d++)
                items.push_back(std::string(declare ? "const int64_t " : "") + buf_id(i) + "_s" + std::to_string(d));
        }
        std::string out;
        for (const std::string &item : items) out += (out.empty() ? "" : ", ") + (declare ? "[[maybe_unused]] " + item : item);
        return out;
    }
    size_t buf_index(const Buffer *b) const { return static_cast<size_t>(b - &m_.buffers[0]); }

    void collect_locals(const StmtP &root) {
        for_each_stmt(root, [&](const StmtP &s) {
            if (s->kind == StmtKind::Decl) locals_[s->name] = s.get();
        });
    }

    std::string ctype(LocalClass c) const {
        switch (c) {
        case LocalClass::State: return "double";
        case LocalClass::Index: return "int64_t";
        case LocalClass::Int8: return "int8_t";
        default: return compute_type();
        }
    }
    std::string compute_type() const { return m_.compute == DType::f64 ? "double" : "float"; }

    CEmitContext ctx(const std::string &real) {
        CEmitContext c;
        c.real = real;
        c.var = [this](Expr v) -> std::string {
            if (v->role == VarRole::Size) return c_identifier(v->name);
            RF_INTERNAL_ASSERT(!v->name.empty() && v->name[0] == '$') << "unbound variable " << v->name << " in " << k_.name;
            return local_name(v->name);
        };
        c.load = [this](Expr l, const std::vector<std::string> &idx) -> std::string {
            if (!l->name.empty() && l->name[0] == '$') return local_name(l->name) + "[" + idx[0] + "]";
            auto it = bufs_.find(l->name);
            RF_INTERNAL_ASSERT(it != bufs_.end()) << "load of unknown buffer " << l->name;
            const Buffer *b = it->second;
            std::string at = buf_id(buf_index(b)) + "[" + offset(b, idx) + "]";
            switch (b->dtype) {
            case DType::bf16: return "rfk::bf16_to_float(" + at + ")";
            case DType::f16: return "rfk::f16_to_float(" + at + ")";
            case DType::f8e4m3: return "rfk::f8e4m3_to_float(" + at + ")";
            case DType::f8e5m2: return "rfk::f8e5m2_to_float(" + at + ")";
            default: return at;
            }
        };
        return c;
    }

    std::string offset(const Buffer *b, const std::vector<std::string> &idx) { return row_major_offset(buf_id(buf_index(b)), idx); }

    std::string expr(Expr e, const std::string &real) { return emit_c(e, ctx(real)); }
    std::string int_expr(Expr e) { return emit_c(e, ctx("double")); }

    /** The C++ type a target (local) holds. */
    std::string target_type(Expr t) {
        auto it = locals_.find(t->name);
        RF_INTERNAL_ASSERT(it != locals_.end()) << "unknown local " << t->name;
        return ctype(it->second->cls);
    }
    std::string lvalue(Expr t) {
        if (t->kind == Kind::Var) return local_name(t->name);
        return local_name(t->name) + "[" + int_expr(t->args[0]) + "]";
    }

    /** Arrays declared directly in the kernel (outside parallel loops) are allocated at its top. */
    void top_arrays(const StmtP &s, int ind) {
        // Not into parallel loops: their arrays are each worker's (arrays_below).
        struct Walk : StmtVisitor {
            KernelPrinter &p;
            int ind;
            Walk(KernelPrinter &p, int ind) : p(p), ind(ind) {}
            void visit_for(const StmtP &s) override {
                if (s->loop != LoopKind::Parallel) visit_children(s);
            }
            void visit_decl(const StmtP &s) override {
                if (!s->dims.empty()) p.alloc(s, ind);
            }
        } walk(*this, ind);
        walk.visit(s);
    }
    /** The arrays declared anywhere below s (not s itself). */
    void arrays_below(const StmtP &s, int ind) {
        for_each_stmt(s, [&](const StmtP &d) {
            if (d != s && d->kind == StmtKind::Decl && !d->dims.empty()) alloc(d, ind);
        });
    }
    /** An array's storage, zeroed and 64-byte aligned: small arrays of a constant size on the stack
     *  (a call on a few rows, e.g. single-token MoE routing, would otherwise spend more time in
     *  malloc and free than in its work), others on the heap (rfk::LocalArray). */
    void alloc(const StmtP &d, int ind) {
        std::string n = local_name(d->name), T = ctype(d->cls);
        std::string size = "1";
        int64_t elements = 1;
        for (Expr e : d->dims) {
            size += " * (int64_t)(" + int_expr(e) + ")";
            Expr c = simplify(e);
            elements = c->is_const() && c->value >= 0 && elements >= 0 ? elements * static_cast<int64_t>(c->value) : -1;
        }
        const int64_t bytes = elements * 8;  // at most 8 bytes per element, whatever the class
        if (elements > 0 && bytes <= kStackArrayBytes && stack_bytes_ + bytes <= kStackBytesPerScope) {
            stack_bytes_ += bytes;
            pad(ind) << "alignas(64) " << T << " " << n << "_arr[" << elements << "] = {}; " << T << " *__restrict " << n << " = "
                     << n << "_arr;\n";
            return;
        }
        pad(ind) << "rfk::LocalArray<" << T << "> " << n << "_store((size_t)(" << size << ")); " << T << " *__restrict " << n
                 << " = " << n << "_store.data;\n";
    }
    // Stack arrays: each at most 4 KiB, 16 KiB in all per kernel (a worker thread's stack holds them).
    static constexpr int64_t kStackArrayBytes = 4096, kStackBytesPerScope = 16384;
    int64_t stack_bytes_ = 0;

    /** A loop body: inside a simd loop values are of the compute type, else double. */
    void body(const std::vector<StmtP> &b, int ind, bool simd) {
        bool saved = simd_;
        simd_ = simd;
        print_list(b, ind);
        simd_ = saved;
    }
    std::string real_type() const { return simd_ ? compute_type() : "double"; }

    // ---- StmtPrinter: blocks, comments and branches are the shared forms.
    std::ostream &out() override { return os_; }
    std::string condition(Expr c) override { return expr(c, "double"); }
    void print_for(const StmtP &s, int ind) override { loop(s, ind); }
    void print_gemm(const StmtP &s, int ind) override { gemm(s, ind); }

    void print_decl(const StmtP &s, int ind) override {
        std::string T = ctype(s->cls), n = local_name(s->name);
        if (s->dims.empty()) {
            pad(ind) << T << " " << n << " = " << (s->value ? cast_to(T, s->value) : T + "()") << ";\n";
        } else if (s->value) {
            std::string size = "1";
            for (Expr e : s->dims) size += " * (int64_t)(" + int_expr(e) + ")";
            pad(ind) << "for (int64_t q_ = 0; q_ < " << size << "; ++q_) " << n << "[q_] = " << cast_to(T, s->value) << ";\n";
        }
    }

    void print_assign(const StmtP &s, int ind) override {
        std::string T = target_type(s->target);
        pad(ind) << lvalue(s->target) << " = " << cast_to(T, s->value, simd_) << ";\n";
    }

    void print_accum(const StmtP &s, int ind) override {
        std::string T = target_type(s->target), t = lvalue(s->target), v = cast_to(T, s->value, simd_);
        switch (s->op) {
        case ReduceOp::Sum: pad(ind) << (sum_into_.count(t) ? sum_into_.at(t) : t) << " += " << v << ";\n"; break;
        case ReduceOp::Prod: pad(ind) << t << " *= " << v << ";\n"; break;
        default: {
            bool mx = s->op == ReduceOp::Max;
            if (simd_) {
                // A vector max/min reduction ignores NaN; a flag remembers one (NaN propagates). The
                // flag is a select under a max reduction, not `|= (v_ != v_)` under an OR: GCC 12.2
                // at -O3 with AVX-512 and -fno-trapping-math left garbage in the OR-reduced (or
                // summed) flag of a nested select (every row of max(c: select(c <= ia[r],
                // select(W[c] > 0, X, -inf), -inf)) came out NaN; fuzz_specs.py seed 12 #89).
                pad(ind) << "{ " << T << " v_ = " << v << "; " << t << "_nan = (v_ != v_) ? 1 : " << t << "_nan; " << t << " = (v_ "
                         << (mx ? ">" : "<") << " " << t << ") ? v_ : " << t << "; }\n";
            } else {
                pad(ind) << t << " = rfk::" << (mx ? "max" : "min") << "<" << T << ">(" << t << ", " << v << ");\n";
            }
        }
        }
    }

    void print_arg_select(const StmtP &s, int ind) override {
        bool mx = s->op == ReduceOp::ArgMax || s->op == ReduceOp::Max;
        pad(ind) << "{ double v_ = " << selected_value(s->value) << "; double i_ = " << expr(s->index, "double")
                 << "; if (rfk::better(" << (mx ? "true" : "false") << ", v_, i_, " << lvalue(s->target) << ", "
                 << lvalue(s->target2) << ")) { " << lvalue(s->target) << " = v_; " << lvalue(s->target2) << " = i_; } }\n";
    }

    void print_topk_insert(const StmtP &s, int ind) override {
        std::string n = local_name(s->name);
        pad(ind) << "rfk::topk_insert(" << n << "_v + " << int_expr(s->args[0]) << ", " << n << "_i + " << int_expr(s->args[0])
                 << ", &" << n << "_n[" << int_expr(s->args2[0]) << "], " << int_expr(s->k) << ", "
                 << selected_value(s->value) << ", (double)(" << int_expr(s->index) << "));\n";
    }
    /** The value a selection (arg-max/min, top-k) keeps: an element, computed in the compute type as
     *  every vectorized pass computes it, then widened. Computed in double instead, the kept value
     *  (a top-k output, rounded to float) and the same element recomputed in float by a later pass
     *  can differ in the last bit, and `f(X) >= TV[r,0]` (TV the top-1 of f(X)) fails on its own
     *  maximum (scripts/fuzz_specs.py seed 1204 #53). */
    std::string selected_value(Expr v) { return "(double)(" + expr(v, compute_type()) + ")"; }

    void print_poly_shift(const StmtP &s, int ind) override {
        std::ostringstream al;
        for (const auto &a : s->alphas)
            for (int v : a) al << v << ",";
        std::string from, to;
        for (size_t i = 0; i < s->args.size(); i++) {
            from += (i ? ", " : "") + expr(s->args[i], "double");
            to += (i ? ", " : "") + expr(s->args2[i], "double");
        }
        pad(ind) << "{ static const int al_[] = {" << al.str() << "}; const double f_[] = {" << from << "}; const double t_[] = {"
                 << to << "}; rfk::poly_shift(&" << lvalue(s->target) << ", " << s->alphas.size() << ", "
                 << s->args.size() << ", al_, f_, t_); }\n";
    }

    void print_copy_row(const StmtP &s, int ind) override {
        const Buffer *b = nullptr;
        for (const Buffer &x : m_.buffers)
            if (x.name == s->target->name && x.role == Buffer::Role::Output) b = &x;
        RF_INTERNAL_ASSERT(b) << "row copy to a non-output";
        std::vector<std::string> idx;
        for (Expr a : s->target->args) idx.push_back(int_expr(a));
        RF_INTERNAL_ASSERT(b->dtype == DType::f32 || b->dtype == DType::bf16) << "row copy to a " << dtype_name(b->dtype) << " output";
        bool bf16 = b->dtype == DType::bf16;
        // Stream (bypass the caches) when the call's inputs and this output outgrow them (Schedule::stream_bytes).
        std::string bytes = bytes_of(*b);
        for (const Buffer &x : m_.buffers)
            if (x.role == Buffer::Role::Input) bytes += " + " + bytes_of(x);
        // Through the worker's copier (rfk::RowStream): a chunked row's streamed lines stay whole. A
        // scaled copy multiplies each float by the scale before rounding (ScaleRowCopies.cpp).
        std::string scale = s->scale ? ", (" + compute_type() + ")(" + expr(s->scale, compute_type()) + ")" : "";
        // A deferred copy is held by the copier until the source is about to change (DeferRowCopies.cpp).
        pad(ind) << "rs_." << (s->deferred ? "defer_" : "") << (bf16 ? "bf16" : "f32") << "(&" << buf_id(buf_index(b)) << "[" << offset(b, idx) << "], "
                 << operand_addr(s->value) << ", " << int_expr(s->end) << ", " << bytes << " > (int64_t)" << k_.schedule.stream_bytes
                 << scale << ");\n";
    }

    /** The bytes of a buffer, as an expression of the kernel's sizes. */
    std::string bytes_of(const Buffer &b) {
        std::string n = "(int64_t)" + std::to_string(dtype_bytes(b.dtype));
        for (Expr d : b.dims) n += " * (int64_t)(" + int_expr(d) + ")";
        return "(" + n + ")";
    }

    void print_finish_copies(const StmtP &s, int ind) override { pad(ind) << "rs_.finish_below(" << operand_addr(s->target) << ");\n"; }

    void print_prefetch(const StmtP &s, int ind) override {
        auto it = bufs_.find(s->target->name);
        RF_INTERNAL_ASSERT(it != bufs_.end()) << "prefetch of unknown buffer " << s->target->name;
        const Buffer *b = it->second;
        std::vector<std::string> idx;
        for (Expr a : s->target->args) idx.push_back(int_expr(a));
        // During the row copy that follows: the worker's RowStream asks for it between its streamed stores.
        // During the sweep that follows: held for the next vector loop (loop(), print_blocked_sums).
        if (s->when == PrefetchWhen::DuringSweep) {
            sweep_prefetch_held_ = true;
            ++sweep_prefetch_holds_;
        }
        pad(ind) << (s->when == PrefetchWhen::DuringCopy ? "rs_.prefetch_next(&" : s->when == PrefetchWhen::DuringSweep ? "pf_.hold(&" : "rfk::prefetch_l2(&")
                 << buf_id(buf_index(b)) << "[" << offset(b, idx) << "], ("
                 << int_expr(s->end) << ") * " << dtype_bytes(b->dtype) << ");\n";
    }

    void print_store(const StmtP &s, int ind) override {
        const std::string R = real_type();
        // Every buffer of the tensor: the float64 temporary and/or the output in its dtype.
        std::string v = expr(s->value, R);
        pad(ind) << "{ const " << R << " v_ = " << v << ";";
        std::vector<std::string> idx;
        for (Expr a : s->target->args) idx.push_back(int_expr(a));
        for (const Buffer &b : m_.buffers) {
            if (b.name != s->target->name || b.role == Buffer::Role::Input) continue;
            os_ << " " << buf_id(buf_index(&b)) << "[" << offset(&b, idx) << "] = rfk::store_" << dtype_name(b.dtype) << "(v_);";
        }
        os_ << " }\n";
    }

    std::string cast_to(const std::string &T, Expr v, bool simd = false) {
        // An int8 tile holds values the spec already rounded to i8: the conversion is exact.
        if (T == "int8_t") return "(int8_t)(" + expr(v, compute_type()) + ")";
        if (T == "int64_t") return "(int64_t)(" + (v->stype == SType::Int ? int_expr(v) : expr(v, "double")) + ")";
        return "(" + T + ")(" + expr(v, simd ? compute_type() : T) + ")";
    }

    static bool has_row_copy(const StmtP &s) {
        return any_stmt(s, [](const StmtP &c) { return c->kind == StmtKind::CopyRow; });
    }
    static bool has_sweep_prefetch(const StmtP &s) {
        return any_stmt(s, [](const StmtP &c) { return c->kind == StmtKind::Prefetch && c->when == PrefetchWhen::DuringSweep; });
    }

    /** A parallel loop over row blocks: each worker thread has its own arrays and takes blocks in turn. */
    void parallel_loop(const StmtP &s, const std::string &head, int ind) {
        pad(ind) << "{\n";
        pad(ind + 1) << "const int64_t n_ = " << int_expr(s->end) << " - " << int_expr(s->begin) << ";\n";
        pad(ind + 1) << "const int nt_ = rf_threads > 0 ? rf_threads : omp_get_max_threads();\n";
        const bool splits = any_stmt(s, [](const StmtP &c) { return c->kind == StmtKind::Gemm; });
        // Blocks of cheap rows are handed out 1/8 of a thread's share at a time. A block with a tile
        // GEMM is long enough (nb·T·K multiply-adds per tile) to be taken one at a time, which keeps
        // blocks of uneven work balanced: causal attention's last blocks have all the keys, its first
        // almost none, and a chunk of 16 of its blocks left one thread alone for up to 3/4 of a head.
        // Guided, not dynamic: the first chunks are large (the remaining blocks over the threads), so a
        // thread runs whole heads of consecutive blocks and packs their K and V tiles once (the kept
        // panels are per thread: dynamic, 1 had both threads in every head, each packing every tile),
        // and the last chunks are single blocks, which keeps the balance. AMD Zen 4, 2 threads, f32
        // attention [1, 8, L, L, 128], alternated: L = 512 5.63-5.66 -> 5.51-5.59 ms, L = 2048
        // 84.9-85.4 -> 83.5; causal, bf16, decode and RMSNorm->GEMM within noise.
        if (splits)
            pad(ind + 1) << "const int64_t chunk_ = 1; (void)chunk_;\n";
        else
            pad(ind + 1) << "const int64_t chunk_ = n_ / (int64_t)nt_ / 8 > 1 ? n_ / (int64_t)nt_ / 8 : 1; (void)chunk_;\n";
        // One row block: its tile GEMMs split their columns over the threads instead (redfuse_cpu.h).
        pad(ind + 1) << "rfk::gemm_split_threads.store(n_ == 1 ? nt_ : 1, std::memory_order_relaxed);\n";
        // With a tile GEMM in the body, the body is a lambda so that one row block runs it outside any
        // parallel region (the orphaned `omp for` then takes every iteration on this thread). Inside
        // even an inactive region (`if (false)`), the GEMM's column split would be a nested team, which
        // libgomp starts with new threads on every call (0.1-0.3 ms: clone, then the stack's unmapping
        // and its TLB shootdowns), where the outermost level reuses its pool. The kernel's sizes,
        // buffers and strides come in as parameters (shadowing the captures): read through the
        // closure, they could change under any int8 store (char types alias everything), and loops
        // over them would not vectorize. Without a GEMM the plain region stays (the lambda measured
        // 2-4% slower on LayerNorm).
        // One row block without a GEMM runs the same body with no parallel region at all: even an
        // inactive one (`if (false)`) is a team of one whose barriers each make a futex syscall in
        // libgomp, 1.5 us of a T = 1 MoE routing call whose work takes 0.9 (AMD Zen 4). The body is
        // printed twice (the region's and the serial one) rather than as a lambda (above: slower).
        auto region = [&](bool parallel) {
            arrays_below(s, ind + 2);
            if (has_row_copy(s)) pad(ind + 2) << "rfk::RowStream rs_;  // this worker's row copies\n";
            if (has_sweep_prefetch(s)) pad(ind + 2) << "rfk::SweepPrefetch pf_;  // this worker's held prefetch\n";
            // nowait: nothing after the loop reads another worker's rows before the region's end.
            if (parallel)
                pad(ind + 2) << "#pragma omp for schedule(" << (k_.schedule.strategy == Strategy::Literal ? "static" : splits ? "guided, chunk_" : "dynamic, chunk_")
                             << ")" << (splits ? "" : " nowait") << "\n";
            pad(ind + 2) << head << " {\n";
            const int64_t holds = sweep_prefetch_holds_;
            body(s->body, ind + 3, false);
            ask_unswept_prefetch(holds, ind + 3);
            pad(ind + 2) << "}\n";
            // The worker's held row-copy line and the fence of its streamed stores, before the barrier.
            if (has_row_copy(s)) pad(ind + 2) << "rs_.flush();\n";
        };
        if (!splits) {
            pad(ind + 1) << "if (n_ > 1) {\n";
            pad(ind + 1) << "#pragma omp parallel num_threads(nt_)\n";
            pad(ind + 1) << "{\n";
            region(true);
            pad(ind + 1) << "}\n";
            pad(ind + 1) << "} else {\n";
            region(false);
            pad(ind + 1) << "}\n";
        } else {
            pad(ind + 1) << "auto region_ = [&](" << region_params(true) << ") {\n";
            region(true);
            pad(ind + 1) << "};\n";
        }
        if (splits) {
            const std::string call = "region_(" + region_params(false) + ");\n";
            pad(ind + 1) << "if (n_ > 1) {\n";
            pad(ind + 2) << "#pragma omp parallel num_threads(nt_)\n";
            pad(ind + 2) << call;
            pad(ind + 1) << "} else {\n";
            pad(ind + 2) << call;
            pad(ind + 1) << "}\n";
        }
        pad(ind) << "}\n";
    }

    void loop(const StmtP &s, int ind) {
        std::string v = local_name(s->var->name);
        std::string head = "for (int64_t " + v + " = " + int_expr(s->begin) + "; " + v + " < " + int_expr(s->end) + "; ++" + v + ")";
        if (s->loop == LoopKind::Parallel) {
            parallel_loop(s, head, ind);
            return;
        }
        if (s->loop == LoopKind::Simd && sweep_prefetch_held_) {
            // The first vector loop after a held prefetch takes it: blocked sums spread its lines over
            // their blocks; any other form asks for them all before it (inserted once the form is known).
            sweep_prefetch_held_ = false;
            spread_sweep_prefetch_ = true;
            const std::string before = os_.str();
            loop(s, ind);
            if (spread_sweep_prefetch_) {
                const std::string printed = os_.str().substr(before.size());
                os_.str(before);
                os_.seekp(0, std::ios::end);
                pad(ind) << "pf_.rest();\n";
                os_ << printed;
            }
            spread_sweep_prefetch_ = false;
            return;
        }
        if (s->loop == LoopKind::Simd && !staging_ &&
            (print_exp2_row_in_place(s, ind) || print_exp2_row_sum(s, ind) || print_row_extreme(s, ind) || print_row_sum(s, ind) ||
             print_staged_exp2(s, ind)))
            return;
        if (s->loop == LoopKind::Simd && !staging_ && print_blocked_sums(s, ind)) return;
        if (s->loop == LoopKind::Simd) {
            std::vector<std::string> reds, flags;
            for (const StmtP &c : s->body) {
                if (c->kind != StmtKind::Accum) continue;
                std::string t = lvalue(c->target);
                switch (c->op) {
                case ReduceOp::Sum: reds.push_back("reduction(+:" + t + ")"); break;
                case ReduceOp::Prod: reds.push_back("reduction(*:" + t + ")"); break;
                case ReduceOp::Max: reds.push_back("reduction(max:" + t + ")"); flags.push_back(t); break;
                default: reds.push_back("reduction(min:" + t + ")"); flags.push_back(t); break;
                }
            }
            pad(ind) << "{\n";
            for (const std::string &f : flags) pad(ind + 1) << "int " << f << "_nan = 0;\n";
            pad(ind + 1) << "#pragma omp simd";
            for (const std::string &r : reds) os_ << " " << r;
            for (const std::string &f : flags) os_ << " reduction(max:" << f << "_nan)";  // see print_accum
            os_ << "\n";
            pad(ind + 1) << head << " {\n";
            body(s->body, ind + 2, true);
            pad(ind + 1) << "}\n";
            for (const std::string &f : flags)
                pad(ind + 1) << "if (" << f << "_nan) " << f << " = std::numeric_limits<" << compute_type() << ">::quiet_NaN();\n";
            pad(ind) << "}\n";
            return;
        }
        // A vector loop without reductions whose values stay float64 (the state's precision).
        if (s->loop == LoopKind::Lanes) pad(ind) << "#pragma omp simd\n";
        pad(ind) << head << " {\n";
        const int64_t holds = sweep_prefetch_holds_;
        body(s->body, ind + 1, false);
        ask_unswept_prefetch(holds, ind + 1);
        pad(ind) << "}\n";
    }

    /** A prefetch held for a sweep (print_prefetch) since `holds` that no vector loop of the body just
     *  printed took — the members after it were no sweep (a top-k's insertion): asked for at the end of
     *  the body, where the iteration that held it ends. Never carried to a vector loop printed later,
     *  which may lie in another parallel region or in the region's second printing, where `pf_` is not
     *  declared or was not held (fuzz seed 1260 #63: the generated C++ did not compile). */
    void ask_unswept_prefetch(int64_t holds, int ind) {
        if (!sweep_prefetch_held_ || sweep_prefetch_holds_ == holds) return;
        pad(ind) << "pf_.rest();\n";
        sweep_prefetch_held_ = false;
    }

    /** A vector loop whose reductions are all float or double sums into scalars (one to four), at the
     *  loop's top level, whose loads are unit-stride (cpu_exp2::unit_stride_loads): summed in blocks
     *  of rfk::kSumBlockBytes (half of it for three or four sums), element j of each block into its
     *  own partial sum, then the partial sums pairwise, then the loop's rest as a vector reduction. `omp simd
     *  reduction` keeps one vector of partial sums, whose adds wait on each other (latency 3-4 cycles
     *  on the CPUs measured against one add issued per cycle or two); a block of four vectors keeps
     *  four chains (f32 LayerNorm [4096, 8192], AVX2 Zen 3: see docs/tile-ir.md). The sum's order
     *  changes, as any vector reduction's order does; it stays fixed for given sizes. */
    bool print_blocked_sums(const StmtP &s, int ind) {
        std::vector<std::pair<std::string, std::string>> sums;  // (the scalar, its type)
        for (const StmtP &c : s->body) {
            if (c->kind != StmtKind::Accum) continue;
            const std::string T = target_type(c->target);
            if (c->op != ReduceOp::Sum || c->target->kind != Kind::Var || (T != "float" && T != "double")) return false;
            sums.push_back({lvalue(c->target), T});
        }
        size_t all = 0;
        for_each_stmt(s, [&](const StmtP &c) { all += c->kind == StmtKind::Accum; });
        // Below the top level: an accumulation. Past four sums: their partial sums alone would fill AVX2's
        // 16 vector registers (moment of inertia's five sums spilled them).
        if (sums.empty() || all != sums.size() || sums.size() > 4) return false;
        // Gathered or strided loads (moment of inertia's points, three floats apart): the loop is bound by
        // its loads, not by the adds' latency, and blocks of it measured slower.
        if (!cpu_exp2::unit_stride_loads(s)) return false;
        bool wide = false;
        for (const auto &t : sums) wide = wide || t.second == "double";
        // Four vectors per sum for one or two sums, two for three or four.
        const int per = (wide ? 8 : 4) * (sums.size() > 2 ? 2 : 1);
        const std::string v = local_name(s->var->name), w = "rfk::kSumBlockBytes / " + std::to_string(per);
        pad(ind) << "{\n";
        pad(ind + 1) << "const int64_t b0_ = " << int_expr(s->begin) << ", e_ = " << int_expr(s->end) << ";\n";
        pad(ind + 1) << "int64_t b_ = b0_;\n";
        for (size_t i = 0; i < sums.size(); i++) pad(ind + 1) << "alignas(64) " << sums[i].second << " part" << i << "_[" << w << "] = {};\n";
        const bool spread = spread_sweep_prefetch_;  // the held prefetch's lines, a few per block
        spread_sweep_prefetch_ = false;
        if (spread) pad(ind + 1) << "pf_.spread((e_ - b_) / (" << w << "));\n";
        pad(ind + 1) << "for (; b_ + " << w << " <= e_; b_ += " << w << ") {\n";
        if (spread) pad(ind + 2) << "pf_.next();\n";
        pad(ind + 2) << "#pragma omp simd\n";
        pad(ind + 2) << "for (int64_t " << v << " = b_; " << v << " < b_ + " << w << "; ++" << v << ") {\n";
        for (size_t i = 0; i < sums.size(); i++) sum_into_[sums[i].first] = "part" + std::to_string(i) + "_[" + v + " - b_]";
        body(s->body, ind + 3, true);
        sum_into_.clear();
        pad(ind + 2) << "}\n";
        pad(ind + 1) << "}\n";
        pad(ind + 1) << "#pragma omp simd";
        for (const auto &t : sums) os_ << " reduction(+:" << t.first << ")";
        os_ << "\n";
        pad(ind + 1) << "for (int64_t " << v << " = b_; " << v << " < e_; ++" << v << ") {\n";
        body(s->body, ind + 2, true);
        pad(ind + 1) << "}\n";
        for (size_t i = 0; i < sums.size(); i++)
            pad(ind + 1) << "if (b_ != b0_) " << sums[i].first << " += rfk::sum_pairwise(part" << i << "_, " << w << ");\n";
        if (spread) pad(ind + 1) << "pf_.rest();\n";
        pad(ind) << "}\n";
        return true;
    }

    /** A float vector loop `T[i(j)] = exp2(arg)` into a contiguous float tile row
     *  (cpu_exp2::exp2_row_in_place): one rfk::exp2_affine_row call when arg is affine in a float tile
     *  row, else the argument loop into T and rfk::exp2_row on T — no staging array and no copy.
     *  Attention's score tile and the softmax row buffers take this form. */
    bool is_float_tile(const std::string &n) const { return locals_.count(n) && locals_.at(n)->cls == LocalClass::Tile; }
    /** The address of a row read or written by the vector loop s, at its first iteration. */
    std::string row_start(Expr load, const StmtP &s) {
        std::vector<Expr> first;
        for (Expr a : load->args) first.push_back(simplify(substitute(a, s->var, s->begin)));
        return operand_addr(make_load(load->name, first, load->dtype, load->stype));
    }

    bool print_exp2_row_in_place(const StmtP &s, int ind) {
        if (compute_type() != "float") return false;
        std::optional<cpu_exp2::Exp2RowInPlace> row =
            cpu_exp2::exp2_row_in_place(s, [&](const std::string &n) { return is_float_tile(n); });
        if (!row) return false;
        auto first = [&](Expr load) { return row_start(load, s); };
        const std::string n = "(" + int_expr(s->end) + ") - (" + int_expr(s->begin) + ")";
        if (row->source) {
            pad(ind) << "rfk::exp2_affine_row" << exp2_accuracy_ << "(" << first(row->target) << ", " << first(row->source) << ", " << n << ", "
                     << (row->scale ? "(float)" + expr(row->scale, "float") : "1.0f") << ", "
                     << (row->offset ? "(float)" + expr(row->offset, "float") : "0.0f") << ");\n";
            return true;
        }
        const std::string v = local_name(s->var->name);
        pad(ind) << "#pragma omp simd\n";
        pad(ind) << "for (int64_t " << v << " = " << int_expr(s->begin) << "; " << v << " < " << int_expr(s->end) << "; ++" << v << ") {\n";
        pad(ind + 1) << lvalue(row->target) << " = (float)(" << expr(row->arg, "float") << ");\n";
        pad(ind) << "}\n";
        pad(ind) << "rfk::exp2_row" << exp2_accuracy_ << "(" << first(row->target) << ", " << n << ");\n";
        return true;
    }

    /** A float vector loop that sums exp2 of a row element and/or keeps it in a float tile row
     *  (cpu_exp2::exp2_row_sum): one rfk::exp2_row_sum call over the row. */
    bool print_exp2_row_sum(const StmtP &s, int ind) {
        if (compute_type() != "float") return false;
        auto tile = [&](const std::string &n) { return is_float_tile(n); };
        auto is_row = [&](const std::string &n) { return is_float_row(n); };
        std::optional<cpu_exp2::Exp2RowSum> row = cpu_exp2::exp2_row_sum(s, tile, is_row);
        if (!row || (row->sum_target && target_type(row->sum_target) != "float")) return false;
        auto at_begin = [&](Expr load) { return row_start(load, s); };
        auto value = [&](Expr e, const char *none) { return e ? "(float)(" + expr(e, "float") + ")" : std::string(none); };
        const std::string call = "rfk::exp2_row_sum" + exp2_accuracy_ + "(" + (row->store_target ? at_begin(row->store_target) : "(float *)nullptr") + ", " +
                                 at_begin(row->source) + ", (" + int_expr(s->end) + ") - (" + int_expr(s->begin) + "), " +
                                 value(row->shift, "0.0f") + ", " + value(row->scale, "1.0f") + ", " + value(row->sum_offset, "0.0f") + ")";
        if (row->sum_target) pad(ind) << lvalue(row->sum_target) << " += " << call << ";\n";
        else pad(ind) << "(void)" << call << ";\n";
        return true;
    }

    /** A float tile array, or a float or bf16 buffer: the rows rfk::exp2_row_sum and row_max read. */
    bool is_float_row(const std::string &n) const {
        if (is_float_tile(n)) return true;
        auto b = bufs_.find(n);
        return b != bufs_.end() && (b->second->dtype == DType::f32 || b->second->dtype == DType::bf16);
    }

    /** A float vector loop `t = max(t, S[k(j)] · c)` or the min over a row (cpu_exp2::row_extreme): one
     *  rfk::row_max / row_min call, NaN-propagating as the flagged `omp simd` reduction is. */
    bool print_row_extreme(const StmtP &s, int ind) {
        if (compute_type() != "float") return false;
        std::optional<cpu_exp2::RowExtreme> row = cpu_exp2::row_extreme(s, [&](const std::string &n) { return is_float_row(n); });
        if (!row || target_type(row->target) != "float") return false;
        const std::string t = lvalue(row->target);
        const std::string c = row->scale ? "(float)(" + expr(row->scale, "float") + ")" : "1.0f";
        pad(ind) << t << " = rfk::row_" << (row->max ? "max" : "min") << "(" << row_start(row->source, s) << ", (" << int_expr(s->end)
                 << ") - (" << int_expr(s->begin) << "), " << c << ", " << t << ");\n";
        return true;
    }

    /** A float vector loop `t += S[k(j)]` over a row (cpu_exp2::row_sum): one rfk::row_sum call. */
    bool print_row_sum(const StmtP &s, int ind) {
        if (compute_type() != "float") return false;
        std::optional<cpu_exp2::RowSum> row = cpu_exp2::row_sum(s, [&](const std::string &n) { return is_float_row(n); });
        if (!row || target_type(row->target) != "float") return false;
        pad(ind) << lvalue(row->target) << " += rfk::row_sum(" << row_start(row->source, s) << ", (" << int_expr(s->end) << ") - ("
                 << int_expr(s->begin) << "));\n";
        return true;
    }

    /** A float vector loop whose exp2 calls have arguments it does not write (stageable_exp2_args),
     *  strip-mined by 1024 elements: per strip, a vector loop writes each argument to an array on the
     *  stack, rfk::exp2_row turns the array into 2^x in place, and the loop runs over the strip with
     *  those exp2 calls read from the arrays. Why: GCC vectorizes the inline exp2_f of an `omp simd`
     *  loop into ~22 instructions per 16 values; exp2_row's AVX-512 form is 9 (vreduceps and
     *  vscalefps, no clamps) and the staging costs a store and a load, all in L1 (softmax bf16
     *  [4096, 4096] on AMD Zen 4, 2 threads: see docs/tile-ir.md, "CPU code generation"). The values
     *  are exp2_row's (within 1 ulp, like exp2_f's); a reduction runs per strip, each strip's part
     *  added to the running value (strips of 1024: the tiles of the online passes fit in one). */
    bool print_staged_exp2(const StmtP &s, int ind) {
        if (compute_type() != "float") return false;
        std::vector<Expr> args = cpu_exp2::stageable_exp2_args(s);
        if (args.empty()) return false;
        const int kStrip = 1024;
        const std::string v = local_name(s->var->name);
        Expr strip_begin = make_var("$rfx_s", VarRole::Index, SType::Int), strip_end = make_var("$rfx_e", VarRole::Index, SType::Int);
        std::map<Expr, Expr> staged;
        for (size_t i = 0; i < args.size(); i++)
            staged[args[i]] = make_load("$rfx_x" + std::to_string(i), {make_sub(s->var, strip_begin)}, DType::f32, SType::Real);
        auto read_staged = [&](Expr e) {
            return substitute(e, [&](Expr n) -> Expr {
                if (n->kind != Kind::Call || n->func != Func::exp2) return nullptr;
                auto it = staged.find(n->args[0]);
                return it == staged.end() ? nullptr : it->second;
            });
        };
        auto strip = std::make_shared<Stmt>(*s);
        strip->begin = strip_begin;
        strip->end = strip_end;
        strip->body.clear();
        for (const StmtP &c : s->body) strip->body.push_back(mutate(c, read_staged, [](const std::string &n) { return n; }));

        pad(ind) << "{\n";
        for (size_t i = 0; i < args.size(); i++) pad(ind + 1) << "alignas(64) float l_rfx_x" << i << "[" << kStrip << "];\n";
        pad(ind + 1) << "const int64_t l_rfx_end = " << int_expr(s->end) << ";\n";
        pad(ind + 1) << "for (int64_t l_rfx_s = " << int_expr(s->begin) << "; l_rfx_s < l_rfx_end; l_rfx_s += " << kStrip << ") {\n";
        pad(ind + 2) << "const int64_t l_rfx_e = std::min<int64_t>(l_rfx_s + " << kStrip << ", l_rfx_end);\n";
        pad(ind + 2) << "#pragma omp simd\n";
        pad(ind + 2) << "for (int64_t " << v << " = l_rfx_s; " << v << " < l_rfx_e; ++" << v << ") {\n";
        for (size_t i = 0; i < args.size(); i++)
            pad(ind + 3) << "l_rfx_x" << i << "[" << v << " - l_rfx_s] = (float)(" << expr(args[i], "float") << ");\n";
        pad(ind + 2) << "}\n";
        for (size_t i = 0; i < args.size(); i++) pad(ind + 2) << "rfk::exp2_row" << exp2_accuracy_ << "(l_rfx_x" << i << ", l_rfx_e - l_rfx_s);\n";
        staging_ = true;
        loop(strip, ind + 2);
        staging_ = false;
        pad(ind + 1) << "}\n";
        pad(ind) << "}\n";
        return true;
    }

    /** The element type of a GEMM operand: a local tile array (the compute type) or a buffer. */
    DType operand_type(Expr base) {
        if (!base->name.empty() && base->name[0] == '$')
            return locals_.count(base->name) && locals_.at(base->name)->cls == LocalClass::Int8 ? DType::i8 : m_.compute;
        return bufs_.at(base->name)->dtype;
    }

    std::string operand_addr(Expr base) {
        std::vector<std::string> idx;
        for (Expr a : base->args) idx.push_back(int_expr(a));
        if (!base->name.empty() && base->name[0] == '$') return "&" + local_name(base->name) + "[" + idx[0] + "]";
        const Buffer *b = bufs_.at(base->name);
        return "&" + buf_id(buf_index(b)) + "[" + offset(b, idx) + "]";
    }

    /** A tile GEMM: a micro-kernel of redfuse_simd.h when the operand types have one (cpu_gemm_call),
     *  else loops. */
    void gemm(const StmtP &s, int ind) {
        const GemmInfo &g = *s->gemm;
        auto is_input = [&](Expr base) { return !base->name.empty() && base->name[0] != '$' && bufs_.at(base->name)->role == Buffer::Role::Input; };
        CpuGemmOperands o;
        o.M = int_expr(g.M), o.N = int_expr(g.N), o.K = int_expr(g.K);
        o.A = operand_addr(g.a_base), o.B = operand_addr(g.b_base), o.C = operand_addr(g.c_base);
        o.alpha = "(float)(" + expr(g.alpha, "double") + ")";
        // Whether it adds to C: always, never, or where accumulate_if holds (stores the first tile).
        o.accumulate = !g.accumulate ? "false" : g.accumulate_if ? "static_cast<bool>(" + condition(g.accumulate_if) + ")" : "true";
        o.lda = int_expr(g.a_si), o.ldc = int_expr(g.c_si), o.a_sk = int_expr(g.a_sk), o.b_sj = int_expr(g.b_sj), o.b_sk = int_expr(g.b_sk);
        o.a_type = operand_type(g.a_base), o.b_type = operand_type(g.b_base);
        o.a_input = is_input(g.a_base), o.b_input = is_input(g.b_base);
        const std::string call = cpu_gemm_call(g, o, round_tile_products_);
        if (!call.empty()) pad(ind) << call << "\n";
        else os_ << cpu_gemm_loops(g, o, ind);  // any other operand types: plain loops over the same strides
    }

    const Module &m_;
    const Kernel &k_;
    std::ostringstream &os_;
    bool round_tile_products_;  ///< cpu_rounds_tile_products
    /** The row exp2 primitives' template argument: "<rfk::Exp2Accuracy::Half>" where
     *  cpu_half_accuracy_exp2 holds, else empty (the default, Float). */
    std::string exp2_accuracy_;
    bool simd_ = false;  ///< printing inside a simd loop
    std::map<std::string, std::string> sum_into_;  ///< print_blocked_sums: a sum's scalar -> its partial sum
    bool staging_ = false;  ///< printing the strip loop of print_staged_exp2
    bool sweep_prefetch_held_ = false;    ///< a DuringSweep prefetch printed, no vector loop after it yet
    int64_t sweep_prefetch_holds_ = 0;    ///< DuringSweep prefetches printed so far (ask_unswept_prefetch)
    bool spread_sweep_prefetch_ = false;  ///< printing the vector loop that takes it (print_blocked_sums spreads it)
    std::map<std::string, const Buffer *> bufs_;
    std::map<std::string, const Stmt *> locals_;
};

}  // namespace

void print_cpu_kernel(const tile::Module &m, const tile::Kernel &k, std::ostringstream &os, bool round_tile_products,
                      bool half_accuracy_exp2) {
    KernelPrinter(m, k, os, round_tile_products, half_accuracy_exp2).print();
}

}  // namespace rf
