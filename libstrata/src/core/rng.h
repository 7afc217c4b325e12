// rng.h — the sampler's counter-based uniform draw (strata_random_uniform).
//
// Header-only so the C entry point and every backend's sampler compute the
// same bits: u depends only on (seed, position), never on slot or step.
#pragma once

#include <cstdint>

namespace strata {

inline uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A float in [0, 1) with 24 random bits (exactly representable).
inline float random_uniform(uint64_t seed, int64_t position) {
    uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(position)));
    return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

}  // namespace strata
