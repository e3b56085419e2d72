/** \file Environment.h
 * The one place that reads environment variables. Each is documented in docs/cli.md
 * ("Environment variables"); nothing else in redfuse calls getenv.
 */
#pragma once

#include "driver/Options.h"
#include "runtime/RuntimeSettings.h"

namespace rf {

/** The runtime's settings from the environment: CXX, REDFUSE_CACHE_DIR / XDG_CACHE_HOME / HOME,
 *  TMPDIR, CUDA_HOME, REDFUSE_LIBCUDA, REDFUSE_CUDA_DEVICE, REDFUSE_OPENCL_LIBRARY,
 *  REDFUSE_OPENCL_DEVICE, REDFUSE_GPU_SOURCE_DUMP, REDFUSE_GPU_SOURCE_OVERRIDE. */
RuntimeSettings runtime_settings_from_environment();

/** `o` with what the environment adds to a compilation: REDFUSE_DUMP (stages to dump, appended),
 *  REDFUSE_TILE_PASSES (0: none, 1: all, or a list of pass names; overrides o.tile_passes),
 *  REDFUSE_VERIFY=1 (verify the tile IR after every pass), REDFUSE_JIT_FLAGS (appended).
 *  UserError naming the variable for a value it cannot parse. */
Options with_environment(Options o);

/** Installs runtime_settings_from_environment() once per process (rf::compile calls it). */
void install_environment_once();

}  // namespace rf
