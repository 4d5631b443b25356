#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of qkv import marian: the directory it writes (and that the other commands
# read it), and every refusal with its reason: not a Marian model, an architecture qkv does
# not represent, a vocabulary that does not fit, missing files, an output directory that holds
# a model; weights stored as float16, bfloat16, pytorch_model.bin and shards; qkv translate and
# qkv serve give transformers' translations. The Hugging Face
# directories are the small random-weight ones of tests/parity/make_marian_reference.py (in $QKV_PARITY_DIR; the
# numbers against transformers are tests/unit/test_marian.c's). A few seconds.
# Usage: test_marian.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
PY=${QKV_PY:-/usr/bin/python3}   # with torch and safetensors (tests/run.sh)
P=${QKV_PARITY_DIR:-build/parity}
HF=$P/marian_shared_swish
if [ ! -f "$HF/config.json" ]; then
  echo "no $HF (make build/parity/.stamp writes it)"; bad "reference directories present"
  echo "$pass passed, $fail failed"; exit 1
fi
# variant NAME: a copy of the shared_swish directory to break
variant() { rm -rf "$T/$1"; cp -r "$HF" "$T/$1"; }
# set_key DIR KEY JSON_VALUE: config.json's KEY set (or removed with the value "DELETE")
set_key() {
  "$PY" - "$1/config.json" "$2" "$3" <<'PY'
import json, sys
p, k, v = sys.argv[1:]
c = json.load(open(p))
if v == "DELETE": c.pop(k, None)
else: c[k] = json.loads(v)
json.dump(c, open(p, "w"))
PY
}

# ---- the directory
"$QKV" import marian "$HF" --out "$T/m" 2>"$T/err" || bad "import: $(cat "$T/err")"
check "writes config, model, vocabularies, both SentencePiece models and text.json" \
  bash -c "cd '$T/m' && ls config.json model.safetensors src_vocab.txt tgt_vocab.txt source.spm target.spm text.json >/dev/null"
check "the .spm files are Marian's, byte for byte" \
  bash -c "cmp -s '$HF/source.spm' '$T/m/source.spm' && cmp -s '$HF/target.spm' '$T/m/target.spm'"
check "config.json holds Marian's options" \
  bash -c "grep -q '\"act\":.*\"silu\"' '$T/m/config.json' && grep -q '\"pos_layout\":.*\"sin_cos\"' '$T/m/config.json' && grep -q '\"decoder_start\":.*\"<pad>\"' '$T/m/config.json' && grep -q '\"suppress_pad\":.*true' '$T/m/config.json' && grep -q '\"tie\":.*\"all\"' '$T/m/config.json' && grep -q '\"forced_eos\":.*true' '$T/m/config.json'"
check "the vocabularies start with qkv's reserved tokens" \
  bash -c "[ \"\$(head -4 '$T/m/tgt_vocab.txt' | tr '\n' ' ')\" = '<unk> <pad> <bos> <eos> ' ]"
expect_fail "a second import onto the model is refused" "already holds|--overwrite" \
  "$QKV" import marian "$HF" --out "$T/m"
check "... and --overwrite replaces it" bash -c "'$QKV' import marian '$HF' --out '$T/m' --overwrite 2>/dev/null"

# ---- the output is never the input, nor holds it, nor lies inside it (claiming it with
# --overwrite removed the input's config.json, model.safetensors and SentencePiece models)
variant self
for out in "$T/self" "$T/self/sub" "$T/self/." "$T"; do
  expect_fail "--out $out over the input is refused" "is the input|is inside the input|holds the input" \
    "$QKV" import marian "$T/self" --out "$out" --overwrite
done
ln -s "$T/self" "$T/self-link"
expect_fail "... also through a link" "is the input" "$QKV" import marian "$T/self-link" --out "$T/self" --overwrite
check "... and the input is whole" bash -c "for f in config.json model.safetensors source.spm target.spm vocab.json; do cmp -s '$T/self/'\$f '$HF/'\$f || exit 1; done"
# --overwrite over a trained run leaves only the import's files (a stale checkpoint was then
# resumed over the imported model)
awk 'BEGIN { for (i = 0; i < 40; i++) print "a b c\tc b a" }' >"$T/tiny.tsv"
"$QKV" train --data "$T/tiny.tsv" --d-model 8 --heads 2 --ffn 16 --layers 1 --batch 8 \
  --num-steps 4 --epochs 1 --threads 1 --quiet --out "$T/trained" >/dev/null 2>&1
"$QKV" import marian "$HF" --out "$T/trained" --overwrite 2>/dev/null
check "import --overwrite over a trained run leaves only the import's files ($(ls "$T/trained" | tr '\n' ' '))" \
  bash -c "cd '$T/trained' && test -s model.safetensors && ! ls -d checkpoint.safetensors metrics.jsonl training.png train.json validation.json best epoch-* 2>/dev/null"
# a FIFO (no writer) as any file of the directory is refused at once, never waited on
for f in config.json vocab.json model.safetensors source.spm target.spm; do
  variant "fifo-$f" && rm "$T/fifo-$f/$f" && mkfifo "$T/fifo-$f/$f"
  expect_fail "import: $f a FIFO" "$f: is a FIFO or pipe, not a regular file" \
    timeout 120 "$QKV" import marian "$T/fifo-$f" --out "$T/o-fifo"
done

# ---- the command line
expect_fail "no kind" "which kind" "$QKV" import
expect_fail "an unknown kind" "unknown kind 'bert'" "$QKV" import bert "$HF" --out "$T/x"
expect_fail "no --out" "needs HF_DIR and --out" "$QKV" import marian "$HF"
check "--help on stdout" bash -c "'$QKV' import --help | grep -q 'qkv import marian HF_DIR|RELEASE --out DIR'"
expect_fail "a directory that does not exist" "config.json" "$QKV" import marian "$T/nowhere" --out "$T/x"
echo "{\"out\": \"$T/viacfg\"}" >"$T/imp.json"
check "--config gives --out" bash -c "'$QKV' import marian '$HF' --config '$T/imp.json' 2>/dev/null && test -s '$T/viacfg/model.safetensors'"
echo '{"beam": 4}' >"$T/bad.json"
expect_fail "--config: an unknown key names the file" 'bad.json: unknown key "beam"' \
  "$QKV" import marian "$HF" --config "$T/bad.json" --out "$T/x2"

# ---- what qkv cannot represent is refused with the reason, and nothing is written
variant bart; set_key "$T/bart" model_type '"bart"'
expect_fail "another model type" '"model_type" is "bart", not "marian"' \
  "$QKV" import marian "$T/bart" --out "$T/o1"
check "... and no model is written" test ! -e "$T/o1/model.safetensors"
variant prenorm; set_key "$T/prenorm" normalize_before true
expect_fail "pre-norm (normalize_before)" 'normalize_before.*post-norm' \
  "$QKV" import marian "$T/prenorm" --out "$T/o2"
variant act; set_key "$T/act" activation_function '"gelu_new"'
expect_fail "an activation qkv lacks" 'activation "gelu_new"' "$QKV" import marian "$T/act" --out "$T/o3"
variant heads; set_key "$T/heads" decoder_attention_heads 2
expect_fail "encoder and decoder of different shapes" 'heads 4 and 2' \
  "$QKV" import marian "$T/heads" --out "$T/o4"
variant start; set_key "$T/start" decoder_start_token_id 0
expect_fail "decoding started from another token than <pad>" 'starts from id 0, not the pad' \
  "$QKV" import marian "$T/start" --out "$T/o5"
variant bad; set_key "$T/bad" bad_words_ids '[[5], [6]]'
expect_fail "bad words other than <pad>" 'bad_words_ids' "$QKV" import marian "$T/bad" --out "$T/o6"
variant forced; set_key "$T/forced" forced_eos_token_id 3
expect_fail "</s> forced as another token" 'forced_eos_token_id" 3 is not the end' \
  "$QKV" import marian "$T/forced" --out "$T/o17"
variant learned; set_key "$T/learned" static_position_embeddings false
expect_fail "learned positions" 'learned positions' "$QKV" import marian "$T/learned" --out "$T/o7"
variant vocab; set_key "$T/vocab" vocab_size 500; set_key "$T/vocab" decoder_vocab_size 500
expect_fail "a vocabulary smaller than the embedding" 'no token has id|embedding rows' \
  "$QKV" import marian "$T/vocab" --out "$T/o8"
variant pad; set_key "$T/pad" pad_token_id 5; set_key "$T/pad" decoder_start_token_id 5
set_key "$T/pad" bad_words_ids '[[5]]'
expect_fail "a pad id that is not vocab.json's <pad>" 'needs <unk>, <pad> with id 5' \
  "$QKV" import marian "$T/pad" --out "$T/o9"
variant nospm; rm "$T/nospm/target.spm"
expect_fail "no target.spm" 'target.spm: missing' "$QKV" import marian "$T/nospm" --out "$T/o10"
variant noweights; rm "$T/noweights/model.safetensors"
expect_fail "no weights at all" 'model.safetensors: missing .and no pytorch_model.bin' \
  "$QKV" import marian "$T/noweights" --out "$T/o11"
variant extra
"$PY" - "$T/extra/model.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
import numpy as np
t = load_file(sys.argv[1]); t["model.encoder.layernorm_embedding.weight"] = np.ones(16, np.float32)
save_file(t, sys.argv[1])
PY
expect_fail "a tensor qkv has no place for (a LayerNorm on the embeddings)" \
  "layernorm_embedding.weight' has no place" "$QKV" import marian "$T/extra" --out "$T/o12"
variant int
"$PY" - "$T/int/model.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1]); t["final_logits_bias"] = t["final_logits_bias"].astype("int64")
save_file(t, sys.argv[1])
PY
expect_fail "integer weights" "final_logits_bias' is not floating-point" \
  "$QKV" import marian "$T/int" --out "$T/o13"
# what every reader of the imported model would refuse is refused at import, naming the input,
# and nothing is written: a null activation (it was read as gelu), empty, junk or truncated
# SentencePiece models, a NaN or an Inf among the weights
variant nullact; set_key "$T/nullact" activation_function null
expect_fail "\"activation_function\": null" '"activation_function" must be a string \(it is null\)' \
  "$QKV" import marian "$T/nullact" --out "$T/o14"
check "... and nothing is written" test ! -e "$T/o14"
variant spm-empty; : >"$T/spm-empty/source.spm"
variant spm-junk; echo junk >"$T/spm-junk/target.spm"
variant spm-cut; head -c 3000 "$HF/source.spm" >"$T/spm-cut/source.spm"
for v in spm-empty spm-junk spm-cut; do
  expect_fail "$v: refused at import" "$v/(source|target).spm: not a SentencePiece model" \
    "$QKV" import marian "$T/$v" --out "$T/o-$v"
  check "... and nothing is written" test ! -e "$T/o-$v"
done
for bad in nan inf; do
  variant "w-$bad"
  /usr/bin/python3 - "$T/w-$bad/model.safetensors" "$bad" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1]); w = t["model.decoder.layers.0.fc1.weight"].copy()
w[1, 2] = float(sys.argv[2]); t["model.decoder.layers.0.fc1.weight"] = w
save_file(t, sys.argv[1])
PY
  expect_fail "a weight that is $bad" "model.safetensors: the weights of qkv's tensor 'decoder.0.ffn.W1' hold $bad at element" \
    "$QKV" import marian "$T/w-$bad" --out "$T/o-w-$bad"
  check "... and nothing is written" test ! -e "$T/o-w-$bad"
done

# ---- weights as hub checkpoints store them: float16 and bfloat16 safetensors, converted at
# load, give the model that numpy's (torch's) conversion to float32 gives
for dt in float16 bfloat16; do
  variant "$dt"; variant "${dt}_f32"
  "$PY" - "$T/$dt/model.safetensors" "$T/${dt}_f32/model.safetensors" "$dt" <<'PY'
import sys, torch
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1]); d = getattr(torch, sys.argv[3])
save_file({k: v.to(d) for k, v in t.items()}, sys.argv[1])
save_file({k: v.to(d).float() for k, v in t.items()}, sys.argv[2])
PY
  check "$dt safetensors import as their float32 conversion" bash -c "
    '$QKV' import marian '$T/$dt' --out '$T/o_$dt' 2>/dev/null &&
    '$QKV' import marian '$T/${dt}_f32' --out '$T/o_${dt}_f32' 2>/dev/null &&
    cmp -s '$T/o_$dt/model.safetensors' '$T/o_${dt}_f32/model.safetensors' &&
    ! cmp -s '$T/o_$dt/model.safetensors' '$T/m/model.safetensors'"
done

# ---- positions stored in the file (older transformers saved them): Marian's table is
# accepted, anything else refused
variant pos
"$PY" - "$T/pos/model.safetensors" <<'PY' 2>/dev/null
import sys
import numpy as np
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
angle = np.arange(128)[:, None] / np.power(10000.0, 2.0 * np.arange(8) / 16)
w = np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)
t["model.encoder.embed_positions.weight"] = w; t["model.decoder.embed_positions.weight"] = w
save_file(t, sys.argv[1])
t["model.decoder.embed_positions.weight"] = w[:, ::-1].copy()
save_file(t, sys.argv[1] + ".bad")
PY
check "Marian's positions in the file are accepted" \
  bash -c "'$QKV' import marian '$T/pos' --out '$T/o14' 2>/dev/null && cmp -s '$T/o14/model.safetensors' '$T/m/model.safetensors'"
mv "$T/pos/model.safetensors.bad" "$T/pos/model.safetensors"
expect_fail "other positions are refused" "not the \[sin \| cos\] sinusoidal table" \
  "$QKV" import marian "$T/pos" --out "$T/o15"

# ---- pytorch_model.bin, read without Python, gives the same model: as save_pretrained
# writes it (tied tensors under one name), as older transformers wrote it (the tied
# embeddings under each of their names, sharing one storage), and sharded with an index
variant bin; variant bin2; variant shards
(cd "$T/bin" && "$PY" -c "
import torch, safetensors.torch as st
torch.save(st.load_file('model.safetensors'), 'pytorch_model.bin')" && rm model.safetensors)
(cd "$T/bin2" && "$PY" -c "
import torch, safetensors.torch as st
sd = st.load_file('model.safetensors'); e = sd['model.shared.weight']
sd.update({'model.encoder.embed_tokens.weight': e, 'model.decoder.embed_tokens.weight': e,
           'lm_head.weight': e})
torch.save(sd, 'pytorch_model.bin')" && rm model.safetensors)
(cd "$T/shards" && "$PY" -c "
import json, torch, safetensors.torch as st
sd = st.load_file('model.safetensors'); names = sorted(sd); half = len(names) // 2
parts = {'pytorch_model-00001-of-00002.bin': names[:half], 'pytorch_model-00002-of-00002.bin': names[half:]}
for f, ns in parts.items(): torch.save({n: sd[n] for n in ns}, f)
json.dump({'metadata': {}, 'weight_map': {n: f for f, ns in parts.items() for n in ns}},
          open('pytorch_model.bin.index.json', 'w'))" && rm model.safetensors)
for v in bin bin2 shards; do
  check "pytorch_model.bin ($v) imports to the same model" bash -c "
    '$QKV' import marian '$T/$v' --out '$T/o_$v' 2>/dev/null &&
    cmp -s '$T/o_$v/model.safetensors' '$T/m/model.safetensors'"
done
"$PY" - "$T/shards/pytorch_model.bin.index.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j["weight_map"]["lm_head.weight"] = "../elsewhere.bin"
json.dump(j, open(sys.argv[1], "w"))
PY
expect_fail "an index naming a file outside the directory" 'not mapped to a file name beside' \
  "$QKV" import marian "$T/shards" --out "$T/o18"

# ---- text in, text out: qkv translate (SentencePiece in, detokenised text out) equals
# transformers' generate decoded by MarianTokenizer, line for line; --max-len 23 with the
# per-source limit off is generate(max_new_tokens=24), which forces </s> as token 24
LIM=(--max-len 23 --max-len-a 0 --max-len-b 23)
# (shared_source_pieces: most outputs hold pieces only the source SentencePiece model knows,
# rendered as MarianTokenizer renders them)
for n in shared_swish separate_gelu shared_relu_untied shared_source_pieces; do
  "$QKV" import marian "$P/marian_$n" --out "$T/t_$n" 2>/dev/null || bad "import $n"
  check "$n: qkv translate gives transformers' greedy text" bash -c "
    '$QKV' translate --model '$T/t_$n' ${LIM[*]} <'$P/marian_$n.de' 2>/dev/null | cmp -s - '$P/marian_$n.greedy.en'"
  check "$n: --beam 4 --beam-stop hf --length-penalty 1 gives generate(num_beams=4)'s text" bash -c "
    '$QKV' translate --model '$T/t_$n' ${LIM[*]} --beam 4 --beam-stop hf --length-penalty 1 \
      <'$P/marian_$n.de' 2>/dev/null | cmp -s - '$P/marian_$n.beam4.en'"
done
# ---- qkv serve answers as qkv translate does on Marian's models (decoding starts from <pad>,
# <pad> is never produced, </s> forced at the limit, typed reserved tokens are text): every
# sentence in one request, and each alone from concurrent clients that the server batches
serve_start() { # serve_start DIR: qkv serve in the background; sets SERVER and URL
  "$QKV" serve --model "$1" --port 0 --threads 2 >"$T/serve.out" 2>"$T/serve.err" &
  SERVER=$!; URL=
  for _ in $(seq 200); do
    URL=$(sed -n 's|.* on \(http://[^ ]*\)$|\1|p' "$T/serve.out"); [ -n "$URL" ] && break; sleep 0.05
  done
  [ -n "$URL" ] || bad "qkv serve $1 did not start: $(head -c 300 "$T/serve.err")"
}
for n in shared_swish shared_source_pieces; do
  M=$T/t_$n
  { cat "$P/marian_$n.de"; printf '%s\n' "Ein <pad> Mann." "</s> <unk> Hund" "<s>"; } >"$T/$n.src"
  "$QKV" translate --model "$M" <"$T/$n.src" >"$T/$n.cli" 2>/dev/null || bad "qkv translate $n"
  serve_start "$M"
  /usr/bin/python3 -c 'import json, sys; print(json.dumps({"q": open(sys.argv[1]).read().splitlines()}))' \
    "$T/$n.src" >"$T/$n.req"
  curl -s -X POST "$URL/translate" -H 'Content-Type: application/json' --data-binary @"$T/$n.req" |
    /usr/bin/python3 -c 'import json, sys; print("\n".join(json.load(sys.stdin)["translatedText"]))' \
    >"$T/$n.one" 2>/dev/null
  check "$n: qkv serve, every sentence in one request, answers as qkv translate ($(wc -l <"$T/$n.src") sentences)" \
    cmp -s "$T/$n.one" "$T/$n.cli"
  i=0
  while IFS= read -r line; do
    i=$((i + 1))
    /usr/bin/python3 -c 'import json, sys; print(json.dumps({"q": sys.argv[1]}))' "$line" >"$T/$n.q$i"
    curl -s -X POST "$URL/translate" -H 'Content-Type: application/json' \
      --data-binary @"$T/$n.q$i" -o "$T/$n.a$i" &
    [ $((i % 8)) -eq 0 ] && sleep 0.02 # clients join a running batch at different steps
  done <"$T/$n.src"
  wait $(jobs -p | grep -v "^$SERVER$")
  for k in $(seq "$i"); do
    /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["translatedText"])' \
      "$T/$n.a$k" 2>/dev/null || echo "(no answer)"
  done >"$T/$n.each"
  check "$n: qkv serve, each sentence from its own concurrent client, answers as qkv translate" \
    cmp -s "$T/$n.each" "$T/$n.cli"
  kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null
done

# ---- Marian's own release format (a directory or its zip: .npz, vocabulary .yml,
# decoder.yml, .spm), written from random models with Marian's names: the model is the one
# transformers' convert_marian_to_pytorch makes of it, and translates as that does
for n in release_shared release_separate; do
  R=$P/marian_$n
  "$QKV" import marian "$R" --out "$T/rd_$n" 2>"$T/err" || bad "import the $n release: $(cat "$T/err")"
  "$QKV" import marian "$R.zip" --out "$T/rz_$n" 2>"$T/err" || bad "import the $n zip: $(cat "$T/err")"
  "$QKV" import marian "${R}_hf" --out "$T/rh_$n" 2>/dev/null || bad "import ${n}_hf"
  check "$n: the release, its zip and transformers' conversion of it give one model" bash -c "
    for f in model.safetensors src_vocab.txt tgt_vocab.txt source.spm target.spm; do
      cmp -s '$T/rd_$n/'\$f '$T/rh_$n/'\$f && cmp -s '$T/rz_$n/'\$f '$T/rh_$n/'\$f || exit 1; done"
  check "$n: qkv translate --beam 1 gives transformers' greedy text" bash -c "
    '$QKV' translate --model '$T/rd_$n' ${LIM[*]} --beam 1 <'$R.de' 2>/dev/null | cmp -s - '$R.greedy.en'"
  check "$n: --beam 4 --beam-stop hf --length-penalty 1 gives generate(num_beams=4)'s text" bash -c "
    '$QKV' translate --model '$T/rz_$n' ${LIM[*]} --beam 4 --beam-stop hf --length-penalty 1 \
      <'$R.de' 2>/dev/null | cmp -s - '$R.beam4.en'"
done
for n in release_shared release_separate; do
  check "$n: with no options, decoding is decoder.yml's (beam-size, normalize): transformers' generate(num_beams, length_penalty)" bash -c "
    '$QKV' translate --model '$T/rd_$n' ${LIM[*]} <'$P/marian_$n.de' 2>/dev/null |
      cmp -s - '$P/marian_$n.default.en'"
  check "$n: ... and the command line overrides it (--beam 1: greedy)" bash -c "
    '$QKV' translate --model '$T/rd_$n' ${LIM[*]} --beam 1 <'$P/marian_$n.de' 2>/dev/null |
      cmp -s - '$P/marian_$n.greedy.en'"
done
check "decoder.yml's beam-size and normalize are the model's decoding defaults (generation.json)" \
  bash -c "grep -q '\"beam\": 3' '$T/rd_release_shared/generation.json' &&
           grep -q '\"length_penalty\": 0.6' '$T/rd_release_shared/generation.json' &&
           grep -q '\"beam\": 5' '$T/rd_release_separate/generation.json'"
# releases qkv refuses, with the reason
release() { rm -rf "$T/$1"; cp -r "$P/marian_release_shared" "$T/$1"; }
release ensemble; sed -i 's/^models:$/models:\n  - other.npz/' "$T/ensemble/decoder.yml"
expect_fail "an ensemble of models" 'an ensemble of 2 models' \
  "$QKV" import marian "$T/ensemble" --out "$T/o19"
release outside; sed -i 's/  - opus.spm.transformer/  - ..\/opus.spm.transformer/' "$T/outside/decoder.yml"
expect_fail "decoder.yml naming a file outside the release" "names '../opus.spm.transformer.*not a file beside it" \
  "$QKV" import marian "$T/outside" --out "$T/o20"
release prenorm
"$PY" - "$T/prenorm" <<'PY'
import glob, sys, numpy as np
f = glob.glob(sys.argv[1] + "/*.npz")[0]
d = dict(np.load(f))
yml = bytes(d["special:model.yml"].astype(np.uint8)).decode().replace('transformer-preprocess: ""', "transformer-preprocess: n")
d["special:model.yml"] = np.frombuffer(yml.encode(), dtype=np.int8)
np.savez(f, **d)
PY
expect_fail "a pre-norm Marian model (transformer-preprocess: n)" '"transformer-preprocess: n"' \
  "$QKV" import marian "$T/prenorm" --out "$T/o21"
release vocabyml; sed -i '$d' "$T/vocabyml/opus.spm.vocab.yml"
expect_fail "a vocabulary .yml without the model's last piece" '637 pieces .and <pad>., but the model has 638' \
  "$QKV" import marian "$T/vocabyml" --out "$T/o22"
mkdir -p "$T/nodec" && cp "$P/marian_release_shared/source.spm" "$T/nodec/" &&
  (cd "$T/nodec" && zip -q ../nodec.zip source.spm)
expect_fail "a zip without decoder.yml" 'no decoder.yml in the zip' \
  "$QKV" import marian "$T/nodec.zip" --out "$T/o23"

# ---- a multi-target model: --target-lang fra leads every source with >>fra<<, as
# MarianTokenizer reads ">>fra<< text"
MT=$P/marian_shared_multi_target
"$QKV" import marian "$MT" --out "$T/multi" 2>/dev/null || bad "import shared_multi_target"
check "multi-target: --target-lang fra gives transformers' text of '>>fra<< ...' (greedy)" bash -c "
  '$QKV' translate --model '$T/multi' --target-lang fra ${LIM[*]} <'$MT.de' 2>/dev/null |
    cmp -s - '$MT.greedy.en'"
check "multi-target: ... and of beam 4" bash -c "
  '$QKV' translate --model '$T/multi' --target-lang fra ${LIM[*]} --beam 4 --beam-stop hf \
    --length-penalty 1 <'$MT.de' 2>/dev/null | cmp -s - '$MT.beam4.en'"
check "multi-target: without --target-lang the sources lack the token (another translation)" bash -c "
  ! '$QKV' translate --model '$T/multi' ${LIM[*]} <'$MT.de' 2>/dev/null | cmp -s - '$MT.greedy.en'"
expect_fail "multi-target: a language the model lacks names the ones it has" \
  "target language 'deu' is not one of the model's 2 \(fra, ita\)" \
  "$QKV" translate --model "$T/multi" --target-lang deu

check "echo 'Ein Mann fährt Fahrrad.' | qkv translate: transformers' translation" bash -c "
  [ \"\$(echo 'Ein Mann fährt Fahrrad.' | '$QKV' translate --model '$T/t_shared_swish' ${LIM[*]} 2>/dev/null)\" = \"\$(head -1 '$P/marian_shared_swish.greedy.en')\" ]"
check "qkv info reads the imported directory" bash -c "'$QKV' info --model '$T/t_shared_swish' >/dev/null 2>&1"

# ---- SiLU is an activation qkv trains with too
awk 'BEGIN { srand(3); for (i = 0; i < 40; i++) { s = ""; for (j = 0; j < 4; j++)
       s = s (j ? " " : "") substr("abcdef", 1 + int(rand() * 6), 1); print s "\t" s } }' >"$T/copy.tsv"
check "qkv train --act silu trains and translates a model that says so" bash -c "
  '$QKV' train --data '$T/copy.tsv' --d-model 8 --heads 2 --ffn 16 --layers 1 --batch 8 \
    --num-steps 6 --epochs 1 --threads 1 --quiet --act silu --out '$T/silu' >/dev/null 2>&1 &&
  grep -q '\"act\":.*\"silu\"' '$T/silu/config.json' &&
  echo 'a b c d' | '$QKV' translate --model '$T/silu' >/dev/null 2>&1"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
