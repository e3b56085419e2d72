// redfuse_cuda_gemm_tc.h: the tensor-core path of rf_block_gemm (staging, ldmatrix fragments, mma.sync).
//
// Second of the three texts pasted, in order, into generated CUDA (redfuse_cuda_gemm.h,
// redfuse_cuda_gemm_tc.h, redfuse_cuda_gemm_simt.h; CMake embeds their concatenation as
// kEmbeddedCudaGemmHeader); the contract, tunables and PTX primitives are in redfuse_cuda_gemm.h.
#ifndef REDFUSE_CUDA_GEMM_TC_H
#define REDFUSE_CUDA_GEMM_TC_H
#ifndef REDFUSE_CUDA_GEMM_H
#error "redfuse_cuda_gemm.h must come first"
#endif

namespace rf_gemm_detail {

// ---- tensor-core path --------------------------------------------------------------------------
//
// Tile shapes. A warp owns a WM x WN block of C (64x64 for <= 256 threads): per k16 step it loads
// WM/16 A fragments and WN/16 B fragment pairs with ldmatrix.x4 and issues (WM/16)*(WN/8)
// mma.m16n8k16 (2048 FMA each). Shared memory is the limit to beat: an SM reads 128 B/clock, and
// mma.sync bf16 on H100/H200 sustains roughly 1000-1300 dense FMA/clock/SM (about 60% of the
// wgmma peak), so the tensor pipe stays the bottleneck only above ~8-10 FMA per shared byte:
//   warp tile 32x32:  8 mma / 4 ldmatrix.x4 (2 KiB)  =  8 FMA/B  (shared-memory bound)
//   warp tile 64x32: 16 mma / 6 ldmatrix.x4 (3 KiB)  = 10.7 FMA/B
//   warp tile 64x64: 32 mma / 8 ldmatrix.x4 (4 KiB)  = 16 FMA/B; with the staging stores (16 KiB
//                    per 128x128x32 chunk, 32 FMA/B) 10.7 FMA/B overall.
// 64x64 needs 128 accumulators a thread, hence ~250 registers and at most 256 threads.
// The warps of a block are arranged WR x WC over a block tile of (WR*WM) x (WC*WN) (at most 256
// operand rows in total: 128x128 for four 64x64 warps), chosen per call from M, N and the warp
// count; warps beyond WR*WC form G split-K groups that take alternate k16 steps of the same
// staged chunk (8 warps at M=N=128: two groups of 4) and add their partial tiles into C in turn.
// K is staged in chunks of BK = 32 (two k16 steps) into a ring of S stages (RF_GEMM_STAGES,
// default 2) of 16 KiB, each holding (WR*WM + WC*WN) rows x 64 bytes, so a 128x128 tile's chunk
// is 16 KiB. The copy of chunk kc + S - 1 (cp.async when possible) is issued right after the
// barrier that retires chunk kc - 1's stage, one barrier per chunk, and overlaps the current
// chunk's 64 mma per warp.
// The fp8 path (both operands e4m3/e5m2, sm_89+) keeps all of this in bytes: a region row still
// holds 64 bytes, now 64 k (two k32 steps of mma.m16n8k32), so stages, swizzles and ldmatrix
// addresses are unchanged and a chunk carries twice the k: twice the FMA per staged byte.
constexpr int kBK = 32;                 // k per staged chunk of 16-bit elements (two k16 steps)
constexpr int kStageBytes = 16384;      // one stage: up to 256 rows x 64 bytes
constexpr int kStages = RF_GEMM_STAGES;
static_assert(kStages >= 2 && kStages <= 4, "2 to 4 stages");
constexpr int kTcWMx = RF_GEMM_WARP_M;  // warp tile rows
constexpr int kTcWN = RF_GEMM_WARP_N;   // warp tile columns
static_assert((kTcWMx == 32 || kTcWMx == 64) && (kTcWN == 32 || kTcWN == 64), "warp tiles are 32 or 64 wide");
constexpr int kMI = kTcWMx / 16;   // m16 fragments per warp
constexpr int kNJ = kTcWN / 8;     // n8 fragments per warp (even: loaded in pairs)
static_assert(kNJ % 2 == 0, "B fragments are loaded in pairs");
// k per staged chunk for staging type ct: 64 bytes a region row (32 bf16/f16, 64 e4m3/e5m2).
__host__ __device__ constexpr int chunk_k(int ct) { return kBK * 2 / kind_bytes(ct); }

// Shared-memory layout of a staged operand region. Units are 16-byte chunks (8 16-bit or 16 8-bit
// elements). A region is [outer][inner] with inner contiguous: K-major (outer = m or n, inner = the
// chunk's k, 64 bytes = 4 units per row) when the source's k stride is 1 or the source is not
// contiguous along m/n; MN-major (outer = the 32 k, inner = the rows of the block tile) when the
// source is contiguous along m/n. Either way the global copy reads contiguous runs, and ldmatrix
// (.trans for MN-major) produces the same fragments. 8-bit staging (the fp8 path) is K-major
// always: .trans moves 16-bit elements and cannot transpose bytes (sm_89/sm_90 have no 8-bit
// form), so an fp8 source contiguous along m/n is transposed element by element while staging.
// Unit (o, c) lives at o * (16 << log_cpr) + (swz << 4) where log_cpr = log2(units per row) and
// swz XORs c with bits of o so that the eight 16-byte rows one ldmatrix phase reads (8 consecutive
// o at a fixed c) fall in eight different bank groups:
//   cpr = 4 (K-major): swz = c ^ ((o >> 1) & 3)   (the byte offset mod 128 is 64*(o&1) + 16*swz)
//   cpr >= 8 (MN-major): swz = c ^ (o & 7)        (the byte offset mod 128 is 16*(swz&7))
__device__ __forceinline__ int swz(int o, int c, int log_cpr) {
    return log_cpr == 2 ? (c ^ ((o >> 1) & 3)) : (c ^ (o & 7));
}

// One 16-byte unit: the consecutive elements along the region's inner dimension it holds (8 in a
// 16-bit staging type CT, 16 raw 8-bit ones), converted to CT and packed in order (element e in
// the lowest free bits: 16-bit element 2e in the low half of word e, byte e in byte e % 4 of word
// e / 4). nv = how many are valid (the rest are zero); vec: the unit's elements are contiguous and
// aligned for one vector load.
template <int CT, class T>
__device__ __forceinline__ uint4 load_unit(const T *p, long long si, int nv, bool vec) {
    constexpr int kind = type_of<T>::kind;
    if constexpr (kind == CT) {
        if (vec && nv == 16 / type_of<T>::bytes) return *reinterpret_cast<const uint4 *>(p);
        unsigned long long lo = 0, hi = 0;  // elements 0-3 and 4-7, 16 bits each (8-bit: 0-7, 8-15)
RF_GEMM_UNROLL_NOT
        for (int e = 0; e < nv; ++e) {
            const unsigned long long v = raw_bits(p[e * si]);
            if constexpr (type_of<T>::bytes == 1) {
                if (e < 8) lo |= v << (8 * e);
                else hi |= v << (8 * (e - 8));
            } else {
                if (e < 4) lo |= v << (16 * e);
                else hi |= v << (16 * (e - 4));
            }
        }
        return make_uint4(static_cast<unsigned>(lo), static_cast<unsigned>(lo >> 32), static_cast<unsigned>(hi),
                          static_cast<unsigned>(hi >> 32));
    } else {
        if (!(vec && nv == 8)) {  // strided, unaligned or a tail: element pairs, not unrolled
            unsigned long long lo = 0, hi = 0;
RF_GEMM_UNROLL_NOT
            for (int e = 0; e < nv; e += 2) {
                const float f0 = to_f32(p[e * si]), f1 = e + 1 < nv ? to_f32(p[(e + 1) * si]) : 0.0f;
                const unsigned long long w = pack2<CT>(f0, f1);
                if (e < 4) lo |= w << (16 * e);
                else hi |= w << (16 * (e - 4));
            }
            return make_uint4(static_cast<unsigned>(lo), static_cast<unsigned>(lo >> 32), static_cast<unsigned>(hi),
                              static_cast<unsigned>(hi >> 32));
        }
        float f[8];  // one aligned vector load, then the conversions
        if constexpr (kind == kF32) {
            const float4 x = reinterpret_cast<const float4 *>(p)[0], y = reinterpret_cast<const float4 *>(p)[1];
            f[0] = x.x; f[1] = x.y; f[2] = x.z; f[3] = x.w;
            f[4] = y.x; f[5] = y.y; f[6] = y.z; f[7] = y.w;
        } else if constexpr (type_of<T>::bytes == 2) {
            const uint4 v = *reinterpret_cast<const uint4 *>(p);
            const unsigned w[4] = {v.x, v.y, v.z, v.w};
RF_GEMM_UNROLL
            for (int e = 0; e < 8; ++e) f[e] = to_f32(from_raw<T>((w[e >> 1] >> ((e & 1) * 16)) & 0xffffu));
        } else {
            const uint2 v = *reinterpret_cast<const uint2 *>(p);
RF_GEMM_UNROLL
            for (int e = 0; e < 8; ++e) f[e] = to_f32(from_raw<T>(((e < 4 ? v.x : v.y) >> ((e & 3) * 8)) & 0xffu));
        }
        return make_uint4(pack2<CT>(f[0], f[1]), pack2<CT>(f[2], f[3]), pack2<CT>(f[4], f[5]), pack2<CT>(f[6], f[7]));
    }
}

// How one operand is read: the region view (outer/inner extents and strides) and the copy mode.
enum { kCopyScalar = 0, kCopyVector = 1, kCopyAsync = 2 };
template <class T> struct operand {
    const T *p;
    long long so, si;  // element strides along outer and inner
    int ext_o, ext_i;  // extents along outer and inner
    int mn;            // 1: MN-major region (outer = k), 0: K-major (outer = m or n)
    int mode;          // kCopy*
};

// The view and copy mode of an operand with `rows` rows (M or N), row stride s_row, k stride s_k.
template <int CT, class T>
__device__ __forceinline__ operand<T> make_operand(const T *p, int rows, int K, long long s_row, long long s_k) {
    operand<T> op;
    op.p = p;
    if (K == 1) s_k = 1;        // a single k: its stride is irrelevant
    if (rows == 1) s_row = 1;   // likewise a single row
    op.mn = (kind_bytes(CT) == 2 && s_k != 1 && s_row == 1) ? 1 : 0;  // 8-bit staging: K-major only
    if (op.mn) { op.so = s_k; op.si = 1; op.ext_o = K; op.ext_i = rows; }
    else { op.so = s_row; op.si = s_k; op.ext_o = rows; op.ext_i = K; }
    op.mode = kCopyScalar;
    if (op.si == 1) {
        constexpr int bytes = type_of<T>::bytes;
        const unsigned long long addr = reinterpret_cast<unsigned long long>(p);
        // One unit from one aligned load: uint2 (8 x 8-bit, converted), uint4 (8 x 16-bit or 16 raw
        // 8-bit) or 2 x float4.
        const int align = bytes == 1 && kind_bytes(CT) == 2 ? 8 : 16;
        const bool row_ok = op.ext_o == 1 || ((op.so * bytes) % align) == 0;
        if (row_ok && (addr % align) == 0) {
            op.mode = kCopyVector;
            if (type_of<T>::kind == CT && rf_gemm_ptx::is_global(p)) op.mode = kCopyAsync;
        }
    }
    return op;
}

// Stage one operand's part of a chunk: region origin (o0, i0) in (outer, inner) coordinates,
// 2^log_cpr units per region row, `units` units in all (2^log_rows rows; used by 8-bit staging),
// at shared address `region`.
template <int CT, class T>
__device__ __forceinline__ void stage_operand(const operand<T> &op, unsigned region, int o0, int i0, int log_cpr,
                                              int units, int log_rows) {
    constexpr int lepu = kind_bytes(CT) == 1 ? 4 : 3;  // log2 of the elements in a unit
    const int tid = threadIdx.x, nthr = blockDim.x, cmask = (1 << log_cpr) - 1;
    if (op.mode == kCopyAsync) {
        for (int u = tid; u < units; u += nthr) {
            const int o = u >> log_cpr, c = u & cmask;
            const int go = o0 + o, gi = i0 + (c << lepu);
            const int nv = go < op.ext_o ? imin(imax(op.ext_i - gi, 0), 1 << lepu) : 0;
            const T *src = nv > 0 ? op.p + go * op.so + gi : op.p;
            rf_gemm_ptx::cp_async16(region + (o << (log_cpr + 4)) + (swz(o, c, log_cpr) << 4), src, nv * kind_bytes(CT));
        }
    } else {
        // Unit u -> (region row o, unit c of the row): c varies fastest, so consecutive threads read
        // consecutive pieces of a source row; except for an 8-bit operand contiguous along m/n
        // (so == 1, staged K-major all the same), where o varies fastest so that each of a unit's
        // 16 byte loads reads consecutive bytes across a warp. Its stores stay conflict-free: 8
        // consecutive rows at one c sit at byte offsets 64 (o & 1) + 16 (c ^ ((o >> 1) & 3)) mod 128,
        // eight different 16-byte bank groups.
        const bool rows_first = kind_bytes(CT) == 1 && op.so == 1 && op.ext_o > 1;
        auto place = [&](int u, int &o, int &c) {
            if (rows_first) {
                o = u & ((1 << log_rows) - 1);
                c = u >> log_rows;
            } else {
                o = u >> log_cpr;
                c = u & cmask;
            }
        };
        const bool vec = op.mode == kCopyVector;
        // Two units per thread in flight: both loads first, then conversions and stores.
        for (int u0 = tid; u0 < units; u0 += 2 * nthr) {
            uint4 v[2];
RF_GEMM_UNROLL
            for (int x = 0; x < 2; ++x) {
                const int u = u0 + x * nthr;
                int o, c;
                place(u, o, c);
                const int go = o0 + o, gi = i0 + (c << lepu);
                const int nv = (u < units && go < op.ext_o) ? imin(imax(op.ext_i - gi, 0), 1 << lepu) : 0;
                v[x] = load_unit<CT>(op.p + (nv > 0 ? go * op.so + gi * op.si : 0), op.si, nv, vec);
            }
RF_GEMM_UNROLL
            for (int x = 0; x < 2; ++x) {
                const int u = u0 + x * nthr;
                int o, c;
                place(u, o, c);
                if (u < units) rf_gemm_ptx::st_shared_v4(region + (o << (log_cpr + 4)) + (swz(o, c, log_cpr) << 4), v[x]);
            }
        }
    }
}

struct tc_shape {
    int lwr, lwc;  // log2 of the warp grid WR x WC
    int groups;    // split-K groups
};

// Choose the warp grid for an M x N problem with W warps: minimize the estimated time
// tiles x (chunks x k-steps-per-chunk-per-group + 2 chunks of prologue/epilogue), then prefer
// more busy warps. bk: k per chunk.
__device__ __forceinline__ tc_shape tc_choose(int M, int N, int K, int W, int bk) {
    const int chunks = (K + bk - 1) / bk;
    tc_shape best = {0, 0, W};
    long long best_cost = -1;
    int best_busy = 0;
    for (int lwr = 0; lwr <= 3; ++lwr)
        for (int lwc = 0; lwc <= 3; ++lwc) {
            const int wr = 1 << lwr, wc = 1 << lwc;
            if (wr * kTcWMx + wc * kTcWN > 256 || wr * wc > W) continue;
            const int groups = W / (wr * wc);
            const long long tiles = static_cast<long long>((M + wr * kTcWMx - 1) / (wr * kTcWMx)) *
                                    ((N + wc * kTcWN - 1) / (wc * kTcWN));
            const int steps = groups >= 2 ? 1 : 2;
            const long long cost = tiles * (static_cast<long long>(chunks) * steps + 2);
            const int busy = wr * wc * (groups < 2 ? groups : 2);
            if (best_cost < 0 || cost < best_cost || (cost == best_cost && busy > best_busy)) {
                best_cost = cost;
                best_busy = busy;
                best = {lwr, lwc, groups};
            }
        }
    return best;
}

template <class TA, class TB> struct tc_args {
    operand<TA> a;
    operand<TB> b;
    int M, N, K;
    float *c;
    long long c_si;
    float alpha;
    bool accumulate;
    unsigned smem;  // shared address of the scratch
    tc_shape shape;
};

// Fragment loads. mma.m16n8k16's fragments (PTX ISA, .bf16/.f16), g = lane / 4, t = lane % 4:
//   A (16x16, row): reg0 = (row g, k 2t..2t+1), reg1 = (row g+8, k 2t..), reg2 = (row g, k 8+2t..),
//                   reg3 = (row g+8, k 8+2t..)  (the lower k in the low 16 bits)
//   B (16x8, col):  reg0 = (k 2t..2t+1, col g), reg1 = (k 8+2t.., col g)
//   C (16x8, f32):  c0, c1 = (row g, col 2t, 2t+1), c2, c3 = (row g+8, col 2t, 2t+1)
// ldmatrix.x4: lanes 8q..8q+7 address the 8 rows (16 bytes each) of matrix q, and register q of
// lane l receives (row l/4, columns 2(l%4), 2(l%4)+1) of matrix q; with .trans it receives the
// transposed matrix's, i.e. (columns l/4 of stored rows 2(l%4) and 2(l%4)+1).
// So for A, matrix q must be (rows 8(q&1).., k 8(q>>1)..); for a pair of n8 tiles of B, matrix q
// is (n 8(q>>1).., k 8(q&1)..), registers {0,1} feeding n8 tile 0 and {2,3} tile 1:
//   A K-major (stored rows m): lane addresses row m = (lane & 15), k unit 2j + (lane >> 4).
//   A MN-major (stored rows k, .trans): k row 16j + 8(q>>1) + (lane&7), m unit 2i + (q&1).
//   B K-major (stored rows n): row n = 8(q>>1) + (lane&7), k unit 2j + (q&1).
//   B MN-major (stored rows k, .trans): k row 16j + 8(q&1) + (lane&7), n unit 2pj + (q>>1).
// A non-transposed stored (n, k) 8x8 gives lane (n = l/4, k = 2t..), B's layout; a transposed
// stored (k, m) 8x8 gives (m = l/4, k = 2t..), A's layout. Byte offset of a fragment (i or pj,
// k16 step j) = off[i] + j * dj: the swizzles keep the j dependence affine (K-major: the unit
// changes from c to c ^ 2, i.e. +-2 units, the sign a lane constant; MN-major: +16 rows).
// mma.m16n8k32 with .e4m3/.e5m2 (PTX ISA "Matrix Fragments for mma.m16n8k32", the 8-bit layout):
//   A (16x32, row): reg0 = (row g, k 4t..4t+3), reg1 = (row g+8, k 4t..), reg2 = (row g, k 16+4t..),
//                   reg3 = (row g+8, k 16+4t..)  (the lower k in the lower byte)
//   B (32x8, col):  reg0 = (k 4t..4t+3, col g), reg1 = (k 16+4t.., col g);  C as above.
// In bytes this is the k16 layout with each 16-bit pair (k 2t, 2t+1) read as four bytes (k 4t..4t+3):
// ldmatrix without .trans gives lane l the bytes 4(l%4)..4(l%4)+3 of row l/4 of each 8 x 16-byte
// matrix, so in a K-major region (64 bytes = 64 k a row) the K-major byte offsets above give the
// fp8 fragments of k32 step j (the first 32 bytes of a row are step 0, as for k16 step 0).
struct frag_offsets {
    int a[kMI], b[kNJ / 2];
    int da, db;
};
__device__ __forceinline__ frag_offsets tc_frag_offsets(int lane, int wm0, int wn0, bool amn, bool bmn, int lcpr_a,
                                                        int lcpr_b) {
    frag_offsets f;
    const int q = lane >> 3, rr = lane & 7;
    // K-major: o = row, unit c_j = (2j + h) ^ x with x = ((o >> 1) & 3), o = 16i + (lane & 15) + wm0
    // (wm0 a multiple of 16, so x only depends on the lane); c_1 - c_0 = (x & 2) ? -2 : 2.
    // MN-major: the row o = 16j + (lane-dependent part); swz only reads o's low 3 bits, so the
    // j step is 16 rows. (A 32-row region has 4 units per row and uses the cpr = 4 swizzle.)
RF_GEMM_UNROLL
    for (int i = 0; i < kMI; ++i) {
        if (!amn) {
            const int o = wm0 + 16 * i + (lane & 15), x = (lane >> 1) & 3;
            f.a[i] = (o << 6) + (((lane >> 4) ^ x) << 4);
        } else {
            const int o = ((q >> 1) << 3) + rr;
            f.a[i] = (o << (lcpr_a + 4)) + (swz(o, ((wm0 + 16 * i) >> 3) + (q & 1), lcpr_a) << 4);
        }
    }
    f.da = amn ? (16 << (lcpr_a + 4)) : ((((lane >> 1) & 3) & 2) ? -32 : 32);
RF_GEMM_UNROLL
    for (int pj = 0; pj < kNJ / 2; ++pj) {
        if (!bmn) {
            const int o = wn0 + 16 * pj + ((q >> 1) << 3) + rr, x = (rr >> 1) & 3;
            f.b[pj] = (o << 6) + (((q & 1) ^ x) << 4);
        } else {
            const int o = ((q & 1) << 3) + rr;
            f.b[pj] = (o << (lcpr_b + 4)) + (swz(o, ((wn0 + 16 * pj) >> 3) + (q >> 1), lcpr_b) << 4);
        }
    }
    f.db = bmn ? (16 << (lcpr_b + 4)) : ((((rr >> 1) & 3) & 2) ? -32 : 32);
    return f;
}

// One k32 step of the fp8 path where the target has no 8-bit mma.sync (sm_90, sm_100: their fp8
// tensor cores are reached through wgmma / tcgen05; ptxas lowers mma.m16n8k32 .e4m3 to unpacks
// and f16 mma itself, but converts every fragment at once and spills at 64x64 warp tiles). Here
// the step is two f16 mma.m16n8k16 halves, unpacked one half at a time: half h is A registers
// 2h, 2h+1 and B register h (k 16h..16h+15), and each fp8 register (4 consecutive k) unpacks into
// two f16x2 registers, so the f16 mma's k order (2t, 2t+1 | 8+2t, 9+2t) stands for
// (16h+4t, +1 | 16h+4t+2, +3), for A and B alike: the same sum over k. Every fp8 value is exact in
// f16, and f16 products are exact in the fp32 accumulation. af: the step's A fragments; sb: the
// B region of the step; the second half's B registers are kept from the first half's ldmatrix.
template <bool AE5, bool BE5>
__device__ __forceinline__ void tc_step_fp8_unpacked(float (&acc)[kMI][kNJ][4], const unsigned (&af)[kMI][4], unsigned sb,
                                                     const frag_offsets &fo) {
    unsigned bk[kNJ / 2][2];
RF_GEMM_UNROLL
    for (int h = 0; h < 2; ++h) {
        unsigned a16[kMI][4];
RF_GEMM_UNROLL
        for (int i = 0; i < kMI; ++i) {
            rf_gemm_ptx::fp8x4_to_f16x4<AE5>(af[i][2 * h], a16[i][0], a16[i][2]);
            rf_gemm_ptx::fp8x4_to_f16x4<AE5>(af[i][2 * h + 1], a16[i][1], a16[i][3]);
        }
RF_GEMM_UNROLL
        for (int pj = 0; pj < kNJ / 2; ++pj) {
            unsigned b0, b1;  // this half's fp8 B registers of n8 tiles 2pj and 2pj + 1
            if (h == 0) {
                unsigned bq[4];
                rf_gemm_ptx::ldsm_x4(bq, sb + fo.b[pj]);
                b0 = bq[0];
                b1 = bq[2];
                bk[pj][0] = bq[1];
                bk[pj][1] = bq[3];
            } else {
                b0 = bk[pj][0];
                b1 = bk[pj][1];
            }
            unsigned c0, c1, d0, d1;
            rf_gemm_ptx::fp8x4_to_f16x4<BE5>(b0, c0, c1);
            rf_gemm_ptx::fp8x4_to_f16x4<BE5>(b1, d0, d1);
RF_GEMM_UNROLL
            for (int i = 0; i < kMI; ++i) {
                rf_gemm_ptx::mma_f16(acc[i][2 * pj], a16[i], c0, c1);
                rf_gemm_ptx::mma_f16(acc[i][2 * pj + 1], a16[i], d0, d1);
            }
        }
    }
}

// All C tiles of the problem. CA, CB: the staging types (equal, bf16 or f16; or e4m3/e5m2 each,
// the fp8 path, with its k32 steps on the fp8 mma or, UNPACK, as f16 halves).
template <int CA, int CB, bool UNPACK, class TA, class TB>
__device__ __forceinline__ void tc_run(const tc_args<TA, TB> &g) {
    constexpr bool F8 = kind_bytes(CA) == 1;
    static_assert(kind_bytes(CA) == kind_bytes(CB) && (F8 || CA == CB), "one staging width, one 16-bit type");
    constexpr int BK = chunk_k(CA);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wr = 1 << g.shape.lwr, wc = 1 << g.shape.lwc, slots = wr * wc, groups = g.shape.groups;
    const int rows_a = wr * kTcWMx, rows_b = wc * kTcWN;  // block tile
    const int grp = warp / slots, slot = warp - grp * slots;
    const int wm0 = (slot & (wr - 1)) * kTcWMx, wn0 = (slot >> g.shape.lwr) * kTcWN;
    const bool amn = !F8 && g.a.mn != 0, bmn = !F8 && g.b.mn != 0;
    // Region geometry: log2(units per region row); K-major rows hold the chunk's k (64 bytes, 4 units).
    const int lrows_a = g.shape.lwr + (kTcWMx == 64 ? 6 : 5), lrows_b = g.shape.lwc + (kTcWN == 64 ? 6 : 5);
    const int lcpr_a = amn ? lrows_a - 3 : 2, lcpr_b = bmn ? lrows_b - 3 : 2;
    const int units_a = rows_a * 4, units_b = rows_b * 4;  // rows x 64 bytes / 16 per unit
    const unsigned b_off = static_cast<unsigned>(rows_a) * 64u;
    const int chunks = (g.K + BK - 1) / BK;
    const frag_offsets fo = tc_frag_offsets(lane, wm0, wn0, amn, bmn, lcpr_a, lcpr_b);

    for (int m0 = 0; m0 < g.M; m0 += rows_a) {
        for (int n0 = 0; n0 < g.N; n0 += rows_b) {
            const bool busy = grp < groups && m0 + wm0 < g.M && n0 + wn0 < g.N;
            float acc[kMI][kNJ][4];
RF_GEMM_UNROLL
            for (int i = 0; i < kMI; ++i)
RF_GEMM_UNROLL
                for (int j = 0; j < kNJ; ++j)
RF_GEMM_UNROLL
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

            // Iteration it stages chunk it (into stage it % S, one commit group per iteration, empty
            // past the end) and computes chunk kc = it - (S - 1). Before that, wait_group(S - 2)
            // leaves only chunks kc+1 .. it-1 in flight, and the barrier publishes chunk kc and
            // retires chunk kc - 1, whose stage (it % S) is the one refilled.
            for (int it = 0; it < chunks + kStages - 1; ++it) {
                const int kc = it - (kStages - 1);
                if (kc >= 0) {
                    rf_gemm_ptx::cp_async_wait<kStages - 2>();
                    __syncthreads();
                }
                if (it < chunks) {
                    const unsigned base = g.smem + static_cast<unsigned>(it % kStages) * kStageBytes;
                    const int k0 = it * BK;
                    stage_operand<CA>(g.a, base, amn ? k0 : m0, amn ? m0 : k0, lcpr_a, units_a, lrows_a);
                    stage_operand<CB>(g.b, base + b_off, bmn ? k0 : n0, bmn ? n0 : k0, lcpr_b, units_b, lrows_b);
                }
                rf_gemm_ptx::cp_async_commit();
                if (kc < 0 || !busy) continue;
                const unsigned sa = g.smem + static_cast<unsigned>(kc % kStages) * kStageBytes, sb = sa + b_off;
                // Unrolled, ptxas overlaps the two k steps (the next step's fragments load during
                // this step's mma); RF_GEMM_LOW_REGISTERS keeps the steps apart (~215 registers
                // instead of ~250 at 64x64 warp tiles with all strides run-time values).
#if RF_GEMM_LOW_REGISTERS
RF_GEMM_UNROLL_NOT
#else
RF_GEMM_UNROLL
#endif
                for (int j = 0; j < 2; ++j) {
                    if (groups > 1 && ((kc * 2 + j) % groups) != grp) continue;
                    unsigned af[kMI][4];
RF_GEMM_UNROLL
                    for (int i = 0; i < kMI; ++i) {
                        if constexpr (F8) rf_gemm_ptx::ldsm_x4(af[i], sa + fo.a[i] + j * fo.da);
                        else rf_gemm_ptx::ldsm_x4_sel(af[i], sa + fo.a[i] + j * fo.da, amn);
                    }
                    if constexpr (F8 && UNPACK) {
                        tc_step_fp8_unpacked<CA == kE5M2, CB == kE5M2>(acc, af, sb + j * fo.db, fo);
                        continue;
                    }
RF_GEMM_UNROLL
                    for (int pj = 0; pj < kNJ / 2; ++pj) {
                        unsigned bq[4];
                        if constexpr (F8) rf_gemm_ptx::ldsm_x4(bq, sb + fo.b[pj] + j * fo.db);
                        else rf_gemm_ptx::ldsm_x4_sel(bq, sb + fo.b[pj] + j * fo.db, bmn);
RF_GEMM_UNROLL
                        for (int i = 0; i < kMI; ++i) {
                            if constexpr (F8) {
                                rf_gemm_ptx::mma_fp8<CA == kE5M2, CB == kE5M2>(acc[i][2 * pj], af[i], bq[0], bq[1]);
                                rf_gemm_ptx::mma_fp8<CA == kE5M2, CB == kE5M2>(acc[i][2 * pj + 1], af[i], bq[2], bq[3]);
                            } else if constexpr (CA == kF16) {
                                rf_gemm_ptx::mma_f16(acc[i][2 * pj], af[i], bq[0], bq[1]);
                                rf_gemm_ptx::mma_f16(acc[i][2 * pj + 1], af[i], bq[2], bq[3]);
                            } else {
                                rf_gemm_ptx::mma_bf16(acc[i][2 * pj], af[i], bq[0], bq[1]);
                                rf_gemm_ptx::mma_bf16(acc[i][2 * pj + 1], af[i], bq[2], bq[3]);
                            }
                        }
                    }
                }
            }
            // Epilogue: the split-K groups add their partial tiles into C one after another
            // (acc[i][j][e]: row 16i + 8(e >> 1) + lane/4, column 8j + 2(lane%4) + (e & 1)).
            // A lane owns column pairs (2t, 2t+1): float2 accesses when C's rows allow them (with
            // c_si = 8 mod 32 a half-warp's 16 float2 then cover all 32 banks of shared memory).
            const int gr = lane >> 2, tc = (lane & 3) * 2;
            const bool pairs = (g.c_si & 1) == 0 && (reinterpret_cast<unsigned long long>(g.c) & 7) == 0;
            for (int turn = 0; turn < groups; ++turn) {
                if (busy && grp == turn) {
                    const bool add = g.accumulate || turn > 0;
RF_GEMM_UNROLL
                    for (int i = 0; i < kMI; ++i)
RF_GEMM_UNROLL
                        for (int h = 0; h < 2; ++h) {
                            const int row = m0 + wm0 + 16 * i + 8 * h + gr;
                            if (row >= g.M) continue;
                            float *crow = g.c + row * g.c_si;
RF_GEMM_UNROLL
                            for (int j = 0; j < kNJ; ++j) {
                                const int col = n0 + wn0 + 8 * j + tc;
                                const float v0 = g.alpha * acc[i][j][2 * h], v1 = g.alpha * acc[i][j][2 * h + 1];
                                if (pairs && col + 1 < g.N) {
                                    float2 *p2 = reinterpret_cast<float2 *>(crow + col);
                                    float2 o = add ? *p2 : make_float2(0.0f, 0.0f);
                                    o.x += v0;
                                    o.y += v1;
                                    *p2 = o;
                                } else {
                                    if (col < g.N) crow[col] = add ? crow[col] + v0 : v0;
                                    if (col + 1 < g.N) crow[col + 1] = add ? crow[col + 1] + v1 : v1;
                                }
                            }
                        }
                }
                __syncthreads();  // also retires the stages before the next tile's first copy
            }
        }
    }
}

// CA, CB, UNPACK: see tc_run.
template <int CA, int CB, bool UNPACK, class TA, class TB>
__device__ __forceinline__ void tc_gemm(int M, int N, int K, const TA *a, long long a_si, long long a_sk, const TB *b,
                                        long long b_sj, long long b_sk, float *c, long long c_si, float alpha,
                                        bool accumulate, unsigned char *scratch) {
    tc_args<TA, TB> g;
    g.a = make_operand<CA>(a, M, K, a_si, a_sk);
    g.b = make_operand<CB>(b, N, K, b_sj, b_sk);
    g.M = M;
    g.N = N;
    g.K = K;
    g.c = c;
    g.c_si = c_si;
    g.alpha = alpha;
    g.accumulate = accumulate;
    g.smem = rf_gemm_ptx::smem_u32(scratch);
    g.shape = tc_choose(M, N, K, static_cast<int>(blockDim.x) >> 5, chunk_k(CA));
    tc_run<CA, CB, UNPACK>(g);
}

}  // namespace rf_gemm_detail

#endif  // REDFUSE_CUDA_GEMM_TC_H
