/** \file print_test.cpp
 * The spec printer (spec/Print.h): every example prints to a spec that parses back to the same
 * program (same text when printed again, the same reference outputs bit for bit), lifted names
 * become identifiers, and canonical (simplified) forms print as parseable text.
 */
#include <gtest/gtest.h>

#include "../ExampleSizes.h"
#include "interp/Inputs.h"
#include "interp/Reference.h"
#include "spec/Frontend.h"
#include "spec/Print.h"
#include "sym/Simplify.h"

using namespace rf;

namespace {

TEST(SpecPrint, EveryExampleRoundTrips) {
    for (const auto &path : test::example_paths()) {
        SCOPED_TRACE(path.string());
        ArenaScope scope;
        Program p1 = parse_program(test::read_text(path), path.string());
        std::string t1 = print_spec(p1);
        Program p2;
        ASSERT_NO_THROW(p2 = parse_program(t1, "printed.rf")) << t1;
        EXPECT_EQ(print_spec(p2), t1);
        ASSERT_EQ(p1.defs.size(), p2.defs.size());
        SizeBinding s = bind_sizes(p1, {});
        auto inputs = make_random_inputs(p1, s, 7);
        auto r1 = reference_outputs(p1, run_reference(p1, s, inputs));
        auto r2 = reference_outputs(p2, run_reference(p2, bind_sizes(p2, {}), inputs));
        for (const auto &[name, t] : r1) {
            ASSERT_TRUE(r2.count(name)) << name;
            EXPECT_EQ(t.data, r2.at(name).data) << name;
        }
    }
}

TEST(SpecPrint, LiftedNamesBecomeIdentifiers) {
    ArenaScope scope;
    Program p = parse_program(test::read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples/attention.rf"),
                              "attention.rf");
    std::string t = print_spec(p, {"a header"});
    EXPECT_EQ(t.rfind("# a header\n", 0), 0u);
    EXPECT_NE(t.find("O_sum[b:B, h:H, i:M, e:D] = sum(j: "), std::string::npos) << t;
    EXPECT_NE(t.find("O[b:B, h:H, i:M, e:D] = O_sum[b, h, i, e] / l[b, h, i]"), std::string::npos) << t;
    EXPECT_EQ(t.find("O.sum"), std::string::npos) << t;
}

TEST(SpecPrint, CanonicalFormsParseBack) {
    ArenaScope scope;
    Program p = parse_program(test::read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples/layernorm.rf"),
                              "layernorm.rf");
    for (auto &d : p.defs) d.body = simplify(d.body);
    std::string t = print_spec(p);
    Program q;
    ASSERT_NO_THROW(q = parse_program(t, "canonical.rf")) << t;
    SizeBinding s = bind_sizes(p, {});
    auto inputs = make_random_inputs(p, s, 3);
    auto a = reference_outputs(p, run_reference(p, s, inputs)).at("Y");
    auto b = reference_outputs(q, run_reference(q, s, inputs)).at("Y");
    for (size_t i = 0; i < a.data.size(); i++) EXPECT_NEAR(a.data[i], b.data[i], 1e-6 * (1 + std::fabs(a.data[i])));
}

}  // namespace

namespace {
// An explicit extent is an integer context of its own: the value after it may use index variables
// outside loads (the checker used to keep the extent's "sizes only" rule for the whole definition).
TEST(SpecPrint, ExplicitExtentsThenIndexVariablesInValues) {
    ArenaScope scope;
    EXPECT_NO_THROW(parse_program("size N = 4\ninput X[N, N] : f32\nY[i:N, j:N] = select(j <= i, X[i,j], 0)\n"
                                  "output Y\n", "t.rf"));
}
}  // namespace
