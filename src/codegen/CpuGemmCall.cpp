/** \file CpuGemmCall.cpp
 * The runtime GEMM a CPU tile GEMM calls (CpuGemmCall.h): A·Bᵀ, Aᵀ·B and accumulating A·B forms by
 * operand types, with the variants that keep an input's packing or round a float operand to bf16.
 */
#include "codegen/CpuGemmCall.h"

namespace rf {

namespace {

std::string element(const std::string &ptr, DType t, const std::string &at) {
    std::string e = ptr + "[" + at + "]";
    switch (t) {
    case DType::bf16: return "rfk::bf16_to_float(" + e + ")";
    case DType::f16: return "rfk::f16_to_float(" + e + ")";
    case DType::f8e4m3: return "rfk::f8e4m3_to_float(" + e + ")";
    case DType::f8e5m2: return "rfk::f8e5m2_to_float(" + e + ")";
    default: return "(float)" + e;
    }
}

}  // namespace

std::string cpu_gemm_call(const tile::GemmInfo &g, const CpuGemmOperands &o, bool round_tile_products) {
    const DType ta = o.a_type, tb = o.b_type;
    const bool f32a = ta == DType::f32, f32b = tb == DType::f32, bfa = ta == DType::bf16, bfb = tb == DType::bf16;
    // B read straight from an input of the kernel: constant while it runs, so the GEMMs that pack it
    // (AMX tile panels) may keep the packing for the thread's next call on the same B (input_epoch).
    const bool b_input = o.b_input;
    if (g.trans_b && !g.a_transposed()) {
        std::string head = "(" + o.M + ", " + o.N + ", " + o.K + ", " + o.alpha + ", " + o.A + ", " + o.lda + ", " + o.B + ", " +
                           o.b_sj + ", " + o.C + ", " + o.ldc + ", " + o.accumulate;
        std::string args = head + ");";
        if (f32a && f32b) return (b_input ? "rfk::gemm_nt_f32_input_b" : "rfk::gemm_nt_f32") + args;
        if (bfa && bfb)  // a_input: A read from an input as well, whose packing may be kept too
            return (b_input ? "rfk::gemm_nt_bf16_input_b" : "rfk::gemm_nt_bf16") + head + (o.a_input ? ", true);" : ");");
        if (f32a && bfb) return (round_tile_products ? "rfk::gemm_nt_f32_as_bf16" : "rfk::gemm_nt_f32_bf16") + args;
        if (f32a && tb == DType::f8e4m3) return "rfk::gemm_nt_f32_f8e4m3" + args;
        if (f32a && tb == DType::f8e5m2) return "rfk::gemm_nt_f32_f8e5m2" + args;
        if (f32a && tb == DType::f16) return "rfk::gemm_nt_f32_f16" + args;
        if (ta == DType::i8 && tb == DType::i8 && g.alpha->is_const(1)) return "rfk::gemm_nt_s8_to_f32" + args;
    } else if (g.accumulate && g.alpha->is_const(1) && g.a_transposed()) {
        // Aᵀ·B: A stored with its rows along k (a row-reduced member's tile, LowerRowReduced.cpp).
        std::string args = "(" + o.M + ", " + o.N + ", " + o.K + ", " + o.A + ", " + o.a_sk + ", " + o.B + ", " + o.b_sk + ", " +
                           o.C + ", " + o.ldc + ");";
        if (f32a && f32b) return "rfk::gemm_tn_acc_f32" + args;
        if (f32a && bfb) return (round_tile_products ? "rfk::gemm_tn_acc_f32_as_bf16" : "rfk::gemm_tn_acc_f32_bf16") + args;
    } else if (g.accumulate && g.alpha->is_const(1)) {
        std::string args = "(" + o.M + ", " + o.N + ", " + o.K + ", " + o.A + ", " + o.lda + ", " + o.B + ", " + o.b_sk + ", " +
                           o.C + ", " + o.ldc + ");";
        if (f32a && f32b) return (b_input ? "rfk::gemm_nn_acc_f32_input_v" : "rfk::gemm_nn_acc_f32") + args;
        if (f32a && bfb)
            return (!round_tile_products ? "rfk::gemm_nn_acc_f32_bf16" : b_input ? "rfk::gemm_nn_acc_f32_as_bf16_input_v" : "rfk::gemm_nn_acc_f32_as_bf16") +
                   args;
    }
    return "";
}

std::string cpu_gemm_loops(const tile::GemmInfo &g, const CpuGemmOperands &o, int ind) {
    const std::string indent(4 * static_cast<size_t>(ind), ' '), in1 = indent + "    ", in2 = in1 + "    ";
    std::string s = indent + "{ const auto *A_ = " + o.A + "; const auto *B_ = " + o.B + "; float *C_ = " + o.C + ";\n";
    s += in1 + "for (int64_t i_ = 0; i_ < " + o.M + "; ++i_) for (int64_t n_ = 0; n_ < " + o.N + "; ++n_) {\n";
    s += in2 + "float s_ = 0; for (int64_t k_ = 0; k_ < " + o.K + "; ++k_) s_ += " +
         element("A_", o.a_type, "i_ * " + o.lda + " + k_ * " + o.a_sk) + " * " +
         element("B_", o.b_type, "n_ * " + o.b_sj + " + k_ * " + o.b_sk) + ";\n";
    const std::string c_elem = "C_[i_ * " + o.ldc + " + n_]";
    if (g.accumulate_if)
        s += in2 + c_elem + " = " + o.accumulate + " ? " + c_elem + " + " + o.alpha + " * s_ : " + o.alpha + " * s_;\n";
    else
        s += in2 + c_elem + " = " + (g.accumulate ? c_elem + " + " : std::string()) + o.alpha + " * s_;\n";
    s += in1 + "}\n";
    s += indent + "}\n";
    return s;
}

}  // namespace rf
