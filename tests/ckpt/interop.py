"""Interoperability of libcdl's safetensors code with the reference one.

  interop.py ST_TOOL

1. A checkpoint written by libcdl (through ST_TOOL) loads with
   safetensors.torch.load_file, bit for bit (float32 and int64 tensors),
   with its metadata, and loads into the equivalent torch.nn model with
   load_state_dict(strict=True).
2. A file written by safetensors.torch.save_file (with metadata and a mix of
   dtypes) is read by libcdl: float32 and int64 tensors bit for bit, the
   others reported as neither.
Prints "N passed, N failed" and exits non-zero on any failure.
"""
import os
import struct
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from torch_ref import LeNet  # noqa: E402  (the one reference model of the tests)

ST_TOOL = sys.argv[1]
results = {"passed": 0, "failed": 0}


def check(cond, what):
    results["passed" if cond else "failed"] += 1
    print(("ok     " if cond else "FAILED ") + what)


def write_spec(path, tensors, metadata):
    """tensors: list of (name, float32 tensor); metadata: dict of str."""
    with open(path, "w") as f:
        for k, v in metadata.items():
            f.write("meta %s %s\n" % (k.encode().hex(), v.encode().hex()))
        for name, t in tensors:
            t = t.contiguous()
            f.write("tensor %s %d %s\n" % (name.encode().hex(), t.dim(),
                                           " ".join(str(d) for d in t.shape)))
            if t.dtype == torch.int64:
                f.write("i64 %s\n" % t.numpy().astype("<i8").tobytes().hex())
            else:
                f.write("data %s\n" % t.numpy().astype("<f4").tobytes().hex())


def parse_dump(text):
    """ST_TOOL dump output -> (list of (name, shape, bytes or error), metadata)."""
    tensors, metadata = [], {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "meta":
            k, v = rest.split(" ")
            metadata[bytes.fromhex(k).decode()] = bytes.fromhex(v).decode()
        elif kind == "tensor":
            parts = rest.split(" ")
            tensors.append([bytes.fromhex(parts[0]).decode(),
                            [int(d) for d in parts[2:2 + int(parts[1])]], None])
        elif kind == "data":
            tensors[-1][2] = bytes.fromhex(rest.strip())
        elif kind == "i64":
            tensors[-1][2] = ("i64", bytes.fromhex(rest.strip()))
        elif kind == "error":
            tensors[-1][2] = rest
        else:
            raise ValueError("unexpected dump line: %r" % line)
    return tensors, metadata


def bits(t):
    """The float32 bit patterns of t, so NaN payloads and -0 compare exactly."""
    return t.contiguous().view(torch.int32)


def special_values():
    return torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"),
                         1e-45, -1.17549435e-38, 3.4028235e38, 1.0 / 3.0])


def c_writes_python_reads(tmp):
    torch.manual_seed(1)
    model = LeNet()   # names and layouts as libcdl writes them
    tensors = list(model.state_dict().items()) + [
        ("special", special_values()),
        ("scalar", torch.tensor(2.5)),
        ("empty", torch.zeros(0, 3)),
        ("bn1.num_batches_tracked", torch.tensor(123456789012, dtype=torch.int64)),
        ("counts", torch.tensor([0, -1, 2**63 - 1], dtype=torch.int64)),
        ("a 4-d \"quoted\\\" name \u00e9\U0001F600", torch.randn(2, 3, 4, 5)),
    ]
    metadata = {
        "epoch": "3",
        "optimizer": '{"name": "sgd", "lr": 0.1, "path": "C:\\\\runs"}',
        "controls": "tab\tnewline\nbell\x07 unit\x1f del\x7f",
        "unicode \u2603": "h\u00e9llo \U0001F600",
        "empty": "",
    }
    spec = os.path.join(tmp, "c.spec")
    out = os.path.join(tmp, "from_c.safetensors")
    write_spec(spec, tensors, metadata)
    r = subprocess.run([ST_TOOL, "write", out, spec], capture_output=True, text=True)
    check(r.returncode == 0, "st_tool write: %s" % r.stderr.strip())
    if r.returncode:
        return

    loaded = load_file(out)
    check(sorted(loaded) == sorted(n for n, _ in tensors), "load_file sees every tensor")
    for name, t in tensors:
        got = loaded.get(name)
        same = (got is not None and got.dtype == t.dtype and got.shape == t.shape and
                (torch.equal(got, t) if t.dtype == torch.int64 else torch.equal(bits(got), bits(t))))
        check(same, "tensor %r identical" % name)
    with safe_open(out, framework="pt") as f:
        # cdl adds its checksum entry (docs/checkpoints.md), plain metadata to others.
        meta = dict(f.metadata())
        check(meta.pop("cdl_checksum", "").startswith("crc32 data="), "checksum entry present")
        check(meta == metadata, "metadata identical")
        check(list(f.keys()) == sorted(n for n, _ in tensors), "safe_open lists the tensors")

    fresh = LeNet()
    state = {k: v for k, v in loaded.items() if k in fresh.state_dict()}
    fresh.load_state_dict(state, strict=True)
    check(all(torch.equal(fresh.state_dict()[k], v) for k, v in model.state_dict().items()),
          "load_state_dict(strict=True) restores the model")

    # The reference writer would also pad the header to a multiple of 8.
    with open(out, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
    check(n % 8 == 0, "header length %d is a multiple of 8" % n)


def python_writes_c_reads(tmp):
    torch.manual_seed(2)
    f32 = {
        "conv.weight": torch.randn(4, 3, 3, 3),
        "bias": torch.randn(7),
        "special": special_values(),
        "scalar": torch.tensor(-1.5),
        "empty": torch.zeros(2, 0),
        "\u00fcber.\"x\"\\": torch.randn(1, 2, 1, 2, 1, 2),
    }
    other = {
        "half": torch.randn(3).half(),          # 6 bytes: puts later data off 4-byte alignment
        "steps": torch.arange(5, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
    }
    metadata = {"format": "pt", "note": "line1\nline2 \"q\" \\ \u2603", "": "empty key"}
    out = os.path.join(tmp, "from_python.safetensors")
    save_file({**f32, **other}, out, metadata=metadata)

    r = subprocess.run([ST_TOOL, "dump", out], capture_output=True, text=True)
    check(r.returncode == 0, "st_tool dump: %s" % r.stderr.strip())
    if r.returncode:
        return
    tensors, meta = parse_dump(r.stdout)
    check(meta == metadata, "metadata identical")
    by_name = {name: (shape, payload) for name, shape, payload in tensors}
    check(sorted(by_name) == sorted({**f32, **other}), "every tensor listed")
    for name, t in f32.items():
        shape, payload = by_name.get(name, (None, None))
        expect = t.contiguous().numpy().astype("<f4").tobytes()
        check(shape == list(t.shape) and payload == expect, "F32 tensor %r identical" % name)
    shape, payload = by_name.get("steps", (None, None))
    check(shape == [5] and payload == ("i64", other["steps"].numpy().astype("<i8").tobytes()),
          "I64 tensor 'steps' identical")
    for name, t in other.items():
        if t.dtype == torch.int64:
            continue
        shape, payload = by_name.get(name, (None, None))
        dtype = {torch.float16: "F16", torch.bool: "BOOL"}[t.dtype]
        check(shape == list(t.shape) and isinstance(payload, str)
              and ("is %s" % dtype) in payload and out in payload,
              "%s tensor %r parsed, its data refused: %s" % (dtype, name, payload))


def corrupt_file_is_refused(tmp):
    """A truncated reference file: the reference and libcdl both refuse it."""
    out = os.path.join(tmp, "cut.safetensors")
    save_file({"w": torch.randn(10)}, out)
    with open(out, "rb+") as f:
        f.truncate(os.path.getsize(out) - 4)
    try:
        load_file(out)
        ref_refuses = False
    except Exception:
        ref_refuses = True
    r = subprocess.run([ST_TOOL, "dump", out], capture_output=True, text=True)
    check(ref_refuses and r.returncode != 0 and "truncated" in r.stderr and out in r.stderr,
          "truncated file refused by both: %s" % r.stderr.strip())


def main():
    import safetensors
    print("torch %s, safetensors %s" % (torch.__version__, safetensors.__version__))
    with tempfile.TemporaryDirectory(prefix="cdl-interop-") as tmp:
        c_writes_python_reads(tmp)
        python_writes_c_reads(tmp)
        corrupt_file_is_refused(tmp)
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
