/** \file robustness_test.cpp
 * Random byte strings, random token soups and mutated workloads: parse_program (and bind_sizes on
 * what parses) must answer every one quickly with success or a located UserError, nothing else.
 * Also large and pathological-but-valid inputs stay fast.
 */
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "spec/Frontend.h"

using namespace rf;

namespace {

// Generous: Debug builds with sanitizers on a loaded machine. A hang or blow-up is orders larger.
constexpr double kSecondsPerInput = 2.0;

const char *kSeedSpecs[] = {
    "size R, C\ninput X[R, C] : f32\nm[r] = max(c: X[r,c])\ns[r] = sum(c: exp(X[r,c] - m[r]))\n"
    "Y[r,c] = exp(X[r,c] - m[r]) / s[r]\noutput Y : f32\n",
    "size B, Hq, Hkv, N, D = 4\ninput Q[B, Hq, D] : bf16\ninput K[B, Hkv, N, D] : bf16\n"
    "input V[B, Hkv, N, D] : bf16\nG = Hq / Hkv\nscale = 1 / sqrt(D)\n"
    "S[b,h,j] = select(j <= N - 1, sum(d: Q[b,h,d] * K[b,h / G,j,d]) * scale, -inf)\n"
    "m[b,h] = max(j: S[b,h,j])\nl[b,h] = sum(j: exp(S[b,h,j] - m[b,h]))\n"
    "O[b,h,e:D] = sum(j: exp(S[b,h,j] - m[b,h]) * V[b,h / G,j,e]) / l[b,h]\noutput O : bf16\n",
    "size T = 3, E = 16\ninput X[T, E] : f32\nm[t] = max(e: X[t,e])\ns[t] = sum(e: exp(X[t,e] - m[t]))\n"
    "W[t,r], I[t,r] = topk(e, 8: exp(X[t,e] - m[t]) / s[t])\noutput W, I\n",
    "size M = 2, N = 3, K = 4\ninput A[M, K] : bf16\ninput Wq[N, K] : f8e4m3\ninput sw[N] : f32\n"
    "a[m] = max(k: abs(A[m,k]))\nC[m,n] = sum(k: f32(f8e4m3(A[m,k] * 448 / a[m])) * f32(Wq[n,k])) * a[m] / 448 * sw[n]\n"
    "output C : bf16\n",
    "size S = 2, N = 5\ninput w[S, N]\ninput P[S, N, 3]\nW[s] = sum(n: w[s,n])\nc[s,a] = sum(n: w[s,n] * P[s,n,a]) / W[s]\n"
    "I[s] = sum(n: w[s,n] * sum(a: (P[s,n,a] - c[s,a]) * (P[s,n,a] - c[s,a])))\nk[s] = argmax(n: w[s, n])\n"
    "output I, k\n",
};

const char *kTokens[] = {
    "size", "input", "output", "and", "or", "not", "X", "Y", "N", "M", "i", "j", "k", "r", "e", "m", "s", "W", "I",
    "sum", "max", "min", "prod", "argmax", "argmin", "topk", "exp", "log", "sqrt", "select", "pow", "f32", "bf16",
    "i8", "inf", "0", "1", "2", "8", "1.5", ".5", "1e-6", "3000000000", "(", ")", "[", "]", ",", ":", "=", "+", "-",
    "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "\n", "\n", "\n", " ", "#", "\t",
};

/** Runs one input; returns a description of the failure, or "" when it behaved. */
std::string run_one(const std::string &src, double limit_seconds = kSecondsPerInput) {
    ArenaScope scope;
    auto t0 = std::chrono::steady_clock::now();
    std::string failure;
    try {
        Program p = parse_program(src, "fuzz.rf");
        (void)to_string(p);
        try {
            bind_sizes(p, {});
        } catch (const UserError &) {
        }
        std::map<std::string, int64_t> sizes;
        for (const SizeDecl &s : p.sizes) sizes[s.name] = 3;
        try {
            bind_sizes(p, sizes);
        } catch (const UserError &) {
        }
    } catch (const UserError &e) {
        if (!e.loc().valid()) failure = std::string("UserError without location: ") + e.what();
    } catch (const std::exception &e) {
        failure = std::string("non-UserError exception: ") + e.what();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failure.empty() && s > limit_seconds) failure = "took " + std::to_string(s) + " s";
    return failure;
}

std::string escape(const std::string &s) {
    std::string out;
    for (unsigned char c : s.substr(0, 400)) {
        if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
        else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        }
    }
    return out;
}

TEST(Robustness, RandomBytes) {
    std::mt19937 rng(1234);
    for (int n = 0; n < 2000; n++) {
        std::string s(rng() % 200, '\0');
        bool printable = n % 2 == 0;
        for (char &c : s) c = static_cast<char>(printable ? 0x20 + rng() % 0x5f : rng() % 256);
        if (printable && !s.empty()) s[rng() % s.size()] = '\n';
        std::string f = run_one(s);
        ASSERT_EQ(f, "") << "input: \"" << escape(s) << "\"";
    }
}

TEST(Robustness, TokenSoup) {
    std::mt19937 rng(99);
    const size_t nt = sizeof kTokens / sizeof kTokens[0];
    for (int n = 0; n < 3000; n++) {
        std::string s;
        int len = 1 + rng() % 60;
        // Half of the soups start from a valid prefix so that the checker (not only the parser) runs.
        if (n % 2) s = "size N, M\ninput X[N, M]\n";
        for (int i = 0; i < len; i++) s += std::string(kTokens[rng() % nt]) + (rng() % 3 ? " " : "");
        std::string f = run_one(s);
        ASSERT_EQ(f, "") << "input: \"" << escape(s) << "\"";
    }
}

TEST(Robustness, MutatedWorkloads) {
    std::mt19937 rng(7);
    const size_t nt = sizeof kTokens / sizeof kTokens[0];
    for (int n = 0; n < 3000; n++) {
        std::string s = kSeedSpecs[n % (sizeof kSeedSpecs / sizeof kSeedSpecs[0])];
        int edits = 1 + rng() % 4;
        for (int e = 0; e < edits; e++) {
            size_t pos = rng() % (s.size() + 1);
            switch (rng() % 4) {
            case 0: if (pos < s.size()) s.erase(pos, 1 + rng() % 5); break;
            case 1: s.insert(pos, kTokens[rng() % nt]); break;
            case 2: if (pos < s.size()) s[pos] = static_cast<char>(0x20 + rng() % 0x5f); break;
            case 3: {  // duplicate a random slice (repeats lines, nests expressions)
                size_t len = rng() % 40;
                if (pos + len <= s.size()) s.insert(rng() % (s.size() + 1), s.substr(pos, len));
                break;
            }
            }
        }
        std::string f = run_one(s);
        ASSERT_EQ(f, "") << "input: \"" << escape(s) << "\"";
    }
    // The seeds themselves are valid.
    for (const char *s : kSeedSpecs) {
        ArenaScope scope;
        EXPECT_NO_THROW(parse_program(s, "seed.rf")) << s;
    }
}

TEST(Robustness, LargeValidSpecsStayFast) {
    // ~1 MiB of definitions: many small reductions and long element-wise chains.
    std::string s = "size N, M\ninput X[N, M]\n";
    int k = 0;
    while (s.size() < (1u << 20) - 200) {
        std::string name = "d" + std::to_string(k);
        if (k % 3 == 0) s += name + "[i] = sum(j: X[i, j] * " + std::to_string(k) + ")\n";
        else s += name + "[i, j] = X[i, j] + d" + std::to_string(k - (k % 3)) + "[i]\n";
        k++;
    }
    s += "output d0\n";
    // (About 0.3 s in an optimized build; Debug and sanitizers are several times slower.)
    EXPECT_EQ(run_one(s, 20.0), "");
    // Many uses of one large element-wise definition, each at a new index: every use creates
    // fresh nodes, and the node budget stops the expansion with a UserError.
    std::string t = "size N\ninput X[N]\nA[i] = X[i]";
    for (int k = 1; k < 200; k++) t += " + X[i] * " + std::to_string(k);
    t += "\n";
    for (int i = 0; i < 20000; i++) t += "B" + std::to_string(i) + "[i:N] = A[(i + " + std::to_string(i) + ") % N]\n";
    t += "output B0\n";
    EXPECT_EQ(run_one(t, 20.0), "");
    ArenaScope scope;
    try {
        parse_program(t, "t.rf");
        ADD_FAILURE() << "expected the node budget to stop this spec";
    } catch (const UserError &e) {
        EXPECT_NE(std::string(e.what()).find("spec is too large"), std::string::npos) << e.what();
    }
}

TEST(Robustness, LongListsStayLinear) {
    // Statements of any length: long size, output, argument and axis lists.
    std::string s = "size N";
    for (int i = 0; i < 60000; i++) s += ", S" + std::to_string(i);
    s += "\ninput X[N, N]\n";
    for (int i = 0; i < 15000; i++) s += "D" + std::to_string(i) + "[i] = sum(j: X[i, j])\n";
    s += "output D0";
    for (int i = 1; i < 15000; i++) s += ", D" + std::to_string(i);
    s += "\n";
    EXPECT_EQ(run_one(s, 20.0), "");
    std::string axes = "size N\ninput X[N]\ns = sum(a0";
    for (int i = 1; i < 100000; i++) axes += ", a" + std::to_string(i);
    axes += ": X[a0])\noutput s\n";
    EXPECT_EQ(run_one(axes, 20.0), "");
    std::string args = "size N\ninput X[N]\nY[i] = exp(X[i]";
    for (int i = 1; i < 100000; i++) args += ", X[i]";
    args += ")\noutput Y\n";
    EXPECT_EQ(run_one(args, 20.0), "");
}

TEST(Robustness, DeepButLegalNesting) {
    // 200 levels of parentheses and a 200-term chain are within the limits.
    std::string s = "size N\ninput X[N]\nY[i] = " + std::string(200, '(') + "X[i]" + std::string(200, ')');
    for (int i = 0; i < 200; i++) s += " + X[i]";
    s += "\noutput Y\n";
    ArenaScope scope;
    EXPECT_NO_THROW(parse_program(s, "deep.rf"));
}

}  // namespace
