/** \file gpu_semantics_test.cpp
 * The GPU semantics helpers (redfuse_gpu.h) against the compiler's own definitions, run as an OpenCL
 * kernel on PoCL: every rounding cast against rf::round_to_dtype, every storage encoding against the
 * CPU backend's encode_storage / decode_storage, and the masked-row conventions (inf - inf, 0 / 0,
 * NaN-propagating max/min, floor division) on special values. Also the printer's dialects.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "codegen/CodeGen_C.h"
#include "codegen/CodeGen_GPU.h"
#include "ir/DType.h"
#include "runtime/CpuBackend.h"
#include "runtime/OpenCLRuntime.h"
#include "support/Error.h"

using namespace rf;

namespace {

std::vector<float> test_values() {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1.5f, 2.5f, -2.5f, 127.5f, 128.5f, -128.5f, 447.9f, 448.0f, 464.0f, 480.0f,
                            1e5f, 65504.0f, 65520.0f, 7e4f, 57344.0f, 61440.0f, 1e-3f, 1e-5f, 6e-8f, 3e-8f, 1e-40f, 3.4e38f,
                            -3.4e38f, INFINITY, -INFINITY, NAN, 2147483520.0f, 3e9f, -3e9f, 0.0625f, 0.015625f, 0.00195f};
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0, 1);
    std::uniform_real_distribution<float> e(-30, 30);
    for (int i = 0; i < 400; i++) v.push_back(n(rng) * std::exp2(e(rng)));
    return v;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST(GpuSemantics, CastsAndStoresMatchTheCompilerOnPoCL) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    const DType casts[] = {DType::bf16, DType::f16, DType::f8e4m3, DType::f8e5m2, DType::i8, DType::i32};
    std::string src = gpu_runtime_header() + R"(
__kernel void casts(__global const float *x, __global float *out, __global uint *bits, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    float v = x[i];
    out[i * 6 + 0] = rf_cast_bf16(v);
    out[i * 6 + 1] = rf_cast_f16(v);
    out[i * 6 + 2] = rf_cast_f8e4m3(v);
    out[i * 6 + 3] = rf_cast_f8e5m2(v);
    out[i * 6 + 4] = rf_cast_i8(v);
    out[i * 6 + 5] = rf_cast_i32(v);
    bits[i * 4 + 0] = rf_store_bf16(v);
    bits[i * 4 + 1] = rf_store_f16(v);
    bits[i * 4 + 2] = rf_store_f8e4m3(v);
    bits[i * 4 + 3] = rf_store_f8e5m2(v);
}
__kernel void rules(__global float *out) {
    out[0] = rf_sub(-INFINITY, -INFINITY);
    out[1] = rf_sub(INFINITY, INFINITY);
    out[2] = rf_div(0.0f, 0.0f);
    out[3] = rf_max(NAN, 1.0f);
    out[4] = rf_min(1.0f, NAN);
    out[5] = (float)rf_floordiv(-7, 2);
    out[6] = (float)rf_mod(-7, 2);
    out[7] = rf_exp(-INFINITY);
    out[8] = rf_exp(0.0f);
    out[9] = rf_f16_to_float(rf_store_f16(1e-7f));
}
)";
    ocl::Program prog(src, "-cl-std=CL1.2");
    std::vector<float> v = test_values();
    size_t n = v.size();
    ocl::Buffer x(n * 4), out(n * 6 * 4), bits(n * 4 * 4), rules(10 * 4);
    x.write(v.data(), n * 4);
    prog.launch("casts", (n + 63) / 64, 64, {ocl::KernelArg::buffer(x), ocl::KernelArg::buffer(out), ocl::KernelArg::buffer(bits),
                                             ocl::KernelArg::i64(static_cast<int64_t>(n))});
    prog.launch("rules", 1, 1, {ocl::KernelArg::buffer(rules)});
    ocl::finish();
    std::vector<float> o(n * 6), r(10);
    std::vector<uint32_t> b(n * 4);
    out.read(o.data(), o.size() * 4);
    bits.read(b.data(), b.size() * 4);
    rules.read(r.data(), 40);
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++) {
            double want = round_to_dtype(static_cast<double>(v[i]), casts[k]);
            if (casts[k] == DType::i32 && std::fabs(want) > 2147483520.0) continue;  // beyond float's integers near 2^31
            EXPECT_TRUE(same(o[i * 6 + k], static_cast<float>(want)))
                << "cast_" << dtype_name(casts[k]) << "(" << v[i] << ") = " << o[i * 6 + k] << ", expected " << want;
        }
        const DType stores[] = {DType::bf16, DType::f16, DType::f8e4m3, DType::f8e5m2};
        for (int k = 0; k < 4; k++) {
            unsigned char enc[2] = {0, 0};
            encode_storage({static_cast<double>(v[i])}, stores[k], enc);
            uint32_t want = dtype_bytes(stores[k]) == 2 ? static_cast<uint32_t>(enc[0] | (enc[1] << 8)) : enc[0];
            // NaN payloads may differ; decoding both must give NaN.
            if (std::isnan(v[i])) {
                unsigned char got[2] = {static_cast<unsigned char>(b[i * 4 + k] & 0xff), static_cast<unsigned char>(b[i * 4 + k] >> 8)};
                EXPECT_TRUE(std::isnan(decode_storage(got, 1, stores[k])[0])) << dtype_name(stores[k]);
                continue;
            }
            EXPECT_EQ(b[i * 4 + k], want) << "store_" << dtype_name(stores[k]) << "(" << v[i] << ")";
        }
    }
    EXPECT_EQ(r[0], -INFINITY);
    EXPECT_EQ(r[1], INFINITY);
    EXPECT_EQ(r[2], 0.0f);
    EXPECT_TRUE(std::isnan(r[3]));
    EXPECT_TRUE(std::isnan(r[4]));
    EXPECT_EQ(r[5], -4.0f);
    EXPECT_EQ(r[6], 1.0f);
    EXPECT_EQ(r[7], 0.0f);
    EXPECT_EQ(r[8], 1.0f);
    EXPECT_EQ(r[9], static_cast<float>(round_to_dtype(1e-7, DType::f16)));
}

TEST(GpuSemantics, DialectsPrintTheirOwnSpellings) {
    Expr a = make_symbol("a"), j = make_index("j");
    Expr e = make_add(make_sub(a, make_const(INFINITY)),
                      make_reduce(ReduceOp::Max, {j}, {make_int(3)}, make_call(Func::sqrt, make_mul(a, make_cast(DType::f32, j)))));
    CEmitContext c;
    c.real = "float";
    c.var = [](Expr v) { return "x_" + v->name; };
    c.dialect = Dialect::OpenCL;
    std::string ocl = emit_c(e, c);
    EXPECT_NE(ocl.find("rf_sub("), std::string::npos) << ocl;
    EXPECT_NE(ocl.find("RF_INF"), std::string::npos) << ocl;
    EXPECT_EQ(ocl.find("std::"), std::string::npos) << ocl;
    EXPECT_EQ(ocl.find("[&]"), std::string::npos) << ocl;  // no lambdas in OpenCL C
    c.dialect = Dialect::Cuda;
    std::string cu = emit_c(e, c);
    EXPECT_NE(cu.find("sqrtf("), std::string::npos) << cu;
    EXPECT_EQ(cu.find("std::"), std::string::npos) << cu;
    c.dialect = Dialect::Cpp;
    EXPECT_NE(emit_c(e, c).find("rfk::sub<float>("), std::string::npos);
}

TEST(GpuSemantics, WorkGroupSizeMustBeAPowerOfTwo) {
    tile::Module m;
    GpuCodegenOptions o;
    o.threads = 48;
    EXPECT_THROW(generate_gpu(m, o), InternalError);
    o.threads = 64;
    EXPECT_NO_THROW(generate_gpu(m, o));
}
