/** \file Sha256.h
 * SHA-256 (FIPS 180-4), the hash of the JIT cache keys and of the integrity stamps of cached objects.
 */
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace rf {

/** Incremental SHA-256: update() any number of times, then hex() once. */
class Sha256 {
public:
    Sha256();
    void update(const void *data, size_t len);
    void update(std::string_view s) { update(s.data(), s.size()); }
    /** The 64-character lowercase hex digest; the object must not be updated afterwards. */
    std::string hex();

private:
    void block(const uint8_t *p);
    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> buf_;
    size_t buf_len_ = 0;
    uint64_t total_ = 0;
};

/** SHA-256 of `s` as lowercase hex. */
std::string sha256_hex(std::string_view s);

/** SHA-256 of a file's bytes as lowercase hex, and its size; false when the file cannot be read. */
bool sha256_file(const std::string &path, std::string &hex, uint64_t &size);

}  // namespace rf
