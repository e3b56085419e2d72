/** \file fuzz_analyze.cpp
 * libFuzzer target for the whole compiler short of building: parse, check, analyze and plan any
 * input, print its reports, then (at small sizes) lower it to tile IR, run every tile pass and print
 * it for each backend — C++ for the CPU, OpenCL C and CUDA (the GPU models: no device is asked
 * for). A spec error must be a located UserError; an InternalError (a derivation that fails its
 * numeric re-check, a broken invariant, a printer that meets a node it does not know), a crash, a
 * sanitizer report or a timeout is a bug.
 */
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "driver/Compiler.h"
#include "runtime/HostCpu.h"

namespace {

/** The back half for one target at small sizes (GPU kernels are scheduled for concrete sizes). */
void generate_for(const std::string &src, rf::TargetKind kind, const std::map<std::string, int64_t> &sizes) {
    rf::Target t;
    t.kind = kind;
    t.cpu = rf::host_cpu();
    if (rf::is_gpu(kind)) t.gpu = rf::gpu_model(kind);
    rf::Options o;
    o.sizes = sizes;
    try {
        auto c = rf::analyze_source(src, "fuzz.rf", t, o);
        (void)rf::generate(*c);
    } catch (const rf::UserError &) {  // e.g. more shared memory than the model has: refused, located
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;  // the analysis, not the parser's limits, is under test here
    std::string src(reinterpret_cast<const char *>(data), size);
    rf::ArenaScope scope;
    try {
        auto c = rf::compile_source(src, "fuzz.rf", {});
        (void)rf::analysis_json(*c).dump();
        (void)rf::analysis_text(*c);
        (void)rf::plan_dump(*c);
        std::map<std::string, int64_t> small;
        for (const rf::SizeDecl &s : c->program.sizes) small[s.name] = std::min<int64_t>(s.default_value.value_or(3), 9);
        try {
            (void)rf::bind_sizes(c->program, small);
        } catch (const rf::UserError &) {
            return 0;  // the small sizes do not fit the spec (K larger than its axis, an index out of range)
        }
        for (rf::TargetKind kind : {rf::TargetKind::Cpu, rf::TargetKind::OpenCL, rf::TargetKind::Cuda})
            generate_for(src, kind, small);
    } catch (const rf::UserError &) {
    }
    return 0;
}
