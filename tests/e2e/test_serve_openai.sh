#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# qkv serve's /v1/completions as OpenAI's official Python client (the openai package, from
# PyPI) calls it: a completion and a stream with the client's own types, each with qkv
# generate's text for the same seed and sampling; the models listed; and the client's error
# classes for qkv's errors (400 BadRequestError for a bad value and for an option qkv does not
# implement, 404 NotFoundError for an unknown model and for /v1/chat/completions: qkv's language
# models are trained on raw text, so a chat-shaped request has no meaning for them).
# Usage: test_serve_openai.sh QKV_BINARY.
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
PY=${QKV_PY:-/usr/bin/python3}
PID=
cleanup() { [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

if ! "$PY" -c 'import openai; openai.OpenAI' 2>/dev/null; then
  bad "the openai package is not installed (scripts/install-deps.sh --test installs it)"
  echo "$pass passed, $fail failed"; exit 1
fi
for i in $(seq 400); do echo "the cat sat on the mat and the dog ran to the red house $i"; done >"$T/text.txt"
"$QKV" train-lm --data "$T/text.txt" --d-model 32 --heads 2 --ffn 64 --layers 2 --context 32 \
  --batch 16 --lr 3e-3 --warmup 10 --steps 30 --threads 2 --quiet --out "$T/lm" >/dev/null 2>&1
check "train-lm trained a model" test -s "$T/lm/model.safetensors"
"$QKV" generate --model "$T/lm" --prompt "the cat" --tokens 40 --seed 7 --temperature 0.8 --top-k 5 \
  --threads 2 >"$T/gen.txt"
"$QKV" serve --port 0 --threads 2 --model story="$T/lm" >"$T/out" 2>"$T/err" &
PID=$!
URL=
for _ in $(seq 600); do
  URL=$(sed -n 's|.* on \(http://[^ ]*\)$|\1|p' "$T/out"); [ -n "$URL" ] && break; sleep 0.05
done
[ -n "$URL" ] || { bad "the server did not start: $(head -c 300 "$T/err")"; echo "$pass passed, $fail failed"; exit 1; }

"$PY" - "$URL" "$(cat "$T/gen.txt")" >"$T/client.out" 2>&1 <<'EOF'
import sys
import openai
url, want = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
print("models", [m.id for m in client.models.list()] == ["story"])
r = client.completions.create(model="story", prompt="the cat", max_tokens=40, seed=7,
                              temperature=0.8, extra_body={"top_k": 5})
print("completion", "the cat" + r.choices[0].text == want)
print("usage", r.usage.completion_tokens == 40 and r.choices[0].finish_reason == "length"
      and r.model == "story")
stream = client.completions.create(model="story", prompt="the cat", max_tokens=40, seed=7,
                                   temperature=0.8, extra_body={"top_k": 5}, stream=True)
chunks = [c.choices[0].text for c in stream]
print("stream", "the cat" + "".join(chunks) == want and len(chunks) >= 1)
def fails(kind, text, **kw):
    try:
        client.completions.create(model=kw.pop("model", "story"), prompt="the", **kw)
    except kind as e:
        return text in str(e)
    return False
print("bad value", fails(openai.BadRequestError, "max_tokens", max_tokens=5000))
print("unsupported option", fails(openai.BadRequestError, '"n" is not supported', n=3))
print("unknown model", fails(openai.NotFoundError, 'no model "gpt-x"', model="gpt-x"))
try:
    client.chat.completions.create(model="story", messages=[{"role": "user", "content": "hi"}])
    print("chat", False)
except openai.NotFoundError as e:
    print("chat", "not chat models" in str(e))
EOF
for what in models completion usage stream "bad value" "unsupported option" "unknown model" chat; do
  check "openai client: $what" grep -qx "$what True" "$T/client.out"
done
grep -v ' True$' "$T/client.out" | head -8 | sed 's/^/  /'
kill -TERM "$PID"; wait "$PID"
check "exits 0 on SIGTERM" test $? = 0
PID=
if grep -E "ERROR: (Address|Leak)Sanitizer|runtime error" "$T"/err; then bad "sanitizer reports"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
