# Thin wrappers over CMake. The two commands a new user needs:
#   make demo   - install dependencies, build, make a small dataset, check and describe it
#   make test   - install dependencies, build (warnings fatal) and run the whole test suite
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo asan tsan fuzz clean

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

# Sanitizer builds in their own trees: ASan+UBSan over the whole suite,
# TSan over the concurrent tests.
asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DSLUICE_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug"
tsan:
	@$(MAKE) --no-print-directory build BUILD=build-tsan CMAKE_FLAGS="-DSLUICE_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug"
	@cd build-tsan && ctest --output-on-failure -j $(JOBS) -L concurrent

clean:
	rm -rf $(BUILD) build-asan build-tsan
