"""The train stage's own torchrun launch (drafter/launch.py), from params."""

import sys

import pytest

from draftline.config import TrainParams
from draftline.drafter.launch import launches, node_rank, torchrun_argv


def test_one_node_is_a_standalone_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    tp = TrainParams(processes_per_node=8)
    assert launches(tp) and not launches(TrainParams())
    assert torchrun_argv(tp, ["--params", "p.yaml", "train", "--out", "d"], 0) == [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=8", "--standalone",
        "-m", "draftline", "--params", "p.yaml", "train", "--out", "d"]
    monkeypatch.setenv("WORLD_SIZE", "8")  # already a torchrun worker: never again
    assert not launches(tp)


def test_two_nodes_rendezvous_at_node_0_with_this_nodes_rank(monkeypatch):
    tp = TrainParams(processes_per_node=8, nodes=2, master="node0.example:29500")
    monkeypatch.setenv("DRAFTLINE_NODE_RANK", "1")
    assert torchrun_argv(tp, ["train"], node_rank(tp))[3:8] == [
        "--nproc_per_node=8", "--nnodes=2", "--node_rank=1", "--master_addr=node0.example", "--master_port=29500"]
    monkeypatch.setenv("DRAFTLINE_NODE_RANK", "2")
    with pytest.raises(ValueError, match="DRAFTLINE_NODE_RANK: '2', expected 0 .. 1"):
        node_rank(tp)


@pytest.mark.parametrize("master", [None, "node0", "node0:port", "a b:1"])
def test_several_nodes_need_node_0s_host_and_port(master):
    with pytest.raises(ValueError, match="master"):
        TrainParams(nodes=2, master=master)
