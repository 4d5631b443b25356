# SPDX-License-Identifier: MIT
"""qkv: the Transformer of "Attention Is All You Need", in C, from Python.

    import qkv
    translator = qkv.Translator("opus-mt-en-de")          # a qkv model directory
    results = translator.translate_batch(["Hello world."], beam_size=4)
    print(results[0].hypotheses[0])

    generator = qkv.Generator("lm")                       # qkv train-lm's directory
    print(generator.generate(["Once upon"], max_length=50, seed=1)[0])

    qkv.train(data="fra.txt", out="model", epochs=10)     # qkv train's options
    qkv.ops.masked_softmax(scores, valid_lens)            # the d2l building blocks (numpy)

The names follow CTranslate2's Python package where both have the thing (Translator,
translate_batch, TranslationResult, Generator) and `qkv`'s command line for the rest (train's
options are the CLI's, with underscores). Every failure the library reports raises a subclass
of qkv.Error carrying its message; wrong argument types and values raise TypeError and
ValueError. Long calls release the GIL. See docs/python.md.
"""
import os as _os
import warnings as _warnings

# How OpenMP's idle threads wait is read once, when libgomp loads with the extension below. The
# qkv command chooses per command (src/cli/main.c): a bounded spin where decoding runs on free
# cores, sleeping waits otherwise (spinning threads collapse a machine shared with other work).
# A library cannot know what is coming, so it takes the command's choice for decoding on free
# cores, and sleeping waits on a busy machine; OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user
# win. The variables are set only while the extension loads.
_wait_vars = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_set_here = []
if not any(v in _os.environ for v in _wait_vars):
    try:
        _free = _os.getloadavg()[0] < 0.5 * (_os.cpu_count() or 1)
    except OSError:
        _free = False
    _name, _value = ("GOMP_SPINCOUNT", "1000") if _free else ("OMP_WAIT_POLICY", "passive")
    _os.environ[_name] = _value
    _set_here.append(_name)
try:
    from . import _qkv
finally:
    for _name in _set_here:
        del _os.environ[_name]

from ._qkv import (ArgumentError, Error, FileError, FormatError, NumericError,  # noqa: E402
                   OutOfMemoryError, get_threads, set_threads)
from ._results import BLEUScore, GenerationResult, TranslationResult  # noqa: E402
from ._train import Progress, train, train_lm  # noqa: E402

__version__ = _qkv.__version__
__all__ = [
    "Translator", "TranslationResult", "Generator", "GenerationResult", "Tokenizer",
    "train", "train_lm", "Progress", "import_marian", "eval_bleu", "BLEUScore", "ops",
    "Error", "ArgumentError", "FileError", "FormatError", "NumericError", "OutOfMemoryError",
    "set_threads", "get_threads", "cpu_features", "__version__",
]

_qkv.blas_check()  # the OpenMP build of OpenBLAS, as the qkv command insists


def __getattr__(name):
    # qkv.ops needs numpy; the rest of the package does not
    if name == "ops":
        import importlib
        return importlib.import_module(".ops", __name__)
    raise AttributeError(f"module 'qkv' has no attribute {name!r}")


def cpu_features():
    """Which reduced precisions this CPU runs: {'bf16': bool, 'int8': bool}."""
    return _qkv.cpu_features()


def _precision(precision):
    if not isinstance(precision, str):
        raise TypeError(f"precision must be str, not {type(precision).__name__}")
    return "fp32" if precision == "auto" else precision


def _int(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be in [{low}, {high if high is not None else 'inf'}], "
                         f"got {value}")
    return value


def _float(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    value = float(value)
    if not (value >= low) or (high is not None and value > high):
        raise ValueError(f"{name} must be in [{low}, {high if high is not None else 'inf'}], "
                         f"got {value}")
    return value


def _generation_defaults(model_dir):
    """The decoding defaults of a model directory's generation.json (or its parent's, as for
    DIR/best), each kept only where `qkv translate` keeps it: beam in [1, 256],
    length_penalty in [0, 100], beam_stop a rule, max_len in [1, 65536] (the library reads
    it for both)."""
    return _qkv.generation_defaults(model_dir)


class Translator:
    """A translation model directory: what `qkv train` writes, or `qkv.import_marian` makes.

    Translator(model_path, precision="auto", threads=0, kv_cache="auto")

    precision: "auto" (the model's float32, as `qkv translate` without --precision), "fp32",
    "bf16" or "int8" (where cpu_features() says the CPU runs them). threads: OpenMP threads
    for this translator's calls (0: the process's setting, qkv.set_threads). kv_cache:
    "auto", "fp32" or "bf16", the type of decoding's key-value cache.

    A Translator runs one translation at a time (its decoding buffers are its own): calls
    from several threads wait for each other, with the GIL released. Translators share
    nothing, so one per thread translates in parallel.
    """

    def __init__(self, model_path, precision="auto", threads=0, kv_cache="auto"):
        self.model_path = _os.fspath(model_path)
        _int("threads", threads, 0, 4096)
        if not isinstance(kv_cache, str):
            raise TypeError(f"kv_cache must be str, not {type(kv_cache).__name__}")
        self._t = _qkv.Translator(self.model_path, _precision(precision), kv_cache, threads)
        self._info = self._t.info()
        self.generation_defaults = _generation_defaults(self.model_path)

    @property
    def precision(self):
        """The precision of the model's products: "fp32", "bf16" or "int8"."""
        return self._info["precision"]

    @property
    def num_steps(self):
        """The sentence length the model was trained with (train.json), 0 if unknown."""
        return self._info["num_steps"]

    @property
    def config(self):
        """The model's configuration (config.json) as a dict."""
        import json
        return json.loads(self._t.config())

    def source_tokens(self, sources):
        """Each sentence (str) as the model's source tokens, as translate_batch reads it."""
        return self._t.source_tokens(list(sources))

    def translate_batch(self, source, beam_size=None, num_hypotheses=1, length_penalty=None,
                        max_decoding_length=None, return_scores=False, max_batch_size=32,
                        beam_stop=None, max_len_a=1.5, max_len_b=10, target_lang=None,
                        source_lang=None):
        """Translates a batch of sentences; returns one TranslationResult per sentence.

        source: a list of str (raw sentences, read by the model's own tokenizer), or a list
        of lists of str (each sentence already as the model's source tokens, e.g. the pieces
        SentencePiece made of it, as CTranslate2 takes them); hypotheses are then lists of
        target tokens instead of text.
        beam_size, length_penalty, beam_stop and max_decoding_length not given take the model
        directory's decoding defaults (generation.json, which qkv import writes from a
        release's settings; .generation_defaults), as `qkv translate` takes them, else
        beam_size 1 (greedy decoding), beam_stop "bound", no cap.
        num_hypotheses: hypotheses per sentence, best first
        (1 <= num_hypotheses <= beam_size; fewer come back where beam search finds fewer).
        length_penalty: alpha of beam search's score log P / lp (default 0 under the "bound"
        and "count" rules, 1 under the "hf" ones, as `qkv translate`). beam_stop: "bound",
        "count", or transformers' BeamSearchScorer with early_stopping False ("hf"), True
        ("hf-early": done once beam_size hypotheses have finished) or "never" ("hf-never")
        (qkv translate --beam-stop; ValueError naming the rules otherwise).
        max_decoding_length: a hard cap in tokens (0: the model's max_len); max_len_a,
        max_len_b: each sentence's own limit, a * n + b tokens for a source of n (0, 0: none).
        max_batch_size: sentences decoded together (results do not depend on it).
        return_scores: fill .scores (log P / lp of beam search; NaN from greedy decoding).
        source_lang, target_lang: a multilingual model's languages, as `qkv translate
        --source-lang/--target-lang` takes them (NLLB's "deu_Latn", M2M100's "de", an OPUS-MT
        multi-target model's "fra" for >>fra<<). A language given holds for the translator's
        later calls too (None keeps the current one: the model's default until one is given).
        """
        if isinstance(source, (str, bytes)):
            raise TypeError("source must be a list of sentences, not a single str")
        source = list(source)
        as_tokens = bool(source) and not isinstance(source[0], str)
        if as_tokens:
            source = [list(s) if not isinstance(s, str) else s for s in source]
            if any(isinstance(s, str) for s in source):
                raise TypeError("source mixes str sentences and token lists")
        for name, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
            if lang is not None and not isinstance(lang, str):
                raise TypeError(f"{name} must be str or None, not {type(lang).__name__}")
        g = self.generation_defaults
        beam_size = g.get("beam", 1) if beam_size is None else beam_size
        beam_stop = g.get("beam_stop", "bound") if beam_stop is None else beam_stop
        if not isinstance(beam_stop, str):
            raise ValueError(f"beam_stop must be a rule's name, got {beam_stop!r}")
        if length_penalty is None:  # transformers' default under its rules
            hf = beam_stop in ("hf", "hf-early", "hf-never")
            length_penalty = g.get("length_penalty", 1.0 if hf else 0.0)
        if max_decoding_length is None:
            max_decoding_length = g.get("max_len", 0)
        beam = _int("beam_size", beam_size, 1, 256)
        n_best = _int("num_hypotheses", num_hypotheses, 1, beam)
        rows, truncated, first, first_len = self._t.translate(
            source, as_tokens, as_tokens, source_lang=source_lang, target_lang=target_lang,
            beam=beam, n_best=n_best,
            alpha=_float("length_penalty", length_penalty, 0.0, 100.0),
            stop=beam_stop, max_len=_int("max_decoding_length", max_decoding_length, 0),
            max_len_a=_float("max_len_a", max_len_a, 0.0, 1e6),
            max_len_b=_int("max_len_b", max_len_b, 0), batch=_int("max_batch_size",
                                                                  max_batch_size, 1))
        if truncated:
            _warnings.warn(f"sentence {first + 1} has {first_len} tokens with <eos>; the model "
                           f"accepts {self.config['max_len']}, so it is truncated (and "
                           f"{truncated - 1} others)", stacklevel=2)
        return [TranslationResult(h, s if return_scores else [], n, u) for h, s, n, u in rows]

    def translate_iterable(self, source, max_batch_size=32, batch_size=None, **kwargs):
        """Translates sentences from any iterable (a file's lines, say), batch_size at a time,
        yielding one TranslationResult per sentence in order; translate_batch's options apply.
        Trailing line breaks are removed; an empty line gives an empty translation."""
        size = _int("batch_size", batch_size if batch_size is not None else max_batch_size, 1)
        batch = []
        for line in source:
            if isinstance(line, str):
                line = line.rstrip("\r\n")
            batch.append(line)
            if len(batch) == size:
                yield from self.translate_batch(batch, max_batch_size=size, **kwargs)
                batch = []
        if batch:
            yield from self.translate_batch(batch, max_batch_size=size, **kwargs)

    def translate_file(self, input_path, output_path, max_batch_size=32, **kwargs):
        """Translates a file, one sentence a line, into another (the best hypothesis a line,
        as `qkv translate --input` prints it). Returns the number of sentences."""
        n = 0
        with open(input_path, encoding="utf-8") as src, \
                open(output_path, "w", encoding="utf-8") as out:
            for r in self.translate_iterable(src, max_batch_size=max_batch_size, **kwargs):
                h = r.hypotheses[0] if r.hypotheses else ""
                out.write((h if isinstance(h, str) else " ".join(h)) + "\n")
                n += 1
        return n

    def __repr__(self):
        i = self._info
        return (f"Translator({self.model_path!r}, precision={i['precision']!r}, "
                f"kv_cache={i['kv_cache']!r}, threads={i['threads']}, "
                f"tokenizer={i['tokenizer']!r}, vocab={i['source_vocab']}/{i['target_vocab']}, "
                f"parameters={i['parameters']})")


class Generator:
    """A language model directory, as `qkv train-lm` writes it (config.json,
    model.safetensors, vocab.txt), that continues prompts as `qkv generate` does.

    Generator(model_path, precision="auto", threads=0, kv_cache="auto"); the arguments as
    Translator's. One generation runs at a time per Generator (calls from several threads
    wait for each other, with the GIL released).
    """

    def __init__(self, model_path, precision="auto", threads=0, kv_cache="auto"):
        self.model_path = _os.fspath(model_path)
        _int("threads", threads, 0, 4096)
        if not isinstance(kv_cache, str):
            raise TypeError(f"kv_cache must be str, not {type(kv_cache).__name__}")
        self._g = _qkv.Generator(self.model_path, _precision(precision), kv_cache, threads)
        self._info = self._g.info()

    @property
    def context(self):
        """The model's context: the most tokens it sees at once."""
        return self._info["context"]

    @property
    def config(self):
        """The model's configuration (config.json) as a dict."""
        import json
        return json.loads(self._g.config())

    @staticmethod
    def _sampling(max_length, temperature, top_k, top_p, seed):
        temperature = _float("temperature", temperature, 0.0)
        if temperature == 0.0 and (top_k != 0 or top_p != 1.0):
            raise ValueError("temperature 0 is greedy decoding: top_k and top_p sample, give "
                             "them with a temperature > 0")
        return dict(tokens=_int("max_length", max_length, 0, 1_000_000), temperature=temperature,
                    top_k=_int("top_k", top_k, 0), top_p=_float("top_p", top_p, 1e-30, 1.0),
                    seed=_int("seed", seed, 0, 2**64 - 1))

    def generate(self, prompts, max_length=200, temperature=1.0, top_k=0, top_p=1.0, seed=0,
                 include_prompt=False):
        """Continues each prompt with max_length tokens drawn from the model; returns the
        texts (str for a str prompt, a list for a list). temperature 0 is greedy decoding;
        top_k keeps the k most probable tokens (0: all), top_p the smallest set holding that
        much probability (1: all). The same seed gives the same text, the text `qkv generate
        --seed` prints; each prompt is continued as if alone. An empty prompt reads as a
        newline, as in `qkv generate`."""
        single = isinstance(prompts, str)
        batch = [prompts] if single else list(prompts)
        opts = self._sampling(max_length, temperature, top_k, top_p, seed)
        out = []
        for p in batch:
            text, unknown = self._g.generate(p, **opts)
            if unknown:
                _warnings.warn(f"{unknown} character(s) of the prompt are not in the model's "
                               "vocabulary (read as <unk>)", stacklevel=2)
            out.append(p + text if include_prompt else text)
        return out[0] if single else out

    def generate_batch(self, prompts, max_length=200, temperature=1.0, top_k=0, top_p=1.0,
                       seed=0):
        """generate() over a list of prompts, returning GenerationResult objects (.text,
        .prompt), as CTranslate2's Generator.generate_batch returns result objects."""
        texts = self.generate(list(prompts), max_length, temperature, top_k, top_p, seed)
        return [GenerationResult(p, t) for p, t in zip(prompts, texts)]

    def generate_tokens(self, prompt, max_length=200, temperature=1.0, top_k=0, top_p=1.0,
                        seed=0):
        """An iterator over the text of each new token as soon as it is drawn (the tokens of
        generate() with the same arguments, one by one). Generation runs in a thread of its
        own; closing the iterator (or dropping it) stops it at the next token."""
        stream = self._g.stream(prompt, **self._sampling(max_length, temperature, top_k,
                                                          top_p, seed))
        if stream.unknown():
            _warnings.warn(f"{stream.unknown()} character(s) of the prompt are not in the "
                           "model's vocabulary (read as <unk>)", stacklevel=2)
        return stream

    def __repr__(self):
        i = self._info
        return (f"Generator({self.model_path!r}, precision={i['precision']!r}, "
                f"kv_cache={i['kv_cache']!r}, threads={i['threads']}, vocab={i['vocab']}, "
                f"context={i['context']}, parameters={i['parameters']})")


class Tokenizer:
    """A model directory's tokenizer: its source and target vocabularies, subword encodings
    (byte-pair or SentencePiece) and text.json, as the Translator reads text with them.

    Tokenizer(model_path). Read-only: any number of threads may use one at once."""

    def __init__(self, model_path):
        self.model_path = _os.fspath(model_path)
        self._t = _qkv.Tokenizer(self.model_path)
        self._info = self._t.info()

    @staticmethod
    def _side(side):
        if side not in ("source", "target"):
            raise ValueError(f"side must be 'source' or 'target', got {side!r}")
        return 0 if side == "source" else 1

    @property
    def kind(self):
        """"d2l", "whitespace", "bpe" or "spm"."""
        return self._info["kind"]

    def vocab_size(self, side="source"):
        """Tokens in that side's vocabulary, the reserved <unk> <pad> <bos> <eos> included."""
        return self._info["source_vocab" if self._side(side) == 0 else "target_vocab"]

    def encode(self, text, out_type=str, side="source"):
        """One line (or a list of lines) as the model's tokens (out_type=str) or their ids
        (out_type=int), as the model reads it on that side."""
        if out_type not in (str, int):
            raise ValueError("out_type must be str or int")
        s = self._side(side)
        if isinstance(text, str):
            return self._t.encode(text, s, out_type is int)
        return [self._t.encode(t, s, out_type is int) for t in text]

    def decode(self, ids):
        """Target ids (or a list of such lists) as text, up to the first <eos>, as the
        translator writes its translations."""
        if ids and not isinstance(ids[0], int):
            return [self._t.decode(list(i)) for i in ids]
        return self._t.decode(list(ids))

    def id_to_piece(self, id, side="target"):
        """The token of an id on that side."""
        return self._t.id_to_piece(_int("id", id, -2**31, 2**31 - 1), self._side(side))

    def piece_to_id(self, piece, side="source"):
        """The id of a token on that side (<unk>'s, 0, when the vocabulary lacks it)."""
        if not isinstance(piece, str):
            raise TypeError(f"piece must be str, not {type(piece).__name__}")
        return self._t.piece_to_id(piece, self._side(side))

    def __repr__(self):
        i = self._info
        return (f"Tokenizer({self.model_path!r}, kind={i['kind']!r}, "
                f"vocab={i['source_vocab']}/{i['target_vocab']})")


def eval_bleu(hypotheses, references, per_sentence=False):
    """sacreBLEU's corpus BLEU and chrF2 of translations against references (raw lines,
    detokenised, case kept), as `sacrebleu REF -m bleu chrf` with its defaults scores them and
    `qkv eval --hyp` prints them. references: a list of str, or sacreBLEU's [list of str] (one
    reference each). Returns a BLEUScore; with per_sentence, .sentences holds each line's
    (sentence BLEU, chrF2)."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be lists of str")
    references = list(references)
    if len(references) == 1 and not isinstance(references[0], str):
        references = list(references[0])  # sacreBLEU's list of reference streams
    if references and not isinstance(references[0], str):
        raise ValueError("one reference per hypothesis: qkv scores against a single stream")
    return BLEUScore(_qkv.sacrebleu(list(hypotheses), references, bool(per_sentence)))


def import_marian(hf_dir, out_dir, overwrite=False):
    """Imports a Hugging Face MarianMT directory (an OPUS-MT model: config.json,
    model.safetensors, vocab.json, source.spm, target.spm) as a qkv model directory, as
    `qkv import marian HF_DIR --out OUT` does. out_dir is created; one that holds a model is
    refused unless overwrite. Returns out_dir."""
    hf_dir, out_dir = _os.fspath(hf_dir), _os.fspath(out_dir)
    if _os.path.exists(_os.path.join(out_dir, "model.safetensors")) and not overwrite:
        raise FileError(f"{out_dir} already holds a model; overwrite=True replaces it")
    _os.makedirs(out_dir, exist_ok=True)
    _qkv.import_marian(hf_dir, out_dir)
    return out_dir
