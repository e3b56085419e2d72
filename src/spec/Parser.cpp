/** \file Parser.cpp
 * Recursive descent over a one-token lookahead stream. Every recursive step counts against
 * kMaxNesting, and operator chains are bounded by the tree height, so no input can overflow the
 * stack here or in the later passes that walk the tree.
 */
#include "spec/Parser.h"

#include <deque>

#include "spec/Limits.h"

namespace rf::spec {

namespace {

const char *kDtypeList = "f64, f32, f16, bf16, f8e4m3, f8e5m2, i8, i32, i64";

class Parser {
public:
    explicit Parser(const std::string &src) : lex_(src) {}

    ParsedSpec parse_file() {
        ParsedSpec out;
        std::vector<Stmt> &stmts = out.stmts;
        for (;;) {
            while (peek().kind == Tok::Newline) take();
            if (peek().kind == Tok::End) break;
            stmts.push_back(parse_stmt());
            const Token &t = peek();
            if (t.kind != Tok::Newline && t.kind != Tok::End)
                fail(t, "expected end of line after the statement, found " + show(t) +
                            " (write one statement per line)");
        }
        out.end = peek().loc;
        return out;
    }

private:
    // ---- Token stream
    const Token &peek(size_t k = 0) {
        while (buf_.size() <= k) buf_.push_back(lex_.next());
        return buf_[k];
    }
    Token take() {
        peek();
        Token t = std::move(buf_.front());
        buf_.pop_front();
        return t;
    }
    bool accept(Tok k) {
        if (peek().kind != k) return false;
        take();
        return true;
    }
    Token expect(Tok k, const std::string &context) {
        if (peek().kind != k) fail(peek(), std::string("expected ") + tok_desc(k) + " " + context + ", found " + show(peek()));
        return take();
    }
    static std::string show(const Token &t) {
        switch (t.kind) {
        case Tok::Newline: return "end of line";
        case Tok::End: return "end of file";
        default: {
            std::string s = t.text.size() > 40 ? t.text.substr(0, 40) + "..." : t.text;
            return "'" + s + "'";
        }
        }
    }
    [[noreturn]] static void fail(const Token &t, const std::string &msg) { throw UserError(t.loc, msg); }

    // ---- Statements
    Stmt parse_stmt() {
        const Token &t = peek();
        Stmt s;
        s.loc = t.loc;
        switch (t.kind) {
        case Tok::KwSize: take(); parse_size(s); return s;
        case Tok::KwInput: take(); parse_input(s); return s;
        case Tok::KwOutput: take(); parse_output(s); return s;
        case Tok::Ident: parse_def(s); return s;
        default:
            fail(t, "expected a statement (size, input, output or a definition 'NAME[...] = expr'), found " + show(t));
        }
    }

    NameRef expect_name(const std::string &context) {
        Token t = expect(Tok::Ident, context);
        return {t.text, t.loc};
    }

    void parse_size(Stmt &s) {
        s.kind = Stmt::Size;
        do {
            NameRef n = expect_name("(a size name) in 'size'");
            SizeItem item{n.name, n.loc, std::nullopt};
            if (accept(Tok::Assign)) {
                const Token &v = peek();
                if (v.kind != Tok::Int)
                    fail(v, "the default of size '" + n.name + "' must be a positive integer literal, found " + show(v));
                if (v.ival < 1) fail(v, "the default of size '" + n.name + "' must be a positive integer, found 0");
                if (v.ival >= kMaxSize)
                    fail(v, "number out of range: the default of size '" + n.name + "' must be below 2^31");
                item.value = v.ival;
                take();
            }
            s.sizes.push_back(item);
        } while (accept(Tok::Comma));
    }

    std::optional<DType> parse_dtype() {
        Token t = expect(Tok::Ident, "(a dtype) after ':'");
        auto d = dtype_from_name(t.text);
        if (!d) fail(t, "unknown dtype '" + t.text + "'; expected one of " + kDtypeList);
        return d;
    }

    void parse_input(Stmt &s) {
        s.kind = Stmt::Input;
        s.input = expect_name("(the input's name) after 'input'");
        if (peek().kind == Tok::LBracket) {
            take();
            s.has_dims = true;
            if (peek().kind != Tok::RBracket) {
                do s.dims.push_back(parse_expr(0));
                while (accept(Tok::Comma));
            }
            expect(Tok::RBracket, "to close the dimensions of '" + s.input.name + "'");
        }
        if (accept(Tok::Colon)) s.dtype = parse_dtype();
    }

    void parse_output(Stmt &s) {
        s.kind = Stmt::Output;
        do s.names.push_back(expect_name("(a tensor name) in 'output'"));
        while (accept(Tok::Comma));
        if (accept(Tok::Colon)) s.dtype = parse_dtype();
    }

    Lhs parse_lhs() {
        Token name = take();  // caller checked Ident
        Lhs l;
        l.name = name.text;
        l.loc = name.loc;
        if (peek().kind != Tok::LBracket) return l;
        take();
        l.has_brackets = true;
        if (peek().kind != Tok::RBracket) {
            do {
                NameRef v = expect_name("(an index variable) on the left-hand side of '" + l.name + "'");
                LhsVar lv{v.name, v.loc, nullptr};
                if (accept(Tok::Colon)) lv.extent = parse_expr(0);
                l.vars.push_back(std::move(lv));
            } while (accept(Tok::Comma));
        }
        expect(Tok::RBracket, "to close the index variables of '" + l.name + "'");
        return l;
    }

    void parse_def(Stmt &s) {
        s.kind = Stmt::Def;
        const Token &after = peek(1);
        if (after.kind != Tok::Assign && after.kind != Tok::LBracket)
            fail(after, "expected '=' or '[' after " + show(peek()) + " (a definition 'NAME[...] = expr'), found " +
                            show(after));
        s.lhs.push_back(parse_lhs());
        if (s.lhs[0].has_brackets && peek().kind == Tok::Comma) {
            take();
            if (peek().kind != Tok::Ident)
                fail(peek(), "expected the name of the top-k index tensor after ',', found " + show(peek()));
            s.lhs.push_back(parse_lhs());
            if (!s.lhs[1].has_brackets)
                fail(peek(), "expected '[' after '" + s.lhs[1].name + "': both top-k tensors need index lists");
        }
        expect(Tok::Assign, "after the left-hand side");
        s.rhs = parse_expr(0);
    }

    // ---- Expressions (precedence from low to high: or, and, not, comparison, + -, * / %, unary -)
    AstPtr node(AstKind k, const Token &t) {
        auto n = std::make_unique<AstNode>();
        n->kind = k;
        n->loc = t.loc;
        return n;
    }

    void enter(int level) {
        if (level > kMaxNesting) fail(peek(), "expression nested too deeply (more than 256 levels)");
    }

    AstPtr binary(const Token &op, AstPtr a, AstPtr b) {
        int d = 1 + std::max(a->depth, b->depth);
        if (d > kMaxNesting) fail(op, "expression nested too deeply (more than 256 levels)");
        AstPtr n = node(AstKind::Binary, op);
        n->op = op.kind;
        n->depth = d;
        n->args.push_back(std::move(a));
        n->args.push_back(std::move(b));
        return n;
    }

    AstPtr unary(AstKind k, const Token &op, AstPtr a) {
        int d = 1 + a->depth;
        if (d > kMaxNesting) fail(op, "expression nested too deeply (more than 256 levels)");
        AstPtr n = node(k, op);
        n->depth = d;
        n->args.push_back(std::move(a));
        return n;
    }

    AstPtr parse_expr(int level) { return parse_or(level + 1); }

    AstPtr parse_or(int level) {
        enter(level);
        AstPtr a = parse_and(level);
        while (peek().kind == Tok::KwOr) {
            Token op = take();
            a = binary(op, std::move(a), parse_and(level));
        }
        return a;
    }

    AstPtr parse_and(int level) {
        AstPtr a = parse_not(level);
        while (peek().kind == Tok::KwAnd) {
            Token op = take();
            a = binary(op, std::move(a), parse_not(level));
        }
        return a;
    }

    AstPtr parse_not(int level) {
        if (peek().kind == Tok::KwNot) {
            Token op = take();
            enter(level + 1);
            return unary(AstKind::Not, op, parse_not(level + 1));
        }
        return parse_cmp(level);
    }

    static bool is_cmp(Tok k) {
        return k == Tok::Lt || k == Tok::Le || k == Tok::Gt || k == Tok::Ge || k == Tok::EqEq || k == Tok::Ne;
    }

    AstPtr parse_cmp(int level) {
        AstPtr a = parse_add(level);
        if (is_cmp(peek().kind)) {
            Token op = take();
            a = binary(op, std::move(a), parse_add(level));
            if (is_cmp(peek().kind))
                fail(peek(), "comparisons cannot be chained; combine them with 'and'");
        }
        return a;
    }

    AstPtr parse_add(int level) {
        AstPtr a = parse_mul(level);
        while (peek().kind == Tok::Plus || peek().kind == Tok::Minus) {
            Token op = take();
            a = binary(op, std::move(a), parse_mul(level));
        }
        return a;
    }

    AstPtr parse_mul(int level) {
        AstPtr a = parse_unary(level);
        while (peek().kind == Tok::Star || peek().kind == Tok::Slash || peek().kind == Tok::Percent) {
            Token op = take();
            a = binary(op, std::move(a), parse_unary(level));
        }
        return a;
    }

    AstPtr parse_unary(int level) {
        if (peek().kind == Tok::Minus) {
            Token op = take();
            enter(level + 1);
            return unary(AstKind::Neg, op, parse_unary(level + 1));
        }
        return parse_primary(level);
    }

    AstPtr parse_primary(int level) {
        const Token &t = peek();
        switch (t.kind) {
        case Tok::Int: {
            AstPtr n = node(AstKind::Int, t);
            n->ival = t.ival;
            take();
            return n;
        }
        case Tok::Real: {
            AstPtr n = node(AstKind::Real, t);
            n->rval = t.rval;
            take();
            return n;
        }
        case Tok::LParen: {
            Token open = take();
            AstPtr e = parse_expr(level);
            if (peek().kind != Tok::RParen)
                fail(peek(), "expected ')' to close the '(' at line " + std::to_string(open.loc.line) + ", column " +
                                 std::to_string(open.loc.col) + ", found " + show(peek()));
            take();
            return e;
        }
        case Tok::Ident: {
            Token name = take();
            if (peek().kind == Tok::LBracket) return parse_load(std::move(name), level);
            if (peek().kind == Tok::LParen) return parse_call(std::move(name), level);
            AstPtr n = node(AstKind::Name, name);
            n->name = name.text;
            return n;
        }
        default:
            fail(t, "expected an expression, found " + show(t));
        }
    }

    // Appends an argument and keeps `depth` = 1 + the deepest child.
    void add_child(AstNode &n, AstPtr c, const Token &at) {
        if (c->depth + 1 > kMaxNesting) fail(at, "expression nested too deeply (more than 256 levels)");
        n.depth = std::max(n.depth, c->depth + 1);
        n.args.push_back(std::move(c));
    }

    AstPtr parse_load(Token name, int level) {
        AstPtr n = node(AstKind::Load, name);
        n->name = name.text;
        take();  // [
        if (peek().kind != Tok::RBracket) {
            do add_child(*n, parse_expr(level), name);
            while (accept(Tok::Comma));
        }
        if (peek().kind != Tok::RBracket)
            fail(peek(), "expected ']' or ',' in the indices of '" + name.text + "', found " + show(peek()));
        take();
        return n;
    }

    AstPtr parse_call(Token name, int level) {
        AstPtr n = node(AstKind::Call, name);
        n->name = name.text;
        take();  // (
        if (peek().kind != Tok::RParen) {
            for (;;) {
                add_child(*n, parse_expr(level), name);
                if (accept(Tok::Comma)) continue;
                if (peek().kind == Tok::Colon) {
                    take();
                    n->has_colon = true;
                    AstPtr body = parse_expr(level);
                    if (body->depth + 1 > kMaxNesting) fail(name, "expression nested too deeply (more than 256 levels)");
                    n->depth = std::max(n->depth, body->depth + 1);
                    n->body = std::move(body);
                }
                break;
            }
        }
        if (peek().kind != Tok::RParen)
            fail(peek(), std::string("expected ") + (n->has_colon ? "')'" : "',', ':' or ')'") + " in the call of '" +
                             name.text + "', found " + show(peek()));
        take();
        return n;
    }

    Lexer lex_;
    std::deque<Token> buf_;
};

}  // namespace

ParsedSpec parse_statements(const std::string &source) { return Parser(source).parse_file(); }

}  // namespace rf::spec
