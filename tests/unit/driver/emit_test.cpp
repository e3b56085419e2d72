/** \file emit_test.cpp
 * `redfuse emit --target cpu`: the standalone .h/.cpp compile with only a C++ compiler into a
 * program that uses nothing but the documented C ABI (it discovers sizes, buffers and dtypes through
 * it), and its outputs match the float64 reference.
 */
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "driver/Compiler.h"
#include "interp/Compare.h"
#include "interp/Inputs.h"
#include "interp/Reference.h"
#include "runtime/CpuBackend.h"

using namespace rf;
namespace fs = std::filesystem;

namespace {

// A spec-independent driver: argv = sizes; reads b<i>.bin for inputs, writes b<i>.bin for outputs.
const char *kDriver = R"(
#include "kern.h"
#include <cstdio>
#include <cstdlib>
#include <vector>
static const int kBytes[] = {8, 4, 2, 2, 1, 1, 1, 4, 8};
int main(int argc, char **argv) {
    int ns = kern_num_sizes();
    if (argc != ns + 1) return 10;
    std::vector<int64_t> sizes(ns);
    for (int i = 0; i < ns; i++) sizes[i] = std::atoll(argv[i + 1]);
    int nb = kern_num_buffers();
    std::vector<std::vector<char>> data(nb);
    std::vector<void *> ptrs(nb);
    for (int i = 0; i < nb; i++) {
        char name[32];
        std::snprintf(name, sizeof name, "b%d.bin", i);
        std::FILE *f = std::fopen(name, "rb");
        if (!f) return 11;
        std::fseek(f, 0, SEEK_END);
        long n = std::ftell(f);
        std::fseek(f, 0, SEEK_SET);
        data[i].resize(n);
        if (n && std::fread(data[i].data(), 1, n, f) != (size_t)n) return 12;
        std::fclose(f);
        if (kern_buffer_dtype(i) < 0 || n % kBytes[kern_buffer_dtype(i)]) return 13;
        ptrs[i] = data[i].data();
    }
    if (kern_run(sizes.data(), ptrs.data(), 0) != 0) return 14;
    for (int i = 0; i < nb; i++) {
        if (!kern_buffer_is_output(i)) continue;
        char name[32];
        std::snprintf(name, sizeof name, "b%d.bin", i);
        std::FILE *f = std::fopen(name, "wb");
        std::fwrite(data[i].data(), 1, data[i].size(), f);
        std::fclose(f);
    }
    std::printf("ok\n");
    return 0;
}
)";

std::vector<unsigned char> read_bytes(const fs::path &p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

class EmitCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(EmitCpu, StandaloneProgramMatchesTheReference) {
    ArenaScope arena;
    fs::path dir = fs::temp_directory_path() / ("redfuse_emit_" + GetParam() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    auto c = analyze_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/" + GetParam() + ".rf", make_target(TargetKind::Cpu), {});
    std::vector<std::string> files = emit_cpu(*c, dir.string(), "kern");
    ASSERT_EQ(files.size(), 4u);
    std::ofstream(dir / "main.cpp") << kDriver;
    // Sizes other than the defaults the schedule was chosen for: the code takes them at run time.
    std::map<std::string, int64_t> want;
    for (const SizeDecl &s : c->program.sizes) want[s.name] = *s.default_value + (s.name == "E" || s.name == "C" ? 3 : 0);
    SizeBinding sizes = bind_sizes(c->program, want);
    auto inputs = make_random_inputs(c->program, sizes, 7);
    std::vector<DType> dt;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::string> names;
    for (const InputDecl &in : c->program.inputs) {
        std::vector<unsigned char> bytes(static_cast<size_t>(inputs.at(in.name).numel() * dtype_bytes(in.dtype)));
        encode_storage(inputs.at(in.name).data, in.dtype, bytes.data());
        std::ofstream(dir / ("b" + std::to_string(names.size()) + ".bin"), std::ios::binary)
            .write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        names.push_back(in.name);
    }
    for (const OutputDecl &out : c->program.outputs) {
        int64_t n = 1;
        for (int64_t d : def_shape(*c->program.find_def(out.name), sizes)) n *= d;
        std::vector<unsigned char> poison(static_cast<size_t>(n * dtype_bytes(out.dtype)), 0xFF);
        std::ofstream(dir / ("b" + std::to_string(names.size()) + ".bin"), std::ios::binary)
            .write(reinterpret_cast<const char *>(poison.data()), static_cast<std::streamsize>(poison.size()));
        names.push_back(out.name);
    }
    std::string cmd = "cd '" + dir.string() + "' && c++ -std=c++17 -O2 -ffp-contract=off -fopenmp main.cpp kern.cpp -o prog > build.log 2>&1 && ./prog";
    for (const SizeDecl &s : c->program.sizes) cmd += " " + std::to_string(sizes.at(s.name));
    cmd += " > run.log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << dir;
    auto ref = reference_outputs(c->program, run_reference(c->program, sizes, inputs));
    size_t i = c->program.inputs.size();
    for (const OutputDecl &out : c->program.outputs) {
        std::vector<unsigned char> bytes = read_bytes(dir / ("b" + std::to_string(i++) + ".bin"));
        Tensor got;
        got.shape = ref.at(out.name).shape;
        got.data = decode_storage(bytes.data(), static_cast<int64_t>(bytes.size()) / dtype_bytes(out.dtype), out.dtype);
        bool exact = is_int(out.dtype);
        int64_t n = 1;
        for (const auto &[k, v] : sizes) n = std::max(n, v);
        CompareResult r = compare(got, ref.at(out.name), exact ? 0 : tolerance(out.dtype, true, n), exact);
        EXPECT_TRUE(r.ok) << out.name << ": " << to_string(r);
    }
    fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Examples, EmitCpu, ::testing::Values("softmax", "moe_routing", "attention", "variance"));

TEST(EmitDumps, FollowTheSizesThePlanWasMadeFor) {
    // `analyze --emit tile|cuda --size ...` and `emit --size ...` choose the schedule for the given
    // sizes (they used the spec's defaults): split-KV decode is one segment at the defaults (N = 37)
    // and several at N = 8192.
    ArenaScope a;
    std::string spec = std::string(REDFUSE_SOURCE_DIR) + "/examples/decode_gqa.rf";
    Options big_opts;
    big_opts.sizes = {{"B", 4}, {"Hq", 32}, {"Hkv", 8}, {"N", 8192}, {"D", 128}};
    // The GPU model (264 workers): 128 rows do not fill it, so the long axis is split.
    Target gpu = make_target(TargetRequest{TargetKind::Cuda, "sm_90a", ""});
    auto small = analyze_file(spec, gpu, {});
    auto big = analyze_file(spec, gpu, big_opts);
    EXPECT_EQ(big->sizes.at("N"), 8192);
    EXPECT_EQ(small->sizes.at("N"), 37);
    EXPECT_NE(backend_dump(*small, Stage::Tile).find("segments=1 "), std::string::npos);
    EXPECT_NE(backend_dump(*big, Stage::Tile).find("strategy=multi_segment"), std::string::npos);
    EXPECT_NE(backend_dump(*small, Stage::Cuda), backend_dump(*big, Stage::Cuda));
    // A dump needs its stage's target.
    EXPECT_THROW(backend_dump(*small, Stage::Cpp), UserError);
}
