/** \file Frontend.h
 * The public entry point of the spec frontend: `.rf` text in, checked rf::Program out.
 */
#pragma once

#include <string>

#include "ir/Program.h"

namespace rf {

/** Parses and checks a spec (docs/language.md). Nodes are created in the current arena.
 *  Throws rf::UserError, located at the offending token, for every bad spec; nothing else escapes
 *  for any input (limits on size and nesting turn pathological inputs into UserErrors). */
Program parse_program(const std::string &source, const std::string &file_name);

}  // namespace rf
