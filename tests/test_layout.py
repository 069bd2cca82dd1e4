"""The layout of oar/: imports go one way, down the layers, and nothing in oar/ imports Snakemake.

Lowest layer first: cpu_kernels (imported by oar/__init__.py, before torch), files, sdpa_kernels, config_error ->
grading, prompting -> method -> data, models -> evaluation -> training -> analysis -> studies -> experiment (the
run registry) -> planning (the GPU-hour and memory planner) -> bench. A module imports only from its own unit (a
subpackage, or the top-level module itself) or from a lower layer; two units of one layer (data and models) do
not import each other; and no two modules import each other, directly or round a longer loop, not even inside
one unit. Every import statement counts, the ones inside functions too, read from the source (nothing is
imported here).
"""

import ast
from pathlib import Path

import pytest

OAR = Path(__file__).resolve().parents[1] / "oar"
LAYERS = [("cpu_kernels", "files", "sdpa_kernels", "config_error"), ("grading", "prompting"), ("method",),
          ("data", "models"), ("evaluation",), ("training",), ("analysis",), ("studies",), ("experiment",),
          ("planning",), ("bench",)]
LAYER_OF = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path, package: Path = OAR) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = OAR) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def unit(module: str) -> str | None:
    """The layer unit of a dotted name under oar (``oar.method.gate`` -> ``method``); None for ``oar`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imported(module: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, dotted name) of everything the source imports, at any depth; ``from a import b`` gives
    ``a.b`` (b may be a module), relative imports resolved against ``module``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def layer_violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """'line: name (why)' for each import of ``module`` that goes up a layer or across to a sibling unit."""
    own = unit(module)
    found = []
    for line, name in imported(module, source, is_package):
        if name.split(".")[0] != "oar" or own is None:
            continue
        other = unit(name)
        if other is None or other == own or other not in LAYER_OF:
            continue  # `import oar`, its own unit, or `from oar import X` of an unknown X (reported elsewhere)
        if LAYER_OF[other] >= LAYER_OF[own]:
            where = "a higher layer" if LAYER_OF[other] > LAYER_OF[own] else "another unit of its own layer"
            found.append(f"{line}: imports {name} ({where}: {other} over {own})")
    return found


def import_graph(package: Path = OAR) -> dict[str, dict[str, int]]:
    """module -> {module of the same package it imports: the line of the first such import}. ``from a import
    b`` imports module ``a.b`` where there is one, else module ``a`` (b is a name defined in it)."""
    found = modules(package)
    graph: dict[str, dict[str, int]] = {name: {} for name in found}
    for name, path in found.items():
        for line, target in imported(name, path.read_text(), path.name == "__init__.py"):
            parts = target.split(".")
            while parts and ".".join(parts) not in found:
                parts.pop()
            other = ".".join(parts)
            if other and other != name:
                graph[name].setdefault(other, line)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles of ``graph``: each set of two or more modules that import one another round a loop
    (a strongly connected component, by Tarjan's algorithm), sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in graph[module]:
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:  # the root of a component: pop it
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in order:
            visit(module)
    return sorted(cycles)


def cycle_report(graph: dict[str, dict[str, int]]) -> list[str]:
    """One line per import cycle, naming each import inside it with its line."""
    return ["; ".join(f"{a} imports {b} (line {graph[a][b]})" for a in cycle for b in graph[a] if b in cycle)
            for cycle in import_cycles(graph)]


def test_every_module_belongs_to_a_layer():
    loose = [str(p.relative_to(OAR.parent)) for name, p in modules().items()
             if name != "oar" and unit(name) not in LAYER_OF]
    assert not loose, (f"modules outside every layer: {loose}; put each into a subpackage of "
                       f"{sorted(LAYER_OF)} or add its unit to LAYERS in tests/test_layout.py")


def test_imports_go_down_the_layers():
    found = [f"{path.relative_to(OAR.parent)}:{v}" for name, path in modules().items()
             for v in layer_violations(name, path.read_text(), path.name == "__init__.py")]
    assert not found, "imports against the layering (" + " -> ".join("/".join(u) for u in LAYERS) + "):\n" + \
        "\n".join(found)


def test_no_import_cycle():
    """A cycle is what the layering cannot see inside one unit: two modules that each need the other, so
    neither can be read, tested or moved alone (and one of them imports only half-built at run time)."""
    found = cycle_report(import_graph())
    assert not found, "import cycles in oar/ (move what both need down, or into its own module):\n" + "\n".join(found)


def test_the_cycle_check_finds_a_planted_cycle(tmp_path):
    """Two files of a synthetic package that import each other (one inside a function, one relative) are a
    cycle; a third that imports one of them is not in it, and the tree without the back edge has none."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package."""\n')
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from .a import name\n")
    (package / "c.py").write_text("import pkg.a\n")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.b": 1} and graph["pkg.b"] == {"pkg.a": 2}
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]
    assert cycle_report(graph) == ["pkg.a imports pkg.b (line 1); pkg.b imports pkg.a (line 2)"]
    (package / "b.py").write_text("def f():\n    return 1\n")
    assert import_cycles(import_graph(package)) == []


def test_no_module_imports_snakemake():
    found = [f"{path.relative_to(OAR.parent)}:{line}: imports {name}" for mod, path in modules().items()
             for line, name in imported(mod, path.read_text(), path.name == "__init__.py")
             if name.split(".")[0] == "snakemake"]
    assert not found, "oar/ must not import Snakemake (workflow_scripts/ is the glue):\n" + "\n".join(found)


@pytest.mark.parametrize("package", sorted({unit(m) for m in modules() if unit(m) in LAYER_OF
                                           and (OAR / unit(m)).is_dir()}))
def test_subpackage_init_holds_only_its_docstring(package):
    """No re-exports: importing ``oar.method`` loads nothing else, so a subpackage cannot start a cycle."""
    body = ast.parse((OAR / package / "__init__.py").read_text()).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), \
        f"oar/{package}/__init__.py should hold only a docstring"


@pytest.mark.parametrize("module, source, expected", [
    ("oar.method.gate", "def f():\n    from oar.experiment.runs import Registry\n",
     ["2: imports oar.experiment.runs.Registry"]),
    ("oar.data.datasets", "from oar import training\n", ["1: imports oar.training"]),
    ("oar.data.datasets", "import oar.models.tiny\n", ["1: imports oar.models.tiny"]),
    ("oar.method.gate", "from ..training import run\n", ["1: imports oar.training.run"]),
    ("oar.models.sources", "from . import tiny\nfrom oar.method import gate\nfrom oar.grading import grade\n", []),
    ("oar.experiment.runs", "import oar\nfrom oar.analysis import tables\nimport torch\n", []),
])
def test_the_check_finds_upward_imports(module, source, expected):
    assert [v.split(" (")[0] for v in layer_violations(module, source)] == expected


def test_no_source_file_is_git_ignored():
    """A fresh clone holds every source file: an ignore pattern meant for downloaded models once matched
    ``oar/models/`` and left its ``__init__.py`` out of a commit."""
    import shutil
    import subprocess

    root = OAR.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    sources = [str(p.relative_to(root)) for d in ("oar", "workflow_scripts", "rules", "tests", "perf", "config")
               for p in (root / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], input="\n".join(sources),
                             cwd=root, capture_output=True, text=True).stdout.split()
    assert not ignored, f"git ignores these source files: {ignored}"
