"""qcore.io's .csv reader: numeric text parsed once into float32 with bounded extra memory.

Comma / semicolon / tab / whitespace separated, with or without one header row, ``#`` comments
allowed; parsed by pandas' C parser in chunks into one preallocated array (rows wider than
4096 cells piece by piece, each piece's fields one per line), so memory is the output plus a
bounded chunk. One column or one row gives a 1-D array, otherwise 2-D (rows, columns).
"""

from __future__ import annotations

import codecs
import io
import re

import numpy as np

from .base import TensorFileError, _Entry, _stem

__all__ = ["csv_entry"]

_CSV_WIDE = 4096  # columns: wider rows are parsed piece by piece, one column at a time
_CSV_PIECE = 2**20  # bytes of one wide-row piece (the parser needs ~20x a piece of short cells)
_CSV_ROWS = 1 << 16  # rows per chunk of a narrow table
_CSV_NA = ["nan", "NaN", "NAN", "-nan", "-NaN", "+nan", "+NaN"]
_BOM = b"\xef\xbb\xbf"
_NON_BLANK = re.compile(rb"\S")
_BLANKS_TO_LINES = bytes.maketrans(b" \t", b"\n\n")


def _lines(data: bytes, start: int = 0):
    """(line number, start, end) of every line of data, without copying it (end excludes the
    line break)."""
    number, pos, n = 0, start, len(data)
    while pos < n:
        end = data.find(b"\n", pos)
        end = n if end < 0 else end
        number += 1
        stop = end - 1 if end > pos and data[end - 1:end] == b"\r" else end
        yield number, pos, stop
        pos = end + 1


def _data_lines(data: bytes, start: int = 0):
    """_lines without blank and '#'-comment lines."""
    for number, a, b in _lines(data, start):
        first = _NON_BLANK.search(data, a, b)  # no copy of a long line
        if first is not None and data[first.start():first.start() + 1] != b"#":
            yield number, a, b


def _check_utf8(label: str, data: bytes) -> None:
    if data.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for i in range(0, len(data), 2**20):
            decoder.decode(data[i:i + 2**20])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise TensorFileError(
            f"{label}: not a UTF-8 text file; a .csv must hold numbers as text."
        ) from None


def csv_entry(label: str, data: bytes, max_elements: int | None = None) -> _Entry:
    """Parse a .csv once into float32, refusing it before any array is built when its rows x
    columns exceed max_elements. Memory: the output plus a bounded chunk."""
    _check_utf8(label, data)
    if b"\n" not in data and b"\r" in data:  # old Mac line ends: CR only
        data = data.replace(b"\r", b"\n")
    start = len(_BOM) if data.startswith(_BOM) else 0
    lines = _data_lines(data, start)
    first = next(lines, None)
    if first is None:
        raise TensorFileError(f"{label}: the .csv holds no numbers.")
    cut = min(first[2], first[1] + 65536)
    head = data[first[1]:cut].decode("utf-8", "replace")
    delimiter = _csv_delimiter(head)
    fields = _split(head, delimiter)
    if cut < first[2]:
        fields = fields[:-1]  # the cut may fall inside the last field ("-5" read as "-")
    has_header = any(f and not _is_number(f) for f in fields)
    top = next(lines, None) if has_header else first
    if top is None:
        raise TensorFileError(f"{label}: the .csv has a header row but no numbers.")
    cols = _count_fields(data, top[1], top[2], delimiter)
    # rows: an upper bound counted without parsing (blank and comment lines at the start of a
    # line are not rows; indented ones are counted, which only overestimates)
    rows = (data.count(b"\n", top[1]) + (not data.endswith(b"\n"))
            - data.count(b"\n\n", top[1]) - data.count(b"\n#", top[1]))
    rows = max(rows, 1)
    if max_elements is not None and rows * cols > max_elements:
        exact = "" if rows == 1 else "up to "
        raise TensorFileError(
            f"{label}: the .csv holds {exact}{rows:,} rows x {cols:,} columns = {rows * cols:,} "
            f"values, over the limit of {max_elements:,} elements (max_elements); slice it "
            "before loading."
        )
    if cols > _CSV_WIDE:
        array = _parse_wide(label, data, top, cols, delimiter, has_header, start)
    else:
        array = _parse_narrow(label, data, top, rows, cols, delimiter, has_header, start)
    if array.shape[0] == 1 or array.shape[1] == 1:
        array = array.reshape(-1)
    holder = [array]

    def read() -> np.ndarray:  # the parsed array itself the first time, a copy after that
        return holder.pop() if holder else array.copy()

    return _Entry(_stem(label), array.shape, array.dtype, read)


def _csv_delimiter(line: str) -> str | None:
    for delimiter in (",", ";", "\t"):
        if delimiter in line:
            return delimiter
    return None  # any run of whitespace


def _split(line: str, delimiter: str | None) -> list[str]:
    return [f.strip().strip('"').strip() for f in line.split(delimiter)]


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _count_fields(data: bytes, a: int, b: int, delimiter: str | None) -> int:
    if delimiter is None:  # runs of non-blanks, counted in pieces (never a list of fields)
        count, blank_before = 0, True
        for pos in range(a, b, _CSV_PIECE):
            piece = np.frombuffer(data, np.uint8, min(b, pos + _CSV_PIECE) - pos, pos)
            blank = (piece == 0x20) | (piece == 0x09) | (piece == 0x0D)
            starts = ~blank & np.concatenate(([blank_before], blank[:-1]))
            count += int(np.count_nonzero(starts))
            blank_before = bool(blank[-1])
        return count
    return data.count(delimiter.encode(), a, b) + 1


def _read_csv(buffer, delimiter: str | None, **kw):
    import pandas as pd

    return pd.read_csv(
        buffer, header=None, sep=delimiter if delimiter else r"\s+", engine="c",
        dtype=np.float32, comment="#", keep_default_na=False, na_values=_CSV_NA,
        skip_blank_lines=True, quotechar='"', **kw)


def _parse_narrow(label, data, top, rows, cols, delimiter, has_header, start) -> np.ndarray:
    """pandas' C parser in chunks of rows, each copied into one preallocated array."""
    out = np.empty((rows, cols), np.float32)
    buffer = io.BytesIO(data)  # shares data's buffer, no copy
    buffer.seek(top[1])
    filled = 0
    try:
        with np.errstate(all="ignore"):
            for chunk in _read_csv(buffer, delimiter, chunksize=_CSV_ROWS):
                values = chunk.to_numpy(np.float32)
                if values.shape[1] != cols or filled + len(values) > rows:
                    raise ValueError("shape")
                out[filled:filled + len(values)] = values
                filled += len(values)
    except (ValueError, IndexError, OverflowError, MemoryError):
        raise TensorFileError(f"{label}: {_csv_fault(data, delimiter, has_header, start)}") from None
    return out if filled == rows else out[:filled].copy()


def _parse_wide(label, data, top, cols, delimiter, has_header, start) -> np.ndarray:
    """Rows too wide for a column per field: each row in pieces of ~1 MiB, a piece's fields
    turned into one column (delimiter -> newline) and parsed by pandas' C parser."""
    rows = []
    sep = delimiter.encode() if delimiter else None
    for number, a, b in _data_lines(data, top[1]):
        row = np.empty(cols, np.float32)
        filled = 0
        pos = a
        while pos < b:
            end = min(b, pos + _CSV_PIECE)
            if end < b:  # cut at a field boundary
                cut = data.rfind(sep, pos, end) if sep else max(data.rfind(b" ", pos, end),
                                                                data.rfind(b"\t", pos, end))
                end = cut if cut > pos else b
            piece = data[pos:end]
            # one field per line; blank runs become empty lines, which the parser skips
            piece = piece.replace(sep, b"\n") if sep else piece.translate(_BLANKS_TO_LINES)
            try:
                with np.errstate(all="ignore"):
                    # one field per line: parsed with a delimiter the piece does not hold
                    # (pandas' whitespace mode costs ~6x the piece's size)
                    values = (_read_csv(io.BytesIO(piece), ",").to_numpy(np.float32).reshape(-1)
                              if _NON_BLANK.search(piece) else np.empty(0, np.float32))
            except (ValueError, IndexError, OverflowError):
                raise TensorFileError(
                    f"{label}: {_csv_fault(data, delimiter, has_header, start)}") from None
            if sep and piece.count(b"\n") + 1 != values.size:  # an empty cell
                raise TensorFileError(f"{label}: {_csv_fault(data, delimiter, has_header, start)}")
            if filled + values.size > cols:
                raise TensorFileError(
                    f"{label}: line {number} has more than {cols:,} cells but the first row has "
                    f"{cols:,}; a .csv must have the same number of cells on every row.")
            row[filled:filled + values.size] = values
            filled += values.size
            pos = end + (1 if sep and end < b else 0)
        if filled != cols:
            raise TensorFileError(
                f"{label}: line {number} has {filled:,} cells but the first row has {cols:,}; a "
                ".csv must have the same number of cells on every row.")
        rows.append(row)
    return np.stack(rows) if len(rows) > 1 else rows[0].reshape(1, -1)


def _csv_fault(data: bytes, delimiter: str | None, has_header: bool, start: int) -> str:
    """Say which line of a table that failed to parse is at fault, and why (streaming)."""
    valid = (
        "a .csv must hold one number per cell, the same number of cells on every row, and at "
        "most one header row."
    )
    width = None
    for number, a, b in _data_lines(data, start):
        if b - a > 65536:  # a wide row: pandas' fault is as good as a line-by-line one
            return f"line {number} holds a cell that is not a number; {valid}"
        fields = _split(data[a:b].decode("utf-8", "replace"), delimiter)
        if width is None:
            width = len(fields)
            if has_header:
                continue
        if len(fields) != width:
            return f"line {number} has {len(fields)} cells but the first row has {width}; {valid}"
        for field in fields:
            if not field:
                return f"line {number} has an empty cell; {valid}"
            if not _is_number(field):
                return f"line {number}: {field[:40]!r} is not a number; {valid}"
    return f"not a numeric table; {valid}"
