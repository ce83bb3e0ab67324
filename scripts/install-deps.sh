#!/usr/bin/env bash
# Installs the Debian packages listed in deps/apt-*.txt that are not installed yet.
# Idempotent: installs nothing (and does not touch apt) when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t wanted < <(cat deps/apt-*.txt | sed 's/#.*//' | tr -s ' \t' '\n' | grep -v '^$' | sort -u)
missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all ${#wanted[@]} Debian packages present"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "deps: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${#missing[@]} package(s)"
