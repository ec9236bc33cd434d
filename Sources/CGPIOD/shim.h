// libgpiod 1.6 (Debian 12, Raspberry Pi OS bookworm) for Linnet's push-to-talk
// button and LEDs, and the spidev setup of the APA102 status LEDs.
#ifndef CGPIOD_SHIM_H
#define CGPIOD_SHIM_H
#include <gpiod.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <linux/spi/spidev.h>

// ioctl is variadic (Swift cannot call it): SPI mode 0 and the clock for APA102 LEDs.
static inline int cgpiod_spi_setup(int fd, uint32_t speed_hz) {
    uint8_t mode = SPI_MODE_0;
    if (ioctl(fd, SPI_IOC_WR_MODE, &mode) < 0) return -1;
    return ioctl(fd, SPI_IOC_WR_MAX_SPEED_HZ, &speed_hz);
}
#endif
