/** \file Kernel.cpp
 * rf::compile and the Kernel: binding sizes from buffer shapes, and calls on the CPU (in place), the
 * GPUs (through device copies) and the plan interpreter.
 */
#include "driver/Kernel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

#include "driver/Environment.h"
#include "driver/Report.h"
#include "interp/PlanInterp.h"
#include "interp/Reference.h"
#include "runtime/CpuBackend.h"
#include "runtime/GpuBackend.h"
#include "runtime/HostMemory.h"
#include "support/Error.h"

namespace rf {

namespace {

std::atomic<int64_t> g_builds{0};

using AE = ArgumentError;

std::string shape_text(const std::vector<int64_t> &s) { return shape_to_string(s); }

TensorInfo info_of(const std::string &name, DType dtype, const std::vector<Expr> &dims, bool is_index) {
    TensorInfo t;
    t.name = name;
    t.dtype = dtype;
    t.dims = dims;
    t.is_index = is_index;
    for (Expr d : dims) t.shape.push_back(to_string(d));
    return t;
}

/** Copies between a strided view and dense storage (element by element: `elem` bytes). */
void strided_copy(const TensorView &v, unsigned char *dense, bool to_dense) {
    const int64_t n = v.numel(), elem = dtype_bytes(v.dtype);
    const size_t rank = v.shape.size();
    std::vector<int64_t> idx(rank, 0);
    auto *base = static_cast<unsigned char *>(v.data);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (size_t d = 0; d < rank; d++) off += idx[d] * v.strides[d];
        if (to_dense) std::memcpy(dense + i * elem, base + off * elem, static_cast<size_t>(elem));
        else std::memcpy(base + off * elem, dense + i * elem, static_cast<size_t>(elem));
        for (size_t d = rank; d-- > 0;) {
            if (++idx[d] < v.shape[d]) break;
            idx[d] = 0;
        }
    }
}

/** The dense buffers of one call: views used in place where they are dense, copies otherwise. */
struct CallBuffers {
    std::vector<void *> ptrs;                         // inputs then outputs
    std::vector<std::vector<unsigned char>> copies;   // one per view (empty when used in place)
    std::vector<size_t> bytes;

    CallBuffers(const std::vector<TensorView> &ins, const std::vector<TensorView> &outs) {
        for (size_t i = 0; i < ins.size() + outs.size(); i++) {
            const TensorView &v = i < ins.size() ? ins[i] : outs[i - ins.size()];
            size_t b = static_cast<size_t>(v.numel()) * static_cast<size_t>(dtype_bytes(v.dtype));
            bytes.push_back(b);
            copies.emplace_back();
            if (v.contiguous()) {
                ptrs.push_back(v.data);
                continue;
            }
            copies.back().resize(std::max<size_t>(b, 1));
            if (i < ins.size()) strided_copy(v, copies.back().data(), true);
            ptrs.push_back(copies.back().data());
        }
    }
    /** Writes the outputs that went through a copy back into their strided views. */
    void scatter_outputs(size_t n_inputs, const std::vector<TensorView> &outs) {
        for (size_t j = 0; j < outs.size(); j++)
            if (!copies[n_inputs + j].empty()) strided_copy(outs[j], copies[n_inputs + j].data(), false);
    }
};

/** True when `spec` names a file rather than holding the text: one line that is an existing file,
 *  or ends in .rf (then analyze_file says it cannot be read). */
bool names_a_file(const std::string &spec) {
    if (spec.empty() || spec.find('\n') != std::string::npos) return false;
    std::error_code ec;
    return std::filesystem::is_regular_file(spec, ec) || (spec.size() > 3 && spec.compare(spec.size() - 3, 3, ".rf") == 0);
}

}  // namespace

bool TensorView::contiguous() const {
    if (strides.empty()) return true;
    if (strides.size() != shape.size()) return false;
    int64_t dense = 1;  // the row-major stride of dimension d, from the last one back
    for (size_t d = shape.size(); d-- > 0;) {
        if (shape[d] > 1 && strides[d] != dense) return false;
        dense *= shape[d];
    }
    return true;
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

/** The sizes of a call and what follows from them, computed once per distinct size values (a model
 *  calls a kernel at few shapes, many times each: binding must not cost more than the call). */
struct Bound {
    std::vector<int64_t> values;  ///< every size, in declaration order (the key)
    SizeBinding sizes;            ///< the same, checked by bind_sizes(Program) (ranges, index bounds)
    std::vector<std::vector<int64_t>> input_dims, output_dims;  ///< the extents the spec gives every buffer
};

struct Kernel::Impl {
    // Declared first, destroyed last: the compilation's expressions live in it (null when the
    // compilation was made in the caller's arena: compile_kernel).
    std::shared_ptr<Arena> arena;
    std::shared_ptr<const Compilation> c;
    Options schedule;
    std::vector<TensorInfo> inputs, outputs;
    std::unique_ptr<CpuProgram> cpu;
    std::unique_ptr<GpuProgram> gpu;
    std::string source;
    tile::Module module;
    mutable std::mutex device_mutex;  // GPU calls share the device's queue
    double compile_ms = 0;
    bool from_cache = false;
    // Binding: per input/output dimension, the index of the size it names (-1: an expression of
    // sizes); per size, its value when no buffer names it (the options', else the spec's default).
    std::vector<std::vector<int>> input_slots, output_slots;
    std::vector<std::optional<int64_t>> size_fallback;
    mutable std::mutex bind_mutex;
    mutable std::vector<std::shared_ptr<const Bound>> recent;  // most recent first

    void prepare_binding();
    void check_views(const std::vector<TensorView> &views, const std::vector<TensorInfo> &infos, const char *what) const;
    std::shared_ptr<const Bound> bind(const std::vector<TensorView> &ins, const std::vector<TensorView> &outs) const;
    std::shared_ptr<const Bound> bound_for(const std::vector<int64_t> &values) const;
    void run_interp(const SizeBinding &sizes, const std::vector<TensorView> &ins, const std::vector<TensorView> &outs) const;
};

Kernel::Kernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Kernel::Kernel(Kernel &&) noexcept = default;
Kernel &Kernel::operator=(Kernel &&) noexcept = default;
Kernel::~Kernel() = default;

const std::vector<TensorInfo> &Kernel::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo> &Kernel::outputs() const { return impl_->outputs; }
const Target &Kernel::target() const { return impl_->c->target; }
const Compilation &Kernel::compilation() const { return *impl_->c; }
std::shared_ptr<const Compilation> Kernel::shared_compilation() const { return impl_->c; }
const std::string &Kernel::source() const { return impl_->source; }
const tile::Module &Kernel::module() const { return impl_->module; }
// The texts build expressions (describe_member restores δ atoms): in the kernel's own arena, so that
// no other arena interns nodes whose children this kernel frees with itself.
nlohmann::json Kernel::analysis() const {
    std::optional<ArenaUse> use;
    if (impl_->arena) use.emplace(*impl_->arena);
    return analysis_json(*impl_->c);
}
std::string Kernel::explain() const {
    std::optional<ArenaUse> use;
    if (impl_->arena) use.emplace(*impl_->arena);
    return analysis_text(*impl_->c);
}
double Kernel::compile_ms() const { return impl_->compile_ms; }
bool Kernel::from_cache() const { return impl_->from_cache; }

std::vector<std::string> Kernel::size_names() const {
    std::vector<std::string> out;
    for (const SizeDecl &s : impl_->c->program.sizes) out.push_back(s.name);
    return out;
}

void Kernel::Impl::check_views(const std::vector<TensorView> &views, const std::vector<TensorInfo> &infos,
                               const char *what) const {
    if (views.size() != infos.size())
        throw AE(AE::Kind::Count, "the kernel takes " + std::to_string(infos.size()) + " " + what + "s, got " +
                                      std::to_string(views.size()));
    for (size_t i = 0; i < views.size(); i++) {
        const TensorView &v = views[i];
        const TensorInfo &t = infos[i];
        if (v.dtype != t.dtype)
            throw AE(AE::Kind::Dtype, std::string(what) + " '" + t.name + "' has dtype " + dtype_name(v.dtype) +
                                          "; the spec declares " + dtype_name(t.dtype));
        if (v.shape.size() != t.dims.size())
            throw AE(AE::Kind::Shape, std::string(what) + " '" + t.name + "' has " + std::to_string(v.shape.size()) +
                                          " dimensions " + shape_text(v.shape) + "; the spec declares " +
                                          std::to_string(t.dims.size()));
        if (!v.strides.empty() && v.strides.size() != v.shape.size())
            throw AE(AE::Kind::Shape, std::string(what) + " '" + t.name + "' has " + std::to_string(v.strides.size()) +
                                          " strides for " + std::to_string(v.shape.size()) + " dimensions");
        for (size_t d = 0; d < v.shape.size(); d++)
            if (v.shape[d] < 1)
                throw AE(AE::Kind::Shape, std::string(what) + " '" + t.name + "' dimension " + std::to_string(d) +
                                              " (size " + t.shape[d] + ") is " + std::to_string(v.shape[d]) +
                                              "; every extent must be at least 1");
        if (!v.data) throw AE(AE::Kind::Device, std::string(what) + " '" + t.name + "' has no data (a null pointer)");
        if (v.memory == MemorySpace::Cuda && c->target.kind != TargetKind::Cuda)
            throw AE(AE::Kind::Device, std::string(what) + " '" + t.name + "' is in CUDA device memory; a " +
                                           to_string(c->target.kind) + " kernel takes host buffers");
        if (v.memory == MemorySpace::Cuda && !v.contiguous())
            throw AE(AE::Kind::Shape, std::string(what) + " '" + t.name + "' is a strided view of device memory; device buffers must be dense");
    }
}

/** Host or CUDA memory for every buffer of a call (one space for all). */
static MemorySpace call_memory(const std::vector<TensorView> &ins, const std::vector<TensorView> &outs) {
    MemorySpace space = ins.empty() ? (outs.empty() ? MemorySpace::Host : outs[0].memory) : ins[0].memory;
    for (const auto *list : {&ins, &outs})
        for (const TensorView &v : *list)
            if (v.memory != space)
                throw AE(AE::Kind::Device, "the buffers of a call are in different memories (host and CUDA device): give all of one");
    return space;
}

void Kernel::Impl::prepare_binding() {
    const Program &p = c->program;
    auto slots_of = [&](const std::vector<TensorInfo> &infos) {
        std::vector<std::vector<int>> out;
        for (const TensorInfo &t : infos) {
            std::vector<int> dims;
            for (Expr e : t.dims) {
                int slot = -1;
                for (size_t k = 0; e->kind == Kind::Var && k < p.sizes.size(); k++)
                    if (p.sizes[k].name == e->name) slot = static_cast<int>(k);
                dims.push_back(slot);
            }
            out.push_back(std::move(dims));
        }
        return out;
    };
    input_slots = slots_of(inputs);
    output_slots = slots_of(outputs);
    for (const SizeDecl &s : p.sizes) {
        auto it = c->options.sizes.find(s.name);
        size_fallback.push_back(it != c->options.sizes.end() ? std::optional<int64_t>(it->second) : s.default_value);
    }
}

std::shared_ptr<const Bound> Kernel::Impl::bound_for(const std::vector<int64_t> &values) const {
    {
        std::lock_guard<std::mutex> lock(bind_mutex);
        for (size_t i = 0; i < recent.size(); i++)
            if (recent[i]->values == values) {
                std::shared_ptr<const Bound> hit = recent[i];
                std::rotate(recent.begin(), recent.begin() + static_cast<std::ptrdiff_t>(i), recent.begin() + static_cast<std::ptrdiff_t>(i) + 1);
                return hit;
            }
    }
    const Program &p = c->program;
    SizeBinding given;
    for (size_t k = 0; k < p.sizes.size(); k++) given[p.sizes[k].name] = values[k];
    auto b = std::make_shared<Bound>();
    b->values = values;
    b->sizes = rf::bind_sizes(p, given);  // ranges and index bounds, located
    auto extents = [&](const std::vector<TensorInfo> &infos) {
        std::vector<std::vector<int64_t>> out;
        for (const TensorInfo &t : infos) {
            std::vector<int64_t> dims;
            for (Expr d : t.dims) dims.push_back(eval_int(d, b->sizes));
            out.push_back(std::move(dims));
        }
        return out;
    };
    b->input_dims = extents(inputs);
    b->output_dims = extents(outputs);
    std::lock_guard<std::mutex> lock(bind_mutex);
    constexpr size_t kRecent = 16;
    recent.insert(recent.begin(), b);
    if (recent.size() > kRecent) recent.pop_back();
    return b;
}

std::shared_ptr<const Bound> Kernel::Impl::bind(const std::vector<TensorView> &ins, const std::vector<TensorView> &outs) const {
    std::optional<ArenaUse> use;
    if (arena) use.emplace(*arena);
    check_views(ins, inputs, "input");
    if (!outs.empty()) check_views(outs, outputs, "output");
    const Program &p = c->program;
    // Each size from the first buffer dimension that names it; the others must agree. Messages are
    // built only on failure: this runs on every call.
    struct Origin { const char *what = nullptr; size_t view = 0, dim = 0; };
    std::vector<int64_t> values(p.sizes.size(), 0);
    std::vector<Origin> origin(p.sizes.size());
    auto place = [&](const char *what, const std::vector<TensorInfo> &infos, size_t i, size_t d) {
        return std::string(what) + " '" + infos[i].name + "' dimension " + std::to_string(d);
    };
    auto take = [&](const std::vector<TensorView> &views, const std::vector<TensorInfo> &infos,
                    const std::vector<std::vector<int>> &slots, const char *what) {
        for (size_t i = 0; i < views.size(); i++)
            for (size_t d = 0; d < slots[i].size(); d++) {
                int k = slots[i][d];
                if (k < 0) continue;  // an expression of sizes: checked once all are bound
                int64_t v = views[i].shape[d];
                Origin &o = origin[static_cast<size_t>(k)];
                if (!o.what) {
                    o = {what, i, d};
                    values[static_cast<size_t>(k)] = v;
                } else if (values[static_cast<size_t>(k)] != v) {
                    const std::vector<TensorInfo> &first = o.what == std::string("input") ? inputs : outputs;
                    const std::string &n = p.sizes[static_cast<size_t>(k)].name;
                    throw AE(AE::Kind::Shape, place(what, infos, i, d) + " (size " + n + ") is " + std::to_string(v) +
                                                  ", but " + place(o.what, first, o.view, o.dim) + " gives " + n +
                                                  " = " + std::to_string(values[static_cast<size_t>(k)]));
                }
            }
    };
    take(ins, inputs, input_slots, "input");
    take(outs, outputs, output_slots, "output");
    for (size_t k = 0; k < p.sizes.size(); k++) {
        if (origin[k].what) continue;
        if (!size_fallback[k])
            throw AE(AE::Kind::Shape, "size '" + p.sizes[k].name + "' is not the extent of any input or output dimension and has no default");
        values[k] = *size_fallback[k];
    }
    std::shared_ptr<const Bound> b = bound_for(values);
    // Dimensions that are expressions of sizes (e.g. H / G), and every output extent.
    auto check = [&](const std::vector<TensorView> &views, const std::vector<TensorInfo> &infos,
                     const std::vector<std::vector<int64_t>> &want, const char *what) {
        for (size_t i = 0; i < views.size(); i++)
            for (size_t d = 0; d < want[i].size(); d++)
                if (views[i].shape[d] != want[i][d])
                    throw AE(AE::Kind::Shape, place(what, infos, i, d) + " (size " + infos[i].shape[d] + ") is " +
                                                  std::to_string(views[i].shape[d]) + "; the sizes bound from the buffers give " +
                                                  std::to_string(want[i][d]));
    };
    check(ins, inputs, b->input_dims, "input");
    check(outs, outputs, b->output_dims, "output");
    return b;
}

SizeBinding Kernel::bind_sizes(const std::vector<TensorView> &ins, const std::vector<TensorView> &outs) const {
    return impl_->bind(ins, outs)->sizes;
}

std::vector<std::vector<int64_t>> Kernel::output_shapes(const std::vector<TensorView> &ins) const {
    return impl_->bind(ins, {})->output_dims;
}

std::vector<std::vector<int64_t>> Kernel::output_shapes(const SizeBinding &sizes) const {
    std::vector<std::vector<int64_t>> out;
    for (const TensorInfo &t : impl_->outputs) {
        std::vector<int64_t> s;
        for (Expr d : t.dims) s.push_back(eval_int(d, sizes));
        out.push_back(s);
    }
    return out;
}

void Kernel::Impl::run_interp(const SizeBinding &sizes, const std::vector<TensorView> &ins,
                              const std::vector<TensorView> &outs) const {
    std::map<std::string, Tensor> tensors;
    CallBuffers bufs(ins, outs);
    for (size_t i = 0; i < ins.size(); i++) {
        Tensor t;
        t.shape = ins[i].shape;
        t.dtype = ins[i].dtype;
        t.data = decode_storage(static_cast<const unsigned char *>(bufs.ptrs[i]), ins[i].numel(), ins[i].dtype);
        tensors[inputs[i].name] = std::move(t);
    }
    PlanInterpOptions pio;
    pio.f32 = c->target.kind == TargetKind::InterpF32;
    pio.seed = schedule.interp_seed;
    std::map<std::string, Tensor> results = run_plan(c->plan, sizes, tensors, pio);
    for (size_t j = 0; j < outs.size(); j++)
        encode_storage(results.at(outputs[j].name).data, outs[j].dtype, static_cast<unsigned char *>(bufs.ptrs[ins.size() + j]));
    bufs.scatter_outputs(ins.size(), outs);
}

void Kernel::operator()(const std::vector<TensorView> &ins, const std::vector<TensorView> &outs, void *stream) const {
    const Impl &I = *impl_;
    std::optional<ArenaUse> use;
    if (I.arena) use.emplace(*I.arena);
    if (outs.size() != I.outputs.size())
        throw AE(AE::Kind::Count, "the kernel writes " + std::to_string(I.outputs.size()) + " outputs, got " +
                                      std::to_string(outs.size()) + " output buffers");
    std::shared_ptr<const Bound> bound = I.bind(ins, outs);
    const SizeBinding &sizes = bound->sizes;
    const std::vector<int64_t> &size_values = bound->values;
    MemorySpace memory = call_memory(ins, outs);
    if (stream && memory != MemorySpace::Cuda)
        throw AE(AE::Kind::Device, "a CUDA stream was given with host buffers; a stream orders device work only");
    if (is_interpreter(I.c->target.kind)) return I.run_interp(sizes, ins, outs);
    if (memory == MemorySpace::Cuda) {  // dense device buffers, used in place, on the caller's stream
        std::vector<BufferRef> device;
        for (const auto *list : {&ins, &outs})
            for (const TensorView &v : *list)
                device.push_back({v.data, static_cast<size_t>(v.numel()) * static_cast<size_t>(dtype_bytes(v.dtype))});
        std::lock_guard<std::mutex> lock(I.device_mutex);
        return run_gpu_on_device(*I.gpu, sizes, size_values, device, stream);
    }
    CallBuffers bufs(ins, outs);
    if (I.cpu) {
        if (I.schedule.huge_page_outputs)
            for (size_t j = ins.size(); j < bufs.ptrs.size(); j++) advise_huge_pages(bufs.ptrs[j], bufs.bytes[j]);
        int rc = I.cpu->entry(size_values.data(), bufs.ptrs.data(), I.schedule.threads);
        if (rc != 0) throw UserError({}, "the generated kernel could not allocate its temporaries (out of memory)");
    } else {
        std::vector<BufferRef> host;
        for (size_t i = 0; i < bufs.ptrs.size(); i++) host.push_back({bufs.ptrs[i], bufs.bytes[i]});
        std::lock_guard<std::mutex> lock(I.device_mutex);
        run_gpu_on_host(*I.gpu, sizes, size_values, host);
    }
    bufs.scatter_outputs(ins.size(), outs);
}

Kernel::Prepared Kernel::prepare(std::vector<TensorView> ins, MemorySpace memory) const {
    const Impl &I = *impl_;
    Prepared p;
    std::shared_ptr<const Bound> bound = I.bind(ins, {});
    p.output_shapes_ = bound->output_dims;
    p.size_values_ = bound->values;
    p.bound_ = bound;
    for (size_t j = 0; j < I.outputs.size(); j++) p.outs_.emplace_back(nullptr, I.outputs[j].dtype, p.output_shapes_[j], std::vector<int64_t>{}, memory);
    bool dense = memory == MemorySpace::Host;
    for (const TensorView &v : ins) dense = dense && v.memory == MemorySpace::Host && v.contiguous();
    p.direct_ = dense && I.cpu;
    if (p.direct_ && I.schedule.huge_page_outputs)  // what operator() advises, found once
        for (size_t j = 0; j < p.outs_.size(); j++) {
            auto bytes = static_cast<size_t>(p.outs_[j].numel()) * static_cast<size_t>(dtype_bytes(p.outs_[j].dtype));
            if (bytes >= kHugePageAdviceBytes) p.huge_outputs_.emplace_back(j, bytes);
        }
    p.ins_ = std::move(ins);
    return p;
}

void Kernel::run(const Prepared &call, const void *const *addresses, void *stream) const {
    const Impl &I = *impl_;
    if (call.direct_ && !stream) {
        // What operator() would do on these views: bind (done when prepared: same shapes, same
        // sizes), use the dense buffers in place, call the entry.
        // The entry takes void *const * (it writes through the outputs' pointers, not to the array).
        for (const auto &[output, bytes] : call.huge_outputs_)
            advise_huge_pages(const_cast<void *>(addresses[call.ins_.size() + output]), bytes);
        int rc = I.cpu->entry(call.size_values_.data(), const_cast<void *const *>(addresses), I.schedule.threads);
        if (rc != 0) throw UserError({}, "the generated kernel could not allocate its temporaries (out of memory)");
        return;
    }
    std::vector<TensorView> ins = call.ins_, outs = call.outs_;
    for (size_t n = 0; n < ins.size(); n++) ins[n].data = const_cast<void *>(addresses[n]);
    for (size_t n = 0; n < outs.size(); n++) outs[n].data = const_cast<void *>(addresses[ins.size() + n]);
    (*this)(ins, outs, stream);
}

Kernel compile_kernel(std::shared_ptr<const Compilation> c, const Options &schedule) {
    auto t0 = std::chrono::steady_clock::now();
    auto impl = std::make_unique<Kernel::Impl>();
    const Program &p = c->program;
    for (const InputDecl &in : p.inputs) impl->inputs.push_back(info_of(in.name, in.dtype, in.dims, false));
    for (const OutputDecl &out : p.outputs) {
        const TensorDef *d = p.find_def(out.name);
        RF_INTERNAL_ASSERT(d) << "output " << out.name << " has no definition";
        bool index = (d->is_topk() && d->index_name == out.name) || d->stype == SType::Int;
        impl->outputs.push_back(info_of(out.name, out.dtype, d->extents, index));
    }
    impl->schedule = schedule;  // the environment is already applied (analyze_source)
    impl->c = c;
    impl->prepare_binding();
    TargetKind kind = c->target.kind;
    if (!is_interpreter(kind)) {
        Generated g = generate(*c, impl->schedule);
        impl->source = g.source;
        impl->module = g.module;
        if (kind == TargetKind::Cpu) {
            impl->cpu = build_cpu(std::move(g), *c, impl->schedule);
            impl->from_cache = impl->cpu->from_cache;
        } else {
            impl->gpu = build_gpu(std::move(g), *c, impl->schedule);
            impl->from_cache = impl->gpu->from_cache;
        }
        g_builds++;
    }
    impl->compile_ms = c->analyze_ms + std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    impl->c = std::move(c);
    return Kernel(std::move(impl));
}

Kernel compile(const std::string &spec, const Target &target, const Options &options) {
    install_environment_once();
    // The kernel owns the arena its compilation is built in: it outlives every scope of the caller.
    auto arena = std::make_shared<Arena>();
    ArenaUse use(*arena);
    std::unique_ptr<Compilation> c =
        names_a_file(spec) ? analyze_file(spec, target, options) : analyze_source(spec, "<spec>", target, options);
    Options schedule = c->options;
    Kernel k = compile_kernel(std::move(c), schedule);
    k.impl_->arena = std::move(arena);
    return k;
}

PartialProgram Kernel::partial_program(const std::string &axis, int64_t topk_limit) const {
    std::optional<ArenaUse> use;
    if (impl_->arena) use.emplace(*impl_->arena);
    return derive_partial(*impl_->c, axis, topk_limit);
}

ChainState Kernel::merge_states(const PartialProgram &pp, const SizeBinding &sizes, const std::map<std::string, Tensor> &context,
                                const std::vector<const ChainState *> &states, int64_t row_begin, int64_t row_end) const {
    std::optional<ArenaUse> use;
    if (impl_->arena) use.emplace(*impl_->arena);
    return rf::merge_states(impl_->c->plan, pp.chain, sizes, context, pp.fields, states, row_begin, row_end);
}

std::map<std::string, Tensor> Kernel::finalize_states(const PartialProgram &pp, const SizeBinding &sizes,
                                                      const std::map<std::string, Tensor> &context,
                                                      const ChainState &state) const {
    std::optional<ArenaUse> use;
    if (impl_->arena) use.emplace(*impl_->arena);
    return rf::finalize_states(impl_->c->plan, pp.chain, sizes, context, pp.fields, state);
}

int64_t kernel_builds() { return g_builds.load(); }

}  // namespace rf
