/** \file run_test.cpp
 * `run --check` (src/driver/Run.cpp): the report says when an output needed the cancellation
 * widening, and when the widening reached its cap (interp/Compare.h, kMaxCancellationWidening).
 */
#include <gtest/gtest.h>

#include "../runtime/TempDir.h"
#include "driver/Compiler.h"
#include "driver/Run.h"
#include "interp/Npy.h"

using namespace rf;

TEST(RunCheck, SaysWhenTheToleranceWasWidenedForCancellation) {
    // z = x1·w1 + x2·w2 cancels to 1/2000 of its terms: float32 arithmetic (interp-f32 rounds each
    // product) is 6e-5 off relative to z, beyond the normwise tolerance but well within what float
    // sums promise relative to Σ|terms|; the widening (capped at 1e-3 of |z|) accepts it and says so.
    const std::string spec = "size R = 1, C = 2\ninput X[R, C] : f32\ninput W[C] : f32\n"
                             "z[r] = sum(c: X[r,c] * W[c])\noutput z : f32\n";
    test::TempDir dir;
    Tensor X({1, 2}, DType::f32), W({2}, DType::f32);
    X.data = {static_cast<double>(1.1f), static_cast<double>(1.3f)};
    W.data = {static_cast<double>(0.7f), -0.591715395450592};
    save_dir(dir.path(), {{"X", X}, {"W", W}});
    RunOptions o;
    o.target = TargetKind::InterpF32;
    o.check = true;
    o.load_dir = dir.path();
    RunReport r = run_spec(spec, o);
    EXPECT_TRUE(r.ok) << r.text;
    const auto &z = r.json.at("outputs").at("z");
    EXPECT_TRUE(z.at("widened").get<bool>()) << r.text;
    EXPECT_TRUE(z.at("widening_capped").get<bool>()) << r.text;
    EXPECT_GT(z.at("cancellation").get<double>(), 1.0);
    EXPECT_EQ(r.json.at("widened"), nlohmann::json::array({"z"}));
    EXPECT_NE(r.text.find("widened up to"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("needed widening for cancellation: z"), std::string::npos) << r.text;

    // Without cancellation nothing widens, and the fields say so.
    RunOptions plain;
    plain.check = true;
    RunReport s = run_spec(std::string(REDFUSE_SOURCE_DIR) + "/examples/softmax.rf", plain);
    EXPECT_TRUE(s.ok) << s.text;
    EXPECT_FALSE(s.json.at("outputs").at("Y").at("widened").get<bool>());
    EXPECT_FALSE(s.json.at("outputs").at("Y").at("widening_capped").get<bool>());
    EXPECT_EQ(s.json.at("widened"), nlohmann::json::array());
    EXPECT_EQ(s.text.find("widen"), std::string::npos) << s.text;
}

TEST(RunCheck, ACancellationBelowFloat32sResolutionIsNotHeldToTheCap) {
    // scripts/fuzz_specs.py seed 1216 #10: k3 is zero in exact arithmetic (C = 2), so max|ref| is
    // float64 noise (~1e-16) while float32 leaves ~7e-7, a few roundings of the terms' magnitude.
    // The cap (1e-3 of max|ref|) cannot apply to digits float32 cannot resolve (interp/Compare.h).
    RunOptions o;
    o.target = TargetKind::InterpF32;
    o.check = true;
    o.seed = 10;
    o.sizes = {{"R", 17}, {"C", 2}};
    RunReport r = run_spec(std::string(REDFUSE_SOURCE_DIR) + "/tests/specs/cancelled_third_moment.rf", o);
    EXPECT_TRUE(r.ok) << r.text;
    const auto &k3 = r.json.at("outputs").at("k3");
    EXPECT_TRUE(k3.at("widened").get<bool>()) << r.text;
    EXPECT_GT(k3.at("max_abs_err").get<double>(), 0.0) << r.text;  // float32 does leave noise
}

TEST(RunCheck, AnEntropyWhoseLogRoundsToZeroIsHeldToAnAbsoluteBound) {
    // scripts/fuzz_specs.py seed 1236 #2: H = log s − t/s where s = 1 + (a term below float's resolution
    // of 1); float32 rounds log s to 0, and every float32 path is off by the whole of a ~5e-8 reference.
    // The magnitude model carries s's rounding through log as an absolute error (interp/Magnitude.h).
    for (TargetKind target : {TargetKind::InterpF32, TargetKind::Cpu}) {
        RunOptions o;
        o.target = target;
        o.check = true;
        o.seed = 2;
        o.scale = 50;
        RunReport r = run_spec(std::string(REDFUSE_SOURCE_DIR) + "/tests/specs/entropy_log_near_one.rf", o);
        EXPECT_TRUE(r.ok) << r.text;
        EXPECT_TRUE(r.json.at("outputs").at("H").at("widened").get<bool>()) << r.text;
    }
}
