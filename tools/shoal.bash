# bash completion for shoal(1): commands, each command's options, the names
# of the user's systems and their groups (the registry and mailbox segments
# `shoal ls` reads, in $SHOAL_SHM_DIR), segments for `ring`, files for `run`
# and `types`. tests/tool_docs_test.c checks that every option a command's
# --help lists is offered here.

# The names of the systems whose registry is in the user's directory.
_shoal_systems()
{
	local dir=${SHOAL_SHM_DIR:-/dev/shm/shoal-$EUID} f
	for f in "$dir"/shoal.*.reg; do
		[[ -e $f ]] || continue
		f=${f##*/shoal.}
		printf '%s\n' "${f%.reg}"
	done
}

# The groups of system $1 that have a mailbox.
_shoal_groups()
{
	local dir=${SHOAL_SHM_DIR:-/dev/shm/shoal-$EUID} f
	for f in "$dir/shoal.$1.g."*; do
		[[ -e $f ]] || continue
		printf '%s\n' "${f##*/shoal.$1.g.}"
	done
}

# Every segment file of the user's directory, for `shoal ring`.
_shoal_segments()
{
	local dir=${SHOAL_SHM_DIR:-/dev/shm/shoal-$EUID} f
	for f in "$dir"/shoal.*; do
		[[ -f $f ]] && printf '%s\n' "${f##*/}"
	done
}

_shoal()
{
	local cur prev words cword
	_init_completion || return

	local commands="run stop restart reload logs ls stat top dump ring types metrics help"
	if ((cword == 1)); then
		COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur"))
		return
	fi

	local cmd=${words[1]} opts="" takes_value="" i operands=0
	case $cmd in
	run) opts="--check --host --name --log-dir --duration --status --help"
	     takes_value="--host --name --log-dir --duration --status" ;;
	stop|restart|reload) opts="--json --timeout --help" takes_value="--timeout" ;;
	logs) opts="--follow --timestamps --tail --json --log-dir --help"
	      takes_value="--tail --log-dir" ;;
	ls) opts="--json --help" ;;
	stat) opts="--json --check-retries --help" takes_value="--check-retries" ;;
	top) opts="--interval --count --sort --filter --json --help"
	     takes_value="--interval --count --sort --filter" ;;
	dump) opts="--ring --limit --hex --json --help" takes_value="--ring --limit" ;;
	ring) opts="--json --ring --check-retries --help" takes_value="--ring --check-retries" ;;
	types) opts="--prefix --output --help" takes_value="--prefix --output -o" ;;
	metrics) opts="--listen --help" takes_value="--listen" ;;
	help) COMPREPLY=($(compgen -W "$commands" -- "$cur")); return ;;
	*) return ;;
	esac

	case $prev in
	--log-dir) _filedir -d; return ;;
	--output|-o) _filedir; return ;;
	--status) COMPREPLY=($(compgen -W "auto live plain quiet" -- "$cur")); return ;;
	--sort) COMPREPLY=($(compgen -W "rate name dropped queued fill" -- "$cur")); return ;;
	esac
	if [[ " $takes_value " == *" $prev "* ]]; then
		return
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$opts" -- "$cur"))
		return
	fi

	# Count the operands before the word being completed.
	for ((i = 2; i < cword; i++)); do
		if [[ ${words[i]} == -* ]]; then
			continue
		elif [[ " $takes_value " == *" ${words[i - 1]} "* ]]; then
			continue
		fi
		operands=$((operands + 1))
	done

	case $cmd in
	run|types) _filedir '@(yaml|yml)' ;;
	ring) COMPREPLY=($(compgen -W "$(_shoal_segments)" -- "$cur")) ;;
	ls) ;;
	stat|top|metrics|reload)
		((operands == 0)) && COMPREPLY=($(compgen -W "$(_shoal_systems)" -- "$cur")) ;;
	stop|restart|logs|dump)
		local system=""
		for ((i = 2; i < cword; i++)); do
			[[ ${words[i]} == -* || " $takes_value " == *" ${words[i - 1]} "* ]] && continue
			system=${words[i]}
			break
		done
		if ((operands == 0)); then
			COMPREPLY=($(compgen -W "$(_shoal_systems)" -- "$cur"))
		elif ((operands == 1)); then
			COMPREPLY=($(compgen -W "$(_shoal_groups "$system")" -- "$cur"))
		fi ;;
	esac
} &&
	complete -F _shoal shoal
