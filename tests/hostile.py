"""Attack helpers shared by the hostile-group tests: what a hostile container does to the
folders it can write, reproduced on the host (unit tests) or inside a container."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

AT_FDCWD = -100
RENAME_EXCHANGE = 2

# The same loop, as a script run inside a container (python3 -c SWAP_SCRIPT a b seconds).
SWAP_SCRIPT = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, seconds = sys.argv[1].encode(), sys.argv[2].encode(), float(sys.argv[3])
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    libc.renameat2(-100, a, -100, b, 2)
    n += 1
print(n)
"""


def exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _swap_loop(a: str, b: str, stop: multiprocessing.synchronize.Event) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    ea, eb = a.encode(), b.encode()
    while not stop.is_set():
        for _ in range(200):
            libc.renameat2(AT_FDCWD, ea, AT_FDCWD, eb, RENAME_EXCHANGE)


@contextmanager
def swapping(a: Path, b: Path) -> Iterator[None]:
    """Exchange the names ``a`` and ``b`` in a loop in another process while the body
    runs; afterwards ``a`` holds what it held before."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    before = os.lstat(a).st_ino
    process = ctx.Process(target=_swap_loop, args=(str(a), str(b), stop), daemon=True)
    process.start()
    try:
        yield
    finally:
        stop.set()
        process.join(10)
        with contextlib.suppress(FileNotFoundError):  # the body may have removed them
            if os.lstat(a).st_ino != before:
                exchange(a, b)


def fingerprint(root: Path) -> dict[str, tuple[int, int, int, bytes | str]]:
    """Every entry under ``root`` (not following links): owner, mode and content."""
    out: dict[str, tuple[int, int, int, bytes | str]] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                content: bytes | str = path.read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            else:
                content = ""
            out[str(path.relative_to(root))] = (st.st_uid, st.st_gid, st.st_mode, content)
    st = os.lstat(root)
    out["."] = (st.st_uid, st.st_gid, st.st_mode, "")
    return out
