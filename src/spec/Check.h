/** \file Check.h
 * Semantic checking of parsed statements: name resolution, types (Int/Real/Bool and the
 * index/value division rule), extent inference and agreement; builds the IR of each definition and
 * hands it to the Lowerer (Lower.h) for lifting and inlining.
 */
#pragma once

#include <string>
#include <vector>

#include "ir/Program.h"
#include "spec/AST.h"

namespace rf::spec {

/** Checks and lowers a parsed spec. `end` is the end-of-file location (for "spec has no output"). */
Program check_program(const std::vector<Stmt> &stmts, SourceLoc end, const std::string &file);

}  // namespace rf::spec
