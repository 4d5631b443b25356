# SPDX-License-Identifier: MIT
"""qkv.Translator against `qkv translate` on the same models and sentences: greedy text, beam
search's n-best lists with their scores, raw text and SentencePiece pieces, streaming."""
import math
import os

import pytest

import qkv
from conftest import SENTENCES, run_qkv


def cli_translate(model, sentences, tmp_path, *options):
    f = tmp_path / "input.txt"
    f.write_text("\n".join(sentences) + "\n")
    return run_qkv("translate", "--model", model, "--input", f, *options).splitlines()


def cli_nbest(model, sentences, tmp_path, *options):
    """[(sentence, text, score)] of `qkv translate --n-best`."""
    rows = []
    for line in cli_translate(model, sentences, tmp_path, *options):
        i, text, score = line.split(" ||| ")
        rows.append((int(i), text, float(score)))
    return rows


@pytest.mark.parametrize("which", ["word_model", "marian_model"])
def test_greedy_equals_cli(which, request, tmp_path):
    model = request.getfixturevalue(which)
    sentences = SENTENCES if which == "word_model" else \
        ["Hello world.", "The quick brown fox.", "", "A B C D E F", "ünïcödé tëxt"]
    t = qkv.Translator(model)
    got = [r.hypotheses[0] for r in t.translate_batch(sentences)]
    assert got == cli_translate(model, sentences, tmp_path)
    # batches do not change results
    assert [r.hypotheses[0] for r in t.translate_batch(sentences, max_batch_size=2)] == got


@pytest.mark.parametrize("which", ["word_model", "marian_model"])
@pytest.mark.parametrize("stop,alpha", [("bound", 0.6), ("hf", 1.0), ("hf-early", 1.0),
                                        ("hf-never", 0.6)])
def test_beam_nbest_with_scores_equals_cli(which, stop, alpha, request, tmp_path):
    model = request.getfixturevalue(which)
    sentences = SENTENCES[:3] if which == "word_model" else ["Hello world.", "Good morning"]
    t = qkv.Translator(model)
    results = t.translate_batch(sentences, beam_size=4, num_hypotheses=3, length_penalty=alpha,
                                beam_stop=stop, return_scores=True)
    cli = cli_nbest(model, sentences, tmp_path, "--beam", 4, "--n-best", 3,
                    "--length-penalty", alpha, "--beam-stop", stop)
    mine = [(i, h, s) for i, r in enumerate(results) for h, s in zip(r.hypotheses, r.scores)]
    assert [(i, h) for i, h, _ in mine] == [(i, h) for i, h, _ in cli]
    for (_, _, a), (_, _, b) in zip(mine, cli):
        assert f"{a:.6f}" == f"{b:.6f}"
    for r in results:
        assert r.scores == sorted(r.scores, reverse=True)


def test_generation_defaults_equal_cli(word_model, tmp_path):
    """A model directory's generation.json sets the options not given, as for qkv translate."""
    import shutil
    model = str(tmp_path / "with-defaults")
    shutil.copytree(word_model, model)
    with open(os.path.join(model, "generation.json"), "w") as f:
        f.write('{"beam": 3, "length_penalty": 0.8, "beam_stop": "count", "max_len": 4}\n')
    t = qkv.Translator(model)
    assert t.generation_defaults == {"beam": 3, "length_penalty": 0.8, "beam_stop": "count",
                                     "max_len": 4}
    got = [r.hypotheses[0] for r in t.translate_batch(SENTENCES)]
    assert got == cli_translate(model, SENTENCES, tmp_path)
    assert got != [r.hypotheses[0] for r in qkv.Translator(word_model).translate_batch(SENTENCES)]
    given = [r.hypotheses[0] for r in t.translate_batch(SENTENCES, beam_size=1,
                                                        max_decoding_length=0)]
    assert given == cli_translate(model, SENTENCES, tmp_path, "--beam", 1, "--max-len", 0)


def test_length_options_equal_cli(word_model, tmp_path):
    t = qkv.Translator(word_model)
    got = [r.hypotheses[0] for r in t.translate_batch(SENTENCES, max_decoding_length=3,
                                                      max_len_a=0, max_len_b=0)]
    assert got == cli_translate(word_model, SENTENCES, tmp_path, "--max-len", 3,
                                "--max-len-a", 0, "--max-len-b", 0)
    assert all(len(h.split()) <= 3 for h in got)


def test_scores_only_when_asked_and_nan_from_greedy(word_model):
    t = qkv.Translator(word_model)
    assert t.translate_batch(["red cat ."])[0].scores == []
    (s,) = t.translate_batch(["red cat ."], return_scores=True)[0].scores
    assert math.isnan(s)


def test_pieces_in_pieces_out(marian_model):
    """Sentences given as the model's source pieces (CTranslate2's input) translate as the
    text does; the hypotheses are then target pieces."""
    t = qkv.Translator(marian_model)
    tok = qkv.Tokenizer(marian_model)
    text = ["Hello world.", "The quick brown fox."]
    pieces = t.source_tokens(text)
    assert pieces == [tok.encode(s) for s in text]
    assert all(p[0].startswith("\u2581") for p in pieces)
    by_text = t.translate_batch(text, beam_size=2)
    by_pieces = t.translate_batch(pieces, beam_size=2)
    for a, b in zip(by_text, by_pieces):
        assert isinstance(b.hypotheses[0], list)
        ids = [tok.piece_to_id(p, side="target") for p in b.hypotheses[0]]
        assert tok.decode(ids) == a.hypotheses[0]


def test_iterable_and_file(word_model, tmp_path):
    t = qkv.Translator(word_model)
    lines = [s + "\n" for s in SENTENCES]
    streamed = [r.hypotheses[0] for r in t.translate_iterable(iter(lines), batch_size=3)]
    assert streamed == [r.hypotheses[0] for r in t.translate_batch(SENTENCES)]
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(lines))
    assert t.translate_file(src, dst) == len(SENTENCES)
    assert dst.read_text().splitlines() == cli_translate(word_model, SENTENCES, tmp_path)


def test_empty_batch_and_empty_sentence(word_model):
    t = qkv.Translator(word_model)
    assert t.translate_batch([]) == []
    (r,) = t.translate_batch([""])
    assert r.source_length == 0


def test_unknown_words_and_truncation_are_reported(word_model):
    t = qkv.Translator(word_model)
    (r,) = t.translate_batch(["zebra giraffe cat"])
    assert (r.source_length, r.unknown) == (3, 2)
    with pytest.warns(UserWarning, match="truncated"):
        t.translate_batch(["cat " * 1200])


def test_languages_equal_cli(word_model, tmp_path):
    """target_lang of a model whose source starts with its target language's token (text.json
    "languages", as an OPUS-MT multi-target model's >>fra<<) translates as `qkv translate
    --target-lang`; a language the model lacks is refused.""" 
    import shutil
    model = str(tmp_path / "multi")
    shutil.copytree(word_model, model)
    with open(os.path.join(model, "text.json"), "w") as f:
        f.write('{"tokenizer": "d2l", "languages": {"fra": ">>fra<<"}}\n')
    word_model = model
    t = qkv.Translator(word_model)
    got = t.translate_batch(SENTENCES, beam_size=2, target_lang="fra")
    assert [r.hypotheses[0] for r in got] == cli_translate(word_model, SENTENCES, tmp_path,
                                                            "--beam", 2, "--target-lang", "fra")
    plain = qkv.Translator(word_model).translate_batch(SENTENCES, beam_size=2,
                                                       return_scores=True)
    assert [r.hypotheses[0] for r in plain] == cli_translate(word_model, SENTENCES, tmp_path,
                                                             "--beam", 2)
    with_lang = t.translate_batch(SENTENCES, beam_size=2, return_scores=True)  # it holds
    assert [r.scores for r in with_lang] != [r.scores for r in plain]
    assert t.translate_batch(SENTENCES) == t.translate_batch(SENTENCES)  # the default again
    with pytest.raises(qkv.ArgumentError, match="deu"):
        t.translate_batch(["red cat ."], target_lang="deu")


def test_repr_and_properties(word_model):
    t = qkv.Translator(word_model, precision="fp32", threads=1)
    r = repr(t)
    assert "Translator(" in r and "tokenizer='d2l'" in r and "threads=1" in r
    assert t.precision == "fp32" and t.num_steps == 10
    assert t.config["format"] == "qkv-transformer"
    res = t.translate_batch(["red cat ."], return_scores=True)[0]
    assert repr(res).startswith("TranslationResult(hypotheses=")
    assert res["hypotheses"] == res.hypotheses


def test_reduced_precisions_where_the_cpu_runs_them(word_model):
    feats = qkv.cpu_features()
    for p in ("bf16", "int8"):
        if feats[p]:
            t = qkv.Translator(word_model, precision=p)
            assert t.precision == p
            assert len(t.translate_batch(SENTENCES)) == len(SENTENCES)
        else:
            with pytest.raises(qkv.ArgumentError):
                qkv.Translator(word_model, precision=p)


def test_tokenizer(word_model, marian_model):
    tok = qkv.Tokenizer(word_model)
    assert tok.kind == "d2l"
    assert tok.encode("Red Cat!") == ["red", "cat", "!"]
    ids = tok.encode("red cat", out_type=int, side="target")
    assert [tok.id_to_piece(i) for i in ids] == ["red", "cat"]
    assert tok.decode(ids + [3, ids[0]]) == "red cat"  # up to <eos>
    assert tok.vocab_size("source") > 4
    spm = qkv.Tokenizer(marian_model)
    assert spm.kind == "spm" and "Tokenizer(" in repr(spm)
    assert spm.encode(["a b", "c"]) == [spm.encode("a b"), spm.encode("c")]


def test_eval_bleu_is_sacrebleus():
    hyps = ["The cat sat on the mat.", "A dog ran in the park", "Hello"]
    refs = ["The cat sat on a mat.", "The dog ran in the park.", "Hello there"]
    s = qkv.eval_bleu(hyps, [refs], per_sentence=True)
    assert str(s).startswith("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert s.signature.startswith("nrefs:1") and len(s.sentences) == 3
    try:
        import sacrebleu
    except ImportError:
        pytest.skip("sacrebleu is not installed here")
    ref = sacrebleu.corpus_bleu(hyps, [refs])
    assert round(s.score, 6) == round(ref.score, 6)
    assert s.counts == ref.counts and s.totals == ref.totals
    assert round(s.chrf, 6) == round(sacrebleu.corpus_chrf(hyps, [refs]).score, 6)


def test_import_marian(tmp_path):
    import os
    from conftest import PARITY
    hf = os.path.join(PARITY, "marian_shared_swish")
    out = qkv.import_marian(hf, tmp_path / "m")
    assert os.path.isfile(os.path.join(out, "model.safetensors"))
    with pytest.raises(qkv.FileError, match="already holds a model"):
        qkv.import_marian(hf, out)
    qkv.import_marian(hf, out, overwrite=True)
    with pytest.raises(qkv.Error, match="config.json"):
        qkv.import_marian(tmp_path / "nowhere", tmp_path / "x")


@pytest.mark.parametrize("stop", ["hf", "hf-early", "hf-never"])
def test_hf_rules_default_length_penalty(word_model, stop):
    """Under transformers' rules length_penalty defaults to transformers' 1.0 (qkv translate's)."""
    t = qkv.Translator(word_model)
    got = t.translate_batch(SENTENCES, beam_size=3, beam_stop=stop, return_scores=True)
    one = t.translate_batch(SENTENCES, beam_size=3, beam_stop=stop, length_penalty=1.0,
                            return_scores=True)
    zero = t.translate_batch(SENTENCES, beam_size=3, beam_stop=stop, length_penalty=0.0,
                             return_scores=True)
    assert [r.scores for r in got] == [r.scores for r in one] != [r.scores for r in zero]
