"""Start inference servers from commands in params, and stop them whatever happens.

Each command runs in its own process group (so stopping it stops vLLM's or SGLang's
worker processes too) and, on Linux, is told to get SIGTERM if the stage dies, even by
SIGKILL, so no GPU server outlives the run that started it. Its output goes to a log
file with every secret the process knows masked (draftline/secrets.py), the values the
command took from the environment included: servers echo their arguments, API keys too.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

from .. import secrets

_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def expand(command: str) -> list[str]:
    """argv with ${VAR} taken from the environment; each value used becomes a secret."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name not in os.environ:
            raise ValueError(f"regenerate.openai.launch: environment variable {name} is not set")
        secrets.register(os.environ[name])
        return os.environ[name]

    return shlex.split(_VAR.sub(sub, command))


class _Proc:
    def __init__(self, command: str, log: Path):
        argv = expand(command)
        self.command = command  # unexpanded: safe to print
        self.tail: deque[str] = deque(maxlen=20)
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log.open("a", encoding="utf-8")
        try:
            self.p = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        except OSError as err:
            self.log.close()
            raise ValueError(f"regenerate.openai.launch: cannot start '{command}': {err}") from None
        self.pump = threading.Thread(target=self._copy, daemon=True)
        self.pump.start()

    def _copy(self) -> None:
        for raw in self.p.stdout:
            line = secrets.mask(raw.decode("utf-8", "replace"))
            self.tail.append(line.rstrip())
            self.log.write(line)
            self.log.flush()

    def exited(self) -> str | None:
        rc = self.p.poll()
        if rc is None:
            return None
        self.pump.join(timeout=2)
        last = " | ".join(list(self.tail)[-5:])
        return f"'{self.command}' exited with code {rc}; last output: {last or '(none)'}"

    def stop(self, grace_s: float) -> None:
        if self.p.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.p.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.pump.join(timeout=2)
        self.log.close()


class LaunchedServers:
    """Context manager over the `launch` commands; `alive()` reports the first that died."""

    def __init__(self, commands: list[str], log_dir: Path, grace_s: float = 30.0):
        self.commands, self.log_dir, self.grace_s = commands, log_dir, grace_s
        self.procs: list[_Proc] = []

    def __enter__(self) -> "LaunchedServers":
        try:
            for i, cmd in enumerate(self.commands):
                self.procs.append(_Proc(cmd, self.log_dir / f"server-{i}.log"))
                print(f"regenerate: started server {i}: {cmd} (log {self.log_dir / f'server-{i}.log'})",
                      file=sys.stderr)
        except BaseException:
            self.__exit__()
            raise
        return self

    def alive(self) -> str | None:
        for p in self.procs:
            if msg := p.exited():
                return msg
        return None

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.stop(self.grace_s)
        self.procs = []
