/* fuzz_texts.h - a valid model file the job and --set targets place beside
 * their jobs as "model.cfg", and the job whose trainer the checkpoint
 * targets load into (the same model, inline). */
#ifndef TT_FUZZ_TEXTS_H
#define TT_FUZZ_TEXTS_H

#define FUZZ_MODEL_TEXT                                                                     \
    "input = [1, 8, 8];\n"                                                                  \
    "classes = 4;\n"                                                                        \
    "layers = (\n"                                                                          \
    "  { name = \"conv\"; type = \"conv2d\"; filters = 2; kernel = 3; padding = 1; },\n"    \
    "  { name = \"bn\"; type = \"batchnorm\"; },\n"                                         \
    "  { name = \"relu\"; type = \"relu\"; },\n"                                            \
    "  { name = \"pool\"; type = \"maxpool\"; kernel = 2; },\n"                             \
    "  { name = \"fc\"; type = \"dense\"; units = 4; }\n"                                   \
    ");\n"

/* One tower, no threads, nothing written: a trainer to load checkpoints into.
 * Adam, so a checkpoint has two slots per trainable tensor. The model is
 * inline, so the job a checkpoint carries names no file. */
#define FUZZ_JOB_TEXT                                                                       \
    "dataflow = { source = { type = \"fake\"; shape = [1, 8, 8]; classes = 4; size = 16; };\n" \
    "  batch_size = 4; prefetch = { workers = 0; }; };\n"                                     \
    "model = {\n" FUZZ_MODEL_TEXT "};\n"                                                       \
    "optimizer = { type = \"adam\"; learning_rate = 0.01; };\n"                               \
    "trainer = { type = \"simple\"; device = \"cpu\"; threads_per_tower = 1; };\n"            \
    "extra_callbacks = ( );\n"                                                                \
    "monitors = ( );\n"                                                                       \
    "max_epoch = 2;\n"

#endif
