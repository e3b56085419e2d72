/** \file Strategy.h
 * How a cascade is executed (the plan's choice, the schedule of a tile kernel), as an enum whose
 * spellings are the ones `analyze` prints and the golden files hold.
 */
#pragma once

#include <cstdint>
#include <string>

namespace rf {

enum class Strategy : uint8_t {
    SinglePass,       ///< single_pass: one reduction, one pass over its axis
    Incremental,      ///< incremental: one online pass with running rescaling
    MultiSegment,     ///< multi_segment: the axis split into segments merged with the derived merge
    OnchipMultipass,  ///< onchip_multipass: a row read once, the passes run on it in fast memory
    MultiPass,        ///< multi_pass: one pass over the data per pass of the plan
    ExactPrepass,     ///< exact_prepass: the rounded result computed first, applied in a second pass
    Literal,          ///< literal: a kernel for an element-wise definition as written (no chain)
};

/** The stable spelling (analyze text and JSON, tile IR dumps, bench output): single_pass, ... */
const char *to_string(Strategy s);

/** The strategy spelled `name`; UserError listing the valid spellings otherwise. */
Strategy parse_strategy(const std::string &name);

/** Every valid spelling, comma-separated, in declaration order (for messages and help texts). */
std::string strategy_names();

}  // namespace rf
