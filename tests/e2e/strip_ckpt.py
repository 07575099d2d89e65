"""strip_ckpt.py SRC DST NORM [CLASSES]: a cdl checkpoint as PyTorch would
write its weights (safetensors without metadata or optimizer state) in DST,
and the run's input statistics, "MEAN,STD" as cdl-eval's --norm takes them,
in NORM. CLASSES (a,b,c): the class names the checkpoint must store."""
import json
import struct
import sys

src, dst, normf = sys.argv[1:4]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = head.pop("__metadata__", {})
if len(sys.argv) > 4:
    want = sys.argv[4].replace(",", "\n")
    assert meta.get("class_names") == want, meta.get("class_names")
out, blobs, at = {}, [], 0
for name, t in sorted(head.items()):
    if name.startswith("optimizer."):
        continue
    b, e = t["data_offsets"]
    blobs.append(data[b:e])
    out[name] = dict(t, data_offsets=[at, at + e - b])
    at += e - b
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
open(normf, "w").write(meta["norm_mean"] + "," + meta["norm_std"])
