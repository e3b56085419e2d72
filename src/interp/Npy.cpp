/** \file Npy.cpp
 * The .npy reader and writer of Npy.h. The header is a Python dict literal; it is parsed by a small
 * strict recursive-descent reader rather than by pattern matching, so odd but valid spacing from other
 * writers is accepted and anything else is rejected with a message.
 */
#include "interp/Npy.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "interp/Reference.h"
#include "support/Error.h"

namespace rf {

static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// Far beyond any tensor redfuse tests with, small enough that a forged header cannot exhaust memory.
constexpr int64_t kMaxElements = int64_t(1) << 36;

[[noreturn]] void fail(const std::string &name, const std::string &msg) {
    throw UserError({}, name + ": " + msg);
}

struct Descr {
    const char *text;
    DType dtype;
    int bytes;
};

// What save_npy writes for a dtype: narrower floats go to f32, which holds them exactly.
Descr descr_for(DType t) {
    switch (t) {
    case DType::f64: return {"<f8", DType::f64, 8};
    case DType::i8: return {"|i1", DType::i8, 1};
    case DType::i32: return {"<i4", DType::i32, 4};
    case DType::i64: return {"<i8", DType::i64, 8};
    default: return {"<f4", DType::f32, 4};
    }
}

std::optional<Descr> parse_descr(const std::string &s) {
    if (s == "<f8") return Descr{"<f8", DType::f64, 8};
    if (s == "<f4") return Descr{"<f4", DType::f32, 4};
    if (s == "<f2") return Descr{"<f2", DType::f16, 2};
    if (s == "<i8") return Descr{"<i8", DType::i64, 8};
    if (s == "<i4") return Descr{"<i4", DType::i32, 4};
    if (s == "|i1" || s == "<i1") return Descr{"|i1", DType::i8, 1};
    return std::nullopt;
}

double half_to_double(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    double v;
    if (exp == 0)
        v = std::ldexp(static_cast<double>(frac), -24);  // subnormal
    else if (exp == 31)
        v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else
        v = std::ldexp(static_cast<double>(frac | 0x400), exp - 25);
    return sign ? -v : v;
}

/** The header dict: `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`. */
struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
};

class HeaderParser {
public:
    HeaderParser(const std::string &text, const std::string &name) : s_(text), name_(name) {}

    Header parse() {
        Header h;
        bool have_descr = false, have_order = false, have_shape = false;
        skip_ws();
        expect('{');
        while (true) {
            skip_ws();
            if (peek() == '}') {
                pos_++;
                break;
            }
            std::string key = string_literal();
            skip_ws();
            expect(':');
            skip_ws();
            auto once = [&](bool &seen) {
                if (seen) fail(name_, "header repeats the key '" + key + "'");
                seen = true;
            };
            if (key == "descr") {
                once(have_descr);
                if (peek() != '\'' && peek() != '"')
                    fail(name_, "unsupported element type (structured dtypes are not supported)");
                h.descr = string_literal();
            } else if (key == "fortran_order") {
                once(have_order);
                h.fortran_order = boolean();
            } else if (key == "shape") {
                once(have_shape);
                h.shape = tuple();
            } else {
                fail(name_, "header has an unknown key '" + key + "'");
            }
            skip_ws();
            if (peek() == ',') {
                pos_++;
                continue;
            }
            skip_ws();
            expect('}');
            break;
        }
        skip_ws();
        if (pos_ != s_.size()) fail(name_, "header has trailing characters after the dict");
        if (!have_descr || !have_order || !have_shape)
            fail(name_, "header lacks one of the keys 'descr', 'fortran_order', 'shape'");
        return h;
    }

private:
    char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
    void skip_ws() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            pos_++;
    }
    void expect(char c) {
        if (peek() != c) fail(name_, std::string("malformed header: expected '") + c + "'");
        pos_++;
    }
    std::string string_literal() {
        char q = peek();
        if (q != '\'' && q != '"') fail(name_, "malformed header: expected a quoted string");
        pos_++;
        size_t start = pos_;
        while (pos_ < s_.size() && s_[pos_] != q) {
            if (s_[pos_] == '\\') fail(name_, "malformed header: escapes in strings are not supported");
            pos_++;
        }
        if (pos_ >= s_.size()) fail(name_, "malformed header: unterminated string");
        return s_.substr(start, pos_++ - start);
    }
    bool boolean() {
        if (s_.compare(pos_, 4, "True") == 0) {
            pos_ += 4;
            return true;
        }
        if (s_.compare(pos_, 5, "False") == 0) {
            pos_ += 5;
            return false;
        }
        fail(name_, "malformed header: fortran_order must be True or False");
    }
    std::vector<int64_t> tuple() {
        std::vector<int64_t> dims;
        expect('(');
        while (true) {
            skip_ws();
            if (peek() == ')') {
                pos_++;
                break;
            }
            if (!(peek() >= '0' && peek() <= '9')) fail(name_, "malformed header: shape must hold non-negative integers");
            int64_t v = 0;
            while (peek() >= '0' && peek() <= '9') {
                int d = peek() - '0';
                if (v > (std::numeric_limits<int64_t>::max() - d) / 10) fail(name_, "shape dimension overflows");
                v = v * 10 + d;
                pos_++;
            }
            if (peek() == 'L') pos_++;  // Python 2 long literal
            dims.push_back(v);
            skip_ws();
            if (peek() == ',') {
                pos_++;
                continue;
            }
            skip_ws();
            expect(')');
            break;
        }
        return dims;
    }

    const std::string &s_;
    const std::string &name_;
    size_t pos_ = 0;
};

template <typename T>
T read_le(const char *p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

}  // namespace

std::string encode_npy(const Tensor &t) {
    Descr d = descr_for(t.dtype);
    std::ostringstream h;
    h << "{'descr': '" << d.text << "', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < t.shape.size(); i++) h << (i ? ", " : "") << t.shape[i];
    if (t.shape.size() == 1) h << ",";  // a Python 1-tuple
    h << "), }";
    std::string header = h.str();
    // Version 1.0 has a 2-byte header length; larger headers need 2.0. Pad so data is 64-byte aligned.
    bool v2 = header.size() + 1 + 10 > 65535;
    size_t prefix = v2 ? 12 : 10;
    size_t total = prefix + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');

    std::string out(kMagic, kMagicLen);
    out.push_back(static_cast<char>(v2 ? 2 : 1));
    out.push_back(0);
    uint32_t len = static_cast<uint32_t>(header.size());
    out.append(reinterpret_cast<const char *>(&len), v2 ? 4 : 2);
    out += header;

    size_t n = t.data.size();
    size_t start = out.size();
    out.resize(start + n * static_cast<size_t>(d.bytes));
    char *p = out.data() + start;
    for (size_t i = 0; i < n; i++) {
        double v = t.data[i];
        switch (d.dtype) {
        case DType::f64: std::memcpy(p + 8 * i, &v, 8); break;
        case DType::f32: {
            float f = static_cast<float>(round_to_dtype(v, DType::f32));
            std::memcpy(p + 4 * i, &f, 4);
            break;
        }
        case DType::i8: p[i] = static_cast<char>(static_cast<int8_t>(round_to_dtype(v, DType::i8))); break;
        case DType::i32: {
            int32_t x = static_cast<int32_t>(round_to_dtype(v, DType::i32));
            std::memcpy(p + 4 * i, &x, 4);
            break;
        }
        default: {
            int64_t x = static_cast<int64_t>(round_to_dtype(v, DType::i64));
            std::memcpy(p + 8 * i, &x, 8);
            break;
        }
        }
    }
    return out;
}

Tensor parse_npy(const std::string &bytes, const std::string &name) {
    if (bytes.size() < 10 || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0)
        fail(name, "not a NumPy .npy file (bad magic)");
    int major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
    if (major < 1 || major > 3 || minor != 0)
        fail(name, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
    size_t prefix = major == 1 ? 10 : 12;
    if (bytes.size() < prefix) fail(name, "truncated header");
    size_t header_len = major == 1 ? read_le<uint16_t>(bytes.data() + 8) : read_le<uint32_t>(bytes.data() + 8);
    if (header_len > bytes.size() - prefix) fail(name, "truncated header");
    std::string text = bytes.substr(prefix, header_len);
    Header h = HeaderParser(text, name).parse();

    std::optional<Descr> d = parse_descr(h.descr);
    if (!d) {
        if (!h.descr.empty() && h.descr[0] == '>') fail(name, "big-endian data ('" + h.descr + "') is not supported");
        fail(name, "unsupported element type '" + h.descr + "' (supported: <f8 <f4 <f2 <i8 <i4 |i1)");
    }
    if (h.fortran_order) fail(name, "Fortran-order arrays are not supported (save with C order)");
    int64_t n = 0;
    try {
        n = checked_numel(h.shape, "shape", kMaxElements);
    } catch (const UserError &) {
        fail(name, "shape " + shape_to_string(h.shape) + " is too large");
    }
    size_t data_len = bytes.size() - prefix - header_len;
    size_t need = static_cast<size_t>(n) * static_cast<size_t>(d->bytes);
    if (data_len < need)
        fail(name, "truncated data: " + std::to_string(data_len) + " bytes for shape " + shape_to_string(h.shape) +
                       " of '" + h.descr + "' (need " + std::to_string(need) + ")");
    if (data_len > need) fail(name, "unexpected " + std::to_string(data_len - need) + " bytes after the data");

    Tensor t;
    t.shape = h.shape;
    t.dtype = d->dtype;
    t.data.resize(static_cast<size_t>(n));
    const char *p = bytes.data() + prefix + header_len;
    for (size_t i = 0; i < t.data.size(); i++) {
        switch (d->dtype) {
        case DType::f64: t.data[i] = read_le<double>(p + 8 * i); break;
        case DType::f32: t.data[i] = read_le<float>(p + 4 * i); break;
        case DType::f16: t.data[i] = half_to_double(read_le<uint16_t>(p + 2 * i)); break;
        case DType::i64: t.data[i] = static_cast<double>(read_le<int64_t>(p + 8 * i)); break;
        case DType::i32: t.data[i] = read_le<int32_t>(p + 4 * i); break;
        default: t.data[i] = static_cast<int8_t>(p[i]); break;
        }
    }
    return t;
}

void save_npy(const std::string &path, const Tensor &t) {
    std::string bytes = encode_npy(t);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) fail(path, "cannot open for writing");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) fail(path, "write failed");
}

Tensor load_npy(const std::string &path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) fail(path, "no such file");
    if (!std::filesystem::is_regular_file(path, ec)) fail(path, "not a regular file");
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, "cannot open for reading");
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) fail(path, "read failed");
    return parse_npy(ss.str(), path);
}

void save_dir(const std::string &dir, const std::map<std::string, Tensor> &tensors) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail(dir, "cannot create directory: " + ec.message());
    for (const auto &[name, t] : tensors) save_npy((std::filesystem::path(dir) / (name + ".npy")).string(), t);
}

std::map<std::string, Tensor> load_dir(const std::string &dir, const Program &p, const SizeBinding &sizes) {
    std::map<std::string, Tensor> out;
    for (const InputDecl &in : p.inputs) {
        std::string path = (std::filesystem::path(dir) / (in.name + ".npy")).string();
        Tensor t = load_npy(path);
        std::vector<int64_t> shape = input_shape(in, sizes);
        if (t.shape != shape)
            fail(path, "shape " + shape_to_string(t.shape) + " does not match input '" + in.name + "' of shape " +
                           shape_to_string(shape));
        out[in.name] = round_output(t, in.dtype);
    }
    return out;
}

}  // namespace rf
