# SPDX-License-Identifier: MIT
"""The installed package carries its type information: py.typed and the
nanobind-generated stub of the extension (qg/_qg.pyi)."""
from __future__ import annotations

import ast
import os

import qg
from qg import _qg

PKG = os.path.dirname(qg.__file__)


def test_py_typed_installed():
    assert os.path.isfile(os.path.join(PKG, "py.typed")), sorted(os.listdir(PKG))


def test_extension_stub_installed_and_complete():
    path = os.path.join(PKG, "_qg.pyi")
    assert os.path.isfile(path), sorted(os.listdir(PKG))
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    declared |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign) for t in [n.target]
                 if isinstance(t, ast.Name)}
    declared |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    public = {name for name in dir(_qg) if not name.startswith("_")}
    assert public <= declared, f"not in _qg.pyi: {sorted(public - declared)}"
    # signatures carry argument names and types
    fast = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fast_gemm")
    assert [a.arg for a in fast.args.args][:3] == ["a", "b", "a_fmt"]
    assert all(a.annotation is not None for a in fast.args.args)
