# gpu-memd — the front door. `make run` and `make test` work on a fresh
# Debian 12 machine as root: missing packages are installed first
# (scripts/deps.sh), then CMake builds into build/.
#
#   make            build
#   make run        start gpu-memd in the foreground on ./run/gpu-memd.sock
#   make test       build and run the whole test suite (ctest)
#   make install    install under PREFIX (default /usr/local), DESTDIR honoured
#   make clean      remove build/

BUILD    ?= build
PREFIX   ?= /usr/local
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
# CI builds with warnings as errors.
WERROR   ?= $(if $(CI),ON,OFF)
CMAKE_FLAGS ?=

.PHONY: all deps configure build run test install clean

all: build

deps:
	@sh scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DGMD_WERROR=$(WERROR) \
		-DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@mkdir -p run
	$(BUILD)/daemon/gpu-memd --socket $(CURDIR)/run/gpu-memd.sock

# Skipped tests (the GPU suite without a GPU) say why in one line each.
test: build
	@status=0; ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) || status=$$?; \
	grep -h '^SKIP:' $(BUILD)/Testing/Temporary/LastTest.log 2>/dev/null | sort -u; \
	exit $$status

install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
