#!/usr/bin/env bash
# Installs the Debian packages kiln builds and tests with (root, apt-get).
# Does nothing when they are all present already.
set -euo pipefail

# --arm64: what scripts/arm64.sh needs instead: the aarch64 cross compiler,
# qemu-user, and the -dev packages kiln links for arm64 (multiarch).
if [ "${1:-}" = "--arm64" ]; then
  arm=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
       libpcre2-dev:arm64 libutf8proc-dev:arm64 libjansson-dev:arm64 libssl-dev:arm64 libcurl4-openssl-dev:arm64
       libmicrohttpd-dev:arm64 libzip-dev:arm64 libpng-dev:arm64 libjpeg62-turbo-dev:arm64 libwebp-dev:arm64
       libsndfile1-dev:arm64 libsamplerate0-dev:arm64
       libfftw3-dev:arm64 zlib1g-dev:arm64)
  missing=()
  for p in "${arm[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && exit 0
  echo "deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo_cmd dpkg --add-architecture arm64
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
  exit 0
fi

pkgs=(build-essential cmake pkg-config clang clang-format
      libpcre2-dev libutf8proc-dev libjansson-dev libcurl4-openssl-dev libssl-dev libmicrohttpd-dev
      libzip-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libvulkan-dev
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
