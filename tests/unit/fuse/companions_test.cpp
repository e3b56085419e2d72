/** \file companions_test.cpp
 * Companion sums (src/fuse/Companions.cpp): the moment of a shift-form member that an earlier
 * multiplicative member already sums is found with its sign, whatever the variable names, and only
 * where the tile update can share it: not when a member in between reads the companion, not when
 * the reference reads a running sum, not for a different term.
 */
#include "../ExampleSizes.h"
#include "FuseTestUtil.h"

using namespace rf;
using namespace rf::test;

namespace {

std::string entropy(const std::string &between = "", const std::string &s_body = "exp(X[i,j] - m[i])") {
    return "size R = 4, C = 37\ninput X[R, C] : f32\n"
           "m[r] = max(c: X[r,c])\n"
           "s[i] = sum(j: " + s_body + ")\n" + between +
           "t[r] = sum(c: (X[r,c] - m[r]) * exp(X[r,c] - m[r]))\n"
           "H[r] = log(s[r]) - t[r] / s[r]\n"
           "output H : f32\n";
}

std::vector<std::string> companions(const Compilation &c, const std::string &member) {
    const MemberAnalysis *t = verdict(c, member);
    EXPECT_TRUE(t);
    return t ? t->companion : std::vector<std::string>{};
}

}  // namespace

TEST(Companions, TheEntropysFirstMomentIsMinusTheSoftmaxSum) {
    ArenaScope arena;
    auto c = compile(entropy());
    const MemberAnalysis *t = verdict(*c, "t");
    ASSERT_TRUE(t);
    ASSERT_EQ(t->relation, Relation::ExpPolynomial) << t->reason;
    ASSERT_EQ(t->companion.size(), 2u);
    EXPECT_EQ(t->companion[0], "");   // S_0 = Σ (X - m)·e^{X - m}: no member sums it
    EXPECT_EQ(t->companion[1], "s");  // S_1 = -Σ e^{X - m}, s's terms written over i, j
    EXPECT_EQ(t->companion_scale[1], -1.0);
    MemberText text = describe_member(*t);
    EXPECT_NE(text.basis[1].find("= −s (a companion sum"), std::string::npos) << text.basis[1];
}

TEST(Companions, NoneWhenAMemberInBetweenReadsTheCompanion) {
    ArenaScope arena;
    auto c = compile(entropy("u[r] = sum(c: X[r,c] / s[r])\n") + "output u : f32\n");
    ASSERT_EQ(verdict(*c, "u")->relation, Relation::Multiplicative);
    EXPECT_EQ(companions(*c, "t"), (std::vector<std::string>{"", ""}));
}

TEST(Companions, NoneForADifferentTerm) {
    ArenaScope arena;
    auto c = compile(entropy("", "exp(2 * (X[i,j] - m[i]))"));
    EXPECT_EQ(companions(*c, "t"), (std::vector<std::string>{"", ""}));
    auto d = compile(entropy("", "exp(X[i,j] - m[i]) * X[i,j]"));
    EXPECT_EQ(companions(*d, "t"), (std::vector<std::string>{"", ""}));
}

TEST(Companions, NoneWhenTheReferenceReadsARunningSum) {
    // The weighted variance's reference is mu = mu.sum / s, an estimate from running sums: its
    // S_20 = Σ e^{X - m} equals s's terms, but the update evaluates them at another reference.
    ArenaScope arena;
    auto c = compile(read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "softmax_weighted_variance.rf"));
    for (const std::string &name : companions(*c, "var.sum")) EXPECT_EQ(name, "");
}
