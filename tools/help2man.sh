#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The man page qkv(1), made from the tool's own --help: `qkv --help` gives the commands, and
# `qkv COMMAND --help` each command's usage, description and options, so the page says what
# the binary it was made from does. Run at build time (the Makefile's $(BUILD)/qkv.1).
# Usage: tools/help2man.sh QKV > qkv.1
set -euo pipefail
qkv=$1

# Text for roff: a backslash as \e, a line that starts with . or ' guarded by \&.
esc() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

version=$("$qkv" --version | awk '{print $2}')
top=$("$qkv" --help)
commands=$(awk '/^  [a-z][a-z-]*  /{print $1}' <<<"$top")

cat <<EOF
.TH QKV 1 "" "qkv $version" "User Commands"
.SH NAME
qkv \- train, run and inspect Transformers from the command line
.SH SYNOPSIS
.B qkv
.I COMMAND
.RI [ options ]
.br
.B qkv
.I COMMAND
.B \-\-help
.br
.B qkv \-\-version
.SH DESCRIPTION
qkv trains encoder-decoder Transformers on parallel text and decoder-only language models on
plain text, translates, generates, scores and serves them over HTTP. Each command has its own
options; every command also reads options from a JSON file with
.BR \-\-config " " \fIFILE\fR
(the command line wins), and what a training run records in its directory is such a file.
.SH COMMANDS
EOF
while IFS= read -r line; do
  [[ $line =~ ^\ \ ([a-z-]+)\ +(.*)$ ]] || continue
  printf '.TP\n.B %s\n%s\n' "${BASH_REMATCH[1]}" "$(esc <<<"${BASH_REMATCH[2]}")"
done <<<"$top"

echo '.SH OPTIONS'
for c in $commands; do
  "$qkv" "$c" --help | awk -v cmd="$c" '
    function esc(s) { gsub(/\\/, "\\e", s); sub(/^[.\047]/, "\\\\&&", s); return s }
    function dash(s) { gsub(/-/, "\\-", s); return s }
    BEGIN { printf ".SS qkv %s\n.nf\n", cmd }
    /^options:$/ { opts = 1; print ".fi"; next }
    !opts { if ($0 != "") print esc($0); next }
    # "  -m, --model DIR    help" or "      --port N    help": the name, the placeholder, the help
    match($0, /^  (-[a-zA-Z], |    )--[a-z0-9-]+( [^ ]+)?  +/) {
      left = substr($0, 3, RLENGTH - 2); text = substr($0, RLENGTH + 1)
      sub(/ +$/, "", left)
      n = split(left, w, " ")
      head = ""
      if (w[1] ~ /^-[a-zA-Z],$/) { head = "\\fB" dash(substr(w[1], 1, 2)) "\\fR, "; k = 2 } else k = 1
      head = head "\\fB" dash(w[k]) "\\fR"
      if (n > k) head = head " \\fI" esc(w[k + 1]) "\\fR"
      printf ".TP\n%s\n%s\n", head, esc(text)
    }'
done

cat <<EOF
.SH EXIT STATUS
0 on success, 1 when the work failed (a file that cannot be read, a model that does not
load, a write that failed), 2 for a usage error (an unknown option, a value out of its
range).
.SH SEE ALSO
The README and docs/ of the qkv sources; the library's headers, include/qkv/*.h.
EOF
