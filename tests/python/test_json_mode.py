"""JSON mode (cism/json_mode.py, cism/json_schema.py): the prefix automaton
against Python's json module (documents, refusals, random values and random
mutations), JSON schemas (instances accepted, violations refused, unsupported
keywords named), the constrained sampler's distribution against "mask, then
sample", and generation on the real SmolLM2-135M-Instruct ending in objects
json.loads reads and the schema accepts, offline and (test_server.py) over HTTP."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

import cism
from cism.json_mode import JsonConstraint
from cism.json_schema import MAX_BLANKS, JsonPrefix, SchemaError, read_schema

DOCS = ['{}', '{"a": 1}', ' \n{ "k" : "v" }', '{"a":[1,2.5,-0.3e+10,0,-0,1E5,true,false,null,"x\\u00e9\\n\\"",[],{}]}',
        '{"nested": {"deeper": {"list": [[1], [2, [3]]]}}, "t": "caf\u00e9 \u4e2d"}', '{"e": 1e-7, "z": 0.0}']
NOT_OBJECTS = ['[1]', '"s"', '1', 'true', '{,}', '{"a" 1}', '{"a": 01}', '{"a": tru}', '{"a": 1,}', '{"a": "\x01"}',
               '{"a": 1}}', '{"a": -}', '{"a": 1.}', '{"a": .5}', '{"a": 1e}', '{a: 1}', "{'a': 1}", '{"a": "\\x"}',
               '{"a": "\\u12G4"}', '{"a": [1 2]}', '{"a": [1,]}', '{"a": 1] ', '{"a": +1}', '{"a": nul}', '{} x']


def _reads(text):
    p = JsonPrefix()
    return p.feed(text), p


@pytest.mark.parametrize("doc", DOCS)
def test_every_prefix_of_an_object_is_accepted_and_only_the_whole_is_complete(doc):
    assert isinstance(json.loads(doc), dict)
    for i in range(len(doc)):
        ok, p = _reads(doc[:i])
        assert ok and not p.complete, doc[:i]
    ok, p = _reads(doc)
    assert ok and p.complete
    ok, p = _reads(doc + " ")
    assert not ok   # nothing after the object, not even whitespace


@pytest.mark.parametrize("text", NOT_OBJECTS)
def test_what_is_not_an_object_is_refused(text):
    with pytest.raises(ValueError):
        v = json.loads(text)
        if not isinstance(v, dict):
            raise ValueError
    ok, p = _reads(text)
    assert not ok


def test_refused_text_leaves_the_state_unchanged():
    p = JsonPrefix()
    assert p.feed('{"a": [1')
    assert not p.feed(', }')
    assert p.feed(', 2]}') and p.complete


def test_whitespace_runs_and_numbers_are_bounded():
    assert _reads('{"a": ' + "9" * 16 + "." + "5" * 16 + "e-" + "1" * 3 + "}")[1].complete
    for long in ("1" * 17, "1." + "1" * 17, "1e" + "1" * 4, "-" + "1" * 17):
        assert not _reads('{"a": ' + long)[0], long
    assert _reads("{" + " " * MAX_BLANKS)[0]
    assert not _reads("{" + " " * (MAX_BLANKS + 1))[0]
    assert _reads('{"a": "' + " " * 500 + '"}')[0]   # inside a string any length


def _random_value(rng, depth=0):
    k = rng.randrange(8 if depth < 3 else 5)
    if k == 0:
        return rng.choice([True, False, None])
    if k == 1:
        return rng.randint(-10**6, 10**6)
    if k == 2:
        return rng.choice([0.5, -1e-7, 3.25e10, 0.0, -2.5])
    if k in (3, 4):
        return "".join(rng.choice('ab "\\/\n\té中\x01') for _ in range(rng.randrange(6)))
    if k == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{rng.randrange(9)}": _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_random_objects_and_their_mutations_against_json_loads():
    rng = random.Random(5)
    for i in range(300):
        obj = {"root": _random_value(rng)} if i % 2 else {f"k{j}": _random_value(rng) for j in range(rng.randrange(4))}
        text = json.dumps(obj, ensure_ascii=bool(i % 3), indent=None if i % 4 else 1)
        for cut in sorted({0, len(text) // 3, len(text) // 2, len(text) - 1}):
            ok, p = _reads(text[:cut])
            assert ok and not p.complete, text[:cut]
        ok, p = _reads(text)
        assert ok and p.complete, text
        for _ in range(4):   # what the automaton takes whole, json.loads reads as an object
            j = rng.randrange(len(text))
            bad = text[:j] + rng.choice('{}[]",:0-.e tfnu\\x') + text[j + 1:]
            ok, p = _reads(bad)
            if ok and p.complete:
                assert isinstance(json.loads(bad), dict), bad


PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
    "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "score": {"type": ["number", "boolean"]},
    "kind": {"const": "human"}},
    "required": ["name", "age"], "additionalProperties": False}
TREE = {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["v"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}


@pytest.mark.parametrize("schema,doc", [
    (PERSON, '{"name": "Al", "age": 30}'),
    (PERSON, '{"age": -0, "name": "\\u00e9\\n", "tags": [3, "b"], "nick": null, "score": 1.5e3, "kind": "human"}'),
    (PERSON, '{"name":"12345678","age":7,"nick":"x","score":false}'),
    (TREE, '{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}'),
    ({"type": "object"}, '{"any": [1, {"x": null}]}'),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, '{"a": 1, "b\\"c": 2}'),
])
def test_schema_instances_are_accepted(schema, doc):
    root = read_schema(schema)
    for i in range(len(doc)):
        p = JsonPrefix(root)
        assert p.feed(doc[:i]) and not p.complete, doc[:i]
    p = JsonPrefix(root)
    assert p.feed(doc) and p.complete


@pytest.mark.parametrize("schema,doc", [
    (PERSON, '{"name": "Al"}'),                           # a required key missing
    (PERSON, '{"name": "Al", "age": 3, "x": 1}'),         # a key outside properties
    (PERSON, '{"name": "Al", "name": "B", "age": 3}'),    # a key twice
    (PERSON, '{"name": "Al", "age": 3.5}'),               # not an integer
    (PERSON, '{"name": "Al", "age": "3"}'),
    (PERSON, '{"name": "", "age": 3}'),                   # minLength
    (PERSON, '{"name": "123456789", "age": 3}'),          # maxLength
    (PERSON, '{"name": "Al", "age": 3, "tags": []}'),     # minItems
    (PERSON, '{"name": "Al", "age": 3, "tags": ["a", "b", "a"]}'),  # maxItems
    (PERSON, '{"name": "Al", "age": 3, "tags": ["c"]}'),  # enum
    (PERSON, '{"name": "Al", "age": 3, "tags": [33]}'),
    (PERSON, '{"name": "Al", "age": 3, "kind": "humans"}'),
    (PERSON, '{"name": "Al", "age": 3, "score": null}'),
    (TREE, '{"v": 1, "kids": [{"w": 2}]}'),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, '{"a": true}'),
])
def test_schema_violations_are_refused(schema, doc):
    p = JsonPrefix(read_schema(schema))
    assert not (p.feed(doc) and p.complete)


@pytest.mark.parametrize("schema,words", [
    ({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}, "format is not supported"),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}, "minimum is not supported"),
    ({"type": "object", "patternProperties": {}}, "patternProperties is not supported"),
    ({"type": "array"}, "root must be an object"),
    ({"type": "object", "required": ["x"], "additionalProperties": False}, "not in properties"),
    ({"$ref": "#/$defs/missing"}, "names no definition"),
    ({"$ref": "http://x"}, "only '#'"),
    ({"type": "object", "properties": {"a": {"type": "date"}}}, "unknown type"),
    ({"type": "object", "properties": {"a": {"maxLength": -1, "type": "string"}}}, "maxLength must be"),
    ([1], "must be an object"),
])
def test_unsupported_schemas_are_refused_by_name(schema, words):
    with pytest.raises(SchemaError, match=words):
        read_schema(schema)


class _Vocab:
    """A tokenizer stand-in: each id's text as given; None is a special token."""

    def __init__(self, texts):
        self._json_texts = texts
        self.n_ids = len(texts)


def test_constrained_greedy_takes_the_most_likely_valid_token():
    c = JsonConstraint(_Vocab(["x", "{", '"', "}", None, " ", "1", ":", ","]))
    logits = np.array([9, 1, 2, 3, 8, 0, 5, 7, 6], np.float32)   # 'x' and the special token are never valid
    with cism.Sampler(temperature=0) as s:
        tok = c.sample(s, logits)
        assert tok == 1   # '{' is the only token that can start the object but ' '
        c.accept(tok)
        assert c.sample(s, logits) == 3   # '}' (3) over '"' (2)
        c.accept(3)
    assert c.complete
    with pytest.raises(ValueError, match="does not continue"):
        c.accept(1)


def test_constrained_sampling_is_the_masked_distribution():
    texts = ['"', "}", "x", "y", ":", " ", "{", ","]
    logits = np.log(np.array([0.10, 0.05, 0.3, 0.2, 0.1, 0.05, 0.1, 0.1], np.float32))
    valid = np.array([1, 1, 0, 0, 0, 1, 0, 0], bool)
    want = np.where(valid, np.exp(logits), 0)
    want /= want.sum()
    counts = np.zeros(len(texts))
    n = 6000
    with cism.Sampler(temperature=1.0, seed=7) as s:
        for _ in range(n):
            c = JsonConstraint(_Vocab(texts))
            c.state.feed("{")
            counts[c.sample(s, logits)] += 1
    assert counts[~valid].sum() == 0
    freq = counts / n
    assert np.all(np.abs(freq[valid] - want[valid]) < 4 * np.sqrt(want[valid] * (1 - want[valid]) / n) + 1e-3), (freq, want)


def test_generation_in_json_mode_on_the_real_model(offline):
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in JSON."},]
    r = offline.create_chat_completion(msgs, temperature=0, max_tokens=64, n_ctx=512,
                                       response_format={"type": "json_object"})
    c = r["choices"][0]
    assert c["finish_reason"] == "stop"
    obj = json.loads(c["message"]["content"])
    assert isinstance(obj, dict) and "Paris" in json.dumps(obj)
    # the count is of the object's tokens: no end-of-turn token to leave out
    assert r["usage"]["completion_tokens"] == len(offline.tokenizer.encode(c["message"]["content"], add_bos=False))
    for seed in range(3):   # sampled: whatever it says, a JSON object or (at max_tokens) the start of one
        r = offline.create_chat_completion([{"role": "user", "content": "Describe a cat in JSON."}], temperature=1.0,
                                           seed=seed, max_tokens=48, n_ctx=512,
                                           response_format={"type": "json_object"})
        c = r["choices"][0]
        p = JsonPrefix()
        assert p.feed(c["message"]["content"])
        assert p.complete == (c["finish_reason"] == "stop")
        if p.complete:
            assert isinstance(json.loads(c["message"]["content"]), dict)
    with offline.session(n_ctx=256) as s:
        gen = s.generate("A JSON object with a name:", 40, temperature=0, json=True)
        text = "".join(gen)
        assert JsonPrefix().feed(text)
        assert gen.stop_reason in ("eos", "length") and (gen.stop_reason == "eos") == _reads(text)[1].complete
        assert s.n_past == len(gen.prompt_tokens) + len(gen.tokens)   # every token of the object evaluated
    for bad in ({"type": "json_schema", "json_schema": {}}, {"type": "xml"}, "json"):
        with pytest.raises(ValueError, match="response_format"):
            offline.create_chat_completion(msgs, max_tokens=4, response_format=bad)
    with offline.session(n_ctx=64) as s, pytest.raises(TypeError, match="json must be True, False or a JSON schema"):
        s.generate("x", 4, json="yes")


def test_cli_json(run_cli, smol):
    p = run_cli("chat", "-m", smol, "-p", "What is the capital of France? Answer in JSON.", "--temperature", "0",
                "--json")
    assert isinstance(json.loads(p.stdout), dict) and "Paris" in p.stdout
    p = run_cli("generate", "-m", smol, "-p", "A JSON object with a name:", "-n", "24", "--json", "--no-echo")
    assert JsonPrefix().feed(p.stdout.rstrip("\n"))
    p = run_cli("generate", "-m", smol, "-p", "x", "--json", "--lookup", check=False)
    assert p.returncode == 1 and "do not combine with --lookup" in p.stderr and "Traceback" not in p.stderr


def test_a_vocabulary_without_json_punctuation_is_refused_up_front():
    with pytest.raises(ValueError, match="no token beginning with '{' or '}'"):
        JsonConstraint(_Vocab(["a", " ", '"', ":", ","]))


def test_a_dead_end_is_its_own_error():
    from cism.json_mode import JsonDeadEnd
    c = JsonConstraint(_Vocab(["{", "}", '"', ":", ",", "x"]))
    c.accept(0)
    c.accept(2)
    c.accept(5)
    c.accept(2)   # {"x" : a key, and then only ':' goes on
    texts = c.texts
    c.texts = [t if t != ":" else "x" for t in texts]   # a vocabulary that lost its colon mid-way
    with cism.Sampler(temperature=0) as s, pytest.raises(JsonDeadEnd, match="no token"):
        c.sample(s, np.zeros(len(texts), np.float32))


CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                         "country": {"type": "string", "maxLength": 40},
                                         "population": {"type": "integer"}},
        "required": ["city", "country", "population"], "additionalProperties": False}


def _is_city(obj):
    return (isinstance(obj, dict) and set(obj) == {"city", "country", "population"}
            and isinstance(obj["city"], str) and isinstance(obj["country"], str)
            and isinstance(obj["population"], int) and not isinstance(obj["population"], bool))


def test_generation_with_a_schema_on_the_real_model(offline):
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
    for rf in ({"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
               {"type": "json_object", "schema": CITY}):   # OpenAI's form and llama-cpp-python's
        r = offline.create_chat_completion(msgs, temperature=0, max_tokens=80, n_ctx=512, response_format=rf)
        c = r["choices"][0]
        assert c["finish_reason"] == "stop"
        obj = json.loads(c["message"]["content"])
        assert _is_city(obj) and obj["city"] == "Paris", obj
    for seed in range(3):
        r = offline.create_chat_completion(msgs, temperature=1.0, seed=seed, max_tokens=80, n_ctx=512,
                                           response_format={"type": "json_object", "schema": CITY})
        c = r["choices"][0]
        if c["finish_reason"] == "stop":
            assert _is_city(json.loads(c["message"]["content"])), c
        else:
            assert JsonPrefix(read_schema(CITY)).feed(c["message"]["content"])
    with pytest.raises(SchemaError, match="pattern is not supported"):
        offline.create_chat_completion(msgs, max_tokens=4, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
                "a": {"type": "string", "pattern": "^a"}}}}})


def test_cli_json_schema(run_cli, smol, tmp_path):
    schema = tmp_path / "city.json"
    schema.write_text(json.dumps(CITY))
    p = run_cli("chat", "-m", smol, "-p", "What is the capital of France? Answer in JSON.", "--temperature", "0",
                "--json-schema", str(schema))
    assert _is_city(json.loads(p.stdout))
    schema.write_text('{"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}')
    p = run_cli("generate", "-m", smol, "-p", "x", "--json-schema", str(schema), check=False)
    assert p.returncode == 1 and "format is not supported" in p.stderr and "Traceback" not in p.stderr
