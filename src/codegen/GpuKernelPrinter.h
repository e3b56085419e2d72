/** \file GpuKernelPrinter.h
 * The printer of one GPU launch, shared by its two source files: CodeGen_GPU.cpp (the launch, the
 * group-level and private statements) and GpuSpread.cpp (loops spread over the threads of a group,
 * and their reductions). Internal to src/codegen.
 */
#pragma once

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/CodeGen_GPU.h"
#include "codegen/GpuGemm.h"
#include "codegen/GpuMapping.h"
#include "codegen/GpuPlacement.h"
#include "codegen/GpuVectorLoads.h"
#include "codegen/StmtPrinter.h"

namespace rf::gpu_printer {

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

/** Prints one top-level parallel loop of a kernel as one GPU kernel (see CodeGen_GPU.h). */
class GpuKernelPrinter : public codegen::StmtPrinter {
public:
    GpuKernelPrinter(const Module &m, const Kernel &k, const StmtP &loop, std::string name, const GpuCodegenOptions &o)
        : m_(m), k_(k), loop_(loop), name_(std::move(name)), o_(o), T_(o.threads), W_(o.threads), place_(k, o) {
        for (const Buffer &b : m.buffers)
            if (!bufs_.count(b.name) || b.role == Buffer::Role::Temp) bufs_[b.name] = &b;
    }

    GpuLaunch print(std::ostringstream &out);

private:
    // ---- Names and expressions.
    std::string buf_id(size_t i) const { return "rf_b" + std::to_string(i); }
    size_t buf_index(const Buffer *b) const { return static_cast<size_t>(b - &m_.buffers[0]); }
    std::string cname(const std::string &local);
    const LocalInfo &info(const std::string &name);

    CEmitContext ctx();
    static std::string element(const Buffer *b, const std::string &at) { return b->role == Buffer::Role::Temp ? at : gpu_widen(b->dtype, at); }
    std::string offset(const Buffer *b, const std::vector<std::string> &idx) { return row_major_offset(buf_id(buf_index(b)), idx); }
    std::string expr(Expr e) { return emit_c(e, ctx()); }
    std::string int_expr(Expr e) {
        CEmitContext c = ctx();
        return emit_c(e, c);
    }
    std::string lvalue(Expr t);
    LocalClass target_class(Expr t) { return info(t->name).cls; }
    std::string cast_to(LocalClass c, Expr v);
    static std::string combine(ReduceOp op, const std::string &a, const std::string &b);
    static std::string identity(ReduceOp op);

    // ---- Uniform (work-group) context.
    /** Declares the locals of `list`'s direct Decls as shared slots. */
    void declare_shared(const StmtP &d);

    /** A group-level list. Statements that need every thread are cooperative; the others run on
     *  every thread at once when they write only replicated (register) locals, else on thread 0
     *  followed by a barrier. */
    void uniform_list(const std::vector<StmtP> &list, int ind);

    /** True for a shared local or a buffer other threads may write (what a read must be guarded for). */
    bool in_memory(const std::string &name);
    /** Locals the printer addresses as arrays whatever their size (top-k lists, shift states,
     *  row copies, GEMM operands). */
    void addressed(const StmtP &s);
    /** Every thread reads e (a condition, loop bounds) into a private value. */
    void note_reads(Expr e);
    void barrier(int ind) {
        pad(ind) << bar_ << "\n";
        pending_.clear();
    }
    /** A barrier before `list` when it writes what replicated statements read since the last one. */
    void guard(const std::vector<StmtP> &list, int ind);

    void coop_stmt(const StmtP &s, int ind);

    /** A vector loop over the threads; each reduction into a scalar becomes a private partial
     *  combined by a tree (shared memory or warp shuffles) whose result every thread reads. */
    void spread_simd(const StmtP &s, const std::string &v, int ind);

    /** The iterations of a spread vector loop in chunks of V consecutive ones per thread (chunk c
     *  at b + (lane + c·W)·V): when the chunk is whole (and, on CUDA, every contiguous operand's
     *  chunk is aligned) each operand is read with one vector load and the body runs V times on
     *  registers; else element by element. */
    void vector_iterations(const StmtP &s, const std::string &v, const VectorPlan &vp, int ind);

    bool warp_shuffles() const { return o_.dialect == Dialect::Cuda && W_ == 32; }

    /** The combination under op of every thread's `value`, returned as an expression that every
     *  thread of the group can read until the next barrier (every thread passes every barrier). */
    std::string tree(ReduceOp op, const std::string &value, int ind);

    /** Independent iterations (rows of a block x free state indices) spread over the threads. */
    void spread_independent(const StmtP &s, const std::string &v, int ind);

    /** Rows with G threads each (Placement::row_group): every thread runs the same number of rounds
     *  (threads past the last row repeat it without writing), so the reductions and synchronisations
     *  within each group of G (shuffles, or a tree in shared memory) see every thread. */
    void grouped_rows(const StmtP &s, const StmtP &in, const std::string &v, int at, bool reduction, int G, int ind);

    // ---- Private (one thread) context: the tile IR printed as sequential C (StmtPrinter's hooks;
    // comments and branches are the shared forms).
    std::ostream &out() override { return *os_; }
    std::string condition(Expr c) override { return expr(c); }
    /** A list in its own scope of locals. */
    void print_list(const std::vector<StmtP> &list, int ind) override;
    /** A block in braces (its locals' scope). */
    void print_block(const StmtP &s, int ind) override;
    void print_for(const StmtP &s, int ind) override;
    void print_decl(const StmtP &s, int ind) override;
    void print_assign(const StmtP &s, int ind) override;
    void print_accum(const StmtP &s, int ind) override;
    void print_arg_select(const StmtP &s, int ind) override;
    void print_topk_insert(const StmtP &s, int ind) override;
    void print_poly_shift(const StmtP &s, int ind) override;
    void print_gemm(const StmtP &s, int ind) override;
    void print_store(const StmtP &s, int ind) override;
    void print_copy_row(const StmtP &s, int ind) override;

    /** A Decl printed in a solo group of a uniform list was given a shared slot by that list. */
    bool declared_shared_now(const StmtP &s) { return solo_decls_.count(s.get()) > 0; }


    const Buffer *out_buffer(const std::string &name);

    /** A GEMM operand: its address and element type. */
    GemmOperand operand(Expr base);

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
    bool next_init_independent_ = false;  ///< the array initialisation being printed shares the next one's barrier
    bool state_decl_ = false;             ///< the Decl being printed is a running state's register copy
    std::map<Expr, std::string> vector_operand_;  ///< loads read by a vector load: the register holding the value
    std::ostringstream *os_ = nullptr;
    std::map<std::string, const Buffer *> bufs_;
    std::map<std::string, LocalInfo> scope_;
    std::set<std::string> used_;
    std::set<const Stmt *> solo_decls_;
    bool gemm_scratch_ = false;  ///< the tensor-core GEMM's staging buffer has a slot
    std::vector<SharedSlot> slots_;
};

}  // namespace rf::gpu_printer
