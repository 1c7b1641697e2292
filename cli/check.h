#pragma once
#include <string>

namespace segred::cli {
// Runs the verification matrix on `device` ("cpu", "cuda" or "all"); returns the exit status.
int run_check(const std::string& device, bool quiet);  // quiet: print only wrong rows
}
