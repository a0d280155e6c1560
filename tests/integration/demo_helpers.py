"""Running `stream-dp demo` as a process in tests: live output, the pids it reports, leftovers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from waiting import wait_for  # the tests' one wait, re-exported for the demo tests


class DemoProcess:
    """``stream-dp demo ARGS`` in a session of its own (like a terminal job), stdout collected by a thread."""

    def __init__(self, args: list[str], workdir: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stream_dp.cli", "demo", *args, "--workdir", str(workdir), "--color", "never"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.output):
            if self.proc.poll() is not None:
                self._reader.join(5)
                if predicate(self.output):
                    return
                raise AssertionError(f"demo exited ({self.proc.returncode}) before {what}:\n{self.output[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout}s:\n{self.output[-4000:]}")
            time.sleep(0.2)

    def windows_printed(self) -> int:
        """Windows with at least one release printed (whatever types the config enables)."""
        return len({m for m in re.findall(r"^── (\S+ \S+) → ", self.output, flags=re.M)})

    def ctrl_c(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to the foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        self._close()
        return code

    def _close(self) -> None:
        self._reader.join(5)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()

    def reported_pids(self) -> list[int]:
        return [int(p) for p in re.findall(r"\bpid (\d+)", self.output)]

    def kill_all(self) -> None:
        """Last resort for a failed test: kill the demo and everything it reported."""
        for pid in [self.proc.pid, *self.reported_pids()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._close()


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains ``text``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and running(int(entry.name)):
            out.append((int(entry.name), cmdline))
    return out


def assert_nothing_left(demo: DemoProcess) -> None:
    pids = demo.reported_pids()
    assert len(pids) >= 4, f"the demo reports the pids of broker, redis and both workers:\n{demo.output[:2000]}"
    wait_for(lambda: not (any(running(p) for p in pids) or processes_mentioning(str(demo.workdir))), timeout=10,
             interval=0.1, what="no process of the demo left behind")
