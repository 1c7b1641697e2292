// segred/error.h: the one exception family segred throws.
//
// Every message names the argument and the rule it broke, e.g.
//   "segment_reduce: offsets[row 3]: must be non-decreasing (offsets[4] = 7 < offsets[3] = 9)".
// Bad values and shapes derive from std::invalid_argument (Python: ValueError),
// unsupported dtypes/array kinds too (Python: TypeError, told apart by kind()),
// device failures from std::runtime_error (Python: RuntimeError).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace segred {

enum class ErrorKind { Value, Type, Device };

// Common base so callers can catch every segred failure with one handler.
class Error {
 public:
  virtual ~Error() = default;
  virtual ErrorKind kind() const noexcept = 0;
  virtual const char* message() const noexcept = 0;
};

// A bad value or shape (Python ValueError).
class ValueError : public std::invalid_argument, public Error {
 public:
  explicit ValueError(const std::string& m) : std::invalid_argument(m) {}
  ErrorKind kind() const noexcept override { return ErrorKind::Value; }
  const char* message() const noexcept override { return what(); }
};

// An unsupported dtype or array kind (Python TypeError).
class TypeError : public std::invalid_argument, public Error {
 public:
  explicit TypeError(const std::string& m) : std::invalid_argument(m) {}
  ErrorKind kind() const noexcept override { return ErrorKind::Type; }
  const char* message() const noexcept override { return what(); }
};

// A device (CUDA runtime) failure (Python RuntimeError).
class DeviceError : public std::runtime_error, public Error {
 public:
  explicit DeviceError(const std::string& m) : std::runtime_error(m) {}
  ErrorKind kind() const noexcept override { return ErrorKind::Device; }
  const char* message() const noexcept override { return what(); }
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// SEGRED_CHECK(cond, ErrorType, parts...): throw ErrorType(concat(parts...)) unless cond.
#define SEGRED_CHECK(cond, ErrorType, ...)                              \
  do {                                                                  \
    if (!(cond)) throw ::segred::ErrorType(::segred::detail::cat(__VA_ARGS__)); \
  } while (0)

}  // namespace segred
