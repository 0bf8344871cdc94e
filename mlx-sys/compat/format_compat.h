// Hearth's stand-in for the few `std::format("... {} ...", args...)` calls in
// mlx-c's private/io.h: libstdc++ 12 (Debian 12's GCC) has no <format>.
// Supports only plain `{}` placeholders, which is all those calls use.
#ifndef HEARTH_FORMAT_COMPAT_H
#define HEARTH_FORMAT_COMPAT_H

#include <sstream>
#include <string>

namespace hearth_compat {

inline void format_into(std::ostringstream& out, const char* fmt) {
  out << fmt;
}

template <typename T, typename... Rest>
void format_into(std::ostringstream& out, const char* fmt, const T& value,
                 const Rest&... rest) {
  for (; *fmt; ++fmt) {
    if (fmt[0] == '{' && fmt[1] == '}') {
      out << value;
      format_into(out, fmt + 2, rest...);
      return;
    }
    out << *fmt;
  }
}

template <typename... Args>
std::string format(const char* fmt, const Args&... args) {
  std::ostringstream out;
  format_into(out, fmt, args...);
  return out.str();
}

}  // namespace hearth_compat

#endif
