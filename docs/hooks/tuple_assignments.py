"""Griffe extension: ``PAD, UNK, BOS, EOS = 0, 1, 2, 3`` at module level defines four attributes.

Griffe skips assignments to a tuple of names, so a constant defined that way (and re-exported in
an ``__all__``, as ``attnkit.data.BOS`` is) would be missing from the reference. This extension
adds one module attribute per name, with its value when the right-hand side is a tuple of the
same length.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


class TupleAssignments(griffe.Extension):
    """Module attributes for the names of ``a, b = x, y`` assignments."""

    def on_attribute_node(
        self, *, node: ast.AST | griffe.ObjectNode, agent: Any, **kwargs: Any
    ) -> None:
        module = agent.current
        if not isinstance(node, ast.Assign) or module.kind is not griffe.Kind.MODULE:
            return
        for target in node.targets:
            if not isinstance(target, ast.Tuple):
                continue
            if not all(isinstance(element, ast.Name) for element in target.elts):
                continue
            values: list[ast.expr | None] = [None] * len(target.elts)
            if isinstance(node.value, ast.Tuple) and len(node.value.elts) == len(target.elts):
                values = list(node.value.elts)
            for element, value in zip(target.elts, values, strict=True):
                attribute = griffe.Attribute(
                    name=element.id,
                    value=griffe.safe_get_expression(value, parent=module) if value else None,
                    lineno=node.lineno,
                    endlineno=node.end_lineno,
                    runtime=not agent.type_guarded,
                    analysis="static",
                )
                attribute.labels.add("module-attribute")
                module.set_member(element.id, attribute)
