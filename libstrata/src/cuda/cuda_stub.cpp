// cuda_stub.cpp — stands in for the CUDA backend when libstrata is built
// without nvcc (or with CUDA=0): no devices, and a clear refusal.
#include "core/backend.h"
#include "core/errors.h"

namespace strata {

std::unique_ptr<Backend> make_cuda_backend(int32_t) {
    fail(STRATA_ERR_UNSUPPORTED, "libstrata was built without the CUDA backend (nvcc not found at build time)");
}

int32_t cuda_device_count() noexcept { return 0; }

const char* cuda_build_info() noexcept { return "no cuda"; }

}  // namespace strata
