#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the commands of one guide (docs/guide-*.md) as a reader would: every block fenced
# ```sh, in order, in one bash session (set -euo pipefail), from a scratch directory that
# looks like the repository root after the build (links to the sources and to the build
# directory as build/). Blocks fenced ```sh setup (clone, apt-get, the build itself) are
# what scripts/test.sh has already done, and are not run; nor is any other block.
# Usage: run_guide.sh <guide.md> <source dir> <build dir>
set -euo pipefail
guide=$1 src=$2 build=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for entry in "$src"/*; do
    [ "$(basename "$entry")" = build ] || ln -s "$entry" "$work/$(basename "$entry")"
done
ln -s "$build" "$work/build"
script="$work/.guide.sh"
{
    echo "set -euo pipefail"
    echo "cd \"$work\""
    # A fence may be indented (a block inside a numbered step): its indent is stripped.
    awk '/^ *```sh$/ { run = 1; indent = index($0, "`") - 1; print "echo \"+ block " ++n "\""; next }
         /^ *```/ { run = 0; next }
         run { print substr($0, indent + 1) }' "$guide"
} > "$script"
grep -q "^echo \"+ block" "$script" || { echo "FAIL: $guide has no sh block"; exit 1; }
if grep -q "mpirun\|mpicc" "$script" && ! command -v mpirun > /dev/null; then
    echo "skipped: $guide runs mpirun, which is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    exit 77
fi
# Open MPI refuses root unless told; CI runs as root.
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
echo "== $guide: $(grep -c '^echo "+ block' "$script") blocks"
bash -x "$script"
echo "== $guide: every block ran"
