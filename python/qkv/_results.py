# SPDX-License-Identifier: MIT
"""The result objects of translation, generation and scoring."""
import math


class TranslationResult:
    """One sentence's translation: .hypotheses, best first (str, or lists of target tokens
    when the source was given as tokens), .scores (beam search's log P / lp of each, NaN from
    greedy decoding; empty unless return_scores), .source_length (the source's tokens) and
    .unknown (how many of them the source vocabulary lacks: a source mostly of unknown tokens
    gets an unreliable translation)."""

    __slots__ = ("hypotheses", "scores", "source_length", "unknown")

    def __init__(self, hypotheses, scores, source_length=0, unknown=0):
        self.hypotheses = hypotheses
        self.scores = scores
        self.source_length = source_length
        self.unknown = unknown

    def __getitem__(self, key):  # CTranslate2's results also read as dicts
        if key not in self.__slots__:
            raise KeyError(key)
        return getattr(self, key)

    def __eq__(self, other):
        if not isinstance(other, TranslationResult):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in ("hypotheses", "source_length",
                                                                   "unknown")) and \
            len(self.scores) == len(other.scores) and \
            all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(self.scores,
                                                                              other.scores))

    def __repr__(self):
        return f"TranslationResult(hypotheses={self.hypotheses!r}, scores={self.scores!r})"


class GenerationResult:
    """A prompt and the text generated after it (.prompt, .text)."""

    __slots__ = ("prompt", "text")

    def __init__(self, prompt, text):
        self.prompt = prompt
        self.text = text

    def __repr__(self):
        return f"GenerationResult(prompt={self.prompt!r}, text={self.text!r})"


class BLEUScore:
    """sacreBLEU's corpus BLEU (.score, 0..100, with .counts, .totals, .precisions, .bp,
    .sys_len, .ref_len, as sacrebleu's BLEUScore) and chrF2 (.chrf); str() is the line
    `sacrebleu -f text -w 2` prints, signature included (.signature)."""

    __slots__ = ("score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len", "chrf",
                 "sentences", "_line")

    def __init__(self, d):
        for k in ("score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len", "chrf",
                  "sentences"):
            setattr(self, k, d[k])
        self._line = d["line"]

    @property
    def signature(self):
        """What the score is, in sacreBLEU's words."""
        from . import _qkv
        return _qkv.sacrebleu_signature

    @property
    def chrf_signature(self):
        from . import _qkv
        return _qkv.chrf_signature

    def __str__(self):
        return self._line

    def __repr__(self):
        return (f"BLEUScore(score={self.score:.2f}, chrf={self.chrf:.2f}, bp={self.bp:.3f}, "
                f"sys_len={self.sys_len}, ref_len={self.ref_len})")
