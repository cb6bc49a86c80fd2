"""fem3d's groups use only the groups below them (fem3d/__init__.py lists them in order):
kernels, discretisation, parallel, solvers, problems, commands, then the programs."""

import ast
import os

import pytest

FEM3D = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fem3d")
ORDER = ["kernels", "discretisation", "parallel", "solvers", "problems", "commands"]


def imported_groups(path: str, group: str) -> set:
    """The fem3d groups (or "programs" for fem3d.cavity and its like) that the module at
    ``path`` in ``group`` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # inside a group: "." is the group itself, ".." the package
                parts = ([group] if node.level == 1 else []) + (
                    node.module.split(".") if node.module else [a.name for a in node.names]
                )
            elif node.module and node.module.startswith("fem3d."):
                parts = node.module.split(".")[1:]
            else:
                continue
            found.add(parts[0] if parts[0] in ORDER else "programs")
    return found


@pytest.mark.parametrize("group", ORDER)
def test_each_group_imports_only_those_below_it(group):
    allowed = set(ORDER[: ORDER.index(group) + 1])
    folder = os.path.join(FEM3D, group)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            extra = imported_groups(os.path.join(folder, name), group) - allowed
            assert not extra, f"fem3d/{group}/{name} imports {sorted(extra)}"
