"""The layout's rules, checked on the source: the package import graph has no cycle between top-level parts,
and neither has the bench's (bench/: the runner runs the sections, a section stands on the shared helpers).

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

BENCH_ROOT = PACKAGE_ROOT.parent / "bench"
# The bench's runner: the command line (run.py, behind __main__.py) and the pipeline at size (at_size.py,
# four sections run in a row under one scorecard). Only the runner imports sections.
BENCH_RUNNER = {"__main__", "run", "at_size"}
# Programs the bench starts as processes of their own (python -m, dagster -f): they import no bench module.
BENCH_PROGRAMS = {"materialize_range", "step_windows", "trivial_definitions"}
# Every other module at bench/'s top is a section; the helpers the sections share are under bench/shared/.
BENCH_SHARED = "shared"


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


def _bench_imports(root: Path = BENCH_ROOT) -> dict[str, list[tuple[str, str, int]]]:
    """Per bench module (dotted under ``bench``: ``run``, ``shared.timing``; a package by its own name, the
    root's ``__init__`` as such): (the bench module it imports, the importing file, line)."""
    files = {path: path.relative_to(root).with_suffix("").parts for path in sorted(root.rglob("*.py"))}
    modules = {
        ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)
        for parts in files.values()
    }

    def resolved(name: str) -> str:
        """A dotted name under bench as the module it names: ``bench`` alone is the root's __init__."""
        return name.removeprefix("bench").removeprefix(".") or "__init__"

    found: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for path, parts in files.items():
        source = ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)
        package = ["bench", *parts[:-1]]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                # Relative imports resolve against the importing file's package.
                base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
                module = ".".join(part for part in (base, node.module or "") if part)
                if module != "bench" and not module.startswith("bench."):
                    continue
                for alias in node.names:
                    # ``from bench import x`` imports the module x when there is one, else a name of bench.
                    submodule = resolved(f"{module}.{alias.name}")
                    targets.append(submodule if submodule in modules else resolved(module))
            elif isinstance(node, ast.Import):
                targets = [
                    resolved(a.name) for a in node.names if a.name == "bench" or a.name.startswith("bench.")
                ]
            for target in targets:
                if target != source:
                    found[source].append((target, str(path.relative_to(root.parent)), node.lineno))
    for module in modules:
        found.setdefault(module, [])
    return dict(found)


def _bench_layer(module: str) -> str:
    if module.split(".")[0] == BENCH_SHARED:
        return "shared"
    if module in BENCH_RUNNER:
        return "runner"
    if module in BENCH_PROGRAMS:
        return "program"
    return "package" if module == "__init__" else "section"


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


def _bench_cycles(imports: dict[str, list[tuple[str, str, int]]]) -> list[list[str]]:
    return _cycles({source: {entry[0] for entry in entries} for source, entries in imports.items()})


def test_no_cycle_between_bench_modules():
    imports = _bench_imports()
    cycles = _bench_cycles(imports)
    where = [
        (source, entry)
        for cycle in cycles
        for source in cycle
        for entry in imports[source]
        if entry[0] in cycle
    ]
    assert cycles == [], where


def test_the_bench_loop_check_finds_a_loop(tmp_path):
    """The check above can fail: a runner that a section imports back is found, with every module in it."""
    bench = tmp_path / "bench"
    (bench / "shared").mkdir(parents=True)
    (bench / "__init__.py").write_text('"""A bench."""\n')
    (bench / "shared" / "__init__.py").write_text("")
    (bench / "shared" / "timing.py").write_text("import time\n")
    (bench / "run.py").write_text("from bench import derive\nfrom bench.shared.timing import time\n")
    (bench / "derive.py").write_text("from bench.downloads import limit\n")
    (bench / "downloads.py").write_text("def limit():\n    from bench.run import main\n")
    imports = _bench_imports(bench)
    assert _bench_cycles(imports) == [["derive", "downloads", "run"]]
    assert ("shared.timing", "bench/run.py", 2) in imports["run"]


def test_bench_sections_stand_on_the_shared_helpers_only():
    """The runner runs sections and may import anything in bench/; a section imports only bench/shared/;
    a shared helper only other helpers; a program started as a process of its own, no bench module."""
    allowed = {
        "runner": {"runner", "section", "shared"},
        "section": {"shared"},
        "shared": {"shared"},
        "program": set(),
        "package": set(),
    }
    offenders = [
        (source, entry)
        for source, entries in _bench_imports().items()
        for entry in entries
        if _bench_layer(entry[0]) not in allowed[_bench_layer(source)]
    ]
    assert offenders == []


def test_the_bench_packages_import_nothing():
    """``python -m bench.masking`` imports bench/__init__.py before it starts its clock: nothing there."""
    for init in (BENCH_ROOT / "__init__.py", *BENCH_ROOT.glob("*/__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)] == [], init
