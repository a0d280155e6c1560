"""``stream-dp dashboard`` as a child process (what ``stream-dp demo`` starts next to its workers).

Started like the workers -- the same config file, a process group of its own (the terminal's Ctrl-C
reaches only the parent, which stops it with SIGTERM), dying with its parent -- on the port the parent chose.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from stream_dp.processes import die_with_parent


@dataclass
class DashboardChild:
    config_path: Path
    port: int
    log_path: Path
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}  # the file is final
        env.update({"STREAM_DP_DASHBOARD__PORT": str(self.port), "STREAM_DP_DASHBOARD__HOST": self.host})
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stream_dp.cli", "dashboard", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                process_group=0, preexec_fn=die_with_parent)

    def wait_ready(self, deadline: float) -> None:
        """Poll /healthz until the server answers (200, or 503 while its subscriber connects)."""
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"the dashboard exited while starting; its log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "healthz", timeout=1):
                    return
            except urllib.error.HTTPError:
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dashboard did not answer at {self.url} in time; its log:\n{self.log_tail()}")
            time.sleep(0.1)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; True if it stopped by itself."""
        if not self.alive:
            return True
        self.proc.terminate()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=timeout)  # type: ignore[union-attr]
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()  # type: ignore[union-attr]
            self.proc.wait()  # type: ignore[union-attr]
            return False

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"
