#!/usr/bin/env bash
# Fails unless the binary's dynamic dependencies are only libc, libm, libasound and the
# loader: the release promise (everything else is linked statically).
set -euo pipefail
bin=${1:?usage: check-needed.sh BINARY}
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
status=0
for lib in $needed; do
  case "$lib" in
    libc.so.6|libm.so.6|libasound.so.2|ld-linux-aarch64.so.1|ld-linux-x86-64.so.2) ;;
    *) echo "unexpected dynamic dependency: $lib" >&2; status=1 ;;
  esac
done
exit $status
