#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's 60-second example: the code it shows is examples/hello_allreduce.c (from
# its #include on), and its two commands (build, run) work as written from a directory
# laid out like the repository root after the build, the run printing what the README
# says. Usage: check_readme_example.sh <source dir> <build dir>
set -euo pipefail
src=$1 build=$2
readme_code=$(awk '/^## A 60-second example/ { s = 1 } s && /^```c$/ { c = 1; next }
                   c && /^```$/ { exit } c { print }' "$src/README.md")
file_code=$(sed -n '/^#include <nccl.h>/,$p' "$src/examples/hello_allreduce.c")
if [ "$readme_code" != "$file_code" ]; then
    diff <(echo "$readme_code") <(echo "$file_code") || true
    echo "FAIL: README.md's example differs from examples/hello_allreduce.c"
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$src/include" "$src/examples" "$work/"
ln -s "$build" "$work/build"
# The indented commands of the section, up to the printed lines.
awk '/^## A 60-second example/ { s = 1 } /^It prints/ { s = 0 }
     s && /^    (cc|NCCL_SOCKET_IFNAME)/ { sub(/^    /, ""); print }' "$src/README.md" > "$work/cmds.sh"
[ "$(wc -l < "$work/cmds.sh")" -eq 2 ] || { cat "$work/cmds.sh"; echo "FAIL: expected 2 commands"; exit 1; }
(cd "$work" && unset LD_LIBRARY_PATH && bash -ex cmds.sh > out.txt)
cat "$work/out.txt"
for want in "rank 0: 1 4 6 8 ok" "rank 1: 1 4 6 8 ok" "all ranks ok"; do
    grep -qxF "$want" "$work/out.txt" || { echo "FAIL: no '$want'"; exit 1; }
done
echo "README example: the code is the file; its commands build and run it"
