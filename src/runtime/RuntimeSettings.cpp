/** \file RuntimeSettings.cpp
 * The process-wide runtime settings, guarded for concurrent readers.
 */
#include "runtime/RuntimeSettings.h"

#include <deque>
#include <mutex>

namespace rf {

namespace {
struct Store {
    std::mutex mu;
    // Every installed value stays alive for the process (a reader may still hold a reference to an
    // older one); installs are rare (once per process, a few per test binary).
    std::deque<RuntimeSettings> installed{RuntimeSettings{}};
};
Store &store() {
    static Store s;
    return s;
}
}  // namespace

const RuntimeSettings &runtime_settings() {
    Store &s = store();
    std::lock_guard<std::mutex> lock(s.mu);
    return s.installed.back();
}

void install_runtime_settings(const RuntimeSettings &settings) {
    Store &s = store();
    std::lock_guard<std::mutex> lock(s.mu);
    s.installed.push_back(settings);
}

}  // namespace rf
