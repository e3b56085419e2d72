/** \file Report.h
 * The `analyze` report in its two forms (text for people, JSON for tools: docs/cli.md, "analyze
 * --json") and the `--emit plan` dump, printed from the plan's derived expressions.
 */
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "driver/Pipeline.h"

namespace rf {

nlohmann::json analysis_json(const Compilation &c);
std::string analysis_text(const Compilation &c);
/** The `--emit plan` dump: passes, members and their derived parts. */
std::string plan_dump(const Compilation &c);

}  // namespace rf
