"""Smoke check of an installed `cism` wheel (tests/platforms/check_wheels.sh),
run by the Python of a clean venv the wheel was installed into:

  python wheel_smoke.py MODEL.cism N_TOKENS OUT.txt [INSTALL_DIR]

Fails unless the package and library loaded are the wheel's own (inside
INSTALL_DIR, default this Python's site-packages; not $CISM_LIB or a
checkout). Then writes the ids of N_TOKENS greedy tokens after BOS (one
thread, printed as examples/c/generate prints them) to OUT.txt, and checks
that text generation through the tokenizer gives text.
"""
import os
import platform
import sys
import sysconfig


def main() -> int:
    if len(sys.argv) not in (4, 5):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    model_path, n_tokens, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    site = os.path.realpath(sys.argv[4] if len(sys.argv) == 5 else sysconfig.get_paths()["platlib"])
    if os.environ.get("CISM_LIB"):
        print("wheel_smoke: CISM_LIB is set; the wheel's own library must be tested", file=sys.stderr)
        return 1
    import cism
    from cism import _lib

    lib_path = os.path.realpath(_lib.lib._name)
    pkg_path = os.path.realpath(cism.__file__)
    for what, path in (("package", pkg_path), ("library", lib_path)):
        if not path.startswith(site + os.sep):
            print(f"wheel_smoke: the {what} was loaded from {path}, not from {site}", file=sys.stderr)
            return 1
    print(f"library: {lib_path} ({platform.machine()})")
    print(cism.system_info())
    with cism.Model(model_path) as model:
        with cism.Session(model, n_threads=1) as session:
            ids = session.generate_ids([model.bos_id], n_tokens, cism.Sampler())
        text = "".join(model.generate("Once upon a time", 16, temperature=0, n_threads=1))
    if not ids:
        print("wheel_smoke: no tokens generated", file=sys.stderr)
        return 1
    if not text.strip():
        print("wheel_smoke: text generation gave no text", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        f.write(" ".join(str(t) for t in ids) + " \n")
    print(f"{len(ids)} greedy tokens: {' '.join(str(t) for t in ids[:12])} ...")
    print(f"text: Once upon a time{text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
