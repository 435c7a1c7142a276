"""The checks of spec section 6.3 on a zstd-format dictionary, written from the spec alone.

A dictionary of at least 8 bytes that starts with 37 A4 30 EC is a zstd-format dictionary
([ZR-COD-004]); it must have a non-zero Dictionary_ID ([ZR-COD-010]), entropy tables that
parse by the algorithm of section 6.3 ([ZR-COD-011]) and three repeat offsets, each in
1 .. the size of the content after them ([ZR-COD-012]). Any other dictionary is raw content.
No zstd library is used here.
"""

from __future__ import annotations

from dataclasses import dataclass

DICTIONARY_MAGIC = b"\x37\xa4\x30\xec"

# (largest accuracy log, largest symbol) of each table, spec section 6.3.
WEIGHTS_TABLE = (6, 255)
OFFSETS_TABLE = (8, 31)
MATCH_LENGTHS_TABLE = (9, 52)
LITERAL_LENGTHS_TABLE = (9, 35)
HUFFMAN_LOG_MAX = 12
WEIGHTS_COUNT_MAX = 255


@dataclass
class DictionaryProblem:
    rule: str
    what: str


class _Malformed(Exception):
    pass


def check_dictionary(d: bytes) -> DictionaryProblem | None:
    """None for raw content or a well-formed zstd-format dictionary, else the first problem."""
    if len(d) < 8 or d[:4] != DICTIONARY_MAGIC:
        return None
    if int.from_bytes(d[4:8], "little") == 0:
        return DictionaryProblem("ZR-COD-010", "its Dictionary_ID is 0")
    try:
        pos = _huffman(d, 8)
        for log_max, symbol_max in (OFFSETS_TABLE, MATCH_LENGTHS_TABLE, LITERAL_LENGTHS_TABLE):
            length, _, _ = _fse_description(d[pos:], log_max, symbol_max)
            pos += length
    except _Malformed as exc:
        return DictionaryProblem("ZR-COD-011", str(exc))
    if len(d) - pos < 12:
        return DictionaryProblem("ZR-COD-012", "it ends before its three repeat offsets")
    content = len(d) - pos - 12
    for k in range(3):
        rep = int.from_bytes(d[pos + 4 * k : pos + 4 * k + 4], "little")
        if not 1 <= rep <= content:
            return DictionaryProblem("ZR-COD-012", f"repeat offset {rep} is not in 1..{content}")
    return None


def _bit(data: bytes, at: int) -> int:
    """Bit `at` of `data` read as one little-endian number; bits past the end are 0."""
    return (data[at // 8] >> (at % 8)) & 1 if at // 8 < len(data) else 0


def _fse_description(data: bytes, log_max: int, symbol_max: int) -> tuple[int, int, list[int]]:
    """An FSE table description (RFC 8878 section 4.1.1) at the start of `data`: returns its
    length in bytes, its accuracy log and the probabilities (-1: "less than 1")."""
    bit = 0

    def peek(n: int) -> int:
        return sum(_bit(data, bit + k) << k for k in range(n))

    log = peek(4) + 5
    bit += 4
    if log > log_max:
        raise _Malformed(f"an FSE table's accuracy log {log} is above {log_max}")
    remaining = (1 << log) + 1
    threshold = 1 << log
    nbits = log + 1
    probs: list[int] = []
    while remaining > 1:
        if len(probs) > symbol_max:
            raise _Malformed("an FSE table has more symbols than its alphabet")
        largest = 2 * threshold - 1 - remaining
        value = peek(nbits - 1)
        if value < largest:
            bit += nbits - 1
        else:
            value = peek(nbits)
            if value >= threshold:
                value -= largest
            bit += nbits
        prob = value - 1
        remaining -= abs(prob)
        probs.append(prob)
        if prob == 0:
            while True:
                more = peek(2)
                bit += 2
                probs.extend([0] * more)
                if len(probs) > symbol_max + 1:
                    raise _Malformed("an FSE table has more symbols than its alphabet")
                if more != 3:
                    break
        while 1 < remaining < threshold:
            nbits -= 1
            threshold >>= 1
    if remaining != 1:
        raise _Malformed("an FSE table's probabilities do not add up to its table size")
    length = (bit + 7) // 8
    if length > len(data):
        raise _Malformed("an FSE table description runs past the end of the dictionary")
    return length, log, probs


def _huffman(d: bytes, pos: int) -> int:
    """The literals' Huffman tree description (RFC 8878 section 4.2.1) at `pos`; returns its end."""
    if pos >= len(d):
        raise _Malformed("the dictionary ends before its Huffman table")
    header = d[pos]
    if header >= 128:
        count = header - 127
        size = (count + 1) // 2
        if len(d) - pos - 1 < size:
            raise _Malformed("the Huffman weights run past the end of the dictionary")
        body = d[pos + 1 : pos + 1 + size]
        weights = [(body[k // 2] >> 4) if k % 2 == 0 else (body[k // 2] & 15) for k in range(count)]
        end = pos + 1 + size
    else:
        if len(d) - pos - 1 < header:
            raise _Malformed("the Huffman weights run past the end of the dictionary")
        weights = _fse_weights(d[pos + 1 : pos + 1 + header])
        end = pos + 1 + header
    _check_tree(weights)
    return end


def _fse_weights(sub: bytes) -> list[int]:
    """FSE-compressed Huffman weights: a table description, then a backward bitstream decoded
    with two interleaved states until it is exhausted (spec section 6.3)."""
    length, log, probs = _fse_description(sub, *WEIGHTS_TABLE)
    stream = sub[length:]
    if not stream:
        raise _Malformed("the Huffman weights have no FSE bitstream")
    if stream[-1] == 0:
        raise _Malformed("the Huffman weights' bitstream has no end mark")
    table = _decoding_table(probs, log)
    left = 8 * (len(stream) - 1) + stream[-1].bit_length() - 1

    def read(n: int) -> int:
        nonlocal left
        value = 0
        for _ in range(n):
            left -= 1
            value = (value << 1) | (_bit(stream, left) if left >= 0 else 0)
        return value

    states = [read(log), read(log)]
    if left < 0:
        raise _Malformed("the Huffman weights' bitstream is shorter than its initial states")
    out: list[int] = []
    turn = 0
    while True:
        if len(out) > WEIGHTS_COUNT_MAX - 2:
            raise _Malformed("the Huffman weights decode to more than 255 weights")
        symbol, nbits, base = table[states[turn]]
        out.append(symbol)
        states[turn] = base + read(nbits)
        if left < 0:
            out.append(table[states[1 - turn]][0])
            return out
        turn = 1 - turn


def _decoding_table(probs: list[int], log: int) -> list[tuple[int, int, int]]:
    """(symbol, bits, base) per state: "less than 1" symbols at the top, the others spread with
    step size/2 + size/8 + 3, then each state's transition (RFC 8878 section 4.1.1)."""
    size = 1 << log
    symbols = [0] * size
    nexts = []
    high = size - 1
    for s, p in enumerate(probs):
        if p == -1:
            symbols[high] = s
            high -= 1
            nexts.append(1)
        else:
            nexts.append(p)
    step = (size >> 1) + (size >> 3) + 3
    position = 0
    for s, p in enumerate(probs):
        for _ in range(max(p, 0)):
            symbols[position] = s
            position = (position + step) & (size - 1)
            while position > high:
                position = (position + step) & (size - 1)
    table = []
    for s in symbols:
        x = nexts[s]
        nexts[s] += 1
        nbits = log - (x.bit_length() - 1)
        table.append((s, nbits, (x << nbits) - size))
    return table


def _check_tree(weights: list[int]) -> None:
    """Weights at most 12; with the implied last weight their 2^(w-1) add up to a power of two
    of at most 2^12; an even number, at least two, of weight-1 symbols."""
    if any(w > HUFFMAN_LOG_MAX for w in weights):
        raise _Malformed("a Huffman weight is above 12")
    total = sum(1 << (w - 1) for w in weights if w)
    if total == 0:
        raise _Malformed("every Huffman weight is 0")
    depth = total.bit_length()
    if depth > HUFFMAN_LOG_MAX:
        raise _Malformed("the Huffman tree is deeper than 12")
    rest = (1 << depth) - total
    if rest & (rest - 1):
        raise _Malformed("the implied last Huffman weight does not complete a power of two")
    ones = sum(1 for w in weights if w == 1) + (1 if rest == 1 else 0)
    if ones < 2 or ones % 2:
        raise _Malformed("the Huffman tree does not have an even number (two or more) of weight-1 symbols")
