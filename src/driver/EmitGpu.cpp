/** \file EmitGpu.cpp
 * `redfuse emit --target opencl|cuda -o DIR`: the GPU kernels as a standalone source plus a launch
 * description (JSON) a host program follows: which kernels, in which order, how many work-groups
 * and how much shared memory, as expressions of the sizes.
 */
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "codegen/CodeGen_C.h"
#include "driver/Emit.h"
#include "support/Error.h"

namespace rf {

std::vector<std::string> emit_gpu(const Compilation &c, const std::string &dir, const std::string &name) {
    std::string id = c_identifier(name, "");
    if (id != name || name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
        throw UserError({}, "--name must be a C identifier (letters, digits, '_'; not starting with a digit), got '" + name + "'");
    if (!is_gpu(c.target.kind)) throw InternalError("emit_gpu: the compilation is not for a GPU");
    const std::string target = to_string(c.target.kind);
    GpuModule g = generate(c).gpu;  // the schedule is chosen for the compilation's sizes (emit --size)

    // Launch shapes as C expressions over the size arguments (named as in the kernels' parameters).
    CEmitContext ctx;
    ctx.real = "double";
    // The GPU dialect's integer helpers (rf_floordiv, ...: plain C, defined in redfuse_gpu.h), which
    // the host program can copy; the C++ dialect would print rfk:: and std:: names.
    ctx.dialect = target == "cuda" ? Dialect::Cuda : Dialect::OpenCL;
    ctx.var = [](Expr v) { return c_identifier(v->name); };
    nlohmann::json j;
    j["target"] = target;
    j["source"] = name + (target == "cuda" ? ".cu" : ".cl");
    j["sizes"] = nlohmann::json::array();
    for (const std::string &s : g.module.sizes) j["sizes"].push_back({{"name", s}, {"parameter", c_identifier(s)}});
    j["buffers"] = nlohmann::json::array();
    for (const tile::Buffer &b : g.module.buffers) {
        const char *role = b.role == tile::Buffer::Role::Input ? "input" : b.role == tile::Buffer::Role::Output ? "output" : "temporary";
        std::vector<std::string> dims;
        for (Expr d : b.dims) dims.push_back(emit_c(d, ctx));
        j["buffers"].push_back({{"name", b.name}, {"role", role}, {"dtype", b.role == tile::Buffer::Role::Temp ? "f32" : dtype_name(b.dtype)},
                                {"dims", dims}});
    }
    j["launches"] = nlohmann::json::array();
    for (const GpuLaunch &l : g.launches)
        j["launches"].push_back({{"kernel", l.kernel}, {"work_groups", emit_c(l.groups, ctx)}, {"work_group_size", l.threads},
                                 {"shared_bytes", emit_c(l.shared_bytes, ctx)}});
    j["arguments"] = target == "cuda" ? "every buffer in order (device pointers; temporaries float), then every size as int64_t; "
                                        "dynamic shared memory = shared_bytes"
                                      : "every buffer in order (cl_mem; temporaries float), then every size as cl_long, then a "
                                        "__local buffer of shared_bytes";
    j["helpers"] = "the expressions are C over int64_t and may use rf_floordiv(a, b) = floor(a / b), rf_mod(a, b) = a - b * "
                   "floor(a / b), rf_imin and rf_imax (as defined in the kernel source's redfuse_gpu.h part)";

    EmitDir out(dir);
    auto write = [&](const std::string &file, const std::string &text) { out.write(file, text); };
    write(j["source"].get<std::string>(), g.source);
    write(name + ".launch.json", j.dump(2) + "\n");
    return out.written;
}

}  // namespace rf
