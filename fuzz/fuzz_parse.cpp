/** \file fuzz_parse.cpp
 * libFuzzer target for the frontend: any input must give a Program or a located UserError; every
 * other exception, crash, sanitizer report or timeout is a bug.
 */
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "spec/Frontend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string src(reinterpret_cast<const char *>(data), size);
    rf::ArenaScope scope;  // a fresh arena per input: nothing accumulates across runs
    try {
        rf::Program p = rf::parse_program(src, "fuzz.rf");
        (void)rf::to_string(p);
        try {
            rf::bind_sizes(p, {});
        } catch (const rf::UserError &) {
        }
        // Small concrete sizes exercise the extent and bounds checks on every program that parses.
        std::map<std::string, int64_t> sizes;
        for (const rf::SizeDecl &s : p.sizes) sizes[s.name] = 1 + (s.name.size() + size) % 7;
        try {
            rf::bind_sizes(p, sizes);
        } catch (const rf::UserError &) {
        }
    } catch (const rf::UserError &e) {
        if (!e.loc().valid()) std::abort();  // every spec error must point at the source
    }
    return 0;
}
