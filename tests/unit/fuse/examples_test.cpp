/** \file examples_test.cpp
 * Every shipped example: the verdict the foundation issue requires comes out, and the plan
 * interpreter (random tiles, segments and merge trees) equals the float64 reference at three or
 * more size sets per example, including one with sizes of 1 and one with prime sizes.
 */
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../ExampleSizes.h"
#include "FuseTestUtil.h"

using namespace rf;
using namespace rf::test;

namespace {

using test::read_text;
using test::next_prime;
std::vector<std::filesystem::path> examples() { return test::example_paths(); }
std::map<std::string, int64_t> variant(const Program &p, const std::function<int64_t(int64_t)> &f) { return test::size_variant(p, f); }

}  // namespace

TEST(Examples, PlanEqualsReferenceAtSeveralSizeSets) {
    for (const auto &path : examples()) {
        ArenaScope arena;
        auto c = compile_file(path.string(), {});
        std::vector<std::map<std::string, int64_t>> sets;
        sets.push_back({});
        auto ones = variant(c->program, [](int64_t) { return 1; });
        auto primes = variant(c->program, [](int64_t v) { return next_prime(v + 2); });
        auto odd = variant(c->program, [](int64_t v) { return 2 * v + 1; });
        bool has_one = false, has_prime_change = false;
        for (auto &[n, v] : ones) has_one |= v == 1;
        for (const SizeDecl &d : c->program.sizes) has_prime_change |= primes[d.name] != *d.default_value;
        EXPECT_TRUE(has_one) << path << ": no size can be 1";
        EXPECT_TRUE(has_prime_change) << path << ": no size can move to a prime";
        sets.push_back(ones);
        sets.push_back(primes);
        sets.push_back(odd);
        for (const auto &s : sets) {
            SizeBinding sizes = bind_sizes(c->program, s);
            InputDistribution dist =
                path.stem() == "moment_of_inertia" ? InputDistribution::Positive : InputDistribution::Normal;
            for (uint64_t seed : {11, 12, 13}) {
                double err = plan_vs_reference(*c, sizes, seed, false, dist);
                EXPECT_LE(err, 1e-12) << path.filename() << " seed " << seed;
            }
        }
    }
}

TEST(Examples, RequiredVerdicts) {
    struct Want {
        const char *example, *member;
        Relation relation;
        bool exact;
    };
    const Want wants[] = {
        {"softmax", "s", Relation::Multiplicative, true},
        {"logsumexp", "s", Relation::Multiplicative, true},
        {"log_softmax", "s", Relation::Multiplicative, true},
        {"attention", "m", Relation::Independent, true},
        {"attention", "l", Relation::Multiplicative, true},
        {"attention", "O.sum", Relation::Multiplicative, true},
        {"attention_causal", "O.sum", Relation::Multiplicative, true},
        {"attention_gqa", "O.sum", Relation::Multiplicative, true},
        {"decode_gqa", "O.sum", Relation::Multiplicative, true},
        {"mla_decode", "O.sum", Relation::Multiplicative, true},
        {"attention_softcap", "O.sum", Relation::Multiplicative, true},
        {"attention_alibi", "O.sum", Relation::Multiplicative, true},
        {"attention_sliding_window", "O.sum", Relation::Multiplicative, true},
        {"attention_sinks", "l", Relation::Multiplicative, true},
        {"moe_routing", "W", Relation::Monotone, true},
        {"quant_gemm_fp8", "C.sum", Relation::Multiplicative, false},
        {"quant_gemm_int8", "C.sum", Relation::Multiplicative, false},
        {"variance", "var.sum", Relation::Polynomial, true},
        {"layernorm", "var.sum", Relation::Polynomial, true},
        {"moment_of_inertia", "I", Relation::Polynomial, true},
        {"rmsnorm_gemm", "Y.sum", Relation::Multiplicative, true},
        {"linear_cross_entropy", "m", Relation::Independent, true},
        {"linear_cross_entropy", "z", Relation::Independent, true},
        {"linear_cross_entropy", "s", Relation::Multiplicative, true},
        {"argmax_softmax", "tok", Relation::Monotone, true},
        {"argmax_softmax", "p", Relation::Monotone, true},
        {"prod_normalized", "q", Relation::Multiplicative, true},
        {"prod_normalized", "lo", Relation::Additive, true},
        {"nofuse_max_after_mean", "t", Relation::None, true},
        {"nofuse_exp_product", "s", Relation::None, true},
        {"nofuse_log_shift", "t", Relation::None, true},
    };
    for (const Want &w : wants) {
        ArenaScope arena;
        auto c = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/" + w.example + ".rf", {});
        const MemberAnalysis *v = verdict(*c, w.member);
        ASSERT_TRUE(v) << w.example << " has no member " << w.member;
        EXPECT_EQ(v->relation, w.relation) << w.example << "." << w.member << ": " << relation_name(v->relation)
                                           << " " << v->reason;
        EXPECT_EQ(v->exact, w.exact) << w.example << "." << w.member;
        if (w.relation == Relation::None) {
            EXPECT_FALSE(v->counterexample.empty()) << w.example;
        }
        if (std::string(w.example).find("attention") == 0 || std::string(w.example).find("decode") == 0 ||
            std::string(w.example).find("mla") == 0) {
            const ChainPlan *ch = chain_of(*c, w.member);
            EXPECT_TRUE(ch->fused) << w.example;
            EXPECT_EQ(ch->prologue.size(), 1u) << w.example;  // QKᵀ
        }
    }
}

TEST(Examples, RmsNormDefersItsWholeScaleAndQuantizationDefaultsToTheExactPlan) {
    ArenaScope arena;
    auto rms = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/rmsnorm_gemm.rf", {});
    const MemberAnalysis *y = verdict(*rms, "Y.sum");
    EXPECT_TRUE(y->H_run->is_const(1));
    EXPECT_NE(describe_member(*y).update.find("no rescale"), std::string::npos);
    auto q = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/quant_gemm_fp8.rf", {});
    EXPECT_EQ(chain_of(*q, "C.sum")->strategy, Strategy::ExactPrepass);
}

TEST(Examples, AnalysisIsFast) {
    for (const auto &path : examples()) {
        ArenaScope arena;
        auto c = compile_file(path.string(), {});
        EXPECT_LT(c->analyze_ms, 1000) << path;  // generous: a correctness guard against blow-ups, not a benchmark
    }
}
