/** \file redfuse_cpu_row_copies.h
 * Row copies that generated CPU kernels call to store a row of float results: into an f32 output
 * (optionally scaled, streamed or not), into a bf16 output rounded bit for bit as store_bf16, and the
 * worker's RowStream of chunked copies. Pasted after redfuse_cpu_rows.h.
 */
#ifndef REDFUSE_CPU_ROW_COPIES_H
#define REDFUSE_CPU_ROW_COPIES_H

#ifndef REDFUSE_CPU_ROWS_H
#error "redfuse_cpu_row_copies.h is pasted after redfuse_cpu_rows.h"
#endif

namespace rfk {

// What a row copy stores of each float: the value (Unscaled), or the value times one float, rounded
// to float as the product of a vector loop is (Scaled: a row output y = t · r whose terms t were
// kept, multiplied while they are stored instead of in a pass of their own; ScaleRowCopies.cpp).
struct Unscaled {
    float operator()(float x) const { return x; }
#if defined(__AVX512F__)
    __m512 operator()(__m512 x) const { return x; }
#endif
#if defined(__AVX__)
    __m256 operator()(__m256 x) const { return x; }
#endif
};
struct Scaled {
    float by;
    float operator()(float x) const { return x * by; }
#if defined(__AVX512F__)
    __m512 operator()(__m512 x) const { return _mm512_mul_ps(x, _mm512_set1_ps(by)); }
#endif
#if defined(__AVX__)
    __m256 operator()(__m256 x) const { return _mm256_mul_ps(x, _mm256_set1_ps(by)); }
#endif
};

// A row of float results into an f32 output. `stream`: non-temporal stores (no read-for-ownership,
// no cache pollution) for outputs larger than the caches; plain copies otherwise.
template <typename Scale = Unscaled>
static inline void copy_row_f32(float *dst, const float *src, int64_t n, bool stream, Scale scale = Scale{}) {
#if defined(__AVX512F__) || defined(__AVX__)
    if (stream && n >= 64) {
#if defined(__AVX512F__)
        const int64_t w = 16;
#else
        const int64_t w = 8;
#endif
        int64_t i = 0;
        while (i < n && (reinterpret_cast<uintptr_t>(dst + i) % (4 * w)) != 0) {
            dst[i] = scale(src[i]);
            i++;
        }
        for (; i + w <= n; i += w) {
#if defined(__AVX512F__)
            _mm512_stream_ps(dst + i, scale(_mm512_loadu_ps(src + i)));
#else
            _mm256_stream_ps(dst + i, scale(_mm256_loadu_ps(src + i)));
#endif
        }
        for (; i < n; i++) dst[i] = scale(src[i]);
        _mm_sfence();
        return;
    }
#endif
    (void)stream;
    if constexpr (std::is_same_v<Scale, Unscaled>) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    } else {
#if defined(_OPENMP)
#pragma omp simd
#endif
        for (int64_t i = 0; i < n; i++) dst[i] = scale(src[i]);
    }
}

// A row of float results into a bf16 output, each rounded as store_bf16(float) rounds it, bit for bit.
// With AVX512_BF16: one vcvtneps2bf16 per 16 values (round to nearest even on the bits, like
// store_bf16), except that the instruction flushes denormals to zero, gives inf where a finite value
// rounds past the largest bf16 (store_bf16 saturates) and keeps a NaN's payload (store_bf16 gives
// the canonical quiet NaN): a vector holding any of those is converted element by element. `stream`:
// non-temporal stores for outputs larger than the caches, as copy_row_f32.
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
// The lanes of x that vcvtneps2bf16 would not round as store_bf16 does: denormals (0 < |x| < 2^-126),
// and values rounding up to inf or past (finite overflow, inf, NaN). With AVX512DQ the denormals and
// NaN are one vfpclassps (classes 0xA1: QNaN, denormal, SNaN) and the rest one float compare of |x|
// with the smallest magnitude that rounds past the largest bf16 (bits 0x7F7F8000; inf is above it):
// three vector operations per 16 values instead of four and a mask merge — softmax bf16 spends as
// much in this check as in its exp2 (AMX Xeon, [4096, 4096]).
static inline __mmask16 bf16_rare_lanes(__m512 x) {
#if defined(__AVX512DQ__)
    const __m512 past = _mm512_castsi512_ps(_mm512_set1_epi32(0x7F7F8000));
    return _mm512_fpclass_ps_mask(x, 0xA1) | _mm512_cmp_ps_mask(_mm512_abs_ps(x), past, _CMP_GE_OQ);
#else
    const __m512i mag = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
    return _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(mag, mag), mag, _mm512_set1_epi32(0x00800000)) |
           _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(0x7F7F8000));
#endif
}
// Whether either of two vectors (a 64-byte line of bf16 results) has a rare lane: with AVX512DQ the
// magnitude test runs once, on the larger of the two magnitudes (vmaxps passes its second operand
// for a NaN, which vfpclassps reports anyway).
static inline bool bf16_rare_pair(__m512 lo, __m512 hi) {
#if defined(__AVX512DQ__)
    const __m512 past = _mm512_castsi512_ps(_mm512_set1_epi32(0x7F7F8000));
    const __mmask16 cls = _mm512_fpclass_ps_mask(lo, 0xA1) | _mm512_fpclass_ps_mask(hi, 0xA1);
    const __m512 larger = _mm512_maskz_max_ps(0xFFFF, _mm512_abs_ps(lo), _mm512_abs_ps(hi));  // zero-masking: GCC 12 -Wmaybe-uninitialized
    return (cls | _mm512_cmp_ps_mask(larger, past, _CMP_GE_OQ)) != 0;
#else
    return (bf16_rare_lanes(lo) | bf16_rare_lanes(hi)) != 0;
#endif
}
#endif

#if defined(__AVX2__)
// Eight floats rounded to bf16 exactly as store_bf16 rounds each (round to nearest even on the bits,
// NaN -> the quiet NaN 0x7FC0, inf kept, finite values rounding past the largest bf16 saturate to it),
// widened to 32 bits: the branch-free formula of store_bf16, lane by lane. mag <= 0x7FFFFFFF, so the
// signed compares order magnitudes as unsigned ones would.
static inline RFK_ALWAYS_INLINE __m256i bf16_bits_avx2(__m256 x) {
    const __m256i u = _mm256_castps_si256(x), mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(mag, 16), _mm256_set1_epi32(1));
    __m256i out = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x7FFF)), odd), 16);
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(0x7F7F), _mm256_cmpgt_epi32(out, _mm256_set1_epi32(0x7F7F)));
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(0x7F80), _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F800000)));
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(0x7FC0), _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7F800000)));
    return _mm256_or_si256(out, _mm256_srli_epi32(_mm256_andnot_si256(mag, u), 16));  // the sign bit, at bit 15
}
// The same for a lane whose magnitude is below 0x7F7F8000 (no NaN, no inf, no rounding past the
// largest bf16), sign and all in one add: (u + 0x7FFF + bit 16 of u) >> 16. The carry of the rounding
// stays below bit 31 there (mag + 0x8000 < 0x7F800000), so the sign bit lands at bit 15 untouched and
// denormals round as store_bf16 rounds them (it does not flush them). Five operations a vector
// against the full formula's fifteen.
static inline RFK_ALWAYS_INLINE __m256i bf16_bits_plain_avx2(__m256i u) {
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
}
// Sixteen floats as sixteen bf16 values in order (vpackusdw packs within 128-bit halves: reordered).
// When no lane of either vector has a magnitude at or past 0x7F7F8000 (one test of the larger of the
// two magnitudes), the short form above; otherwise the full formula. Softmax bf16 [4096, 1024] on an
// AMD Zen 3 spent about 40% of its samples in the full formula (docs/tile-ir.md).
static inline RFK_ALWAYS_INLINE __m256i bf16_pack_avx2(__m256 lo, __m256 hi) {
    const __m256i ul = _mm256_castps_si256(lo), uh = _mm256_castps_si256(hi), magnitude = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i larger = _mm256_max_epi32(_mm256_and_si256(ul, magnitude), _mm256_and_si256(uh, magnitude));
    const __m256i rare = _mm256_cmpgt_epi32(larger, _mm256_set1_epi32(0x7F7F7FFF));
    const __m256i packed = _mm256_testz_si256(rare, rare) ? _mm256_packus_epi32(bf16_bits_plain_avx2(ul), bf16_bits_plain_avx2(uh))
                                                          : _mm256_packus_epi32(bf16_bits_avx2(lo), bf16_bits_avx2(hi));
    return _mm256_permute4x64_epi64(packed, 0xD8);
}
#endif

template <typename Scale = Unscaled>
static inline void copy_row_bf16(uint16_t *dst, const float *src, int64_t n, bool stream, Scale scale = Scale{}) {
    int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
    if (stream)
        while (i < n && (reinterpret_cast<uintptr_t>(dst + i) % 32) != 0) {
            dst[i] = store_bf16(scale(src[i]));
            i++;
        }
    for (; i + 16 <= n; i += 16) {
        __m512 x = scale(_mm512_loadu_ps(src + i));
        __mmask16 odd = bf16_rare_lanes(x);
        __m256i b;
        if (odd == 0) {
            b = (__m256i)_mm512_cvtneps_pbh(x);
        } else {
            alignas(32) uint16_t tmp[16];
            for (int q = 0; q < 16; q++) tmp[q] = store_bf16(scale(src[i + q]));
            b = _mm256_load_si256(reinterpret_cast<const __m256i *>(tmp));
        }
        if (stream) _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i), b);
        else _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), b);
    }
    if (stream) _mm_sfence();
#elif defined(__AVX2__)
    if (stream)
        while (i < n && (reinterpret_cast<uintptr_t>(dst + i) % 32) != 0) {
            dst[i] = store_bf16(scale(src[i]));
            i++;
        }
    for (; i + 16 <= n; i += 16) {
        const __m256i b = bf16_pack_avx2(scale(_mm256_loadu_ps(src + i)), scale(_mm256_loadu_ps(src + i + 8)));
        if (stream) _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i), b);
        else _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), b);
    }
    if (stream) _mm_sfence();
#endif
    (void)stream;
    for (int64_t q = i; q < n; q++) dst[q] = store_bf16(scale(src[q]));
}

// Row copies of a worker, chunk after chunk (the CPU epilogue computes a row output a chunk at a time
// and copies each out as it is done; LowerMerge.cpp chunked_row_output). Unstreamed copies are the
// copy_row_* above. Streamed ones store whole 64-byte lines of dst non-temporally and hold a chunk's
// partial last line until the next copy continues it (a chunked row: the line is completed and
// streamed) or until another copy or flush() (plain stores). Storing the partial lines plainly
// instead — a chunk's first and last line, shared with its neighbours — made bf16 softmax C = 8192
// with 16-byte-aligned rows 12.9 ms against 8.2 for whole-row copies (AMX Xeon): the plain store
// that misses (its line's read for ownership from memory) holds up the in-order commit of every
// streamed store behind it, once per chunk. flush() ends with the fence that orders the streamed
// stores; the kernels call it when a worker's rows are done. A streamed output is not read back by
// the kernel that writes it (row outputs are those nobody reads; RowCopies.cpp's have no float64
// temporary, which is what readers load).
//
// prefetch_next() holds a range of the next row's input until the next copy, which asks for it line
// by line between its streamed stores (all of it before a plain copy): the next row's reads and this
// row's writes then share the memory evenly, where a burst of prefetches before the chunk's work
// filled the miss queue and left the streamed stores waiting behind it (PrefetchNextRows.cpp).
class RowStream {
  public:
    void f32(float *dst, const float *src, int64_t n, bool stream) { copy(dst, src, n, stream, Unscaled{}); }
    void bf16(uint16_t *dst, const float *src, int64_t n, bool stream) { copy(dst, src, n, stream, Unscaled{}); }
    // dst[i] = src[i] · scale, rounded to the output's type (a scaled row copy).
    void f32(float *dst, const float *src, int64_t n, bool stream, float scale) { copy(dst, src, n, stream, Scaled{scale}); }
    void bf16(uint16_t *dst, const float *src, int64_t n, bool stream, float scale) { copy(dst, src, n, stream, Scaled{scale}); }
    // [p, p + bytes) into L2 during the next copy (at once when kMaxPending ranges are already held).
    void prefetch_next(const void *p, int64_t bytes) {
        if (bytes <= 0) return;
        if (pending_ == kMaxPending) {
            prefetch_l2(p, bytes);
            return;
        }
        pf_[pending_++] = {static_cast<const char *>(p), bytes};
    }
    // The same copies deferred: done by finish_below() as the source is about to be overwritten, or
    // by flush() (DeferRowCopies.cpp). The source must stay unchanged until then; a copy that continues
    // the last held one (the next chunk of the same row, same scale) extends it.
    void defer_f32(float *dst, const float *src, int64_t n, bool stream, float scale) { defer(dst, false, src, n, stream, true, scale); }
    void defer_bf16(uint16_t *dst, const float *src, int64_t n, bool stream, float scale) { defer(dst, true, src, n, stream, true, scale); }
    void defer_f32(float *dst, const float *src, int64_t n, bool stream) { defer(dst, false, src, n, stream, false, 1.0f); }
    void defer_bf16(uint16_t *dst, const float *src, int64_t n, bool stream) { defer(dst, true, src, n, stream, false, 1.0f); }
    // Does every deferred copy's part whose source lies below p (a held copy's source is one array).
    void finish_below(const float *p) {
        for (int k = 0; k < deferred_; k++) {
            Deferred &d = later_[k];
            // Addresses as integers: p may lie in another array (then the copy is done whole or not at all).
            const uintptr_t at = reinterpret_cast<uintptr_t>(p), from = reinterpret_cast<uintptr_t>(d.src);
            const int64_t upto = at <= from ? 0 : std::min<int64_t>(d.n, static_cast<int64_t>((at - from) / sizeof(float)));
            if (upto > d.done) run(d, upto);
        }
        int kept = 0;
        for (int k = 0; k < deferred_; k++)
            if (later_[k].done < later_[k].n) later_[kept++] = later_[k];
        deferred_ = kept;
    }
    void flush() {
        for (int k = 0; k < deferred_; k++) run(later_[k], later_[k].n);
        deferred_ = 0;
        put_held();
        prefetch_all();
#if defined(__AVX512F__) || defined(__AVX2__)
        _mm_sfence();
#endif
    }

  private:
    struct Deferred {
        void *dst;
        const float *src;
        int64_t n, done;
        bool bf16, stream, scaled;
        float scale;
    };
    static constexpr int kMaxDeferred = 4;
    Deferred later_[kMaxDeferred];
    int deferred_ = 0;

    void defer(void *dst, bool bf16, const float *src, int64_t n, bool stream, bool scaled, float scale) {
        if (n <= 0) return;
        if (deferred_ > 0) {
            Deferred &last = later_[deferred_ - 1];
            const size_t e = bf16 ? 2 : 4;
            if (last.bf16 == bf16 && last.stream == stream && last.scaled == scaled && last.scale == scale && last.src + last.n == src &&
                static_cast<char *>(last.dst) + static_cast<size_t>(last.n) * e == dst) {
                last.n += n;
                return;
            }
        }
        if (deferred_ == kMaxDeferred) {
            // No room: the oldest is done now (its source is still unchanged).
            run(later_[0], later_[0].n);
            for (int k = 1; k < deferred_; k++) later_[k - 1] = later_[k];
            deferred_--;
        }
        later_[deferred_++] = {dst, src, n, 0, bf16, stream, scaled, scale};
    }
    // d's elements [d.done, upto), as the copy it stands for.
    void run(Deferred &d, int64_t upto) {
        const int64_t a = d.done, n = upto - a;
        if (d.bf16) {
            uint16_t *dst = static_cast<uint16_t *>(d.dst) + a;
            if (d.scaled) copy(dst, d.src + a, n, d.stream, Scaled{d.scale});
            else copy(dst, d.src + a, n, d.stream, Unscaled{});
        } else {
            float *dst = static_cast<float *>(d.dst) + a;
            if (d.scaled) copy(dst, d.src + a, n, d.stream, Scaled{d.scale});
            else copy(dst, d.src + a, n, d.stream, Unscaled{});
        }
        d.done = upto;
    }

    static constexpr int kMaxPending = 4;
    unsigned char *held_at_ = nullptr;  // the held line's address in dst (64-byte aligned), or none
    int64_t held_bytes_ = 0;            // bytes of it held, from its start
    alignas(64) unsigned char line_[64];
    PrefetchRange pf_[kMaxPending];  // the held prefetch ranges
    int pending_ = 0;

    void prefetch_all() {
        for (int r = 0; r < pending_; r++) pf_[r].rest();
        pending_ = 0;
    }
    // The next `lines` lines of every held range.
    void prefetch_some(int64_t lines) {
        for (int r = 0; r < pending_; r++) pf_[r].ask(lines);
    }
    // Lines of each held range to ask for per streamed line, for `lines` streamed lines to cover them.
    int64_t prefetch_rate(int64_t lines) const {
        int64_t most = 0;
        for (int r = 0; r < pending_; r++) most = std::max(most, pf_[r].lines());
        return lines > 0 ? (most + lines - 1) / lines : most;
    }

    template <typename Scale>
    static void plain(float *dst, const float *src, int64_t n, Scale scale) { copy_row_f32(dst, src, n, false, scale); }
    template <typename Scale>
    static void plain(uint16_t *dst, const float *src, int64_t n, Scale scale) { copy_row_bf16(dst, src, n, false, scale); }
    template <typename Scale>
    static void convert(float *out, const float *src, int64_t n, Scale scale) {
        for (int64_t i = 0; i < n; i++) out[i] = scale(src[i]);
    }
    template <typename Scale>
    static void convert(uint16_t *out, const float *src, int64_t n, Scale scale) {
        for (int64_t i = 0; i < n; i++) out[i] = store_bf16(scale(src[i]));
    }
    void put_held() {
        if (held_at_) std::memcpy(held_at_, line_, static_cast<size_t>(held_bytes_));
        held_at_ = nullptr;
    }
#if defined(__AVX512F__)
    template <typename Scale>
    static void stream_line(float *dst, const float *src, Scale scale) { _mm512_stream_ps(dst, scale(_mm512_loadu_ps(src))); }
    template <typename Scale>
    static void stream_line(uint16_t *dst, const float *src, Scale scale) {
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
        const __m512 lo = scale(_mm512_loadu_ps(src)), hi = scale(_mm512_loadu_ps(src + 16));
        if (!bf16_rare_pair(lo, hi)) {
            // vcvtne2ps2bf16: the 32 values of both vectors in one (the second operand's go first).
            _mm512_stream_si512(reinterpret_cast<__m512i *>(dst), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            return;
        }
        alignas(64) uint16_t t[32];
        convert(t, src, 32, scale);
        _mm512_stream_si512(reinterpret_cast<__m512i *>(dst), _mm512_load_si512(t));
#else
        const __m256i a = bf16_pack_avx2(scale(_mm256_loadu_ps(src)), scale(_mm256_loadu_ps(src + 8)));
        const __m256i b = bf16_pack_avx2(scale(_mm256_loadu_ps(src + 16)), scale(_mm256_loadu_ps(src + 24)));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst), a);
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + 16), b);
#endif
    }
#elif defined(__AVX2__)
    template <typename Scale>
    static void stream_line(float *dst, const float *src, Scale scale) {
        _mm256_stream_ps(dst, scale(_mm256_loadu_ps(src)));
        _mm256_stream_ps(dst + 8, scale(_mm256_loadu_ps(src + 8)));
    }
    template <typename Scale>
    static void stream_line(uint16_t *dst, const float *src, Scale scale) {
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst), bf16_pack_avx2(scale(_mm256_loadu_ps(src)), scale(_mm256_loadu_ps(src + 8))));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + 16),
                            bf16_pack_avx2(scale(_mm256_loadu_ps(src + 16)), scale(_mm256_loadu_ps(src + 24))));
    }
#endif

    template <typename T, typename Scale>
    void copy(T *dst, const float *src, int64_t n, bool stream, Scale scale) {
#if defined(__AVX512F__) || defined(__AVX2__)
        constexpr int64_t E = 64 / static_cast<int64_t>(sizeof(T));  // elements per line
        if (!stream || n <= 0) {
            prefetch_all();
            plain(dst, src, n, scale);
            return;
        }
        int64_t i = 0;
        if (held_at_ && reinterpret_cast<unsigned char *>(dst) == held_at_ + held_bytes_) {
            // The held line continues here: complete it, then stream it.
            i = std::min<int64_t>(n, (64 - held_bytes_) / static_cast<int64_t>(sizeof(T)));
            convert(reinterpret_cast<T *>(line_ + held_bytes_), src, i, scale);
            held_bytes_ += i * static_cast<int64_t>(sizeof(T));
            if (held_bytes_ < 64) return;
            stream_held_line(held_at_, line_);
            held_at_ = nullptr;
        } else {
            // A new row: its partial first line is stored plainly.
            put_held();
            const uintptr_t to_line = (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64;
            i = std::min<int64_t>(n, static_cast<int64_t>(to_line / sizeof(T)));
            plain(dst, src, i, scale);
        }
        if (pending_ == 0) {
            for (; i + E <= n; i += E) stream_line(dst + i, src + i, scale);
        } else {
            const int64_t rate = prefetch_rate((n - i) / E);
            for (; i + E <= n; i += E) {
                prefetch_some(rate);
                stream_line(dst + i, src + i, scale);
            }
            prefetch_all();
        }
        if (i < n) {
            held_at_ = reinterpret_cast<unsigned char *>(dst + i);
            held_bytes_ = (n - i) * static_cast<int64_t>(sizeof(T));
            convert(reinterpret_cast<T *>(line_), src + i, n - i, scale);
        }
#else
        prefetch_all();
        if constexpr (std::is_same_v<T, float>) copy_row_f32(dst, src, n, stream, scale);
        else copy_row_bf16(dst, src, n, stream, scale);
#endif
    }
#if defined(__AVX512F__) || defined(__AVX2__)
    // A completed 64-byte line (aligned, in line_) streamed to its place in dst.
    static void stream_held_line(unsigned char *to, const unsigned char *line) {
#if defined(__AVX512F__)
        _mm512_stream_si512(reinterpret_cast<__m512i *>(to), _mm512_load_si512(line));
#else
        _mm256_stream_si256(reinterpret_cast<__m256i *>(to), _mm256_load_si256(reinterpret_cast<const __m256i *>(line)));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(to + 32), _mm256_load_si256(reinterpret_cast<const __m256i *>(line + 32)));
#endif
    }
#endif
};

}  // namespace rfk

#endif  // REDFUSE_CPU_ROW_COPIES_H
