#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install what building and testing Braid needs on Debian 12 (run as root, or with sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config check libsubunit-dev libfabric-dev libfabric-bin
      libhwloc-dev iproute2 procps)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi
