"""Syntax check of the Swift and Kotlin sources with tree-sitter grammars
(PyPI tree-sitter, tree-sitter-swift, tree-sitter-kotlin). No Swift compiler
or Android toolchain runs here, so this is parsing only: no types, no names.

  python check_syntax.py ROOT   checks ROOT/ios/**/*.swift, ROOT/android/**/*.kt(s)

It first proves each grammar can fail: a broken snippet must be rejected.
"""
import glob
import os
import sys

import tree_sitter
import tree_sitter_kotlin
import tree_sitter_swift

LANGS = {
    "swift": tree_sitter.Language(tree_sitter_swift.language()),
    "kotlin": tree_sitter.Language(tree_sitter_kotlin.language()),
}
BROKEN = {
    "swift": b"func f(x: Int { return [x, }\n",
    "kotlin": b"fun f(x: Int { return listOf(x, }\n",
}
GOOD = {
    "swift": b"actor A { func f() async throws -> [Int32] { [1, 2] } }\n",
    "kotlin": b"fun f(x: Int): List<Int> = listOf(x, 2)\n",
}


def problems(lang, source):
    tree = tree_sitter.Parser(LANGS[lang]).parse(source)
    found = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            what = "missing " + node.type if node.is_missing else "syntax error"
            found.append(f"{node.start_point[0] + 1}:{node.start_point[1] + 1}: {what}")
        stack.extend(node.children)
    return sorted(found)


def main():
    root = sys.argv[1]
    failed = 0
    for lang in LANGS:
        if not problems(lang, BROKEN[lang]) or problems(lang, GOOD[lang]):
            print(f"FAIL the {lang} grammar does not tell broken code from good code")
            failed += 1
    files = [("swift", f) for f in glob.glob(os.path.join(root, "ios", "**", "*.swift"), recursive=True)]
    files += [("kotlin", f) for pattern in ("*.kt", "*.kts")
              for f in glob.glob(os.path.join(root, "android", "**", pattern), recursive=True)]
    for lang, path in sorted(files, key=lambda x: x[1]):
        with open(path, "rb") as f:
            found = problems(lang, f.read())
        rel = os.path.relpath(path, root)
        if found:
            failed += 1
            print(f"FAIL {rel}: " + "; ".join(found[:5]))
        else:
            print(f"ok   {rel}")
    print(f"syntax: {len(files) - failed} passed, {failed} failed")
    return 1 if failed or not files else 0


if __name__ == "__main__":
    sys.exit(main())
