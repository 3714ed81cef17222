"""The saved graph (.ir) names its kernels as the dump files do, on every real MindSpore 2.10 CPU run of the suite.

MindSpore numbers each scope's kernels of one type in the graph's topological order when it names the dump files,
and the count runs on across a rank's graphs; the .ir prints numbers given earlier (msoverflow/readers/ir_graph.py).
Checked against the data itself: every dumped kernel is a node of its graph, and where a node's input is another
node's output, the two files hold the same tensor. The only exception allowed is an optimizer's in-place input 0
(the dump reads it after the kernel wrote it: the sgd_update_overflow case)."""
import os

import numpy as np
import pytest

from msoverflow.graphs import SavedGraphs
from msoverflow.names import scope_to_file_name
from msoverflow.rules.knowledge import knowledge

pytestmark = pytest.mark.mindspore


def _files(step_dir):
    """(kernel name, io, slot) -> path of the first .npy of each (a name's op type is the first field)."""
    found = {}
    for name in os.listdir(step_dir):
        parts = name.split(".")
        if name.endswith(".npy") and len(parts) >= 9 and parts[0] != "Parameter":
            found.setdefault((parts[1], parts[5], int(parts[6])), os.path.join(step_dir, name))
    return found


def _same(a_path, b_path):
    a, b = np.load(a_path), np.load(b_path)
    return a.shape == b.shape and np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True)


def _check_rank(rank_root, rank):
    """(names not in the graph, edges whose files disagree, edges checked) over each graph's first dumped step."""
    graphs = sorted(name.rsplit("_", 1)[1][:-3] for name in os.listdir(os.path.join(rank_root, "graphs"))
                    if name.startswith("ms_output_trace_code_graph_") and name.endswith(".ir"))
    saved = SavedGraphs({}, {(rank, g): rank_root for g in graphs}, lambda message: None)
    unknown, disagree, checked = [], [], 0
    state_updates = knowledge().state_updates
    for g in graphs:
        steps = sorted((os.path.join(rank_root, net, g, s) for net in os.listdir(rank_root)
                        if os.path.isdir(os.path.join(rank_root, net, g)) for s in os.listdir(os.path.join(rank_root, net, g))),
                       key=lambda p: int(os.path.basename(p)))
        if not steps:
            continue
        files = _files(steps[0])
        index = saved.graph(rank, g)
        unknown += [name for name in {k[0] for k in files} if index.find(name) is None]
        for node in index.nodes:
            for slot, producer_name in enumerate(node.inputs):
                producer = index.by_full.get(producer_name)
                mine = files.get((index.file_name(node.full_name), "input", slot))
                theirs = files.get((index.file_name(producer.full_name), "output", 0)) if producer else None
                if mine is None or theirs is None:
                    continue
                checked += 1
                if not _same(mine, theirs) and not (slot == 0 and node.op_type in state_updates):
                    disagree.append(f"graph {g}: {node.full_name} input {slot} <- {producer.full_name}")
    return unknown, disagree, checked


def _every_rank(dumps):
    for name in dumps:
        root = dumps[name]
        for rank_dir in sorted(os.listdir(root))[:2]:
            rank_root = os.path.join(root, rank_dir)
            if rank_dir.startswith("rank_") and os.path.isdir(os.path.join(rank_root, "graphs")):
                yield name, int(rank_dir[len("rank_"):]), rank_root


def test_every_dumped_kernel_is_its_graph_node_and_edges_join_the_same_tensors(real_dumps, multirank_dumps):
    checked_total = 0
    for dumps in (real_dumps, multirank_dumps):
        for name, rank, rank_root in _every_rank(dumps):
            unknown, disagree, checked = _check_rank(rank_root, rank)
            assert not unknown, f"{name} rank {rank}: dumped kernels the saved graph does not name: {unknown[:5]}"
            assert not disagree, f"{name} rank {rank}: {disagree[:5]}"
            checked_total += checked
    assert checked_total > 1000      # the fp16 NormHead runs alone give ~150 edges per rank


def test_the_names_the_ir_prints_would_join_different_tensors(multirank_dumps):
    """The reason for the renumbering (GraphIndex.number_as_dumped), kept visible: read by the names the .ir
    prints, the same fp16 run's files contradict the graph (an AllReduce's input file is not its producer's
    output)."""
    from msoverflow.readers.ir_graph import load_ir
    rank_root = os.path.join(multirank_dumps["dp2_normhead_one_rank"], "rank_0")
    printed = load_ir(os.path.join(rank_root, "graphs", "ms_output_trace_code_graph_0.ir"))   # not renumbered
    files = _files(os.path.join(rank_root, "Net", "0", "0"))
    contradictions = 0
    for node in printed.nodes:
        for slot, producer_name in enumerate(node.inputs):
            producer = printed.by_full.get(producer_name)
            mine = files.get((scope_to_file_name(node.full_name), "input", slot))
            theirs = files.get((scope_to_file_name(producer.full_name), "output", 0)) if producer else None
            if mine and theirs and not _same(mine, theirs):
                contradictions += 1
    assert contradictions >= 10, contradictions
