/** \file ExportedStates.cpp
 * The derived merge and epilogue of states that partial programs export (shard/State.h): each row
 * of the fields is unpacked into the plan interpreter's state, merged or finalized by it, and packed
 * back (interp/PlanInterp.h: merge_states, finalize_states).
 */
#include "interp/PlanInterpImpl.h"



namespace rf {
namespace {

using namespace plan_interp;

/** The field tensors' shapes for a state covering n positions of the axis. */
std::vector<int64_t> field_shape(const Interp &I, const MemberRt &m, const StateField &f, int64_t n) {
    std::vector<int64_t> shape = I.row_shape();
    if (f.per_row) return shape;
    shape.insert(shape.end(), m.extra_shape.begin(), m.extra_shape.end());
    if (f.role == StateRole::TopValues || f.role == StateRole::TopIndices) shape.push_back(std::min(m.k, n));
    return shape;
}

/** A selection member kept as a plain sum (its reference point is 0 in exported states). */
bool plain_sum(const MemberRt &m) {
    Relation r = m.a->relation;
    return (r == Relation::Independent || r == Relation::Additive || r == Relation::Monotone) && m.sel_op == ReduceOp::Sum;
}

/** A multiplicative sum whose δ and α read only the row, with points after the row (O.sum: D of them):
 *  one factor per state and row moves every point, so the merge runs on its first point and applies
 *  the factors to the rest as vectors. */
bool vector_member(const MemberRt &m) {
    return m.a->relation == Relation::Multiplicative && m.a->op == ReduceOp::Sum && m.row_only && m.extra_count > 1;
}

struct StateCodec {
    Interp &I;
    const std::vector<MemberRt> &mem;
    const std::vector<StateField> &fields;
    std::vector<size_t> member_of;  // per field
    std::vector<MemberRt> rep;      // mem with the vector members reduced to their first point

    StateCodec(Interp &i, const std::vector<MemberRt> &m, const std::vector<StateField> &f) : I(i), mem(m), fields(f) {
        for (const StateField &sf : fields) {
            size_t k = 0;
            while (k < mem.size() && mem[k].def->name != sf.member) k++;
            RF_INTERNAL_ASSERT(k < mem.size()) << "state field of an unknown member " << sf.member;
            member_of.push_back(k);
        }
        rep = mem;
        for (MemberRt &r : rep)
            if (vector_member(r)) {
                r.extra_count = 1;
                r.extra_shape.assign(r.extra_shape.size(), 1);
            }
    }

    /** `block` >= 0: the state holds that many rows (a block of the flattened rows), not all. */
    void check(const ChainState &cs, int64_t block = -1) const {
        if (cs.n < 0) throw UserError({}, "a partial state covers " + std::to_string(cs.n) + " positions");
        for (size_t i = 0; i < fields.size(); i++) {
            auto it = cs.fields.find(fields[i].key);
            if (it == cs.fields.end()) throw UserError({}, "the partial state has no field '" + fields[i].key + "'");
            std::vector<int64_t> want = field_shape(I, mem[member_of[i]], fields[i], cs.n);
            if (block >= 0) {
                want.erase(want.begin(), want.begin() + static_cast<long>(I.row_shape().size()));
                want.insert(want.begin(), block);
            }
            if (it->second.shape != want)
                throw UserError({}, "partial state field '" + fields[i].key + "' has shape " + shape_to_string(it->second.shape) +
                                        ", expected " + shape_to_string(want) + " (for a state of " + std::to_string(cs.n) +
                                        " positions)");
        }
    }

    /** The state of one row; `first_points`: the vector members hold their first point only. */
    State unpack(const ChainState &cs, int64_t row, bool first_points = false) {
        State st = I.empty(first_points ? rep : mem);
        st.n = cs.n;
        for (size_t k = 0; k < mem.size(); k++)
            for (Elem &e : st.members[k]) {
                e.seen = cs.n > 0;
                if (plain_sum(mem[k]) && e.seen) e.tag = {0.0};
            }
        for (size_t i = 0; i < fields.size(); i++) {
            const StateField &f = fields[i];
            const MemberRt &m = mem[member_of[i]];
            const Tensor &t = cs.fields.at(f.key);
            // A multiplicative member's row tag lives at its first point (the interpreter reads it there).
            int64_t points = (f.per_row && f.role == StateRole::Tag && m.a->relation == Relation::Multiplicative && m.row_only) ||
                                     (first_points && vector_member(m))
                                 ? 1 : m.extra_count;
            for (int64_t x = 0; x < points; x++) {
                Elem &e = st.members[member_of[i]][static_cast<size_t>(x)];
                size_t at = static_cast<size_t>(f.per_row ? row : row * m.extra_count + x);
                size_t slot = static_cast<size_t>(f.slot);
                switch (f.role) {
                case StateRole::Acc: e.acc = t.data[at]; break;
                case StateRole::Tag:
                    if (e.tag.size() <= slot) e.tag.resize(slot + 1, 0.0);
                    e.tag[slot] = t.data[at];
                    break;
                case StateRole::Moment: e.S[slot] = t.data[at]; break;
                case StateRole::Index: e.index = t.data[at]; break;
                case StateRole::TopValues:
                case StateRole::TopIndices: {
                    size_t kk = static_cast<size_t>(t.shape.back());
                    e.list.resize(kk);
                    for (size_t q = 0; q < kk; q++) {
                        double v = t.data[at * kk + q];
                        if (f.role == StateRole::TopValues) e.list[q].first = v;
                        else e.list[q].second = static_cast<int64_t>(v);
                    }
                    break;
                }
                }
            }
        }
        return st;
    }

    /** Writes a row; `first_points`: the vector members' accumulators are left to the caller. */
    void pack(const State &st, ChainState &out, int64_t row, bool first_points = false) {
        for (size_t i = 0; i < fields.size(); i++) {
            const StateField &f = fields[i];
            const MemberRt &m = mem[member_of[i]];
            Tensor &t = out.fields.at(f.key);
            if (first_points && vector_member(m) && f.role == StateRole::Acc) continue;
            for (int64_t x = 0; x < (f.per_row ? 1 : m.extra_count); x++) {
                const Elem &e = st.members[member_of[i]][static_cast<size_t>(x)];
                size_t at = static_cast<size_t>(f.per_row ? row : row * m.extra_count + x);
                size_t slot = static_cast<size_t>(f.slot);
                switch (f.role) {
                case StateRole::Acc:
                    t.data[at] = plain_sum(m) && !e.tag.empty() ? e.acc + static_cast<double>(st.n) * e.tag[0] : e.acc;
                    break;
                case StateRole::Tag: t.data[at] = slot < e.tag.size() ? e.tag[slot] : 0.0; break;
                case StateRole::Moment: t.data[at] = e.S[slot]; break;
                case StateRole::Index: t.data[at] = e.index; break;
                case StateRole::TopValues:
                case StateRole::TopIndices: {
                    size_t kk = static_cast<size_t>(t.shape.back());
                    RF_INTERNAL_ASSERT(e.list.size() >= kk) << "merged top-k holds " << e.list.size() << " of " << kk;
                    for (size_t q = 0; q < kk; q++)
                        t.data[at * kk + q] = f.role == StateRole::TopValues ? e.list[q].first : static_cast<double>(e.list[q].second);
                    break;
                }
                }
            }
        }
    }
};

PlanInterpOptions state_options() {
    PlanInterpOptions o;
    o.randomize = false;
    return o;
}

}  // namespace

ChainState merge_states(const Plan &plan, size_t chain, const SizeBinding &sizes, const std::map<std::string, Tensor> &context,
                        const std::vector<StateField> &fields, const std::vector<const ChainState *> &states,
                        int64_t row_begin, int64_t row_end) {
    if (states.empty()) throw UserError({}, "merge of no partial states");
    Interp I(plan, sizes, state_options());
    std::vector<MemberRt> mem = I.state_members(plan.chains.at(chain), context);
    StateCodec codec(I, mem, fields);
    bool block = row_end >= 0;
    if (!block) row_end = I.rows();
    if (row_begin < 0 || row_begin > row_end || row_end > I.rows())
        throw UserError({}, "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) + ") are not rows of the chain's " +
                                std::to_string(I.rows()));
    ChainState out;
    for (const ChainState *s : states) {
        codec.check(*s, block ? row_end - row_begin : -1);
        out.n += s->n;
    }
    for (size_t i = 0; i < fields.size(); i++) {
        std::vector<int64_t> shape = field_shape(I, mem[codec.member_of[i]], fields[i], out.n);
        if (block) {
            shape.erase(shape.begin(), shape.begin() + static_cast<long>(I.row_shape().size()));
            shape.insert(shape.begin(), row_end - row_begin);
        }
        out.fields[fields[i].key] = Tensor::filled(shape, 0.0);
    }
    std::vector<size_t> vec, acc_field(mem.size(), 0);  // vector members, and the field of each one's accumulator
    for (size_t k = 0; k < mem.size(); k++)
        if (vector_member(mem[k])) vec.push_back(k);
    for (size_t i = 0; i < fields.size(); i++)
        if (fields[i].role == StateRole::Acc) acc_field[codec.member_of[i]] = i;
    std::vector<std::vector<double>> factor(mem.size());
    for (int64_t r = row_begin; r < row_end; r++) {
        int64_t rr = r - row_begin;
        I.row(r);  // δ and α read row inputs at the global row
        State acc = codec.unpack(*states[0], rr, true);
        for (size_t k : vec) factor[k].assign(1, 1.0);
        for (size_t i = 1; i < states.size(); i++) {
            State next = codec.unpack(*states[i], rr, true);
            State merged = I.merged(acc, next, codec.rep);
            // The factors that moved each side to the merged tag (α(δ, τ) when they differ, as the merge does).
            for (size_t k : vec) {
                const std::vector<double> &d = merged.members[k][0].tag;
                auto moved = [&](const Elem &e) { return e.seen && e.tag != d ? I.rescale(codec.rep[k], d, e.tag) : 1.0; };
                double fa = moved(acc.members[k][0]), fb = moved(next.members[k][0]);
                for (double &f : factor[k]) f *= fa;
                factor[k].push_back(fb);
            }
            acc = std::move(merged);
        }
        codec.pack(acc, out, rr, true);
        for (size_t k : vec) {  // acc = Σ_s F_s · acc_s, point by point (an empty state or a zero term adds 0)
            const std::string &key = fields[acc_field[k]].key;
            int64_t X = mem[k].extra_count;
            double *o = out.fields.at(key).data.data() + rr * X;
            std::fill(o, o + X, 0.0);
            for (size_t s = 0; s < states.size(); s++) {
                if (states[s]->n == 0) continue;
                const double *a = states[s]->fields.at(key).data.data() + rr * X;
                double f = factor[k][s];
                for (int64_t x = 0; x < X; x++)
                    if (a[x] != 0) o[x] += a[x] * f;
            }
        }
    }
    return out;
}

std::map<std::string, Tensor> finalize_states(const Plan &plan, size_t chain, const SizeBinding &sizes,
                                              const std::map<std::string, Tensor> &context,
                                              const std::vector<StateField> &fields, const ChainState &state) {
    Interp I(plan, sizes, state_options());
    std::vector<MemberRt> mem = I.state_members(plan.chains.at(chain), context);
    StateCodec codec(I, mem, fields);
    codec.check(state);
    if (state.n != I.axis_length())
        throw UserError({}, "the merged state covers " + std::to_string(state.n) + " positions of the axis, which has " +
                                std::to_string(I.axis_length()) + ": merge every shard before finalizing");
    for (int64_t r = 0; r < I.rows(); r++) {
        I.row(r);
        I.finalize_row(codec.unpack(state, r), mem);
    }
    std::map<std::string, Tensor> all = I.epilogue(), out;
    for (const OutputDecl &o : plan.program->outputs) out[o.name] = all.at(o.name);
    return out;
}

}  // namespace rf
