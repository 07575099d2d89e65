#!/usr/bin/env python3
"""Reads a TensorBoard event file with the standard library only and prints
what cdl-train wrote as JSON: {"version": ..., "scalars": {tag: [[step,
value], ...]}, "hparams": {tag: {"plugin": name, "bytes": n}},
"hparam_values": {name: value of this session}, "starts":
[step of each SessionLog START], "records": n}.

Every record's two masked CRC32C are checked: a damaged file exits 1 with
the record and offset. Used by tests/e2e/tensorboard.sh, so the event files
are checked even where the TensorBoard library cannot be installed."""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, t = key >> 3, key & 7
        if t == 0:
            v, i = varint(buf, i)
        elif t == 1:
            v, i = buf[i:i + 8], i + 8
        elif t == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif t == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {t}")
        if i > len(buf):
            raise ValueError("truncated field")
        yield f, t, v


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def session_values(value):
    """{name: number or string} of a Value holding the hparams plugin's
    SessionStartInfo (HParamsPluginData field 3, its hparams map field 1)."""
    out = {}
    for vf, _, meta in fields(value):
        if vf != 9:
            continue
        plug = dict((f, v) for f, _, v in fields(dict((f, v) for f, _, v in fields(meta))[1]))
        start = dict((f, v) for f, _, v in fields(plug[2]))[3]
        for f, _, entry in fields(start):
            if f != 1:
                continue
            e = dict((ef, ev) for ef, _, ev in fields(entry))
            val = dict((vf2, vv) for vf2, _, vv in fields(e[2]))
            out[e[1].decode()] = (struct.unpack("<d", val[2])[0] if 2 in val
                                  else val.get(3, b"").decode())
    return out


def main(path):
    data = open(path, "rb").read()
    out = {"version": None, "scalars": {}, "hparams": {}, "starts": [], "records": 0}
    off = 0
    while off < len(data):
        if len(data) - off < 12:
            sys.exit(f"{path}: truncated record header at byte {off}")
        head = data[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[off + 8:off + 12])
        if hc != masked(crc32c(head)):
            sys.exit(f"{path}: record {out['records']} at byte {off}: length CRC mismatch")
        body = data[off + 12:off + 12 + n]
        tail = data[off + 12 + n:off + 16 + n]
        if len(body) != n or len(tail) != 4:
            sys.exit(f"{path}: record {out['records']} at byte {off}: truncated")
        if struct.unpack("<I", tail)[0] != masked(crc32c(body)):
            sys.exit(f"{path}: record {out['records']} at byte {off}: data CRC mismatch")
        off += 16 + n
        out["records"] += 1
        step = 0
        for f, _, v in fields(body):
            if f == 2:
                step = v
            elif f == 3:
                out["version"] = v.decode()
            elif f == 7:   # SessionLog: status 1 is START
                if dict((sf, sv) for sf, _, sv in fields(v)).get(1) == 1:
                    out["starts"].append(step)
            elif f == 5:
                for sf, _, value in fields(v):
                    if sf != 1:
                        continue
                    tag, simple, plugin = None, None, None
                    for vf, _, vv in fields(value):
                        if vf == 1:
                            tag = vv.decode()
                        elif vf == 2:
                            simple = struct.unpack("<f", vv)[0]
                        elif vf == 9:
                            for mf, _, mv in fields(vv):
                                if mf == 1:
                                    pd = dict((pf, pv) for pf, _, pv in fields(mv))
                                    plugin = (pd.get(1, b"").decode(), len(pd.get(2, b"")))
                    if simple is not None:
                        out["scalars"].setdefault(tag, []).append([step, simple])
                    elif plugin:
                        out["hparams"][tag] = {"plugin": plugin[0], "bytes": plugin[1]}
                        if tag == "_hparams_/session_start_info":
                            out["hparam_values"] = session_values(value)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
