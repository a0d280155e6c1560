"""The demo's worker processes: the ingest and release workers as the production entry points run them.

Each is ``python -m workers.<name> --config FILE`` (the demo's final config, written once: no ``STREAM_DP_*``
variable reaches the child), in a process group of its own so the terminal's Ctrl-C reaches only the demo,
which stops them in order; each serves /metrics on its own port and counts as started once that answers.
:func:`pick_port` gives each the port asked for, or a free one when it is taken.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from stream_dp.processes import die_with_parent, free_port

WORKERS = ("ingest", "release")


@dataclass
class WorkerProcess:
    """One worker started as ``python -m workers.<name> --config FILE`` in a process group of its own."""

    name: str
    config_path: Path
    metrics_port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}  # the file is final
        env["STREAM_DP_METRICS__PORT"] = str(self.metrics_port)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", f"workers.{self.name}", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                process_group=0, preexec_fn=die_with_parent)

    def wait_ready(self, deadline: float) -> None:
        """Poll /metrics until it answers; fail with the log's tail if the process exits first."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"the {self.name} worker exited while starting; its log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {self.name} worker did not serve {url} in time; its log:\n{self.log_tail()}")
            time.sleep(0.1)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            self.proc.send_signal(sig)  # type: ignore[union-attr]

    def wait(self, timeout: float) -> bool:
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=max(timeout, 0))
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()  # type: ignore[union-attr]
            self.proc.wait()  # type: ignore[union-attr]

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def pick_port(preferred: int, taken: set[int]) -> int:
    """``preferred`` if it is free (and not already handed out), else any free port."""
    if preferred and preferred not in taken:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the metrics server does
            try:
                sock.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    port = free_port()
    while port in taken:
        port = free_port()
    return port
