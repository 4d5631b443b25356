#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Weights as checkpoints store them, and what numpy and torch read from them, for
tests/unit/test_weights.c (safetensors F16/BF16, PyTorch's pytorch_model.bin, numpy's .npz).

    /usr/bin/python3 tests/parity/make_weights_reference.py OUTDIR
    (also run at the end of make_reference.py)

Each OUTDIR/weights_<case>.<ext> is read by qkv; OUTDIR/weights_<case>_ref.safetensors holds
what it must read, every tensor as numpy's or torch's conversion to float32 (float16,
bfloat16), float64, int64 or int32 (int8/int16/uint8/bool) gives it:
    half        safetensors (written by the safetensors package): every float16 and every
                bfloat16 bit pattern (NaNs, infinities, subnormals), a float32 tensor; the
                reference holds the float32 *bits* (int32) so that NaNs compare exactly
    pt_basic    torch.save of an OrderedDict (with _metadata, as state_dict() returns): every
                storage type, a transposed view, a slice at a storage offset, two tensors
                sharing one storage, a 0-d and an empty tensor
    pt_proto4   the same saved with pickle protocol 4 (FRAME, MEMOIZE, SHORT_BINUNICODE),
                holding nn.Parameters (torch._utils._rebuild_parameter)
    npz         numpy.savez: float32/16/64, int64/32/8, a Fortran-order array, a 0-d array, and
                Marian's "special:model.yml" bytes (metadata, not a tensor)
    npz_deflate numpy.savez_compressed of the same
and files that must be refused, with the words the refusal must hold
(OUTDIR/weights_refused.txt, one "FILE<TAB>WORDS" per line):
    pt_legacy.bin   torch.save(_use_new_zipfile_serialization=False)
    pt_evil.bin     a pickle whose reduction calls os.system (torch.load would run it)
    pt_module.bin   a whole nn.Module pickled (a class, not a state dict)
    pt_script.bin   a TorchScript archive (torch.jit.save)
"""
import collections
import io
import os
import pickle
import sys
import zipfile

import numpy as np
import torch


def save_ref(path, arrays):
    from safetensors.numpy import save_file
    save_file({k: np.require(v, requirements="C") for k, v in arrays.items()}, path)


def widened(t):
    """What qkv reads a tensor as: float16/bfloat16 as float32, small integers as int32."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.float().numpy()
    if t.dtype in (torch.int8, torch.int16, torch.uint8, torch.bool):
        return t.to(torch.int32).numpy()
    return t.numpy()


def half_case(out):
    from safetensors.torch import save_file
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)  # wraps to every pattern
    f16 = bits.view(torch.float16).reshape(256, 256)
    bf16 = bits.clone().view(torch.bfloat16).reshape(16, 4096)
    f32 = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    save_file({"f16": f16, "bf16": bf16, "f32": f32}, os.path.join(out, "weights_half.safetensors"))
    save_ref(os.path.join(out, "weights_half_ref.safetensors"), {
        # numpy's widening of float16, and bfloat16's: its bits in the upper half of a float
        "f16_bits": f16.numpy().astype(np.float32).view(np.int32),
        "bf16_bits": bf16.float().numpy().view(np.int32),
        "f32": f32.numpy(),
    })


def state_dict():
    g = torch.Generator().manual_seed(2)
    sd = collections.OrderedDict()
    base = torch.randn(6, 4, generator=g)
    sd["f32"] = torch.randn(3, 4, generator=g)
    sd["f16"] = torch.randn(5, 2, generator=g).half()
    sd["bf16"] = torch.randn(7, generator=g).bfloat16()
    sd["f64"] = torch.randn(2, 3, generator=g).double()
    sd["i64"] = torch.tensor([[1, -2, 2**40], [7, 0, -(2**50)]])
    sd["i32"] = torch.tensor([3, -4, 5], dtype=torch.int32)
    sd["i16"] = torch.tensor([-300, 300], dtype=torch.int16)
    sd["i8"] = torch.tensor([-128, 127, 5], dtype=torch.int8)
    sd["u8"] = torch.tensor([0, 255], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True])
    sd["transposed"] = torch.randn(3, 5, generator=g).t()  # strides (1, 5)
    sd["base"] = base
    sd["row_slice"] = base[2:5]  # offset 8 into base's storage
    sd["column"] = base[:, 1]  # stride 4, offset 1
    sd["scalar"] = torch.tensor(2.5)
    sd["empty"] = torch.zeros(0, 3)
    sd["layer.0.weight"] = torch.randn(2, 2, 3, generator=g).permute(2, 0, 1)
    sd._metadata = collections.OrderedDict({"": {"version": 1}, "layer": {"version": 2}})
    return sd


def pt_cases(out):
    sd = state_dict()
    torch.save(sd, os.path.join(out, "weights_pt_basic.bin"))
    save_ref(os.path.join(out, "weights_pt_basic_ref.safetensors"),
             {k: widened(v.contiguous()) for k, v in sd.items()})
    params = collections.OrderedDict(
        (k, torch.nn.Parameter(v, requires_grad=False) if v.is_floating_point() else v)
        for k, v in sd.items())
    torch.save(params, os.path.join(out, "weights_pt_proto4.bin"), pickle_protocol=4)
    save_ref(os.path.join(out, "weights_pt_proto4_ref.safetensors"),
             {k: widened(v.contiguous()) for k, v in sd.items()})


class Evil:
    def __reduce__(self):
        return (os.system, ("echo qkv-was-made-to-run-this",))


def refused_cases(out):
    refused = []
    sd = state_dict()
    torch.save(sd, os.path.join(out, "weights_pt_legacy.bin"), _use_new_zipfile_serialization=False)
    refused.append(("weights_pt_legacy.bin", "legacy format"))
    # torch.save's own layout, with a pickle that calls os.system on loading
    with zipfile.ZipFile(os.path.join(out, "weights_pt_evil.bin"), "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"x": Evil()}, protocol=2))
        z.writestr("archive/version", "3\n")
    refused.append(("weights_pt_evil.bin", "system', which is not part of a state dict"))
    torch.save(torch.nn.Linear(2, 3), os.path.join(out, "weights_pt_module.bin"))
    refused.append(("weights_pt_module.bin", "torch.nn.modules.linear.Linear', which is not"))
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), os.path.join(out, "weights_pt_script.bin"))
    refused.append(("weights_pt_script.bin", "TorchScript"))
    with open(os.path.join(out, "weights_refused.txt"), "w") as f:
        for name, words in refused:
            f.write(f"{name}\t{words}\n")


def npz_cases(out):
    rng = np.random.default_rng(3)
    arrays = {
        "encoder_l1_self_Wq": rng.standard_normal((4, 6)).astype(np.float32),
        "half": rng.standard_normal((3, 2)).astype(np.float16),
        "double": rng.standard_normal(5),
        "long": np.array([[2**40, -1], [3, 4]], dtype=np.int64),
        "int": np.array([1, -2, 3], dtype=np.int32),
        "byte": np.array([-5, 6], dtype=np.int8),
        "fortran": np.asfortranarray(rng.standard_normal((3, 4, 2)).astype(np.float32)),
        "scalar": np.array(1.5, dtype=np.float32),
    }
    yml = "type: transformer\ndim-emb: 6\n"
    special = {"special:model.yml": np.frombuffer(yml.encode() + b"\0", dtype=np.int8)}
    np.savez(os.path.join(out, "weights_npz.npz"), **arrays, **special)
    np.savez_compressed(os.path.join(out, "weights_npz_deflate.npz"), **arrays, **special)
    ref = {k: (v.astype(np.float32) if v.dtype == np.float16 else
               v.astype(np.int32) if v.dtype == np.int8 else v) for k, v in arrays.items()}
    for case in ("npz", "npz_deflate"):
        from safetensors.numpy import save_file
        save_file({k: np.require(v, requirements="C") for k, v in ref.items()},
                  os.path.join(out, f"weights_{case}_ref.safetensors"),
                  metadata={"special:model.yml": yml})


def write_all(out):
    half_case(out)
    pt_cases(out)
    refused_cases(out)
    npz_cases(out)


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    write_all(sys.argv[1])
