/** \file Inputs.cpp
 * Random inputs of Inputs.h: a portable generator, per-input seeds, and the search for the index
 * range an integer input (labels, ids) is compared with.
 */
#include "interp/Inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "interp/Reference.h"
#include "support/Error.h"

namespace rf {

Rng::Rng(uint64_t seed) : engine_(seed) {}

uint64_t Rng::next() { return engine_(); }

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
    if (has_spare_) {
        has_spare_ = false;
        return spare_;
    }
    double u1 = 0;
    while (u1 == 0) u1 = uniform();  // log(0) would give an infinite sample
    double u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
    spare_ = r * std::sin(th);
    has_spare_ = true;
    return r * std::cos(th);
}

int64_t Rng::integer(int64_t lo, int64_t hi) {
    RF_INTERNAL_ASSERT(lo <= hi) << "empty integer range";
    uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
    if (span == 0) return static_cast<int64_t>(next());  // the full 64-bit range
    // Rejection sampling keeps the draw exactly uniform.
    uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % span);
}

namespace {

/** FNV-1a: a stable hash of the input name (std::hash differs between standard libraries). */
uint64_t name_hash(const std::string &s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

/** splitmix64 finalizer: decorrelates nearby seeds before they reach the Mersenne twister. */
uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool contains_load_of(Expr e, const std::string &input) {
    return any_of(e, [&](Expr n) { return n->kind == Kind::Load && n->name == input; });
}

std::pair<int64_t, int64_t> dtype_range(DType t) {
    switch (t) {
    case DType::i8: return {-128, 127};
    case DType::i32: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default: return {std::numeric_limits<int64_t>::min() / 2, std::numeric_limits<int64_t>::max() / 2};
    }
}

}  // namespace

std::pair<int64_t, int64_t> int_input_range(const Program &p, const SizeBinding &s, const std::string &input) {
    // The extent of every index variable, wherever it is introduced (definition or reduction); the
    // smallest one when a name is reused, so a drawn value is in range everywhere.
    std::map<Expr, int64_t> extent_of;
    auto note = [&](Expr var, Expr extent) {
        int64_t v = eval_extent(extent, s);
        auto [it, fresh] = extent_of.emplace(var, v);
        if (!fresh) it->second = std::min(it->second, v);
    };
    for (const TensorDef &d : p.defs) {
        for (size_t i = 0; i < d.vars.size() && i < d.extents.size(); i++) note(d.vars[i], d.extents[i]);
        visit(d.body, [&](Expr e) {
            if (e->kind == Kind::Reduce)
                for (size_t i = 0; i < e->num_axes(); i++) note(e->axis(i), e->extents[i]);
        });
    }
    int64_t best = -1;
    for (const TensorDef &d : p.defs) {
        visit(d.body, [&](Expr e) {
            if (e->kind != Kind::Cmp) return;
            for (int side = 0; side < 2; side++) {
                Expr mine = e->args[side], other = e->args[1 - side];
                if (!contains_load_of(mine, input) || contains_load_of(other, input)) continue;
                int64_t ext = -1;
                visit(other, [&](Expr n) {
                    if (ext < 0 && n->kind == Kind::Var && n->role == VarRole::Index) {
                        auto it = extent_of.find(n);
                        if (it != extent_of.end()) ext = it->second;
                    }
                });
                if (ext > 0 && (best < 0 || ext < best)) best = ext;
            }
        });
    }
    if (best > 0) return {0, best - 1};
    return {-8, 8};
}

std::map<std::string, Tensor> make_random_inputs(const Program &p, const SizeBinding &s, uint64_t seed,
                                                 InputDistribution dist, double scale) {
    std::map<std::string, Tensor> out;
    for (const InputDecl &in : p.inputs) {
        Tensor t(input_shape(in, s), in.dtype);
        Rng rng(mix(seed ^ mix(name_hash(in.name))));
        if (is_int(in.dtype)) {
            auto [lo, hi] = int_input_range(p, s, in.name);
            auto [dlo, dhi] = dtype_range(in.dtype);
            lo = std::clamp(lo, dlo, dhi);
            hi = std::clamp(hi, dlo, dhi);
            for (double &v : t.data) v = static_cast<double>(rng.integer(lo, hi));
        } else {
            for (double &v : t.data) {
                double x = 0;
                switch (dist) {
                case InputDistribution::Normal: x = rng.normal(); break;
                case InputDistribution::Uniform: x = 2.0 * rng.uniform() - 1.0; break;
                case InputDistribution::Positive: x = 0.5 + rng.uniform(); break;
                case InputDistribution::Ties: x = static_cast<double>(rng.integer(-3, 3)); break;
                }
                v = round_to_dtype(x * scale, in.dtype);
            }
        }
        // All zeros would hide every bug (docs/design.md §6): a one-element tensor drawn as 0, a tiny scale
        // that rounds away in fp8. Labels confined to {0} stay: there 0 is the only valid value.
        if (std::all_of(t.data.begin(), t.data.end(), [](double v) { return v == 0; })) {
            if (!is_int(in.dtype)) {
                double v = round_to_dtype(scale, in.dtype);
                t.data[0] = v != 0 ? v : 1.0;
            } else if (int_input_range(p, s, in.name) != std::pair<int64_t, int64_t>{0, 0}) {
                t.data[0] = 1.0;
            }
        }
        out[in.name] = std::move(t);
    }
    return out;
}

}  // namespace rf
