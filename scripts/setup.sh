#!/usr/bin/env bash
# Installs the Debian packages coverse builds and tests with. Idempotent: prints nothing
# and touches nothing when every package is already there.
set -euo pipefail

packages=(
    build-essential cmake ninja-build pkg-config
    liburing-dev libibverbs-dev rdma-core
    libasio-dev libboost-dev
    libgtest-dev libgmock-dev libbenchmark-dev
    clang clang-format libclang-rt-14-dev
    graphviz
    libpmix-dev openmpi-bin
    slurmctld slurmd slurm-client
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "coverse setup: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
