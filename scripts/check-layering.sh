#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layering rule of core/ (docs/architecture.md): a module includes only its own
# headers, core/common/, the public headers in include/, the code it shares with Braid's
# plugins (plugins/common/), and the headers of the modules
# below it, as listed by the deps_<module> variables of core/CMakeLists.txt (the same lists
# that give each module its include path, so an upward include also fails to compile; this
# check names the file and line, and also catches relative paths and includes of another
# module's private *_int.h). Prints every violation; exits 1 if there is any.
set -euo pipefail
root="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
core="$root/core"
cmake_file="$core/CMakeLists.txt"

# Modules and their allowed dependencies, from core/CMakeLists.txt.
declare -A deps
modules=$(sed -n 's/^set(BRAID_MODULES \(.*\))$/\1/p' "$cmake_file")
if [ -z "$modules" ]; then
    echo "check-layering: no BRAID_MODULES list in $cmake_file" >&2
    exit 2
fi
for m in $modules; do
    deps[$m]=$(sed -n "s/^set(deps_$m\(.*\))\$/\1/p" "$cmake_file")
done

# Which module owns each header name (basenames are unique across core/). core/device holds
# the kernels (CUDA, built apart) and the headers they share with exec: it depends on
# nothing, so only a module that lists it may include them.
# A module's subfolders (exec: host/ and cuda/) hold private headers of their own: only
# files of the same subfolder may include them (core/CMakeLists.txt gives each subfolder
# its own include path), so neither executor sees the other's.
declare -A owner subdir
for m in $modules common device; do
    for h in "$core/$m"/*.h "$core/$m"/*.def "$core/$m"/*/*.h; do
        [ -e "$h" ] || continue
        owner[$(basename "$h")]=$m
        d=$(dirname "$h")
        [ "$d" = "$core/$m" ] || subdir[$(basename "$h")]=${d#"$core"/}
    done
done

bad=0
for m in $modules; do
    for f in "$core/$m"/*.c "$core/$m"/*.h "$core/$m"/*/*.c "$core/$m"/*/*.h; do
        [ -e "$f" ] || continue
        while IFS=: read -r line inc; do
            name=${inc#*\"}
            name=${name%%\"*}
            where="${f#"$root"/}:$line"
            if [[ "$name" == */* && "$name" != plugin_api/* ]]; then
                echo "$where: includes \"$name\" by a path; use the module's header name"
                bad=1
                continue
            fi
            o=${owner[$name]:-}
            if [ -z "$o" ]; then
                # Public headers (include/) and system headers are allowed everywhere, and
                # so is what the core shares with Braid's plugins (plugins/common: br_tls.h),
                # which depends on nothing of core/.
                [ -e "$root/include/$name" ] && continue
                [ -e "$root/plugins/common/$name" ] && continue
                echo "$where: includes \"$name\", which no module of core/ and no public header provides"
                bad=1
                continue
            fi
            s=${subdir[$name]:-}
            if [ -n "$s" ] && [ "$(dirname "${f#"$core"/}")" != "$s" ]; then
                echo "$where: includes \"$name\", private to core/$s"
                bad=1
                continue
            fi
            [ "$o" = "$m" ] || [ "$o" = common ] && continue
            if [[ "$name" == *_int.h ]]; then
                echo "$where: includes \"$name\", module $o's private header"
                bad=1
                continue
            fi
            allowed=0
            for d in ${deps[$m]}; do
                [ "$d" = "$o" ] && allowed=1
            done
            if [ $allowed = 0 ]; then
                echo "$where: module $m includes \"$name\" of module $o, which is not below it (allowed: ${deps[$m]:-none})"
                bad=1
            fi
        done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
    done
done
if [ $bad = 0 ]; then
    echo "check-layering: every include in core/ points down the module order"
fi
exit $bad
