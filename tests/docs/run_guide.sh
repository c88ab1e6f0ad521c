#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the commands of one guide (docs/guide-*.md) as a reader would: every block fenced
# ```sh, in order, in one bash session (set -euo pipefail), from a scratch directory that
# looks like the repository root after the build (links to the sources and to the build
# directory as build/). Blocks fenced ```sh setup (clone, apt-get, the build itself) are
# what scripts/test.sh has already done, and are not run; nor is any other block.
# A block fenced ```text that comes next after a ```sh block is what that block prints
# (standard output and error together): each of its lines must be a whole line of the
# output, in the same order, where "..." stands for any text. Fenced ```text approx, any
# number may differ too (timings, counts), runs of spaces may be longer or shorter, and
# the lines may come in another order (a table sorted by time), each matching its own.
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
mkdir "$work/.out"
{
    echo "set -euo pipefail"
    echo "cd \"$work\""
    # Each block's output goes to .out/N and is shown once the block ends (or fails).
    echo "shown=0"
    echo "show() { [ \$shown = \$1 ] || { cat \"$work/.out/\$1\" >&3; shown=\$1; }; }"
    echo "exec 3>&1"
    # A fence may be indented (a block inside a numbered step): its indent is stripped.
    # The ```text block after a ```sh block is written to .out/N.want (first line: its mode).
    awk -v out="$work/.out" '
        /^ *```sh$/ { run = 1; n++; last = n; indent = index($0, "`") - 1
                      print "echo \"+ block " n "\""
                      print "trap \"show " n "\" EXIT"
                      print "exec > \"" out "/" n "\" 2>&1"
                      next }
        /^ *```text( approx)?$/ && last > 0 { want = out "/" last ".want"; last = 0
                      indent = index($0, "`") - 1
                      print ($0 ~ /approx$/ ? "approx" : "exact") > want; next }
        /^ *```/ { if (run) { print "exec 1>&3 2>&1"; print "show " n }
                   run = 0; want = ""; if (!/^ *```$/) last = 0; next }
        run { print substr($0, indent + 1) }
        want != "" { print substr($0, indent + 1) > want }' "$guide"
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
bash "$script"
echo "== $guide: every block ran"

# Each expected output against what its block printed.
python3 - "$work/.out" << 'EOF'
import glob, os, re, sys

NUM = r"[0-9]+(?:\.[0-9]+)?"
failed = 0
for want in sorted(glob.glob(os.path.join(sys.argv[1], "*.want"))):
    n = os.path.basename(want)[:-len(".want")]
    mode, *lines = open(want).read().splitlines()
    got = open(os.path.join(sys.argv[1], n), errors="replace").read().splitlines()
    at, used = 0, set()
    for line in lines:
        parts = []
        for piece in re.split(r"(\.\.\.|[0-9]+(?:\.[0-9]+)?| +)", line):
            if piece == "...":
                parts.append(".*")
            elif mode == "approx" and re.fullmatch(NUM, piece):
                parts.append(NUM)
            elif mode == "approx" and piece and piece.strip() == "":
                parts.append(" +")
            else:
                parts.append(re.escape(piece))
        pat = re.compile("".join(parts))
        tried = [i for i in range(len(got)) if i not in used] if mode == "approx" else \
            range(at, len(got))
        hit = next((i for i in tried if pat.fullmatch(got[i])), None)
        if hit is None:
            where = "" if mode == "approx" else f" (after its line {at})"
            print(f"FAIL: block {n} printed no line like{where}:\n  {line}")
            failed = 1
            break
        at = hit + 1
        used.add(hit)
    else:
        print(f"block {n}: its {len(lines)} expected lines were printed ({mode})")
sys.exit(failed)
EOF
echo "== $guide: every expected output matched"
