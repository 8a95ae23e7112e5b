#!/usr/bin/env python3
"""Writes the fuzz seed inputs from the golden frames of the protocol doc's
Appendix A (../tests/data/appendix_a.txt) into corpus/<target>/, the checked-in
corpus that .ci/stages/34-fuzz.sh starts from and grows.

Input format of both targets: byte 0 bit 0 = start after a valid connect frame,
byte 1 = chunk size (0 = whole), then the byte stream. Run from wire/fuzz:
    python3 make_seeds.py
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data", "appendix_a.txt")


def frames():
    out, cur = [], None
    for line in open(DATA):
        line = line.rstrip("\n")
        if line.startswith("== "):
            ident, direction = line[3:].split(" ", 1)
            cur = [ident, direction == "C->S", bytearray()]
            out.append(cur)
        elif len(line) > 6 and line[0] in "0123456789abcdef":
            cur[2].extend(bytes.fromhex(line[6:53]))
    return out


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


def main():
    fs = frames()
    connects = {"A.1.1", "A.2.1", "A.12.1", "A.12.2"}
    for target, to_server in (("server_decoder", True), ("client_decoder", False)):
        mine = [f for f in fs if f[1] == to_server]
        first = next(f for f in mine if f[0] in connects)
        stream = bytearray(first[2])
        for ident, _, raw in mine:
            flags = 0 if ident in connects else 1
            write(target, ident, bytes([flags, 0]) + raw)
            if ident not in connects:
                stream.extend(raw)
        write(target, "all-whole", bytes([0, 0]) + stream)
        write(target, "all-chunks-of-7", bytes([0, 7]) + stream)
    write("server_decoder", "4lw-ruok", b"\x00\x00ruok")
    write("server_decoder", "4lw-stmk", b"\x00\x03stmk\x00\x00\x00\x00\x00\x00\x01\x32")


if __name__ == "__main__":
    main()
