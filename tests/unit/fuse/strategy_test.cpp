/** \file strategy_test.cpp
 * The strategy enum's spellings (a contract of analyze's output and the golden files) and the
 * parsing of user-given names.
 */
#include <gtest/gtest.h>

#include "fuse/Strategy.h"
#include "support/Error.h"

using namespace rf;

namespace {

const std::pair<Strategy, const char *> kSpellings[] = {
    {Strategy::SinglePass, "single_pass"},       {Strategy::Incremental, "incremental"},
    {Strategy::MultiSegment, "multi_segment"},   {Strategy::OnchipMultipass, "onchip_multipass"},
    {Strategy::MultiPass, "multi_pass"},         {Strategy::ExactPrepass, "exact_prepass"},
    {Strategy::Literal, "literal"},
};

TEST(Strategy, SpellingsAreStable) {
    for (auto [s, name] : kSpellings) EXPECT_STREQ(to_string(s), name);
}

TEST(Strategy, ParsesEverySpelling) {
    for (auto [s, name] : kSpellings) EXPECT_EQ(parse_strategy(name), s) << name;
}

TEST(Strategy, UnknownNameIsAUserErrorListingTheValidOnes) {
    for (const char *bad : {"", "sideways", "unfused", "Incremental", "multi-pass", "single_pass "}) {
        try {
            parse_strategy(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const UserError &e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find("'" + std::string(bad) + "'"), std::string::npos) << msg;
            for (auto [s, name] : kSpellings) EXPECT_NE(msg.find(name), std::string::npos) << name << " missing in: " << msg;
        }
    }
    EXPECT_EQ(strategy_names(), "single_pass, incremental, multi_segment, onchip_multipass, multi_pass, exact_prepass, literal");
}

}  // namespace
