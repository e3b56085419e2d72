/** \file SimdRowCopyChecks.h
 * Checks of the CPU's row copies into outputs (simd_kernels_test.cpp includes this after the kernel
 * headers): rfk::copy_row_bf16's bits against store_bf16, and rfk::RowStream's chunked, streamed copies.
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

/** rfk::RowStream (redfuse_cpu_rows.h): rows copied in chunks — shorter than a line, a few lines, not a
 *  multiple of a line — starting at every 4-byte offset of a line, streamed or not, contiguous rows (a
 *  held line continues into the next row) and a copy elsewhere in between (the held line is stored
 *  plainly), with prefetches of the next row held for the copies (prefetch_next): after flush() every
 *  value is the row copy's (store_bf16's bits for bf16, also for the special values of `src`: NaN,
 *  inf, denormals, finite overflow) and nothing outside the rows changed. With `scale` (a scaled copy, ScaleRowCopies.cpp): each value is the
 *  float product src · scale, rounded as above. */
template <typename T>
void check_row_stream(const std::vector<float> &src, Failures &f, const float *scale = nullptr) {
    const T guard = sizeof(T) == 2 ? T(0xABCD) : T(-7.25f);
    auto want = [&](float v) -> T {
        if (scale) v = v * *scale;
        if constexpr (sizeof(T) == 2) return rfk::store_bf16(v);
        else return v;
    };
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

/** rfk::copy_row_bf16 (redfuse_cpu_rows.h: vcvtneps2bf16 where the build has AVX512_BF16, element by element
 *  for vectors with denormals, finite overflow, inf or NaN) gives store_bf16's bits for every value, at
 *  every row length and offset (vector body and tails), streamed or not. */
void check_bf16_rows(const std::vector<uint32_t> &patterns, Failures &f) {
    std::vector<float> src(patterns.size());
    for (size_t i = 0; i < patterns.size(); i++) std::memcpy(&src[i], &patterns[i], 4);
    // Runs of plain values too, so most vectors take the instruction.
    Rng rng(5);
    for (int i = 0; i < 4096; ++i) src.push_back(rng.uniform(-3.0f, 3.0f));
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

}  // namespace simd_check
