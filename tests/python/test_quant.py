"""Quantized conversion through the Python converter (which packs through
libcism's cism_quantize), the file round trip, the perplexity tool against
transformers, and generation from a quantized model."""
import os

import numpy as np
import pytest

from cism import format as fmt
from cism import quant as q
from cism.convert import convert
from cism.errors import CismError
from cism.model import Model
from cism.ppl import perplexity, tokenize
from cism.upgrade import upgrade


def test_quantize_roundtrip_all_formats():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((48, 172)) * 0.05).astype(np.float32)
    for name, dt in q.QUANT_DTYPES.items():
        rows = 37 if name not in q.INTERLEAVED.values() else 48  # interleaved: whole groups of 16 rows
        packed = q.quantize(w[:rows], dt, n_threads=2)
        assert packed.shape == (rows, q.row_bytes(dt, 172))
        assert np.array_equal(packed, q.quantize(w[:rows], dt, n_threads=1)), name
        back = q.dequantize(packed, dt, 172)
        rel = np.sqrt(((back - w[:rows]) ** 2).mean()) / np.sqrt((w[:rows] ** 2).mean())
        # relative RMS error of Gaussian rows: 8 bits 1%, 4-6 bits 15%, 3 bits (q3: 0.161) 20%, 2 bits (q2: 0.332) 40%
        bound = 0.01 if name.startswith("q8") else 0.20 if name.startswith("q3") else 0.40 if name.startswith("q2") else 0.15
        assert rel < bound, (name, rel)


def test_q4a_layout_and_roundtrip():
    """q4a blocks (GGUF Q4_1's bytes): fp16 d, fp16 m, 16 code bytes (code j low nibble,
    code j + 16 high); every weight decodes to f32(d) * code + f32(m) exactly, and is the
    nearest of the block's 16 values; padding codes are 0."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((9, 172)) * 0.05 + 0.01).astype(np.float32)
    packed = q.quantize(w, "q4a", n_threads=1)
    assert packed.shape == (9, 6 * 20) and q.row_bytes(q.DTYPE_Q4A, 172) == 120 and q.block_size(q.DTYPE_Q4A) == 32
    blocks = packed.reshape(9, 6, 20)
    d = blocks[:, :, 0:2].copy().view("<f2")[..., 0].astype(np.float32)
    m = blocks[:, :, 2:4].copy().view("<f2")[..., 0].astype(np.float32)
    codes = np.concatenate([blocks[:, :, 4:] & 15, blocks[:, :, 4:] >> 4], axis=2).astype(np.float32)  # [9, 6, 32]
    want = (d[..., None] * codes + m[..., None]).reshape(9, 192)
    back = q.dequantize(packed, "q4a", 172)
    assert back.tobytes() == want[:, :172].astype(np.float32).tobytes()
    assert not codes.reshape(9, 192)[:, 172:].any()
    levels = d[..., None] * np.arange(16, dtype=np.float32) + m[..., None]          # [9, 6, 16]
    wp = np.pad(w, ((0, 0), (0, 20))).reshape(9, 6, 32)
    best = np.abs(wp[..., None] - levels[:, :, None, :]).min(axis=3).reshape(9, 192)[:, :172]
    assert np.array_equal(np.abs(w - back), best)
    rel = np.sqrt(((back - w) ** 2).mean()) / np.sqrt((w ** 2).mean())
    assert rel < 0.15
    # asymmetric blocks (all weights of one sign) are where the minimum pays: better than q4's
    pos = np.abs(w)
    err = {n: np.sqrt(((q.dequantize(q.quantize(pos, n), n, 172) - pos) ** 2).mean()) for n in ("q4", "q4a")}
    assert err["q4a"] < err["q4"], err
    assert q.recipe("q4a").pick("blk.0.ffn_up") == "q4a" and q.recipe("q4a").pick("token_embd") == "q4a"
    assert q.stored_dtype("blk.0.ffn_up", "q4a", (64, 96), 64) == "q4ax16"  # whole groups of 16 rows
    assert q.stored_dtype("blk.0.ffn_up", "q4a", (60, 96), 64) == "q4a"
    assert q.stored_dtype("blk.0.ffn_up", "q4a", (64, 96), 64, layout="rows") == "q4a"


def test_quantize_accepts_dtype_names():
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((5, 70)) * 0.05).astype(np.float32)
    for name, dt in list(q.QUANT_DTYPES.items()) + [("f16", fmt.DTYPE_F16), ("f32", fmt.DTYPE_F32)]:
        rows = w if name not in q.INTERLEAVED.values() else np.tile(w, (4, 1))[:16]
        by_name, by_id = q.quantize(rows, name, n_threads=1), q.quantize(rows, dt, n_threads=1)
        assert np.array_equal(by_name, by_id), name
        assert np.array_equal(q.dequantize(by_name, name, 70), q.dequantize(by_id, dt, 70)), name
    assert q.dtype_id("q8") == q.DTYPE_Q8 and q.dtype_id(np.int32(3)) == 3
    with pytest.raises(ValueError, match=r"unknown dtype 'q1' \(one of: f32, f16, bf16, q8, .*q4a"):
        q.quantize(w, "q1")
    with pytest.raises(ValueError, match="unknown dtype 'Q8'"):
        q.dequantize(np.zeros((1, 34), np.uint8), "Q8", 32)
    with pytest.raises(TypeError, match="dtype must be a name"):
        q.quantize(w, 3.0)


def test_interleaved_layout():
    """q8x16 / q4sx16 hold exactly q8's / q4s's values and bytes, 16 rows interleaved
    (docs/QUANTIZATION.md): codes of each block in 4-byte chunks of 16 rows, scales after
    each superblock's codes; 96 columns leave a short last superblock in both."""
    rng = np.random.default_rng(1)
    from cism.convert_gguf import rows_to_x16
    w = (rng.standard_normal((32, 96)) * 0.05).astype(np.float32)
    for base, x in q.INTERLEAVED.items():
        bd, xd = q.QUANT_DTYPES[base], q.QUANT_DTYPES[x]
        plain, inter = q.quantize(w, bd), q.quantize(w, xd)
        assert q.row_bytes(xd, 96) == q.row_bytes(bd, 96) and q.block_size(xd) == q.block_size(bd)
        assert np.array_equal(q.dequantize(inter, xd, 96), q.dequantize(plain, bd, 96))
        sb = q.X16_GEOMETRY[xd][2]                    # scale bytes per block
        cb = q.row_bytes(bd, 96) // (96 // q.block_size(bd)) - sb  # code bytes per block
        nb = 96 // q.block_size(bd)
        coff, soff = q.x16_group_offsets(xd, 96)
        if base == "q8":
            assert (coff, soff) == ([0, 512, 1088], [1024, 1056, 1600])
        for g in range(2):
            grp = inter[16 * g:16 * g + 16].reshape(-1)
            for i in range(16):
                row = plain[16 * g + i].reshape(nb, sb + cb)
                for b in range(nb):
                    assert bytes(grp[soff[b] + i * sb:soff[b] + (i + 1) * sb]) == bytes(row[b, :sb])
                    for c in range(cb // 4):
                        off = coff[b] + c * 64 + i * 4
                        assert bytes(grp[off:off + 4]) == bytes(row[b, sb + 4 * c:sb + 4 * c + 4])
        if xd in (q.DTYPE_Q8X16, q.DTYPE_Q4AX16):  # the GGUF importer's rearrangement of Q8_0 / Q4_1 rows
            assert np.array_equal(rows_to_x16(plain, 96, xd), inter), x
        with pytest.raises(CismError, match="multiple of 16 rows"):
            q.quantize(w[:20], xd)
    assert q.stored_dtype("blk.0.ffn_up", "q8", (64, 96), 8) == "q8x16"
    assert q.stored_dtype("blk.0.attn_q", "q8", (64, 96), 8) == "q8"      # a head of 8 rows would split a group
    assert q.stored_dtype("blk.0.attn_q", "q4s", (64, 96), 64) == "q4sx16"
    assert q.stored_dtype("blk.0.ffn_up", "q4s", (172, 96), 64) == "q4s"  # not whole groups
    assert q.stored_dtype("blk.0.ffn_up", "q4", (64, 96), 64) == "q4"     # no interleaved variant
    assert q.stored_dtype("blk.0.ffn_up", "q8", (64, 96), 64, layout="rows") == "q8"
    with pytest.raises(ValueError, match="unknown layout"):
        q.stored_dtype("x", "q8", (16, 16), 16, layout="cols")


def test_quantize_refuses_bad_input():
    w = np.zeros((2, 32), np.float32)
    w[1, 3] = np.nan
    with pytest.raises(CismError, match="not finite"):
        q.quantize(w, q.DTYPE_Q4S)
    with pytest.raises(ValueError, match="unknown quantization recipe"):
        q.recipe("q1")


def test_convert_recipes_file_roundtrip(tmp_path, shared_models):
    MODELS = shared_models
    src = os.path.join(MODELS, "stories260K-hf")
    f32 = str(tmp_path / "f32.cism")
    convert(src, f32, progress=None)
    ref = fmt.CismFile(f32)
    # 4bit calibrates by default (docs/QUANTIZATION.md, "Calibrated rounding"): its plain rounding is
    # --no-calibrate (calibrate=False); the default's 4-bit matrices are GPTQ's, not the plain bytes
    for recipe, cal in (("q8", None), ("4bit", False), ("4bit", None), ("mix", None)):
        out = str(tmp_path / f"{recipe}-{cal}.cism")
        rep = convert(src, out, quant=recipe, progress=None, calibrate=cal)
        f = fmt.CismFile(out)
        calibrated = recipe == "4bit" and cal is None
        assert f.metadata["general.quantization"] == recipe
        assert ("general.quantization.calibration" in f.metadata) == calibrated
        assert rep.bits_per_weight() < (9.0 if recipe == "q8" else 6.5)
        assert any("ffn_down" in n and "padded" in n for n in rep.notes) or recipe == "q8" and rep.notes
        plan = q.recipe(recipe).dtypes({n: t.shape for n, t in f.tensors.items()}, calibrated=calibrated)
        changed = 0
        for name, t in f.tensors.items():
            if len(t.shape) == 1:
                assert t.dtype == fmt.DTYPE_F32
                continue
            want = q.QUANT_DTYPES[q.stored_dtype(name, plan[name], t.shape, f.metadata["model.head_dim"])]
            assert t.dtype == want, name
            # the stored bytes are exactly what the library packs from the f32 weights (calibrated:
            # those of the formats calibration leaves alone)
            packed = q.quantize(ref.array(name), t.dtype)
            if calibrated and t.dtype in q.CALIBRATED_DTYPES:
                changed += packed.tobytes() != f.raw(name)
            else:
                assert packed.tobytes() == f.raw(name), name
        assert (changed > 10) == calibrated, changed
        with pytest.raises(FileExistsError):
            convert(src, out, quant=recipe, progress=None)


def test_ppl_matches_transformers(tmp_path, shared_models):
    MODELS = shared_models
    TEXT = os.path.join(MODELS, "eval", "tinystories_valid_excerpt.txt")
    """Method 'full' on the first windows of the text, against the same
    computation in transformers (fp32, eager): within 0.1% PPL."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    src = os.path.join(MODELS, "stories260K-hf")
    path = str(tmp_path / "s.cism")
    convert(src, path, progress=None)
    text = open(TEXT, encoding="utf-8").read()
    toks = tokenize(path, text)
    ctx, windows = 512, 3
    ours = perplexity(path, tokens=toks, ctx=ctx, method="full", max_windows=windows, n_threads=2)
    model = transformers.AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    nll, n = 0.0, 0
    with torch.no_grad():
        for i in range(windows):
            win = toks[i * (ctx - 1):(i + 1) * (ctx - 1)]
            ids = torch.tensor([[1] + win])
            logp = torch.log_softmax(model(ids).logits[0].double(), -1)
            tg = torch.tensor(win)
            nll -= float(logp[torch.arange(len(win)), tg].sum())
            n += len(win)
    ref = float(np.exp(nll / n))
    assert ours.n_scored == n
    assert abs(ours.ppl / ref - 1) < 1e-3, (ours.ppl, ref)


def _greedy(path, n):
    from cism.session import Session
    out, tok = [], 1
    with Model(path) as m, Session(m) as s:
        for _ in range(n):
            s.eval([tok])
            tok = int(np.argmax(s.logits()))
            out.append(tok)
    return out


def test_quantized_ppl_and_generation(tmp_path, shared_models):
    MODELS = shared_models
    TEXT = os.path.join(MODELS, "eval", "tinystories_valid_excerpt.txt")
    from tokenizers import Tokenizer
    src = os.path.join(MODELS, "stories260K-hf")
    tok = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    text = open(TEXT, encoding="utf-8").read()
    res, gen = {}, {}
    for recipe in (None, "q8", "4bit"):
        path = str(tmp_path / f"{recipe}.cism")
        convert(src, path, quant=recipe, progress=None)
        toks = tokenize(path, text)
        res[recipe] = perplexity(path, tokens=toks, ctx=256, method="half", max_windows=8, n_threads=2).ppl
        gen[recipe] = _greedy(path, 24)
    assert res["q8"] < res[None] * 1.01
    assert res[None] < res["4bit"] < res[None] * 1.10
    assert gen["q8"][:8] == gen[None][:8]
    story = tok.decode(gen["4bit"])
    assert len(story.split()) >= 4 and sum(c.isalpha() for c in story) > len(story) / 2, story


def test_cli_convert_quant_ppl_generate(tmp_path, shared_models, run_cli):
    src = os.path.join(shared_models, "stories260K-hf")
    text = os.path.join(shared_models, "eval", "tinystories_valid_excerpt.txt")
    out = str(tmp_path / "s.4bit.cism")
    p = run_cli("convert", src, "-o", out, "--quant", "4bit", "-q")
    assert "bits/weight" in p.stderr and "recipe 4bit" in p.stderr and "q4s" in p.stderr
    assert "blk.*.ffn_down: 172 columns" in p.stderr  # the padded matrix is named
    p = run_cli("ppl", "-m", out, "-f", text, "--ctx", "256", "--method", "half", "--max-windows", "2", "-t", "1")
    assert "method half" in p.stdout and "second half of each window scored" in p.stdout
    ppl = float(p.stdout.strip().split("PPL ")[-1])
    assert 1.5 < ppl < 10
    p = run_cli("ppl", "-m", out, "-f", text, "--max-windows", "1", "--act-quant", "-t", "1")
    assert "method full" in p.stdout
    p2 = run_cli("ppl", "-m", out, "-f", text, "--max-windows", "1", "--float-act", "-t", "1")
    a, b = (float(x.stdout.strip().split("PPL ")[-1]) for x in (p, p2))
    assert a != b and abs(a / b - 1) < 0.01  # int8 activations (the default) and float ones: close, not equal
    p = run_cli("ppl", "-m", out, "-f", text, "--max-windows", "1", "-t", "1")
    assert float(p.stdout.strip().split("PPL ")[-1]) == a
    p = run_cli("generate", "-m", out, "-p", "Once upon a time", "-n", "16", "--seed", "1")
    assert p.stdout.startswith("Once upon a time") and len(p.stdout.split()) > 6
    p = run_cli("convert", src, "-o", str(tmp_path / "x.cism"), "--quant", "q1", check=False)
    assert p.returncode != 0


def test_layouts_give_the_same_bits(tmp_path, shared_models):
    """Interleaved and row-by-row files of a recipe hold the same values, and every
    kernel computes an element by the same chain (exact block sums, one multiply-add
    per block): identical logits, int8 or float activations, on every tier."""
    import cism
    src = os.path.join(shared_models, "stories260K-hf")
    toks = list(range(1, 40))
    for recipe in ("q8", "4bit"):
        paths = {}
        for layout in ("auto", "rows"):
            paths[layout] = str(tmp_path / f"{recipe}.{layout}.cism")
            convert(src, paths[layout], quant=recipe, layout=layout, progress=None)
        dts = {fmt.DTYPE_NAMES[t.dtype] for t in fmt.CismFile(paths["auto"]).tensors.values() if len(t.shape) == 2}
        assert any(d.endswith("x16") for d in dts) and not any(
            fmt.DTYPE_NAMES[t.dtype].endswith("x16") for t in fmt.CismFile(paths["rows"]).tensors.values())
        for tier in cism.kernel_tiers():
            for act in (True, False):
                out = []
                for layout in ("auto", "rows"):
                    with Model(paths[layout]) as m, m.session(logits_all=True, kernel_tier=tier, act_quant=act) as s:
                        s.eval(toks)
                        out.append(s.all_logits())
                assert np.array_equal(out[0], out[1]), (recipe, tier, act)


def test_format_version_1_interleaved_files_still_load(tmp_path, shared_models):
    """A version 1 file kept a group's codes first, then all its scales. The loader
    rearranges such a file in a private copy: the same logits as the version 2 file, mapped
    or not, and the file itself is left as it was."""
    src = os.path.join(shared_models, "stories260K-hf")
    toks = list(range(1, 30))
    for recipe in ("q8", "4bit"):
        v2 = str(tmp_path / f"{recipe}.cism")
        convert(src, v2, quant=recipe, progress=None)
        assert fmt.CismFile(v2).header["version"] == 3
        with open(v2, "rb") as fh:  # the same file as version 2 wrote it (no checksums)
            v3bytes = fh.read()
            legacy = fmt.legacy_bytes(v3bytes, 2)
        with open(v2, "wb") as fh:
            fh.write(legacy)
        f = fmt.CismFile(v2)
        assert f.header["version"] == 2
        blob = bytearray(legacy)
        blob[8:12] = (1).to_bytes(4, "little")
        n_x16 = 0
        for t in f.tensors.values():
            name = fmt.DTYPE_NAMES[t.dtype]
            if not name.endswith("x16"):
                continue
            n_x16 += 1
            base = name[:-3]
            bd = q.QUANT_DTYPES[base]
            rb = q.row_bytes(bd, t.shape[-1])
            sb = 2 if base == "q8" else 1
            nb = t.shape[-1] // q.block_size(bd) + (t.shape[-1] % q.block_size(bd) != 0)
            cb = rb // nb - sb
            coff, soff = q.x16_group_offsets(t.dtype, t.shape[-1])
            for g in range(t.offset, t.offset + t.nbytes, 16 * rb):
                grp = bytes(blob[g:g + 16 * rb])
                v1 = b"".join(grp[o:o + 16 * cb] for o in coff) + b"".join(grp[o:o + 16 * sb] for o in soff)
                blob[g:g + 16 * rb] = v1
        assert n_x16 > 0
        v1path = tmp_path / f"{recipe}.v1.cism"
        v1path.write_bytes(bytes(blob))
        out = []
        for path, mmap in ((v2, True), (str(v1path), True), (str(v1path), False)):
            with Model(path, use_mmap=mmap) as m, m.session(logits_all=True) as s:
                s.eval(toks)
                out.append(s.all_logits())
        assert np.array_equal(out[0], out[1]) and np.array_equal(out[0], out[2]), recipe
        assert v1path.read_bytes() == bytes(blob)
        # `cism upgrade` gives back the converted (version 3) file byte for byte, from
        # version 1 and from version 2, and refuses what it should
        up = tmp_path / f"{recipe}.up.cism"
        assert upgrade(str(v1path), str(up)) == n_x16
        assert up.read_bytes() == v3bytes
        assert upgrade(v2, str(tmp_path / f"{recipe}.up2.cism")) == 0
        assert (tmp_path / f"{recipe}.up2.cism").read_bytes() == v3bytes
        assert v1path.read_bytes() == bytes(blob)
        with pytest.raises(FileExistsError):
            upgrade(str(v1path), str(up))
        with pytest.raises(FileExistsError, match="input file"):
            upgrade(str(v1path), str(v1path), overwrite=True)
        with pytest.raises(fmt.FormatError, match="already format version 3"):
            upgrade(str(up), str(tmp_path / "again.cism"))
        (tmp_path / "cut.cism").write_bytes(bytes(blob[:len(blob) * 3 // 4]))
        with pytest.raises(fmt.FormatError):
            upgrade(str(tmp_path / "cut.cism"), str(tmp_path / "cut.up.cism"))
        assert not (tmp_path / "cut.up.cism").exists()
        assert not [n for n in os.listdir(tmp_path) if n.endswith(fmt.PARTIAL_SUFFIX)]  # the temporary file went
