#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a consumer against it
# three ways: find_package (shared and static) and pkg-config; and, when the
# build made it, imports the installed Python package from the prefix
# (Debian's python3; the extension finds the library relative to itself).
set -euo pipefail
build=$1 here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cmake --install "$build" --prefix "$t/prefix" > "$t/install.log"
mkdir "$t/src"; cp "$here/consumer.c" "$t/src/"; cp "$here/CMakeLists.txt.in" "$t/src/CMakeLists.txt"
cmake -S "$t/src" -B "$t/b" -DCMAKE_PREFIX_PATH="$t/prefix" > "$t/cfg.log" 2>&1 || { cat "$t/cfg.log"; exit 1; }
cmake --build "$t/b" > "$t/build.log" 2>&1 || { cat "$t/build.log"; exit 1; }
LD_LIBRARY_PATH="$t/prefix/lib" "$t/b/consumer_shared"
"$t/b/consumer_static"
export PKG_CONFIG_PATH="$t/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc "$t/src/consumer.c" -o "$t/pc" $(pkg-config --cflags --libs shadowsync)
LD_LIBRARY_PATH="$t/prefix/lib" "$t/pc"
if [ -d "$build/python/shadowsync" ]; then
    PYTHONPATH="$t/prefix/lib/python3/dist-packages" /usr/bin/python3 -c \
        'import shadowsync, sys; sys.exit(0 if issubclass(shadowsync.PeerFailed, shadowsync.Error) else 1)'
    echo "install: the Python package imports from the prefix"
fi
echo "install: find_package (shared, static) and pkg-config consumers ok"
