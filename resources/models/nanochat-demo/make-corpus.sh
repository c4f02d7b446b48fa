#!/usr/bin/env bash
# Builds the demo model's training corpus from public-domain texts that Debian
# ships, one document per file (what `octet train prepare` expects):
#
#   bible-kjv, bible-kjv-text  The King James Version of the Bible (1611). Its
#                              copyright has expired (/usr/share/doc/bible-kjv-text/
#                              copyright); one file per chapter (1,189).
#   dict-devil                 Ambrose Bierce, "The Devil's Dictionary" (1911),
#                              "A Public Domain Text, Copyright Expired"
#                              (/usr/share/doc/dict-devil/copyright); one file per
#                              entry (~1,000).
#
# usage: make-corpus.sh OUT_DIR      (installs the packages with apt-get when missing)
set -euo pipefail
out=${1:?usage: make-corpus.sh OUT_DIR}

need=()
command -v bible >/dev/null 2>&1 || need+=(bible-kjv bible-kjv-text)
[ -f /usr/share/dictd/devil.dict.dz ] || need+=(dict-devil)
if [ ${#need[@]} -gt 0 ]; then
  echo "make-corpus.sh: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >&2
fi

rm -rf "$out"
mkdir -p "$out/kjv" "$out/devil"

# KJV: `bible -l0` prints "Genesis 1" headers and "  1 In the beginning ..." verses
# (no wrapping). A chapter becomes "Genesis 1\n\n" + its verses, one per line.
bible -l0 Gen1:1-Rev22:21 | awk -v dir="$out/kjv" '
  /^ +[0-9]+ / { sub(/^ +[0-9]+ /, ""); print > file; next }
  /^$/ { next }
  { if (file) close(file); n++; file = sprintf("%s/%04d.txt", dir, n); print $0 "\n" > file }
'

# The Devil's Dictionary: entries start with "WORD, part-of-speech." at the start
# of a line after a blank line; the preface before the first entry and dictfmt's
# trailing alphabet line are skipped.
zcat /usr/share/dictd/devil.dict.dz | awk -v dir="$out/devil" '
  BEGIN { started = 0 }
  /^ abcdefghijklmnopqrstuvwxyz$/ { next }
  prev_blank && /^[A-Z][A-Z'"'"' .-]*, [a-z]/ { if (file) close(file); n++; started = 1;
                                               file = sprintf("%s/%04d.txt", dir, n) }
  { prev_blank = ($0 ~ /^[ \t]*$/) }
  started { print > file }
'

echo "make-corpus.sh: $(ls "$out/kjv" | wc -l) KJV chapters, $(ls "$out/devil" | wc -l) dictionary entries, $(cat "$out"/kjv/* "$out"/devil/* | wc -c) bytes in $out" >&2
