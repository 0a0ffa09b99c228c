"""Where each key of a YAML document sits, so an error can name the line as well as the path.

PyYAML's composed node tree keeps every node's position; walking it once gives a map from our
error paths (``plugins[2].parameters.blockSize``, ``mmgate.port``) to 1-based line numbers.
The data itself is still loaded by ``yaml.safe_load``; this is only a side table.
"""

from __future__ import annotations

import re

import yaml

_LAST_STEP = re.compile(r"(\.[^.\[]*|\[\d+\])$")


def key_lines(text: str) -> dict[str, int]:
    """Path → line of every mapping key and sequence item (empty if the text is not YAML)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    if root is not None:
        _walk(root, "", lines, set())
    return lines


def _walk(node: yaml.Node, path: str, lines: dict[str, int], active: set[int]) -> None:
    if id(node) in active:  # an alias of an enclosing node: YAML allows the cycle, we stop
        return
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            step = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            child = f"{path}.{step}" if path else step
            lines.setdefault(child, key.start_mark.line + 1)
            _walk(value, child, lines, active)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = f"{path}[{i}]"
            lines.setdefault(child, item.start_mark.line + 1)
            _walk(item, child, lines, active)
    active.discard(id(node))


def line_of(lines: dict[str, int], path: str) -> int | None:
    """The line of ``path``, or of its nearest ancestor the file gives (an unknown key's parent
    for a missing key); ``None`` when the path is not in the file at all."""
    while path:
        if path in lines:
            return lines[path]
        trimmed = _LAST_STEP.sub("", path)
        if trimmed == path:
            break
        path = trimmed
    return None
