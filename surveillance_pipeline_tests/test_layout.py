"""The layout's rules, checked on the source: dependencies run one way between the top-level packages.

Read with ``ast`` (nothing is imported), so a rule broken by a new import fails here with the module and
line, before a circular import shows up as an ImportError somewhere else.
"""

import ast
from collections import defaultdict
from pathlib import Path

import surveillance_pipeline

PACKAGE_ROOT = Path(surveillance_pipeline.__file__).parent


def _imports() -> dict[str, list[tuple[str, str, int]]]:
    """Per top-level part (a subpackage or a module): (the part it imports, the importing file, line)."""
    found: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        source = relative.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "surveillance_pipeline" and len(parts) > 1 and parts[1] != source:
                    found[source].append((parts[1], str(relative), node.lineno))
    return found


def test_core_imports_no_other_part_of_the_package():
    assert _imports()["core"] == []


def test_gbif_depends_on_core_only():
    assert [entry for entry in _imports()["gbif"] if entry[0] != "core"] == []


def test_no_two_top_level_parts_import_each_other():
    imports = _imports()
    edges = {(source, target) for source, entries in imports.items() for target, _, _ in entries}
    mutual = sorted(
        (a, b, [e for e in imports[a] if e[0] == b][0][1:], [e for e in imports[b] if e[0] == a][0][1:])
        for a, b in edges
        if a < b and (b, a) in edges
    )
    assert mutual == []


def test_only_the_lab_and_the_assembly_know_the_lab():
    users = {source for source, entries in _imports().items() for target, _, _ in entries if target == "lab"}
    # resources binds the lab's GBIF client and geocoder; places defaults the region layer to the lab's.
    assert users <= {"resources", "places"}, users
