#!/usr/bin/env bash
# Checks systemd/linnet.service: `systemd-analyze verify` must be clean,
# `systemd-analyze security` must rate it 2.0 or lower, and the settings its exposure
# score does not see must be there (LimitCORE=0: no core dumps holding the token).
# Prints `BENCH systemd_exposure <x> score`.
#
# usage: scripts/check-unit.sh [unit file]   (default systemd/linnet.service)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
unit=${1:-$top/systemd/linnet.service}
limit=2.0

# verify checks that ExecStart exists; where linnet is not installed, verify a copy
# whose ExecStart points at a binary that is (the path is all verify looks at).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check=$unit
if [ ! -x /usr/bin/linnet ]; then
  stand_in=$top/build/host/linnet
  [ -x "$stand_in" ] || stand_in=/bin/true
  sed "s|^ExecStart=/usr/bin/linnet|ExecStart=$stand_in|" "$unit" > "$tmp/linnet.service"
  check=$tmp/linnet.service
fi
if ! out=$(systemd-analyze verify "$check" 2>&1) || [ -n "$out" ]; then
  echo "systemd-analyze verify $(basename "$unit"): not clean" >&2
  echo "$out" >&2
  exit 1
fi

for setting in LimitCORE=0; do
  if ! grep -qx "$setting" "$unit"; then
    echo "$(basename "$unit"): $setting is missing" >&2
    exit 1
  fi
done

score=$(systemd-analyze security --offline=true "$check" 2>/dev/null |
        sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || { echo "no exposure figure from systemd-analyze security" >&2; exit 1; }
echo "BENCH systemd_exposure $score score"
if ! awk -v s="$score" -v l="$limit" 'BEGIN { exit !(s <= l) }'; then
  echo "exposure $score is above $limit" >&2
  exit 1
fi
