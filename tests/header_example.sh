#!/bin/sh
# The C library as a user gets it: `cmake --install` into a prefix inside the
# build tree, then the example at the top of kiln.h, cut out as written,
# built with `pkg-config --cflags --libs kiln` (the shared library, found by
# its SONAME) and with --static (libkiln.a and Libs.private), must print what
# `kiln run --temp 0` prints for the same prompt.
# usage: header_example.sh BUILD_DIR CC [EXTRA_CFLAGS]   (run from tests/)
# KILN_RUN, when set, runs the built programs (a cross build: qemu-aarch64).
set -eu
build=$1
cc=$2
extra=${3:-}
run=${KILN_RUN:-}
prefix=$build/install-test
out=$build/header-example
rm -rf "$prefix" "$out"
mkdir -p "$out"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/kiln include/kiln.h lib/libkiln.a lib/pkgconfig/kiln.pc; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
# the shared library: a versioned file, its SONAME link and the dev link
soname=$(readelf -d "$prefix/lib/libkiln.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
case "$soname" in libkiln.so.[0-9]*) ;; *) echo "libkiln.so has no SONAME (got '$soname')" >&2; exit 1 ;; esac
[ -e "$prefix/lib/$soname" ] || { echo "no $soname installed" >&2; exit 1; }

# the example: the indented block of the header comment from its first
# #include to the closing brace of main, less the comment's margin
sed -n '/^ \*     #include <kiln.h>/,/^ \*     }$/p' "$prefix/include/kiln.h" | sed 's/^ \*     //; s/^ \*$//' >"$out/gen.c"
[ "$(wc -l <"$out/gen.c")" -gt 20 ] || { echo "no example found in kiln.h" >&2; exit 1; }
grep -q kiln_decode "$out/gen.c" && grep -q kiln_detok_push "$out/gen.c" || { echo "the example is not a token loop" >&2; exit 1; }

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shared: as the header says; kiln.pc's Libs carry the rpath to the prefix's lib, so it runs as built
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra "$out/gen.c" $(pkg-config --cflags --libs kiln) -o "$out/gen-shared"
readelf -d "$out/gen-shared" | grep -q "NEEDED.*\[$soname\]" || { echo "gen-shared does not need $soname" >&2; exit 1; }
# static: libkiln.a, then what it needs from Libs.private
libs=$(pkg-config --static --libs kiln | sed 's/-lkiln\b/-l:libkiln.a/')
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra "$out/gen.c" $(pkg-config --cflags kiln) $libs -o "$out/gen-static"
if readelf -d "$out/gen-static" | grep -q "NEEDED.*libkiln"; then echo "gen-static needs libkiln.so" >&2; exit 1; fi

model=../models/stories260K.gguf
prompt="Tom had a red"
want=$($run "$prefix/bin/kiln" run -m "$model" -p "$prompt" -n 40 --temp 0 2>/dev/null)
for g in gen-shared gen-static; do
  got=$($run "$out/$g" "$model" "$prompt" 40)
  if [ "$got" != "$want" ]; then
    printf '%s printed:\n%s\nkiln run printed:\n%s\n' "$g" "$got" "$want" >&2
    exit 1
  fi
done
$run "$out/gen-static" "$model" "$prompt" 2>/dev/null && { echo "a wrong argument count must fail" >&2; exit 1; }
$run "$out/gen-static" /nonexistent.gguf "$prompt" 4 2>"$out/err.txt" && { echo "a missing model must fail" >&2; exit 1; }
grep -q nonexistent "$out/err.txt" || { echo "the error does not name the file" >&2; exit 1; }
echo "kiln.h example: built shared ($soname) and static with pkg-config; both print kiln run's text:"
echo "$want"
