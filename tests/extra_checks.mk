# make check-tsan, make check-valgrind: the distribution (make distdir) built
# again in a directory of its own (an in-tree build cannot be configured a
# second time), then chosen tests run there. Each leaves the automake summary
# in <dir>/src/test-suite.log, which CI counts with the other suites.

# ---- ThreadSanitizer: the tests that run threads ----
# multi-tower trainers (sync_replicated, sync_parameter_server, async), the
# all-reduce, prefetch workers, the backward/all-reduce overlap hook, and
# SIGINT/SIGTERM landing in runs of two towers with prefetch workers, then
# resume (e2e_signals.sh; e2e_checkpoint.sh's LeNet runs take over ten
# minutes under TSan). oneDNN is left out:
# its OpenMP runtime is not instrumented (libgomp's barriers are invisible to
# TSan and would read as races); sgemm goes through CBLAS, whose own threads
# are off (gemm.c: one thread per call, the towers are the parallelism).
TSAN_DIR = tsan-build
TSAN_TESTPROGS = tests/test_allreduce tests/test_dataflow tests/test_trainers \
	tests/test_grad_ready tests/gpu/test_gpu_precision tests/test_staging tests/test_sim_graph
# simulated GPUs: 2 sim towers with gradient packs started from the
# grad-ready hooks, the sim all-reduce's rendezvous, ps_device gpu, and
# fp16's skip in every trainer type (e2e_sim_precision.sh); the staging's
# copy queue beside the compute queue (test_staging); a step captured and
# replayed on the compute queue (test_sim_graph)
TSAN_TESTS = $(TSAN_TESTPROGS) tests/e2e_signals.sh tests/e2e_sim_threads.sh \
	tests/e2e_sim_precision.sh
check-tsan:
	rm -rf $(TSAN_DIR) && mkdir -p $(TSAN_DIR)
	$(MAKE) $(AM_MAKEFLAGS) distdir distdir=$(TSAN_DIR)/src
	cd $(TSAN_DIR)/src && ./configure -q --without-cuda --without-mpi --without-dnnl \
	    CFLAGS="-g -O1 -fsanitize=thread" LDFLAGS="-fsanitize=thread" && \
	  $(MAKE) $(AM_MAKEFLAGS) towertrain >/dev/null && \
	  TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$$PWD/tests/tsan.supp" \
	  $(MAKE) $(AM_MAKEFLAGS) check check_PROGRAMS="$(TSAN_TESTPROGS)" TESTS="$(TSAN_TESTS)"

# ---- valgrind memcheck: every unit test and one end-to-end run ----
# Built for x86-64-v3 (AVX2): valgrind cannot run AVX-512 code. Run-time
# dispatch follows CPUID, which valgrind reports without AVX-512: our kernels
# and OpenBLAS (DYNAMIC_ARCH: Haswell under valgrind, SkylakeX outside) stay
# on AVX2 by themselves; oneDNN's JIT would too, and is held at AVX2
# explicitly (ONEDNN_MAX_CPU_ISA) so that it cannot pick AVX-512 on a host
# whose CPUID valgrind passes through. The tt_* helpers are not tests;
# test_no_alloc counts calls to the allocator valgrind replaces: left out.
# Errors and definite leaks fail a test (valgrind exits 99);
# tests/valgrind.supp names libconfig's own leaks and one over-read of
# oneDNN's JIT code in its own buffer, nothing else.
VALGRIND_DIR = valgrind-build
VALGRIND_TESTPROGS = $(filter-out tests/tt_% tests/test_no_alloc bench/%,$(check_PROGRAMS))
VALGRIND_CMD = valgrind -q --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite --show-leak-kinds=definite \
	--suppressions=$$PWD/tests/valgrind.supp
check-valgrind:
	rm -rf $(VALGRIND_DIR) && mkdir -p $(VALGRIND_DIR)
	$(MAKE) $(AM_MAKEFLAGS) distdir distdir=$(VALGRIND_DIR)/src
	cd $(VALGRIND_DIR)/src && ./configure -q --without-cuda --without-mpi \
	    CFLAGS="-g -O2 -march=x86-64-v3" && \
	  $(MAKE) $(AM_MAKEFLAGS) towertrain >/dev/null && \
	  ONEDNN_MAX_CPU_ISA=AVX2 VALGRIND="$(VALGRIND_CMD)" \
	  $(MAKE) $(AM_MAKEFLAGS) check check_PROGRAMS="$(VALGRIND_TESTPROGS)" \
	    TESTS="$(VALGRIND_TESTPROGS) tests/e2e_valgrind.sh" LOG_COMPILER="$(VALGRIND_CMD)"

# ---- AddressSanitizer + UBSan with oneDNN: every unit test, the blocked
# layout's at every ISA level the CPU has, and the ResNets ----
# CI's last stage builds the unit tests with ASan --without-dnnl (the CBLAS
# path); this build keeps oneDNN, whose reorders between its layouts and
# ours are where the tower's workspace once overflowed (at SSE4.1, found by
# hand). oneDNN's JIT code is not instrumented; the buffers it reads and
# writes are ours, and ASan checks our side of each call. The
# hand-written AVX-512 kernels run here too (valgrind cannot run them).
# The peak-RSS checks are left out: ASan's shadow memory exceeds them.
ASAN_DIR = asan-build
ASAN_TESTPROGS = $(filter-out tests/tt_% bench/%,$(check_PROGRAMS))
ASAN_TESTS = $(ASAN_TESTPROGS) tests/e2e_cpu_isa.sh tests/e2e_resnet.sh tests/e2e_resnet50.sh
check-asan:
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	$(MAKE) $(AM_MAKEFLAGS) distdir distdir=$(ASAN_DIR)/src
	cd $(ASAN_DIR)/src && ./configure -q --without-cuda --without-mpi \
	    CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=address,undefined" && \
	  $(MAKE) $(AM_MAKEFLAGS) towertrain >/dev/null && \
	  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$$PWD/tests/fuzz/lsan.supp \
	  $(MAKE) $(AM_MAKEFLAGS) check TESTS="$(ASAN_TESTS)"

# ---- make check-cpus: the tests that depend on the CPU, on another CPU ----
# QEMU's user mode (Debian: qemu-user) runs them as on an AMD EPYC of family
# 23 model 1 (Zen 1: AVX2, FMA, F16C, no AVX-512), the CPU of issue 37:
# towertrain's kernel dispatch (CPUID), oneDNN's and OpenBLAS's, and the
# tests' own reading (tests/tt_cpuid) all see that CPU. In this build tree:
# the unit test programs run under qemu-x86_64 (LOG_COMPILER), and the
# scripts, given TT_EMULATOR, run towertrain and their test programs through
# it (tests/tt_lib.sh); python runs natively. QEMU 7.2 (Debian 12) emulates
# SSE to AVX2, FMA and F16C (TCG), and no AVX-512, AVX-VNNI, AVX512_BF16 or
# AMX at all: -cpu Skylake-Server or Cooperlake drop every AVX-512 feature
# with a warning, and CPUID says AVX2 at most (tests/tt_cpuid). Under
# qemu-user /proc/cpuinfo is the host's, so no test reads it. The AVX-512
# paths (and bf16) run only in make check on an AVX-512 CPU (CI's
# machines), where the kernel tests run again at each lower level
# (TT_CPU_ISA). The -cpu model is EPYC-v1 minus the features TCG lacks, so
# that qemu warns about none on stderr (tests count stderr lines). About
# 45x slower than the CPU itself (16 LeNet steps: 0.14 s, 6.4 s under qemu):
# the chosen tests are short; about 90 s of CPU time. Its summary:
# cpus-suite.log.
# Then the same tests as on the x86-64 baseline (-cpu qemu64: SSE2 and SSE3,
# no SSSE3 or SSE4.1, as an Intel Core 2 or AMD K10 lacks SSE4.1):
# towertrain's plain level, and oneDNN's reference kernels, whose NHWC and
# NCHW convolutions sum in other orders (test_blocked_layout failed there
# until it asked oneDNN). On other CPUs TT_CPU_ISA=plain caps oneDNN at
# SSE4.1, so only this run reaches those kernels. Its summary:
# cpus-base-suite.log. make check-cpus-zen1 and check-cpus-base run one each.
CPUS_QEMU_CPU = EPYC-v1,-rdseed,-sha-ni,-fxsr-opt,-misalignsse,-3dnowprefetch,-osvw,-topoext,-nrip-save,-xsavec
CPUS_BASE_CPU = qemu64
CPUS_TESTPROGS = $(filter-out tests/tt_% bench/%,$(check_PROGRAMS))
CPUS_TESTS = $(CPUS_TESTPROGS) tests/e2e_precision.sh tests/e2e_cpu_train.sh tests/e2e_cpu_isa.sh \
	tests/gpu/e2e_kit.sh
check-cpus: check-cpus-zen1 check-cpus-base
check-cpus-zen1:
	@$(MAKE) $(AM_MAKEFLAGS) cpus-run CPUS_RUN_CPU="$(CPUS_QEMU_CPU)" CPUS_RUN_LOG=cpus-suite.log
check-cpus-base:
	@$(MAKE) $(AM_MAKEFLAGS) cpus-run CPUS_RUN_CPU="$(CPUS_BASE_CPU)" CPUS_RUN_LOG=cpus-base-suite.log
cpus-run:
	@command -v qemu-x86_64 >/dev/null || { echo "check-cpus: no qemu-x86_64 (Debian: apt-get install qemu-user)"; exit 1; }
	@test "`uname -m`" = x86_64 || { echo "check-cpus: runs on x86-64 hosts only"; exit 1; }
	@echo "check-cpus: the unit tests, e2e_precision.sh, e2e_cpu_train.sh, e2e_cpu_isa.sh and e2e_kit.sh under qemu-x86_64 -cpu $(CPUS_RUN_CPU)"
	@TT_EMULATOR="qemu-x86_64 -cpu $(CPUS_RUN_CPU)" $(MAKE) $(AM_MAKEFLAGS) check TESTS="$(CPUS_TESTS)" \
	  LOG_COMPILER="qemu-x86_64 -cpu $(CPUS_RUN_CPU)" TEST_SUITE_LOG=$(CPUS_RUN_LOG)

# ---- make check-avx2: the whole suite as on an AVX2-only CPU, natively ----
# check-cpus emulates such a CPU for the tests that depend on it; this runs
# every test with TT_CPU_ISA=avx2 exported (towertrain's kernels and oneDNN
# capped at AVX2, bf16 refused on CPU towers as there), at the machine's
# speed: a test that assumes the machine's features where it should ask
# towertrain fails here (e2e_safetensors' bf16 run did). On an AVX2-only
# CPU it is make check again. Its summary: avx2-suite.log.
check-avx2:
	@TT_CPU_ISA=avx2 $(MAKE) $(AM_MAKEFLAGS) check TEST_SUITE_LOG=avx2-suite.log

clean-extra-checks:
	rm -rf $(TSAN_DIR) $(VALGRIND_DIR) $(ASAN_DIR) cpus-suite.log cpus-base-suite.log avx2-suite.log
.PHONY: check-tsan check-valgrind check-asan check-cpus check-cpus-zen1 check-cpus-base cpus-run \
	check-avx2 clean-extra-checks
EXTRA_DIST += tests/extra_checks.mk tests/tsan.supp tests/valgrind.supp tests/e2e_valgrind.sh

# A real full disk (a tmpfs in a private mount namespace; SKIPs without root),
# and signals landing while towers and prefetch workers run.
TESTS += tests/e2e_disk_full.sh tests/e2e_signals.sh
EXTRA_DIST += tests/e2e_disk_full.sh tests/e2e_signals.sh
