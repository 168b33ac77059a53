# Fuzz targets (tests/fuzz/fuzz_*.c, one per reader of outside bytes).
# `make check` replays each over its corpus in tests/fuzz/corpus/<target>
# (replay_main.c: no clang needed, and CI replays under ASan + UBSan too).
# `make fuzz` builds them with clang's libFuzzer, ASan and UBSan into
# fuzz-build/; tests/fuzz/fuzz.sh runs each for FUZZ_SECONDS (CI: 30).
FUZZ_TARGETS = job model set idx cifar10 npy image_folder plot safetensors checkpoint_job
FUZZ_REPLAYS = tests/fuzz/replay_job tests/fuzz/replay_model tests/fuzz/replay_set \
	tests/fuzz/replay_idx tests/fuzz/replay_cifar10 tests/fuzz/replay_npy \
	tests/fuzz/replay_image_folder tests/fuzz/replay_plot tests/fuzz/replay_safetensors \
	tests/fuzz/replay_checkpoint_job
check_PROGRAMS += $(FUZZ_REPLAYS)
TESTS += $(FUZZ_REPLAYS)
tests_fuzz_replay_job_SOURCES = tests/fuzz/fuzz_job.c tests/fuzz/replay_main.c
tests_fuzz_replay_model_SOURCES = tests/fuzz/fuzz_model.c tests/fuzz/replay_main.c
tests_fuzz_replay_set_SOURCES = tests/fuzz/fuzz_set.c tests/fuzz/replay_main.c
tests_fuzz_replay_idx_SOURCES = tests/fuzz/fuzz_idx.c tests/fuzz/replay_main.c
tests_fuzz_replay_cifar10_SOURCES = tests/fuzz/fuzz_cifar10.c tests/fuzz/replay_main.c
tests_fuzz_replay_npy_SOURCES = tests/fuzz/fuzz_npy.c tests/fuzz/replay_main.c
tests_fuzz_replay_image_folder_SOURCES = tests/fuzz/fuzz_image_folder.c tests/fuzz/replay_main.c
tests_fuzz_replay_plot_SOURCES = tests/fuzz/fuzz_plot.c tests/fuzz/replay_main.c
tests_fuzz_replay_safetensors_SOURCES = tests/fuzz/fuzz_safetensors.c tests/fuzz/replay_main.c
tests_fuzz_replay_checkpoint_job_SOURCES = tests/fuzz/fuzz_checkpoint_job.c \
	tests/fuzz/replay_main.c
EXTRA_DIST += tests/fuzz/fuzz_common.h tests/fuzz/fuzz_texts.h tests/fuzz/corpus \
	tests/fuzz/lsan.supp tests/fuzz/cfg.dict tests/fuzz/fuzz.sh tests/fuzz/make_seeds.sh

# ---- make fuzz: the same targets with libFuzzer (clang) ----
# The library is compiled again, CPU backend with CBLAS only (no config.h:
# no oneDNN, CUDA or MPI), with the fuzzer's coverage instrumentation.
FUZZ_DIR = fuzz-build
FUZZ_CFLAGS = -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined
FUZZ_CPPFLAGS = -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -pthread \
	-I$(top_srcdir)/src -I$(top_srcdir) $(LIBCONFIG_CFLAGS) $(CJSON_CFLAGS) $(ZLIB_CFLAGS) \
	$(FUZZ_BLAS_CFLAGS) $(FUZZ_IMAGE_CPPFLAGS)
FUZZ_LIBS = $(LIBCONFIG_LIBS) $(CJSON_LIBS) $(ZLIB_LIBS) $(FUZZ_BLAS_LIBS) $(TURBOJPEG_LIBS) \
	$(PNG_LIBS) -pthread -lm
FUZZ_LIB_SRCS = $(sort $(filter-out src/backend/cpu/conv_dnnl.c src/backend/cpu/dense_bf16.c \
	src/backend/cpu/dnnl_util.c src/comm/dist_mpi.c, \
	$(filter %.c,$(libtowertrain_a_SOURCES))) src/backend/cuda/none.c src/comm/dist_none.c \
	src/comm/nccl_none.c)
FUZZ_DEPS = $(filter %.h,$(libtowertrain_a_SOURCES)) tests/fuzz/fuzz_common.h \
	tests/fuzz/fuzz_texts.h

$(FUZZ_DIR)/%.o: $(top_srcdir)/%.c $(FUZZ_DEPS)
	@$(MKDIR_P) $(@D)
	$(AM_V_CC)$(CLANG) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
$(FUZZ_DIR)/libtt.a: $(FUZZ_LIB_SRCS:%.c=$(FUZZ_DIR)/%.o)
	$(AM_V_AR)rm -f $@ && $(AR) cr $@ $^ && $(RANLIB) $@
$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/tests/fuzz/fuzz_%.o $(FUZZ_DIR)/libtt.a
	$(AM_V_CCLD)$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LIBS)

fuzz:
	@if test -z "$(CLANG)"; then \
	  echo "make fuzz: clang not found (on Debian: apt-get install clang-16 libclang-rt-16-dev)"; \
	  exit 1; fi
	@if test -z "$(FUZZ_BLAS_LIBS)"; then \
	  echo "make fuzz: OpenBLAS not found (the fuzz targets use CBLAS; on Debian: apt-get install libopenblas-dev)"; \
	  exit 1; fi
	@$(MAKE) $(AM_MAKEFLAGS) $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
clean-fuzz:
	rm -rf $(FUZZ_DIR)
.PHONY: fuzz clean-fuzz
clean-local: clean-fuzz clean-extra-checks
# the targets' objects are kept (make deletes intermediate files otherwise)
.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/tests/fuzz/fuzz_%.o)
