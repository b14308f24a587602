"""``ak.attention`` spells its keyword signature out for users; ``prepare`` validates it. The two
must not drift apart (a keyword added to one only would be silently dropped or refused)."""

import inspect

import attnkit as ak
from attnkit.core.call import prepare


def test_attention_and_prepare_take_the_same_arguments_with_the_same_defaults():
    public = dict(inspect.signature(ak.attention).parameters)
    public.pop("backend")  # chosen by the engine, not part of the call
    validated = dict(inspect.signature(prepare).parameters)
    validated.pop("scan_finite")  # for the efficient kinds, which call prepare directly
    assert list(public) == list(validated)
    for name, parameter in public.items():
        assert parameter.kind == validated[name].kind, name
        assert parameter.default == validated[name].default, name
