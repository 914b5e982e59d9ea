"""Many processes from a stage's own command, for a stage whose params section has
`processes_per_node`, `nodes` and `master` (extract, train).

    train:                         # or extract:
      processes_per_node: 8        # one per GPU
      nodes: 2
      master: node0.example:29500  # node 0's host:port, reachable from every node

With more than one process, `draftline train` (so `dvc repro`) starts torchrun itself with
the same arguments, and each process it starts does its share (distributed.py). A node's
process count and the run's shape are params, versioned with everything else, not a
hand-edited command line. For several nodes, run the same command on every node, from the
same commit, params and data, with `DRAFTLINE_NODE_RANK` = 1 .. nodes-1 on the others
(node 0, where `dvc repro` runs, is 0): static rendezvous, so global rank 0, which writes
the stage's outputs, is on node 0.

Already under torchrun (WORLD_SIZE set: a user's own torchrun line) nothing is relaunched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Protocol

from .distributed import under_torchrun


class Launched(Protocol):
    """A params section that sets the run's shape (config/extract.py, config/train.py)."""

    key: str  # the section's name in params.yaml
    processes_per_node: int
    nodes: int
    master: str | None


def launches(section: Launched) -> bool:
    return section.processes_per_node * section.nodes > 1 and not under_torchrun()


def torchrun_argv(section: Launched, argv: list[str], node_rank: int) -> list[str]:
    """torchrun's command line for this node; argv: draftline's own arguments."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={section.processes_per_node}"]
    if section.nodes == 1:
        cmd.append("--standalone")
    else:
        host, port = section.master.rsplit(":", 1)
        cmd += [f"--nnodes={section.nodes}", f"--node_rank={node_rank}", f"--master_addr={host}",
                f"--master_port={port}"]
    return cmd + ["-m", "draftline", *argv]


def node_rank(section: Launched) -> int:
    raw = os.environ.get("DRAFTLINE_NODE_RANK", "0")
    if not raw.isdigit() or int(raw) >= section.nodes:
        raise ValueError(f"DRAFTLINE_NODE_RANK: {raw!r}, expected 0 .. {section.nodes - 1} "
                         f"({section.key}.nodes: {section.nodes})")
    return int(raw)


def relaunch(stage: str, section: Launched, threads: int | None) -> None:
    """Run this command (stage `stage`) again under torchrun and wait; a failed run raises
    one line naming the stage (each process has printed its own error above it)."""
    env = dict(os.environ)
    if threads is None and "DRAFTLINE_THREADS" not in env:
        # CPU processes would each take every core; on GPUs this only bounds the host side.
        env["DRAFTLINE_THREADS"] = str(max(1, (os.cpu_count() or 1) // section.processes_per_node))
    cmd = torchrun_argv(section, sys.argv[1:], node_rank(section))
    print(f"{stage}: {section.processes_per_node * section.nodes} processes: {' '.join(cmd[1:])}",
          file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env)
    try:
        code = proc.wait()
    except BaseException:
        proc.send_signal(signal.SIGTERM)  # torchrun passes it on to its processes
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    if code:
        raise RuntimeError(f"{stage}: torchrun with {section.processes_per_node} process(es) per node "
                           f"exited with {code}")
