// speexdsp for Linnet: the MDF echo canceller and the preprocessor (noise suppression,
// voice activity, residual echo suppression). Both builds link the static library
// scripts/build-speexdsp.sh makes from Debian's source package, floating point, with
// Linnet's MDF tuning (scripts/speexdsp/linnet-mdf-tuning.patch).
#ifndef CSPEEXDSP_SHIM_H
#define CSPEEXDSP_SHIM_H
#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>

// The ctl requests take a void *: typed wrappers so Swift passes plain values.
static inline int linnet_echo_set_rate(SpeexEchoState *st, spx_int32_t rate) {
    return speex_echo_ctl(st, SPEEX_ECHO_SET_SAMPLING_RATE, &rate);
}
// The tuning's version, or 0 from a speexdsp without Linnet's patch (one that prints
// "Unknown speex_echo_ctl request"). The library's own name already keeps Debian's out
// of the link; this catches a stale build of another version of the patch.
#ifndef LINNET_ECHO_GET_TUNING
#define LINNET_ECHO_GET_TUNING 0x4c4e
#endif
static inline spx_int32_t linnet_echo_tuning(SpeexEchoState *st) {
    spx_int32_t version = 0;
    return speex_echo_ctl(st, LINNET_ECHO_GET_TUNING, &version) == 0 ? version : 0;
}
// Tuning 2: how often the canceller reset itself (its output louder than its input for
// half a second); 0 from a build without it.
static inline spx_int32_t linnet_echo_resets(SpeexEchoState *st) {
#ifdef LINNET_ECHO_GET_RESETS
    spx_int32_t resets = 0;
    return speex_echo_ctl(st, LINNET_ECHO_GET_RESETS, &resets) == 0 ? resets : 0;
#else
    (void)st;
    return 0;
#endif
}
// Tuning 3 (double talk): the double-talk detector's hold on the filter, the weight update
// the next cancellation call makes from the frame just processed scaled by q15 (32768:
// as speexdsp); and, for a frame of echo alone, learning per bin what the filter leaves
// of the echo (the residual estimate the preprocessor suppresses). -1 from a build
// without them.
static inline int linnet_echo_set_adapt(SpeexEchoState *st, spx_int32_t q15) {
#ifdef LINNET_ECHO_SET_ADAPT
    return speex_echo_ctl(st, LINNET_ECHO_SET_ADAPT, &q15);
#else
    (void)st; (void)q15;
    return -1;
#endif
}
static inline int linnet_echo_learn_residual(SpeexEchoState *st, spx_int32_t frames) {
#ifdef LINNET_ECHO_LEARN_RESIDUAL
    return speex_echo_ctl(st, LINNET_ECHO_LEARN_RESIDUAL, &frames);
#else
    (void)st; (void)frames;
    return -1;
#endif
}
// Tuning 3, the preprocessor: the double-talk verdict for the next frame (1 near end,
// 0 echo alone) and the residual echo estimate's scale in its gain (Q8).
#ifndef LINNET_PREPROCESS_SET_TALK
#define LINNET_PREPROCESS_SET_TALK 0x4c60
#define LINNET_PREPROCESS_SET_ECHO_SCALE 0x4c61
#endif
static inline int linnet_pre_set_int(SpeexPreprocessState *st, int request, spx_int32_t value) {
    return speex_preprocess_ctl(st, request, &value);
}
static inline int linnet_pre_set_echo(SpeexPreprocessState *st, SpeexEchoState *echo) {
    return speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_ECHO_STATE, echo);
}
static inline spx_int32_t linnet_pre_get_int(SpeexPreprocessState *st, int request) {
    spx_int32_t value = 0;
    speex_preprocess_ctl(st, request, &value);
    return value;
}
#endif
