"""math-verify's symbolic check, time-limited, in pooled helper processes (``symbolic_match``).

Timeouts. math-verify's own timeouts use ``signal.alarm``, which raises outside the main thread and
cannot be used in worker threads at all, and counts wall-clock seconds, which a loaded machine stretches.
We switch them off and run math-verify in small helper processes started with `subprocess` (this very
file run as a script, see `_serve`). The limit ``timeout_s`` counts the helper's CPU seconds spent on
the one check (read from ``/proc``; wall-clock seconds where there is no ``/proc``), so the verdict does
not depend on what else runs on the machine; the helper's start-up (importing sympy, and a warm-up
check that builds math-verify's lazily compiled parsers) happens before it reports ready and is never
counted. A check over the limit kills its helper and is retried once on a fresh one; a second time-out
makes the verdict *undecided* (`symbolic_match` and `oar.grading.equivalence.match_answers` return None,
`Grade.undecided` is True), which rewards count as no match and which the training metrics and the
evaluation summaries count separately.
`subprocess` works from any thread and also from daemonic `multiprocessing` workers, which may not
start `multiprocessing` children. Helpers are pooled: one per concurrently checking thread, reused
across calls, so the ~0.5 s start-up is paid once per process and thread.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time

logger = logging.getLogger(__name__)

# Starting a helper (importing sympy and math-verify, then the warm-up) takes 1-3 CPU seconds. Its limit is
# counted in CPU seconds, like a check's: a job at low priority on a loaded machine may wait many minutes
# of wall-clock time for them, and must not die of it. A cold disk's wait is bounded by the wall backstop.
_STARTUP_CPU_S = 120.0
_HELPER_MEMORY_LIMIT = 4 * 2**30  # bytes of address space; huge integer powers die with MemoryError
# A check whose CPU time cannot be read (a helper stuck off the CPU) is given up after this many times
# its limit in wall-clock seconds, and never before _WALL_BACKSTOP_MIN_S: on a machine loaded 20-fold a
# check still gets its CPU seconds.
_WALL_BACKSTOP_FACTOR = 20.0
_WALL_BACKSTOP_MIN_S = 60.0
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Checks the helper runs before it reports ready: math-verify compiles its parsers and sympy imports
# parts of itself on first use (0.1-0.2 s), which must not count against the first real check.
_WARM_UP = ((r"\frac{1}{2}", "0.5"), (r"12 \frac{3}{5}", r"\left(3, \frac{\pi}{2}\right)"), (r"\csc x", "x = 3"),
            (r"\{1, 2\}", r"[0, \infty)"), (r"2\sqrt{3}", r"10\%"))


class _Helper:
    """One math-verify helper process, speaking one JSON line in, one line ("1" or "0") out."""

    def __init__(self) -> None:
        # Run this file as a script rather than `-m oar.grading.symbolic_helper`, so the helper does not
        # import the `oar` package and whatever it pulls in (torch); -P keeps oar/grading/ off sys.path.
        self._process = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        started = time.monotonic()
        if self._read_reply(_STARTUP_CPU_S) != b"ready":
            try:  # its output closes a moment before its exit can be read
                exit_code = self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                exit_code = None
            self.close()
            if exit_code is not None:
                raise RuntimeError(f"the math-verify helper process exited with code {exit_code} while starting "
                                   "(its stderr is above)")
            raise RuntimeError(f"the math-verify helper process was not ready after {_STARTUP_CPU_S:.0f} CPU s "
                               f"or {time.monotonic() - started:.0f} s of wall-clock time")

    def cpu_s(self) -> float | None:
        """CPU seconds (user and system) the helper has used so far; None where ``/proc`` cannot tell."""
        try:
            with open(f"/proc/{self._process.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S  # utime, stime: fields 14 and 15

    def _read_reply(self, timeout_s: float) -> bytes | None:
        """The helper's reply within ``timeout_s`` of its CPU time (wall-clock time without ``/proc``),
        or None on a time-out or its exit."""
        started_cpu, started = self.cpu_s(), time.monotonic()
        backstop = started + max(_WALL_BACKSTOP_MIN_S, _WALL_BACKSTOP_FACTOR * timeout_s)
        tick = min(0.1, timeout_s / 4)
        while True:
            ready, _, _ = select.select([self._process.stdout], [], [], tick)
            if ready:
                line = self._process.stdout.readline()
                return line.rstrip(b"\n") if line else None
            now, cpu = time.monotonic(), self.cpu_s()
            if started_cpu is None or cpu is None:
                if now - started > timeout_s:
                    return None
            elif cpu - started_cpu > timeout_s or now > backstop:
                return None

    def verify(self, predicted: str, reference: str, timeout_s: float) -> bool | None:
        """True/False from math-verify, or None when the helper timed out or died (it is then closed)."""
        try:
            self._process.stdin.write(json.dumps([predicted, reference]).encode() + b"\n")
            self._process.stdin.flush()
        except OSError:
            self.close()
            return None
        reply = self._read_reply(timeout_s)
        if reply not in (b"0", b"1"):
            self.close()
            return None
        return reply == b"1"

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        if self.alive:
            self._process.kill()
        self._process.wait()
        for stream in (self._process.stdin, self._process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class _HelperPool:
    """Idle helpers of this process; a thread takes one (starting it if none is idle) per check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Helper] = []

    def verify(self, predicted: str, reference: str, timeout_s: float, tries: int = 2) -> bool | None:
        """math-verify's verdict; None (undecided) when ``tries`` checks in a row timed out."""
        for attempt in range(1, tries + 1):
            with self._lock:
                helper = self._idle.pop() if self._idle else None
            if helper is None:
                helper = _Helper()
            try:
                result = helper.verify(predicted, reference, timeout_s)
            except BaseException:  # e.g. KeyboardInterrupt mid-check: do not leave a busy helper running
                helper.close()
                raise
            if result is not None:
                with self._lock:
                    self._idle.append(helper)
                return result
            logger.warning(
                "math-verify gave no answer within %.1f CPU s or its helper died (try %d of %d) for predicted=%.80r "
                "reference=%.80r%s",
                timeout_s, attempt, tries, predicted, reference,
                "; undecided" if attempt == tries else "; retrying on a fresh helper",
            )
        return None

    def close(self) -> None:
        with self._lock:
            helpers, self._idle = self._idle, []
        for helper in helpers:
            helper.close()

    def forget(self) -> None:
        """In a forked child: the inherited helpers belong to the parent, so drop them untouched."""
        self._lock = threading.Lock()
        self._idle = []


_POOL = _HelperPool()
atexit.register(_POOL.close)
os.register_at_fork(after_in_child=_POOL.forget)


def symbolic_match(predicted: str, reference: str, timeout_s: float) -> bool | None:
    """math-verify's verdict on two cleaned answers, ``reference`` as its gold; None when two checks in a
    row ran over ``timeout_s`` CPU seconds or their helper died (undecided)."""
    return _POOL.verify(predicted, reference, timeout_s)


def _serve() -> None:
    """Helper-process main loop: read ``[predicted, reference]`` JSON lines, answer "1" or "0".

    math-verify's signal-based timeouts are disabled (None): the parent enforces the time limit by
    killing this process. stdout carries only the protocol; anything else printed goes to stderr.
    """
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_HELPER_MEMORY_LIMIT, _HELPER_MEMORY_LIMIT))
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # silences "Timeout is disabled" notices

    from math_verify import parse, verify

    def check(predicted: str, reference: str) -> bool:
        try:
            gold = parse(f"\\boxed{{{reference}}}", parsing_timeout=None)
            target = parse(f"\\boxed{{{predicted}}}", parsing_timeout=None)
            return bool(verify(gold, target, timeout_seconds=None))
        except BaseException:  # noqa: BLE001 - MemoryError, RecursionError, sympy internals: all "no match"
            return False

    for predicted, reference in _WARM_UP:  # start-up work math-verify does lazily, before the clock runs
        check(predicted, reference)
    protocol.write(b"ready\n")
    for line in sys.stdin.buffer:
        try:
            predicted, reference = json.loads(line)
        except ValueError:
            matched = False
        else:
            matched = check(predicted, reference)
        protocol.write(b"1\n" if matched else b"0\n")


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
