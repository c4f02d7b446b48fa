#!/bin/sh
# Usage: check.sh CLANGXX INCLUDE_DIR SOURCE
# Shows that Clang's thread-safety analysis, as Octet's clang builds enable it,
# refuses code that breaks base/thread_annotations.h's rules: SOURCE compiles
# as is and fails with OCTET_TSA_VIOLATE, each of its three violations named.
# Exit 77 (skip) when there is no clang.
clangxx="$1" include="$2" source="$3"
if [ -z "$clangxx" ] || ! command -v "$clangxx" >/dev/null 2>&1; then
  echo "no clang++: the thread-safety analysis is clang's"
  exit 77
fi
flags="-std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -I$include"
if ! "$clangxx" $flags "$source"; then
  echo "FAIL: the annotated example does not compile"
  exit 1
fi
out=$("$clangxx" $flags -DOCTET_TSA_VIOLATE "$source" 2>&1)
status=$?
printf '%s\n' "$out"
if [ $status -eq 0 ]; then
  echo "FAIL: code that breaks the lock annotations compiled"
  exit 1
fi
for expected in "reading variable 'value_' requires holding mutex 'mu_'" \
                "calling function 'AddLocked' requires holding mutex 'mu_'" \
                "writing variable 'value_' requires holding mutex 'mu_'"; do
  if ! printf '%s\n' "$out" | grep -q "$expected"; then
    echo "FAIL: no error saying: $expected"
    exit 1
  fi
done
echo "PASS: the analysis refuses all three violations"
