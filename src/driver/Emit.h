/** \file Emit.h
 * `emit` (standalone sources with a C ABI or a launch description, Emit.cpp and EmitGpu.cpp) and
 * the `analyze --emit STAGE` dumps of the back half: both show exactly what run, bench and emit
 * build for the same target and sizes, because they come from the same pipeline call.
 */
#pragma once

#include <string>
#include <vector>

#include "driver/Pipeline.h"

namespace rf {

/** The output directory of `emit`: created on construction; every file written is recorded.
 *  UserError when the directory or a file cannot be written. */
class EmitDir {
public:
    explicit EmitDir(const std::string &dir);
    void write(const std::string &file, const std::string &text);
    std::vector<std::string> written;

private:
    std::string dir_;
};

/** `emit --target cpu -o DIR`: writes DIR/NAME.h (the C ABI), DIR/NAME.cpp, DIR/redfuse_cpu.h and
 *  DIR/redfuse_simd.h; returns the paths written. `c` is analyzed for the CPU target. */
std::vector<std::string> emit_cpu(const Compilation &c, const std::string &dir, const std::string &name);

/** `emit --target opencl|cuda -o DIR`: writes DIR/NAME.cl or NAME.cu and DIR/NAME.launch.json (the
 *  kernels in launch order with work-group counts and shared memory as C expressions of the sizes).
 *  `c` is analyzed for that GPU target. */
std::vector<std::string> emit_gpu(const Compilation &c, const std::string &dir, const std::string &name);

/** `analyze --emit tile|cpp|opencl|cuda`: the stage's text for the compilation's target (cpp needs
 *  the CPU target, opencl and cuda theirs; UserError otherwise). */
std::string backend_dump(const Compilation &c, Stage stage);

/** The stages of the back half whose dump needs a target of their own: cpp → cpu, opencl, cuda. */
TargetKind target_of_stage(Stage stage, TargetKind otherwise);

}  // namespace rf
