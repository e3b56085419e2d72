/** \file Limits.h
 * The resource limits of the frontend: every one of them turns a pathological spec into a UserError
 * instead of a stack overflow, an exponential blow-up or an out-of-memory crash.
 */
#pragma once

#include <cstdint>

namespace rf::spec {

/** Largest accepted spec text. */
constexpr size_t kMaxSourceBytes = size_t(1) << 20;
/** Deepest accepted expression: parentheses, calls, unary operators and operator chains all count.
 *  The parser and the checker recurse once per level, so this bounds their stack use. */
constexpr int kMaxNesting = 256;
/** Deepest accepted IR expression after scalar and element-wise inlining (later stages recurse). */
constexpr int kMaxIrDepth = 512;
/** Most operations (tree nodes, shared subtrees counted at each use) in one definition after
 *  inlining; later stages walk expressions as trees, so sharing must not hide an exponential size. */
constexpr int64_t kMaxTreeSize = 10000;
/** Most IR nodes one spec may create in total. Guards memory (a node is ~150 bytes) and time (one
 *  costs ~2 microseconds in an optimized build). A 1 MiB spec of 10000 ordinary definitions needs
 *  ~50000; only inlining a large definition at many different indices comes near the limit. */
constexpr size_t kMaxIrNodes = 250000;
/** Most dimensions of a tensor (the evaluator's fixed-size index buffer). */
constexpr size_t kMaxRank = 16;
/** Integer literals must be exactly representable as a double (IR constants are doubles). */
constexpr int64_t kMaxIntLiteral = int64_t(1) << 53;
/** Sizes (defaults and bound values) lie in [1, kMaxSize). */
constexpr int64_t kMaxSize = int64_t(1) << 31;

}  // namespace rf::spec
