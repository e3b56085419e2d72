/** \file Print.h
 * The spec printer: an rf::Program (or any set of definitions in the Program's shape) back to `.rf`
 * text that parse_program accepts. It is how derived programs (the backward pass of src/grad/) become
 * ordinary specs that analyze, run, bench and emit work on.
 *
 * Round trip: for a program p made by the frontend, parse(print(p)) prints the same text as p
 * (tests/unit/spec/print_test.cpp, every example spec). The printed program is the same IR up to
 * the renaming of lifted definitions (`O.sum` is not an identifier: it prints as `O_sum`).
 */
#pragma once

#include <string>
#include <vector>

#include "ir/Program.h"

namespace rf {

/** The spec text of `p`. Every definition prints with explicit extents on its left-hand side
 *  (`O[b:B, h:H, ...]`) except a top-k's variables (inferred, as the language requires); real
 *  constants print with a `.` so that they stay Real. `header` lines are printed first as `#`
 *  comments (they must be plain text made by the caller, never user input). Definitions may hold
 *  nested reductions and element-wise non-output definitions: the frontend lifts and inlines them
 *  when the text is parsed again. InternalError for nodes the language cannot spell (analysis
 *  symbols, NaN constants). */
std::string print_spec(const Program &p, const std::vector<std::string> &header = {});

/** The spec spelling of one expression, with the same rules (loads name tensors as written). */
std::string print_spec_expr(Expr e);

/** `name` made into a spec identifier that is not reserved (a function, reduction, dtype or keyword):
 *  `O.sum` -> `O_sum`. Collisions with other names are the caller's business (print_spec resolves
 *  them for the names of a program). */
std::string spec_identifier(const std::string &name);

/** True for the names the language reserves (functions, reductions, dtypes, keywords, `inf`). */
bool is_reserved_spec_name(const std::string &name);

}  // namespace rf
