// libgpiod 1.6 (Debian 12, Raspberry Pi OS bookworm) for Linnet's push-to-talk
// button and LEDs.
#ifndef CGPIOD_SHIM_H
#define CGPIOD_SHIM_H
#include <gpiod.h>
#endif
