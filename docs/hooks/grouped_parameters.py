"""Griffe extension: ``q, k, v: [B, H, N, d]`` in a Google-style ``Args:`` section documents
each of ``q``, ``k`` and ``v``.

attnkit's docstrings describe parameters that share a shape or a meaning on one line (the
survey's ``q, k, v``; torch's ``device, dtype``). Google style has one name per entry, so griffe
would read ``q, k, v`` as one unknown parameter (a warning, which fails the strict build) and the
reference would lose the three real ones. This extension rewrites such an entry, before griffe
parses the docstring, into one entry per name with the same type and description; every name is
then still checked against the signature, so a renamed parameter still fails the build.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: section titles whose entries are parameters (griffe's Google parser accepts these)
_SECTIONS = re.compile(
    r"^(Args|Arguments|Params|Parameters|Keyword Args|Keyword Arguments|Other Parameters):\s*$"
)
_GROUPED = re.compile(
    r"^(?P<indent>\s+)(?P<names>\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)+)(?P<type>\s*\([^)]*\))?:(?P<rest>.*)$"
)


def split_grouped_parameters(text: str) -> str:
    """The docstring ``text`` with every grouped entry of a parameter section split per name."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        title = _SECTIONS.match(line.strip())
        if title is None:
            continue
        section_indent = _indent(line)
        while i < len(lines):
            entry = lines[i]
            if not entry.strip():
                out.append(entry)
                i += 1
                continue
            indent = _indent(entry)
            if indent <= section_indent:
                break  # the section ended
            # the entry's continuation lines: blank, or indented deeper than the entry
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1  # trailing blank lines belong to the section, not the entry
            grouped = _GROUPED.match(entry)
            if grouped is None:
                out.extend(lines[i:j])
            else:
                names = [name.strip() for name in grouped["names"].split(",")]
                for name in names:
                    out.append(
                        f"{grouped['indent']}{name}{grouped['type'] or ''}:{grouped['rest']}"
                    )
                    out.extend(lines[i + 1 : j])
            i = j
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


class GroupedParameters(griffe.Extension):
    """Split grouped Google-style parameter entries of every loaded object's docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = split_grouped_parameters(obj.docstring.value)
