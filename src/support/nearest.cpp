#include "kiln/support/nearest.h"

#include <algorithm>

namespace kiln {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> nearestNames(const std::string& given, const std::vector<std::string>& candidates, size_t count) {
  std::vector<std::pair<size_t, size_t>> ranked;  // (distance, position among the candidates)
  for (size_t i = 0; i < candidates.size(); ++i) ranked.emplace_back(editDistance(given, candidates[i]), i);
  std::stable_sort(ranked.begin(), ranked.end());
  std::vector<std::string> names;
  for (size_t i = 0; i < ranked.size() && i < count; ++i) names.push_back(candidates[ranked[i].second]);
  return names;
}

}  // namespace kiln
