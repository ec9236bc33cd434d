#!/usr/bin/env bash
# Prints Linnet's version: the one `LinnetVersion.string` in Sources/Signaling/Signaling.swift
# (what `linnet version` and the User-Agent say), so the package, its tests and the
# Makefile never read it from a second place.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
file="$top/Sources/Signaling/Signaling.swift"
version=$(sed -n 's/^ *public static let string = "\([0-9][0-9A-Za-z.+~-]*\)"$/\1/p' "$file")
[ -n "$version" ] || { echo "cannot read the version (LinnetVersion.string) from $file" >&2; exit 1; }
echo "$version"
