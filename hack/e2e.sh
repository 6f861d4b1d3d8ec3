#!/usr/bin/env bash
# Runs the end-to-end tests (make e2e). On failure it ends with a summary a
# CI excerpt cannot miss: each failed test's own messages, then the last
# lines of every process log the harness kept for it.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${GO:=go}"
: "${TEST_FLAGS:=-count=1 -timeout 45m}"
export OPSWIRE_E2E_LOGS="${OPSWIRE_E2E_LOGS:-$PWD/.cache/e2e-logs}"
rm -rf "$OPSWIRE_E2E_LOGS"
mkdir -p .cache
out=.cache/e2e.out

# shellcheck disable=SC2086 # TEST_FLAGS is a list of flags
(cd test && $GO test $TEST_FLAGS -p 1 -v ./...) 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}

# The ten slowest top-level tests, to keep the run within its budget.
echo ">> the ten slowest end-to-end tests"
awk '/^--- (PASS|FAIL): / { t = $4; gsub(/[()s]/, "", t); sub(/:$/, "", $2); printf "%8.1fs  %s %s\n", t, $3, $2 }' "$out" |
	sort -rn | head -10
[ "$rc" -eq 0 ] && exit 0

# Last lines of every log the harness kept (failed tests only), then the
# failures themselves, last, where an excerpt of the output ends.
for dir in "$OPSWIRE_E2E_LOGS"/*/; do
	[ -d "$dir" ] || continue
	for f in "$dir"*; do
		case "$f" in
		*/apiserver.log | */etcd.log) n=8 ;;
		*) n=30 ;;
		esac
		echo "----- last $n lines of $f"
		tail -n "$n" "$f"
	done
done
echo
echo "=================== e2e failures ==================="
# Messages written by a top-level test (and its subtests) that failed.
awk '
	/^=== RUN   / { split($3, part, "/"); if (part[1] != cur) { cur = part[1]; buf = "" } next }
	/^[ \t]+[A-Za-z0-9_]+\.go:[0-9]+: / { buf = buf $0 "\n"; next }
	/^--- FAIL: / { split($3, part, "/"); if (part[1] == cur) { printf "%s\n%s", $0, buf; buf = "" } }
' "$out"
exit "$rc"
