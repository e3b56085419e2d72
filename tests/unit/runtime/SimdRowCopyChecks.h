/** \file SimdRowCopyChecks.h
 * Checks of the CPU's bf16 rounding and row copies into outputs (simd_kernels_test.cpp includes this
 * after the kernel headers): the bf16 casts, rfk::copy_row_bf16's bits against store_bf16, and
 * rfk::RowStream's chunked, streamed copies.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "SimdCheckSupport.h"

namespace simd_check {

/** What a row copy stores for v: v (times *scale when given), rounded to T (store_bf16's bits for bf16). */
template <typename T>
T copied(float v, const float *scale) {
    if (scale) v = v * *scale;
    if constexpr (sizeof(T) == 2) return rfk::store_bf16(v);
    else return v;
}

/** rfk::RowStream (redfuse_cpu_row_copies.h): rows copied in chunks — shorter than a line, a few lines, not a
 *  multiple of a line — starting at every 4-byte offset of a line, streamed or not, contiguous rows (a
 *  held line continues into the next row) and a copy elsewhere in between (the held line is stored
 *  plainly), with prefetches of the next row held for the copies (prefetch_next): after flush() every
 *  value is the row copy's (store_bf16's bits for bf16, also for the special values of `src`: NaN,
 *  inf, denormals, finite overflow) and nothing outside the rows changed. With `scale` (a scaled copy, ScaleRowCopies.cpp): each value is the
 *  float product src · scale, rounded as above. */
template <typename T>
void check_row_stream(const std::vector<float> &src, Failures &f, const float *scale = nullptr) {
    const T guard = sizeof(T) == 2 ? T(0xABCD) : T(-7.25f);
    auto want = [&](float v) { return copied<T>(v, scale); };
    auto copy = [&](rfk::RowStream &rs, T *dst, const float *from, int64_t k, bool stream) {
        if constexpr (sizeof(T) == 2) {
            if (scale) rs.bf16(dst, from, k, stream, *scale);
            else rs.bf16(dst, from, k, stream);
        } else {
            if (scale) rs.f32(dst, from, k, stream, *scale);
            else rs.f32(dst, from, k, stream);
        }
    };
    std::vector<T> out(4000 + 64), other(100);
    for (bool stream : {false, true}) {
        for (int64_t chunk : {5, 32, 96, 1000}) {
            for (size_t off = 0; off < 32; off += 2) {
                std::fill(out.begin(), out.end(), guard);
                std::fill(other.begin(), other.end(), guard);
                T *base = reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(out.data()) + 63) / 64 * 64) + off;
                const int64_t rows = 3, n = 1100;
                rfk::RowStream rs;
                for (int64_t r = 0; r < rows; r++) {
                    for (int64_t e0 = 0; e0 < n; e0 += chunk) {
                        const int64_t k = std::min(chunk, n - e0);
                        // Held prefetches of the next row (none to six ranges: past four they are
                        // asked for at once) change no value.
                        for (int64_t q = 0; q < (e0 / chunk + int64_t(off)) % 7; q++) rs.prefetch_next(src.data() + (r + 1) * n % 2200 + q, k * 4);
                        copy(rs, base + r * n + e0, src.data() + r * n + e0, k, stream);
                    }
                    if (r == 1) copy(rs, other.data() + 1, src.data(), 50, stream);  // somewhere else between two rows
                }
                rs.flush();
                const std::string what = std::string(sizeof(T) == 2 ? "bf16" : "f32") + (scale ? " scaled" : "") + " RowStream (stream " + std::to_string(stream) +
                                         ", chunk " + std::to_string(chunk) + ", offset " + std::to_string(off) + ")";
                for (int64_t i = 0; i < rows * n; i++)
                    if (!(base[i] == want(src[size_t(i)]))) {
                        f.add(what + " element " + std::to_string(i));
                        return;
                    }
                for (int64_t i = 0; i < 50; i++)
                    if (!(other[size_t(i + 1)] == want(src[size_t(i)]))) f.add(what + ": the copy in between");
                if (!(other[0] == guard) || !(other[51] == guard)) f.add(what + " wrote outside the copy in between");
                for (T *p = out.data(); p < base; p++)
                    if (!(*p == guard)) f.add(what + " wrote before the rows");
                for (T *p = base + rows * n; p < out.data() + out.size(); p++)
                    if (!(*p == guard)) f.add(what + " wrote past the rows");
            }
        }
    }
}

/** rfk::RowStream's deferred copies (defer_*, finish_below, flush; DeferRowCopies.cpp) as a softmax
 *  kernel makes them: one term buffer refilled row after row, tile by tile, each tile's finish_below
 *  before its writes; each row's copy deferred in chunks (contiguous ones merge), or in reverse order
 *  (five jobs that do not merge: past four the oldest is done at once), with an immediate copy
 *  elsewhere in between; streamed or not, scaled or not. After flush() every value is the copy of the
 *  row it was deferred for and nothing outside the rows changed. */
template <typename T>
void check_deferred_row_stream(const std::vector<float> &src, Failures &f, const float *scale = nullptr) {
    const T guard = sizeof(T) == 2 ? T(0xABCD) : T(-7.25f);
    auto want = [&](float v) { return copied<T>(v, scale); };
    auto defer = [&](rfk::RowStream &rs, T *dst, const float *from, int64_t k, bool stream) {
        if constexpr (sizeof(T) == 2) {
            if (scale) rs.defer_bf16(dst, from, k, stream, *scale);
            else rs.defer_bf16(dst, from, k, stream);
        } else {
            if (scale) rs.defer_f32(dst, from, k, stream, *scale);
            else rs.defer_f32(dst, from, k, stream);
        }
    };
    const int64_t rows = 3, n = 1100, tile = 256;  // src holds 3400 values
    std::vector<T> out(size_t(rows * n) + 64), other(100);
    std::vector<float> terms(static_cast<size_t>(n));
    for (bool stream : {false, true})
        for (int64_t chunk : {96, 300, 1100})
            for (bool reversed : {false, true}) {
                std::fill(out.begin(), out.end(), guard);
                std::fill(other.begin(), other.end(), guard);
                T *base = reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(out.data()) + 63) / 64 * 64);
                rfk::RowStream rs;
                for (int64_t r = 0; r < rows; r++) {
                    for (int64_t tb = 0; tb < n; tb += tile) {
                        const int64_t te = std::min(tb + tile, n);
                        rs.finish_below(terms.data() + te);
                        for (int64_t j = tb; j < te; j++) terms[size_t(j)] = src[size_t(r * n + j)];
                    }
                    if (r == 1) {
                        if constexpr (sizeof(T) == 2) rs.bf16(other.data() + 1, src.data(), 50, stream);
                        else rs.f32(other.data() + 1, src.data(), 50, stream);
                    }
                    std::vector<int64_t> starts;
                    for (int64_t e0 = 0; e0 < n; e0 += chunk) starts.push_back(e0);
                    if (reversed) std::reverse(starts.begin(), starts.end());
                    for (int64_t e0 : starts) defer(rs, base + r * n + e0, terms.data() + e0, std::min(chunk, n - e0), stream);
                }
                rs.flush();
                const std::string what = std::string(sizeof(T) == 2 ? "bf16" : "f32") + (scale ? " scaled" : "") + " deferred RowStream (stream " +
                                         std::to_string(stream) + ", chunk " + std::to_string(chunk) + (reversed ? ", reversed" : "") + ")";
                for (int64_t i = 0; i < rows * n; i++)
                    if (!(base[i] == want(src[size_t(i)]))) {
                        f.add(what + " element " + std::to_string(i));
                        return;
                    }
                for (int64_t i = 0; i < 50; i++)
                    if (!(other[size_t(i + 1)] == copied<T>(src[size_t(i)], nullptr))) f.add(what + ": the copy in between");
                for (T *p = base + rows * n; p < out.data() + out.size(); p++)
                    if (!(*p == guard)) f.add(what + " wrote past the rows");
            }
}

/** rfk::copy_row_bf16 (redfuse_cpu_row_copies.h: vcvtneps2bf16 where the build has AVX512_BF16, element by element
 *  for vectors with denormals, finite overflow, inf or NaN) gives store_bf16's bits for every value, at
 *  every row length and offset (vector body and tails), streamed or not. */
void check_bf16_rows(const std::vector<uint32_t> &patterns, Failures &f) {
    std::vector<float> src(patterns.size());
    for (size_t i = 0; i < patterns.size(); i++) std::memcpy(&src[i], &patterns[i], 4);
    // Runs of plain values too, so most vectors take the instruction.
    Rng rng(5);
    for (int i = 0; i < 4096; ++i) src.push_back(rng.uniform(-3.0f, 3.0f));
    // And runs of plain values at the rounding's edges (vectors with no rare lane take the short
    // form): ties (low half 0x8000) with bit 16 even and odd, one either side of a tie, low halves
    // all zero or all ones (a carry into the exponent), both signs, denormals, and the largest
    // magnitude below the rare ones (0x7F7F7FFF).
    const uint32_t lows[] = {0x8000u, 0x18000u, 0x7FFFu, 0x8001u, 0x0u, 0xFFFFu, 0x1FFFFu};
    for (int i = 0; i < 512; ++i) {
        const uint32_t exponent = uint32_t(i % 7 == 0 ? 0 : 1 + (i * 37) % 253) << 23;
        uint32_t u = (exponent | (uint32_t(i * 2654435761u) & 0x7E0000u) | lows[i % 7]) ^ (i % 3 == 0 ? 0x80000000u : 0u);
        if (i % 61 == 0) u = 0x7F7F7FFFu | (i % 2 ? 0x80000000u : 0u);
        float v;
        std::memcpy(&v, &u, 4);
        src.push_back(v);
    }
    for (bool stream : {false, true}) {
        for (size_t off : {size_t(0), size_t(3)}) {
            std::vector<uint16_t> got(src.size() + 8, 0xABCD);
            size_t n = src.size() - off;
            rfk::copy_row_bf16(got.data() + off, src.data() + off, int64_t(n), stream);
            for (size_t i = 0; i < n; i++) {
                if (got[off + i] == rfk::store_bf16(src[off + i])) continue;
                std::ostringstream m;
                m << std::hex << "copy_row_bf16 (stream " << stream << ") of 0x" << (off + i < patterns.size() ? patterns[off + i] : 0u)
                  << " gave 0x" << got[off + i] << ", store_bf16 0x" << rfk::store_bf16(src[off + i]);
                f.add(m.str());
                return;
            }
            if (got[0] != (off ? 0xABCD : got[0]) || got[off + n] != 0xABCD) f.add("copy_row_bf16 wrote outside its row");
        }
        for (int64_t n : {0, 1, 15, 16, 17, 33}) {
            std::vector<uint16_t> got(size_t(n) + 1, 0xABCD);
            rfk::copy_row_bf16(got.data(), src.data() + 4000, n, stream);
            for (int64_t i = 0; i < n; i++)
                if (got[size_t(i)] != rfk::store_bf16(src[size_t(4000 + i)])) f.add("copy_row_bf16 n=" + std::to_string(n));
            if (got[size_t(n)] != 0xABCD) f.add("copy_row_bf16 n=" + std::to_string(n) + " wrote past the row");
        }
        // Scaled copies: the bits of store_bf16(v · s), s taking products into the subnormals, past
        // the largest bf16 and to inf (the rare lanes are those of the product, not of v), and a
        // plain scale.
        for (float by : {0.37f, 0x1p-100f, 0x1p+100f, -3.0f, std::numeric_limits<float>::infinity()}) {
            std::vector<uint16_t> got(src.size() + 1, 0xABCD);
            rfk::copy_row_bf16(got.data(), src.data(), int64_t(src.size()), stream, rfk::Scaled{by});
            for (size_t i = 0; i < src.size(); i++) {
                const uint16_t want = rfk::store_bf16(src[i] * by);
                if (got[i] == want) continue;
                std::ostringstream m;
                m << std::hex << "copy_row_bf16 scaled by " << by << " (stream " << stream << ") of " << src[i] << " gave 0x" << got[i]
                  << ", store_bf16 0x" << want;
                f.add(m.str());
                break;
            }
            if (got[src.size()] != 0xABCD) f.add("scaled copy_row_bf16 wrote past the row");
        }
    }
}

/** bf16 <-> f32: bf16_to_f32 exact for all 65536 values; f32_to_bf16 as the spec's cast (round to nearest
 *  even, saturating finite overflow) on a sweep of bit patterns and rounding boundaries; then the row
 *  copies above on those patterns. */
void check_bf16_casts(Failures &f) {
    for (uint32_t h = 0; h < 65536; ++h) {
        float v = rfk::bf16_to_f32(uint16_t(h));
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (bits != h << 16) {
            f.add("bf16_to_f32(" + std::to_string(h) + ") is not exact");
            break;
        }
    }
    // f32 -> bf16 must agree with the spec's cast (round to nearest even, saturating finite overflow) on a
    // sweep of all bit patterns and on the rounding boundaries of random ones.
    Rng rng(3);
    std::vector<uint32_t> patterns = {0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0x7f7f8000u, 0x7f800000u, 0x7fc00001u,
                                      0xff800001u, 0x00000001u, 0x00008000u, 0x00018000u, 0x80000000u};
    for (uint64_t b = 0; b < (uint64_t(1) << 32); b += kThorough ? 4099 : 65537) patterns.push_back(uint32_t(b));
    for (int i = 0; i < 20000; ++i) {
        uint32_t hi = uint32_t(rng.next()) & 0xffff0000u;
        for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0x0000u}) patterns.push_back(hi | lo);
    }
    for (uint32_t p : patterns) {
        float v;
        std::memcpy(&v, &p, 4);
        uint16_t got = rfk::f32_to_bf16(v);
        double want = rfk::cast_bf16(double(v));
        double got_v = double(rfk::bf16_to_f32(got));
        bool ok = std::isnan(want) ? std::isnan(got_v) : (got_v == want && std::signbit(got_v) == std::signbit(want));
        if (!ok) {
            std::ostringstream m;
            m << std::hex << "f32_to_bf16(0x" << p << ") = 0x" << got << std::dec << " (" << got_v << "), cast_bf16 gives " << want;
            f.add(m.str());
            break;
        }
    }
    check_bf16_rows(patterns, f);
    std::vector<float> rows;
    Rng rng2(9);
    for (int i = 0; i < 3400; ++i) rows.push_back(rng2.uniform(-3.0f, 3.0f));
    check_row_stream<uint16_t>(rows, f);
    check_row_stream<float>(rows, f);
    // Rows of bit patterns (the special values first, then a stride over every pattern): the streamed
    // bf16 lines round each as store_bf16 does (AVX2's vector rounding, AVX512_BF16's rare lanes).
    std::vector<float> special(3400);
    for (size_t i = 0; i < special.size(); i++) {
        const uint32_t bits = i < 11 ? patterns[i] : patterns[11 + (i * 977) % (patterns.size() - 11)];
        std::memcpy(&special[i], &bits, 4);
    }
    check_row_stream<uint16_t>(special, f);
    for (float by : {0.37f, 0x1p-130f, 0x1p+127f}) {  // a plain scale, products in the subnormals, past the largest bf16
        check_row_stream<uint16_t>(rows, f, &by);
        check_row_stream<float>(rows, f, &by);
    }
    const float *scales[] = {nullptr, &rows[7]};
    for (const float *by : scales) {
        check_deferred_row_stream<float>(rows, f, by);
        check_deferred_row_stream<uint16_t>(special, f, by);
    }
}

/** rfk::topk_insert (redfuse_cpu.h: the strict-compare fast path, `better` for ties and NaNs) against a
 *  sort of every offered (value, index) by `better`: values with many ties and NaNs, offered in the
 *  axis order and in a shuffled order (a segment merge offers lower indices after higher ones), k from
 *  1 to past the number of values. */

}  // namespace simd_check
