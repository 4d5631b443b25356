#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Bash completion for qkv, made from the tool's own --help (as tools/help2man.sh makes the
# man page): the commands, each command's options, and for an option's value what its
# placeholder says: files for FILE, directories for DIR, the names of a choice (relu|gelu|silu),
# nothing for a number. A command's leading words come from its usage line (qkv bench
# train|decode|..., qkv import marian). Run at build time (the Makefile's $(BUILD)/qkv.bash).
# Usage: tools/help2completion.sh QKV > qkv.bash
set -euo pipefail
qkv=$1
top=$("$qkv" --help)
commands=$(awk '/^  [a-z][a-z-]*  /{print $1}' <<<"$top" | tr '\n' ' ')

cat <<'EOF'
# bash completion for qkv; generated from qkv --help by tools/help2completion.sh
_qkv_words() { # the words of $1 that begin with the current word
    COMPREPLY=($(compgen -W "$1" -- "$cur"))
}
_qkv_files() {
    local IFS=$'\n'
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -f -- "$cur"))
}
_qkv_dirs() {
    local IFS=$'\n'
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -d -- "$cur"))
}
_qkv() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
EOF
printf '        _qkv_words "%s--help --version"\n' "$commands"
cat <<'EOF'
        return
    fi
    local cmd=${COMP_WORDS[1]}
    case "$cmd $prev" in
EOF
declare -A options leading
for c in $commands; do
  help=$("$qkv" "$c" --help)
  # leading words of the usage line: "qkv bench train|decode|..." or "qkv import marian"
  lead=$(sed -n '1s/^usage: qkv [a-z-]* \([a-z][a-z|-]*\) .*/\1/p' <<<"$help" | tr '|' ' ')
  leading[$c]=$lead
  names=""
  while IFS= read -r line; do
    [[ $line =~ ^\ \ (-([a-zA-Z]),\ |\ \ \ \ )--([a-z0-9-]+)(\ ([^ ]+))?\ \ + ]] || continue
    short=${BASH_REMATCH[2]} name=${BASH_REMATCH[3]} arg=${BASH_REMATCH[5]}
    names+=" --$name"
    [ -n "$short" ] && names+=" -$short"
    pattern="\"$c --$name\""
    [ -n "$short" ] && pattern+="|\"$c -$short\""
    case $arg in
      "") continue ;;                     # a flag: the next word is anything
      FILE) action='_qkv_files' ;;
      DIR) action='_qkv_dirs' ;;
      N|FLOAT|TEXT) action='COMPREPLY=()' ;; # a number or a text: nothing to offer
      *) action="_qkv_words \"${arg//|/ }\"" ;;
    esac
    printf '        %s) %s; return ;;\n' "$pattern" "$action"
  done <<<"$(sed -n '/^options:$/,$p' <<<"$help")"
  options[$c]=${names# }
done
cat <<'EOF'
    esac
    case "$cur" in
    -*)
        case "$cmd" in
EOF
for c in $commands; do
  printf '        %s) _qkv_words "%s" ;;\n' "$c" "${options[$c]}"
done
cat <<'EOF'
        esac
        ;;
    *)
        case "$cmd" in
EOF
for c in $commands; do
  [ -n "${leading[$c]}" ] || continue
  printf '        %s) [ "$COMP_CWORD" -eq 2 ] && _qkv_words "%s" || _qkv_files ;;\n' "$c" "${leading[$c]}"
done
cat <<'EOF'
        *) _qkv_files ;;
        esac
        ;;
    esac
}
complete -F _qkv qkv
EOF
