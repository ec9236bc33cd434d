# Sourced by scripts/embedded-build.sh and bench/build.sh: how the release build's Swift
# is optimised, so the benches measure the code the binary ships.
#
# -Osize, and no "base benefit" for inlining a call in -Osize code. Swift's SIL
# performance inliner credits every call it could remove with a fixed benefit (20) and,
# at -Osize only, divides it by -sil-inline-caller-benefit-reduction-factor (default 2).
# At 64 the quotient is 0: a call is still inlined where that folds a constant, removes
# a closure or sits in a loop, and trivial and @inline(__always) bodies still are, but
# no longer merely to save the call. Measured one after the other on the same sources
# (issue 18): arm64 stripped 1,560,888 → 1,410,480 bytes (factor 8: 1,531,496; 16:
# 1,524,176; 1000: as 64), with the same figures where the time goes: the hook chains
# (bench/audio.sh arm64: product chain 3,585, default chain 5,085 instructions a frame;
# the kernels are @_optimize(speed), which this does not touch) and a call's work outside
# Opus (bench/call-instructions.sh: 4.28–4.31 M instructions per call-second, before and
# after, within the runs' spread).
osize_flags=(-Osize -Xfrontend -sil-inline-caller-benefit-reduction-factor -Xfrontend 64)
