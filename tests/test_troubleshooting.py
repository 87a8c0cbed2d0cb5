"""docs/troubleshooting.md lists every error message the package can raise, and only those: each
message built where an ``EosKafkaError`` is raised has a row whose quoted start is a prefix of it,
each quoted message in the tables is the start of a message the code builds, and every error class
is named. A new error without a row, or a reworded one, fails here."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from pyspark_eos import errors

PROJECT_ROOT = Path(__file__).resolve().parent.parent

PACKAGE = PROJECT_ROOT / "pyspark_eos"
PAGE = PROJECT_ROOT / "docs" / "troubleshooting.md"
ERROR_CLASSES = {name for name, value in vars(errors).items()
                 if isinstance(value, type) and issubclass(value, errors.EosKafkaError)}
HOLE = "{}"


def _template(node: ast.expr) -> str | None:
    """A string expression with its placeholders as ``{}``; None when it is not a string literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    return None


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _raised_messages() -> dict[str, str]:
    """Message templates passed to an error class, by where (file:line); those that start with a
    placeholder (a message assembled elsewhere, e.g. a task's context) are left out."""
    found = {}
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ERROR_CLASSES and node.args:
                template = _template(node.args[0])
                if template is not None and not template.startswith(HOLE):
                    found[f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}"] = _normal(template)
    return found


def _all_string_templates() -> set[str]:
    return {_normal(t) for _, tree in _modules() for node in ast.walk(tree)
            if (t := _template(node)) is not None and len(t) > 8}


def _documented_messages() -> list[str]:
    """The backquoted messages of the first column of the page's tables, ``<...>`` as ``{}``."""
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("| `")]
    quoted = [m for row in rows for m in re.findall(r"`([^`]+)`", row.split(" | ")[0]) if m not in ERROR_CLASSES]
    return [_normal(re.sub(r"<[^<>]+>", HOLE, m)) for m in quoted]


def _is_start_of(documented: str, template: str) -> bool:
    # The page writes a placeholder where the code has a literal chosen at run time, e.g. "<source or sink>";
    # a quoted part that starts with punctuation is the end of a message assembled in steps.
    if documented[:1] in ".,;:":
        return documented in template
    pattern = "".join(".*?" if part == HOLE else re.escape(part) for part in re.split(r"(\{\})", documented))
    return re.match(pattern, template) is not None


def test_every_raised_message_has_a_row():
    documented = _documented_messages()
    missing = {where: template for where, template in _raised_messages().items()
               if not any(_is_start_of(d, template) for d in documented)}
    assert not missing, "add rows to docs/troubleshooting.md for:\n" + "\n".join(f"{w}: {t}" for w, t in missing.items())


def test_every_row_is_a_message_the_code_builds():
    templates = _all_string_templates()
    stale = [d for d in _documented_messages() if not any(_is_start_of(d, t) for t in templates)]
    assert not stale, f"rows of docs/troubleshooting.md no code builds: {stale}"


def test_every_error_class_is_named():
    page = PAGE.read_text()
    assert not [name for name in ERROR_CLASSES if f"`{name}`" not in page]
