// ALSA for Linnet. The snd_*_alloca macros cannot be called from Swift; Linnet uses
// the *_malloc/*_free functions instead, so no shim is needed yet.
#ifndef CALSA_SHIM_H
#define CALSA_SHIM_H
#include <alsa/asoundlib.h>
/* libasound prints its own diagnostics to stderr ("ALSA lib pcm.c:2666: Unknown PCM
   default"); Linnet reports every failure itself, naming the device and the reason, so
   the library's lines are noise in a journal. The handler is variadic, hence C. */
static void calsa_silent(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
static inline void calsa_quiet(void) { snd_lib_error_set_handler(calsa_silent); }
#endif
