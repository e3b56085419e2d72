/** \file Kernel.h
 * The library API: `rf::compile(spec, Target, Options) → Kernel`, an object a program holds and calls
 * many times on its own memory. One build serves every size: the sizes are bound from the shapes of
 * the buffers of each call.
 *
 *     rf::Kernel k = rf::compile("examples/softmax.rf", rf::make_target(rf::TargetKind::Cpu));
 *     std::vector<int64_t> shape{R, C};
 *     k({{x.data(), rf::DType::f32, shape}}, {{y.data(), rf::DType::f32, shape}});
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "driver/Options.h"
#include "driver/Pipeline.h"
#include "interp/Tensor.h"
#include "ir/DType.h"
#include "shard/Partial.h"
#include "target/Target.h"

namespace rf {

/** Where a view's memory is. */
enum class MemorySpace : uint8_t { Host, Cuda };

/** Caller-owned memory: a pointer, its dtype, its shape and its strides (in elements; empty: dense
 *  row-major). 16-bit floats are their bits (uint16_t), fp8 one byte, as the spec's dtype says. */
struct TensorView {
    TensorView() = default;
    TensorView(void *data_, DType dtype_, std::vector<int64_t> shape_, std::vector<int64_t> strides_ = {},
               MemorySpace memory_ = MemorySpace::Host)
        : data(data_), dtype(dtype_), shape(std::move(shape_)), strides(std::move(strides_)), memory(memory_) {}

    void *data = nullptr;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
    MemorySpace memory = MemorySpace::Host;

    /** True when the strides are empty or those of a dense row-major layout of `shape`. */
    bool contiguous() const;
    int64_t numel() const;
};

/** An input or output of a kernel: its name, dtype and shape in terms of the spec's sizes. */
struct TensorInfo {
    std::string name;
    DType dtype = DType::f32;
    std::vector<std::string> shape;  ///< each dimension as text over the sizes, e.g. {"B", "H", "M", "D"}
    std::vector<Expr> dims;          ///< the same dimensions as expressions over the size variables
    bool is_index = false;           ///< an integer output holding positions (argmax, top-k indices)
};

/** A compiled spec, callable on caller-owned buffers. Move-only; calls may run concurrently from
 *  several threads (each call binds its own sizes and allocates its own temporaries; GPU calls are
 *  serialized on the device's queue). */
class Kernel {
public:
    Kernel(Kernel &&) noexcept;
    Kernel &operator=(Kernel &&) noexcept;
    Kernel(const Kernel &) = delete;
    Kernel &operator=(const Kernel &) = delete;
    ~Kernel();

    const std::vector<TensorInfo> &inputs() const;
    const std::vector<TensorInfo> &outputs() const;
    /** The spec's size names in order. */
    std::vector<std::string> size_names() const;

    /** The sizes given by the inputs' shapes (and the outputs', for sizes no input has; then the
     *  options' sizes and the spec's defaults). ArgumentError (a UserError) naming the input, the
     *  dimension and the size for a count, dtype, rank or extent that disagrees with the spec or
     *  with another buffer. `outputs` may be empty. */
    SizeBinding bind_sizes(const std::vector<TensorView> &inputs, const std::vector<TensorView> &outputs = {}) const;
    /** The outputs' shapes at `sizes`, in output order. */
    std::vector<std::vector<int64_t>> output_shapes(const SizeBinding &sizes) const;
    /** The outputs' shapes for a call on `inputs` (bind_sizes, then the above; the binding of
     *  recent sizes is kept, so this costs little on a hot path). */
    std::vector<std::vector<int64_t>> output_shapes(const std::vector<TensorView> &inputs) const;

    /** Runs on `inputs` (in input order) writing `outputs` (in output order; allocated by the
     *  caller with output_shapes). Contiguous host buffers are used in place; strided ones go
     *  through a dense copy. CUDA and OpenCL targets copy host buffers to the device and back
     *  (and wait). A CUDA kernel also takes dense views of CUDA device memory (all buffers of a
     *  call in one memory): used in place, the launches queued on `stream` (a CUstream; null: the
     *  default stream) without waiting, unless the kernel needs temporaries (then it waits before
     *  freeing them). A stream with host buffers is an ArgumentError. */
    void operator()(const std::vector<TensorView> &inputs, const std::vector<TensorView> &outputs,
                    void *stream = nullptr) const;

    /** A call on fixed input shapes, strides and dtypes, checked once: a model calls a kernel at few
     *  shapes, and each call then passes addresses only. */
    class Prepared {
    public:
        /** The dense outputs' shapes, in output order. */
        const std::vector<std::vector<int64_t>> &output_shapes() const { return output_shapes_; }
        /** True when run() calls the generated CPU entry as is (dense host buffers), without checks. */
        bool direct() const { return direct_; }

    private:
        friend class Kernel;
        std::vector<TensorView> ins_, outs_;  ///< without addresses
        std::vector<std::vector<int64_t>> output_shapes_;
        std::vector<int64_t> size_values_;
        std::vector<std::pair<size_t, size_t>> huge_outputs_;  ///< (output, bytes) that get the huge-page advice
        std::shared_ptr<const void> bound_;  ///< keeps the binding of size_values_ alive
        bool direct_ = false;                ///< a CPU kernel on dense host buffers: the entry is called as is
    };
    /** Checks `inputs` as a call does (a null address included) and binds the sizes; the outputs
     *  are dense, in `memory`. The addresses are not kept. ArgumentError as operator() raises it. */
    Prepared prepare(std::vector<TensorView> inputs, MemorySpace memory = MemorySpace::Host) const;
    /** Runs a prepared call at these addresses (the inputs', then the outputs', dense as prepared):
     *  the same as operator() on views of those shapes and strides. A CPU kernel on dense host
     *  buffers goes straight to the generated entry (no checks, no allocation). */
    void run(const Prepared &call, const void *const *addresses, void *stream = nullptr) const;

    /** Partial states (docs/sharding.md): the partial program of the chain over `axis` (empty: the
     *  only chain), an ordinary spec to compile and run on each shard; `topk_limit` > 0 for shards
     *  shorter than a top-k's k. UserError when the program cannot be split along the axis. */
    PartialProgram partial_program(const std::string &axis = "", int64_t topk_limit = 0) const;
    /** The derived merge of partial states (in the order given: a deterministic result), at the
     *  whole program's `sizes`, with the row inputs the layout lists as context; row_end >= 0: the
     *  states hold the block [row_begin, row_end) of the flattened rows (interp/PlanInterp.h). */
    ChainState merge_states(const PartialProgram &pp, const SizeBinding &sizes, const std::map<std::string, Tensor> &context,
                            const std::vector<const ChainState *> &states, int64_t row_begin = 0, int64_t row_end = -1) const;
    /** The outputs (by name, as float64 tensors) of a state covering the whole axis. */
    std::map<std::string, Tensor> finalize_states(const PartialProgram &pp, const SizeBinding &sizes,
                                                  const std::map<std::string, Tensor> &context, const ChainState &state) const;

    const Target &target() const;
    const Compilation &compilation() const;
    /** The generated source that was built ("" for the interpreters). */
    const std::string &source() const;
    /** The tile module that was printed (empty for the interpreters). */
    const tile::Module &module() const;
    /** The `analyze --json` object and text of the spec for this target. */
    nlohmann::json analysis() const;
    std::string explain() const;
    /** The analyzed compilation, shared (bench builds several kernels of one). */
    std::shared_ptr<const Compilation> shared_compilation() const;
    /** Wall milliseconds of analysis + generation + build (0 build work when the JIT cache had it). */
    double compile_ms() const;
    bool from_cache() const;

    struct Impl;

private:
    explicit Kernel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    friend Kernel compile_kernel(std::shared_ptr<const Compilation> c, const Options &schedule);
    friend Kernel compile(const std::string &spec, const Target &target, const Options &options);
};

/** parse → ... → build. `spec` is a path to a .rf file, or the spec's text itself (text has a
 *  newline or a statement; a single line naming an existing file is read as a path). The Kernel
 *  owns everything it was built from (no ArenaScope needed); call it from any thread. */
Kernel compile(const std::string &spec, const Target &target, const Options &options = {});
/** A kernel from an analyzed compilation with the options of `schedule` (the compilation's own, or a
 *  variant of them: bench's unfused plan, tune's candidates); the environment is not read again.
 *  The compilation's expressions live in the caller's arena, which must outlive the kernel. */
Kernel compile_kernel(std::shared_ptr<const Compilation> c, const Options &schedule);

/** How many kernels this process has built (JIT or device compiles, cached or not): a program can
 *  check that calls at new sizes reuse what was built. */
int64_t kernel_builds();

}  // namespace rf
