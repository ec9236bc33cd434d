// speexdsp for Linnet: the MDF echo canceller and the preprocessor (noise suppression,
// voice activity, residual echo suppression). The full-Swift build links Debian's
// libspeexdsp (floating point); the release build links the fixed-point static library
// scripts/build-speexdsp.sh makes from Debian's source package. Both take int16 frames.
#ifndef CSPEEXDSP_SHIM_H
#define CSPEEXDSP_SHIM_H
#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>

// The ctl requests take a void *: typed wrappers so Swift passes plain values.
static inline int linnet_echo_set_rate(SpeexEchoState *st, spx_int32_t rate) {
    return speex_echo_ctl(st, SPEEX_ECHO_SET_SAMPLING_RATE, &rate);
}
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
