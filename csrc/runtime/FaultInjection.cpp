#include <csrc/runtime/FaultInjection.h>

#include <c10/util/Exception.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>

namespace torch_accel {

namespace detail {
std::atomic<bool> copy_faults_armed{false};
} // namespace detail

void setCopyFaultsArmed(bool armed) noexcept {
  detail::copy_faults_armed.store(armed, std::memory_order_relaxed);
}

const char* faultKindName(FaultKind kind) noexcept {
  switch (kind) {
  case FaultKind::Allocation:
    return "allocation";
  case FaultKind::StreamEvent:
    return "stream_event";
  case FaultKind::Copy:
    return "copy";
  }
  return "unknown";
}

namespace {

std::optional<FaultKind> faultKindNamed(std::string_view name) {
  for (const auto kind : {FaultKind::Allocation, FaultKind::StreamEvent, FaultKind::Copy}) {
    if (name == faultKindName(kind)) {
      return kind;
    }
  }
  return std::nullopt;
}

// Splits `text` at each `separator`.
std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t stop = text.find(separator, start);
    parts.push_back(text.substr(start, stop == std::string_view::npos ? std::string_view::npos : stop - start));
    if (stop == std::string_view::npos) {
      return parts;
    }
    start = stop + 1;
  }
}

template <typename T> std::optional<T> number(std::string_view text) {
  T value{};
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || stop != text.data() + text.size() || text.empty()) {
    return std::nullopt;
  }
  return value;
}

} // namespace

std::vector<std::pair<FaultKind, FaultPlan>> faultPlansFromEnvironment(const char* name) {
  const char* text = std::getenv(name);
  std::vector<std::pair<FaultKind, FaultPlan>> plans;
  if (text == nullptr || *text == '\0') {
    return plans;
  }
  const auto fail = [&](std::string_view entry, const char* why) {
    TORCH_CHECK_VALUE(
        false,
        name,
        " must be entries KIND:KEY=VALUE[:KEY=VALUE...] separated by commas, with KIND allocation, stream_event or "
        "copy and KEY nth (an integer >= 1), probability (a number from 0 to 1) or seed (an integer >= 0), e.g. "
        "'allocation:nth=3,copy:probability=0.01:seed=7'; in '",
        text,
        "', the entry '",
        std::string(entry),
        "' ",
        why);
  };
  for (const std::string_view entry : split(text, ',')) {
    const auto fields = split(entry, ':');
    const auto kind = faultKindNamed(fields[0]);
    if (!kind) {
      fail(entry, "names no kind of fault");
    }
    for (const auto& [other, plan] : plans) {
      if (other == *kind) {
        fail(entry, "names a kind a second time");
      }
    }
    if (fields.size() < 2) {
      fail(entry, "has no KEY=VALUE");
    }
    FaultPlan plan;
    for (size_t i = 1; i < fields.size(); ++i) {
      const size_t equals = fields[i].find('=');
      const std::string_view key = fields[i].substr(0, equals);
      const std::string_view value =
          equals == std::string_view::npos ? std::string_view() : fields[i].substr(equals + 1);
      if (key == "nth") {
        const auto nth = number<uint64_t>(value);
        if (!nth || *nth == 0) {
          fail(entry, "has an nth that is not an integer >= 1");
        }
        plan.nth = *nth;
      } else if (key == "probability") {
        const auto probability = number<double>(value);
        if (!probability || !(*probability >= 0.0 && *probability <= 1.0)) {
          fail(entry, "has a probability that is not a number from 0 to 1");
        }
        plan.probability = *probability;
      } else if (key == "seed") {
        const auto seed = number<uint64_t>(value);
        if (!seed) {
          fail(entry, "has a seed that is not an integer >= 0");
        }
        plan.seed = *seed;
      } else {
        fail(entry, "has a key other than nth, probability and seed");
      }
    }
    plans.emplace_back(*kind, plan);
  }
  return plans;
}

} // namespace torch_accel
