/** \file NonFiniteRouting.h
 * Shared by the tile and CUDA-emulator suites: MoE routing with NaN and infinite logits, whose top-k
 * ranks the spec's values on the rows whose δ is not finite (LowerMerge.cpp literal_topk).
 */
#pragma once

#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <string>

#include "ExampleRuns.h"
#include "MergeCases.h"
#include "driver/Compiler.h"
#include "interp/Inputs.h"
#include "interp/Npy.h"

namespace rf::test {

/** moe_routing.rf with, per block of 5 rows: a NaN logit (m = s = NaN: every probability NaN, the
 *  list is indices 0..3), a +inf logit (its probability NaN, the others 0: the list is it, then 0,
 *  1, 2), two +inf logits, a -inf logit (finite δ: the list of G stands) and a row of -inf (m = -inf,
 *  every probability 0: indices 0..3), at `E` experts; checked against the reference with `--check`
 *  under each row block. */
inline void check_moe_routing_with_non_finite_logits(int64_t E, const std::string &target, std::initializer_list<int64_t> row_blocks,
                                             FusionLevel level = FusionLevel::Auto) {
    std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "moe_routing.rf";
    std::string src = read_text(path);
    ArenaScope arena;
    auto c = compile_source(src, path.string(), {});
    std::map<std::string, int64_t> sizes{{"T", 40}, {"E", E}};
    SizeBinding b = bind_sizes(c->program, sizes);
    auto in = make_random_inputs(c->program, b, 3);
    Tensor &X = in.at("X");
    for (int64_t t = 0; t < 40; t += 5) {
        X.at({t, (t / 5 + 5) % E}) = NAN;
        X.at({t + 1, (t + 7) % E}) = INFINITY;
        X.at({t + 2, 1}) = INFINITY;
        X.at({t + 2, E - 1}) = INFINITY;
        X.at({t + 3, 3}) = -INFINITY;
        for (int64_t e = 0; e < E; e++) X.at({t + 4, e}) = -INFINITY;
    }
    RunOptions o;
    o.sizes = sizes;
    o.fusion_level = level;
    for (int64_t rb : row_blocks) {
        o.row_block = rb;
        check_run_on_inputs(path, src, in, o, target);
    }
}

}  // namespace rf::test
