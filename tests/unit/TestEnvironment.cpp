/** \file TestEnvironment.cpp
 * Linked into every test binary: installs the environment's runtime settings before any test runs,
 * as rf::compile does for a program, so tests that call the runtime directly (the JIT, NVRTC, the
 * OpenCL driver) see REDFUSE_CACHE_DIR and the rest like the tool does.
 */
#include "driver/Environment.h"

namespace {
const bool kInstalled = (rf::install_environment_once(), true);
}  // namespace
