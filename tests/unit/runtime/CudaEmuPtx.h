/** \file CudaEmuPtx.h
 * The PTX primitives of redfuse_cuda_gemm.h for the host emulator (CudaEmu.h includes it), implemented
 * from the PTX ISA's definitions independently of the header: cp.async with zero fill and
 * wait_group, ld/st.shared, ldmatrix .x4/.trans, mma.sync m16n8k16 bf16/f16 and m16n8k32 e4m3/e5m2,
 * cvt.rn.bf16x2/f16x2 and f16x2.e4m3x2/e5m2x2, dp4a. Shared addresses are offsets into the block's
 * shared memory (Block::scratch), checked for alignment, bounds, races and ldmatrix bank conflicts.
 */
#pragma once

#include "CudaEmu.h"

namespace cuda_emu {

namespace rf_gemm_ptx {

inline unsigned smem_u32(const void *p) {
    const unsigned char *c = static_cast<const unsigned char *>(p);
    if (c < g_block->scratch || c >= g_block->scratch + g_block->scratch_bytes) {
        g_errors.add("smem_u32: pointer outside the shared scratch");
        return 0;
    }
    return static_cast<unsigned>(c - g_block->scratch);
}
inline bool is_global(const void *p) {
    for (auto &r : g_block->shared_ranges)
        if (p >= r.first && p < r.second) return false;
    return true;
}
inline void cp_async16(unsigned dst, const void *src, int src_bytes) {
    if (!smem_range_ok(dst, 16, 16, "cp.async dst")) return;
    if (src_bytes < 0 || src_bytes > 16) g_errors.add("cp.async: src-size outside [0, 16]");
    if (reinterpret_cast<uintptr_t>(src) % 16 != 0) g_errors.add("cp.async: source not 16-byte aligned");
    if (!is_global(src)) g_errors.add("cp.async: source in shared memory");
    me().pending.push_back({dst, static_cast<const unsigned char *>(src), src_bytes, g_block->epoch});
}
inline void cp_async_commit() {
    me().groups.push_back(std::move(me().pending));
    me().pending.clear();
}
/** cp.async.wait_group N: all but the N most recent groups complete; their copies land now, at the
 *  latest moment the PTX model allows. */
template <int N> inline void cp_async_wait() {
    auto &groups = me().groups;
    while (groups.size() > static_cast<size_t>(N)) {
        for (const PendingCopy &cp : groups.front()) {
            track(cp.dst, 16, true, cp.epoch, "cp.async");
            unsigned char *d = g_block->scratch + cp.dst;
            std::memset(d, 0, 16);
            if (cp.bytes > 0) std::memcpy(d, cp.src, static_cast<size_t>(cp.bytes));
        }
        groups.erase(groups.begin());
    }
}
inline void st_shared_v4(unsigned addr, uint4 v) {
    if (!smem_range_ok(addr, 16, 16, "st.shared.v4")) return;
    track(addr, 16, true, g_block->epoch, "st.shared.v4");
    std::memcpy(g_block->scratch + addr, &v, 16);
}
inline void st_shared_u32(unsigned addr, unsigned v) {
    if (!smem_range_ok(addr, 4, 4, "st.shared.u32")) return;
    track(addr, 4, true, g_block->epoch, "st.shared.u32");
    std::memcpy(g_block->scratch + addr, &v, 4);
}
inline uint4 ld_shared_v4(unsigned addr) {
    uint4 v{0, 0, 0, 0};
    if (!smem_range_ok(addr, 16, 16, "ld.shared.v4")) return v;
    track(addr, 16, false, g_block->epoch, "ld.shared.v4");
    std::memcpy(&v, g_block->scratch + addr, 16);
    return v;
}

/** ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (PTX ISA "Warp-level matrix load instruction"):
 *  lanes 8q..8q+7 give the row addresses of matrix q; lane l receives in register q the elements
 *  (row l/4, columns 2(l%4) and 2(l%4)+1) of matrix q, the lower column in the low half; with .trans
 *  the matrix is read column-major: (rows 2(l%4) and 2(l%4)+1, column l/4) of the stored rows. */
inline void ldsm_impl(unsigned (&r)[4], unsigned addr, bool trans) {
    LaneIn in;
    in.op = 1;
    in.addr = addr;
    in.trans = trans;
    // The rows each lane addresses are read by that lane (for the race check).
    if (smem_range_ok(addr, 16, 16, "ldmatrix row")) track(addr, 16, false, g_block->epoch, "ldmatrix");
    LaneOut out = collective(in, [](const LaneIn *li, LaneOut *lo) {
        auto elem = [&](int q, int row, int col) -> unsigned {
            const unsigned a = li[8 * q + row].addr;
            if (a + 16 > g_block->scratch_bytes) return 0;
            uint16_t v;
            std::memcpy(&v, g_block->scratch + a + 2 * col, 2);
            return v;
        };
        for (int q = 0; q < 4; ++q) {  // bank check: the 8 rows of a matrix in 8 different 16-byte bank groups
            unsigned seen = 0;
            for (int r = 0; r < 8; ++r) seen |= 1u << ((li[8 * q + r].addr / 16) % 8);
            ++g_ldsm_phases;
            if (seen != 0xffu) ++g_ldsm_conflicted_phases;
        }
        for (int l = 0; l < 32; ++l)
            for (int q = 0; q < 4; ++q) {
                unsigned lo16, hi16;
                if (!li[0].trans) {
                    lo16 = elem(q, l / 4, 2 * (l % 4));
                    hi16 = elem(q, l / 4, 2 * (l % 4) + 1);
                } else {
                    lo16 = elem(q, 2 * (l % 4), l / 4);
                    hi16 = elem(q, 2 * (l % 4) + 1, l / 4);
                }
                lo[l].r[q] = lo16 | (hi16 << 16);
            }
    });
    for (int q = 0; q < 4; ++q) r[q] = out.r[q];
}
inline void ldsm_x4_sel(unsigned (&r)[4], unsigned addr, bool trans) { ldsm_impl(r, addr, trans); }
inline void ldsm_x4(unsigned (&r)[4], unsigned addr) { ldsm_impl(r, addr, false); }

/** mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 with the fragment layouts of the
 *  PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), g = lane>>2, t = lane%4:
 *  A: a0,a1 (row g, col 2t+i), a2,a3 (row g+8), a4,a5 (row g, col 2t+8+i), a6,a7 (row g+8, col 2t+8+i);
 *  B: b0,b1 (row 2t+i, col g), b2,b3 (row 2t+8+i, col g);  C/D: c0,c1 (row g, col 2t+i), c2,c3 (row g+8).
 *  Products are exact and the sum is formed in float64, then rounded once. */
inline void mma_impl(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, int kind) {
    LaneIn in;
    in.op = 2;
    in.kind = kind;
    for (int i = 0; i < 4; ++i) in.a[i] = a[i], in.c[i] = d[i];
    in.b[0] = b0;
    in.b[1] = b1;
    LaneOut out = collective(in, [](const LaneIn *li, LaneOut *lo) {
        auto dec = [&](unsigned bits) { return li[0].kind == 1 ? decode_bf16(bits) : decode_f16(bits); };
        double A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 8; ++i) {
                const unsigned bits = (li[l].a[i / 2] >> (16 * (i & 1))) & 0xffffu;
                const int row = g + ((i & 2) ? 8 : 0), col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
                A[row][col] = dec(bits);
            }
            for (int i = 0; i < 4; ++i) {
                const unsigned bits = (li[l].b[i / 2] >> (16 * (i & 1))) & 0xffffu;
                B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = dec(bits);
            }
            for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = li[l].c[i];
        }
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 4; ++i) {
                const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
                double s = C[row][col];
                for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
                lo[l].d[i] = static_cast<float>(s);
            }
        }
    });
    for (int i = 0; i < 4; ++i) d[i] = out.d[i];
}
/** mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32 with the fragment layouts of the PTX
 *  ISA ("Matrix Fragments for mma.m16n8k32", shared by the 8-bit types), g = lane>>2, t = lane%4, byte i
 *  of a register (low byte first) the i-th element: A: a0..a3 (row g, col 4t+i), a4..a7 (row g+8),
 *  a8..a11 (row g, col 16+4t+i), a12..a15 (row g+8, col 16+4t+i); B: b0..b3 (row 4t+i, col g),
 *  b4..b7 (row 16+4t+i, col g); C/D as for m16n8k16. Exact products, float64 sum, one rounding. */
inline void mma_k32_impl(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, int kind) {
    LaneIn in;
    in.op = 2;
    in.kind = kind;
    for (int i = 0; i < 4; ++i) in.a[i] = a[i], in.c[i] = d[i];
    in.b[0] = b0;
    in.b[1] = b1;
    LaneOut out = collective(in, [](const LaneIn *li, LaneOut *lo) {
        const bool ae5 = ((li[0].kind - 3) & 2) != 0, be5 = ((li[0].kind - 3) & 1) != 0;
        double A[16][32], B[32][8], C[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 16; ++i) {
                const unsigned bits = (li[l].a[i / 4] >> (8 * (i & 3))) & 0xffu;
                const int row = g + ((i / 4) & 1) * 8, col = 4 * t + (i & 3) + (i >= 8 ? 16 : 0);
                A[row][col] = ae5 ? decode_e5m2(bits) : decode_e4m3(bits);
            }
            for (int i = 0; i < 8; ++i) {
                const unsigned bits = (li[l].b[i / 4] >> (8 * (i & 3))) & 0xffu;
                B[4 * t + (i & 3) + (i >= 4 ? 16 : 0)][g] = be5 ? decode_e5m2(bits) : decode_e4m3(bits);
            }
            for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = li[l].c[i];
        }
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 4; ++i) {
                const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
                double s = C[row][col];
                for (int k = 0; k < 32; ++k) s += A[row][k] * B[k][col];
                lo[l].d[i] = static_cast<float>(s);
            }
        }
    });
    for (int i = 0; i < 4; ++i) d[i] = out.d[i];
}
template <bool AE5, bool BE5> inline void mma_fp8(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    mma_k32_impl(d, a, b0, b1, 3 + (AE5 ? 2 : 0) + (BE5 ? 1 : 0));
}
/** cvt.rn.f16x2.{e4m3x2,e5m2x2} on each half of v (the lower byte to the lower half): exact. */
template <bool E5> inline void fp8x4_to_f16x4(unsigned v, unsigned &lo, unsigned &hi) {
    auto f16 = [](unsigned byte) { return encode_f16(static_cast<float>(E5 ? decode_e5m2(byte) : decode_e4m3(byte))); };
    lo = f16(v & 0xffu) | (f16((v >> 8) & 0xffu) << 16);
    hi = f16((v >> 16) & 0xffu) | (f16(v >> 24) << 16);
}
inline void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { mma_impl(d, a, b0, b1, 1); }
inline void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { mma_impl(d, a, b0, b1, 2); }
inline unsigned pack_bf16x2(float lo, float hi) { return encode_bf16(lo) | (encode_bf16(hi) << 16); }
inline unsigned pack_f16x2(float lo, float hi) { return encode_f16(lo) | (encode_f16(hi) << 16); }
inline int dp4a(int a, int b, int c) {
    int64_t s = c;
    for (int i = 0; i < 4; ++i) s += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
    return static_cast<int>(static_cast<uint32_t>(s));  // wraps like the hardware
}

}  // namespace rf_gemm_ptx

}  // namespace cuda_emu
