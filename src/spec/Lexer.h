/** \file Lexer.h
 * Splits spec text into tokens on demand, tracking 1-based line/column positions and bracket depth
 * (newlines inside () or [] are continuations, so they produce no Newline token).
 */
#pragma once

#include <cstdint>
#include <string>

#include "support/Error.h"

namespace rf::spec {

enum class Tok {
    Ident, Int, Real, Newline, End,
    LParen, RParen, LBracket, RBracket, Comma, Colon, Assign,
    Plus, Minus, Star, Slash, Percent,
    Lt, Le, Gt, Ge, EqEq, Ne,
    KwSize, KwInput, KwOutput, KwAnd, KwOr, KwNot,
};

/** How a token kind is spelled in messages ("'('", "end of line", "a name"). */
const char *tok_desc(Tok t);

struct Token {
    Tok kind = Tok::End;
    std::string text;  // the token as written (identifiers, numbers, operators)
    SourceLoc loc;
    int64_t ival = 0;  // Int
    double rval = 0;   // Real (also `inf`)
};

class Lexer {
public:
    /** `src` must outlive the lexer. Throws UserError when it is larger than kMaxSourceBytes. */
    explicit Lexer(const std::string &src);
    /** The next token; after the end, End forever. Throws UserError on a bad character or number. */
    Token next();

private:
    void advance(size_t n);
    Token lex_number();
    Token make(Tok k, size_t len);

    const std::string &src_;
    size_t pos_ = 0;
    int line_ = 1;
    int col_ = 1;
    int64_t depth_ = 0;  // open ( and [ : newlines inside are continuations
    bool last_was_newline_ = true;  // collapse blank lines into one Newline token
};

}  // namespace rf::spec
