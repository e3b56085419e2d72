/** \file SplitRates.h
 * The rate split (docs/design.md §3): a sum whose terms carry exponentials of earlier results at
 * several constant rates becomes one sum per rate, each of which the exponential-polynomial form
 * can fuse. An algebraic rewrite of the checked Program, run before planning.
 */
#pragma once

#include <string>
#include <vector>

#include "ir/Program.h"

namespace rf {

/** One sum that was split: `name = parts[0] + parts[1] + ...`, parts[k] the terms of rate rates[k]. */
struct RateSplit {
    std::string name;
    std::vector<std::string> parts;  ///< `name.rate0`, `name.rate1`, ... in order of first appearance
    std::vector<std::string> rates;  ///< each part's rate as text: `-1 on m[r]`, `0`
};

struct RateSplitResult {
    Program program;                ///< the rewritten program (the input itself when splits is empty)
    std::vector<RateSplit> splits;  ///< in definition order
};

/** Splits every sum reduction (not top-k) whose additive terms have exponentials of loads of other
 *  reductions' results at two or more distinct constant rate vectors. A sum with a term whose
 *  rate is not constant (exp(X·m)), or whose rates cannot be separated into terms, stays whole. */
RateSplitResult split_sums_by_rate(const Program &p);

/** `t = t.rate0 + t.rate1` for one split, as printed by `analyze`. */
std::string to_string(const RateSplit &s);

}  // namespace rf
