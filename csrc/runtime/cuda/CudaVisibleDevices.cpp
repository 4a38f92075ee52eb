#include <csrc/runtime/cuda/CudaVisibleDevices.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <string_view>

namespace torch_accel {

namespace {

// The number of GPUs torch.cuda assumes may exist when CUDA_VISIBLE_DEVICES is unset.
constexpr int64_t kMaxUnsetOrdinals = 64;

std::vector<std::string_view> splitOnCommas(std::string_view value) {
  std::vector<std::string_view> entries;
  while (true) {
    const auto comma = value.find(',');
    entries.push_back(value.substr(0, comma));
    if (comma == std::string_view::npos) {
      return entries;
    }
    value.remove_prefix(comma + 1);
  }
}

bool isSpace(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

// An ordinal entry read like strtoul: whitespace around it ignored, an
// optional sign, then the leading digits. nullopt when there are no digits
// (torch.cuda reads "" as -1 and fails on a lone sign; both end the list
// here) or the value is negative. Values too large for any machine saturate.
std::optional<int64_t> leadingOrdinal(std::string_view entry) {
  while (!entry.empty() && isSpace(entry.front())) {
    entry.remove_prefix(1);
  }
  bool negative = false;
  if (!entry.empty() && (entry.front() == '+' || entry.front() == '-')) {
    negative = entry.front() == '-';
    entry.remove_prefix(1);
  }
  if (entry.empty() || !isDigit(entry.front())) {
    return std::nullopt;
  }
  int64_t value = 0;
  constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max() / 10 - 10;
  for (; !entry.empty() && isDigit(entry.front()); entry.remove_prefix(1)) {
    value = std::min(value * 10 + (entry.front() - '0'), kSaturated);
  }
  if (negative && value != 0) {
    return std::nullopt;
  }
  return value;
}

bool contains(const std::vector<int64_t>& values, int64_t value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

std::vector<std::string> uuidsWithPrefix(std::string_view value, std::string_view prefix) {
  std::vector<std::string> uuids;
  for (const std::string_view entry : splitOnCommas(value)) {
    if (std::find(uuids.begin(), uuids.end(), entry) != uuids.end()) {
      return {}; // a repeated device: none is visible
    }
    if (entry.substr(0, prefix.size()) != prefix) {
      break;
    }
    uuids.emplace_back(entry);
  }
  return uuids;
}

// The index of the one UUID that starts with `candidate`; -1 for none or several.
int64_t uniqueUuidWithPrefix(const std::string& candidate, const std::vector<std::string>& uuids) {
  int64_t match = -1;
  for (size_t index = 0; index < uuids.size(); ++index) {
    if (uuids[index].compare(0, candidate.size(), candidate) != 0) {
      continue;
    }
    if (match != -1) {
      return -1; // ambiguous
    }
    match = static_cast<int64_t>(index);
  }
  return match;
}

} // namespace

CudaVisibleDevices parseCudaVisibleDevices(const char* value) {
  CudaVisibleDevices visible;
  if (value == nullptr) {
    for (int64_t ordinal = 0; ordinal < kMaxUnsetOrdinals; ++ordinal) {
      visible.ordinals.push_back(ordinal);
    }
    return visible;
  }
  const std::string_view list(value);
  for (const auto& [prefix, kind] : {
           std::pair<std::string_view, CudaVisibleDevices::Kind>{"GPU-", CudaVisibleDevices::Kind::GpuUuids},
           std::pair<std::string_view, CudaVisibleDevices::Kind>{"MIG-", CudaVisibleDevices::Kind::MigUuids},
       }) {
    if (list.substr(0, prefix.size()) == prefix) {
      visible.kind = kind;
      visible.uuids = uuidsWithPrefix(list, prefix);
      return visible;
    }
  }
  for (const std::string_view entry : splitOnCommas(list)) {
    const std::optional<int64_t> ordinal = leadingOrdinal(entry);
    if (ordinal.has_value() && contains(visible.ordinals, *ordinal)) {
      visible.ordinals.clear(); // a repeated device: none is visible
      return visible;
    }
    if (!ordinal.has_value()) {
      break;
    }
    visible.ordinals.push_back(*ordinal);
  }
  return visible;
}

std::vector<int64_t>
cudaUuidsToOrdinals(const std::vector<std::string>& candidates, const std::vector<std::string>& uuids) {
  std::vector<int64_t> ordinals;
  for (const std::string& candidate : candidates) {
    const int64_t ordinal = uniqueUuidWithPrefix(candidate, uuids);
    if (ordinal < 0) {
      break;
    }
    if (contains(ordinals, ordinal)) {
      return {}; // two entries name the same GPU: none is visible
    }
    ordinals.push_back(ordinal);
  }
  return ordinals;
}

int64_t cudaVisibleOrdinalCount(const std::vector<int64_t>& ordinals, int64_t physical) {
  const auto missing =
      std::find_if(ordinals.begin(), ordinals.end(), [physical](int64_t ordinal) { return ordinal >= physical; });
  return missing - ordinals.begin();
}

} // namespace torch_accel
