# SPDX-License-Identifier: MIT
#
# What bench/ab-builds and bench/ab-ring share, sourced by both: the
# NAME=BUILD arguments checked, and the directory the runs go to.
# $tool names the script in messages.

# ab_names BENCH SPEC...: checks each NAME=BUILD (a name of letters, digits,
# '_', '.', '-', given once; BUILD/bench/BENCH executable) and sets names[]
# in their order. Exits 2 on the first bad one.
ab_names() {
	local bench=$1 s n b m
	shift
	names=()
	[ $# -ge 2 ] || { echo "$tool: give at least two NAME=BUILD" >&2; usage >&2; exit 2; }
	for s in "$@"; do
		n=${s%%=*} b=${s#*=}
		[[ $n =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "$tool: bad name '$n'" >&2; exit 2; }
		for m in "${names[@]}"; do
			[ "$m" != "$n" ] || { echo "$tool: name '$n' given twice" >&2; exit 2; }
		done
		[ -x "$b/bench/$bench" ] ||
			{ echo "$tool: no $b/bench/$bench (build it first)" >&2; exit 2; }
		names+=("$n")
	done
}

# ab_out DIR: sets out to DIR, or to a new directory under /tmp when DIR is
# empty, creates it and says where it is.
ab_out() {
	out=$1
	if [ -z "$out" ]; then
		out=$(mktemp -d "/tmp/shoal-$tool.XXXXXX") || exit 1
	fi
	mkdir -p "$out" || exit 1
	echo "$tool: runs in $out" >&2
}
