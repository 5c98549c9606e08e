"""benchmarks/trust_pooling.py: the rule before pooling is put back only inside its runs, and
the summary pairs each rule with MCT seed by seed (hand-made runs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.burst_lengths import parse_seeds
from benchmarks.trust_pooling import _per_node_rule, summarise
from placement.ldwp import networks


def test_the_rule_before_is_put_back_only_inside_the_context():
    correction = torch.tensor([[[2.0, 2.0], [4.0, 4.0], [9.0, 9.0]]])
    trust = torch.tensor([[1.0, 1.0, 0.0]])
    pooled = networks.pooled_correction_torch(correction, trust)[0].numpy()
    with _per_node_rule():
        per_node = networks.pooled_correction_torch(correction, trust)[0].numpy()
    np.testing.assert_allclose(pooled[2], [3.0, 3.0])     # the known nodes' mean
    np.testing.assert_allclose(per_node[2], [0.0, 0.0])   # its bare prior, as before
    np.testing.assert_allclose(networks.pooled_correction_torch(correction, trust)[0].numpy(),
                               pooled)                    # restored after the context


def test_the_summary_pairs_every_rule_with_mct_per_seed():
    runs = [{"cluster": "c", "rule": rule, "seed": seed, "throughput_per_min": value}
            for rule, values in (("mct", (50.0, 60.0)), ("pooled", (55.0, 63.0)),
                                 ("per-node", (40.0, 54.0)))
            for seed, value in zip((1, 2), values)]
    rows = {r["rule"]: r for r in summarise(runs)}
    assert rows["pooled"]["change_vs_mct"]["runs"] == pytest.approx([0.10, 0.05])
    assert rows["per-node"]["change_vs_mct"]["runs"] == pytest.approx([-0.20, -0.10])
    assert "change_vs_mct" not in rows["mct"]
    assert rows["pooled"]["throughput_per_min"]["mean"] == pytest.approx(59.0)


def test_seed_ranges_and_lists():
    assert parse_seeds("2001-2003") == (2001, 2002, 2003)
    assert parse_seeds("5,7") == (5, 7)
