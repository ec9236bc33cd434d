# Sourced by scripts/embedded-build.sh and bench/build.sh: how the release build's Swift
# is optimised, so the benches measure the code the binary ships.
#
# -Osize, and no "base benefit" for inlining a call in -Osize code. Swift's SIL
# performance inliner credits every call it could remove with a fixed benefit (20) and,
# at -Osize only, divides it by -sil-inline-caller-benefit-reduction-factor (default 2).
# At 64 the quotient is 0: a call is still inlined where that folds a constant, removes
# a closure or sits in a loop, and trivial and @inline(__always) bodies still are, but
# no longer merely to save the call. It keeps the arm64 binary about 150 KB (a tenth)
# smaller than the default factor (8 and 16 save far less; above 64 nothing more), and
# leaves the figures where the time goes as they are: the hook chains (bench/audio.sh
# arm64; the kernels are @_optimize(speed), which this does not touch) and a call's
# work outside Opus (bench/call-instructions.sh), within the runs' spread.
osize_flags=(-Osize -Xfrontend -sil-inline-caller-benefit-reduction-factor -Xfrontend 64)
