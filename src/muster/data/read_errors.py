"""A file reader's parse error, named: the file that failed and what to do about it.

pyarrow's parsers say what was wrong (``JSON parse error: Invalid value. in row 0``) but not in which
file, and a read covers a folder of them. :func:`naming_file` re-raises such an error as the same
class (``except pyarrow.ArrowInvalid`` still catches it), chained from the original, with the path and
a hint: the reader that matches the file's extension, or the option that reads another layout.
"""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

import pyarrow as pa

#: The reader for each file extension (the longest one that matches wins).
READER_BY_EXTENSION = {
    ".parquet": "read_parquet", ".parq": "read_parquet", ".pq": "read_parquet",
    ".csv": "read_csv", ".csv.gz": "read_csv", ".tsv": "read_csv",
    ".json": "read_json", ".jsonl": "read_json", ".json.gz": "read_json", ".jsonl.gz": "read_json",
    ".txt": "read_text", ".npy": "read_numpy",
    ".png": "read_images", ".jpg": "read_images", ".jpeg": "read_images",
}

#: What to check or pass when a file of the reader's own format fails to parse.
_SAME_FORMAT_HINT = {
    "read_csv": "Check that it is CSV with a header row; for another delimiter or no header pass "
                "parse_options=pyarrow.csv.ParseOptions(delimiter=...) or "
                "read_options=pyarrow.csv.ReadOptions(column_names=[...]).",
    "read_json": "Check that it holds JSON lines (one object per line) or one JSON array of objects.",
    "read_parquet": "It is not a parquet file, or a damaged one (truncated, still being written): "
                    "rewrite it, or leave it out of the paths.",
    "read_text": "Pass encoding= the file's encoding (e.g. 'latin-1'), or read its bytes with read_binary_files().",
}

#: The errors a parser raises on a file it cannot read (muster's own errors already name their file).
PARSE_ERRORS = (pa.ArrowException, UnicodeDecodeError, json.JSONDecodeError)


def hint(path: str, where: str) -> str:
    """What to do about ``path`` that ``where`` (a ``read_*`` name) could not parse."""
    lower = path.lower()
    matches = [ext for ext in READER_BY_EXTENSION if lower.endswith(ext)]
    reader = READER_BY_EXTENSION[max(matches, key=len)] if matches else None
    leave_out = " or leave it out of the paths (file_extensions=[...] or partition_filter=)"
    if reader is not None and reader != where:
        return f"Its extension is that of {reader}: read it with muster.data.{reader}(),{leave_out}."
    own = _SAME_FORMAT_HINT.get(where, "Check the file.")
    if reader is None:
        return (f"{own} If it holds another format, read it with that format's reader (read_parquet, read_csv, "
                f"read_json, read_text, read_binary_files),{leave_out}.")
    return own


def _renamed(exc: BaseException, context: str, advice: str) -> BaseException | None:
    """``exc``'s class made again with ``context`` and ``advice`` in its message (and its other fields kept),
    or None where that class cannot be."""
    try:
        if isinstance(exc, UnicodeDecodeError):  # "'utf-8' codec can't decode byte ...: <reason>"
            return UnicodeDecodeError(exc.encoding, exc.object, exc.start, exc.end,
                                      f"{exc.reason}; {context} as {exc.encoding} text. {advice}")
        if isinstance(exc, json.JSONDecodeError):  # "<msg>: line 1 column 2 (char 1)"
            return json.JSONDecodeError(f"{context}. {advice} The parser says: {exc.msg}", exc.doc, exc.pos)
        message = f"{context}: {str(exc).rstrip('.')}. {advice}"
        made = type(exc)(message)
    except Exception:  # noqa: BLE001 - a class with other constructor arguments: noted instead
        return None
    return made if message in str(made) else None  # (a KeyError quotes it)


@contextlib.contextmanager
def naming_file(path: str, where: str) -> Iterator[None]:
    """Run the parse of ``path`` by ``where`` (e.g. ``"read_json"``); a :data:`PARSE_ERRORS` error it
    raises is raised again as its own class, naming ``path`` and the fix, chained from the original
    (or, for a class that cannot be made again, with those as a note)."""
    try:
        yield
    except PARSE_ERRORS as exc:
        context, advice = f"{where}: could not read {path}", hint(path, where)
        renamed = _renamed(exc, context, advice)
        if renamed is None:
            add_note = getattr(exc, "add_note", None)  # Python 3.11+
            if add_note is not None:
                add_note(f"{context}. {advice}")
            raise
        raise renamed from exc
