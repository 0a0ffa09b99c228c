"""HPACK (RFC 7541): decoding the header blocks a peer sends, encoding the few mmgate sends.

The decoder is the whole of the RFC's receiving side: the static table (Appendix A), the dynamic
table with its size limit and evictions (section 4), the integer and string representations with
Huffman coding (section 5, Appendix B), and the four field representations plus table-size
updates (section 6). A gRPC peer such as Envoy sends nearly the same block on every stream, mostly
as indexes into the dynamic table; :meth:`Decoder.decode` remembers the decoded list of a block
that only reads tables, so a repeated block costs one dictionary lookup.

The encoder writes literals without indexing and without Huffman coding (section 6.2.2): always
valid, never touching the peer's decoder state, and the blocks mmgate sends are a few short
fields it builds once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

Header = tuple[bytes, bytes]


class HpackError(Exception):
    """The header block is malformed: a connection error of type COMPRESSION_ERROR (RFC 7540 §4.3)."""


STATIC_TABLE: tuple[Header, ...] = tuple(
    (name.encode(), value.encode())
    for name, value in (
        (":authority", ""),
        (":method", "GET"),
        (":method", "POST"),
        (":path", "/"),
        (":path", "/index.html"),
        (":scheme", "http"),
        (":scheme", "https"),
        (":status", "200"),
        (":status", "204"),
        (":status", "206"),
        (":status", "304"),
        (":status", "400"),
        (":status", "404"),
        (":status", "500"),
        ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"),
        ("accept-language", ""),
        ("accept-ranges", ""),
        ("accept", ""),
        ("access-control-allow-origin", ""),
        ("age", ""),
        ("allow", ""),
        ("authorization", ""),
        ("cache-control", ""),
        ("content-disposition", ""),
        ("content-encoding", ""),
        ("content-language", ""),
        ("content-length", ""),
        ("content-location", ""),
        ("content-range", ""),
        ("content-type", ""),
        ("cookie", ""),
        ("date", ""),
        ("etag", ""),
        ("expect", ""),
        ("expires", ""),
        ("from", ""),
        ("host", ""),
        ("if-match", ""),
        ("if-modified-since", ""),
        ("if-none-match", ""),
        ("if-range", ""),
        ("if-unmodified-since", ""),
        ("last-modified", ""),
        ("link", ""),
        ("location", ""),
        ("max-forwards", ""),
        ("proxy-authenticate", ""),
        ("proxy-authorization", ""),
        ("range", ""),
        ("referer", ""),
        ("refresh", ""),
        ("retry-after", ""),
        ("server", ""),
        ("set-cookie", ""),
        ("strict-transport-security", ""),
        ("transfer-encoding", ""),
        ("user-agent", ""),
        ("vary", ""),
        ("via", ""),
        ("www-authenticate", ""),
    )
)

# Appendix B's code lengths, symbol 0..255 then EOS (256). The code is canonical: within a length
# the codes follow symbol order, and each length's first code follows the previous length's last,
# so the lengths alone define it (the RFC's hex column is what _canonical() computes).
CODE_LENGTHS: Final = bytes(
    [
        13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
        28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
        5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7,
        7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
        15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7,
        7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
        24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21,
        23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
        26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24,
        21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
        26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
    ]
)  # fmt: skip
EOS: Final = 256


def _canonical() -> tuple[list[tuple[int, int, int]], list[int]]:
    """Per code length (ascending): (length, first code, offset of its first symbol), and the
    symbols in code order."""
    symbols = sorted(range(257), key=lambda s: (CODE_LENGTHS[s], s))
    bands: list[tuple[int, int, int]] = []
    code = 0
    length = CODE_LENGTHS[symbols[0]]
    for i, symbol in enumerate(symbols):
        this = CODE_LENGTHS[symbol]
        if i:
            code = (code + 1) << (this - length)
        if not bands or bands[-1][0] != this:
            bands.append((this, code, i))
        length = this
    return bands, symbols


_BANDS, _SYMBOLS = _canonical()
_BAND_ENDS: Final = [
    (length, first, offset, first + (_BANDS[n + 1][2] if n + 1 < len(_BANDS) else 257) - offset)
    for n, (length, first, offset) in enumerate(_BANDS)
]


def huffman_decode(data: bytes) -> bytes:
    """A Huffman-coded string (section 5.2): padding of at most 7 one-bits (the EOS code's most
    significant bits) ends it; an EOS symbol in the data, or other padding, is an error."""
    out = bytearray()
    acc = 0  # undecoded bits, most significant first
    bits = 0
    for byte in data:
        acc = (acc << 8) | byte
        bits += 8
        while bits >= 5:  # the shortest code
            symbol = -1
            for length, first, offset, end in _BAND_ENDS:
                if length > bits:
                    break  # the next symbol needs more bits than are here
                value = acc >> (bits - length)
                if value < end:  # canonical: the code falls in this length's range
                    symbol = _SYMBOLS[offset + value - first]
                    bits -= length
                    acc &= (1 << bits) - 1
                    break
            else:
                raise HpackError("invalid Huffman code")
            if symbol < 0:
                break
            if symbol == EOS:
                raise HpackError("EOS in a Huffman-coded string")
            out.append(symbol)
    if bits > 7 or acc != (1 << bits) - 1:
        raise HpackError("invalid Huffman padding")
    return bytes(out)


class Decoder:
    """One connection's receiving HPACK context (the dynamic table lives as long as the
    connection). ``max_table_size`` is what this side advertised in SETTINGS_HEADER_TABLE_SIZE."""

    def __init__(self, max_table_size: int = 4096, max_header_list: int = 64 * 1024) -> None:
        self.max_table_size = max_table_size
        self.table_size = max_table_size
        self.max_header_list = max_header_list
        self._dynamic: list[Header] = []  # newest first
        self._size = 0
        self._cache: dict[bytes, list[Header]] = {}

    def decode(self, block: bytes) -> list[Header]:
        """The header list of one complete header block (HEADERS plus its CONTINUATIONs)."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        headers, reads_only = self._decode(block)
        if reads_only:
            if len(self._cache) >= 64:
                self._cache.clear()
            self._cache[block] = headers
        return headers

    def _decode(self, block: bytes) -> tuple[list[Header], bool]:
        headers: list[Header] = []
        reads_only = True
        total = 0
        pos = 0
        end = len(block)
        while pos < end:
            first = block[pos]
            if first & 0x80:  # indexed field (6.1)
                index, pos = _integer(block, pos, 7)
                header = self._entry(index)
            elif first & 0x40:  # literal with incremental indexing (6.2.1)
                header, pos = self._literal(block, pos, 6)
                self._add(header)
                reads_only = False
            elif first & 0x20:  # dynamic table size update (6.3)
                size, pos = _integer(block, pos, 5)
                if size > self.max_table_size:
                    raise HpackError("table size update above the advertised limit")
                self.table_size = size
                self._evict(0)
                reads_only = False
                continue
            else:  # literal without indexing (6.2.2) or never indexed (6.2.3)
                header, pos = self._literal(block, pos, 4)
            total += len(header[0]) + len(header[1]) + 32
            if total > self.max_header_list:
                raise HpackError("header list too large")
            headers.append(header)
        if reads_only:  # a table change invalidates what blocks that read it decoded to
            return headers, True
        self._cache.clear()
        return headers, False

    def _entry(self, index: int) -> Header:
        if index == 0:
            raise HpackError("index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if dynamic >= len(self._dynamic):
            raise HpackError(f"index {index} beyond the tables")
        return self._dynamic[dynamic]

    def _literal(self, block: bytes, pos: int, prefix: int) -> tuple[Header, int]:
        index, pos = _integer(block, pos, prefix)
        if index:
            name = self._entry(index)[0]
        else:
            name, pos = _string(block, pos)
        value, pos = _string(block, pos)
        return (name, value), pos

    def _add(self, header: Header) -> None:
        size = len(header[0]) + len(header[1]) + 32
        if size > self.table_size:  # an entry larger than the table empties it (4.4)
            self._dynamic.clear()
            self._size = 0
            return
        self._evict(size)
        self._dynamic.insert(0, header)
        self._size += size

    def _evict(self, room: int) -> None:
        while self._dynamic and self._size + room > self.table_size:
            name, value = self._dynamic.pop()
            self._size -= len(name) + len(value) + 32


def _integer(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """An integer with an N-bit prefix (5.1), from ``block[pos]``; the value and the next position."""
    if pos >= len(block):
        raise HpackError("truncated integer")
    mask = (1 << prefix) - 1
    value = block[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(block):
            raise HpackError("truncated integer")
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if shift > 28:
            raise HpackError("integer too large")
        if not byte & 0x80:
            return value, pos


def _string(block: bytes, pos: int) -> tuple[bytes, int]:
    if pos >= len(block):
        raise HpackError("truncated string")
    huffman = block[pos] & 0x80
    length, pos = _integer(block, pos, 7)
    if pos + length > len(block):
        raise HpackError("truncated string")
    raw = block[pos : pos + length]
    return (huffman_decode(raw) if huffman else raw), pos + length


def _encode_integer(value: int, prefix: int, flags: int) -> bytes:
    mask = (1 << prefix) - 1
    if value < mask:
        return bytes([flags | value])
    out = bytearray([flags | mask])
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(headers: Iterable[Header]) -> bytes:
    """A header block of literals without indexing, names and values as they are (6.2.2)."""
    out = bytearray()
    for name, value in headers:
        out += b"\x00" + _encode_integer(len(name), 7, 0) + name
        out += _encode_integer(len(value), 7, 0) + value
    return bytes(out)
