"""When the router's compiled decision (placement.ldwp.compiled) applies, and when the numpy
path decides instead. The numbers of both paths are checked in test_decision_fast_path.py."""

from __future__ import annotations

import numpy as np
import pytest

from placement.ldwp import compiled
from placement.ldwp.compiled import JIT_ENV, compiled_scorer, decision_path, jit_available

CONSTANTS = {"size_column": 4, "first_column": 5, "low": np.zeros(9), "high": np.ones(9),
             "log_divisors": np.ones(4), "completion_scale": 10.0}


def _layers(*sizes):
    return [(np.zeros((a, b)), np.zeros(b)) for a, b in zip(sizes, sizes[1:])]


needs_numba = pytest.mark.skipif(compiled._import_numba() is None,
                                 reason="numba is not installed")


@needs_numba
@pytest.mark.parametrize("env, layers, q_prior, residual, expected", [
    ("1", _layers(32, 8, 2), "completion", "scaled", "scaled"),
    ("1", _layers(32, 8, 4, 1), "completion", None, "additive"),
    ("1", _layers(32, 8, 1), None, None, "plain"),
    ("0", _layers(32, 8, 2), "completion", "scaled", None),        # turned off
    (" 0 ", _layers(32, 8, 2), "completion", "scaled", None),
    ("1", _layers(32, 2), "completion", "scaled", None),          # no hidden layer
    ("1", _layers(32, 8, 1), "completion", "scaled", None),       # scaled needs two outputs
])
def test_the_compiled_path_applies_only_where_it_computes_the_same_function(
        monkeypatch, env, layers, q_prior, residual, expected):
    monkeypatch.setenv(JIT_ENV, env)
    scorer = compiled_scorer(layers, 16, q_prior, residual, CONSTANTS)
    if expected is None:
        assert scorer is None
    else:
        assert scorer.mode == compiled.RESIDUAL_MODES[expected]
        assert scorer.own.shape == (16, 8) and scorer.context.shape == (16, 8)


def test_without_numba_the_numpy_path_decides(monkeypatch):
    monkeypatch.setattr(compiled, "_numba", False)   # as after a failed import
    monkeypatch.delenv(JIT_ENV, raising=False)
    assert not jit_available()
    assert compiled_scorer(_layers(32, 8, 2), 16, "completion", "scaled", CONSTANTS) is None


@needs_numba
def test_decision_path_says_which_path_decides(monkeypatch):
    monkeypatch.setenv(JIT_ENV, "1")

    class Policy:
        compiled = compiled_scorer(_layers(32, 8, 2), 16, "completion", "scaled", CONSTANTS)

    assert decision_path(Policy()) == "compiled"
    Policy.compiled.failed = "RuntimeError: boom"
    assert decision_path(Policy()) == "numpy (compiled failed: RuntimeError: boom)"
    assert decision_path(object()) == "numpy"


@needs_numba
def test_a_compiler_that_refuses_leaves_the_numpy_path(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise RuntimeError("cannot cache function: no locator available")

    monkeypatch.setenv(JIT_ENV, "1")
    monkeypatch.setattr(compiled, "_KERNEL", None)
    monkeypatch.setattr(compiled._import_numba(), "njit", refuse)
    assert compiled_scorer(_layers(32, 8, 2), 16, "completion", "scaled", CONSTANTS) is None


def test_a_replaced_print_is_made_findable_for_numbas_import(monkeypatch):
    """As in PyFlink's worker: print replaced by a function whose module lacks it."""
    import builtins
    import types
    fake_module = types.ModuleType("fake_worker_main")

    def replacement(*args, **kwargs):
        return None

    replacement.__module__ = "fake_worker_main"
    monkeypatch.setitem(__import__("sys").modules, "fake_worker_main", fake_module)
    monkeypatch.setattr(builtins, "print", replacement)
    compiled._print_findable()
    assert fake_module.print is replacement


def test_a_numba_import_that_raises_anything_leaves_the_numpy_path(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def refusing(name, *args, **kwargs):
        if name == "numba":
            raise AttributeError("module 'x' has no attribute 'print'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(compiled, "_numba", None)
    monkeypatch.setattr(builtins, "__import__", refusing)
    monkeypatch.delitem(__import__("sys").modules, "numba", raising=False)
    monkeypatch.delenv(JIT_ENV, raising=False)
    assert not jit_available()


@needs_numba
def test_warm_up_compiles_once_and_says_so(monkeypatch):
    monkeypatch.setenv(JIT_ENV, "1")
    assert compiled.warm_up() == "the compiled decision is ready (numba's cache holds it)"
    monkeypatch.setenv(JIT_ENV, "0")
    assert "numpy path" in compiled.warm_up()


@needs_numba
def test_inputs_of_inconsistent_shapes_are_refused_not_written_past(monkeypatch):
    """numba does not check indices: a template too narrow for the node columns must be an
    error (then the numpy path), never a write past the array."""
    monkeypatch.setenv(JIT_ENV, "1")
    width = 13
    constants = dict(CONSTANTS, size_column=0, first_column=1)
    scorer = compiled_scorer(_layers(2 * width, 4, 2), width, "completion", "scaled", constants)
    assert scorer.q_values(np.zeros((2, 9)), np.ones(2), np.zeros((2, 5)), 0.0, np.ones(2),
                           None) is None
    assert "inconsistent shapes" in scorer.failed


def _random_layers(width, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(2 * width, 6)), rng.normal(size=6)),
            (rng.normal(size=(6, 2)), rng.normal(size=2))]


@needs_numba
def test_the_template_part_is_the_first_layer_on_the_constant_columns(monkeypatch):
    """base = template's share of the first layer (own and context) plus the bias, with the
    columns that change per task read as 0: what the kernel adds the rest to."""
    monkeypatch.setenv(JIT_ENV, "1")
    width = 20
    layers = _random_layers(width)
    scorer = compiled_scorer(layers, width, "completion", "scaled", CONSTANTS)
    template = np.random.default_rng(1).normal(size=(3, width))
    base = scorer.template_part(template)
    fixed = template.copy()
    fixed[:, 4] = 0.0          # the size column
    fixed[:, 5:16] = 0.0       # a node's 11 changing columns
    weight, bias = layers[0]
    want = fixed @ weight[:width] + fixed.mean(axis=0) @ weight[width:] + bias
    np.testing.assert_allclose(base, want, rtol=1e-12, atol=1e-12)
    # a template of another width is refused (the numpy path then decides), not misread
    assert scorer.template_part(np.zeros((3, width - 1))) is None
    assert "inconsistent shapes" in scorer.failed


@needs_numba
def test_a_given_template_part_gives_the_same_q_as_one_computed_in_the_call(monkeypatch):
    monkeypatch.setenv(JIT_ENV, "1")
    width = 20
    scorer = compiled_scorer(_random_layers(width, seed=2), width, "completion", "scaled",
                             CONSTANTS)
    rng = np.random.default_rng(3)
    template = np.zeros((4, width))
    template[:, 16] = 1.0      # "exists"
    template[:, 0] = 1.0       # a type column
    numbers = rng.uniform(0.0, 1.0, size=(4, 9))
    computed = scorer.q_values(numbers.copy(), np.ones(4), template, 0.3, np.ones(4), None)
    given = scorer.q_values(numbers.copy(), np.ones(4), template, 0.3, np.ones(4), None,
                            scorer.template_part(template))
    np.testing.assert_array_equal(computed[1], given[1])
    np.testing.assert_array_equal(computed[0], given[0])
    # a base of the wrong shape is refused by the kernel, never read past its end
    assert scorer.q_values(numbers.copy(), np.ones(4), template, 0.3, np.ones(4), None,
                           np.zeros((3, 6))) is None
    assert "inconsistent shapes" in scorer.failed


@needs_numba
def test_the_kernel_keeps_the_gil():
    """A kernel that gives the GIL up must take it back from whatever thread got it (PyFlink's
    gRPC threads, the model refresher), which can hold it for the whole switch interval: in a
    busy Python worker every decision then costs up to 5 ms (measured: p99 5.3 ms against 1.0
    ms). An 11 us kernel gains nothing from releasing it."""
    assert compiled._kernel().targetoptions.get("nogil", False) is False


@needs_numba
@pytest.mark.parametrize("estimates, best, runner", [
    ((2.0, 1.0, 3.0, 1.0), 1, 3),     # equal best Q on nodes 1 and 3: the first is best
    ((1.0, 1.0, 1.0, 1.0), 0, 1),     # all equal: the first, then the second
    ((5.0, 4.0, 3.0, 2.0), 3, 2),
    ((1.0,), 0, -1),                  # one node: no runner-up
])
def test_the_kernel_names_the_best_and_the_runner_up_as_the_decision_does(
        monkeypatch, estimates, best, runner):
    """An untrained scaled residual is MCT: Q = -log(1 + estimate) on idle nodes, so the
    lowest estimate wins; ties go to the first node, as list.index(max(...)) does."""
    monkeypatch.setenv(JIT_ENV, "1")
    width = 20
    layers = [(np.zeros((2 * width, 6)), np.zeros(6)), (np.zeros((6, 2)), np.zeros(2))]
    constants = dict(CONSTANTS, high=np.full(9, 1e7))   # estimates above 1 stay themselves
    scorer = compiled_scorer(layers, width, "completion", "scaled", constants)
    m = len(estimates)
    numbers = np.zeros((m, 9))
    numbers[:, 8] = 1.0                # speed factor 1: the estimate is the one given
    template = np.zeros((m, width))
    _, q, got_best, got_runner = scorer.q_values(numbers, np.array(estimates), template, 0.0,
                                                 np.ones(m), None)
    scores = q.tolist()
    assert (got_best, got_runner) == (best, runner)
    assert got_best == scores.index(max(scores))
