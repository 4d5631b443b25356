#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of the figures: qkv plot (training curves, positional encoding), the curves
# qkv train and qkv demo draw when they finish, qkv translate --attention on a model trained
# here to reverse sequences, and the Nadaraya-Watson example. Every PNG is decoded in full
# (chunk CRCs, zlib, row filters) by a checker written with Python's standard library; sizes
# are compared with what the tool reports, and pixels with the numbers that were drawn.
# Usage: test_figures.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run) trains less and skips
# the checks that need a trained model.
set -u
QKV=$(realpath "$1")
EXAMPLE=$(dirname "$QKV")/examples/nadaraya_watson
PYTHON=${PYTHON:-python3}
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
# run_ok NAME CMD...: CMD exits 0 (a sanitizer report fails it); its stdout stays in $T/run.out
run_ok() {
  local name=$1; shift
  if "$@" >"$T/run.out" 2>"$T/run.err"; then ok "$name"; else bad "$name (exit $?): $(head -c 300 "$T/run.err")"; fi
}

cat >"$T/png.py" <<'EOF'
"""PNG checks for test_figures.sh, standard library only.
  size FILE                      print "W H" of a fully decoded 8-bit RGB PNG
  count FILE RRGGBB              print how many pixels are within 12 per channel of a colour
  attention DIR N [trained]      sentence N's figures against sentence-N.json (see below)"""
import json, struct, sys, zlib

def decode(path):
    b = open(path, "rb").read()
    if b[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, w = 8, bytearray(), None
    while pos + 12 <= len(b):
        n, typ = struct.unpack(">I", b[pos:pos + 4])[0], b[pos + 4:pos + 8]
        data = b[pos + 8:pos + 8 + n]
        if struct.unpack(">I", b[pos + 8 + n:pos + 12 + n])[0] != zlib.crc32(typ + data):
            sys.exit(f"{path}: bad CRC in {typ}")
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, lace = struct.unpack(">IIBBBBB", data)
            if (depth, ctype, lace) != (8, 2, 0):
                sys.exit(f"{path}: not 8-bit RGB")
        elif typ == b"IDAT":
            idat += data
        elif typ == b"IEND":
            break
        pos += 12 + n
    else:
        sys.exit(f"{path}: no IEND")
    raw, stride = zlib.decompress(bytes(idat)), 3 * w
    if len(raw) != h * (stride + 1):
        sys.exit(f"{path}: {len(raw)} bytes of image data for {w} x {h}")
    px, prev = bytearray(), bytearray(stride)
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(3, stride): row[i] = (row[i] + row[i - 3]) & 255
        elif f == 2:
            row = bytearray((a + c) & 255 for a, c in zip(row, prev))
        elif f == 3:
            for i in range(stride): row[i] = (row[i] + ((row[i - 3] if i >= 3 else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a, c, d = (row[i - 3] if i >= 3 else 0), prev[i], (prev[i - 3] if i >= 3 else 0)
                p = a + c - d
                pa, pb, pc = abs(p - a), abs(p - c), abs(p - d)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else c if pb <= pc else d)) & 255
        elif f != 0:
            sys.exit(f"{path}: row {y} has filter {f}")
        px += row
        prev = row
    return w, h, px

def lum(img, x, y):
    w, _, px = img
    r, g, b = px[3 * (y * w + x):3 * (y * w + x) + 3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b

def cells(img, fig, L, H, n, m):
    """Luminance at the centre of every cell: [layer][head][i][j]."""
    c = fig["cell_px"]
    return [[[[lum(img, fig["grid_x"] + h * (fig["panel_w"] + fig["gap_x"]) + j * c + c // 2,
                   fig["grid_y"] + l * (fig["panel_h"] + fig["gap_y"]) + i * c + c // 2)
               for j in range(m)] for i in range(n)] for h in range(H)] for l in range(L)]

def attention(d, k, trained):
    doc = json.load(open(f"{d}/sentence-{k}.json"))
    nsrc = len(doc["source_tokens"])
    for key, mp in doc["maps"].items():
        img = decode(f"{d}/{mp['file']}")
        fig = mp["figure"]
        if img[:2] != (fig["width"], fig["height"]):
            sys.exit(f"{mp['file']}: {img[:2]} but the tool reported {fig['width']} x {fig['height']}")
        L, H, n, m = mp["shape"]
        W, Y = mp["weights"], cells(img, fig, L, H, n, m)
        flat = [(W[((l * H + h) * n + i) * m + j], Y[l][h][i][j])
                for l in range(L) for h in range(H) for i in range(n) for j in range(m)]
        # the colour scale is monotonic in lightness: a clearly larger weight is a brighter cell
        gap = 0.2 * fig["vmax"]
        for wa, ya in flat:
            for wb, yb in flat:
                if wa > wb + gap and not ya > yb:
                    sys.exit(f"{mp['file']}: weight {wa} drawn no brighter than weight {wb}")
        if key == "decoder_self":  # the causal mask: every future key is exactly weight 0
            if any(W[((l * H + h) * n + i) * m + j] != 0 for l in range(L) for h in range(H)
                   for i in range(n) for j in range(i + 1, m)):
                sys.exit("decoder self-attention sees the future")
        if key == "cross" and trained:
            # reversal: decoder position t (input <bos>, y_1, ...) predicts source word nsrc-2-t
            last = [[sum(W[(((L - 1) * H + h) * n + i) * m + j] for h in range(H)) / H
                     for j in range(m)] for i in range(n)]
            lum_last = [[sum(Y[L - 1][h][i][j] for h in range(H)) / H for j in range(m)]
                        for i in range(n)]
            anti = {(t, nsrc - 2 - t) for t in range(min(n, nsrc - 1))}
            rest = [(i, j) for i in range(n) for j in range(m) if (i, j) not in anti]
            aw = sum(last[i][j] for i, j in anti) / len(anti)
            rw = sum(last[i][j] for i, j in rest) / len(rest)
            al = sum(lum_last[i][j] for i, j in anti) / len(anti)
            rl = sum(lum_last[i][j] for i, j in rest) / len(rest)
            print(f"sentence {k}: anti-diagonal weight {aw:.3f} vs {rw:.3f}, lightness {al:.0f} vs {rl:.0f}")
            if not (aw > 0.5 and aw > 4 * rw and al > rl + 60):
                sys.exit(f"sentence {k}: the anti-diagonal does not stand out")

cmd = sys.argv[1]
if cmd == "size":
    w, h, _ = decode(sys.argv[2])
    print(w, h)
elif cmd == "count":
    w, h, px = decode(sys.argv[2])
    c = bytes.fromhex(sys.argv[3])
    print(sum(all(abs(px[i + k] - c[k]) <= 12 for k in range(3)) for i in range(0, len(px), 3)))
elif cmd == "attention":
    attention(sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4)
EOF
png() { "$PYTHON" "$T/png.py" "$@"; }
size_is() { [ "$(png size "$1")" = "$2 $3" ]; }

# ---- qkv plot --positional: d2l 11.6's two figures
run_ok "qkv plot --positional" "$QKV" plot --positional "$T/pos"
run_ok "qkv plot --positional again" "$QKV" plot --positional "$T/pos2"
run_ok "qkv plot --positional --positions 30" "$QKV" plot --positional "$T/pos30" --positions 30
check "positional columns 6-9: a 760 x 360 PNG" size_is "$T/pos/positional-encoding.png" 760 360
read -r hw hh < <(png size "$T/pos/positional-encoding-heatmap.png")
read -r hw30 hh30 < <(png size "$T/pos30/positional-encoding-heatmap.png")
check "positional heatmap decodes (${hw:-?} x ${hh:-?})" test "${hw:-0}" -gt 100 -a "${hh:-0}" -gt 100
check "30 positions draw another heatmap (${hw30:-?} x ${hh30:-?})" test "${hw30:-0}x${hh30:-0}" != "${hw}x${hh}"
check "the same table draws the same bytes" cmp -s "$T/pos/positional-encoding-heatmap.png" \
  "$T/pos2/positional-encoding-heatmap.png"
expect_fail "--positional needs d_model >= 10" "d-model must be in \\[10, 4096\\]" "$QKV" plot --positional "$T/p8" --d-model 8
expect_fail "plot needs a directory or --positional" "model directory" "$QKV" plot

# ---- qkv plot DIR: training curves from metrics.jsonl
mkdir -p "$T/run" "$T/run2" "$T/bad"
awk 'BEGIN { for (e = 1; e <= 12; e++) printf "{\"epoch\": %d, \"step\": %d, \"loss\": %.6f, \"d2l_loss\": 0, \"tokens_per_s\": 1}\n", e, 10 * e, 0.3 + 4 * exp(-e / 3) }' >"$T/run/metrics.jsonl"
awk 'BEGIN { for (e = 1; e <= 12; e++) printf "{\"epoch\": %d, \"loss\": %.6f%s}\n", e, 0.3 + 4 * exp(-e / 3), e % 2 ? "" : sprintf(", \"val_loss\": %.4f, \"bleu\": %.4f", 0.5 + 4 * exp(-e / 4), 0.6 * (1 - exp(-e / 4))) }' >"$T/run2/metrics.jsonl"
run_ok "qkv plot DIR (loss)" "$QKV" plot "$T/run"
run_ok "qkv plot DIR (loss, validation loss every 2nd epoch, BLEU)" "$QKV" plot "$T/run2"
check "loss only: a 720 x 480 PNG" size_is "$T/run/training.png" 720 480
check "with BLEU: a second panel, 1280 x 480" size_is "$T/run2/training.png" 1280 480
green=$(png count "$T/run2/training.png" 009E73); green0=$(png count "$T/run/training.png" 009E73)
check "the BLEU curve is drawn ($green green pixels, $green0 without BLEU)" test "$green" -gt 300 -a "$green0" -eq 0
sed '12s/"loss": [0-9.]*/"loss": 2.5/' "$T/run/metrics.jsonl" >"$T/run/m2" && mv "$T/run/m2" "$T/run/metrics.jsonl"
run_ok "qkv plot DIR --out" "$QKV" plot "$T/run" --out "$T/run/other.png"
check "other numbers, other pixels" bash -c "! cmp -s '$T/run/training.png' '$T/run/other.png'"
printf '{"epoch": 1, "loss": 2}\n{"epoch": 2, "loss": 1}\n{"epoch": 3, "loss": \n' >"$T/bad/metrics.jsonl"
expect_fail "a broken line is named" "metrics.jsonl:3" "$QKV" plot "$T/bad"
expect_fail "a missing log is named" "nope/metrics.jsonl" "$QKV" plot "$T/nope"
printf '{"epoch": 1, "loss": 2}\n{"epoch": 2, "loss": 1}{"epoch": 9, "loss": 0}\n' >"$T/bad/metrics.jsonl"
expect_fail "a line with a second object is named" "metrics.jsonl:2: more after the JSON value" \
  "$QKV" plot "$T/bad"
printf '{"epoch": 1, "loss": 2, "loss": 0.1}\n' >"$T/bad/metrics.jsonl"
expect_fail "a line with a key twice is named" "metrics.jsonl:1: the key \"loss\" appears twice" \
  "$QKV" plot "$T/bad"
printf '{"epoch": 1, "loss": 2}\n\0{"epoch": 2, "loss": 1}\n' >"$T/bad/metrics.jsonl"
expect_fail "a NUL byte is named" "metrics.jsonl: contains a NUL byte" "$QKV" plot "$T/bad"

# ---- a model that reverses 5 symbols; qkv train draws its curves when it finishes
PAIRS=2000; EPOCHS=30
[ -n "${QKV_E2E_QUICK:-}" ] && PAIRS=200 && EPOCHS=2
awk -v n=$PAIRS 'BEGIN { s = 12345
  for (i = 0; i < n; i++) { src = ""; tgt = ""
    for (k = 0; k < 5; k++) { s = (s * 1103515245 + 12345) % 2147483648
      c = substr("abcdefghij", int(s / 65536) % 10 + 1, 1); src = src (k ? " " : "") c; tgt = c (k ? " " : "") tgt }
    print src "\t" tgt } }' >"$T/rev.tsv"
run_ok "qkv train on $PAIRS reversal pairs, $EPOCHS epochs" "$QKV" train --data "$T/rev.tsv" \
  --out "$T/rev" --layers 2 --d-model 32 --heads 2 --ffn 64 --dropout 0 --min-freq 1 \
  --num-steps 7 --batch 32 --lr 0.005 --epochs $EPOCHS --threads 1 --quiet
check "qkv train drew training.png (720 x 480)" size_is "$T/rev/training.png" 720 480

# ---- qkv translate --attention
printf 'a b c d e\nj i c a b\n' >"$T/in.txt"
run_ok "qkv translate --attention" "$QKV" translate --model "$T/rev" --input "$T/in.txt" --attention "$T/att"
cp "$T/run.out" "$T/out.txt"
check "three figures and the numbers per sentence" test -s "$T/att/sentence-1-encoder.png" -a \
  -s "$T/att/sentence-1-decoder-self.png" -a -s "$T/att/sentence-1-cross.png" -a \
  -s "$T/att/sentence-2-cross.png" -a -s "$T/att/sentence-2.json"
check "the figures' target tokens are <bos> + the printed translation" "$PYTHON" -c "
import json, sys
lines = open('$T/out.txt').read().split('\n')
for k in (1, 2):
    d = json.load(open('$T/att/sentence-%d.json' % k))
    assert d['target_tokens'] == ['<bos>'] + lines[k - 1].split(), (d['target_tokens'], lines[k - 1])
    assert d['source_tokens'][-1] == '<eos>' and len(d['source_tokens']) == 6"
if [ -n "${QKV_E2E_QUICK:-}" ]; then
  check "sentence 1: sizes, colours, causal mask" png attention "$T/att" 1
else
  check "the model reverses" test "$(tr '\n' '|' <"$T/out.txt")" = "e d c b a|b a c i j|"
  for k in 1 2; do
    check "sentence $k: sizes, colours, causal mask; the cross-attention anti-diagonal is brightest" \
      png attention "$T/att" $k trained
  done
fi
expect_fail "--attention into an unwritable place" "cannot create" \
  "$QKV" translate --model "$T/rev" --input "$T/in.txt" --attention /proc/qkv-figures

# ---- qkv demo draws its curves too
run_ok "qkv demo (1 epoch)" "$QKV" demo --epochs 1 --train 64 --out "$T/demo" --threads 1
check "qkv demo drew training.png" size_is "$T/demo/training.png" 720 480

# ---- examples/nadaraya_watson (d2l 11.2)
if [ -x "$EXAMPLE" ]; then
  run_ok "nadaraya_watson runs" "$EXAMPLE" "$T/nw"
  cp "$T/run.out" "$T/nw.txt"
  for f in nw-nonparametric nw-parametric; do
    check "$f.png: 720 x 480" size_is "$T/nw/$f.png" 720 480
    check "$f-attention.png decodes" bash -c "'$PYTHON' '$T/png.py' size '$T/nw/$f-attention.png' >/dev/null"
  done
  check "five epochs of SGD, loss printed" test "$(grep -c '^epoch [1-5], loss ' "$T/nw.txt")" -eq 5
  check "the learned kernel is narrower (w > 1) and its weights sharper" awk '
    /^learned w/ { w = $3 } /^mean largest weight/ { fixed = $6; learned = $10 }
    END { exit !(w > 1 && learned > 2 * fixed) }' "$T/nw.txt"
  check "the two attention maps differ" bash -c "! cmp -s '$T/nw/nw-nonparametric-attention.png' '$T/nw/nw-parametric-attention.png'"
else
  echo "skip: $EXAMPLE not built (make examples)"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
