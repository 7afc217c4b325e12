// export.h — marks the C entry points as the library's only exported symbols.
//
// The library is compiled with -fvisibility=hidden; definitions of strata_*
// functions carry this attribute, and libstrata/strata.map keeps everything
// else local.
#pragma once

#define STRATA_EXPORT extern "C" __attribute__((visibility("default")))
