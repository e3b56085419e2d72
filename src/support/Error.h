/** \file Error.h
 * The two kinds of failure redfuse distinguishes: a user error (a bad spec or bad arguments, reported
 * with a source location and exit status 1) and an internal error (a compiler bug, never the user's
 * fault, reported as such).
 */
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace rf {

/** A position in a spec file: 1-based line and column; line 0 means "no location". */
struct SourceLoc {
    int line = 0;
    int col = 0;
    bool valid() const { return line > 0; }
};

/** Thrown for every problem in the user's spec or request. The driver prints it as
 *  `FILE:LINE:COL: error: MESSAGE`, then the source line and a caret. */
class UserError : public std::runtime_error {
public:
    UserError(SourceLoc loc, const std::string &msg) : std::runtime_error(msg), loc_(loc) {}
    SourceLoc loc() const { return loc_; }

private:
    SourceLoc loc_;
};

/** A UserError about the buffers given to a call (a Kernel, the Python layer): the kind of mismatch
 *  lets a binding raise the matching exception (TypeError for dtypes, ValueError for shapes). The
 *  message names the argument, and for shapes the dimension and the size symbol. */
class ArgumentError : public UserError {
public:
    enum class Kind : uint8_t { Count, Name, Dtype, Shape, Device };
    ArgumentError(Kind kind, const std::string &msg) : UserError({}, msg), kind_(kind) {}
    Kind kind() const { return kind_; }

private:
    Kind kind_;
};

/** Thrown when redfuse itself is wrong (a failed invariant, a derivation that does not re-check). */
class InternalError : public std::logic_error {
public:
    explicit InternalError(const std::string &msg) : std::logic_error(msg) {}
};

[[noreturn]] void user_error(SourceLoc loc, const std::string &msg);
[[noreturn]] void internal_error(const std::string &msg, const char *file, int line);

/** Formats a UserError for the terminal: `file:line:col: error: msg`, the source line, a caret.
 *  Non-printable bytes in the echoed line are replaced so garbage input cannot corrupt a terminal. */
std::string format_user_error(const UserError &e, const std::string &file, const std::string &source);

}  // namespace rf

/** internal_assert(cond) << "message"; throws rf::InternalError when cond is false. */
#define RF_INTERNAL_ASSERT(cond)                                                                    \
    if (cond) {                                                                                     \
    } else                                                                                          \
        ::rf::detail::InternalErrorBuilder(__FILE__, __LINE__, #cond)

namespace rf::detail {
class InternalErrorBuilder {
public:
    InternalErrorBuilder(const char *file, int line, const char *cond) : file_(file), line_(line) {
        os_ << "internal_assert(" << cond << ") failed: ";
    }
    template <typename T>
    InternalErrorBuilder &operator<<(const T &v) {
        os_ << v;
        return *this;
    }
    ~InternalErrorBuilder() noexcept(false) { internal_error(os_.str(), file_, line_); }

private:
    std::ostringstream os_;
    const char *file_;
    int line_;
};
}  // namespace rf::detail
