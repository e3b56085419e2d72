/** \file Parser.h
 * Hand-written recursive-descent parser from spec text to statements (AST.h). It checks syntax
 * only; names, types and extents are the checker's job (Check.h).
 */
#pragma once

#include <string>
#include <vector>

#include "spec/AST.h"

namespace rf::spec {

struct ParsedSpec {
    std::vector<Stmt> stmts;
    SourceLoc end;  // position of the end of the file
};

/** Parses a whole spec. Throws UserError at the first syntax error. */
ParsedSpec parse_statements(const std::string &source);

}  // namespace rf::spec
