/** \file CpuBackend.cpp
 * Plan → tile IR → C++ → shared object, and the buffers a compiled program runs on.
 */
#include "runtime/CpuBackend.h"

#include <chrono>
#include <dlfcn.h>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "codegen/CodeGen_CPU.h"
#include "interp/Reference.h"
#include "runtime/kernels/redfuse_cpu.h"
#include "support/Error.h"

namespace rf {

std::vector<std::string> cpu_jit_flags(const CpuFeatures &f, const std::vector<std::string> &extra) {
    // Nothing that moves a value away from the float64 reference: no -ffinite-math-only or -ffast-math
    // (infinities and NaNs), and no -freciprocal-math, which turned the int8 quantizer's round(x ·
    // 127 / a) into a product with 1/a, one ulp off and so one integer off when the quotient is a tie
    // (a = 1.1015625, x = a/2: 63.5 -> 64, the product 63.499996 -> 63;
    // tests/unit/runtime/cpu_exact_division_test.cpp). The code generator writes the reciprocals it
    // may use itself (src/tile/FiniteInvariants.cpp). No contraction of a·b + c into one FMA either
    // (GCC's default, -std=c++17 included): a product must round the same wherever the kernel uses it.
    // m = max(X·g) keeps X·g rounded, and the term X·g − m of a later member must be 0 at that max;
    // contracted into fma(X, g, −m) it was the product's rounding error, which a deferred exp(mu) of
    // 1e47 made 1e41 larger than the answer (scripts/fuzz_specs.py seed 1228 #52, also 1229 #73).
    // The hot loops (GEMMs, exp2, row passes) write their FMAs as intrinsics, which it leaves alone.
    // -O1 with the sanitizers (below).
    std::vector<std::string> flags{kernel_sanitizer_flags().empty() ? "-O3" : "-O1", "-fopenmp", "-fno-math-errno",
                                   "-fno-trapping-math", "-fno-semantic-interposition", "-ffp-contract=off"};
    for (const std::string &m : march_flags(f)) flags.push_back(m);
    if (best_isa(f) == IsaLevel::Avx512) flags.push_back("-mprefer-vector-width=512");
    // A library built with the sanitizers (REDFUSE_SANITIZE) compiles what it generates with them
    // too: the kernels load into the sanitized process, whose runtime checks them. Part of the cache
    // key like every flag, so sanitized and plain kernels never share an entry. At -O1: the checks
    // are the same, and a sanitized attention kernel compiles in 7.6 s instead of 26.8 s at -O3 (AMD
    // Zen 4; most of the sanitizer pass of CI was these compiles).
    for (const std::string &s : kernel_sanitizer_flags()) flags.push_back(s);
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
}

std::vector<std::string> kernel_sanitizer_flags() {
#ifdef REDFUSE_SANITIZE
    return {"-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"};
#else
    return {};
#endif
}

void pin_openmp_runtime() {
    static void *handle = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    (void)handle;
}

std::unique_ptr<CpuProgram> build_cpu_program(tile::Module module, std::string source, const CpuBuildOptions &o) {
    pin_openmp_runtime();
    auto t0 = std::chrono::steady_clock::now();
    auto prog = std::make_unique<CpuProgram>();
    prog->module = std::move(module);
    prog->source = std::move(source);
    JitOptions jo;
    jo.flags = o.flags;
    jo.cache_dir = o.cache_dir;
    prog->flags = jo.flags;
    prog->object = jit_compile(prog->source, jo);
    prog->entry = prog->object->function<CpuEntry>("redfuse_run");
    prog->from_cache = prog->object->from_cache();
    prog->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return prog;
}

void encode_storage(const std::vector<double> &v, DType t, unsigned char *out) {
    size_t n = v.size();
    switch (t) {
    case DType::f64: std::memcpy(out, v.data(), n * 8); return;
    case DType::f32:
        for (size_t i = 0; i < n; i++) {
            float f = rfk::store_f32(v[i]);
            std::memcpy(out + 4 * i, &f, 4);
        }
        return;
    case DType::bf16: case DType::f16:
        for (size_t i = 0; i < n; i++) {
            uint16_t b = t == DType::bf16 ? rfk::store_bf16(v[i]) : rfk::store_f16(v[i]);
            std::memcpy(out + 2 * i, &b, 2);
        }
        return;
    case DType::f8e4m3: for (size_t i = 0; i < n; i++) out[i] = rfk::store_f8e4m3(v[i]); return;
    case DType::f8e5m2: for (size_t i = 0; i < n; i++) out[i] = rfk::store_f8e5m2(v[i]); return;
    case DType::i8: for (size_t i = 0; i < n; i++) out[i] = static_cast<unsigned char>(rfk::store_i8(v[i])); return;
    case DType::i32:
        for (size_t i = 0; i < n; i++) {
            int32_t x = rfk::store_i32(v[i]);
            std::memcpy(out + 4 * i, &x, 4);
        }
        return;
    case DType::i64:
        for (size_t i = 0; i < n; i++) {
            int64_t x = rfk::store_i64(v[i]);
            std::memcpy(out + 8 * i, &x, 8);
        }
        return;
    }
}

std::vector<double> decode_storage(const unsigned char *in, int64_t n, DType t) {
    std::vector<double> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); i++) {
        switch (t) {
        case DType::f64: std::memcpy(&v[i], in + 8 * i, 8); break;
        case DType::f32: {
            float f;
            std::memcpy(&f, in + 4 * i, 4);
            v[i] = f;
            break;
        }
        case DType::bf16: case DType::f16: {
            uint16_t b;
            std::memcpy(&b, in + 2 * i, 2);
            v[i] = t == DType::bf16 ? rfk::bf16_to_float(b) : rfk::f16_to_float(b);
            break;
        }
        case DType::f8e4m3: v[i] = rfk::f8e4m3_to_float(in[i]); break;
        case DType::f8e5m2: v[i] = rfk::f8e5m2_to_float(in[i]); break;
        case DType::i8: v[i] = static_cast<int8_t>(in[i]); break;
        case DType::i32: {
            int32_t x;
            std::memcpy(&x, in + 4 * i, 4);
            v[i] = x;
            break;
        }
        case DType::i64: {
            int64_t x;
            std::memcpy(&x, in + 8 * i, 8);
            v[i] = static_cast<double>(x);
            break;
        }
        }
    }
    return v;
}

CpuBuffers::CpuBuffers(const Program &p, const SizeBinding &sizes, const std::map<std::string, Tensor> &inputs) : p_(p) {
    for (const SizeDecl &s : p.sizes) sizes_.push_back(sizes.at(s.name));
    for (const InputDecl &in : p.inputs) {
        auto it = inputs.find(in.name);
        if (it == inputs.end()) throw UserError(in.loc, "missing input '" + in.name + "'");
        std::vector<int64_t> shape = input_shape(in, sizes);
        if (it->second.shape != shape)
            throw UserError(in.loc, "input '" + in.name + "' has shape " + shape_to_string(it->second.shape) + ", expected " +
                                        shape_to_string(shape));
        storage_.emplace_back(static_cast<size_t>(it->second.numel()) * static_cast<size_t>(dtype_bytes(in.dtype)));
        encode_storage(it->second.data, in.dtype, storage_.back().data());
        dtypes_.push_back(in.dtype);
        shapes_.push_back(shape);
        names_.push_back(in.name);
        is_output_.push_back(false);
    }
    for (const OutputDecl &out : p.outputs) {
        std::vector<int64_t> shape = def_shape(*p.find_def(out.name), sizes);
        int64_t n = checked_numel(shape, "output '" + out.name + "'");
        storage_.emplace_back(static_cast<size_t>(n) * static_cast<size_t>(dtype_bytes(out.dtype)));
        dtypes_.push_back(out.dtype);
        shapes_.push_back(shape);
        names_.push_back(out.name);
        is_output_.push_back(true);
    }
    poison();
}

void CpuBuffers::poison() {
    for (size_t i = 0; i < storage_.size(); i++) {
        if (!is_output_[i]) continue;
        int64_t n = static_cast<int64_t>(storage_[i].size()) / dtype_bytes(dtypes_[i]);
        double bad = is_int(dtypes_[i]) ? -9.0e18 : NAN;
        encode_storage(std::vector<double>(static_cast<size_t>(n), bad), dtypes_[i], storage_[i].data());
    }
}

void CpuBuffers::run(const CpuProgram &prog, int threads) {
    std::vector<void *> ptrs;
    for (auto &s : storage_) ptrs.push_back(s.data());
    int rc = prog.entry(sizes_.data(), ptrs.data(), threads);
    if (rc != 0) throw UserError({}, "the generated kernel could not allocate its temporaries (out of memory)");
}

std::map<std::string, Tensor> CpuBuffers::outputs() const {
    std::map<std::string, Tensor> out;
    for (size_t i = 0; i < storage_.size(); i++) {
        if (!is_output_[i]) continue;
        Tensor t;
        t.shape = shapes_[i];
        t.dtype = dtypes_[i];
        t.data = decode_storage(storage_[i].data(), static_cast<int64_t>(storage_[i].size()) / dtype_bytes(dtypes_[i]), dtypes_[i]);
        out[names_[i]] = std::move(t);
    }
    return out;
}

int64_t CpuBuffers::bytes() const {
    int64_t b = 0;
    for (const auto &s : storage_) b += static_cast<int64_t>(s.size());
    return b;
}

}  // namespace rf
