#!/usr/bin/env bash
# readme-skeleton.sh README OUT: writes the README's trainer skeleton (the
# first ```c block after the line "A trainer's skeleton") to OUT, so the
# tests compile and run it as printed.
set -euo pipefail
readme=$1 out=$2
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
tr -d '\r' < "$readme" | awk '
    /^A trainer.s skeleton/ { after = 1 }
    after && /^```c$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside' > "$tmp"
if ! grep -q 'int main(void)' "$tmp"; then
    echo "readme-skeleton: no C block with main() after \"A trainer's skeleton\" in $readme" >&2
    exit 1
fi
mv "$tmp" "$out"
trap - EXIT
