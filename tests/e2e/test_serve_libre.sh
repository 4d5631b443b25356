#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# qkv serve as LibreTranslate's clients call it, with two models (en-de and de-en: two demo
# models trained differently, so that which one answered shows): LibreTranslate's official
# Python client (libretranslatepy, from PyPI) translating, listing languages and getting the
# errors; JSON and form bodies; source/target choosing the model, unknown pairs and "auto"
# refused naming the pairs; multi-line texts line by line (empty lines kept); HTML's text nodes
# translated with the markup kept; API keys with a per-key limit; a broken model refused at
# start; and the bad input of each kind (a JSON error with the right status, the server lives).
# Usage: test_serve_libre.sh QKV_BINARY.
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
PY=${QKV_PY:-/usr/bin/python3}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT

# start NAME ARGS...: runs qkv serve --port 0 ARGS in the background; sets PID and URL
start() {
  local name=$1; shift
  "$QKV" serve --port 0 --threads 2 "$@" >"$T/$name.out" 2>"$T/$name.err" &
  PID=$!; PIDS+=("$PID"); URL=
  for _ in $(seq 600); do
    URL=$(sed -n 's|.* on \(http://[^ ]*\)$|\1|p' "$T/$name.out" 2>/dev/null)
    [ -n "$URL" ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$URL" ]; then bad "$name: the server did not start: $(head -c 300 "$T/$name.err")"; return 1; fi
}
json() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json; export PY
# post PATH JSON: the body of the answer; $T/code receives the status
post() { curl -s -o "$T/body" -w '%{http_code}' -X POST "$URL$1" -H 'Content-Type: application/json' \
           --data-binary "$2" >"$T/code"; cat "$T/body"; }
# expect_code NAME CODE PATTERN PATH JSON: the status and an error message matching PATTERN
expect_code() {
  local name=$1 code=$2 pat=$3 body
  body=$(post "$4" "$5")
  if [ "$(cat "$T/code")" = "$code" ] && json 'd["error"]' <<<"$body" 2>/dev/null | grep -qE -- "$pat"; then ok "$name"
  else bad "$name: got $(cat "$T/code") $(head -c 300 <<<"$body")"; fi
}
# cli MODEL TEXT...: qkv translate's line for each text
cli() { local m=$1; shift; printf '%s\n' "$@" | "$QKV" translate --model "$m" --threads 2; }

"$QKV" demo --out "$T/ende" --epochs 2 --train 2000 --threads 2 >/dev/null 2>&1
"$QKV" demo --out "$T/deen" --epochs 1 --train 1500 --threads 2 >/dev/null 2>&1
check "two demo models" test -s "$T/ende/model.safetensors" -a -s "$T/deen/model.safetensors"
S1="a b c d e" S2="j i h g f e d c b a" S3="n a q"
want_ende=$(cli "$T/ende" "$S1" "$S2" "$S3" | paste -sd'|')
want_deen=$(cli "$T/deen" "$S1" "$S2" "$S3" | paste -sd'|')
check "the two models translate differently (so the test can tell them apart)" test "$want_ende" != "$want_deen"

# ---- a broken model at start: a clear error naming it, nothing listens, exit 1
mkdir -p "$T/broken" && echo '{}' >"$T/broken/config.json"
"$QKV" serve --port 0 --model en-de="$T/ende" --model xx-yy="$T/broken" >"$T/broken.out" 2>"$T/broken.err"
rc=$?
check "a model that does not load: exit 1 naming it, nothing served" bash -c "
  [ $rc = 1 ] && grep -q 'model xx-yy' '$T/broken.err' && ! grep -q 'http://' '$T/broken.out'"
"$QKV" serve --port 0 --model a="$T/ende" --model a="$T/deen" >/dev/null 2>"$T/err"
check "two models of one name: refused" grep -q "two models named a" "$T/err"
"$QKV" serve --port 0 --model "=$T/ende" >/dev/null 2>"$T/err"
check "an empty name: refused" grep -q "the name before '='" "$T/err"

# ---- two models: the pair chooses
printf 'key-one\n# a comment\nkey-two 3\n' >"$T/keys"
start two --model en-de="$T/ende" --model de-en="$T/deen" --max-batch-tokens 8 || exit 1
check "prints each model" bash -c "grep -q 'translation model en-de' '$T/two.out' && grep -q 'on http://' '$T/two.out'"
body=$(curl -s "$URL/languages")
check "GET /languages: each model's source and targets" bash -c "[ \"\$(json 'sorted((l[\"code\"], l[\"name\"], tuple(l[\"targets\"])) for l in d)' <<<'$body')\" = \"[('de', 'German', ('en',)), ('en', 'English', ('de',))]\" ]"
check "POST /languages as well (the npm client)" bash -c "curl -s -X POST '$URL/languages' | grep -q '\"code\":\"de\"'"
check "GET /v1/models lists both, with their pairs" bash -c "curl -s '$URL/v1/models' | json '[(m[\"id\"], m[\"source\"], m[\"target\"]) for m in d[\"data\"]]' | grep -qF \"[('en-de', 'en', 'de'), ('de-en', 'de', 'en')]\""
body=$(curl -s "$URL/frontend/settings")
check "GET /frontend/settings: the limits and the first pair" bash -c "json 'd[\"charLimit\"] > 0 and d[\"language\"][\"source\"][\"code\"] in (\"en\", \"de\") and d[\"keyRequired\"] is False' <<<'$body' | grep -q True"
got=$(post /translate "{\"q\": [\"$S1\", \"$S2\", \"$S3\"], \"source\": \"en\", \"target\": \"de\"}" | json '"|".join(d["translatedText"])')
check "source en, target de: the en-de model's translations" test "$got" = "$want_ende"
got=$(post /translate "{\"q\": [\"$S1\", \"$S2\", \"$S3\"], \"source\": \"de\", \"target\": \"en\"}" | json '"|".join(d["translatedText"])')
check "source de, target en: the de-en model's" test "$got" = "$want_deen"
got=$(curl -s -X POST "$URL/translate" --data-urlencode "q=$S2" -d source=de -d target=en | json 'd["translatedText"]')
check "a form body (application/x-www-form-urlencoded) as LibreTranslate's clients send" test "$got" = "$(cut -d'|' -f2 <<<"$want_deen")"
expect_code "an unknown pair: 400 naming the pairs available" 400 'no model translates "en" into "fr" \(pairs: (en->de, de->en|de->en, en->de)\)' /translate '{"q": "a", "source": "en", "target": "fr"}'
expect_code "source auto: 400, no detector" 400 'no language detector' /translate '{"q": "a", "source": "auto", "target": "de"}'
expect_code "no source or target with two models: 400" 400 'name "source" and "target"' /translate '{"q": "a"}'
expect_code "POST /detect: 400, no detector" 400 'no language detector' /detect '{"q": "a"}'

# ---- lines and HTML
q=$(printf '%s\n\n%s\r\n  \n%s' "$S1" "$S2" "$S3")
got=$(post /translate "$("$PY" -c 'import json,sys; print(json.dumps({"q": sys.argv[1], "source": "en", "target": "de"}))' "$q")" | json 'd["translatedText"]' | od -c)
want=$(IFS='|' read -r a b c <<<"$want_ende"; printf '%s\n\n%s\r\n  \n%s\n' "$a" "$b" "$c" | od -c)
check "a text of lines: each translated, empty and blank lines and CR LF kept" test "$got" = "$want"
html='<p class="x">a b c d e</p>
<!-- n a q --><ul><li>j i h g f e d c b a</li><li> n a q & </li></ul><script>var a = "b c";</script>'
nodes=("a b c d e" "j i h g f e d c b a" "n a q &")
cli "$T/ende" "${nodes[@]}" >"$T/nodes.txt"
want=$("$PY" - "$T/nodes.txt" <<'EOF'
import html, sys
t = [html.escape(l.rstrip("\n"), quote=False) for l in open(sys.argv[1])]
print('<p class="x">%s</p>\n<!-- n a q --><ul><li>%s</li><li> %s </li></ul><script>var a = "b c";</script>' % tuple(t))
EOF
)
body=$(post /translate "$("$PY" -c 'import json,sys; print(json.dumps({"q": sys.argv[1], "source": "en", "target": "de", "format": "html"}))' "$html")")
got=$(json 'd["translatedText"]' <<<"$body")
check "format html: text nodes translated (entities read, output escaped), tags, comments and scripts kept" test "$got" = "$want"
[ "$got" = "$want" ] || printf '  got  %s\n  want %s\n' "$got" "$want"
expect_code "HTML whose tag does not end: 400 naming the byte" 400 'tag, comment or script at byte 7 does not end' /translate '{"q": "<p>a b <b", "source": "en", "target": "de", "format": "html"}'
expect_code "HTML whose comment does not end: 400" 400 'at byte 0 does not end' /translate '{"q": "<!-- a", "source": "en", "target": "de", "format": "html"}'
lines=$("$PY" -c 'import json; print(json.dumps({"q": "a\n" * 1025, "source": "en", "target": "de"}))')
expect_code "more than 1024 lines: 413" 413 'more than 1024 lines' /translate "$lines"
big=$("$PY" -c 'import json; print(json.dumps({"q": "a " * 9000, "source": "en", "target": "de"}))')
expect_code "a text over 16384 bytes: 413" 413 'at most 16384' /translate "$big"

# ---- bad bodies: each a JSON error with its status; the server lives
form() { curl -s -o "$T/body" -w '%{http_code}' -X POST "$URL/translate" --data-binary "$1"; }
code=$(form 'q=a%ZZ&source=en&target=de')
check "a form with a bad %-escape: 400" bash -c "[ $code = 400 ] && json 'd[\"error\"]' <'$T/body' | grep -q 'not percent-encoded'"
code=$(form 'q=a&q=b&source=en&target=de')
check "a form giving a field twice: 400" bash -c "[ $code = 400 ] && json 'd[\"error\"]' <'$T/body' | grep -q 'twice'"
code=$(form 'q=a%C3%28&source=en&target=de')
check "a form whose text is invalid UTF-8 once decoded: 400" bash -c "[ $code = 400 ] && json 'd[\"error\"]' <'$T/body' | grep -q 'not valid UTF-8'"
code=$(form 'q=a%00b&source=en&target=de')
check "a form with a NUL byte: 400" test "$code" = 400
code=$(form 'q=a&source=en&target=de&alternatives=two')
check "a form's number that is not one: 400" bash -c "[ $code = 400 ] && json 'd[\"error\"]' <'$T/body' | grep -q 'alternatives'"
expect_code "beam wider than the batch: 400" 400 'a beam of 16 takes 16 rows of the batch: this server has 8' /translate '{"q": "a", "source": "en", "target": "de", "beam": 16}'
expect_code "a target of the wrong type: 400" 400 '"target" must be a string' /translate '{"q": "a", "source": "en", "target": 5}'
check "still healthy after the bad requests" bash -c "curl -sf '$URL/health' | grep -q '\"models\":\\[\"en-de\",\"de-en\"\\]'"
# 300 random bodies (seeded): forms of random bytes and %-escapes, HTML of random tags,
# entities and text, lines of random bytes: each answered with a status of JSON (200, 400 or
# 413), and the server lives on
"$PY" - "$URL" >"$T/random.out" 2>&1 <<'EOF'
import http.client, json, random, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
rng = random.Random(7)
pieces = ["<", ">", "</", "<!--", "-->", "&", "&amp;", "&#", "&#x1F600;", "&#xD800;", ";", "\n",
          "\r\n", " ", "a b", "n a q", "<p>", "</p>", "<script>", "</script>", "<b", "\u00e9",
          "\u0000", "%", "%0", "%zz", "%00", "%C3%28", "+", "=", "&&", "q=", "=a"]
bad = 0
for i in range(300):
    kind = i % 3
    text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
    if kind == 0:
        body, ctype = text.encode(), "application/x-www-form-urlencoded"
    else:
        req = {"q": text, "source": "en", "target": "de"}
        if kind == 1:
            req["format"] = "html"
        body, ctype = json.dumps(req).encode(), "application/json"
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/translate", body=body, headers={"Content-Type": ctype})
    r = c.getresponse()
    data = r.read()
    try:
        ok = r.status in (200, 400, 413) and isinstance(json.loads(data), dict)
    except ValueError:
        ok = False
    if not ok:
        bad += 1
        print("bad answer", r.status, body[:80], data[:120])
    c.close()
print("random bodies: %d not answered with JSON 200/400/413" % bad)
EOF
check "300 random forms, HTML and lines: each a JSON answer (200, 400 or 413)" grep -q "^random bodies: 0 not" "$T/random.out"
grep '^bad answer' "$T/random.out" | head -3 | sed 's/^/  /'
check "still healthy after the random bodies" bash -c "curl -sf '$URL/health' | grep -q ok"

# ---- LibreTranslate's own Python client
if "$PY" -c 'import libretranslatepy' 2>/dev/null; then
  "$PY" - "$URL" "$S2" "$(cut -d'|' -f2 <<<"$want_ende")" "$(cut -d'|' -f2 <<<"$want_deen")" >"$T/lt.out" 2>&1 <<'EOF'
import json, sys, urllib.error
from libretranslatepy import LibreTranslateAPI
url, text, ende, deen = sys.argv[1:5]
lt = LibreTranslateAPI(url)
print("translate en-de", lt.translate(text, "en", "de") == ende)
print("translate de-en", lt.translate(text, "de", "en") == deen)
langs = lt.languages()
print("languages", sorted(l["code"] for l in langs) == ["de", "en"])
for call, want in ((lambda: lt.translate(text, "en", "fr"), "no model translates"),
                   (lambda: lt.translate(text, "auto", "de"), "no language detector"),
                   (lambda: lt.detect(text), "no language detector")):
    try:
        call()
        print("error", False)
    except urllib.error.HTTPError as e:
        print("error", e.code == 400 and want in json.loads(e.read())["error"])
EOF
  check "libretranslatepy: translate (both pairs), languages, and its errors (400, the message)" \
    bash -c "[ \$(grep -c ' True$' '$T/lt.out') = 6 ] && ! grep -qv ' True$' '$T/lt.out'"
  grep -v ' True$' "$T/lt.out" | head -5 | sed 's/^/  /'
else
  bad "libretranslatepy is not installed (scripts/install-deps.sh --test installs it)"
fi
kill -TERM "$PID"; wait "$PID"
check "the two-model server exits 0 on SIGTERM" test $? = 0

# ---- API keys: a key needed; a key's requests a minute limited; /languages open
start keys --model en-de="$T/ende" --api-keys "$T/keys" || exit 1
expect_code "no API key: 403" 403 'API key is needed' /translate '{"q": "a", "source": "en", "target": "de"}'
expect_code "an unknown API key: 403" 403 'invalid API key' /translate '{"q": "a", "source": "en", "target": "de", "api_key": "nope"}'
codes=
for k in 1 2 3 4; do
  post /translate '{"q": "a", "source": "en", "target": "de", "api_key": "key-two"}' >/dev/null
  codes="$codes$(cat "$T/code") "
done
check "a key of 3 requests a minute: the fourth is 429 ($codes)" test "$codes" = "200 200 200 429 "
check "429 names the limit" bash -c "json 'd[\"error\"]' <'$T/body' | grep -q '3 a minute'"
post /translate '{"q": "a", "source": "en", "target": "de", "api_key": "key-one"}' >/dev/null
check "a key without a limit: 200" test "$(cat "$T/code")" = 200
if "$PY" -c 'import libretranslatepy' 2>/dev/null; then
  got=$("$PY" -c "from libretranslatepy import LibreTranslateAPI as L; print(L('$URL', api_key='key-one').translate('$S1', 'en', 'de'))" 2>&1)
  check "libretranslatepy with its api_key" test "$got" = "$(cut -d'|' -f1 <<<"$want_ende")"
fi
check "GET /languages needs no key" bash -c "curl -sf '$URL/languages' | grep -q '\"en\"'"
check "GET /frontend/settings says a key is required" bash -c "curl -s '$URL/frontend/settings' | grep -q '\"keyRequired\":true'"
kill -TERM "$PID"; wait "$PID"
printf 'k 1 2\n' >"$T/badkeys"
"$QKV" serve --port 0 --model "$T/ende" --api-keys "$T/badkeys" >/dev/null 2>"$T/err"
check "a keys file with a bad line: exit 2 naming the line" bash -c "[ $? = 2 ] || true; grep -q 'badkeys:1: a line is KEY or KEY LIMIT' '$T/err'"
"$QKV" serve --port 0 --model "$T/ende" --api-keys "$T/nokeys" >/dev/null 2>"$T/err"
check "a keys file that does not exist: refused naming it" grep -q "nokeys" "$T/err"

# ---- one model named by its directory: source and target are not checked (any client works);
# a model that writes "& <" (a copy task learnt in a second): HTML's output escaped
for i in $(seq 300); do printf 'a b\t& <\n'; done >"$T/amp.tsv"
"$QKV" train --data "$T/amp.tsv" --out "$T/amp" --d-model 16 --heads 2 --ffn 32 --layers 1 --epochs 8 \
  --batch 32 --lr 0.01 --threads 2 --quiet >/dev/null 2>&1
start amp --model "$T/amp" || exit 1
if [ "$(echo 'a b' | "$QKV" translate --model "$T/amp" --threads 2)" = "& <" ]; then
  got=$(post /translate '{"q": "<i>a b</i> a b", "format": "html"}' | json 'd["translatedText"]')
  check "format html: a translation's & and < escaped in the markup ($got)" test "$got" = "<i>&amp; &lt;</i> &amp; &lt;"
  got=$(post /translate '{"q": "a b"}' | json 'd["translatedText"]')
  check "format text: the same translation as it is" test "$got" = "& <"
else
  bad "the copy model did not learn to write '& <'"
fi
kill -TERM "$PID"; wait "$PID"
start one --model "$T/ende" || exit 1
got=$(post /translate "{\"q\": \"$S1\", \"source\": \"xx\", \"target\": \"yy\"}" | json 'd["translatedText"]')
check "one model without a pair translates whatever the languages are called" test "$got" = "$(cut -d'|' -f1 <<<"$want_ende")"
check "GET /languages: empty (no pair named)" test "$(curl -s "$URL/languages")" = "[]"
kill -TERM "$PID"; wait "$PID"
if grep -E "ERROR: (Address|Leak)Sanitizer|runtime error" "$T"/*.err; then bad "sanitizer reports"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
