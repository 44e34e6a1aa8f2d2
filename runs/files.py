"""Writing a run's files so that a reader never sees half of one, and reading line records that
a writer may still be appending to."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, List, Union

PathLike = Union[str, Path]


def atomic_write_text(path: PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` in one step: the temporary file sits beside it (same file
    system) and is named per process, so concurrent writers never share one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_json(path: PathLike, obj: Any, indent: Union[int, None] = 1) -> None:
    """``atomic_write_text`` of ``obj`` as JSON with a final newline."""
    atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")


def iter_jsonl(path: PathLike) -> Iterator[dict]:
    """The JSON objects of a .jsonl file, one a line; a line still being written, damaged or
    not an object is skipped."""
    with open(path) as f:
        for line in f:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict):
                yield d


def read_jsonl(path: PathLike) -> List[dict]:
    return list(iter_jsonl(path))


def append_jsonl(path: PathLike, record: dict) -> None:
    """Append one JSON line (sorted keys, so that the same record is always the same line)."""
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def replace_dir(src: PathLike, dst: PathLike) -> None:
    """Move the finished folder ``src`` to ``dst``, replacing what ``dst`` held (an earlier or
    failed attempt): the old folder is moved aside first and removed last, so ``dst`` is at
    every moment either the old result or the new one. ``src`` must be on ``dst``'s file system."""
    src, dst = Path(src), Path(dst)
    old = None
    if dst.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dst.name}.old-", dir=dst.parent))
        os.rmdir(old)
        os.replace(dst, old)
    os.replace(src, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
