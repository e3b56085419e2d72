/** \file GpuGemm.cpp
 * Tile GEMMs in GPU kernels (see GpuGemm.h).
 */
#include "codegen/GpuGemm.h"
#include "codegen/GpuMapping.h"
#include "support/Error.h"

#include <sstream>

namespace rf {

extern const char *const kEmbeddedCudaGemmHeader;  // generated: src/runtime/kernels/redfuse_cuda_gemm{,_tc,_simt}.h

std::string cuda_gemm_header() { return kEmbeddedCudaGemmHeader; }

namespace {

using gpu_mapping::gpu_widen;

bool narrow(DType t) {
    return t == DType::bf16 || t == DType::f16 || t == DType::f8e4m3 || t == DType::f8e5m2;
}

/** The element `i` of an operand as a float (int8: as an int). */
std::string element(const GemmOperand &op, const std::string &p, const std::string &i) {
    std::string e = p + "[" + i + "]";
    return op.dtype == DType::i8 ? "(int)" + e : gpu_widen(op.dtype, e);  // int8 x int8 accumulates in int
}

std::string cuda_type(DType t) {
    switch (t) {
    case DType::bf16: return "rf_bf16";
    case DType::f16: return "rf_f16";
    case DType::f8e4m3: return "rf_fp8e4m3";
    case DType::f8e5m2: return "rf_fp8e5m2";
    case DType::i8: return "signed char";
    default: return "float";
    }
}

}  // namespace

bool cuda_gemm_on_tensor_cores(DType a, DType b, const GpuCodegenOptions &o) {
    if (o.dialect != Dialect::Cuda || !o.tensor_cores || o.threads < 32 || cuda_gemm_header().empty()) return false;
    // FlashAttention's trade: a float tile (P) meets a 16-bit operand in bf16; two float operands
    // stay exact fp32 (the SIMT path).
    return (narrow(a) && (narrow(b) || b == DType::f32)) || (narrow(b) && a == DType::f32);
}

std::string gpu_gemm(const tile::GemmInfo &g, const GemmOperand &a, const GemmOperand &b, const GemmOperand &c,
                     const std::function<std::string(Expr)> &ints, const std::string &alpha, const GpuCodegenOptions &o, int indent) {
    RF_INTERNAL_ASSERT(!g.accumulate_if) << "GPU printer: conditionally accumulating GEMMs are made for the CPU only";
    std::ostringstream os;
    std::string pad(static_cast<size_t>(indent) * 4, ' ');
    std::string M = ints(g.M), N = ints(g.N), K = ints(g.K), a_si = ints(g.a_si), a_sk = ints(g.a_sk), c_si = ints(g.c_si);
    std::string b_sj = ints(g.b_sj), b_sk = ints(g.b_sk);
    bool coop = o.threads > 1;
    if (coop && cuda_gemm_on_tensor_cores(a.dtype, b.dtype, o)) {
        os << pad << "rf_block_gemm<" << cuda_type(a.dtype) << ", " << cuda_type(b.dtype) << ">((int)(" << M << "), (int)(" << N
           << "), (int)(" << K << "), (const " << cuda_type(a.dtype) << " *)(" << a.address << "), " << a_si << ", " << a_sk << ", (const "
           << cuda_type(b.dtype) << " *)(" << b.address << "), " << b_sj << ", " << b_sk << ", " << c.address << ", " << c_si << ", "
           << alpha << ", " << (g.accumulate ? "true" : "false") << ", (unsigned char *)rf_gemm_scratch);\n";
        return os.str();
    }
    bool ints8 = a.dtype == DType::i8 && b.dtype == DType::i8;
    std::string acc_t = ints8 ? "int" : "float";
    auto ptr = [](const GemmOperand &op, const std::string &n) {
        return (op.space.empty() ? "" : op.space + " ") + (op.is_const ? "const " : "") + op.type + " *" + n + " = " + op.address + ";";
    };
    os << pad << "{\n";
    os << pad << "    " << ptr(a, "A_") << " " << ptr(b, "B_") << " " << ptr(c, "C_") << "\n";
    os << pad << "    const int64_t M_ = " << M << ", N_ = " << N << ", K_ = " << K << "; const float al_ = " << alpha << ";\n";
    std::string start = coop ? "RF_LID" : "0", step = coop ? std::to_string(o.threads) : "1";
    // Every thread a strided set of C elements (consecutive threads consecutive columns: coalesced
    // loads of B rows when B is k-major, broadcast loads of A).
    os << pad << "    for (int64_t f_ = " << start << "; f_ < M_ * N_; f_ += " << step << ") {\n";
    os << pad << "        const int64_t i_ = f_ / N_, j_ = f_ % N_;\n";
    os << pad << "        " << acc_t << " s_ = 0;\n";
    os << pad << "        for (int64_t k_ = 0; k_ < K_; ++k_) s_ += " << element(a, "A_", "i_ * " + a_si + " + k_ * " + a_sk) << " * "
       << element(b, "B_", "j_ * " + b_sj + " + k_ * " + b_sk) << ";\n";
    os << pad << "        C_[i_ * " << c_si << " + j_] = " << (g.accumulate ? "C_[i_ * " + c_si + " + j_] + " : std::string()) << "al_ * (float)s_;\n";
    os << pad << "    }\n";
    if (coop) os << pad << "    RF_BARRIER();\n";
    os << pad << "}\n";
    return os.str();
}

}  // namespace rf
