"""A stage's own torchrun launch (launch.py), from its params section: train's and extract's."""

import sys

import pytest

from draftline.config.extract import ExtractParams
from draftline.config.train import TrainParams
from draftline.launch import launches, node_rank, relaunch, torchrun_argv


def test_one_node_is_a_standalone_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    tp = TrainParams(processes_per_node=8)
    assert launches(tp) and not launches(TrainParams())
    assert torchrun_argv(tp, ["--params", "p.yaml", "train", "--out", "d"], 0) == [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=8", "--standalone",
        "-m", "draftline", "--params", "p.yaml", "train", "--out", "d"]
    monkeypatch.setenv("WORLD_SIZE", "8")  # already a torchrun worker: never again
    assert not launches(tp)


def test_extract_launches_from_its_own_section(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ep = ExtractParams(processes_per_node=4)
    assert launches(ep) and not launches(ExtractParams())
    assert torchrun_argv(ep, ["extract"], 0) == [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", "--standalone",
        "-m", "draftline", "extract"]


def test_two_nodes_rendezvous_at_node_0_with_this_nodes_rank(monkeypatch):
    tp = TrainParams(processes_per_node=8, nodes=2, master="node0.example:29500")
    monkeypatch.setenv("DRAFTLINE_NODE_RANK", "1")
    assert torchrun_argv(tp, ["train"], node_rank(tp))[3:8] == [
        "--nproc_per_node=8", "--nnodes=2", "--node_rank=1", "--master_addr=node0.example", "--master_port=29500"]
    monkeypatch.setenv("DRAFTLINE_NODE_RANK", "2")
    with pytest.raises(ValueError, match=r"DRAFTLINE_NODE_RANK: '2', expected 0 .. 1 \(train.nodes: 2\)"):
        node_rank(tp)
    with pytest.raises(ValueError, match=r"\(extract.nodes: 2\)"):
        node_rank(ExtractParams(nodes=2, master="node0.example:29500"))


@pytest.mark.parametrize("section", [TrainParams, ExtractParams])
@pytest.mark.parametrize("master", [None, "node0", "node0:port", "a b:1"])
def test_several_nodes_need_node_0s_host_and_port(section, master):
    with pytest.raises(ValueError, match="master"):
        section(nodes=2, master=master)


def test_vllm_extract_is_one_process():
    with pytest.raises(ValueError, match="backend: vllm runs as one process"):
        ExtractParams(backend="vllm", processes_per_node=2)


def test_a_failed_torchrun_names_the_stage(monkeypatch):
    """torchrun for real, with a worker that cannot start: one line naming the stage."""
    monkeypatch.delenv("DRAFTLINE_NODE_RANK", raising=False)
    monkeypatch.setattr(sys, "argv", ["draftline", "no-such-command"])
    with pytest.raises(RuntimeError, match=r"^extract: torchrun with 2 process\(es\) per node exited with 1$"):
        relaunch("extract", ExtractParams(processes_per_node=2), threads=1)
