// mbedtls 2.28 for Linnet (DTLS 1.2, TLS client, ECDSA P-256, HMAC, SHA-256).
// Debian ships no pkg-config file for it, so the module map links the three
// libraries by name.
#ifndef CMBEDTLS_SHIM_H
#define CMBEDTLS_SHIM_H
#include <mbedtls/version.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/ecp.h>
#include <mbedtls/pk.h>
#include <mbedtls/md.h>
#include <mbedtls/sha1.h>
#include <mbedtls/sha256.h>
#include <mbedtls/x509_crt.h>
#include <mbedtls/x509_csr.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_cookie.h>
#include <mbedtls/timing.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#endif
