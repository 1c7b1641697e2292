#include "segred/plan.h"

#include <sstream>

namespace segred {

std::string Plan::to_string() const {
  std::ostringstream os;
  os << "Plan{path=" << path << ", index_bits=" << index_bits;
  if (grid[0] || block[0])
    os << ", grid=[" << grid[0] << "," << grid[1] << "," << grid[2] << "], block=[" << block[0] << "," << block[1]
       << "," << block[2] << "]";
  if (chunk) os << ", chunk=" << chunk;
  if (!variant.empty()) os << ", variant=" << variant;
  os << "}";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Plan& p) { return os << p.to_string(); }

}  // namespace segred
