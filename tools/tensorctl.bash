# SPDX-License-Identifier: MIT
# bash completion for tensorctl: commands, each command's options, dtypes,
# --format choices, files, and tensor names from the running daemon
# (--socket on the line, $TENSORD_SOCKET, or the default socket).
# tensorctl itself answers (`tensorctl __complete WORD...`, tools/complete.c);
# this only splits the line and hands the answer to bash.
# Installed as share/bash-completion/completions/tensorctl; to try it
# from a build tree: source tools/tensorctl.bash

_tensorctl()
{
	local line=${COMP_LINE:0:COMP_POINT} cur= bcur pre wb= out c
	local -a words cands=()

	# split on blanks only: names hold ':' and '@', where bash splits
	read -ra words <<<"$line"
	if [[ ${#words[@]} -gt 1 && $line != *[[:blank:]] ]]; then
		cur=${words[-1]}
		unset 'words[-1]'
	fi
	local prog=${words[0]}
	[[ $prog == "~/"* ]] && prog=$HOME/${prog#"~/"}
	out=$("$prog" __complete "${words[@]:1}" "$cur" 2>/dev/null) || return 0

	# bash replaces only its own last word, which starts after the last
	# word break (':', '=') in ours: drop what comes before it
	bcur=${COMP_WORDS[COMP_CWORD]}
	[[ $COMP_WORDBREAKS == *:* ]] && wb+=:
	[[ $COMP_WORDBREAKS == *=* ]] && wb+==
	[[ $COMP_WORDBREAKS == *@* ]] && wb+=@
	pre=
	if [[ -n $wb && $cur == *["$wb"]* ]]; then
		pre=${cur%"${cur##*["$wb"]}"}
		bcur=${cur#"$pre"}
	fi
	while IFS= read -r c; do
		case $c in
		:files)
			compopt -o filenames 2>/dev/null
			mapfile -t -O "${#cands[@]}" cands < <(compgen -f -- "$bcur")
			;;
		:dirs)
			compopt -o filenames 2>/dev/null
			mapfile -t -O "${#cands[@]}" cands < <(compgen -d -- "$bcur")
			;;
		:nospace)
			compopt -o nospace 2>/dev/null
			;;
		?*)
			cands+=("${c#"$pre"}")
			;;
		esac
	done <<<"$out"
	COMPREPLY=("${cands[@]}")
}
complete -F _tensorctl tensorctl
