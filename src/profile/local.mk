# profile: `towertrain profile`, where a step's time goes layer by layer, and
# the roof (the machine's measured GEMM rate) its shares are of (towertrain(1)).
libtowertrain_a_SOURCES += %reldir%/profile.c %reldir%/profile.h %reldir%/roof.c %reldir%/roof.h
