/** \file Inputs.h
 * Deterministic random inputs for a spec, rounded to each input's dtype (docs/design.md §6: never test
 * on zeros, feed exactly what a kernel would see).
 */
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>

#include "interp/Tensor.h"
#include "ir/Program.h"

namespace rf {

enum class InputDistribution {
    Normal,    ///< N(0, 1)
    Uniform,   ///< U[-1, 1)
    Positive,  ///< U[0.5, 1.5): for specs that take logs, square roots or divide by inputs
    Ties,      ///< integers uniform in [-3, 3]: selections (argmax, top-k) on inputs with many ties
};

/** Random values for every input of `p` at the bound sizes, times `scale` (e.g. 100 to make a naive
 *  exp overflow), rounded to the input's dtype. Deterministic for a given seed and independent per
 *  input name (adding an input does not change the others). Never all zero.
 *
 *  Integer inputs ignore the distribution and scale: when the program compares a load of the input
 *  with an expression over an index variable (labels: `select(v == y[t], ...)`), values are uniform
 *  in [0, extent of that variable), so the comparison can hit; otherwise uniform in [-8, 8]. */
std::map<std::string, Tensor> make_random_inputs(const Program &p, const SizeBinding &s, uint64_t seed,
                                                 InputDistribution dist = InputDistribution::Normal,
                                                 double scale = 1.0);

/** The integer range [lo, hi] make_random_inputs draws an integer input from (see above). */
std::pair<int64_t, int64_t> int_input_range(const Program &p, const SizeBinding &s, const std::string &input);

/** A small, fast, portable random source (std distributions are implementation-defined, so the
 *  same seed would give different inputs on different standard libraries). */
class Rng {
public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    double uniform();  ///< [0, 1) with 53 random bits
    double normal();   ///< N(0, 1) by Box-Muller
    int64_t integer(int64_t lo, int64_t hi);  ///< uniform in [lo, hi]

private:
    std::mt19937_64 engine_;  // its output sequence is fixed by the standard
    double spare_ = 0;
    bool has_spare_ = false;
};

}  // namespace rf
