"""cism/_lib.py must declare every CISM_API function of cism.h, in header
order, with argument and return types that match the prototypes. Other
engineers add API; this keeps the binding honest."""
from __future__ import annotations

import ctypes
import os
import re

import pytest

from conftest import ROOT

HEADER = os.path.join(ROOT, "libcism", "include", "cism.h")


def _strip(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("#"))


def parse_header():
    src = _strip(open(HEADER, encoding="utf-8").read())
    typedefs = {}
    for m in re.finditer(r"typedef\s+([A-Za-z_][\w\s]*?)\s+(\w+)\s*;", src):
        typedefs[m.group(2)] = m.group(1).strip()
    for m in re.finditer(r"typedef\s+[^;]*?\(\s*\*\s*(\w+)\s*\)\s*\(", src):
        typedefs[m.group(1)] = "fnptr"
    funcs = []
    for m in re.finditer(r"CISM_API\s+([^;(]*?)\s*\(([^)]*)\)\s*;", src, flags=re.S):
        head, args = " ".join(m.group(1).split()), " ".join(m.group(2).split())
        name = re.search(r"(\w+)$", head).group(1)
        ret = head[: -len(name)].strip()
        params = [] if args in ("", "void") else [a.strip() for a in args.split(",")]
        funcs.append((name, ret, params))
    return funcs, typedefs


def c_kind(decl: str, typedefs, is_param: bool) -> str:
    """'void', 'i32', 'i64', 'u32', 'f64', 'f32', 'char*', 'ptr' or 'fnptr' of a C type (with optional name)."""
    t = decl.replace("const", " ")
    if is_param and "*" not in t and len(t.split()) > 1:
        t = " ".join(t.split()[:-1])  # drop the parameter name
    elif is_param and "*" in t:
        t = t[: t.rindex("*") + 1]
    t = " ".join(t.split())
    if "*" in t:
        return "char*" if t.replace(" ", "") == "char*" else "ptr"
    seen = set()
    while t in typedefs and t not in seen:
        seen.add(t)
        t = typedefs[t]
    return {"void": "void", "int32_t": "i32", "int64_t": "i64", "uint32_t": "u32", "double": "f64", "float": "f32",
            "size_t": "size", "fnptr": "fnptr"}.get(t, f"unknown:{t}")


def py_kind(t) -> str:
    if t is None:
        return "void"
    if t is ctypes.c_char_p:
        return "char*"
    if t is ctypes.c_void_p or (isinstance(t, type) and issubclass(t, ctypes._Pointer)):
        return "ptr"
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
        return "fnptr"
    if t is ctypes.c_size_t:
        return "size"
    for ct, k in ((ctypes.c_int32, "i32"), (ctypes.c_int64, "i64"), (ctypes.c_uint32, "u32"),
                  (ctypes.c_double, "f64"), (ctypes.c_float, "f32")):
        if t is ct:
            return k
    return f"unknown:{t}"


def test_header_parses():
    funcs, _ = parse_header()
    names = [f[0] for f in funcs]
    assert len(funcs) >= 40, names
    assert "cism_generate" in names and "cism_model_load" in names


def test_every_function_declared_in_header_order():
    from cism import _lib
    funcs, _ = parse_header()
    header_names = [f[0] for f in funcs]
    missing = [n for n in header_names if n not in _lib.DECLARED]
    assert not missing, f"cism.h functions without a declaration in cism/_lib.py: {missing}"
    extra = [n for n in _lib.DECLARED if n not in header_names]
    assert not extra, f"cism/_lib.py declares functions that cism.h does not have: {extra}"
    assert list(_lib.DECLARED) == header_names, "cism/_lib.py must declare the functions in cism.h order"


@pytest.mark.parametrize("name,ret,params", parse_header()[0], ids=lambda v: v if isinstance(v, str) else None)
def test_declaration_matches_prototype(name, ret, params):
    from cism import _lib
    _, typedefs = parse_header()
    if name not in _lib.DECLARED:
        pytest.fail(f"{name} is not declared in cism/_lib.py")
    restype, argtypes = _lib.DECLARED[name]
    assert py_kind(restype) == c_kind(ret, typedefs, False), f"{name}: return type {restype} vs C '{ret}'"
    assert len(argtypes) == len(params), f"{name}: {len(argtypes)} argtypes, C has {len(params)} parameters"
    for i, (a, p) in enumerate(zip(argtypes, params)):
        assert py_kind(a) == c_kind(p, typedefs, True), f"{name}: argument {i} is {a}, C has '{p}'"


def test_abi_checked_and_versions_agree():
    import cism
    from cism import _lib
    src = open(HEADER, encoding="utf-8").read()
    abi = int(re.search(r"#define CISM_ABI_VERSION (\d+)", src).group(1))
    ver = ".".join(re.search(rf"#define CISM_VERSION_{k} (\d+)", src).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    assert _lib.ABI_VERSION == abi
    assert _lib.lib.cism_abi_version() == abi
    assert cism.library_version() == ver
    assert cism.__version__ == ver


def test_missing_library_lists_every_path_tried(tmp_path):
    import subprocess
    import sys
    env = dict(__import__("os").environ, CISM_LIB=str(tmp_path / "libnothing.so"))
    p = subprocess.run([sys.executable, "-c", "import cism; cism.Model"], capture_output=True, text=True, env=env)
    assert p.returncode != 0
    assert "cannot load the libcism shared library; tried:" in p.stderr and str(tmp_path / "libnothing.so") in p.stderr
    # the converter needs no library
    p = subprocess.run([sys.executable, "-c", "import cism.convert, cism.format"], capture_output=True, text=True,
                       env=env)
    assert p.returncode == 0, p.stderr
