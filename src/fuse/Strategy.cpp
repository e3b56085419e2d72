/** \file Strategy.cpp
 * The spellings of the execution strategies, both ways.
 */
#include "fuse/Strategy.h"

#include "support/Error.h"

namespace rf {

namespace {
constexpr Strategy kAll[] = {Strategy::SinglePass,      Strategy::Incremental, Strategy::MultiSegment,
                             Strategy::OnchipMultipass, Strategy::MultiPass,   Strategy::ExactPrepass,
                             Strategy::Literal};
}  // namespace

const char *to_string(Strategy s) {
    switch (s) {
    case Strategy::SinglePass: return "single_pass";
    case Strategy::Incremental: return "incremental";
    case Strategy::MultiSegment: return "multi_segment";
    case Strategy::OnchipMultipass: return "onchip_multipass";
    case Strategy::MultiPass: return "multi_pass";
    case Strategy::ExactPrepass: return "exact_prepass";
    case Strategy::Literal: return "literal";
    }
    RF_INTERNAL_ASSERT(false) << "unknown strategy " << static_cast<int>(s);
    return "";
}

std::string strategy_names() {
    std::string names;
    for (Strategy s : kAll) names += (names.empty() ? "" : ", ") + std::string(to_string(s));
    return names;
}

Strategy parse_strategy(const std::string &name) {
    for (Strategy s : kAll)
        if (name == to_string(s)) return s;
    throw UserError({}, "unknown strategy '" + name + "' (valid: " + strategy_names() + ")");
}

}  // namespace rf
