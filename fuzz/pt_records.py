#!/usr/bin/env python3
"""Seeds for fuzz/pt_fuzzer.cpp: a TorchScript archive (.pt, a zip) as the fuzzer's record list, each record
[1 byte: name length][name][4 bytes little-endian: length][contents], names without the archive's top directory.
The records LibTorch's writer adds itself (byteorder, serialization id) are left out; the version record is kept (the
harness gives it to the writer as the archive's version: an older one would make LibTorch apply its upgraders).

    python3 fuzz/pt_records.py MODEL.pt OUT_FILE
"""
import struct
import sys
import zipfile

WRITER_ADDS = {"byteorder", ".data/serialization_id"}


def main(src, dst):
    out = bytearray()
    with zipfile.ZipFile(src) as z:
        for info in z.infolist():
            name = info.filename.split("/", 1)[1] if "/" in info.filename else info.filename
            if name in WRITER_ADDS or not name or len(name) > 255:
                continue
            data = z.read(info)
            out += bytes([len(name)]) + name.encode() + struct.pack("<I", len(data)) + data
    with open(dst, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
