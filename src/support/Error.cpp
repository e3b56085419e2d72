/** \file Error.cpp
 * Throwing and formatting the user and internal errors of Error.h.
 */
#include "support/Error.h"

namespace rf {

void user_error(SourceLoc loc, const std::string &msg) { throw UserError(loc, msg); }

void internal_error(const std::string &msg, const char *file, int line) {
    std::ostringstream os;
    os << msg << " (at " << file << ":" << line << ")";
    throw InternalError(os.str());
}

static std::string sanitize_line(const std::string &line, size_t max_len) {
    std::string out;
    for (size_t i = 0; i < line.size() && out.size() < max_len; i++) {
        unsigned char c = static_cast<unsigned char>(line[i]);
        out += (c == '\t' || (c >= 0x20 && c < 0x7f)) ? static_cast<char>(c) : '?';
    }
    if (line.size() > max_len) out += "...";
    return out;
}

std::string format_user_error(const UserError &e, const std::string &file, const std::string &source) {
    std::ostringstream os;
    SourceLoc loc = e.loc();
    if (!loc.valid()) {
        os << file << ": error: " << e.what() << "\n";
        return os.str();
    }
    os << file << ":" << loc.line << ":" << loc.col << ": error: " << e.what() << "\n";
    // Find the line in the source text.
    size_t start = 0;
    for (int l = 1; l < loc.line && start != std::string::npos; l++) {
        start = source.find('\n', start);
        if (start != std::string::npos) start++;
    }
    if (start == std::string::npos || start > source.size()) return os.str();
    size_t end = source.find('\n', start);
    std::string line = source.substr(start, end == std::string::npos ? std::string::npos : end - start);
    // Very long lines: show a window around the column so the caret stays meaningful.
    const size_t window = 160;
    size_t col = static_cast<size_t>(loc.col > 0 ? loc.col - 1 : 0);
    size_t from = 0;
    if (line.size() > window && col > window / 2) from = std::min(col - window / 2, line.size());
    std::string shown = sanitize_line(line.substr(from), window);
    os << "  " << (from ? "..." : "") << shown << "\n";
    size_t caret = col - from + (from ? 3 : 0);
    os << "  " << std::string(std::min(caret, shown.size() + 3), ' ') << "^\n";
    return os.str();
}

}  // namespace rf
