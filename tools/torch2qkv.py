#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Convert the model of PyTorch's tutorial "Language Translation with nn.Transformer" into a
qkv model directory.

    /usr/bin/python3 tools/torch2qkv.py STATE_DICT.pt --heads 8 \\
        --src-vocab de_vocab.txt --tgt-vocab en_vocab.txt --out DIR
    qkv translate --model DIR < sentences.txt       # one sentence a line, tokens split by spaces

STATE_DICT.pt is torch.save(model.state_dict(), ...) of the tutorial's Seq2SeqTransformer:
    src_tok_emb.embedding.weight (Vs, C)    TokenEmbedding: embedding(tokens) * sqrt(C)
    tgt_tok_emb.embedding.weight (Vt, C)
    positional_encoding.pos_embedding       (maxlen, 1, C), the sinusoidal table (a buffer)
    transformer.*                           nn.Transformer(d_model=C, nhead, num_encoder_layers,
                                            num_decoder_layers, dim_feedforward, dropout):
                                            post-norm, ReLU, biases, final encoder/decoder norms
    generator.weight (Vt, C), generator.bias (Vt)
The vocabulary files hold one token a line, line i + 1 being id i (vocab.get_itos()), starting
<unk> <pad> <bos> <eos> (ids 0..3, as in the tutorial and in qkv).

DIR receives config.json, model.safetensors, src_vocab.txt, tgt_vocab.txt and text.json, which
tells `qkv translate` to split sentences on whitespace (the tutorial's spaCy tokenizers cannot be
reproduced; give qkv text that is already tokenised) and to begin every source with <bos>, as
the tutorial's text_transform does. Greedy translations then match the tutorial's greedy_decode
token for token. Its max_len = num_tokens + 5 (the source with <bos> and <eos>) lets it emit at
most num_tokens + 4 tokens counting <eos>, which is `qkv translate --max-len num_tokens+4`;
qkv's default cap is 100 for every sentence, so a sentence the tutorial cuts off goes on.

The mapping, with C = d_model (torch's Linear and qkv both store W as (out, in)):
    in_proj_weight (3C, C) = [W_q; W_k; W_v],  in_proj_bias (3C) = [b_q; b_k; b_v]
    out_proj -> W_o, b_o;  linear1 -> ffn.W1, b1;  linear2 -> ffn.W2, b2
    encoder layer: self_attn -> attention, norm1, norm2 (after attention, after the FFN)
    decoder layer: self_attn -> self_attention, multihead_attn -> cross_attention,
                   norm1, norm2, norm3 (after self-attention, cross-attention, the FFN)
    transformer.encoder.norm / decoder.norm -> encoder.norm / decoder.norm
    generator -> output.W, output.b
qkv recomputes the sinusoidal table in float64 (the tutorial's is float32), so logits differ
by float rounding only (~1e-6 for short sentences). Dropout is not in a state_dict: --dropout
(default 0.1, the tutorial's) only matters if the converted model is trained further.

Nothing is written unless the whole input is valid; each file then appears atomically.
"""
import argparse
import inspect
import json
import os
import re
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("torch2qkv: error: needs numpy and PyTorch (run it with a Python that has them)")

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIALS = ["<unk>", "<pad>", "<bos>", "<eos>"]


class ConversionError(Exception):
    """Bad input: the message is printed as is, without a traceback."""


# ---------------------------------------------------------------------------------------------
# Reading the state_dict
# ---------------------------------------------------------------------------------------------

def load_state_dict(path):
    """{name: float32 numpy array} from a torch.save'd state_dict (or a checkpoint dict holding
    one under "model_state_dict", "state_dict" or "model")."""
    try:
        import torch
    except ImportError:
        raise ConversionError("needs PyTorch to read the state_dict (run it with a Python that "
                              "has torch)")
    if not os.path.isfile(path):
        raise ConversionError(f"{path}: no such file")
    # weights_only (torch >= 1.13) unpickles tensors and containers only, never code
    safe = {"weights_only": True} if "weights_only" in inspect.signature(torch.load).parameters \
        else {}
    try:
        obj = torch.load(path, map_location="cpu", **safe)
    except Exception as e:  # noqa: BLE001 - whatever the unpickler says, the file is at fault
        cls = re.search(r"Unsupported class (\S+)", str(e))
        if cls:
            raise ConversionError(f"{path}: holds a pickled {cls.group(1)}, not only tensors; "
                                  "save model.state_dict() instead of the model")
        raise ConversionError(f"{path}: not a file written by torch.save ({type(e).__name__}"
                              f"{': ' + str(e).splitlines()[0] if str(e) else ''})")
    if isinstance(obj, dict) and not any(torch.is_tensor(v) for v in obj.values()):
        for key in ("model_state_dict", "state_dict", "model"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise ConversionError(f"{path}: holds a {type(obj).__name__}, not a state_dict "
                              "(save model.state_dict())")
    names = list(obj)
    if all(isinstance(n, str) and n.startswith("module.") for n in names):
        obj = {n[len("module."):]: v for n, v in obj.items()}  # saved from nn.DataParallel
    sd = {}
    for name, t in obj.items():
        if not isinstance(name, str) or not torch.is_tensor(t):
            raise ConversionError(f"{path}: entry {name!r} is a {type(t).__name__}, not a tensor "
                                  "(is this a state_dict?)")
        if not t.is_floating_point():
            raise ConversionError(f"{path}: tensor '{name}' has dtype {t.dtype}, expected a "
                                  "floating-point type")
        a = t.detach().to(torch.float32).contiguous().numpy()
        if not np.isfinite(a).all():
            bad = int(np.flatnonzero(~np.isfinite(a.ravel()))[0])
            raise ConversionError(f"{path}: tensor '{name}' holds a NaN or Inf (element {bad})")
        sd[name] = a
    return sd


def _layer_count(sd, prefix):
    """1 + the largest i of the keys "<prefix>.<i>.*" (0 if there is none)."""
    pat = re.compile(re.escape(prefix) + r"\.(\d+)\.")
    idx = [int(m.group(1)) for m in (pat.match(k) for k in sd) if m]
    return max(idx) + 1 if idx else 0


def _mha_keys(prefix):
    return [f"{prefix}.in_proj_weight", f"{prefix}.in_proj_bias", f"{prefix}.out_proj.weight",
            f"{prefix}.out_proj.bias"]


def _norm_keys(prefix):
    return [f"{prefix}.weight", f"{prefix}.bias"]


def _ffn_keys(prefix):
    return [f"{prefix}.linear1.weight", f"{prefix}.linear1.bias", f"{prefix}.linear2.weight",
            f"{prefix}.linear2.bias"]


def tutorial_keys(n_enc, n_dec):
    """Every parameter name of Seq2SeqTransformer (the positional table aside)."""
    keys = ["src_tok_emb.embedding.weight", "tgt_tok_emb.embedding.weight"]
    for l in range(n_enc):
        p = f"transformer.encoder.layers.{l}"
        keys += _mha_keys(f"{p}.self_attn") + _ffn_keys(p)
        keys += _norm_keys(f"{p}.norm1") + _norm_keys(f"{p}.norm2")
    keys += _norm_keys("transformer.encoder.norm")
    for l in range(n_dec):
        p = f"transformer.decoder.layers.{l}"
        keys += _mha_keys(f"{p}.self_attn") + _mha_keys(f"{p}.multihead_attn") + _ffn_keys(p)
        keys += _norm_keys(f"{p}.norm1") + _norm_keys(f"{p}.norm2") + _norm_keys(f"{p}.norm3")
    keys += _norm_keys("transformer.decoder.norm")
    keys += ["generator.weight", "generator.bias"]
    return keys


POS_KEY = "positional_encoding.pos_embedding"


def sinusoidal_table(T, C):
    """qkv_sinusoidal_table: P[i, 2j] = sin(i / 10000^(2j/C)), P[i, 2j+1] = cos(same)."""
    pos = np.arange(T, dtype=np.float64)[:, None]
    two_j = (np.arange(C) & ~1).astype(np.float64)
    angle = pos / np.power(10000.0, two_j / C)
    return np.where(np.arange(C) % 2 == 0, np.sin(angle), np.cos(angle))


def infer_config(sd, heads, max_len=None, dropout=0.1, where="state_dict"):
    """qkv's configuration (tools/qkv_torch.py's keys) from the state_dict's names and shapes,
    after checking that they are exactly the tutorial's. where names the file in messages."""

    def bad(msg):
        return ConversionError(f"{where}: {msg}")

    for k in ("src_tok_emb.embedding.weight", "tgt_tok_emb.embedding.weight"):
        if k not in sd:
            raise bad(f"tensor '{k}' is missing: not the state_dict of the "
                      "tutorial's Seq2SeqTransformer")
    for k in ("src_tok_emb.embedding.weight", "tgt_tok_emb.embedding.weight"):
        if sd[k].ndim != 2:
            raise bad(f"tensor '{k}' has shape {tuple(sd[k].shape)}, expected "
                      "(vocabulary, emb_size)")
    Vs, C = sd["src_tok_emb.embedding.weight"].shape
    Vt = sd["tgt_tok_emb.embedding.weight"].shape[0]
    n_enc = _layer_count(sd, "transformer.encoder.layers")
    n_dec = _layer_count(sd, "transformer.decoder.layers")
    if n_enc < 1 or n_dec < 1:
        raise bad(f"the state_dict has {n_enc} encoder and {n_dec} decoder layers; "
                  "the tutorial's model has at least one of each")
    want = tutorial_keys(n_enc, n_dec)
    have = set(sd) - {POS_KEY}
    missing = [k for k in want if k not in have]
    unexpected = sorted(have - set(want))
    if missing or unexpected:
        def show(ks):
            return ", ".join(ks[:5]) + (f" and {len(ks) - 5} more" if len(ks) > 5 else "")
        parts = []
        if missing:
            parts.append(f"missing {show(missing)}")
        if unexpected:
            parts.append(f"unexpected {show(unexpected)}")
        raise bad("not the state_dict of the tutorial's Seq2SeqTransformer "
                  f"({n_enc} encoder + {n_dec} decoder layers): " + "; ".join(parts))

    ffn_key = "transformer.encoder.layers.0.linear1.weight"
    if sd[ffn_key].ndim != 2:
        raise bad(f"tensor '{ffn_key}' has shape {tuple(sd[ffn_key].shape)}, "
                  "expected (dim_feedforward, emb_size)")
    Fh = sd[ffn_key].shape[0]
    leaf_shapes = {"in_proj_weight": (3 * C, C), "in_proj_bias": (3 * C,),
                   "out_proj.weight": (C, C), "out_proj.bias": (C,),
                   "linear1.weight": (Fh, C), "linear1.bias": (Fh,),
                   "linear2.weight": (C, Fh), "linear2.bias": (C,),
                   "src_tok_emb.embedding.weight": (Vs, C),
                   "tgt_tok_emb.embedding.weight": (Vt, C),
                   "generator.weight": (Vt, C), "generator.bias": (Vt,)}

    def shape_of(k):
        for leaf, shape in leaf_shapes.items():
            if k == leaf or k.endswith("." + leaf):
                return shape
        return (C,)  # LayerNorm weights and biases

    for k in want:
        need = shape_of(k)
        if tuple(sd[k].shape) != need:
            raise bad(
                f"tensor '{k}' has shape {tuple(sd[k].shape)}, expected {need} (emb_size {C} "
                f"and vocabularies {Vs}/{Vt} from the embeddings, dim_feedforward {Fh} from "
                f"{ffn_key})")

    if heads < 1 or C % heads:
        raise ConversionError(f"--heads {heads} does not divide emb_size {C}")

    table_len = None
    if POS_KEY in sd:
        P = sd[POS_KEY]
        if P.ndim == 3 and 1 in P.shape[:2]:
            P = P.reshape(-1, P.shape[-1])
        if P.ndim != 2 or P.shape[1] != C:
            raise bad(f"tensor '{POS_KEY}' has shape {tuple(sd[POS_KEY].shape)}, "
                      f"expected (maxlen, 1, {C})")
        table_len = P.shape[0]
        # float32 angles pos * den lose ~pos * 2^-24: the tutorial's table drifts that far
        # from qkv's float64 one at its last rows; anything else is a different encoding
        tol = 1e-4 + 8.0 * table_len * 2.0 ** -24
        diff = np.abs(P.astype(np.float64) - sinusoidal_table(table_len, C))
        if diff.max() > tol:
            i, j = np.unravel_index(int(diff.argmax()), diff.shape)
            raise bad(f"tensor '{POS_KEY}' is not the sinusoidal table qkv uses "
                      f"(position {i}, column {j} differs by {diff.max():.3g})")
    if max_len is None:
        max_len = table_len or 5000
    if max_len < 2:
        raise ConversionError(f"--max-len {max_len}: must be at least 2")
    if not 0.0 <= dropout < 1.0:
        raise ConversionError(f"--dropout {dropout}: must be in [0, 1)")
    return {"src_vocab": int(Vs), "tgt_vocab": int(Vt), "d_model": int(C), "heads": int(heads),
            "ffn": int(Fh), "enc_layers": n_enc, "dec_layers": n_dec, "max_len": int(max_len),
            "dropout": float(dropout), "bias": 1, "pre_norm": 0, "final_norm": 1,
            "act": "relu", "tie": "none", "learned_pos": 0, "ln_eps": 1e-5}


# ---------------------------------------------------------------------------------------------
# The mapping
# ---------------------------------------------------------------------------------------------

def convert(sd, cfg):
    """{qkv name: float32 array}, in the order of qkv's parameter table."""
    C = cfg["d_model"]
    out = {"src_embedding": sd["src_tok_emb.embedding.weight"],
           "tgt_embedding": sd["tgt_tok_emb.embedding.weight"]}

    def mha(dst, src):
        W, b = sd[f"{src}.in_proj_weight"], sd[f"{src}.in_proj_bias"]
        for i, w in enumerate("qkv"):
            out[f"{dst}.W_{w}"] = W[i * C:(i + 1) * C]
            out[f"{dst}.b_{w}"] = b[i * C:(i + 1) * C]
        out[f"{dst}.W_o"] = sd[f"{src}.out_proj.weight"]
        out[f"{dst}.b_o"] = sd[f"{src}.out_proj.bias"]

    def norm(dst, src):
        out[f"{dst}.gamma"], out[f"{dst}.beta"] = sd[f"{src}.weight"], sd[f"{src}.bias"]

    def ffn(dst, src):
        out[f"{dst}.W1"], out[f"{dst}.b1"] = sd[f"{src}.linear1.weight"], sd[f"{src}.linear1.bias"]
        out[f"{dst}.W2"], out[f"{dst}.b2"] = sd[f"{src}.linear2.weight"], sd[f"{src}.linear2.bias"]

    for l in range(cfg["enc_layers"]):
        p = f"transformer.encoder.layers.{l}"
        mha(f"encoder.{l}.attention", f"{p}.self_attn")
        norm(f"encoder.{l}.norm1", f"{p}.norm1")
        ffn(f"encoder.{l}.ffn", p)
        norm(f"encoder.{l}.norm2", f"{p}.norm2")
    norm("encoder.norm", "transformer.encoder.norm")
    for l in range(cfg["dec_layers"]):
        p = f"transformer.decoder.layers.{l}"
        mha(f"decoder.{l}.self_attention", f"{p}.self_attn")
        norm(f"decoder.{l}.norm1", f"{p}.norm1")
        mha(f"decoder.{l}.cross_attention", f"{p}.multihead_attn")
        norm(f"decoder.{l}.norm2", f"{p}.norm2")
        ffn(f"decoder.{l}.ffn", p)
        norm(f"decoder.{l}.norm3", f"{p}.norm3")
    norm("decoder.norm", "transformer.decoder.norm")
    out["output.W"], out["output.b"] = sd["generator.weight"], sd["generator.bias"]

    # the names and shapes must be exactly qkv's table (tools/qkv_torch.py mirrors walk())
    sys.path.insert(0, HERE)
    import qkv_torch
    table = qkv_torch.qkv_tensor_table(cfg)
    got = [(n, tuple(a.shape)) for n, a in out.items()]
    assert got == [(n, tuple(s)) for n, s in table], "mapping out of step with qkv's table"
    return {n: np.ascontiguousarray(a, dtype="<f4") for n, a in out.items()}


# ---------------------------------------------------------------------------------------------
# Vocabularies
# ---------------------------------------------------------------------------------------------

def read_vocab(path, size, which):
    """The tokens of a one-token-a-line file ("\\n" or "\\r\\n"), checked as qkv_vocab_load
    will check them, and against the size of the model's embedding."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConversionError(f"{path}: {e.strerror}")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    tokens, seen = [], {}
    for i, raw in enumerate(lines, 1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            tok = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConversionError(f"{path}:{i}: invalid UTF-8 at byte {e.start}")
        if not tok:
            raise ConversionError(f"{path}:{i}: empty line (qkv's vocabulary files hold one "
                                  "non-empty token a line)")
        if "\0" in tok:
            raise ConversionError(f"{path}:{i}: NUL byte in a token")
        if tok in seen:
            raise ConversionError(f"{path}:{i}: duplicate token {tok!r} (first on line "
                                  f"{seen[tok]})")
        seen[tok] = i
        tokens.append(tok)
    for i, s in enumerate(SPECIALS):
        if i >= len(tokens) or tokens[i] != s:
            found = repr(tokens[i]) if i < len(tokens) else "the end of the file"
            raise ConversionError(f"{path}:{i + 1}: expected {s!r} (the tutorial's special ids: "
                                  f"<unk> 0, <pad> 1, <bos> 2, <eos> 3), found {found}")
    if len(tokens) != size:
        raise ConversionError(f"{path}: {len(tokens)} tokens, but the model's {which} has "
                              f"{size} rows")
    return tokens


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

def atomic_write(path, chunks):
    """path replaced by the concatenation of chunks (bytes): a temporary file next to it,
    fsync, rename, so a reader sees the old file or the new one."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def safetensors_chunks(tensors, meta):
    """The safetensors image: u64 header length, JSON header (padded to 8 bytes), data."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = dict(meta)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return [len(h).to_bytes(8, "little"), h] + blobs


def config_json(cfg):
    """config.json as qkv_config_from_json reads it (the keys of qkv_config_to_json)."""
    c = {"format": "qkv-transformer", "version": 1}
    for k in ("src_vocab", "tgt_vocab", "d_model", "heads", "ffn", "enc_layers", "dec_layers",
              "max_len", "dropout"):
        c[k] = cfg[k]
    for k in ("bias", "pre_norm", "final_norm"):
        c[k] = bool(cfg[k])
    c["act"], c["tie"], c["learned_pos"], c["ln_eps"] = (cfg["act"], cfg["tie"],
                                                         bool(cfg["learned_pos"]), cfg["ln_eps"])
    return json.dumps(c, indent=2) + "\n"


OUTPUTS = ("model.safetensors", "src_vocab.txt", "tgt_vocab.txt", "text.json", "config.json")


def check_out_dir(out):
    """out must be new, empty, or an earlier conversion: files of another model (a train.json,
    a checkpoint) would be read along with the converted one."""
    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        raise ConversionError(f"{out}: exists and is not a directory")
    others = sorted(f for f in os.listdir(out) if f not in OUTPUTS and not f.startswith("."))
    if others:
        shown = ", ".join(others[:4]) + (" ..." if len(others) > 4 else "")
        raise ConversionError(f"{out}: holds files of another model ({shown}); convert into a "
                              "new or empty directory")


def write_model_dir(out, cfg, tensors, src_tokens, tgt_tokens):
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise ConversionError(f"{out}: cannot create the directory: {e.strerror}")
    files = [
        ("model.safetensors", safetensors_chunks(tensors, {"format": "qkv-transformer"})),
        ("src_vocab.txt", ["".join(t + "\n" for t in src_tokens).encode()]),
        ("tgt_vocab.txt", ["".join(t + "\n" for t in tgt_tokens).encode()]),
        ("text.json", [(json.dumps({"tokenizer": "whitespace", "source_bos": True}, indent=2)
                        + "\n").encode()]),
        ("config.json", [config_json(cfg).encode()]),
    ]
    for name, chunks in files:
        try:
            atomic_write(os.path.join(out, name), chunks)
        except OSError as e:
            raise ConversionError(f"{os.path.join(out, name)}: cannot write: {e.strerror}")


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="torch2qkv.py",
        description="Convert the PyTorch tutorial's Seq2SeqTransformer (a state_dict) into a "
                    "qkv model directory.")
    ap.add_argument("state_dict",
                    help="torch.save(model.state_dict(), PATH) of the tutorial's model")
    ap.add_argument("--heads", type=int, required=True, help="nhead of the nn.Transformer")
    ap.add_argument("--src-vocab", required=True, help="source tokens, one a line, line i+1 = id i")
    ap.add_argument("--tgt-vocab", required=True, help="target tokens, one a line, line i+1 = id i")
    ap.add_argument("--out", required=True, help="the model directory to write")
    ap.add_argument("--max-len", type=int, default=None,
                    help="longest sequence qkv accepts (default: the rows of the tutorial's "
                         "positional table, 5000)")
    ap.add_argument("--dropout", type=float, default=0.1,
                    help="dropout recorded for further training in qkv (default 0.1)")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    try:
        sd = load_state_dict(a.state_dict)
        cfg = infer_config(sd, a.heads, a.max_len, a.dropout, a.state_dict)
        src = read_vocab(a.src_vocab, cfg["src_vocab"], "source embedding (src_tok_emb)")
        tgt = read_vocab(a.tgt_vocab, cfg["tgt_vocab"], "target embedding (tgt_tok_emb)")
        tensors = convert(sd, cfg)
        check_out_dir(a.out)
        write_model_dir(a.out, cfg, tensors, src, tgt)
    except ConversionError as e:
        print(f"torch2qkv: error: {e}", file=sys.stderr)
        return 1
    spaced = sum(any(ch.isspace() for ch in t) for t in src)
    if spaced:
        print(f"torch2qkv: note: {spaced} source tokens contain whitespace; qkv splits input on "
              "whitespace, so they can never be typed", file=sys.stderr)
    print(f"torch2qkv: wrote {a.out}: d_model {cfg['d_model']}, {cfg['heads']} heads, FFN "
          f"{cfg['ffn']}, {cfg['enc_layers']}+{cfg['dec_layers']} layers, vocabularies "
          f"{cfg['src_vocab']}/{cfg['tgt_vocab']}, max_len {cfg['max_len']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
