"""The folder tree is the architecture: each subpackage of autotune is a floor, and a module
imports only from its own floor or the floors below (README, "Architecture"). Imports inside
functions count too: a lazy import is still a dependency. No module imports another in a
cycle."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "autotune"

# Which subpackages each subpackage may import (besides itself). The top-level modules
# (cli, tune, show, report, the public paths) are the faces and may import anything; no
# subpackage may import a face.
MAY_IMPORT = {
    "system": set(),
    "train": {"system"},
    "models": {"train"},
    "trial": {"system", "train"},
    "store": {"system", "train"},
    "scoring": {"train"},
    "search": {"system", "train", "trial", "store", "scoring"},
    "study": {"system", "train", "trial", "store", "scoring", "search"},
    "results": {"system", "train", "trial", "store", "scoring", "search", "study"},
}


def _modules() -> dict:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def import_graph() -> dict:
    """module -> the autotune modules it imports (a package's name when it imports the package)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module == "autotune" or module.startswith("autotune."):
                    for alias in node.names:
                        sub = f"{module}.{alias.name}"
                        deps.add(sub if sub in mods else module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] == "autotune")
        graph[name] = deps - {name}
    return graph


def _floor(module: str):
    """The subpackage a module lives in, or None for a face (a top-level module)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in MAY_IMPORT) else None


def test_every_subpackage_has_a_rule():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(MAY_IMPORT), "a new subpackage needs its line in MAY_IMPORT (and the README's map)"


def layering_violations(graph: dict) -> list:
    wrong = []
    for module, deps in graph.items():
        floor = _floor(module)
        if floor is None:
            continue
        for dep in deps:
            target = _floor(dep)
            if target == floor:
                continue
            if target is None or target not in MAY_IMPORT[floor]:
                wrong.append(f"{module} imports {dep}")
    return sorted(wrong)


def find_cycles(graph: dict) -> list:
    # a package's __init__ that imports its own modules is not a cycle with them
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep.startswith(node + "."):
                continue
            if state.get(dep) == "open":
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_subpackage_imports_a_higher_floor_or_a_face():
    wrong = layering_violations(import_graph())
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_no_import_cycle():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checks_catch_what_they_are_for():
    """Neither check is vacuous: each flags a planted fault, and the real graph holds the
    arrows they judge, lazy imports included."""
    assert find_cycles({"autotune.cli": {"autotune.run"}, "autotune.run": {"autotune.results.review"},
                        "autotune.results.review": {"autotune.cli"}})
    assert layering_violations({"autotune.train.strategy": {"autotune.study.plan"}}) == [
        "autotune.train.strategy imports autotune.study.plan"]
    assert layering_violations({"autotune.results.review": {"autotune.cli"}})  # a face
    graph = import_graph()
    assert "autotune.train.dimensions" in graph["autotune.scoring.score"]
    assert "autotune.study.config" in graph["autotune.results.review"]  # a lazy import, inside a function
    assert _floor("autotune.run") is None and _floor("autotune.study.driver") == "study"


def test_linux_only_calls_live_in_one_module():
    """/proc, prctl, mallopt, flock and CPU affinity are in system/linux.py alone, so a port
    to another OS has one file to read."""
    import re

    linux_only = re.compile(r"""open\(f?["']/proc|\.prctl\(|\.mallopt\(|fcntl\.|sched_getaffinity""")
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in ROOT.rglob("*.py") if p.name != "linux.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if linux_only.search(line)]
    assert not offenders, offenders
    assert linux_only.search('with open("/proc/self/statm") as f:')  # the pattern sees what it is for
