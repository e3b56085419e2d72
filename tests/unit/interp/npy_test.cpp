/** \file npy_test.cpp
 * .npy round trips for every dtype, compatibility with NumPy's own header layout, and strict
 * rejection of malformed files.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "Programs.h"
#include "interp/Inputs.h"
#include "interp/Npy.h"
#include "support/Error.h"

using namespace rf;
using namespace rf::test;

namespace {

std::string temp_dir(const std::string &tag) {
    auto d = std::filesystem::temp_directory_path() /
             ("redfuse_npy_" + tag + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
              std::to_string(reinterpret_cast<uintptr_t>(&tag)));
    std::filesystem::create_directories(d);
    return d.string();
}

/** A .npy v1.0 file with the given header dict (padded as NumPy does) and data bytes. */
std::string npy_bytes(const std::string &dict, const std::string &data, int major = 1) {
    std::string header = dict;
    size_t prefix = major == 1 ? 10 : 12;
    header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
    header.push_back('\n');
    std::string out("\x93NUMPY", 6);
    out.push_back(static_cast<char>(major));
    out.push_back(0);
    uint32_t len = static_cast<uint32_t>(header.size());
    out.append(reinterpret_cast<const char *>(&len), major == 1 ? 2 : 4);
    return out + header + data;
}

std::string floats(std::vector<float> v) { return std::string(reinterpret_cast<const char *>(v.data()), v.size() * 4); }

Tensor sample(std::vector<int64_t> shape, DType d, uint64_t seed) {
    Tensor t(shape, d);
    Rng rng(seed);
    for (double &v : t.data) v = round_to_dtype(is_int(d) ? rng.integer(-200, 200) : rng.normal() * 300, d);
    return t;
}

}  // namespace

TEST(Npy, RoundTripsEveryDtype) {
    for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2, DType::i8,
                    DType::i32, DType::i64}) {
        Tensor t = sample({3, 5, 2}, d, 17);
        if (is_float(d)) t.data[1] = -INFINITY, t.data[2] = NAN;  // survive exactly too
        Tensor r = parse_npy(encode_npy(t), "mem.npy");
        EXPECT_EQ(r.shape, t.shape) << dtype_name(d);
        DType stored = d == DType::f64 || is_int(d) ? d : DType::f32;
        EXPECT_EQ(r.dtype, stored) << dtype_name(d);
        for (size_t i = 0; i < t.data.size(); i++) {
            if (std::isnan(t.data[i]))
                EXPECT_TRUE(std::isnan(r.data[i]));
            else
                EXPECT_EQ(r.data[i], t.data[i]) << dtype_name(d) << " element " << i;
        }
    }
}

TEST(Npy, RoundTripsScalarsVectorsAndEmptyTensorsOnDisk) {
    std::string dir = temp_dir("shapes");
    for (std::vector<int64_t> shape : {std::vector<int64_t>{}, {1}, {7}, {0, 3}, {2, 1, 1, 3}}) {
        Tensor t = sample(shape, DType::f64, 3);
        std::string path = dir + "/t.npy";
        save_npy(path, t);
        Tensor r = load_npy(path);
        EXPECT_EQ(r.shape, shape);
        EXPECT_EQ(r.data, t.data);
    }
    std::filesystem::remove_all(dir);
}

TEST(Npy, WritesNumPysExactHeaderLayout) {
    Tensor t({3}, DType::f32);
    t.data = {0, 1, 2};
    std::string b = encode_npy(t);
    // What numpy.save(np.arange(3, dtype=np.float32)) writes: a 128-byte header, then the data.
    std::string expect_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
    ASSERT_EQ(b.size(), 128u + 12u);
    EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ(static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8), 118);
    EXPECT_EQ(b.substr(10, expect_dict.size()), expect_dict);
    EXPECT_EQ(b[127], '\n');
    EXPECT_EQ(b.substr(128), floats({0, 1, 2}));
}

TEST(Npy, ReadsOtherWritersHeaders) {
    // Double quotes, no trailing comma, other key order, Python-2 long dims, version 2.0.
    Tensor a = parse_npy(npy_bytes("{\"shape\": (2L, 1), \"descr\": \"<f4\", \"fortran_order\": False}", floats({1, 2})),
                         "a.npy");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(a.data, (std::vector<double>{1, 2}));
    Tensor b = parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", floats({5}), 2),
                         "b.npy");
    EXPECT_EQ(b.data, (std::vector<double>{5}));
}

TEST(Npy, ReadsHalfPrecision) {
    uint16_t h[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0xfc00};  // 1, -2, 65504, 2^-24, -inf
    std::string data(reinterpret_cast<const char *>(h), sizeof h);
    Tensor t = parse_npy(npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }", data), "h.npy");
    EXPECT_EQ(t.dtype, DType::f16);
    EXPECT_EQ(t.data, (std::vector<double>{1, -2, 65504, std::ldexp(1.0, -24), -INFINITY}));
}

TEST(Npy, MalformedFilesAreUserErrorsNamingTheFile) {
    std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
    std::string data = floats({1, 2, 3, 4});
    std::string good = npy_bytes(good_dict, data);
    ASSERT_NO_THROW(parse_npy(good, "good.npy"));
    std::vector<std::pair<std::string, std::string>> bad = {
        {"empty", ""},
        {"bad magic", "\x93NUMPZ" + good.substr(6)},
        {"not npy", "hello world, this is text"},
        {"bad version", good.substr(0, 6) + "\x07" + good.substr(7)},
        {"truncated header", good.substr(0, 40)},
        {"truncated data", good.substr(0, good.size() - 3)},
        {"trailing data", good + "xx"},
        {"fortran order", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data)},
        {"big endian", npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", data)},
        {"complex", npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", data)},
        {"structured", npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", data)},
        {"shape overflow", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4), }", data)},
        {"huge dim", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", data)},
        {"negative dim", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }", data)},
        {"missing key", npy_bytes("{'descr': '<f4', 'shape': (2, 2), }", data)},
        {"unknown key", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", data)},
        {"duplicate key", npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)}", data)},
        {"unterminated", npy_bytes("{'descr': '<f4, 'fortran_order': False", data)},
        {"header length beyond file", good.substr(0, 8) + std::string("\xff\xff", 2) + good.substr(10)},
        {"garbage after dict", npy_bytes(good_dict + " junk", data)},
    };
    for (const auto &[what, bytes] : bad) {
        try {
            parse_npy(bytes, "in.npy");
            ADD_FAILURE() << what << ": accepted";
        } catch (const UserError &e) {
            EXPECT_NE(std::string(e.what()).find("in.npy"), std::string::npos) << what << ": " << e.what();
        } catch (const std::exception &e) {
            ADD_FAILURE() << what << ": wrong exception " << e.what();
        }
    }
}

TEST(Npy, MissingFileIsUserError) {
    EXPECT_THROW(load_npy("/nonexistent/redfuse/x.npy"), UserError);
    EXPECT_THROW(load_npy(std::filesystem::temp_directory_path().string()), UserError);  // a directory
}

TEST(Npy, SaveDirAndLoadDirRoundTripInputs) {
    ArenaScope scope;
    Program p = softmax_program(DType::bf16);
    SizeBinding s{{"R", 3}, {"C", 5}};
    auto in = make_random_inputs(p, s, 8);
    std::string dir = temp_dir("dir") + "/sub";
    save_dir(dir, in);
    EXPECT_TRUE(std::filesystem::exists(dir + "/X.npy"));
    auto back = load_dir(dir, p, s);
    EXPECT_EQ(back.at("X").dtype, DType::bf16);
    EXPECT_EQ(back.at("X").data, in.at("X").data);

    // Values not representable in the declared dtype are rounded to it on load.
    Tensor raw({3, 5}, DType::f64);
    for (size_t i = 0; i < raw.data.size(); i++) raw.data[i] = 1.0 + 1.0 / 1024 + static_cast<double>(i);
    save_dir(dir, {{"X", raw}});
    back = load_dir(dir, p, s);
    for (size_t i = 0; i < raw.data.size(); i++) EXPECT_EQ(back.at("X").data[i], round_to_dtype(raw.data[i], DType::bf16));

    // A wrong shape or a missing file is an error naming the file.
    EXPECT_THROW(load_dir(dir, p, {{"R", 4}, {"C", 5}}), UserError);
    std::filesystem::remove(dir + "/X.npy");
    EXPECT_THROW(load_dir(dir, p, s), UserError);
    std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

TEST(Npy, RandomCorruptionsNeverCrash) {
    Tensor t = sample({4, 3}, DType::f32, 1);
    std::string good = encode_npy(t);
    Rng rng(99);
    for (int iter = 0; iter < 3000; iter++) {
        std::string b = good;
        int edits = 1 + static_cast<int>(rng.integer(0, 3));
        for (int e = 0; e < edits; e++) {
            size_t pos = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(b.size()) - 1));
            switch (rng.integer(0, 2)) {
            case 0: b[pos] = static_cast<char>(rng.integer(0, 255)); break;
            case 1: b.resize(pos); break;
            default: b.insert(pos, 1, static_cast<char>(rng.integer(32, 126))); break;
            }
            if (b.empty()) break;
        }
        try {
            Tensor r = parse_npy(b, "fuzz.npy");
            EXPECT_EQ(static_cast<size_t>(r.numel()), r.data.size());
        } catch (const UserError &) {
        }
    }
}
