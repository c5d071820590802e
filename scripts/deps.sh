#!/usr/bin/env bash
# Installs the Debian packages kiln builds and tests with (root, apt-get).
# Does nothing when they are all present already.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang clang-format
      libpcre2-dev libutf8proc-dev libjansson-dev libcurl4-openssl-dev libssl-dev libmicrohttpd-dev
      libzip-dev libpng-dev libvulkan-dev
      libsndfile1-dev libsamplerate0-dev libfftw3-dev zlib1g-dev espeak-ng
      python3 nodejs chromium nginx-light)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Debian's own nodejs ships npm separately (NodeSource's includes it)
if ! command -v npm >/dev/null 2>&1; then
  echo "deps: installing npm"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends npm
fi
