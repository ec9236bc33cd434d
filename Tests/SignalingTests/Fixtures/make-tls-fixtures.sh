#!/usr/bin/env bash
# Generates Tests/SignalingTests/TLSFixtures.swift: the certificates, keys, SPKI pins
# and validity dates the TLS client tests use. Run once by hand (needs `openssl` and GNU
# `date`); the output is committed, so the tests do not need openssl at run time.
#
# The fixtures come from OpenSSL, an implementation independent of mbedtls, so the
# tests check the client against certificates it did not make, and the pins and Unix
# times below are computed by openssl and date, not by the code under test.
#
#   root CA ─┬─ intermediate CA ─┬─ leaf-ec     signal.linnet.test, *.voice.linnet.test (P-256)
#            │                   ├─ leaf-rsa    signal.linnet.test (RSA 2048)
#            │                   ├─ other-host  other.example.net
#            │                   └─ expired     signal.linnet.test, valid 2020–2021
#   self-signed                                 signal.linnet.test, its own issuer
#   evil root CA ─── evil-leaf                  signal.linnet.test, from an untrusted CA
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../TLSFixtures.swift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

start=20250101000000Z
end=20450101000000Z

# A minimal `openssl ca` setup: it is the openssl 3.0 command that takes fixed
# start and end dates.
ca_conf() {  # $1 = name
  mkdir -p "$1.db"; : > "$1.db/index"; echo 1000 > "$1.db/serial"
  cat > "$1.cnf" <<CNF
[ ca ]
default_ca = this
[ this ]
database = $work/$1.db/index
serial = $work/$1.db/serial
new_certs_dir = $work/$1.db
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[ any ]
commonName = supplied
[ v3_root ]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ v3_intermediate ]
basicConstraints = critical, CA:true, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[ v3_leaf ]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = \$ENV::SAN
CNF
}

ec_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
csr() { openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"; }
sign() {  # name issuer extensions start end [selfsign]
  local extra=()
  if [ "${6:-}" = selfsign ]; then extra=(-selfsign -keyfile "$1.key"); else extra=(-cert "$2.pem" -keyfile "$2.key"); fi
  SAN=${SAN:-DNS:unused} openssl ca -batch -notext -config "$2.cnf" -extensions "$3" \
    -startdate "$4" -enddate "$5" -in "$1.csr" -out "$1.pem" "${extra[@]}" 2>/dev/null
}
pin() { openssl x509 -in "$1.pem" -noout -pubkey | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64; }
unix() { date -u -d "$(openssl x509 -in "$1.pem" -noout "-$2" | cut -d= -f2)" +%s; }

ca_conf root; ec_key root; csr root "Linnet Test Root CA"; sign root root v3_root $start $end selfsign
ca_conf intermediate; ec_key intermediate; csr intermediate "Linnet Test Intermediate CA"
sign intermediate root v3_intermediate $start $end

ec_key leaf-ec; csr leaf-ec signal.linnet.test
SAN="DNS:signal.linnet.test, DNS:*.voice.linnet.test" sign leaf-ec intermediate v3_leaf $start $end
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out leaf-rsa.key 2>/dev/null
csr leaf-rsa signal.linnet.test
SAN="DNS:signal.linnet.test" sign leaf-rsa intermediate v3_leaf $start $end
ec_key other-host; csr other-host other.example.net
SAN="DNS:other.example.net" sign other-host intermediate v3_leaf $start $end
ec_key expired; csr expired signal.linnet.test
SAN="DNS:signal.linnet.test" sign expired intermediate v3_leaf 20200101000000Z 20210101000000Z

ec_key self-signed
openssl req -x509 -new -key self-signed.key -subj "/CN=signal.linnet.test" -days 7300 \
  -addext "subjectAltName = DNS:signal.linnet.test" -out self-signed.pem

ca_conf evil-root; ec_key evil-root; csr evil-root "Linnet Test Root CA"; sign evil-root evil-root v3_root $start $end selfsign
ec_key evil-leaf; csr evil-leaf signal.linnet.test
SAN="DNS:signal.linnet.test" sign evil-leaf evil-root v3_leaf $start $end

# Every certificate must verify as intended with openssl too (an independent check).
openssl verify -CAfile root.pem -untrusted intermediate.pem leaf-ec.pem leaf-rsa.pem other-host.pem >/dev/null
openssl verify -CAfile root.pem -untrusted intermediate.pem -verify_hostname signal.linnet.test leaf-ec.pem >/dev/null
refused() { if "$@" >/dev/null 2>&1; then echo "openssl accepted: $*" >&2; exit 1; fi; }
refused openssl verify -CAfile root.pem -untrusted intermediate.pem -verify_hostname signal.linnet.test other-host.pem
refused openssl verify -CAfile root.pem evil-leaf.pem
refused openssl verify -CAfile root.pem self-signed.pem
refused openssl verify -CAfile root.pem -untrusted intermediate.pem expired.pem

lit() { printf '    static let %s = """\n%s\n"""\n' "$1" "$(cat "$2")"; }
{
  echo "// Generated by Fixtures/make-tls-fixtures.sh with $(openssl version | cut -d' ' -f1-2). Do not edit."
  echo "// Test-only keys and certificates: they protect nothing."
  echo
  echo "enum TLSFixtures {"
  for n in root intermediate leaf-ec leaf-rsa other-host expired self-signed evil-root evil-leaf; do
    id=$(echo "$n" | sed -E 's/-(.)/\U\1/g')
    lit "${id}Certificate" "$n.pem"
  done
  for n in leaf-ec leaf-rsa other-host expired self-signed evil-leaf; do
    id=$(echo "$n" | sed -E 's/-(.)/\U\1/g')
    # PKCS#8 PEM ("BEGIN PRIVATE KEY") as openssl writes it; mbedtls parses it.
    lit "${id}Key" "$n.key"
  done
  echo "    /// base64(SHA-256(SubjectPublicKeyInfo DER)), RFC 7469 pin-sha256, computed by openssl."
  echo "    static let leafECPin = \"$(pin leaf-ec)\""
  echo "    static let intermediatePin = \"$(pin intermediate)\""
  echo "    static let rootPin = \"$(pin root)\""
  echo "    static let otherHostPin = \"$(pin other-host)\""
  echo "    static let selfSignedPin = \"$(pin self-signed)\""
  echo "    /// notBefore / notAfter as Unix seconds (openssl x509 -dates, converted by date)."
  echo "    static let leafECNotBefore: Int64 = $(unix leaf-ec startdate)"
  echo "    static let leafECNotAfter: Int64 = $(unix leaf-ec enddate)"
  echo "    static let expiredNotBefore: Int64 = $(unix expired startdate)"
  echo "    static let expiredNotAfter: Int64 = $(unix expired enddate)"
  echo "}"
} > "$out"
echo "wrote $out"
