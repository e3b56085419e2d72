/** \file bad_specs_test.cpp
 * The table of bad specs: each must fail with a UserError (never another exception) at the exact
 * line and column of the offending token, with a recognizable message. Rows marked `bind` parse
 * fine and fail in bind_sizes (bounds, extents, missing sizes).
 */
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "spec/Frontend.h"

using namespace rf;

namespace {

struct BadCase {
    std::string name;
    std::string spec;
    int line, col;
    std::string message;
    bool bind = false;  // parse must succeed; bind_sizes(sizes) must fail
    std::map<std::string, int64_t> sizes = {};
};

// Two common first lines: a size and a 1-d input.
const std::string P = "size N\ninput X[N]\n";
// A 2-d prelude for reductions.
const std::string P2 = "size R, C\ninput X[R, C]\n";

std::string repeat(const std::string &s, int n) {
    std::string r;
    for (int i = 0; i < n; i++) r += s;
    return r;
}

std::vector<BadCase> cases() {
    std::vector<BadCase> v = {
        // ---- names
        {"unknown_name", P + "Y[i] = X[i] + z\noutput Y\n", 3, 15, "unknown name 'z'"},
        {"unknown_function", P + "Y[i] = foo(X[i])\noutput Y\n", 3, 8, "unknown function 'foo'"},
        {"tensor_called", P + "Y[i] = X(i)\noutput Y\n", 3, 8, "'X' is not a function"},
        {"duplicate_definition", P2 + "m[r] = max(c: X[r,c])\nm[r] = min(c: X[r,c])\noutput m\n", 4, 1,
         "'m' is already defined at line 3"},
        {"duplicate_size", "size N, N\n", 1, 9, "'N' is already defined at line 1"},
        {"input_redefined", P + "X[i] = 1\n", 3, 1, "'X' is already defined at line 2 (input)"},
        {"use_before_definition", P2 + "s[r] = sum(c: exp(X[r,c] - m[r]))\nm[r] = max(c: X[r,c])\noutput s\n", 3, 28,
         "'m' is used before its definition at line 4"},
        {"self_reference", P + "Y[i] = Y[i] + 1\noutput Y\n", 3, 8, "'Y' is used in its own definition"},
        {"reserved_name", "exp = 1\n", 1, 1, "'exp' is a reserved name"},
        {"index_var_reserved", P + "Y[sum] = X[sum]\noutput Y\n", 3, 3, "'sum' is a reserved name"},
        {"function_as_value", P + "Y[i] = X[i] * exp\noutput Y\n", 3, 15, "'exp' is a function; call it as exp(...)"},
        {"tensor_without_indices", P + "Y[i] = X + 1\noutput Y\n", 3, 8, "'X' is a tensor with 1 dimension(s)"},
        {"index_var_as_tensor", P + "Y[i] = X[i] + i[0]\noutput Y\n", 3, 15, "'i' is an index variable, not a tensor"},
        {"size_as_tensor", P + "Y[i] = X[i] + N[0]\noutput Y\n", 3, 15, "'N' is a size, not a tensor"},
        // ---- arity
        {"arity_exp", P + "Y[i] = exp(X[i], 1)\noutput Y\n", 3, 8, "exp takes 1 argument, got 2"},
        {"arity_select", P + "Y[i] = select(X[i] > 0, 1)\noutput Y\n", 3, 8, "select takes 3 arguments"},
        {"arity_max", P + "Y[i] = max(X[i])\noutput Y\n", 3, 8, "max takes 2 arguments"},
        {"arity_pow", P + "Y[i] = pow(X[i])\noutput Y\n", 3, 8, "pow takes 2 arguments, got 1"},
        {"arity_cast", P + "Y[i] = bf16(X[i], X[i])\noutput Y\n", 3, 8, "bf16 takes 1 argument (a cast), got 2"},
        {"sum_without_axes", P + "Y[i] = sum(X[i])\noutput Y\n", 3, 8, "sum needs reduction axes"},
        {"colon_on_function", P + "Y[i] = exp(j: X[j])\noutput Y\n", 3, 8, "'exp' is not a reduction"},
        {"argmax_two_axes", P2 + "a[q] = argmax(r, c: X[r,c])\noutput a\n", 3, 18, "argmax reduces over exactly one axis"},
        {"axis_not_a_name", P + "s = sum(i + 1: X[i])\noutput s\n", 3, 11, "the axes of sum must be plain names"},
        {"too_many_axes", "size N\ninput X[N]\ns = sum(" + [] {
             std::string a = "a0";
             for (int i = 1; i < 20; i++) a += ", a" + std::to_string(i);
             return a;
         }() + ": X[a0])\noutput s\n", 3, 79, "a reduction may have at most 16 axes"},
        {"axis_listed_twice", P2 + "s = sum(r, r: X[r, r])\noutput s\n", 3, 12, "axis 'r' is listed twice"},
        // ---- index variables and extents
        {"extent_mismatch",
         "size N, M, D\ninput K[N, D]\ninput V[M, D]\nO[e] = sum(j: K[j, e] * V[j, e])\noutput O\n", 4, 27,
         "extent mismatch: 'j' indexes K dimension 1 (extent N) and V dimension 1 (extent M)"},
        {"wrong_index_count", P + "Y[i] = X[i, i]\noutput Y\n", 3, 8, "'X' has 1 dimension(s) but 2 index(es)"},
        {"zero_dimension", "size R = 3\ninput X[R, 0] : f32\nY[r] = sum(c: X[r, c])\noutput Y\n", 2, 12,
         "a dimension must be at least 1"},
        {"unused_axis", P2 + "Y[r] = sum(c: X[r, 0])\noutput Y\n", 3, 12, "reduction axis 'c' is not used in the body"},
        {"axis_extent_unknown", P2 + "Y[r] = sum(c: X[r, c + 0])\noutput Y\n", 3, 12,
         "cannot infer the extent of reduction axis 'c'"},
        {"lhs_extent_unknown", P + "Y[i, e] = X[i]\noutput Y\n", 3, 6, "cannot infer the extent of 'e'; write e:EXTENT"},
        {"duplicate_lhs_vars", P2 + "Y[r, r] = X[r, r]\noutput Y\n", 3, 6, "index variable 'r' appears twice"},
        {"shadowing_axis", P2 + "Y[r] = sum(r: X[r, r])\noutput Y\n", 3, 12, "shadows the index variable 'r' bound at line 3"},
        {"nested_shadowing", P2 + "s = sum(r: sum(r: X[r, r]))\noutput s\n", 3, 16, "shadows the index variable 'r'"},
        {"index_var_is_size", P + "Y[N] = X[N]\noutput Y\n", 3, 3, "index variable 'N' collides with the size 'N'"},
        {"index_var_is_def_name", P + "Y[Y] = X[Y]\noutput Y\n", 3, 3, "has the same name as the definition"},
        {"extent_uses_index_var", P + "Y[i, e:i] = X[i]\noutput Y\n", 3, 8, "an extent cannot use the index variable 'i'"},
        {"too_many_dims", "size N\ninput X[" + repeat("N, ", 16) + "N]\n", 2, 57, "at most 16 dimensions"},
        // ---- types and the division rule
        {"real_in_index", P + "Y[i] = X[i * 1.5]\noutput Y\n", 3, 14,
         "index expression must be integer arithmetic of index variables and sizes"},
        {"load_in_index", P + "input y[N] : i32\nY[i] = X[y[i]]\noutput Y\n", 4, 10,
         "index expression must be integer arithmetic of index variables and sizes"},
        {"call_in_index", P + "Y[i] = X[abs(i)]\noutput Y\n", 3, 10,
         "index expression must be integer arithmetic of index variables and sizes"},
        {"comparison_in_index", P + "Y[i] = X[i < 2]\noutput Y\n", 3, 12,
         "index expression must be integer arithmetic of index variables and sizes"},
        {"real_scalar_in_index", P + "scale = 1 / sqrt(N)\nY[i] = X[scale]\noutput Y\n", 4, 10,
         "index expression must be integer arithmetic of index variables and sizes (the scalar 'scale' is not)"},
        {"mod_in_value", P + "Y[i] = X[i] % 2\noutput Y\n", 3, 13, "'%' is only allowed in index expressions"},
        {"bool_in_arithmetic", P + "Y[i] = X[i] + (X[i] < 0)\noutput Y\n", 3, 21, "a condition cannot be used as a number"},
        {"select_needs_condition", P + "Y[i] = select(X[i], 1, 0)\noutput Y\n", 3, 15, "select needs a condition"},
        {"and_needs_conditions", P + "Y[i] = select(X[i] and X[i] > 0, 1, 0)\noutput Y\n", 3, 15, "'and' needs a condition"},
        {"bool_definition", P + "Y[i] = X[i] > 0\noutput Y\n", 3, 13, "the value of 'Y' is a condition"},
        {"bad_input_dtype", "size N\ninput X[N] : f23\n", 2, 14, "unknown dtype 'f23'"},
        {"bad_output_dtype", P + "Y[i] = X[i]\noutput Y : float\n", 4, 12, "unknown dtype 'float'"},
        // ---- top-k
        {"topk_k_too_large", "size T\ninput X[T, 8]\nW[t,r], I[t,r] = topk(e, 9: X[t,e])\noutput W\n", 3, 26,
         "top-k K = 9 is larger than the extent 8 of axis 'e'"},
        {"topk_k_zero", "size T, E\ninput X[T, E]\nW[t,r], I[t,r] = topk(e, 0: X[t,e])\noutput W\n", 3, 26,
         "top-k K must be at least 1"},
        {"topk_k_too_large_bound", "size T, E\ninput X[T, E]\nW[t,r], I[t,r] = topk(e, 8: X[t,e])\noutput W, I\n", 3, 1,
         "top-k K = 8 is larger than the extent 4 of axis 'e'", true, {{"T", 2}, {"E", 4}}},
        {"topk_nested", "size T, E\ninput X[T, E]\nY[t] = 1 + topk(e, 2: X[t,e])\noutput Y\n", 3, 12,
         "topk can only be the whole right-hand side"},
        {"topk_one_name", "size T, E\ninput X[T, E]\nY[t, r] = topk(e, 2: X[t,e])\noutput Y\n", 3, 11,
         "topk defines two tensors"},
        {"topk_var_lists_differ", "size T, E\ninput X[T, E]\nW[t,r], I[t,s] = topk(e, 2: X[t,e])\noutput W\n", 3, 13,
         "both top-k tensors must have the same index variables"},
        {"two_names_without_topk", "size T, E\ninput X[T, E]\nW[t,r], I[t,r] = X[t, r]\noutput W\n", 3, 18,
         "a definition of two tensors must be"},
        {"topk_k_axis_in_body", "size T, E\ninput X[T, E]\nW[t,r], I[t,r] = topk(e, 2: X[t,e] + r)\noutput W\n", 3, 38,
         "the top-k axis 'r' numbers the results"},
        // ---- outputs
        {"missing_output", P + "Y[i] = X[i]\n", 4, 1, "spec has no output"},
        {"output_of_input", P + "output X\n", 3, 8, "'X' is an input; only definitions can be outputs"},
        {"output_unknown", P + "Y[i] = X[i]\noutput Z\n", 4, 8, "unknown name 'Z'"},
        {"output_twice", P + "Y[i] = X[i]\noutput Y\noutput Y : bf16\n", 5, 8, "'Y' is already an output (line 4)"},
        {"output_scalar", P + "c = 2 * N\noutput c\n", 4, 8, "'c' is a scalar; only tensor definitions can be outputs"},
        {"output_before_definition", P + "output Y\nY[i] = X[i]\n", 3, 8, "'Y' is used before its definition at line 4"},
        // ---- syntax
        {"missing_paren", P + "Y[i] = exp(X[i]\noutput Y\n", 4, 1, "expected ',', ':' or ')' in the call of 'exp'"},
        {"two_statements_one_line", "size N size M\n", 1, 8, "expected end of line after the statement"},
        {"chained_comparison", P + "Y[i] = select(0 < X[i] < 1, 1, 0)\noutput Y\n", 3, 24, "comparisons cannot be chained"},
        {"bad_statement_start", "= 3\n", 1, 1, "expected a statement"},
        {"bang", P + "Y[i] = select(!(X[i] > 0), 1, 0)\noutput Y\n", 3, 15, "unexpected character '!'"},
        {"malformed_number", P + "Y[i] = X[i] * 1e\noutput Y\n", 3, 15, "malformed number '1e'"},
        {"size_default_real", "size N = 1.5\n", 1, 10, "must be a positive integer literal"},
        {"size_default_zero", "size N = 0\n", 1, 10, "must be a positive integer"},
        // ---- robustness
        {"empty_file", "", 1, 1, "spec has no output"},
        {"only_comments", "# nothing here\n   # still nothing\n", 3, 1, "spec has no output"},
        {"binary_garbage", std::string("\x01\x02\xff\xfe", 4), 1, 1, "unexpected character"},
        {"nul_byte", std::string("size N\0", 7), 1, 7, "unexpected character 0x00"},
        {"nul_in_comment", std::string("# a\0b\n", 6), 1, 4, "unexpected character 0x00"},
        {"non_ascii_outside_comment", P + "Y[i] = X[i] \xc3\xa9\noutput Y\n", 3, 13, "non-ASCII"},
        {"very_long_line", P + "Y[i] = X[i]" + std::string(200000, ' ') + "@\noutput Y\n", 3, 200012,
         "unexpected character '@'"},
        {"deep_parentheses", P + "Y[i] = " + std::string(100000, '(') + "X[i]" + std::string(100000, ')') + "\n", 3,
         264, "expression nested too deeply"},
        {"deep_unary_minus", P + "Y[i] = " + std::string(100000, '-') + "X[i]\n", 3, 264,
         "expression nested too deeply"},
        {"long_operator_chain", P + "Y[i] = X[i]" + repeat(" + X[i]", 300) + "\n", 3, 13 + 7 * 254,  // the 255th '+' makes the tree 257 deep
         "expression nested too deeply"},
        {"huge_integer", P + "Y[i] = X[i] * 99999999999999999999999\n", 3, 15, "number out of range"},
        {"huge_real", P + "Y[i] = X[i] * 1e999\n", 3, 15, "number out of range"},
        {"huge_size", "size N = 3000000000\n", 1, 10, "number out of range"},
        {"source_too_large", "# " + std::string((1 << 20) + 10, 'x') + "\n", 1, 1, "spec is too large"},
        {"inlining_blowup",
         P + "A0[i] = X[i]\n" + [] {
             std::string s;
             for (int k = 1; k <= 20; k++)
                 s += "A" + std::to_string(k) + "[i] = A" + std::to_string(k - 1) + "[i] * A" + std::to_string(k - 1) + "[i]\n";
             return s;
         }() + "output A20\n",
         15, 1, "'A12' is too large after inlining"},  // tree size 3 * 2^k - 1
        {"scalar_chain_too_deep",
         "size N\nc0 = N\n" + [] {
             std::string s;
             for (int k = 1; k <= 600; k++) s += "c" + std::to_string(k) + " = c" + std::to_string(k - 1) + " + 1\n";
             return s;
         }(),
         514, 1, "scalar 'c512' is nested too deeply after inlining"},
        // ---- bind_sizes
        {"out_of_bounds", P + "Y[i] = X[i] + X[i + 1]\noutput Y\n", 3, 1,
         "index 'i + 1' of X dimension 1 can reach 8 but its extent is 8", true, {{"N", 8}}},
        {"negative_index", P + "Y[i] = X[i] - X[i - 1]\noutput Y\n", 3, 1,
         "index 'i - 1' of X dimension 1 can reach -1 but indices start at 0", true, {{"N", 8}}},
        {"explicit_extent_out_of_bounds", "size B, N, Dk, Dv\ninput KV[B, N, Dk]\nO[b,e:Dv] = sum(j: KV[b,j,e])\noutput O\n",
         3, 1, "index 'e' of KV dimension 3 can reach 599 but its extent is 576", true,
         {{"B", 1}, {"N", 4}, {"Dk", 576}, {"Dv", 600}}},
        {"gqa_bad_group", "size H, Hk\ninput K[Hk]\nG = H / Hk\nY[h:H] = K[h / G]\noutput Y\n", 4, 1,
         "the divisor 'H / Hk' in 'h / (H / Hk)' can be 0", true, {{"H", 2}, {"Hk", 4}}},
        {"size_without_value", P + "Y[i] = X[i]\noutput Y\n", 1, 6, "size 'N' has no value; pass --size N=VALUE", true},
        {"size_out_of_range", P + "Y[i] = X[i]\noutput Y\n", 1, 6, "size 'N' = 0 is out of range", true, {{"N", 0}}},
        {"extent_below_one", "size N\ninput X[N - 4]\nY[i] = X[i]\noutput Y\n", 2, 7, "extents must be at least 1", true,
         {{"N", 2}}},
    };
    return v;
}

class BadSpec : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadSpec, FailsWithUserErrorAtLocation) {
    const BadCase &c = GetParam();
    ArenaScope scope;
    try {
        Program p = parse_program(c.spec, "bad.rf");
        if (!c.bind) FAIL() << "parsed without error:\n" << to_string(p);
        bind_sizes(p, c.sizes);
        FAIL() << "bind_sizes succeeded";
    } catch (const UserError &e) {
        EXPECT_EQ(e.loc().line, c.line) << e.what();
        EXPECT_EQ(e.loc().col, c.col) << e.what();
        EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
            << "message: " << e.what() << "\nexpected to contain: " << c.message;
        if (c.bind) {
            // It must have parsed: the error comes from bind_sizes.
            EXPECT_NO_THROW(parse_program(c.spec, "bad.rf"));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Table, BadSpec, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<BadCase> &i) { return i.param.name; });

TEST(BadSpec, TableIsLargeAndDistinct) {
    auto v = cases();
    EXPECT_GE(v.size(), 40u);
    std::set<std::string> names, specs;
    for (const BadCase &c : v) {
        EXPECT_TRUE(names.insert(c.name).second) << c.name;
        EXPECT_TRUE(specs.insert(c.spec + (c.bind ? "#bind" + std::to_string(c.sizes.size()) : "")).second) << c.name;
    }
}

}  // namespace
