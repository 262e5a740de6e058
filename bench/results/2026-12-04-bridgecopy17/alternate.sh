#!/bin/sh
# SPDX-License-Identifier: MIT
# Alternated timed runs of shoal-bench-net, before and after (indicative: the
# machine is shared). $1: rounds; BASE: the build of main; NEW: this branch's
# build, whose tools/shoal is swapped for each variant's copy (VARIANTS:
# name=path ...). Writes $OUT/<variant>-<round>.md and .stderr.
set -eu
rounds=${1:-3}
: "${BASE:?}" "${NEW:?}" "${OUT:?}" "${VARIANTS:?}"
mkdir -p "$OUT"
for r in $(seq 1 "$rounds"); do
	date -u +%T >&2
	"$BASE/bench/shoal-bench-net" --short --only tput --contenders shoal-bridge,zeromq \
		> "$OUT/base-$r.md" 2> "$OUT/base-$r.stderr" || echo "base $r failed" >&2
	for v in $VARIANTS; do
		name=${v%%=*}
		cp "${v#*=}" "$NEW/tools/shoal"
		"$NEW/bench/shoal-bench-net" --short --only tput --contenders shoal-bridge,zeromq \
			> "$OUT/$name-$r.md" 2> "$OUT/$name-$r.stderr" || echo "$name $r failed" >&2
	done
done
