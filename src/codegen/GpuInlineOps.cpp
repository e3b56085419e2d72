/** \file GpuInlineOps.cpp
 * The inline top-k insertion and polynomial shift of GPU kernels (see GpuInlineOps.h).
 */
#include "codegen/GpuInlineOps.h"

#include <sstream>

namespace rf::gpu_mapping {

namespace {

std::string pad(int ind) { return std::string(4 * static_cast<size_t>(ind), ' '); }

int64_t binomial(int n, int k) {
    int64_t c = 1;
    for (int i = 1; i <= k; i++) c = c * (n - k + i) / i;
    return c;
}

}  // namespace

std::string gpu_topk_insert(const TopKText &t, int ind) {
    const std::string &V = t.values, &I = t.indices, &N = t.counts;
    std::ostringstream os;
    os << pad(ind) << "{ const int64_t o_ = " << t.offset << ", k_ = " << t.k << "; const int64_t len_ = (int64_t)" << N << "[" << t.count_index
       << "]; const float val_ = " << t.value << ", idx_ = (float)(" << t.index << ");\n";
    os << pad(ind + 1) << "if (!(len_ == k_ && !rf_better(1, val_, idx_, " << V << "[o_ + k_ - 1], " << I << "[o_ + k_ - 1]))) {\n";
    os << pad(ind + 2) << "int64_t pos_ = len_ < k_ ? len_ : k_ - 1;\n";
    os << pad(ind + 2) << "while (pos_ > 0 && rf_better(1, val_, idx_, " << V << "[o_ + pos_ - 1], " << I << "[o_ + pos_ - 1])) { " << V
       << "[o_ + pos_] = " << V << "[o_ + pos_ - 1]; " << I << "[o_ + pos_] = " << I << "[o_ + pos_ - 1]; pos_--; }\n";
    os << pad(ind + 2) << V << "[o_ + pos_] = val_; " << I << "[o_ + pos_] = idx_;\n";
    os << pad(ind + 2) << "if (len_ < k_) " << N << "[" << t.count_index << "] = (float)(len_ + 1);\n";
    os << pad(ind + 1) << "}\n";
    os << pad(ind) << "}\n";
    return os.str();
}

std::string gpu_poly_shift(const std::vector<std::vector<int>> &al, const std::string &base, const std::string &at,
                           const std::vector<std::string> &from, const std::vector<std::string> &to, int ind) {
    size_t nd = from.size();
    std::ostringstream os;
    os << pad(ind) << "{\n";
    std::string same = "true";
    for (size_t i = 0; i < nd; i++) {
        os << pad(ind + 1) << "const float f" << i << "_ = " << from[i] << ", t" << i << "_ = " << to[i] << ";\n";
        same += " && f" + std::to_string(i) + "_ == t" + std::to_string(i) + "_";
    }
    os << pad(ind + 1) << "if (!(" << same << ")) {\n";
    for (size_t i = 0; i < nd; i++) os << pad(ind + 2) << "const float d" << i << "_ = t" << i << "_ - f" << i << "_;\n";
    for (size_t a = 0; a < al.size(); a++) os << pad(ind + 2) << "const float s" << a << "_ = " << base << "[" << at << " + " << a << "];\n";
    for (size_t b = 0; b < al.size(); b++) {
        std::string sum;
        for (size_t a = 0; a < al.size(); a++) {
            // Only multi-indices a ≥ b (componentwise) contribute.
            std::string term;
            int64_t coef = 1;
            bool dominates = true;
            for (size_t i = 0; i < nd && dominates; i++) {
                int hi = al[a][i], lo = al[b][i];
                dominates = hi >= lo;
                if (!dominates) break;
                coef *= binomial(hi, lo);
                for (int p = 0; p < hi - lo; p++) term += " * d" + std::to_string(i) + "_";
            }
            if (!dominates) continue;
            sum += (sum.empty() ? "" : " + ") + std::to_string(coef) + ".0f" + term + " * s" + std::to_string(a) + "_";
        }
        os << pad(ind + 2) << base << "[" << at << " + " << b << "] = " << (sum.empty() ? "0.0f" : sum) << ";\n";
    }
    os << pad(ind + 1) << "}\n";
    os << pad(ind) << "}\n";
    return os.str();
}

}  // namespace rf::gpu_mapping
