"""The test files themselves, read as source: mistakes that only a GPU run would otherwise reveal.

The GPU tests are skipped here (no CUDA in CI), so a broken decorator in one of them surfaces only on the lent
GPU, after device time has been spent. Session 14 lost a test that way: a `parametrize("forms", ...)` slid onto a
helper above it, and the test asked pytest for a fixture "forms" that did not exist.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
FILES = sorted(TESTS.rglob("test_*.py"))


def _marks(fn: ast.FunctionDef) -> list[str]:
    """The names of the pytest marks decorating fn ('parametrize', 'gpu', ...)."""
    out = []
    for dec in fn.decorator_list:
        node = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
            out.append(node.attr)
    return out


def _parametrized_names(fn: ast.FunctionDef) -> set[str]:
    """The argument names fn's parametrize decorators supply."""
    names: set[str] = set()
    for dec in fn.decorator_list:
        if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr == "parametrize"
                and dec.args and isinstance(dec.args[0], ast.Constant) and isinstance(dec.args[0].value, str)):
            names.update(n.strip() for n in dec.args[0].value.split(","))
    return names


def _functions(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def test_there_are_test_files_to_read():
    assert len(FILES) > 50, f"found only {len(FILES)} test files under {TESTS}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_helper_carries_a_parametrize_meant_for_a_test(path):
    """A module-level function that pytest does not collect must not be parametrized: the mark was meant for the
    test below it, which then asks for a fixture of that name."""
    stray = [f"{fn.name} (line {fn.lineno})" for fn in _functions(path)
             if not fn.name.startswith("test") and "parametrize" in _marks(fn)]
    assert not stray, f"{path.name}: parametrize on functions pytest never collects: {stray}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_every_parametrized_name_is_an_argument_of_its_test(path):
    """parametrize("a,b", ...) on a test without argument a is an error pytest reports only when it runs the test
    (for a GPU test: on the GPU)."""
    wrong = []
    for fn in _functions(path):
        args = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        missing = _parametrized_names(fn) - args
        if fn.name.startswith("test") and missing:
            wrong.append(f"{fn.name} (line {fn.lineno}): {sorted(missing)}")
    assert not wrong, f"{path.name}: parametrized names that are no argument: {wrong}"
