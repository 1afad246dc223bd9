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


#: fixtures pytest and the plugins this suite uses provide (pytest-benchmark's `benchmark`)
BUILTIN_FIXTURES = {"request", "tmp_path", "tmp_path_factory", "tmpdir", "tmpdir_factory", "monkeypatch", "capsys",
                    "capfd", "capsysbinary", "capfdbinary", "caplog", "recwarn", "pytestconfig", "record_property",
                    "record_testsuite_property", "cache", "doctest_namespace", "benchmark", "worker_id", "testrun_uid"}


def _fixture_names(path: Path) -> set[str]:
    """The fixtures a module defines (functions decorated with pytest.fixture, or assigned at module level), the names
    it imports (a fixture may be imported) and the names its pytest_generate_tests parametrizes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if (isinstance(target, ast.Attribute) and target.attr == "fixture") or \
                        (isinstance(target, ast.Name) and target.id == "fixture"):
                    names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):  # e.g. `kernels = interpreted_fixture("rmsnorm")`
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for call in ast.walk(tree):  # pytest_generate_tests: metafunc.parametrize("impl", ...)
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "parametrize"
                and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
            names.update(n.strip() for n in call.args[0].value.split(","))
    return names


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_every_argument_of_a_test_is_a_fixture_it_can_find(path):
    """A test's arguments are its parametrized names or fixtures from its module, a conftest.py on its path or pytest.
    pytest reports a missing fixture only when it sets the test up, and GPU tests are never set up here: a fixture
    moved to a conftest that the test cannot see would surface only on the lent GPU."""
    known = set(BUILTIN_FIXTURES) | _fixture_names(path)
    folder = path.parent
    while True:
        if (folder / "conftest.py").exists():
            known |= _fixture_names(folder / "conftest.py")
        if folder == TESTS:
            break
        folder = folder.parent
    wrong = []
    for fn in _functions(path):
        given = any(isinstance(d, ast.Call) and getattr(d.func, "id", getattr(d.func, "attr", "")) == "given"
                    for d in fn.decorator_list)  # hypothesis supplies those arguments
        if not fn.name.startswith("test") or given:
            continue
        args = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        missing = args - _parametrized_names(fn) - known
        if missing:
            wrong.append(f"{fn.name} (line {fn.lineno}): {sorted(missing)}")
    assert not wrong, f"{path.name}: arguments no fixture provides: {wrong}"
