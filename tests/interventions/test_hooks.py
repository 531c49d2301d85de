import pytest
import torch

from hybridlens.interventions.hooks import StopForward, Trace, TraceDict


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_removed_on_normal_exit_and_on_exception(hm):
    ids = torch.tensor([[5, 6, 7, 8]])
    before = _hook_count(hm.model)
    mods = {f"l{i}": layer for i, layer in enumerate(hm.layers)}
    with TraceDict(mods, retain_input=True) as td:
        hm.model(ids)
    assert _hook_count(hm.model) == before
    assert td["l0"].input.shape == (1, 4, hm.d_model)

    def boom(t, name):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), TraceDict(mods, edit_output=boom):
        hm.model(ids)
    assert _hook_count(hm.model) == before


def test_registration_is_all_or_nothing(hm):
    before = _hook_count(hm.model)
    mods = {"ok": hm.layers[0], "bad": object()}  # the second cannot take hooks
    with pytest.raises(AttributeError), TraceDict(mods):
        pass
    assert _hook_count(hm.model) == before


def test_stop_forward_skips_the_rest(hm):
    ids = torch.tensor([[5, 6, 7, 8]])
    with Trace(hm.layers[0], stop=True) as first, Trace(hm.layers[-1]) as last:
        hm.model(ids)
        pytest.fail("the forward should have stopped")
    assert first.output is not None and last.output is None


def test_stop_forward_is_a_dedicated_exception():
    assert not issubclass(StopForward, RuntimeError)
