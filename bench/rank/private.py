"""Give a rank forked from the warm forkserver the memory of a fresh interpreter.

Why: a forked rank shares the forkserver's pages copy-on-write, and its file pages (the
libraries' code) are not mapped in it at all until touched. When it is SIGKILLed the
kernel only drops its references to those pages, where a fresh interpreter's exit frees
some 200 MiB of its own memory and unmaps the libraries it used, and the kernel does all
of that before it closes the dying process's sockets. So a forked rank's peers learn of
its death sooner than a real job's would (docs/facts.md measures it). After
:func:`make_private`, the rank owns a copy of every anonymous page it shares with the
forkserver and maps every file page the forkserver has resident: what its exit has to
undo is what a fresh interpreter's would, at a fraction of an import's cost.

How: ``/proc/self/pagemap`` says, page by page, whether a page is present, exclusively
mapped and file-backed; ``/proc/<forkserver>/pagemap`` says which file pages the
forkserver (a process that imported what a rank imports) has mapped.
``madvise(MADV_POPULATE_WRITE)`` breaks copy-on-write on a range as a write to each page
would, without changing a byte; ``MADV_POPULATE_READ`` maps file pages without reading
them into Python. Both exist since Linux 5.14 (:func:`supported`).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

MADV_POPULATE_READ, MADV_POPULATE_WRITE = 22, 23
PAGE = mmap.PAGESIZE
_PRESENT, _FILE, _EXCLUSIVE = 1 << 63, 1 << 61, 1 << 56
"""Bits of a pagemap entry (Documentation/admin-guide/mm/pagemap.rst in the kernel)."""
_SHARED_ANON_MASK = _PRESENT | _FILE | _EXCLUSIVE
"""Present, neither file-backed nor exclusively mapped: a page shared copy-on-write."""
_FILE_MASK = _PRESENT | _FILE
_SPECIAL = ("[vvar]", "[vvar_vclock]", "[vdso]", "[vsyscall]")


@dataclass(frozen=True, kw_only=True, slots=True)
class Privatised:
    """What :func:`make_private` did, for the rank's ``memory_private`` event."""

    copied_mib: float
    """Anonymous memory shared with the forkserver, now the rank's own copy."""
    mapped_mib: float
    """File pages the forkserver had mapped, now mapped in the rank too."""
    failed_ranges: int
    """Ranges the kernel refused (0 in every run so far; counted, never fatal)."""
    seconds: float


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def supported() -> bool:
    """Whether this kernel has ``MADV_POPULATE_READ``/``WRITE`` (Linux 5.14)."""
    buf = ctypes.create_string_buffer(2 * PAGE)
    aligned = (ctypes.addressof(buf) + PAGE - 1) & ~(PAGE - 1)
    return bool(_libc().madvise(aligned, PAGE, MADV_POPULATE_WRITE) == 0)


def _regions() -> list[tuple[int, int, int]]:
    """This process's mappings, less the kernel's special ones: (start, end, protection)."""
    regions = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) > 5 and parts[5] in _SPECIAL:
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            perms = parts[1]
            prot = (mmap.PROT_READ if perms[0] == "r" else 0) | (mmap.PROT_WRITE if perms[1] == "w" else 0)
            regions.append((lo, hi, prot | (mmap.PROT_EXEC if perms[2] == "x" else 0)))
    return regions


def _entries(fd: int, lo: int, hi: int) -> memoryview:
    """The pagemap entries of ``[lo, hi)``, one unsigned 64-bit integer per page."""
    count = (hi - lo) // PAGE
    raw = bytearray(os.pread(fd, count * 8, lo // PAGE * 8))
    raw.extend(bytes(count * 8 - len(raw)))  # past what the process maps: not present
    return memoryview(raw).cast("Q")


def _runs(pages: Iterable[bool]) -> list[tuple[int, int]]:
    """(first page, page count) of each run of pages for which ``pages`` is true."""
    runs: list[tuple[int, int]] = []
    start = -1
    i = -1
    for i, wanted in enumerate(pages):
        if wanted and start < 0:
            start = i
        elif not wanted and start >= 0:
            runs.append((start, i - start))
            start = -1
    if start >= 0:
        runs.append((start, i + 1 - start))
    return runs


def make_private(forkserver: int) -> Privatised:
    """Copy every anonymous page this process shares copy-on-write, and map every file
    page that ``forkserver`` (the process it was forked from) has mapped. Run once, right
    after the fork, before the rank allocates anything it measures."""
    t0 = time.perf_counter()
    libc = _libc()
    copied = mapped = failed = 0
    own = os.open("/proc/self/pagemap", os.O_RDONLY)
    theirs = os.open(f"/proc/{forkserver}/pagemap", os.O_RDONLY)
    try:
        for lo, hi, prot in _regions():
            mine, parent = _entries(own, lo, hi), _entries(theirs, lo, hi)
            shared_anon = _runs(e & _SHARED_ANON_MASK == _PRESENT for e in mine)
            # Relocated then write-protected (a library's RELRO): the pages are still the
            # forkserver's; open the mapping for the copy, then close it again.
            reopen = bool(shared_anon) and not prot & mmap.PROT_WRITE
            if reopen and libc.mprotect(lo, hi - lo, prot | mmap.PROT_WRITE) != 0:
                failed += 1
                shared_anon, reopen = [], False
            for first, count in shared_anon:
                if libc.madvise(lo + first * PAGE, count * PAGE, MADV_POPULATE_WRITE) == 0:
                    copied += count
                else:
                    failed += 1
            if reopen and libc.mprotect(lo, hi - lo, prot) != 0:
                failed += 1
            file_pages = (p & _FILE_MASK == _FILE_MASK and not m & _PRESENT for m, p in zip(mine, parent, strict=True))
            for first, count in _runs(file_pages):
                if libc.madvise(lo + first * PAGE, count * PAGE, MADV_POPULATE_READ) == 0:
                    mapped += count
                else:
                    failed += 1
    finally:
        os.close(own)
        os.close(theirs)
    return Privatised(
        copied_mib=copied * PAGE / 2**20,
        mapped_mib=mapped * PAGE / 2**20,
        failed_ranges=failed,
        seconds=time.perf_counter() - t0,
    )
