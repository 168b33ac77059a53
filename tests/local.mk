# End-to-end tests of the command (module tests sit in each module's local.mk).
# What the tests share: TAP and files, the numerical references (C), and the
# helpers every e2e script sources.
EXTRA_DIST += tests/tt_test.h tests/tt_ref.h tests/tt_blocked.h tests/tt_model_texts.h tests/tt_lib.sh
# tests/e2e_run.sh: in TESTS first (Makefile.am)
EXTRA_DIST += tests/e2e_run.sh
TESTS += tests/e2e_cmdline.sh
# No circle between source files (nm over the built objects).
TESTS += tests/e2e_layering.sh
EXTRA_DIST += tests/e2e_layering.sh
EXTRA_DIST += tests/e2e_cmdline.sh
TESTS += tests/e2e_bad_data.sh
EXTRA_DIST += tests/e2e_bad_data.sh
TESTS += tests/e2e_checkpoint.sh
EXTRA_DIST += tests/e2e_checkpoint.sh
TESTS += tests/e2e_torch.sh
EXTRA_DIST += tests/e2e_torch.sh
TESTS += tests/e2e_recipe.sh
EXTRA_DIST += tests/e2e_recipe.sh tests/recipe_check.py
TESTS += tests/e2e_callbacks.sh
EXTRA_DIST += tests/e2e_callbacks.sh
TESTS += tests/e2e_events.sh
EXTRA_DIST += tests/e2e_events.sh
TESTS += tests/e2e_plot.sh
EXTRA_DIST += tests/e2e_plot.sh
TESTS += tests/e2e_bench.sh
EXTRA_DIST += tests/e2e_bench.sh
TESTS += tests/e2e_resnet.sh
EXTRA_DIST += tests/e2e_resnet.sh
TESTS += tests/e2e_resnet50.sh
EXTRA_DIST += tests/e2e_resnet50.sh
check_PROGRAMS += tests/tt_logits tests/tt_cpuid
tests_tt_logits_SOURCES = tests/tt_logits.c
tests_tt_cpuid_SOURCES = tests/tt_cpuid.c
tests_tt_cpuid_LDADD =
# PyPI's readers on our files (tests/tt_venv.sh makes their venv; SKIP without PyPI)
TESTS += tests/e2e_tensorboard.sh tests/e2e_safetensors.sh
EXTRA_DIST += tests/e2e_tensorboard.sh tests/e2e_safetensors.sh tests/tt_venv.sh \
	tests/tensorboard_check.py tests/safetensors_check.py
check_PROGRAMS += tests/tt_stdump
tests_tt_stdump_SOURCES = tests/tt_stdump.c
TESTS += tests/e2e_precision.sh
EXTRA_DIST += tests/e2e_precision.sh
# a short training run on the CPU under test (make check-cpus: an emulated one)
TESTS += tests/e2e_cpu_train.sh
EXTRA_DIST += tests/e2e_cpu_train.sh
# the default threads of CPU towers: the online CPUs and the affinity mask
TESTS += tests/e2e_cpu_threads.sh
EXTRA_DIST += tests/e2e_cpu_threads.sh
# TT_CPU_ISA: every kernel level the CPU has, and the cap refused when wrong
TESTS += tests/e2e_cpu_isa.sh
EXTRA_DIST += tests/e2e_cpu_isa.sh
TESTS += tests/e2e_readme.sh
EXTRA_DIST += tests/e2e_readme.sh
TESTS += tests/e2e_resume.sh
EXTRA_DIST += tests/e2e_resume.sh
TESTS += tests/e2e_mpi.sh
EXTRA_DIST += tests/e2e_mpi.sh tests/tt_safetensors.py tests/tt_tap.py tests/tt_tfrecord.py
TESTS += tests/e2e_hosts.sh
EXTRA_DIST += tests/e2e_hosts.sh tests/hosts.sh
TESTS += tests/e2e_memory.sh
EXTRA_DIST += tests/e2e_memory.sh
TESTS += tests/e2e_timeline.sh
EXTRA_DIST += tests/e2e_timeline.sh tests/tt_timeline.py tests/tt_profile.py
# GPU towers' host code on simulated GPUs (trainer.device = "sim"); the
# e2e_sim_gpu*.sh run tests/gpu/'s scripts so (TT_DEVICE=sim)
TESTS += tests/e2e_sim.sh tests/e2e_sim_precision.sh tests/e2e_sim_threads.sh tests/e2e_sim_faults.sh \
	tests/e2e_sim_accumulate.sh tests/e2e_sim_gpu.sh tests/e2e_sim_gpu_precision.sh \
	tests/e2e_sim_gpu_trainers.sh
EXTRA_DIST += tests/e2e_sim.sh tests/e2e_sim_precision.sh tests/e2e_sim_threads.sh tests/e2e_sim_faults.sh \
	tests/e2e_sim_accumulate.sh tests/e2e_sim_gpu.sh tests/e2e_sim_gpu_precision.sh \
	tests/e2e_sim_gpu_trainers.sh
TESTS += tests/e2e_device_stats.sh
EXTRA_DIST += tests/e2e_device_stats.sh
# bf16 ResNet-20 on sim in the NHWC bf16 layout, and its peak memory
TESTS += tests/e2e_sim_nhwc.sh
EXTRA_DIST += tests/e2e_sim_nhwc.sh
# the weight copies made once per step: the bits of converting at every call,
# through every trainer that writes weights and a resume (sim bf16)
TESTS += tests/e2e_sim_weight_copies.sh
EXTRA_DIST += tests/e2e_sim_weight_copies.sh
# The captured step (TT_CUDA_GRAPH=1) on sim: bit for bit the eager step.
TESTS += tests/e2e_sim_graph.sh
EXTRA_DIST += tests/e2e_sim_graph.sh
# bf16 activation gradients on sim: rounding (paired first step) and
# accuracy against float32 gradients, statistical
TESTS += tests/e2e_sim_grad16.sh
EXTRA_DIST += tests/e2e_sim_grad16.sh
