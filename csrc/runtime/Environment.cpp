#include <csrc/runtime/Environment.h>

#include <c10/util/Exception.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace torch_accel {

std::optional<int64_t> integerFromEnvironment(const char* name, int64_t min, int64_t max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    return std::nullopt;
  }
  const char* end = text + std::strlen(text);
  int64_t value = 0;
  // std::from_chars reads decimal digits with an optional '-' only (no
  // spaces, no '+', no base prefix) and reports a value beyond int64_t
  // instead of wrapping it.
  const auto [stop, error] = std::from_chars(text, end, value);
  TORCH_CHECK_VALUE(
      error == std::errc() && stop == end && value >= min && value <= max,
      name,
      " must be an integer between ",
      min,
      " and ",
      max,
      ", got '",
      text,
      "'");
  return value;
}

} // namespace torch_accel
