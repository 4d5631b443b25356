# SPDX-License-Identifier: MIT
"""Reference beam searches over scripted logits, for tests/unit/test_beam.c.

A scripted step gives every (sentence, prefix, token) a logit from a 64-bit hash, the same
bits in C and here, so the search rules can be compared token for token without a model:
  - bound and count (qkv's own rules, include/qkv/models.h): a plain reference search below,
    written from the rules' statement;
  - hf, hf-early, hf-never: Hugging Face transformers' own BeamSearchScorer (4.38) driven as
    its beam_search loop drives it (log-softmax, + beam scores, top 2K, process, reorder,
    finalize) with early_stopping False, True and "never", and length_penalty=alpha.
Everything is float64, as in qkv's search, with the log-softmax computed in the same order
as beam.c's (max, then a sequential sum of exp), so scores agree to the last bit.
Writes OUTDIR/beam_cases.safetensors (the number of cases) and beam_<i>.safetensors.
"""
import math

import numpy as np
import torch

UNK, PAD, BOS, EOS = 0, 1, 2, 3
M64 = (1 << 64) - 1
MODES = {"bound": 0, "count": 1, "hf": 2, "hf-early": 3, "hf-never": 4}
EARLY = {"hf": False, "hf-early": True, "hf-never": "never"}


def mix(z):
    """splitmix64's step: add the golden ratio, then its finaliser."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def scripted_logits(seed, sentence, prefix, V):
    """Logits (V) after prefix (tokens without <bos>); <eos> grows likelier with length,
    <unk>, <pad> and <bos> are never chosen. float32 values, as a model's."""
    h = mix(seed)
    h = mix(h ^ sentence)
    for tok in prefix:
        h = mix(h ^ tok)
    z = np.empty(V, dtype=np.float32)
    for v in range(V):
        k = mix(h ^ (v + 1000)) >> 40
        x = (k % 4001 - 2000) / 500.0
        if v == EOS:
            x += 0.5 * len(prefix) - 1.5
        elif v in (UNK, PAD, BOS):
            x = -30.0
        z[v] = np.float32(x)
    return z


def log_softmax(z):
    """As beam.c: max in float, then logsumexp in double with a sequential sum."""
    mx = float(max(z))
    s = 0.0
    for v in z:
        s += math.exp(float(v) - mx)
    lse = mx + math.log(s)
    return [float(v) - lse for v in z]


def lp_gnmt(n, alpha):
    return 1.0 if alpha == 0.0 else ((5.0 + n) / 6.0) ** alpha


def qkv_search(seed, sentence, V, K, N, T, alpha, count, forced_eos):
    """qkv's bound (count=False) or count rule: the best 2K extensions of the live
    hypotheses, ranked by (score desc, row, token); an <eos> among the first K finishes one
    (score log P / lp(steps)), the first K others live on; at the last step they finish as
    they are (followed by an <eos> of probability 1, counted in the length, with forced_eos).
    Finished: the K best, ties in finishing order."""
    live = [(0.0, [])]
    fin = []  # (score, logprob, tokens), best first
    found = 0

    def add(tokens, steps, logprob):
        nonlocal found
        found += 1
        score = logprob / lp_gnmt(steps, alpha)
        at = len(fin)
        while at > 0 and fin[at - 1][0] < score:
            at -= 1
        if at < K:
            fin.insert(at, (score, logprob, list(tokens)))
            del fin[K:]

    for t in range(T):
        cands = []
        for row, (score, toks) in enumerate(live):
            lps = log_softmax(scripted_logits(seed, sentence, toks, V))
            for v in range(V):
                cands.append((score + lps[v], row, v))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        cands = cands[:2 * K]
        nxt = []
        last = t == T - 1
        for i, (score, row, v) in enumerate(cands):
            if len(nxt) == K:
                break
            toks = live[row][1]
            if v == EOS:
                if i < K:
                    add(toks, t + 1, score)
            elif last:
                add(toks + [v], t + 1 + forced_eos, score)
                nxt.append(None)
            else:
                nxt.append((score, toks + [v]))
        if last or not nxt:
            break
        if count and found >= K:
            break
        if len(fin) >= N and nxt[0][0] / lp_gnmt(T + forced_eos, alpha) <= fin[N - 1][0]:
            break
        live = nxt
    return [(s, lp, toks) for s, lp, toks in fin[:N]]


def hf_search(seed, B, V, K, N, T, alpha, forced_eos, early):
    """transformers' BeamSearchScorer (early_stopping=early) over the scripted logits, as
    GenerationMixin.beam_search uses it (decoder_prompt_len 1: the start token), max_length
    T + 1; with forced_eos, max_length T + 2 and transformers' ForcedEOSTokenLogitsProcessor at
    the last position."""
    from transformers.generation.logits_process import ForcedEOSTokenLogitsProcessor
    max_length = T + 1 + forced_eos
    force = ForcedEOSTokenLogitsProcessor(max_length, EOS)
    from transformers.generation.beam_search import BeamSearchScorer
    scorer = BeamSearchScorer(batch_size=B, num_beams=K, device=torch.device("cpu"),
                              length_penalty=alpha, do_early_stopping=early,
                              num_beam_hyps_to_keep=N, max_length=max_length)
    input_ids = torch.full((B * K, 1), BOS, dtype=torch.long)
    beam_scores = torch.zeros((B, K), dtype=torch.float64)
    beam_scores[:, 1:] = -1e9
    beam_scores = beam_scores.view(-1)
    while True:
        lps = torch.tensor([log_softmax(scripted_logits(seed, r // K, input_ids[r, 1:].tolist(), V))
                            for r in range(B * K)], dtype=torch.float64)
        if forced_eos:
            lps = force(input_ids, lps)
        scores = (lps + beam_scores[:, None]).view(B, K * V)
        # torch.topk, ties in index order (row * V + token) as qkv ranks them
        order = torch.sort(scores, dim=1, descending=True, stable=True)
        top_scores, top = order.values[:, :2 * K], order.indices[:, :2 * K]
        out = scorer.process(input_ids, top_scores, top % V, torch.div(top, V, rounding_mode="floor"),
                             pad_token_id=PAD, eos_token_id=EOS, decoder_prompt_len=1)
        beam_scores = out["next_beam_scores"]
        input_ids = torch.cat([input_ids[out["next_beam_indices"], :],
                               out["next_beam_tokens"].unsqueeze(-1)], dim=-1)
        if scorer.is_done or input_ids.shape[-1] >= max_length:
            break
    res = scorer.finalize(input_ids, beam_scores, None, None, max_length=max_length, pad_token_id=PAD,
                          eos_token_id=EOS, decoder_prompt_len=1)
    seqs, sc = res["sequences"].tolist(), res["sequence_scores"].tolist()
    per = []
    for b in range(B):
        hyps = []
        for k in range(N):
            row = seqs[b * N + k][1:]
            toks = []
            for v in row:
                if v in (EOS, PAD):
                    break
                toks.append(v)
            hyps.append((sc[b * N + k], None, toks))
        per.append(hyps)
    return per


CASES = []
for mode in ("bound", "count", "hf", "hf-early", "hf-never"):
    for K, N in ((2, 1), (3, 2), (4, 4), (5, 2)):
        for alpha in (0.0, 0.5, 1.0, 2.0):
            CASES.append((mode, K, N, alpha, 0))
    for K, N, alpha in ((3, 2, 0.5), (4, 1, 1.0), (2, 2, 2.0)):  # Marian's forced_eos
        CASES.append((mode, K, N, alpha, 1))


def write_all(save):
    B, V, T = 8, 14, 12
    for i, (mode, K, N, alpha, forced_eos) in enumerate(CASES):
        seed = 1000 + i
        # per-sentence limits for qkv's rules (transformers has one max_length)
        hf = mode in EARLY
        max_lens = [T] * B if hf else [T - (b * 5) % 9 for b in range(B)]
        if hf:
            per = hf_search(seed, B, V, K, N, T, alpha, forced_eos, EARLY[mode])
        else:
            per = [qkv_search(seed, b, V, K, N, max_lens[b], alpha, mode == "count", forced_eos)
                   for b in range(B)]
        ids = np.zeros((B, N, T), dtype=np.int32)
        lens = np.full((B, N), -1, dtype=np.int32)
        scores = np.zeros((B, N), dtype=np.float32)
        for b in range(B):
            for k, (s, _, toks) in enumerate(per[b]):
                lens[b, k] = len(toks)
                ids[b, k, :len(toks)] = toks
                scores[b, k] = s
        save(f"beam_{i}", {"ids": ids, "len": lens, "score": scores,
                           "max_lens": np.array(max_lens, dtype=np.int32)},
             {"mode": MODES[mode], "K": K, "N": N, "alpha": alpha, "seed": seed, "B": B,
              "V": V, "T": T, "forced_eos": forced_eos})
    save("beam_cases", {"n": np.array([len(CASES)], dtype=np.int32)}, {"n": len(CASES)})
