/** \file fuzz_analyze.cpp
 * libFuzzer target for the whole front half: parse, check, analyze and plan any input. A spec error
 * must be a located UserError; an InternalError (a derivation that fails its numeric re-check, a
 * broken invariant), a crash, a sanitizer report or a timeout is a bug.
 */
#include <cstdint>
#include <cstdlib>
#include <string>

#include "driver/Compiler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;  // the analysis, not the parser's limits, is under test here
    std::string src(reinterpret_cast<const char *>(data), size);
    rf::ArenaScope scope;
    try {
        auto c = rf::compile_source(src, "fuzz.rf", {});
        (void)rf::analysis_json(*c).dump();
        (void)rf::analysis_text(*c);
        (void)rf::plan_dump(*c);
    } catch (const rf::UserError &) {
    }
    return 0;
}
