"""The .cism writer writes whole, aligned 2 MiB pieces (so the page cache can
keep the file in large folios, which libcism's mapping uses as huge pages),
and the bytes are exactly what was written."""
from __future__ import annotations

import numpy as np

from cism import format as fmt


def test_aligned_file_pieces_and_bytes(tmp_path):
    rng = np.random.default_rng(7)
    piece = fmt._AlignedFile.PIECE
    sizes = [5, 100, piece - 105, 1, 3 * piece + 17, 64, piece, 0, 2 * piece - 3, 12345]
    chunks = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    path = tmp_path / "x.bin"
    f = fmt._AlignedFile(str(path))
    writes = []
    put = f._put

    def spy(b):
        writes.append((f.flushed, memoryview(b).nbytes))
        put(b)

    f._put = spy
    expect = 0
    for c in chunks:
        f.write(c)
        expect += len(c)
        assert f.tell() == expect
    f.close()
    assert path.read_bytes() == b"".join(chunks)
    assert len(writes) >= 4
    for off, n in writes[:-1]:          # every write but the last: aligned, whole pieces
        assert off % piece == 0 and n % piece == 0 and n > 0
    assert writes[-1][0] % piece == 0


def test_written_model_maps_and_copies_alike(tmp_path):
    import cism
    from cism.synthetic import PRESETS, write_synthetic

    path = str(tmp_path / "m.cism")
    write_synthetic(PRESETS["tiny"], path, "q8", seed=3)
    toks = [1, 5, 9, 11, 2]
    out = []
    for mapped in (True, False):
        with cism.Model(path, use_mmap=mapped) as m, cism.Session(m, n_ctx=16) as s:
            s.eval(toks)
            out.append(np.array(s.logits()))
    assert np.array_equal(out[0], out[1])
