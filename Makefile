# Thin wrappers over CMake. The two commands a new user needs:
#   make demo   - install dependencies, build, make a small dataset, check and describe it
#   make test   - install dependencies, build (warnings fatal) and run the whole test suite
#   make cora   - import Cora (the standard split) and train GCN on it
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo cora asan tsan fuzz release-check clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test:
	@$(MAKE) --no-print-directory build CMAKE_FLAGS="$(CMAKE_FLAGS) -DSLUICE_WERROR=ON"
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

# Cora (datasets/cora -> data/cora), then GCN on it as PyG's example runs it.
cora: build
	@scripts/cora.sh $(BUILD)

# Sanitizer builds in their own trees (ASAN_BUILD, TSAN_BUILD): ASan+UBSan
# over the whole suite, TSan over the concurrent tests.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
asan:
	@$(MAKE) --no-print-directory test BUILD=$(ASAN_BUILD) CMAKE_FLAGS="-DSLUICE_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug"
tsan:
	@$(MAKE) --no-print-directory build BUILD=$(TSAN_BUILD) CMAKE_FLAGS="-DSLUICE_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug"
	@cd $(TSAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L concurrent

# Before a release: ASan+UBSan suite, TSan concurrent tests, valgrind demo and
# every fuzz target (scripts/release-check.sh; docs/reliability.md). Its
# trees are $(BUILD), $(BUILD)-asan, $(BUILD)-tsan and $(BUILD)-fuzz.
FUZZ_SECONDS ?= 20
release-check:
	@scripts/release-check.sh --prefix $(BUILD) --jobs $(JOBS) --fuzz-seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
