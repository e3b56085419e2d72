/** \file report_golden_test.cpp
 * Golden dumps: the `analyze` text and the `--emit plan` dump of every example are compared with
 * tests/golden/analyze/NAME.txt, so any change in a derivation shows up in review. Regenerate with
 * REDFUSE_UPDATE_GOLDEN=1 after an intended change, and read the diff.
 */
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "driver/Compiler.h"

using namespace rf;
namespace fs = std::filesystem;

TEST(Golden, AnalyzeAndPlanDumpsOfEveryExample) {
    fs::path root(REDFUSE_SOURCE_DIR);
    bool update = std::getenv("REDFUSE_UPDATE_GOLDEN") != nullptr;
    int compared = 0;
    for (const auto &e : fs::directory_iterator(root / "examples")) {
        if (e.path().extension() != ".rf") continue;
        ArenaScope arena;
        std::string rel = "examples/" + e.path().filename().string();
        std::ifstream in(e.path());
        std::stringstream src;
        src << in.rdbuf();
        auto c = compile_source(src.str(), rel, {});
        std::string got = analysis_text(*c) + "\n--- plan ---\n" + plan_dump(*c);
        fs::path golden = root / "tests/golden/analyze" / (e.path().stem().string() + ".txt");
        if (update) {
            std::ofstream(golden) << got;
            continue;
        }
        ASSERT_TRUE(fs::exists(golden)) << golden << " missing: run with REDFUSE_UPDATE_GOLDEN=1";
        std::ifstream g(golden);
        std::stringstream want;
        want << g.rdbuf();
        EXPECT_EQ(got, want.str()) << "golden mismatch for " << rel;
        compared++;
    }
    if (!update) { EXPECT_GE(compared, 20); }
}
