"""No function in autotune/ is longer than a screen: 60 lines, its docstring included."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "autotune"
LIMIT = 60


def long_functions(root: Path = ROOT, limit: int = LIMIT) -> list:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_no_function_in_autotune_exceeds_a_screen(tmp_path):
    assert long_functions() == []
    (tmp_path / "long.py").write_text("def f():\n" + "    x = 1\n" * LIMIT)  # the check finds what it is for
    assert long_functions(tmp_path) == [f"{tmp_path.name}/long.py:1 f: {LIMIT + 1} lines"]
