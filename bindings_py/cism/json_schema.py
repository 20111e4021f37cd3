"""The JSON text a constrained generation may write: a JSON Schema subset read
into nodes, and `JsonPrefix`, which follows the text character by character
and says whether more text can continue it toward a value the schema accepts.

Supported keywords: type (one or a list: object, array, string, number,
integer, boolean, null), properties, required, additionalProperties (absent
or true: other keys hold any JSON; false: none; a schema: theirs), items,
minItems, maxItems, minLength, maxLength, enum, const, anyOf, oneOf (read as
anyOf: a value matching two branches is not refused), allOf of one schema,
$ref to "#", "#/$defs/..." or "#/definitions/...", and the annotations
(title, description, default, examples, $schema, $id, $comment). Any other
keyword (pattern, format, minimum, ...) is refused by name rather than
ignored, so the output never silently breaks a rule the caller asked for.
Numbers have at most 16 digits before the point, 16 after it and 3 in the
exponent. The root must be an object (as OpenAI's structured outputs require): its
closing brace is the end of the output. Keys may come in any order, each
once; the object closes only when its required keys are there.

JsonPrefix keeps every way the text read so far can be parsed (a list of
stacks of frames: several when anyOf branches, an enum's candidates or a
number that may end or go on leave it open), so each character is checked
exactly, without backtracking. Outside strings at most MAX_BLANKS whitespace
characters follow one another (a model can otherwise loop on newlines).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

MAX_BLANKS = 48

WHITESPACE = " \t\n\r"
_ESC = '"\\/bfnrtu'
_HEX = "0123456789abcdefABCDEF"
_DIGITS = "0123456789"
_ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs", "definitions",
                "strict"}


class SchemaError(ValueError):
    """A schema this module cannot follow (an unsupported keyword, a wrong type, an impossible object)."""


# ---- nodes -------------------------------------------------------------------------
class Node:
    pass


class AnyNode(Node):
    pass


class ObjNode(Node):
    def __init__(self, props: Dict[str, Node], required: frozenset, extra: Optional[Node]):
        self.props, self.required, self.extra = props, required, extra


class ArrNode(Node):
    def __init__(self, items: Node, lo: int, hi: Optional[int]):
        self.items, self.lo, self.hi = items, lo, hi


class StrNode(Node):
    def __init__(self, lo: int = 0, hi: Optional[int] = None):
        self.lo, self.hi = lo, hi


class NumNode(Node):
    def __init__(self, integer: bool):
        self.integer = integer


class LitNode(Node):
    """One of these exact JSON texts (true, false, null, an enum's or const's values)."""
    def __init__(self, texts: Tuple[str, ...]):
        self.texts = texts


class UnionNode(Node):
    def __init__(self, options: List[Node]):
        self.options = options


class RefNode(Node):
    def __init__(self, reader: "_Reader", ref: str):
        self.reader, self.ref, self._node = reader, ref, None

    def get(self) -> Node:
        if self._node is None:
            self._node = self.reader.resolve(self.ref)
        return self._node


ANY = AnyNode()
ANY_OBJECT = ObjNode({}, frozenset(), ANY)
_ANY_ARRAY = ArrNode(ANY, 0, None)
_ANY_STRING = StrNode()
_BOOL = LitNode(("true", "false"))
_NULL = LitNode(("null",))


def _deref(node: Node) -> Node:
    seen = 0
    while isinstance(node, RefNode):
        node = node.get()
        seen += 1
        if seen > 64:
            raise SchemaError("the schema's $ref chain does not end")
    return node


class _Reader:
    def __init__(self, root: Dict[str, Any]):
        self.root = root
        self.cache: Dict[str, Node] = {}

    def resolve(self, ref: str) -> Node:
        if ref in self.cache:
            return self.cache[ref]
        if ref == "#":
            target = self.root
        else:
            parts = ref.split("/")
            if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions"):
                raise SchemaError(f"$ref {ref!r}: only '#', '#/$defs/NAME' and '#/definitions/NAME' are supported")
            target = (self.root.get(parts[1]) or {}).get(parts[2])
            if target is None:
                raise SchemaError(f"$ref {ref!r} names no definition of the schema")
        node = self.read(target, ref)
        self.cache[ref] = node
        return node

    def read(self, s: Any, where: str) -> Node:
        if s is True or s == {}:
            return ANY
        if not isinstance(s, dict):
            raise SchemaError(f"{where}: a schema must be an object or true (got {s!r:.60})")
        unknown = sorted(k for k in s if k not in _KEYWORDS and k not in _ANNOTATIONS)
        if unknown:
            raise SchemaError(f"{where}: the keyword{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                              f"{'are' if len(unknown) > 1 else 'is'} not supported (supported: "
                              f"{', '.join(sorted(_KEYWORDS))})")
        if "$ref" in s:
            if len(set(s) - _ANNOTATIONS) > 1:
                raise SchemaError(f"{where}: $ref beside other keywords is not supported")
            ref = s["$ref"]
            if not isinstance(ref, str):
                raise SchemaError(f"{where}: $ref must be a string")
            node = RefNode(self, ref)
            if ref in self.cache:
                return self.cache[ref]
            return node
        for key in ("anyOf", "oneOf", "allOf"):
            if key in s:
                opts = s[key]
                if not isinstance(opts, list) or not opts:
                    raise SchemaError(f"{where}: {key} must be a non-empty list of schemas")
                if len(set(s) - _ANNOTATIONS) > 1:
                    raise SchemaError(f"{where}: {key} beside other keywords is not supported")
                if key == "allOf":
                    if len(opts) != 1:
                        raise SchemaError(f"{where}: allOf of more than one schema is not supported")
                    return self.read(opts[0], f"{where}.allOf[0]")
                return UnionNode([self.read(o, f"{where}.{key}[{i}]") for i, o in enumerate(opts)])
        if "enum" in s or "const" in s:
            values = s["enum"] if "enum" in s else [s["const"]]
            if not isinstance(values, list) or not values:
                raise SchemaError(f"{where}: enum must be a non-empty list")
            return LitNode(tuple(dict.fromkeys(json.dumps(v, ensure_ascii=False) for v in values)))
        t = s.get("type")
        if t is None:
            types = ["object"] if "properties" in s else ["array"] if "items" in s else None
            if types is None:
                return ANY
        else:
            types = t if isinstance(t, list) else [t]
        nodes = [self._typed(s, x, where) for x in types]
        return nodes[0] if len(nodes) == 1 else UnionNode(nodes)

    def _typed(self, s: Dict[str, Any], t: Any, where: str) -> Node:
        if t == "object":
            props = s.get("properties", {})
            if not isinstance(props, dict):
                raise SchemaError(f"{where}: properties must be an object")
            nodes = {k: self.read(v, f"{where}.properties.{k}") for k, v in props.items()}
            req = s.get("required", [])
            if not isinstance(req, list) or not all(isinstance(k, str) for k in req):
                raise SchemaError(f"{where}: required must be a list of names")
            ap = s.get("additionalProperties", True)
            extra = None if ap is False else self.read(ap, f"{where}.additionalProperties")
            missing = [k for k in req if k not in nodes]
            if missing and extra is None:
                raise SchemaError(f"{where}: required {missing} not in properties and additionalProperties is false")
            return ObjNode(nodes, frozenset(req), extra)
        if t == "array":
            lo, hi = _count(s, "minItems", where), _count(s, "maxItems", where)
            return ArrNode(self.read(s.get("items", True), f"{where}.items"), lo or 0, hi)
        if t == "string":
            return StrNode(_count(s, "minLength", where) or 0, _count(s, "maxLength", where))
        if t in ("number", "integer"):
            return NumNode(t == "integer")
        if t == "boolean":
            return _BOOL
        if t == "null":
            return _NULL
        raise SchemaError(f"{where}: unknown type {t!r}")


_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
             "maxLength", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"}


def _count(s: Dict[str, Any], key: str, where: str) -> Optional[int]:
    v = s.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SchemaError(f"{where}: {key} must be a whole number >= 0 (got {v!r:.40})")
    return v


def read_schema(schema: Any) -> ObjNode:
    """The root node of a JSON Schema (an object), or SchemaError."""
    if not isinstance(schema, dict):
        raise SchemaError(f"a JSON schema must be an object (got {type(schema).__name__})")
    node = _deref(_Reader(schema).read(schema, "schema"))
    if not isinstance(node, ObjNode):
        raise SchemaError("the schema's root must be an object (\"type\": \"object\")")
    return node


# ---- the prefix machine ---------------------------------------------------------------
# frames (tuples; the top of a stack is its last):
#   ("O", node, seen keys, phase, key)   an object; phase: "k1" after '{', "k" after ',', "c" after a key,
#                                        "v" while its value is read, "n" after the value
#   ("A", node, count, phase)            an array; phase: "v1" after '[', "v" in a value, "n" after one
#   ("V", node)                          a value to read
#   ("K", obj frame's node, seen, text, escape)  an object key being read (escape: as a string's)
#   ("S", node, length, escape)          a string value; escape: 0, 1 after '\\', 2..5 hex digits left + 1
#   ("N", integer, state, digits)        a number (digits: of its current part)
#   ("L", candidates, read)              one of exact texts, `read` characters in
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_ENDS = (_N_ZERO, _N_INT, _N_FRAC, _N_EXP)
# digits at most in a number's integer part, fraction and exponent (a small model can
# otherwise write digits until max_tokens; as llama.cpp's JSON-schema grammars)
_N_MAX_DIGITS = {_N_INT: 16, _N_FRAC: 16, _N_EXP: 3}

Stack = Tuple[tuple, ...]


def _start(node: Node, ch: str) -> List[tuple]:
    """The frames a value of node begins as with character ch."""
    node = _deref(node)
    if isinstance(node, UnionNode):
        return [f for o in node.options for f in _start(o, ch)]
    if isinstance(node, AnyNode):
        return (_start(ANY_OBJECT, ch) + _start(_ANY_ARRAY, ch) + _start(_ANY_STRING, ch) + _start(NumNode(False), ch)
                + _start(_BOOL, ch) + _start(_NULL, ch))
    if isinstance(node, ObjNode):
        return [("O", node, frozenset(), "k1", None)] if ch == "{" else []
    if isinstance(node, ArrNode):
        return [("A", node, 0, "v1")] if ch == "[" else []
    if isinstance(node, StrNode):
        return [("S", node, 0, 0)] if ch == '"' else []
    if isinstance(node, NumNode):
        if ch == "-":
            return [("N", node.integer, _N_MINUS, 0)]
        return [("N", node.integer, _N_ZERO if ch == "0" else _N_INT, 1)] if ch in _DIGITS else []
    if isinstance(node, LitNode):
        c = tuple(t for t in node.texts if t[:1] == ch)
        return [("L", c, 1)] if c else []
    return []


def _escape(esc: int, ch: str) -> Optional[int]:
    """The escape state after ch inside a string (esc: 1 after the backslash, 2..5: hex
    digits of \\uXXXX left + 1); 0 when the escaped character is whole, None if ch is wrong."""
    if esc == 1:
        return None if ch not in _ESC else 5 if ch == "u" else 0
    if ch not in _HEX:
        return None
    return 0 if esc == 2 else esc - 1


def _done(stack: Stack) -> Optional[Stack]:
    """The stack once its top value is complete (None: not allowed)."""
    rest = stack[:-1]
    if not rest:
        return rest
    p = rest[-1]
    if p[0] == "O":
        return rest[:-1] + (("O", p[1], p[2], "n", None),)
    return rest[:-1] + (("A", p[1], p[2] + 1, "n"),)


def _key_room(node: ObjNode, seen: frozenset) -> bool:
    return node.extra is not None or any(k not in seen for k in node.props)


def _step(stack: Stack, ch: str) -> List[Stack]:
    """Every stack the character ch can lead to from stack ([]: none)."""
    if not stack:
        return []
    f = stack[-1]
    kind = f[0]
    base = stack[:-1]
    if kind == "S":
        node, n, esc = f[1], f[2], f[3]
        if esc:
            e = _escape(esc, ch)
            if e is None or (e == 0 and node.hi is not None and n + 1 > node.hi):
                return []
            return [base + (("S", node, n + (e == 0), e),)]
        if ch == '"':
            if n < node.lo:
                return []
            d = _done(stack)
            return [d] if d is not None else []
        if ch == "\\":
            return [base + (("S", node, n, 1),)]
        if ord(ch) < 0x20 or (node.hi is not None and n + 1 > node.hi):
            return []
        return [base + (("S", node, n + 1, 0),)]
    if kind == "K":
        obj, seen, text, esc = f[1], f[2], f[3], f[4]
        if esc:   # only keys outside the properties (obj.extra) may hold escapes
            e = _escape(esc, ch)
            return [] if e is None else [base + (("K", obj, seen, text + ch, e),)]
        if ch == '"':
            ok = (text in obj.props and text not in seen) or (obj.extra is not None and text not in obj.props
                                                             and text not in seen)
            if not ok:
                return []
            o = base[-1]
            return [base[:-1] + (("O", o[1], seen | {text}, "c", text),)]
        if ord(ch) < 0x20 or (ch == "\\" and obj.extra is None):
            return []
        t = text + ch
        if obj.extra is None and not any(k.startswith(t) and k not in seen for k in obj.props):
            return []
        return [base + (("K", obj, seen, t, 1 if ch == "\\" else 0),)]
    if kind == "N":
        integer, st, nd = f[1], f[2], f[3]
        out: List[Stack] = []
        nxt = None
        if ch in _DIGITS:
            if st == _N_MINUS:
                nxt = _N_ZERO if ch == "0" else _N_INT
            elif st in (_N_INT, _N_FRAC, _N_EXP):
                nxt = st if nd < _N_MAX_DIGITS[st] else None
            elif st == _N_DOT:
                nxt = _N_FRAC
            elif st in (_N_E, _N_ESIGN):
                nxt = _N_EXP
        elif ch == "." and st in (_N_ZERO, _N_INT) and not integer:
            nxt = _N_DOT
        elif ch in "eE" and st in (_N_ZERO, _N_INT, _N_FRAC) and not integer:
            nxt = _N_E
        elif ch in "+-" and st == _N_E:
            nxt = _N_ESIGN
        if nxt is not None:
            out.append(base + (("N", integer, nxt, nd + 1 if nxt == st else 1),))
        if st in _N_ENDS:   # the number may end before ch
            d = _done(stack)
            if d is not None:
                out.extend(_step(d, ch))
        return out
    if kind == "L":
        cands, k = f[1], f[2]
        out = []
        c = tuple(t for t in cands if len(t) > k and t[k] == ch)
        if c:
            out.append(base + (("L", c, k + 1),))
        if any(len(t) == k for t in cands):   # a whole candidate: the value may end before ch
            d = _done(stack)
            if d is not None:
                out.extend(_step(d, ch))
        return out
    if ch in WHITESPACE:   # between tokens of the structure
        return [stack]
    if kind == "V":
        return [base + (g,) for g in _start(f[1], ch)]
    if kind == "O":
        node, seen, phase = f[1], f[2], f[3]
        if phase in ("k1", "k") and ch == '"':
            return [stack + (("K", node, seen, "", 0),)]
        if phase in ("k1", "n") and ch == "}":
            if not node.required <= seen:
                return []
            d = _done(stack)
            return [d] if d is not None else []
        if phase == "c" and ch == ":":
            key = f[4]
            value = node.props.get(key, node.extra)
            return [base + (("O", node, seen, "v", key), ("V", value))]
        if phase == "n" and ch == "," and _key_room(node, seen):
            return [base + (("O", node, seen, "k", None),)]
        return []
    if kind == "A":
        node, count, phase = f[1], f[2], f[3]
        if phase in ("v1", "n") and ch == "]":
            if count < node.lo:
                return []
            d = _done(stack)
            return [d] if d is not None else []
        if phase == "n" and ch == ",":
            if node.hi is not None and count >= node.hi:
                return []
            return [base + (("A", node, count, "v"), ("V", node.items))]
        if phase == "v1" and (node.hi is None or node.hi > 0):
            return _step(base + (("A", node, count, "v"), ("V", node.items)), ch)
        return []
    return []


class JsonPrefix:
    """The text of a JSON value read so far (a schema's root object; by default
    any object). feed(text) reads more; False, and the state unchanged, when
    the text cannot continue a value the schema accepts. `complete` once the
    root object is closed."""

    __slots__ = ("stacks", "blanks")

    def __init__(self, root: Optional[ObjNode] = None):
        self.stacks: List[Stack] = [(("V", root if root is not None else ANY_OBJECT),)]
        self.blanks = 0

    def copy(self) -> "JsonPrefix":
        c = JsonPrefix.__new__(JsonPrefix)
        c.stacks, c.blanks = self.stacks, self.blanks
        return c

    @property
    def complete(self) -> bool:
        return any(not s for s in self.stacks)

    def feed(self, text: str) -> bool:
        stacks, blanks = self.stacks, self.blanks
        for ch in text:
            nxt: List[Stack] = []
            for s in stacks:
                for r in _step(s, ch):
                    if r not in nxt:
                        nxt.append(r)
            if not nxt:
                return False
            if ch in WHITESPACE and all(s and s[-1][0] not in "SK" for s in nxt):
                blanks += 1
                if blanks > MAX_BLANKS:
                    return False
            else:
                blanks = 0
            stacks = nxt
        self.stacks, self.blanks = stacks, blanks
        return True
