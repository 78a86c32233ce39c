#!/usr/bin/env python3
"""Do concurrent fdatasyncs recover the rate of fresh (fallocated) blocks?

N threads each pwrite a chunk at the next offset of one file and fdatasync it, for 1.2 s; the
file either pre-written (the comparison's raw loop) or reserved with fallocate (unwritten extents:
each sync also commits the ext4 journal). Prints MiB/s per case, every case twice.
docs/performance-journal.md, 2026-12-07 (evening), has the figures.

Usage: python3 tools/sync_overlap.py DIR   (DIR on the file system to measure; 2 GiB free)
"""
import os
import sys
import threading
import time

SIZE = 2 << 30


def run(path, fresh, threads, chunk, secs=1.2):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if fresh:
            os.posix_fallocate(fd, 0, SIZE)
        else:
            buf = b"\1" * (8 << 20)
            for off in range(0, SIZE, len(buf)):
                os.pwrite(fd, buf, off)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        lock = threading.Lock()
        state = {"next": 0, "done": 0, "stop": False}
        data = b"\2" * chunk

        def worker():
            while not state["stop"]:
                with lock:
                    off = state["next"]
                    state["next"] += chunk
                if off + chunk > SIZE:
                    break
                os.pwrite(fd, data, off)
                os.fdatasync(fd)
                with lock:
                    state["done"] += chunk

        ts = [threading.Thread(target=worker) for _ in range(threads)]
        t0 = time.time()
        for t in ts:
            t.start()
        time.sleep(secs)
        state["stop"] = True
        for t in ts:
            t.join()
        return state["done"] / (time.time() - t0) / 2**20
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = os.path.join(sys.argv[1], "sync_overlap.dat")
    cases = [(False, 1, 256), (True, 1, 256), (True, 2, 256), (True, 2, 128), (True, 4, 64)]
    for _ in range(2):
        for fresh, threads, kib in cases:
            mib = run(path, fresh, threads, kib << 10)
            kind = "fresh" if fresh else "pre-written"
            print(f"{kind:12} {threads} x {kib:3} KiB  {mib:6.0f} MiB/s", flush=True)


if __name__ == "__main__":
    main()
