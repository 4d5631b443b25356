# SPDX-License-Identifier: MIT
"""The comparison of bench/mpi_acceptance.sh: two qkv train runs of the same configuration, one
process (OUT/one) and 2 MPI ranks (OUT/two). Prints every epoch's training loss, validation
loss and validation sacreBLEU/chrF of both, the largest relative difference of the training
losses, the final parameters' largest difference, and both models' test_2016_flickr scores
(beam search output OUT/{one,two}.test_2016_flickr.hyp; reported, never used for a choice).

Usage: mpi_acceptance.py OUT MULTI30K_DIR"""
import json
import os
import sys

import numpy as np
import sacrebleu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from mpi_compare import tensors  # noqa: E402

out, d = sys.argv[1], sys.argv[2]
rows = {r: [json.loads(l) for l in open(f"{out}/{r}/metrics.jsonl")] for r in ("one", "two")}
print("epoch  step | train loss one / two (rel diff) | val loss one / two | val sacreBLEU one / two | chrF one / two")
worst = 0.0
for a, b in zip(rows["one"], rows["two"]):
    assert a["step"] == b["step"], (a["step"], b["step"])
    rel = abs(a["loss"] - b["loss"]) / abs(a["loss"])
    worst = max(worst, rel)
    print(f"{a['epoch']:5d} {a['step']:5d} | {a['loss']:.6f} / {b['loss']:.6f} ({rel:.2e}) | "
          f"{a['val_loss']:.4f} / {b['val_loss']:.4f} | {a['sacrebleu']:.2f} / {b['sacrebleu']:.2f} | "
          f"{a['chrf']:.2f} / {b['chrf']:.2f}")
print(f"training loss: largest relative difference per epoch {worst:.2e}")
last = rows["one"][-1], rows["two"][-1]
print(f"final validation sacreBLEU: {last[0]['sacrebleu']:.2f} and {last[1]['sacrebleu']:.2f} "
      f"(difference {abs(last[0]['sacrebleu'] - last[1]['sacrebleu']):.2f}; acceptance: within 0.5)")
models = [f"{out}/{r}/model.safetensors" for r in ("one", "two")]
if not all(os.path.exists(m) for m in models):  # a run stopped early: the epochs above only
    sys.exit(0)
pa, pb = tensors(models[0]), tensors(models[1])
diff = {k: float(np.max(np.abs(pa[k] - pb[k]))) for k in pa}
k = max(diff, key=diff.get)
scale = float(np.max(np.abs(pa[k])))
print(f"final parameters: largest absolute difference {diff[k]:.3g} ({k}, whose largest |value| "
      f"is {scale:.3g}); median over tensors {float(np.median(list(diff.values()))):.3g}")
refs = [l.rstrip("\n") for l in open(f"{d}/test_2016_flickr.en", encoding="utf-8")]
for r in ("one", "two"):
    if not os.path.exists(f"{out}/{r}.test_2016_flickr.hyp"):
        continue
    hyp = [l.rstrip("\n") for l in open(f"{out}/{r}.test_2016_flickr.hyp", encoding="utf-8")]
    print(f"test_2016_flickr ({r}, beam 4): {sacrebleu.corpus_bleu(hyp, [refs]).score:.2f} BLEU, "
          f"chrF2 {sacrebleu.corpus_chrf(hyp, [refs]).score:.2f}")
