// env_switch.h — how libstrata reads its environment switches and counts (each declared, with its
// meaning and default, in strata/env.py; read at each call, since tests flip them within a process).
//
// Validation at the boundary (docs/design.md): unset or empty gives the default, the accepted
// spellings their values, and anything else an error naming the variable and what it takes — a typo
// must never silently select the other kernel of an A/B.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/errors.h"

namespace strata {

// A 0 / 1 switch: "1" true, "0" false, unset or empty `dflt`; `expected` words the error's choices.
inline bool env_switch(const char* name, bool dflt, const char* expected = "0 or 1") {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return dflt;
    if (std::strcmp(v, "1") == 0) return true;
    if (std::strcmp(v, "0") == 0) return false;
    invalid(std::string(name) + "=" + v + ": expected " + expected);
}

// One of `values`, spelled exactly, as its index; unset or empty -1.
template <size_t N>
inline int env_choice(const char* name, const char* const (&values)[N], const char* expected) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return -1;
    for (size_t i = 0; i < N; ++i)
        if (std::strcmp(v, values[i]) == 0) return (int)i;
    invalid(std::string(name) + "=" + v + ": expected " + expected);
}

// A whole number in [low, high] as strtoll reads it (leading blanks and a sign allowed, nothing after
// the digits), unset or empty `dflt`.
inline int64_t env_whole(const char* name, int64_t dflt, int64_t low, int64_t high, const char* expected) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return dflt;
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE || n < low || n > high)
        invalid(std::string(name) + "=" + v + ": expected " + expected);
    return n;
}

}  // namespace strata
