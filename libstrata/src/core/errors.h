// errors.h — how libstrata code reports failure internally.
//
// Internal code throws strata::Error; the C entry points in api/ catch it
// (and any other exception) and turn it into a status code plus the
// thread-local message returned by strata_last_error().
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "strata.h"

namespace strata {

class Error : public std::runtime_error {
public:
    Error(int32_t status, const std::string& message) : std::runtime_error(message), status_(status) {}
    int32_t status() const noexcept { return status_; }

private:
    int32_t status_;
};

[[noreturn]] inline void fail(int32_t status, const std::string& message) { throw Error(status, message); }
[[noreturn]] inline void invalid(const std::string& message) { throw Error(STRATA_ERR_INVALID_ARGUMENT, message); }

}  // namespace strata
