/** \file row_reduced_members_test.cpp
 * Row-reduced members (src/tile/LowerRowReduced.cpp): a chain of sums over another chain's row
 * variable runs inside that chain's tiles on the CPU (the attention backward's dQ inside its dK/dV
 * chain, linear + cross-entropy's dX inside its dW chain), in both kernel forms (outer rows owning
 * their partial sums, worker copies added in order), deterministically, and only where it is right.
 */
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "driver/Report.h"
#include "grad/Grad.h"
#include "spec/Frontend.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::string backward_of(const std::string &example) {
    std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (example + ".rf");
    return derive_backward(parse_program(test::read_text(path), path.string()), {}).backward_spec;
}

tile::Module module_of(const std::string &spec, TargetKind target, const std::map<std::string, int64_t> &sizes = {}) {
    Options o;
    o.sizes = sizes;
    auto c = analyze_source(spec, "backward.rf", make_target(target), o);
    return generate(*c).module;
}

const tile::Kernel *host_of(const tile::Module &m) {
    for (const tile::Kernel &k : m.kernels)
        if (k.what.find("(over the rows)") != std::string::npos) return &k;
    return nullptr;
}

}  // namespace

TEST(RowReducedMembers, AttentionBackwardComputesDQInsideItsDKDVChain) {
    // FlashAttention-2's backward: per (key block, query tile) S, dP, then dV += Pᵀ·dO, dK += dSᵀ·Q
    // and dQ += dS·K: 5 GEMMs, where a dQ kernel of its own recomputes S and dP (7).
    for (const char *name : {"attention", "attention_causal", "attention_softcap", "attention_alibi", "attention_sliding_window"}) {
        SCOPED_TRACE(name);
        ArenaScope arena;
        tile::Module m = module_of(backward_of(name), TargetKind::Cpu);
        const tile::Kernel *host = host_of(m);
        ASSERT_TRUE(host) << tile::to_string(m);
        EXPECT_NE(host->what.find("dK, dV + dQ (over the rows)"), std::string::npos) << host->what;
        std::string text = tile::to_string(m);
        EXPECT_EQ(test::count_of(text, "over the rows"), 1u);
        // The host computes S, dP, dK, dV and dQ; no kernel of its own sums dQ.
        std::string host_text = text.substr(text.find(host->name));
        EXPECT_GE(test::count_of(host_text, "gemm "), 5u) << host_text;
        for (const tile::Kernel &k : m.kernels) EXPECT_EQ(k.what.find("chain [dQ"), std::string::npos) << k.what;
    }
}

TEST(RowReducedMembers, GpuTargetsKeepTheirOwnDQChain) {
    ArenaScope arena;
    for (TargetKind t : {TargetKind::OpenCL, TargetKind::Cuda}) {
        tile::Module m = module_of(backward_of("attention"), t);
        EXPECT_EQ(host_of(m), nullptr) << tile::to_string(m);
        EXPECT_EQ(m.kernels.size(), 3u);
    }
}

TEST(RowReducedMembers, TheSmallerPartialSumsRide) {
    // Linear + cross-entropy's backward: dX[t,d] = Σ_v W[v,d]·dL[t,v] and dW[v,d] = Σ_t X[t,d]·dL[t,v]
    // share the logits tile. Either can ride along the other; dX's partial sums are T·D (per worker
    // or outer row), dW's would be V·D: dX rides along the dW chain.
    ArenaScope arena;
    tile::Module m = module_of(backward_of("linear_cross_entropy"), TargetKind::Cpu, {{"T", 64}, {"D", 32}, {"V", 4096}});
    const tile::Kernel *host = host_of(m);
    ASSERT_TRUE(host) << tile::to_string(m);
    EXPECT_NE(host->what.find("dWv + dHd (over the rows)"), std::string::npos) << host->what;
    EXPECT_EQ(m.kernels.size(), 1u);
}

TEST(RowReducedMembers, BothKernelFormsRunRight) {
    // B·H >= workers: each (b, h) owns its dQ rows; B·H < workers: worker copies, merged. Partial
    // row blocks (N not a multiple of the block), tiles that end early, one row, 1, 2 and 3 workers.
    const std::vector<std::map<std::string, int64_t>> sizes = {
        {{"B", 1}, {"H", 1}, {"M", 67}, {"N", 131}, {"D", 16}},
        {{"B", 2}, {"H", 3}, {"M", 300}, {"N", 70}, {"D", 8}},
        {{"B", 1}, {"H", 1}, {"M", 1}, {"N", 1}, {"D", 1}},
    };
    struct Case {
        const char *name;
        size_t size;
        int threads;
    };
    for (const Case &c : {Case{"attention", 0, 2}, Case{"attention", 1, 3}, Case{"attention", 2, 1}, Case{"attention_causal", 0, 2},
                          Case{"attention_causal", 1, 2}}) {
        RunOptions o;
        o.sizes = sizes[c.size];
        if (std::string(c.name) == "attention_causal") o.sizes.erase("M");
        o.threads = c.threads;
        test::check_run(std::string(c.name) + "_backward.rf", backward_of(c.name), o, "cpu", {1});
    }
    {
        // Forced short row blocks and tiles: blocks that end early in both directions.
        RunOptions o;
        o.sizes = sizes[1];
        o.row_block = 3;
        o.tile = 5;
        test::check_run("attention_backward.rf", backward_of("attention"), o, "cpu", {2});
    }
    RunOptions o;
    o.sizes = {{"T", 37}, {"D", 19}, {"V", 301}};
    for (int threads : {1, 2}) {
        o.threads = threads;
        test::check_run("linear_cross_entropy_backward.rf", backward_of("linear_cross_entropy"), o, "cpu", {1, 2});
    }
}

TEST(RowReducedMembers, WorkerCopiesAddUpTheSameWayEveryRun) {
    // One head, two workers: each sums its row blocks into its copy; the copies are added in worker
    // order, so two runs agree bit for bit.
    ArenaScope arena;
    std::string spec = backward_of("attention");
    auto dir = std::filesystem::temp_directory_path() / ("rf_row_reduced_" + std::to_string(::getpid()));
    std::string dq[2];
    for (int run = 0; run < 2; run++) {
        RunOptions o;
        o.target = TargetKind::Cpu;
        o.threads = 2;
        o.sizes = {{"B", 1}, {"H", 1}, {"M", 129}, {"N", 517}, {"D", 16}};
        o.save_dir = (dir / std::to_string(run)).string();
        std::filesystem::create_directories(o.save_dir);
        auto c = compile_source(spec, "backward.rf", o.compile_options());
        run_compiled(*c, o);
        std::ifstream in(std::filesystem::path(o.save_dir) / "dQ.npy", std::ios::binary);
        dq[run].assign(std::istreambuf_iterator<char>(in), {});
    }
    std::filesystem::remove_all(dir);
    ASSERT_FALSE(dq[0].empty());
    EXPECT_EQ(dq[0], dq[1]);
}

TEST(RowReducedMembers, OnlySumsOfATileGemmOverTheHostsRowsRide) {
    ArenaScope arena;
    // R[b,i,d] = Σ_j exp(S[b,i,j])·K[b,j,d] rides along G's chain (rows b, j; axis i): per tile,
    // R[b, i-tile, :] += exp(S)ᵀ·K[b, j-block, :] (G could ride along R's chain too; R's partial
    // sums are smaller, M < N). R2 multiplies by Q[b,i,d] as well: two factors carry d, no GEMM
    // over G's rows, so R2 cannot ride; G still rides along R2's chain.
    const std::string head = "size B = 2, M = 9, N = 13, D = 4\n"
                             "input Q[B, M, D] : f32\ninput K[B, N, D] : f32\n"
                             "S[b,i,j] = sum(d: Q[b,i,d] * K[b,j,d])\n"
                             "G[b,j,d] = sum(i: exp(S[b,i,j]) * Q[b,i,d])\n";
    std::string rides = head + "R[b,i,d] = sum(j: exp(S[b,i,j]) * K[b,j,d])\noutput G, R\n";
    std::string stays = head + "R2[b,i,d] = sum(j: exp(S[b,i,j]) * K[b,j,d] * Q[b,i,d])\noutput G, R2\n";
    EXPECT_EQ(test::count_of(tile::to_string(module_of(rides, TargetKind::Cpu)), "[G + R (over the rows)]"), 1u);
    std::string text = tile::to_string(module_of(stays, TargetKind::Cpu));
    EXPECT_EQ(test::count_of(text, "(over the rows)"), 1u) << text;
    EXPECT_EQ(test::count_of(text, "[R2 + G (over the rows)]"), 1u) << text;
    RunOptions o;
    test::check_run("rides.rf", rides, o, "cpu", {1, 2});
    test::check_run("stays.rf", stays, o, "cpu", {1});
}

TEST(RowReducedMembers, TheHostsTileKeepsThePartialSumBlockInL2) {
    // Linear + cross-entropy at D = 1024: each row block adds a tile × D float block of dX's
    // partial sums; the host's tile shrinks until that block fits the CPU's L2 (or to 256).
    ArenaScope arena;
    Target t = make_target(TargetKind::Cpu);
    if (t.cpu.l2_bytes <= 0) GTEST_SKIP() << "the host's L2 size is unknown";
    tile::Module m = module_of(backward_of("linear_cross_entropy"), TargetKind::Cpu, {{"T", 1024}, {"D", 1024}, {"V", 32000}});
    const tile::Kernel *host = host_of(m);
    ASSERT_TRUE(host);
    EXPECT_TRUE(host->schedule.tile * 1024 * 4 <= t.cpu.l2_bytes || host->schedule.tile == 256) << host->schedule.tile;
    if (t.cpu.l2_bytes < 4 * 1024 * 1024) { EXPECT_LT(host->schedule.tile, 1024); }
}
