/** \file CodeGen_C.h
 * Prints expressions as C++ with the spec language's semantics (through the helpers of
 * src/runtime/kernels/redfuse_cpu.h): the shared expression printer of the C-like backends.
 * Names come from the caller's callbacks or are sanitized here, so no user text reaches the
 * generated source unchecked.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/Expr.h"

namespace rf {

/** The C-like language printed: C++ for the CPU (helpers in rfk::, templates), OpenCL C 1.2 and CUDA
 *  C++ for the GPU (float helpers rf_* of redfuse_gpu.h; nested reductions as GNU statement
 *  expressions in OpenCL, lambdas in CUDA). */
enum class Dialect : uint8_t { Cpp, OpenCL, Cuda };

struct CEmitContext {
    std::string real = "double";  ///< the compute type of real values (float or double; GPU: float)
    Dialect dialect = Dialect::Cpp;
    /** The C++ expression of a Load given its index expressions already printed (as int64_t). */
    std::function<std::string(Expr load, const std::vector<std::string> &index)> load;
    /** The C++ name of a Var not bound by a nested reduction (sizes, row and axis variables, symbols). */
    std::function<std::string(Expr var)> var;
};

/** C++ text of e. Int expressions are int64_t arithmetic; real ones use ctx.real; Bool ones bool. */
std::string emit_c(Expr e, const CEmitContext &ctx);

/** A C identifier for any name: [A-Za-z0-9_] kept, every other byte written as _xHH, and a prefix so
 *  it can never collide with a keyword or a helper ("O.sum" -> "v_O_x2esum"). */
std::string c_identifier(const std::string &name, const std::string &prefix = "v_");

/** Text for a comment in generated code: printable ASCII only, no backslashes (line splices), no
 *  comment terminators. */
std::string safe_comment(const std::string &s);

/** The element offset `i0 * BUF_s0 + i1 * BUF_s1 + ... + i_last` of a dense row-major buffer whose
 *  strides the printers declare as BUF_s0, BUF_s1, ...; the last dimension is contiguous (a literal
 *  stride of 1 lets compilers use plain vector loads). */
std::string row_major_offset(const std::string &buf, const std::vector<std::string> &idx);

/** The C element type a buffer of dtype t is stored as in memory, in every dialect: reals narrower
 *  than f32 stay as their raw bits (uint16_t / uint8_t) and are widened by the semantics helpers. */
const char *c_storage_type(DType t);

/** A real literal that reads back exactly (shortest round-trip digits, or an infinity/NaN). */
std::string c_real_literal(double v, const std::string &real);

}  // namespace rf
