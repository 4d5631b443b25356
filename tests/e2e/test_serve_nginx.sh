#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# qkv serve behind nginx (Debian's), started as this test's own process on a loopback port with
# the configuration docs/serving.md gives (written here from the same text): translations and
# completions through the proxy as without it; server-sent events pass through as they are
# made (the first event arrives while the generation still runs); a client that goes away is a
# connection nginx closes, so qkv stops its generation; the body limits agree (1 MiB passes
# through, one byte more is nginx's 413 as JSON, as qkv answers it).
# Usage: test_serve_nginx.sh QKV_BINARY.
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
PY=${QKV_PY:-/usr/bin/python3}
NGINX=${QKV_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
PID= NPID=
cleanup() {
  [ -n "$NPID" ] && kill -TERM "$NPID" 2>/dev/null
  [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit; }
json() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json; export PY
if [ ! -x "$NGINX" ]; then bad "nginx is not installed (scripts/install-deps.sh --test installs nginx-light)"; finish; fi

"$QKV" demo --out "$T/tm" --epochs 2 --train 2000 --threads 2 >/dev/null 2>&1
for i in $(seq 400); do echo "the cat sat on the mat and the dog ran to the red house $i"; done >"$T/text.txt"
"$QKV" train-lm --data "$T/text.txt" --d-model 32 --heads 2 --ffn 64 --layers 2 --context 32 \
  --batch 16 --lr 3e-3 --warmup 10 --steps 30 --threads 2 --quiet --out "$T/lm" >/dev/null 2>&1
check "two models" test -s "$T/tm/model.safetensors" -a -s "$T/lm/model.safetensors"
printf '%s\n' "a b c d e" "n a q" >"$T/src.txt"
"$QKV" translate --model "$T/tm" --input "$T/src.txt" --threads 2 >"$T/ref.txt"
"$QKV" generate --model "$T/lm" --prompt "the cat" --tokens 40 --seed 7 --temperature 0.8 --top-k 5 \
  --threads 2 >"$T/gen.txt"

# qkv serve, each decoder step paced (the test hook QKV_SERVE_STEP_DELAY_MS: 10 ms a step, so
# that a generation of 4096 tokens takes over 40 s whatever this machine's speed)
QKV_SERVE_STEP_DELAY_MS=10 "$QKV" serve --port 0 --threads 2 --model en-de="$T/tm" \
  --model story="$T/lm" --timeout 0 >"$T/qkv.out" 2>"$T/qkv.err" &
PID=$!
UP=
for _ in $(seq 600); do UP=$(sed -n 's|.* on http://\([^ ]*\)$|\1|p' "$T/qkv.out"); [ -n "$UP" ] && break; sleep 0.05; done
[ -n "$UP" ] || { bad "qkv serve did not start: $(head -c 300 "$T/qkv.err")"; finish; }

# nginx: the configuration of docs/serving.md, with this test's paths and ports
mkdir -p "$T/nginx"
nginx_conf() { # nginx_conf PORT
  cat <<EOF
daemon off;
worker_processes 1;
pid $T/nginx/nginx.pid;
error_log $T/nginx/error.log info;
$( [ "$(id -u)" = 0 ] && echo "user root root;" )
events { worker_connections 256; }
http {
  access_log $T/nginx/access.log;
  client_body_temp_path $T/nginx/body;
  proxy_temp_path $T/nginx/proxy;
  fastcgi_temp_path $T/nginx/fastcgi;
  uwsgi_temp_path $T/nginx/uwsgi;
  scgi_temp_path $T/nginx/scgi;
  upstream qkv {
    server $UP;
    keepalive 16;
  }
  server {
    listen 127.0.0.1:$1;
EOF
  sed -n '/^    # qkv serve: the proxy$/,/^    # end$/p' "$(dirname "$0")/../../docs/serving.md"
  cat <<EOF
  }
}
EOF
}
URL=
for _ in 1 2 3 4 5; do # a free port: a few tries
  port=$((20000 + RANDOM % 40000))
  nginx_conf $port >"$T/nginx/nginx.conf"
  "$NGINX" -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" 2>"$T/nginx/start.err" &
  NPID=$!
  for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$port/health" && { URL=http://127.0.0.1:$port; break; }
    kill -0 "$NPID" 2>/dev/null || break; sleep 0.05; done
  [ -n "$URL" ] && break
  kill -TERM "$NPID" 2>/dev/null; wait "$NPID" 2>/dev/null; NPID=
done
check "the configuration from docs/serving.md is there" grep -q 'proxy_pass http://qkv;' "$T/nginx/nginx.conf"
[ -n "$URL" ] || { bad "nginx did not start: $(head -c 400 "$T/nginx/start.err" "$T/nginx/error.log")"; finish; }
ok "nginx runs as this test's process on 127.0.0.1:$port"

got=$(curl -s -X POST "$URL/translate" -H 'Content-Type: application/json' \
        --data-binary '{"q": ["a b c d e", "n a q"], "source": "en", "target": "de"}' | json '"\n".join(d["translatedText"])')
check "POST /translate through nginx: qkv translate's text" test "$got" = "$(cat "$T/ref.txt")"
got=$(curl -s -X POST "$URL/translate" --data-urlencode 'q=n a q' -d source=en -d target=de | json 'd["translatedText"]')
check "a form body through nginx" test "$got" = "$(sed -n 2p "$T/ref.txt")"
req='{"model": "story", "prompt": "the cat", "max_tokens": 40, "seed": 7, "temperature": 0.8, "top_k": 5, "stream": true}'
curl -sN -X POST "$URL/v1/completions" --data-binary "$req" >"$T/sse.txt"
got=$(grep '^data: {' "$T/sse.txt" | sed 's/^data: //' | "$PY" -c "
import json, sys
print('the cat' + ''.join(json.loads(l)['choices'][0]['text'] for l in sys.stdin))")
check "a stream through nginx: qkv generate's text, then [DONE]" bash -c "[ '$got' = \"\$(cat '$T/gen.txt')\" ] && [ \"\$(grep -v '^\$' '$T/sse.txt' | tail -1)\" = 'data: [DONE]' ]"

# a generation of 4096 tokens (over 40 s): its first event arrives while it runs; the client
# then goes away, nginx closes its connection to qkv, and qkv stops generating
metric() { curl -s "http://$UP/metrics" | sed -n "s/^$1 //p"; }
curl -sN -X POST "$URL/v1/completions" \
  --data-binary '{"model": "story", "prompt": "the", "max_tokens": 4096, "stream": true}' | head -c 20 >"$T/first.txt"
tokens=$(metric qkv_tokens_generated_total)
check "the first event came through before the generation ended (tokens so far: $tokens)" \
  bash -c "grep -q '^data: {' '$T/first.txt' && [ '$tokens' -lt 4000 ]"
for _ in $(seq 3000); do [ "$(metric qkv_requests_in_flight)" = 1 ] && break; sleep 0.01; done
for _ in $(seq 50); do # the step under way when the client left may still add its token
  t1=$(metric qkv_tokens_generated_total); sleep 0.3; t2=$(metric qkv_tokens_generated_total)
  [ "$t1" = "$t2" ] && break
done
check "the client gone: qkv's request ended, its generation stopped ($t1 -> $t2 tokens)" \
  bash -c "[ '$(metric qkv_requests_in_flight)' = 1 ] && [ '$t1' = '$t2' ] && [ '$t2' -lt 4000 ]"

# the body limit: 1 MiB passes through to qkv, one byte more is refused by nginx as qkv would
body() { "$PY" -c "import sys; n = int(sys.argv[1]); h = '{\"q\": \"n a q\", \"source\": \"en\", \"target\": \"de\", \"pad\": \"'; print(h + 'x' * (n - len(h) - 2) + '\"}', end='')" "$1" >"$T/body.json"; }
body 1048576
code=$(curl -s -o "$T/out" -w '%{http_code}' -X POST "$URL/translate" -H 'Content-Type: application/json' --data-binary "@$T/body.json")
check "a body of exactly 1 MiB through nginx: qkv answers it (200)" test "$code" = 200
body 1048577
code=$(curl -s -o "$T/out" -w '%{http_code}' -X POST "$URL/translate" -H 'Content-Type: application/json' --data-binary "@$T/body.json")
check "one byte more: 413 from nginx, a JSON error as qkv's" bash -c "[ $code = 413 ] && json 'd[\"error\"]' <'$T/out' | grep -q 'larger than 1048576 bytes'"
code=$(curl -s -o "$T/out" -w '%{http_code}' -X POST "http://$UP/translate" -H 'Content-Type: application/json' --data-binary "@$T/body.json")
check "... and qkv itself answers it 413 the same way" bash -c "[ $code = 413 ] && json 'd[\"error\"]' <'$T/out' | grep -q 'at most 1048576'"

kill -TERM "$NPID"; wait "$NPID" 2>/dev/null; NPID=
kill -TERM "$PID"; wait "$PID"
check "qkv serve exits 0 on SIGTERM" test $? = 0
PID=
if grep -E "ERROR: (Address|Leak)Sanitizer|runtime error" "$T/qkv.err"; then bad "sanitizer reports"; fi
finish
