/** \file StmtPrinter.cpp
 * The shared dispatch and default statement forms of StmtPrinter.h.
 */
#include "codegen/StmtPrinter.h"

#include "codegen/CodeGen_C.h"
#include "support/Error.h"

namespace rf::codegen {

using namespace tile;

std::ostream &StmtPrinter::pad(int ind) {
    std::ostream &os = out();
    for (int i = 0; i < ind; i++) os << "    ";
    return os;
}

void StmtPrinter::print_stmt(const StmtP &s, int ind) {
    switch (s->kind) {
    case StmtKind::Block: print_block(s, ind); return;
    case StmtKind::Comment: print_comment(s, ind); return;
    case StmtKind::For: print_for(s, ind); return;
    case StmtKind::If: print_if(s, ind); return;
    case StmtKind::Decl: print_decl(s, ind); return;
    case StmtKind::Assign: print_assign(s, ind); return;
    case StmtKind::Accum: print_accum(s, ind); return;
    case StmtKind::ArgSelect: print_arg_select(s, ind); return;
    case StmtKind::TopKInsert: print_topk_insert(s, ind); return;
    case StmtKind::PolyShift: print_poly_shift(s, ind); return;
    case StmtKind::Gemm: print_gemm(s, ind); return;
    case StmtKind::Store: print_store(s, ind); return;
    case StmtKind::CopyRow: print_copy_row(s, ind); return;
    case StmtKind::Prefetch: print_prefetch(s, ind); return;
    case StmtKind::FinishCopies: print_finish_copies(s, ind); return;
    }
    RF_INTERNAL_ASSERT(false) << "printer: unknown statement kind " << static_cast<int>(s->kind);
}

void StmtPrinter::print_list(const std::vector<StmtP> &list, int ind) {
    for (const StmtP &c : list) print_stmt(c, ind);
}

void StmtPrinter::print_finish_copies(const StmtP &, int) { RF_INTERNAL_ASSERT(false) << "deferred row copies outside the CPU backend"; }

void StmtPrinter::print_comment(const StmtP &s, int ind) { pad(ind) << "// " << safe_comment(s->name) << "\n"; }

void StmtPrinter::print_if(const StmtP &s, int ind) {
    pad(ind) << "if (" << condition(s->cond) << ") {\n";
    print_list(s->body, ind + 1);
    if (!s->else_body.empty()) {
        pad(ind) << "} else {\n";
        print_list(s->else_body, ind + 1);
    }
    pad(ind) << "}\n";
}

}  // namespace rf::codegen
