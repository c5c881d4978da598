#!/usr/bin/env bash
# readme-skeleton.sh README OUT: writes the README's trainer skeleton (its
# first ```c block) to OUT, so the tests compile and run it as printed.
set -euo pipefail
readme=$1 out=$2
awk '/^```c$/ { inside = 1; next } /^```$/ && inside { exit } inside' "$readme" > "$out.tmp"
if ! grep -q 'int main(void)' "$out.tmp"; then
    echo "readme-skeleton: no C block with main() in $readme" >&2
    rm -f "$out.tmp"
    exit 1
fi
mv "$out.tmp" "$out"
