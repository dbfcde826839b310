"""The layout's rules, checked on the source: the package import graph has no cycle between top-level parts.

Read with ``ast`` (nothing is imported), so a rule broken by a new import fails here with the module and
line, before a circular import shows up as an ImportError somewhere else. The package root reads as the
architecture, and docs/development.md's layout names every part of it.
"""

import ast
import re
from collections import defaultdict
from pathlib import Path

import surveillance_pipeline

PACKAGE_ROOT = Path(surveillance_pipeline.__file__).parent
DEVELOPMENT_DOC = PACKAGE_ROOT.parent / "docs" / "development.md"

DOMAINS = {"occurrences", "quality", "places", "samples", "snapshots", "ledger", "releases"}
# Clients of outside services over core only (GBIF, a geocoder): what every layer may build on.
CLIENTS = {"gbif", "geocoding"}
# The package root: the core, the clients, the domains, the lab, the Dagster plumbing, the plan (read
# across the domains), the code location (definitions.py) and the commands above it.
ROOT = {"core", *CLIENTS, *DOMAINS, "lab", "orchestration", "planning", "definitions", "commands", "__init__"}


def _imports() -> dict[str, list[tuple[str, str, str, int]]]:
    """Per top-level part: (the part it imports, the module imported, the importing file, line)."""
    found: dict[str, list[tuple[str, str, str, int]]] = defaultdict(list)
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        source = relative.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                # ``from surveillance_pipeline import x`` imports the part x.
                if node.module == "surveillance_pipeline":
                    names = [f"surveillance_pipeline.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "surveillance_pipeline" and len(parts) > 1 and parts[1] != source:
                    found[source].append((parts[1], name, str(relative), node.lineno))
    return found


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one part (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for neighbour in sorted(edges.get(node, ())):
            if neighbour not in index:
                visit(neighbour)
                low[node] = min(low[node], low[neighbour])
            elif neighbour in stack:
                low[node] = min(low[node], index[neighbour])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(set(edges) | {n for targets in edges.values() for n in targets}):
        if node not in index:
            visit(node)
    return components


def test_no_cycle_between_top_level_parts():
    imports = _imports()
    edges = {source: {entry[0] for entry in entries} for source, entries in imports.items()}
    cycles = _cycles(edges)
    where = [
        (source, entry)
        for cycle in cycles
        for source in cycle
        for entry in imports[source]
        if entry[0] in cycle
    ]
    assert cycles == [], where


def test_the_package_root_reads_as_the_architecture():
    entries = {
        path.name.removesuffix(".py")
        for path in PACKAGE_ROOT.iterdir()
        if path.name != "__pycache__" and (path.suffix == ".py" or path.is_dir())
    }
    assert entries == ROOT


def test_core_imports_no_other_part_and_the_clients_only_core():
    imports = _imports()
    assert imports["core"] == []
    for client in CLIENTS:
        assert [entry for entry in imports[client] if entry[0] != "core"] == [], client


def test_the_plumbing_imports_only_core_and_the_clients():
    imports = _imports()
    assert [entry for entry in imports["orchestration"] if entry[0] not in {"core", *CLIENTS}] == []


def test_no_domain_imports_another_domains_assets():
    offenders = [
        (source, entry)
        for source in DOMAINS
        for entry in _imports()[source]
        if entry[0] in DOMAINS and entry[1].split(".")[2:3] == ["assets"]
    ]
    assert offenders == []


def test_only_the_assembly_and_the_commands_know_the_lab():
    users = {source for source, entries in _imports().items() for entry in entries if entry[0] == "lab"}
    # definitions binds the lab's resources and region layer; commands/run.py writes the lab's inputs.
    assert users <= {"definitions", "commands"}, users


def test_the_development_doc_names_every_part_of_the_package():
    layout = DEVELOPMENT_DOC.read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    # The product's lines only: the tests' folders below them are named like the product's parts.
    layout = layout.split("\nsurveillance_pipeline_tests/", 1)[0]
    missing = [
        part
        for part in sorted(ROOT - {"__init__"})
        if not re.search(rf"(^|\s){part}(/|\.py)", layout, flags=re.MULTILINE)
    ]
    assert missing == [], f"docs/development.md's layout does not name {missing}"
