/** \file Frontend.cpp
 * parse_program: parser, then checker and lowerer (Parser.h, Check.h, Lower.h).
 */
#include "spec/Frontend.h"

#include <new>

#include "spec/Check.h"
#include "spec/Parser.h"

namespace rf {

Program parse_program(const std::string &source, const std::string &file_name) {
    try {
        spec::ParsedSpec parsed = spec::parse_statements(source);
        return spec::check_program(parsed.stmts, parsed.end, file_name);
    } catch (const std::bad_alloc &) {
        // The limits should make this unreachable; keep the promise that only UserError escapes.
        throw UserError({}, "out of memory while reading the spec");
    }
}

}  // namespace rf
