/** \file CudaGemmReference.h
 * Host-side data of cuda_gemm_test.cpp (included by that one translation unit only): element types
 * and their decoding, operand layouts, problems, and the float64 reference the emulated and the
 * device runs are checked against.
 */
#pragma once

#include "CudaGemmEmulator.h"


// =====================================================================================================
// Host-side data, layouts and the float64 reference (shared by the emulated and the device runs).
// =====================================================================================================
namespace gemm_check {

enum class Ty { f32, bf16, f16, e4m3, e5m2, i8 };
const char *ty_name(Ty t) {
    switch (t) {
    case Ty::f32: return "float";
    case Ty::bf16: return "rf_bf16";
    case Ty::f16: return "rf_f16";
    case Ty::e4m3: return "rf_fp8e4m3";
    case Ty::e5m2: return "rf_fp8e5m2";
    case Ty::i8: return "signed char";
    }
    return "?";
}
size_t ty_bytes(Ty t) { return t == Ty::f32 ? 4 : (t == Ty::bf16 || t == Ty::f16) ? 2 : 1; }

/** Independent decoders (ldexp-based, unlike the header's bit tricks). */
double decode(Ty t, const unsigned char *p) {
    switch (t) {
    case Ty::f32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    case Ty::bf16: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return gemm_emu::decode_bf16(b);
    }
    case Ty::f16: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return gemm_emu::decode_f16(b);
    }
    case Ty::e4m3: {
        const int s = p[0] >> 7, e = (p[0] >> 3) & 15, m = p[0] & 7;
        const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
        return s ? -v : v;
    }
    case Ty::e5m2: {
        const int s = p[0] >> 7, e = (p[0] >> 2) & 31, m = p[0] & 3;
        const double v = e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);
        return s ? -v : v;
    }
    case Ty::i8: return static_cast<int8_t>(p[0]);
    }
    return 0;
}

/** A random element of type t (finite; fp8 NaN/inf codes excluded). */
void random_element(Ty t, std::mt19937 &rng, unsigned char *p) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    switch (t) {
    case Ty::f32: {
        const float f = nd(rng);
        std::memcpy(p, &f, 4);
        break;
    }
    case Ty::bf16: {
        const uint16_t b = static_cast<uint16_t>(gemm_emu::encode_bf16(nd(rng)));
        std::memcpy(p, &b, 2);
        break;
    }
    case Ty::f16: {
        const uint16_t b = static_cast<uint16_t>(gemm_emu::encode_f16(nd(rng)));
        std::memcpy(p, &b, 2);
        break;
    }
    case Ty::e4m3: {
        unsigned v;
        do v = rng() & 0xffu;
        while ((v & 0x7fu) == 0x7fu);
        p[0] = static_cast<unsigned char>(v);
        break;
    }
    case Ty::e5m2: {
        unsigned v;
        do v = rng() & 0xffu;
        while ((v & 0x7fu) >= 0x7cu);
        p[0] = static_cast<unsigned char>(v);
        break;
    }
    case Ty::i8: p[0] = static_cast<unsigned char>(rng() & 0xffu); break;
    }
}

/** Operand layouts: how A(i,k) / B(k,j) sit in memory. */
enum class Lay {
    kcontig,   // k stride 1, row stride = K + pad   (B: the "transposed" Bᵀ[n][k] form)
    rcontig,   // row stride 1, k stride = rows + pad (B: plain B[k][n])
    strided,   // k stride 2, row stride 2K + 3
    bcast,     // row stride 0 (every row the same), k stride 1
    negative,  // k stride -1, row stride K (rows forward, k backward)
};
const char *lay_name(Lay l) {
    switch (l) {
    case Lay::kcontig: return "k-contiguous";
    case Lay::rcontig: return "row-contiguous";
    case Lay::strided: return "strided";
    case Lay::bcast: return "broadcast";
    case Lay::negative: return "negative-k";
    }
    return "?";
}

/** A matrix operand (rows x K) in its memory layout: bytes, element offset of (0,0), strides. */
struct Operand {
    Ty ty = Ty::f32;
    int rows = 0, K = 0;
    long long s_row = 0, s_k = 0, origin = 0;  // element (r,k) at origin + r*s_row + k*s_k
    size_t elems = 0;
    std::vector<unsigned char> bytes;
    double at(int r, int k) const {
        return decode(ty, bytes.data() + static_cast<size_t>(origin + r * s_row + k * s_k) * ty_bytes(ty));
    }
};

Operand make_operand(Ty ty, int rows, int K, Lay lay, int misalign, std::mt19937 &rng) {
    Operand op;
    op.ty = ty;
    op.rows = rows;
    op.K = K;
    const int pad = 3;
    switch (lay) {
    case Lay::kcontig: op.s_k = 1, op.s_row = K + ((rows > 1) ? (misalign ? pad : 8) : 0); break;
    case Lay::rcontig: op.s_row = 1, op.s_k = rows + ((K > 1) ? (misalign ? pad : 8) : 0); break;
    case Lay::strided: op.s_k = 2, op.s_row = 2LL * K + 3; break;
    case Lay::bcast: op.s_row = 0, op.s_k = 1; break;
    case Lay::negative: op.s_k = -1, op.s_row = K; break;
    }
    long long lo = 0, hi = 0;
    for (long long r : {0LL, static_cast<long long>(rows - 1)})
        for (long long k : {0LL, static_cast<long long>(K - 1)}) {
            lo = std::min(lo, r * op.s_row + k * op.s_k);
            hi = std::max(hi, r * op.s_row + k * op.s_k);
        }
    // Aligned layouts start 64 bytes in; misaligned ones one element later.
    const long long lead = 64 / static_cast<long long>(ty_bytes(ty)) + misalign;
    op.origin = lead - lo;
    op.elems = static_cast<size_t>(op.origin + hi + 1 + 16);
    op.bytes.assign(op.elems * ty_bytes(ty), 0);
    for (size_t e = 0; e < op.elems; ++e) random_element(ty, rng, op.bytes.data() + e * ty_bytes(ty));
    return op;
}

/** The staging rounding of the tensor-core path: value as the mma sees it. */
double staged(double v, int ct_kind, bool tensor) {
    if (!tensor) return v;
    return ct_kind == 2 ? gemm_emu::round_small(v, 11, -24, gemm_emu::kF16Max)
                        : gemm_emu::round_small(v, 8, -133, gemm_emu::kBf16Max);
}

struct Problem {
    int M = 0, N = 0, K = 0;
    Operand a, b;
    long long c_si = 0;
    int c_rows = 0;
    float alpha = 1.0f;
    bool accumulate = false;
    std::vector<float> c0;  // initial C (NaN where unread; sentinel in the padding)
};

const float kSentinel = -12345.0f;

Problem make_problem(Ty ta, Ty tb, int M, int N, int K, Lay la, Lay lb, int misalign, bool accumulate, float alpha,
                     uint32_t seed) {
    std::mt19937 rng(seed);
    Problem p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.a = make_operand(ta, M, K, la, misalign, rng);
    p.b = make_operand(tb, N, K, lb, misalign, rng);
    p.c_si = N + 5;
    p.c_rows = M + 1;
    p.alpha = alpha;
    p.accumulate = accumulate;
    p.c0.assign(static_cast<size_t>(p.c_rows * p.c_si), kSentinel);
    std::uniform_int_distribution<int> small(-8, 8);
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j)
            p.c0[static_cast<size_t>(i * p.c_si + j)] =
                accumulate ? static_cast<float>(small(rng)) * 0.5f : std::numeric_limits<float>::quiet_NaN();
    return p;
}

/** Compares C with the float64 reference of the staged (rounded) inputs; "" when it matches. */
std::string check(const Problem &p, const std::vector<float> &c, bool tensor, int ct_kind, bool exact, double rel) {
    std::ostringstream os;
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < p.c_rows; ++i)
        for (long long j = 0; j < p.c_si; ++j) {
            const size_t idx = static_cast<size_t>(i * p.c_si + j);
            if (i >= p.M || j >= p.N) {
                if (!(c[idx] == kSentinel) && bad++ < 4) os << "  padding C[" << i << "][" << j << "] changed to " << c[idx] << "\n";
                continue;
            }
            double s = 0, mag = 0, s_unrounded = 0;
            for (int k = 0; k < p.K; ++k) {
                const double x = staged(p.a.at(i, k), ct_kind, tensor), y = staged(p.b.at(static_cast<int>(j), k), ct_kind, tensor);
                s += x * y;
                mag += std::fabs(x * y);
                s_unrounded += p.a.at(i, k) * p.b.at(static_cast<int>(j), k);
            }
            const double c0 = p.accumulate ? p.c0[idx] : 0.0;
            const double want = c0 + p.alpha * s;
            const double tol = exact ? 0.0 : rel * std::fabs(p.alpha) * mag + 4e-7 * std::fabs(want) + 1e-30;
            const double err = std::fabs(c[idx] - want);
            // A looser check against the unrounded inputs (1e-2 of sum |a||b|) must hold too.
            const double err_unrounded = std::fabs(c[idx] - (c0 + p.alpha * s_unrounded));
            const bool ok = exact ? (static_cast<double>(c[idx]) == want)
                                  : (err <= tol && err_unrounded <= 1e-2 * std::fabs(p.alpha) * mag + 4e-7 * std::fabs(want) + 1e-30);
            if (!exact && mag > 0) worst = std::max(worst, err / (std::fabs(p.alpha) * mag));
            if (!ok && bad++ < 4)
                os << "  C[" << i << "][" << j << "] = " << c[idx] << ", want " << want << " (err " << err << ", tol " << tol << ")\n";
        }
    if (bad == 0) return "";
    std::ostringstream head;
    head << bad << " wrong elements (worst relative error " << worst << ")\n" << os.str();
    return head.str();
}

std::string describe(const char *ta, const char *tb, const Problem &p, Lay la, Lay lb, int misalign, int threads) {
    std::ostringstream os;
    os << "<" << ta << ", " << tb << "> M=" << p.M << " N=" << p.N << " K=" << p.K << " A " << lay_name(la) << " B "
       << lay_name(lb) << (misalign ? " misaligned" : "") << (p.accumulate ? " accumulate" : "") << " alpha=" << p.alpha
       << " threads=" << threads;
    return os.str();
}

template <class T> constexpr Ty ty_of();
template <> constexpr Ty ty_of<float>() { return Ty::f32; }
template <> constexpr Ty ty_of<gemm_emu::rf_bf16>() { return Ty::bf16; }
template <> constexpr Ty ty_of<gemm_emu::rf_f16>() { return Ty::f16; }
template <> constexpr Ty ty_of<gemm_emu::rf_fp8e4m3>() { return Ty::e4m3; }
template <> constexpr Ty ty_of<gemm_emu::rf_fp8e5m2>() { return Ty::e5m2; }
template <> constexpr Ty ty_of<signed char>() { return Ty::i8; }

}  // namespace gemm_check
