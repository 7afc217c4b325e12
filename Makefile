# Makefile — builds libstrata (g++ always; the CUDA backend when nvcc is on
# PATH and CUDA is not 0), sets up the virtual environment, serves and tests.
#
#   make serve         .venv + libstrata + the default model, then `strata serve` on :8080
#   make test          the same set-up plus test dependencies, then the whole test suite
#   make test-gpu      the GPU tests (run on a machine with a CUDA device)
#   make lib           build/libstrata.so (CUDA backend if nvcc is found)
#   make lib CUDA=0    CPU backend only (cuda/cuda_stub.cpp stands in for CUDA)
#   make model         fetch the default model (SmolLM2-135M-Instruct Q4_1) into the model cache
#   make browser       Debian's chromium for the browser tests (apt-get, when missing and root)
#   make balancer      Debian's haproxy for the scale-out test (apt-get, when missing and root)
#   make clean         remove build/ (keeps .venv and the model cache)
#
# SERVE_ARGS / TEST_ARGS pass extra flags, e.g. make serve SERVE_ARGS="--port 9000".

# ---------------------------------------------------------------- settings

CXX      ?= g++
CUDA     ?= 1
NVCC     ?= $(shell command -v nvcc 2>/dev/null)

BUILD    := build
OBJ      := $(BUILD)/obj
SRC      := libstrata/src
INCLUDE  := libstrata/include
LIB      := $(BUILD)/libstrata.so
HEADER   := $(BUILD)/strata.h
MAPFILE  := libstrata/strata.map

# No -ffast-math, and no silent FMA contraction: kernels must keep the
# arithmetic order written in the source (batch invariance).
CXXFLAGS := -std=c++20 -O3 -fPIC -fvisibility=hidden -ffp-contract=off -fno-math-errno \
            -Wall -Wextra -I$(INCLUDE) -I$(SRC)
# The CPU kernels target one fixed ISA (never -march=native: build and serving
# machines differ). Contexts refuse CPUs without it at creation time.
CPU_ISA  := -march=x86-64-v3
LDFLAGS  := -shared -Wl,--version-script=$(MAPFILE) -Wl,--no-undefined -Wl,-z,defs
LDLIBS   := -lpthread

NVCCFLAGS := -O3 -std=c++17 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -I$(INCLUDE) -I$(SRC) $(EXTRA_NVCCFLAGS)
# sm_90 code and PTX for every kernel; the warpgroup MMA (wgmma) exists only in the
# architecture-specific sm_90a, so the one file that uses it is built for sm_90a alone
# (its launcher checks for an sm_90 device before it runs: cuda_int_wgmma.cu).
NVCC_ARCH       := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCC_ARCH_SM90A := -gencode arch=compute_90a,code=sm_90a

# ---------------------------------------------------------------- sources

# api/ is the C ABI boundary, cpu/ and cuda/ the two backends, core/ the
# headers all three share. Sources include each other by path from $(SRC).
CORE_SRCS := $(wildcard $(SRC)/api/*.cpp)
CPU_SRCS  := $(wildcard $(SRC)/cpu/*.cpp)
CU_SRCS   := $(wildcard $(SRC)/cuda/*.cu)

ifneq ($(and $(filter-out 0,$(CUDA)),$(NVCC),$(CU_SRCS)),)
  # cudart is linked statically so the library loads where no CUDA runtime is
  # installed (and then reports 0 devices). Never cuBLAS.
  CUDA_HOME ?= $(shell $(NVCC) --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$$ TOP=//p')
  BACKEND_OBJS := $(CU_SRCS:$(SRC)/%.cu=$(OBJ)/%.cu.o)
  LDLIBS += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -lcudart_static -ldl -lrt
  BUILD_KIND := cuda
else
  BACKEND_OBJS := $(OBJ)/cuda/cuda_stub.o
  BUILD_KIND := cpu-only
endif

CORE_OBJS := $(CORE_SRCS:$(SRC)/%.cpp=$(OBJ)/%.o)
CPU_OBJS  := $(CPU_SRCS:$(SRC)/%.cpp=$(OBJ)/%.o)
ALL_OBJS  := $(CORE_OBJS) $(CPU_OBJS) $(BACKEND_OBJS)

# Stamps that change (and force a rebuild) only when the configuration does.
COMPILE_STAMP := $(BUILD)/compile.flags
LINK_STAMP    := $(BUILD)/link.flags

# ---------------------------------------------------------------- targets

.PHONY: lib clean FORCE venv test-deps model serve test test-gpu browser balancer

lib: $(LIB) $(HEADER)

# The header ships beside the library: strata/_ffi.py reads its cdef region.
$(HEADER): $(INCLUDE)/strata.h
	@mkdir -p $(@D)
	cp $< $@

# Linked to a temporary name first: a failed link leaves the previous library.
$(LIB): $(ALL_OBJS) $(MAPFILE) $(LINK_STAMP)
	$(CXX) $(LDFLAGS) -o $@.tmp $(ALL_OBJS) $(LDLIBS)
	mv -f $@.tmp $@
	@echo "built $@ ($(BUILD_KIND))"

$(CORE_OBJS) $(OBJ)/cuda/cuda_stub.o: $(OBJ)/%.o: $(SRC)/%.cpp $(COMPILE_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@

$(CPU_OBJS): $(OBJ)/%.o: $(SRC)/%.cpp $(COMPILE_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(CPU_ISA) -MMD -MP -c $< -o $@

$(OBJ)/%.cu.o: $(SRC)/%.cu $(COMPILE_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

$(OBJ)/cuda/cuda_int_wgmma.cu.o: NVCC_ARCH := $(NVCC_ARCH_SM90A)

$(COMPILE_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(CXX) $(CXXFLAGS) $(CPU_ISA) | $(NVCC) $(NVCC_ARCH) $(NVCC_ARCH_SM90A) $(NVCCFLAGS)' | cmp -s - $@ || \
	  echo '$(CXX) $(CXXFLAGS) $(CPU_ISA) | $(NVCC) $(NVCC_ARCH) $(NVCC_ARCH_SM90A) $(NVCCFLAGS)' > $@

$(LINK_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(BUILD_KIND) $(LDFLAGS) $(LDLIBS)' | cmp -s - $@ || echo '$(BUILD_KIND) $(LDFLAGS) $(LDLIBS)' > $@

clean:
	rm -rf $(BUILD)

-include $(wildcard $(OBJ)/*/*.d)

# ---------------------------------------------------------------- set-up, serve, test

PYTHON   ?= python3
VENV     := .venv
VPY      := $(VENV)/bin/python
PIP      := $(VPY) -m pip install --quiet --disable-pip-version-check
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	@touch $@

# transformers and a CPU torch are test-only references (torch 2.13.0 is a CPU build on local disk).
test-deps: $(VENV)/.test-installed

$(VENV)/.test-installed: $(VENV)/.installed
	$(PIP) -e '.[test]'
	@touch $@

model: venv
	$(VPY) -m strata.model_store fetch

# The browser tests (tests/browser) drive Debian's Chromium through Playwright: Playwright's own
# browser download comes from a host CI can't reach. Installed here when missing and we are root.
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium and chromium-driver with apt-get (for the browser tests)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } \
	    >/dev/null || echo "note: apt-get could not install chromium: the browser tests will skip"; \
	else \
	  echo "note: /usr/bin/chromium is missing and apt-get is unavailable or we are not root:" \
	       "the browser tests (tests/browser) will skip; install chromium to run them"; \
	fi

# The scale-out test (tests/server/test_balancer.py) runs deploy/haproxy/haproxy.cfg with Debian's haproxy.
balancer:
	@if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing haproxy with apt-get (for the scale-out test)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; } \
	    >/dev/null || echo "note: apt-get could not install haproxy: the balancer test will skip"; \
	else \
	  echo "note: haproxy is missing and apt-get is unavailable or we are not root:" \
	       "the balancer test (tests/server/test_balancer.py) will skip; install haproxy to run it"; \
	fi

serve: venv model
	$(MAKE) --no-print-directory -j$(JOBS) lib
	$(VENV)/bin/strata serve $(SERVE_ARGS)

test: test-deps model browser balancer
	$(MAKE) --no-print-directory -j$(JOBS) lib
	$(VPY) -m pytest $(TEST_ARGS)

test-gpu: test-deps model
	$(MAKE) --no-print-directory -j$(JOBS) lib
	$(VPY) -m pytest -m gpu $(TEST_ARGS)
