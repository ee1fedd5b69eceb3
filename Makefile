# gpu-memd — the front door. `make run` and `make test` work on a fresh
# Debian 12 machine as root: missing packages are installed first
# (scripts/deps.sh), then CMake builds into build/.
#
#   make            build
#   make run        build quietly (log in build/make-run.log), then start
#                   gpu-memd in the foreground on ./run/gpu-memd.sock
#   make test       build and run the whole test suite (ctest)
#   make test-sanitize  the same suite built with ASan+UBSan in build-asan/
#   make fuzz       fuzz the wire decoder for FUZZ_SECONDS (default 60)
#   make install    install under PREFIX (default /usr/local), DESTDIR honoured;
#                   as root without DESTDIR, runs ldconfig so programs find
#                   libgpumem.so.0
#   make deb        build the Debian packages into build-deb/ and check them
#                   with lintian (docs/install.md)
#   make clean      remove build/, build-asan/, build-fuzz/ and build-deb/

BUILD    ?= build
PREFIX   ?= /usr/local
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
# CI builds with warnings as errors.
WERROR   ?= $(if $(CI),ON,OFF)
CMAKE_FLAGS ?=
# Where `make run` serves.
RUN_SOCKET ?= $(CURDIR)/run/gpu-memd.sock
SANITIZE_BUILD ?= build-asan
FUZZ_SECONDS ?= 60
# Where `make deb` puts the packages; DEB_REF=HEAD packages what is
# committed instead of the working tree.
DEB_DIR ?= build-deb
DEB_REF ?=
# Sanitizer reports fail the run: UBSan is built not to recover, ASan and
# LeakSanitizer exit non-zero, and the test harness fails a test whose
# daemon or client logged a report (tests/integration/harness.c).
SANITIZE_ENV = ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: all deps configure build run test test-sanitize fuzz install deb clean

all: build

deps:
	@sh scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DGMD_WERROR=$(WERROR) \
		-DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The build's hundred lines go to a log: the daemon's lines come first. A
# build dir that exists is not configured again (cmake --build redoes it
# when CMakeLists.txt changed); a failed build shows the log's end.
run: deps
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) \
		-DGMD_WERROR=$(WERROR) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	@echo "make run: building in $(BUILD) (log: $(BUILD)/make-run.log)"
	@cmake --build $(BUILD) -j $(JOBS) >$(BUILD)/make-run.log 2>&1 || \
		{ tail -n 40 $(BUILD)/make-run.log; echo "make run: the build failed; the whole log is $(BUILD)/make-run.log" >&2; exit 1; }
	@mkdir -p $(dir $(RUN_SOCKET))
	@exec $(BUILD)/daemon/gpu-memd --socket $(RUN_SOCKET)

# Skipped tests (the GPU suite without a GPU) say why in one line each.
test: build
	@status=0; ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) || status=$$?; \
	grep -h '^SKIP:' $(BUILD)/Testing/Temporary/LastTest.log 2>/dev/null | sort -u; \
	exit $$status

# The suite again, built with AddressSanitizer, LeakSanitizer and UBSan in
# its own folder (the sim backend only: CUDA's driver and ASan disagree).
# The tests run by Python (python.*, torch.python, examples.*) are left
# out: an instrumented libgpumem loads into an uninstrumented interpreter
# (or the README's example, built as a user builds it) only with libasan
# preloaded, and LeakSanitizer then reports the interpreter's own
# allocations; the C paths they use are tested here by the C tests.
test-sanitize: deps
	@cmake -S . -B $(SANITIZE_BUILD) -DGMD_SANITIZE=ON -DGMD_WITH_CUDA=OFF \
		-DGMD_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	@$(SANITIZE_ENV) ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j $(JOBS) \
		-E '^(python\.|torch\.python$$|examples\.)'

# libFuzzer with ASan+UBSan on the wire decoder (scripts/fuzz.sh says more):
# a minute by default, `make fuzz FUZZ_SECONDS=3600` for an hour.
fuzz: deps
	@GMD_WERROR=$(WERROR) sh scripts/fuzz.sh $(FUZZ_SECONDS)

# ldconfig: without it the dynamic linker's cache does not know the new
# libgpumem.so.0 and programs fail to start (PREFIX/lib must be in
# /etc/ld.so.conf.d, as /usr/local/lib is on Debian).
install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then \
		ldconfig && echo "ran ldconfig: programs find libgpumem.so.0"; \
	elif [ -z "$(DESTDIR)" ]; then \
		echo "run ldconfig as root so programs find libgpumem.so.0"; fi

# gpu-memd, libgpumem0, libgpumem-dev and python3-gpumem (debian/), built
# from a copy of this tree by dpkg-buildpackage in $(DEB_DIR), then lintian
# (scripts/deb-build.sh). The packaging tools are installed first as deps
# are (scripts/deb-deps.sh).
deb:
	@sh scripts/deb-deps.sh
	@DEB_REF=$(DEB_REF) sh scripts/deb-build.sh $(DEB_DIR)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) build-fuzz $(DEB_DIR)
