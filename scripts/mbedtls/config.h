/* mbedtls 2.28 configured for what Linnet uses, replacing
 * include/mbedtls/config.h of Debian's source package in the release build
 * (scripts/build-mbedtls.sh). The full-Swift build and the tests keep Debian's
 * libmbedtls-dev, whose config enables everything; the release binary carries only:
 *
 *   DTLS 1.2 client and server (the media path, RFC 6347), with use_srtp (RFC 5764),
 *     ECDHE-ECDSA and ECDHE-RSA with AES-GCM (Sources/DTLS/DTLSConnection.swift
 *     offers the RSA suites and P-384 for interop with stacks that sign with RSA);
 *   TLS 1.2 client over TCP for HTTPS signalling (Sources/Signaling/TLSClient.swift):
 *     SNI, extended master secret (RFC 7627), RSA and ECDSA verification of public CA
 *     chains (PKCS#1 v1.5 and PSS), X.509 and PEM parsing, validity dates;
 *   X25519, P-256 and P-384; SHA-1/224/256/384/512; AES-CTR (SRTP's AES-CM),
 *     AES-GCM, HMAC; CTR-DRBG over the OS entropy; the self-signed certificate
 *     writer (x509write, for the DTLS identity).
 *
 * Not here: TLS 1.0/1.1, CBC/CCM/ChaCha20 suites, DHM, RSA and PSK key exchange,
 * ARIA, Camellia, DES, ARC4, Blowfish, MD2/4/5, RIPEMD-160, the other curves,
 * renegotiation, session tickets, ALPN, max-fragment-length, CRL/CSR parsing,
 * file I/O, net_sockets, timing, the debug module and the self-tests. No TLS server
 * over TCP: `linnet answer` serves plain HTTP (put a TLS proxy in front for HTTPS).
 * ChaCha20 suites are still listed by TLSClient.swift; mbedtls skips suites it
 * does not know, so they cost nothing here and remain in the full build.
 */
#ifndef MBEDTLS_CONFIG_H
#define MBEDTLS_CONFIG_H

/* System */
#define MBEDTLS_HAVE_ASM
#define MBEDTLS_HAVE_TIME
#define MBEDTLS_HAVE_TIME_DATE          /* certificate validity periods */
#define MBEDTLS_DEPRECATED_WARNING

/* Ciphers and modes */
#define MBEDTLS_AES_C
#define MBEDTLS_AESNI_C                 /* x86_64 only; compiled out elsewhere */
#define MBEDTLS_CIPHER_C
#define MBEDTLS_CIPHER_MODE_CTR         /* libsrtp's AES-CM (RFC 3711 §4.1.1) */
#define MBEDTLS_GCM_C
#define MBEDTLS_REMOVE_ARC4_CIPHERSUITES
#define MBEDTLS_REMOVE_3DES_CIPHERSUITES

/* Hashes, MAC, random */
#define MBEDTLS_MD_C
#define MBEDTLS_MD5_C                   /* TURN long-term credential key, RFC 8489 §9.2.2 */
#define MBEDTLS_SHA1_C                  /* HMAC-SHA1 of SRTP, certificate fingerprints */
#define MBEDTLS_SHA256_C
#define MBEDTLS_SHA512_C                /* SHA-384 suites and certificates */
#define MBEDTLS_ENTROPY_C
#define MBEDTLS_CTR_DRBG_C
#define MBEDTLS_HMAC_DRBG_C             /* deterministic ECDSA (RFC 6979) */

/* Public keys */
#define MBEDTLS_BIGNUM_C
#define MBEDTLS_ECP_C
#define MBEDTLS_ECP_DP_SECP256R1_ENABLED
#define MBEDTLS_ECP_DP_SECP384R1_ENABLED
#define MBEDTLS_ECP_DP_CURVE25519_ENABLED
#define MBEDTLS_ECP_NIST_OPTIM
#define MBEDTLS_ECDH_C
#define MBEDTLS_ECDH_LEGACY_CONTEXT
#define MBEDTLS_ECDSA_C
#define MBEDTLS_ECDSA_DETERMINISTIC
#define MBEDTLS_RSA_C                   /* verification of public CA chains */
#define MBEDTLS_PKCS1_V15
#define MBEDTLS_PKCS1_V21
#define MBEDTLS_PK_C
#define MBEDTLS_PK_PARSE_C
#define MBEDTLS_PK_WRITE_C              /* the self-signed DTLS certificate */
#define MBEDTLS_ASN1_PARSE_C
#define MBEDTLS_ASN1_WRITE_C
#define MBEDTLS_OID_C
#define MBEDTLS_BASE64_C
#define MBEDTLS_PEM_PARSE_C             /* CA bundles are PEM */

/* X.509 */
#define MBEDTLS_X509_USE_C
#define MBEDTLS_X509_CRT_PARSE_C
#define MBEDTLS_X509_CREATE_C
#define MBEDTLS_X509_CRT_WRITE_C
#define MBEDTLS_X509_CHECK_KEY_USAGE
#define MBEDTLS_X509_CHECK_EXTENDED_KEY_USAGE
#define MBEDTLS_X509_RSASSA_PSS_SUPPORT

/* TLS and DTLS 1.2 */
#define MBEDTLS_SSL_TLS_C
#define MBEDTLS_SSL_CLI_C
#define MBEDTLS_SSL_SRV_C               /* DTLS server role (the answerer side) */
#define MBEDTLS_SSL_PROTO_TLS1_2
#define MBEDTLS_SSL_PROTO_DTLS
#define MBEDTLS_SSL_DTLS_ANTI_REPLAY
#define MBEDTLS_SSL_DTLS_HELLO_VERIFY   /* mbedtls_ssl_conf_dtls_cookies (disabled at run time) */
#define MBEDTLS_SSL_COOKIE_C
#define MBEDTLS_SSL_DTLS_SRTP
#define MBEDTLS_SSL_DTLS_BADMAC_LIMIT
#define MBEDTLS_SSL_EXPORT_KEYS         /* SRTP keying material (RFC 5764 §4.2) */
#define MBEDTLS_SSL_SERVER_NAME_INDICATION
#define MBEDTLS_SSL_EXTENDED_MASTER_SECRET
#define MBEDTLS_SSL_KEEP_PEER_CERTIFICATE
#define MBEDTLS_SSL_ALL_ALERT_MESSAGES
#define MBEDTLS_SSL_RECORD_CHECKING
#define MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA_ENABLED
#define MBEDTLS_KEY_EXCHANGE_ECDHE_RSA_ENABLED

/* Error strings: TLS and certificate failures are reported to the user by name. */
#define MBEDTLS_ERROR_C
#define MBEDTLS_VERSION_C

#include "mbedtls/check_config.h"

#endif /* MBEDTLS_CONFIG_H */
