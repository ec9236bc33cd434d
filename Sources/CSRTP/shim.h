// libsrtp2 for Linnet. No shims needed: the API is plain functions and structs.
#ifndef CSRTP_SHIM_H
#define CSRTP_SHIM_H
#include <srtp2/srtp.h>
#endif
