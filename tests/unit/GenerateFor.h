/** \file GenerateFor.h
 * Tests' shortcut through the pipeline: a spec's CPU source or GPU module (lowered, every tile pass,
 * printed) for a target kind and options, as run, bench and emit would generate it.
 */
#pragma once

#include <string>

#include "driver/Compiler.h"

namespace rf::test {

/** The C++ source of a spec for this host's CPU. */
inline std::string generate_cpu_for(const std::string &source, const std::string &file, const Options &o) {
    ArenaScope arena;
    auto c = analyze_source(source, file, make_target(TargetKind::Cpu), o);
    return generate(*c, o).source;
}

/** CUDA: for `arch` with the H100/H200-class model (no device asked); OpenCL: this host's device
 *  (or the model without one). */
inline GpuModule generate_gpu_for(const std::string &source, const std::string &file, TargetKind kind, const Options &o,
                                  const std::string &arch = "sm_90a") {
    Target t = make_target(TargetRequest{kind, kind == TargetKind::Cuda ? arch : "", ""});
    auto c = analyze_source(source, file, t, o);
    return generate(*c).gpu;
}

}  // namespace rf::test
