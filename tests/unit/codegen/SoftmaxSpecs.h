/** \file SoftmaxSpecs.h
 * examples/softmax.rf with its input and output declared in other dtypes: the specs of the CPU row
 * output and row exponential tests.
 */
#pragma once

#include <filesystem>
#include <regex>
#include <string>

#include "../ExampleSizes.h"

namespace rf::test {

inline std::filesystem::path softmax_path() { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "softmax.rf"; }

inline std::string softmax_with(const std::string &in, const std::string &out) {
    std::string s = std::regex_replace(read_text(softmax_path()), std::regex(R"(input X\[R, C\] : f32)"), "input X[R, C] : " + in);
    return std::regex_replace(s, std::regex(R"(output Y : f32)"), "output Y : " + out);
}

}  // namespace rf::test
