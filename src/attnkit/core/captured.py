"""The tensors a ``score_mod`` reads, found so that their gradients are not lost.

A backend that computes attention inside its own ``torch.autograd.Function`` (``tiled``) gives
gradients only to the tensors passed to it. A learned bias that a ``score_mod`` reads but nobody
passed keeps ``grad = None`` while the forward pass is right. So :func:`captured_tensors` follows
every route by which Python code reaches an object:

- a function's closure cells, defaults and keyword-only defaults;
- the globals its code names (nested lambdas and comprehensions included), and the attributes its
  code names of a global module or class (``config.edge_bias``);
- a ``functools.partial``'s function, arguments and keywords;
- a bound method's object and function; a callable object's attributes and its ``__call__``;
- an ``nn.Module``'s parameters, buffers, attributes and ``forward``;
- lists, tuples, sets and dicts (keys and values), and the attributes of any object met.

The walk is bounded (``MAX_DEPTH`` levels, ``MAX_OBJECTS`` objects). A tensor it cannot see (behind
a weakref or a property, or past the bounds) is caught by :func:`leaf_outside`: the scores of one
block, computed under autograd, are walked back through their autograd graph to the leaves; a
leaf reached other than through the backend's inputs would get no gradient, and the backend
refuses the call naming it (:func:`describe_tensor`). :func:`reads_tensors_requiring_grad` tells
a forward-only backend that a mod needs gradients although no tensor was found.

Example::

    >>> table = torch.zeros(4, requires_grad=True)
    >>> tables = {"edge": table}
    >>> def edge_bias(score, b, h, q_idx, kv_idx):
    ...     return score + tables["edge"][h]
    >>> captured_tensors(edge_bias)[0] is table
    True
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import Tensor, nn

from attnkit.core.masks import index_grids

#: levels of nesting followed from the mod (a closure holding a list holding a tensor is 2)
MAX_DEPTH = 12
#: objects visited at most per mod
MAX_OBJECTS = 20_000
#: autograd nodes visited at most when a probe's graph is walked back
MAX_NODES = 100_000

# values that hold no object worth visiting
_ATOMS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def captured_tensors(fn: object) -> list[Tensor]:
    """The tensors requiring grad that ``fn`` (a ``score_mod`` or ``mask_mod``) can reach, each
    once, in the order found (module docstring)."""
    if fn is None:
        return []
    found: dict[int, Tensor] = {}
    seen: set[int] = set()
    stack: list[tuple[object, int]] = [(fn, 0)]
    while stack and len(seen) < MAX_OBJECTS:
        obj, depth = stack.pop()
        if isinstance(obj, _ATOMS) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Tensor):
            if obj.requires_grad:
                found.setdefault(id(obj), obj)
            continue
        if depth < MAX_DEPTH:
            # reversed: the first child is visited first, so the order found is the order read
            stack.extend((child, depth + 1) for child in reversed(list(_children(obj))))
    return list(found.values())


def _children(obj: object) -> Iterator[object]:
    """The objects ``obj`` holds (existing objects only: ``seen`` is keyed by ``id``)."""
    if isinstance(obj, nn.Module):
        yield from obj.parameters()
        yield from obj.buffers()
        for module in obj.modules():
            # plain attributes: tensors, helpers, functions (registered ones are above)
            yield from (v for key, v in vars(module).items() if not key.startswith("_"))
            yield type(module).forward
        return
    if isinstance(obj, functools.partial):
        yield obj.func
        yield from obj.args
        yield from obj.keywords.values()
        return
    if isinstance(obj, types.MethodType):
        yield obj.__self__
        yield obj.__func__
        return
    if isinstance(obj, types.FunctionType):
        yield from _function_children(obj)
        return
    if isinstance(obj, (staticmethod, classmethod)):
        yield obj.__func__
        return
    if isinstance(obj, dict):
        yield from dict.keys(obj)
        yield from dict.values(obj)
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        yield from obj
        return
    if isinstance(obj, (types.ModuleType, type, types.CodeType)):
        return  # reached only through the names a function's code reads (below)
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        owner = getattr(obj, "__self__", None)  # e.g. a tensor's bound method
        if owner is not None and not isinstance(owner, (types.ModuleType, type)):
            yield owner
        return
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        yield from attributes.values()
    for klass in type(obj).__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                yield getattr(obj, name)
    # a callable object's __call__, when written in Python (not a C slot)
    call = next((vars(c)["__call__"] for c in type(obj).__mro__ if "__call__" in vars(c)), None)
    if isinstance(call, types.FunctionType):
        yield call


def _function_children(fn: types.FunctionType) -> Iterator[object]:
    for cell in fn.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    yield from fn.__defaults__ or ()
    yield from (fn.__kwdefaults__ or {}).values()
    yield from vars(fn).values()  # attributes set on the function
    names = _code_names(fn.__code__)
    namespace = fn.__globals__
    for name in names:
        if name in namespace:
            value = namespace[name]
            if isinstance(value, (types.ModuleType, type)):
                yield from _named_attributes(value, names, 3)
            else:
                yield value


def _code_names(code: types.CodeType) -> frozenset[str]:
    """Global and attribute names a code object reads, with those of the code nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return frozenset(names)


def _named_attributes(owner: object, names: Iterable[str], levels: int) -> Iterator[object]:
    """The attributes of a module or class that ``names`` mention, read from their ``__dict__``
    (never through ``__getattr__``, which may import or compute), following nested modules and
    classes ``levels`` deep (``package.settings.bias``)."""
    names = frozenset(names)
    owners = owner.__mro__ if isinstance(owner, type) else (owner,)
    for klass in owners:
        space = vars(klass)
        for name in names:
            if name not in space:
                continue
            value = space[name]
            if isinstance(value, (types.ModuleType, type)):
                if levels > 1 and value is not owner:
                    yield from _named_attributes(value, names, levels - 1)
            else:
                yield value


def _probe(fn: object, like: Tensor, extra_dims: int) -> Tensor | None:
    """``fn`` on one score (index 0 everywhere) under autograd: its result when that requires
    grad, i.e. when the mod reads a tensor requiring grad; else ``None``."""
    if fn is None or not torch.is_grad_enabled() or not callable(fn):
        return None
    score = torch.zeros((1,) * (4 + extra_dims), dtype=like.dtype, device=like.device)
    try:
        out = fn(score, *index_grids(1, 1, 1, 1, like.device, extra_dims))
    except Exception:  # the call itself will raise its own error
        return None
    if isinstance(out, Tensor) and out.grad_fn is not None:
        return out
    return None


def reads_tensors_requiring_grad(fn: object, like: Tensor, extra_dims: int = 0) -> bool:
    """Whether ``fn`` (a ``score_mod``) reads a tensor that requires grad, by running it once
    on a single score of ``like``'s dtype and device under autograd (``False`` without grad
    mode)."""
    return _probe(fn, like, extra_dims) is not None


def leaf_outside(out: Tensor, found: Sequence[Tensor]) -> Tensor | None:
    """A leaf tensor requiring grad that ``out`` depends on other than through ``found``.

    The autograd graph of ``out`` is walked back from ``out.grad_fn``, stopping at the tensors
    of ``found`` (a leaf by its ``AccumulateGrad`` node's variable, any other tensor as one
    output of its node). A leaf reached is a tensor whose gradient a backward given only
    ``found`` would lose; ``None`` when there is none.
    """
    if out.grad_fn is None:
        return None
    leaves = {id(t) for t in found if t.grad_fn is None}
    # a non-leaf tensor is one output of its node: (node, output index)
    inner = {(id(t.grad_fn), t.output_nr) for t in found if t.grad_fn is not None}
    expanded: set[int] = set()
    edges: list[tuple[object, int]] = [(out.grad_fn, out.output_nr)]
    while edges and len(expanded) < MAX_NODES:
        node, index = edges.pop()
        if node is None or (id(node), index) in inner or id(node) in expanded:
            continue
        expanded.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, Tensor):  # AccumulateGrad: a leaf requiring grad
            if id(variable) not in leaves:
                return variable
            continue
        edges.extend(getattr(node, "next_functions", ()))
    return None


def describe_tensor(t: Tensor) -> str:
    """``"a Parameter of shape (4, 8), torch.float32"``: how an error names a tensor."""
    kind = "Parameter" if isinstance(t, nn.Parameter) else "tensor"
    return f"a {kind} of shape {tuple(t.shape)}, {t.dtype}"
