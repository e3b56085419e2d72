/** \file Compiler.h
 * The compiler's stages in one include: the pipeline (Pipeline.h), targets (HostTarget.h), the
 * reports (Report.h), emit and the stage dumps (Emit.h). The callable Kernel is driver/Kernel.h and
 * the `run` command driver/Run.h (kept out of here: rf::Kernel and rf::tile::Kernel would meet in
 * code that uses both namespaces).
 */
#pragma once

#include <memory>
#include <string>

#include "driver/Emit.h"
#include "driver/Environment.h"
#include "driver/HostTarget.h"
#include "driver/Options.h"
#include "driver/Pipeline.h"
#include "driver/Report.h"

namespace rf {

/** The target `analyze` reports for by default: the H100/H200-class GPU model of the cost model
 *  (no device is asked for). */
Target analysis_target();

/** analyze_source / analyze_file for analysis_target(): the plan `analyze` reports, for tests and
 *  tools that look at the algebra rather than at one machine's schedule. */
std::unique_ptr<Compilation> compile_source(const std::string &source, const std::string &file, const Options &o = {});
std::unique_ptr<Compilation> compile_file(const std::string &path, const Options &o = {});

}  // namespace rf
