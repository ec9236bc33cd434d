// ALSA for Linnet. The snd_*_alloca macros cannot be called from Swift; Linnet uses
// the *_malloc/*_free functions instead, so no shim is needed yet.
#ifndef CALSA_SHIM_H
#define CALSA_SHIM_H
#include <alsa/asoundlib.h>
#endif
