"""No test function over MAX_LINES lines unless its docstring says why ("Long because ...").

A long test hides which of its steps failed and what each step needs; most split into smaller tests or
read as a list of named steps (helpers here or in support/). The few that are one session which cannot be
split say so in their docstring.
"""

import ast

from surveillance_pipeline_tests.support.paths import TESTS_ROOT

MAX_LINES = 80
REASON = "Long because"


def long_tests(source: str, name: str) -> list[str]:
    """The test functions of ``source`` over MAX_LINES lines whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES and REASON not in (ast.get_docstring(node) or ""):
                found.append(f"{name}:{node.lineno}: {node.name} ({lines} lines)")
    return found


def test_no_test_is_over_80_lines_without_a_reason():
    offenders = [
        entry
        for path in sorted(TESTS_ROOT.rglob("test_*.py"))
        for entry in long_tests(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS_ROOT)))
    ]
    assert offenders == [], f"split these, or say in the docstring why not ({REASON} ...): {offenders}"


def test_the_check_sees_a_long_test_and_accepts_its_reason():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    assert long_tests(f"def test_long():\n{body}", "t.py") == [f"t.py:1: test_long ({MAX_LINES + 1} lines)"]
    assert long_tests(f"def helper():\n{body}", "t.py") == []
    reasoned = f'def test_long():\n    """{REASON} it is one session."""\n{body}'
    assert long_tests(reasoned, "t.py") == []
