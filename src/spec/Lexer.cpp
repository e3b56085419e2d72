/** \file Lexer.cpp
 * The tokenizer of the spec language; it rejects every byte that cannot start a token, so binary
 * garbage fails at its first bad byte with "unexpected character".
 */
#include "spec/Lexer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "spec/Limits.h"

namespace rf::spec {

const char *tok_desc(Tok t) {
    switch (t) {
    case Tok::Ident: return "a name";
    case Tok::Int: return "an integer";
    case Tok::Real: return "a number";
    case Tok::Newline: return "end of line";
    case Tok::End: return "end of file";
    case Tok::LParen: return "'('";
    case Tok::RParen: return "')'";
    case Tok::LBracket: return "'['";
    case Tok::RBracket: return "']'";
    case Tok::Comma: return "','";
    case Tok::Colon: return "':'";
    case Tok::Assign: return "'='";
    case Tok::Plus: return "'+'";
    case Tok::Minus: return "'-'";
    case Tok::Star: return "'*'";
    case Tok::Slash: return "'/'";
    case Tok::Percent: return "'%'";
    case Tok::Lt: return "'<'";
    case Tok::Le: return "'<='";
    case Tok::Gt: return "'>'";
    case Tok::Ge: return "'>='";
    case Tok::EqEq: return "'=='";
    case Tok::Ne: return "'!='";
    case Tok::KwSize: return "'size'";
    case Tok::KwInput: return "'input'";
    case Tok::KwOutput: return "'output'";
    case Tok::KwAnd: return "'and'";
    case Tok::KwOr: return "'or'";
    case Tok::KwNot: return "'not'";
    }
    return "?";
}

namespace {
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

std::string describe_byte(unsigned char c) {
    if (c >= 0x21 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%02x", c);
    return buf;
}
}  // namespace

Lexer::Lexer(const std::string &src) : src_(src) {
    if (src.size() > kMaxSourceBytes)
        throw UserError({1, 1}, "spec is too large (" + std::to_string(src.size()) + " bytes; the limit is 1 MiB)");
}

void Lexer::advance(size_t n) {
    // Only called on bytes of a single line (tokens never span newlines).
    pos_ += n;
    col_ += static_cast<int>(n);
}

Token Lexer::make(Tok k, size_t len) {
    Token t;
    t.kind = k;
    t.loc = {line_, col_};
    t.text = src_.substr(pos_, len);
    advance(len);
    last_was_newline_ = false;
    return t;
}

Token Lexer::next() {
    for (;;) {
        if (pos_ >= src_.size()) {
            Token t;
            t.kind = Tok::End;
            t.loc = {line_, col_};
            return t;
        }
        char c = src_[pos_];
        if (c == ' ' || c == '\t' || c == '\r') {
            advance(1);
            continue;
        }
        if (c == '#') {
            // Comments may hold any text (UTF-8 included) except NUL, which signals binary input.
            while (pos_ < src_.size() && src_[pos_] != '\n') {
                if (src_[pos_] == '\0') throw UserError({line_, col_}, "unexpected character 0x00 (NUL)");
                advance(1);
            }
            continue;
        }
        if (c == '\n') {
            SourceLoc loc{line_, col_};
            pos_++;
            line_++;
            col_ = 1;
            if (depth_ > 0 || last_was_newline_) continue;  // continuation or blank line
            last_was_newline_ = true;
            Token t;
            t.kind = Tok::Newline;
            t.loc = loc;
            return t;
        }
        if (is_ident_start(c)) {
            size_t n = 1;
            while (pos_ + n < src_.size() && is_ident_char(src_[pos_ + n])) n++;
            std::string word = src_.substr(pos_, n);
            Tok k = Tok::Ident;
            if (word == "size") k = Tok::KwSize;
            else if (word == "input") k = Tok::KwInput;
            else if (word == "output") k = Tok::KwOutput;
            else if (word == "and") k = Tok::KwAnd;
            else if (word == "or") k = Tok::KwOr;
            else if (word == "not") k = Tok::KwNot;
            else if (word == "inf") {
                Token t = make(Tok::Real, n);
                t.rval = INFINITY;
                return t;
            }
            return make(k, n);
        }
        if (is_digit(c) || (c == '.' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]))) return lex_number();
        char d = pos_ + 1 < src_.size() ? src_[pos_ + 1] : '\0';
        switch (c) {
        case '(': depth_++; return make(Tok::LParen, 1);
        case '[': depth_++; return make(Tok::LBracket, 1);
        case ')': if (depth_ > 0) depth_--; return make(Tok::RParen, 1);
        case ']': if (depth_ > 0) depth_--; return make(Tok::RBracket, 1);
        case ',': return make(Tok::Comma, 1);
        case ':': return make(Tok::Colon, 1);
        case '+': return make(Tok::Plus, 1);
        case '-': return make(Tok::Minus, 1);
        case '*': return make(Tok::Star, 1);
        case '/': return make(Tok::Slash, 1);
        case '%': return make(Tok::Percent, 1);
        case '<': return d == '=' ? make(Tok::Le, 2) : make(Tok::Lt, 1);
        case '>': return d == '=' ? make(Tok::Ge, 2) : make(Tok::Gt, 1);
        case '=': return d == '=' ? make(Tok::EqEq, 2) : make(Tok::Assign, 1);
        case '!':
            if (d == '=') return make(Tok::Ne, 2);
            throw UserError({line_, col_}, "unexpected character '!' (write 'not' for negation, '!=' for inequality)");
        default: break;
        }
        unsigned char u = static_cast<unsigned char>(c);
        std::string what = describe_byte(u);
        if (u == 0) what += " (NUL)";
        else if (u >= 0x80) what += " (non-ASCII; only comments may contain it)";
        throw UserError({line_, col_}, "unexpected character " + what);
    }
}

Token Lexer::lex_number() {
    size_t start = pos_, n = 0;
    const std::string &s = src_;
    auto at = [&](size_t i) { return start + i < s.size() ? s[start + i] : '\0'; };
    bool is_real = false;
    while (is_digit(at(n))) n++;
    size_t int_digits = n;
    if (at(n) == '.') {
        is_real = true;
        n++;
        while (is_digit(at(n))) n++;
    }
    int64_t exponent = 0;
    if (at(n) == 'e' || at(n) == 'E') {
        size_t m = n + 1;
        bool neg = false;
        if (at(m) == '+' || at(m) == '-') neg = at(m++) == '-';
        if (!is_digit(at(m))) {
            // Point at the whole malformed literal.
            while (is_ident_char(at(m))) m++;
            throw UserError({line_, col_}, "malformed number '" + s.substr(start, m) + "' (an exponent needs digits)");
        }
        while (is_digit(at(m))) {
            if (exponent < 100000000) exponent = exponent * 10 + (at(m) - '0');
            m++;
        }
        if (neg) exponent = -exponent;
        is_real = true;
        n = m;
    }
    if (is_ident_char(at(n)))
        throw UserError({line_, col_}, "malformed number: '" + s.substr(start, n + 1) + "' (a letter follows the digits)");
    Token t;
    t.loc = {line_, col_};
    t.text = s.substr(start, n);
    if (!is_real) {
        int64_t v = 0;
        for (size_t i = 0; i < n; i++) {
            v = v * 10 + (s[start + i] - '0');
            if (v > kMaxIntLiteral)
                throw UserError(t.loc, "number out of range: integer literals must be at most 2^53 (write " +
                                           std::string("a real such as 1e20 for larger values)"));
        }
        t.kind = Tok::Int;
        t.ival = v;
    } else {
        double v = 0;
        auto res = std::from_chars(s.data() + start, s.data() + start + n, v);
        if (res.ec == std::errc::result_out_of_range) {
            // Decide overflow vs underflow from the decimal magnitude, independent of locale:
            // the position of the first significant digit relative to the point, plus the exponent.
            int64_t lead = 0;
            size_t i = 0;
            while (i < int_digits && s[start + i] == '0') i++;
            if (i < int_digits) lead = static_cast<int64_t>(int_digits - i);  // digits before the point
            else {
                size_t j = int_digits + 1;  // skip '.'
                int64_t zeros = 0;
                while (j < n && s[start + j] == '0') j++, zeros++;
                lead = -zeros;
            }
            if (lead + exponent > 0) throw UserError(t.loc, "number out of range: '" + t.text + "' overflows a double");
            v = 0.0;  // underflow: the nearest double is 0
        } else if (res.ec != std::errc() || res.ptr != s.data() + start + n) {
            throw UserError(t.loc, "malformed number '" + t.text + "'");
        }
        if (std::isinf(v)) throw UserError(t.loc, "number out of range: '" + t.text + "' overflows a double");
        t.kind = Tok::Real;
        t.rval = v;
    }
    advance(n);
    last_was_newline_ = false;
    return t;
}

}  // namespace rf::spec
