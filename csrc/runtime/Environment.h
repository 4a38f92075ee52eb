#pragma once

// torch_accel's configuration from TORCH_ACCEL_* environment variables.
//
// A value is read once, where the setting is first needed, and a malformed
// one is reported there as a ValueError that names the variable, the
// accepted values and what was found: never guessed, clamped or wrapped
// around.

#include <cstdint>
#include <optional>

namespace torch_accel {

// The integer in environment variable `name`, or nullopt when it is unset
// or empty. The value must be decimal digits (with a leading '-' for a
// negative number) and lie in [min, max]; text, a fraction, a sign '+',
// spaces, a value out of range or beyond int64_t raise ValueError.
std::optional<int64_t> integerFromEnvironment(const char* name, int64_t min, int64_t max);

} // namespace torch_accel
