"""Forward hooks as context managers, after baukit's nethook.

Trace        hook one module: retain its input/output, edit them, or stop the forward after it
TraceDict    many Traces at once; registration is all-or-nothing, removal is guaranteed
StopForward  raised by a Trace with stop=True; caught by the with-block that owns it
"""

from collections import OrderedDict

import torch


class StopForward(Exception):
    """Raised after the last module of interest, so the rest of the forward is skipped."""


def first_tensor(value):
    """The hidden-state tensor of a module's output (decoder layers may return a tuple)."""
    return value[0] if isinstance(value, tuple) else value


def replace_first(value, tensor):
    return (tensor, *value[1:]) if isinstance(value, tuple) else tensor


def _copy(value, clone, detach):
    # Caches and None pass through untouched: copying a cache would silently fork it.
    if not torch.is_tensor(value):
        return value
    if detach:
        value = value.detach()
    return value.clone() if clone else value


class Trace:
    """Hook one module for the duration of a with-block.

    >>> with Trace(model.model.layers[3], retain_input=True) as t:
    ...     model(ids)
    >>> t.input.shape   # [batch, pos, d_model]

    Options (independent keyword flags):
        retain_output / retain_input: keep the hidden-state tensor in `.output` / `.input`.
        clone, detach: how the retained tensors are copied.
        edit_output(tensor, name) -> tensor: replace the module's hidden-state output.
        edit_input(tensor, name) -> tensor: replace the module's hidden-state input (first arg).
        retain_weights: keep the second element of a tuple output in `.weights` (an attention module's
            weights [batch, heads, query, key], which it returns only when it runs eager).
        stop: raise StopForward after this module ran (with-block swallows it).
    """

    def __init__(
        self,
        module,
        name="",
        retain_output=True,
        retain_input=False,
        clone=False,
        detach=True,
        edit_output=None,
        edit_input=None,
        retain_weights=False,
        stop=False,
    ):
        self.module, self.name = module, name
        self.retain_output, self.retain_input = retain_output, retain_input
        self.clone, self.detach = clone, detach
        self.edit_output, self.edit_input, self.stop = edit_output, edit_input, stop
        self.retain_weights = retain_weights
        self.input = self.output = self.weights = None
        self._handles = []

    def _pre_hook(self, module, args, kwargs):
        if args:
            hidden, rest = args[0], None
        else:
            hidden, rest = kwargs.get("hidden_states"), "kw"
        if self.edit_input is not None:
            hidden = self.edit_input(hidden, self.name)
            if rest == "kw":
                kwargs = {**kwargs, "hidden_states": hidden}
            else:
                args = (hidden, *args[1:])
        if self.retain_input:
            self.input = _copy(hidden, self.clone, self.detach)
        return args, kwargs

    def _hook(self, module, args, output):
        if self.edit_output is not None:
            output = replace_first(output, self.edit_output(first_tensor(output), self.name))
        if self.retain_output:
            self.output = _copy(first_tensor(output), self.clone, self.detach)
        if self.retain_weights:
            self.weights = _copy(output[1], self.clone, self.detach)
        if self.stop:
            raise StopForward(self.name)
        return output

    def __enter__(self):
        try:
            if self.retain_input or self.edit_input is not None:
                self._handles.append(self.module.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
            self._handles.append(self.module.register_forward_hook(self._hook))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return exc_type is not None and issubclass(exc_type, StopForward)

    def close(self):
        while self._handles:
            self._handles.pop().remove()


class TraceDict(OrderedDict):
    """Traces on many modules, keyed by name.

    >>> with TraceDict({"layers.3.mixer_out": mixer, "layers.3.layer_out": layer}) as td:
    ...     model(ids)
    >>> td["layers.3.mixer_out"].output

    `modules` maps name -> module; per-name options come from `options[name]` (a dict of Trace
    keyword flags), shared ones from keyword arguments. Registration is all-or-nothing and every
    hook comes off when the block ends, also when the forward raises.
    """

    def __init__(self, modules, options=None, **shared):
        super().__init__()
        options = options or {}
        for name, module in modules.items():
            self[name] = Trace(module, name, **{**shared, **options.get(name, {})})

    def __enter__(self):
        entered = []
        try:
            for trace in self.values():
                trace.__enter__()
                entered.append(trace)
        except BaseException:
            for trace in reversed(entered):
                trace.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        for trace in reversed(self.values()):
            trace.close()
        return exc_type is not None and issubclass(exc_type, StopForward)
