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
