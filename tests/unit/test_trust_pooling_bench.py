"""benchmarks/trust_pooling.py: the rule before pooling is put back only inside its runs, and
the summary pairs each rule with MCT seed by seed (hand-made runs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.burst_lengths import parse_seeds
from benchmarks.trust_pooling import run_one, summarise
from placement.ldwp import networks
from placement.ldwp.evidence import per_node_correction, trusted_correction


@pytest.mark.parametrize("rule,unknown", [("pooled", [3.0, 3.0]), ("per_node", [0.0, 0.0])])
def test_each_rule_gives_the_unknown_node_its_correction(rule, unknown):
    correction = np.array([[2.0, 2.0], [4.0, 4.0], [9.0, 9.0]])
    trust = np.array([1.0, 1.0, 0.0])
    numpy_rows = trusted_correction(correction, trust, rule)
    torch_rows = networks.trusted_correction_torch(torch.from_numpy(correction)[None],
                                                   torch.from_numpy(trust)[None], rule)[0]
    np.testing.assert_allclose(numpy_rows[2], unknown)  # pooled: the known nodes' mean
    np.testing.assert_allclose(torch_rows.numpy(), numpy_rows)
    np.testing.assert_allclose(numpy_rows[:2], correction[:2])  # known nodes: their own


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="trust rule"):
        trusted_correction(np.zeros((2, 2)), np.ones(2), "median")
    with pytest.raises(ValueError, match="trust rule"):
        networks.trusted_correction_torch(torch.zeros(1, 2, 2), torch.ones(1, 2), "median")
    np.testing.assert_allclose(per_node_correction(np.ones((2, 1)), np.array([0.5, 0.0])),
                               [[0.5], [0.0]])


def test_the_per_node_runs_decide_otherwise_on_an_unseen_node():
    """The same shipped file and tasks, only the frozen agent's rule differs (a short run on
    the cluster where the rules part ways: the paper cluster and one V100 it never saw)."""
    pooled = run_one(("paper_plus_unseen_v100", "pooled", 1001, 150))
    per_node = run_one(("paper_plus_unseen_v100", "per-node", 1001, 150))
    assert pooled["decisions_per_node"] != per_node["decisions_per_node"]
    assert sum(pooled["decisions_per_node"].values()) == 150


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
